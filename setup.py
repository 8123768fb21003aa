"""Packaging is declared in pyproject.toml (a pure-Python wheel); this file lets older pip versions install
tfplace in editable mode."""
from setuptools import setup

setup()
