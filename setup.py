"""Packaging is declared in pyproject.toml; this file adds the one C extension, built where a compiler is
present (`optional`: without one, tfplace runs its Python op callback alone; BUILD.md says why it exists)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("tfplace.placement._kept", ["tfplace/placement/_kept.c"], optional=True)])
