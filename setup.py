"""Packaging for tfplace. TensorFlow comes from an extra: `.[cpu]` or `.[gpu]` (see BUILD.md)."""

from setuptools import find_packages, setup

setup(
    name="tfplace",
    version="0.1.0",
    description="Set, see and test TensorFlow device placement.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["tfplace", "tfplace.*"]),
    package_data={"tfplace": ["data/gpu_kernels.json.gz"]},
    install_requires=["absl-py>=2.0", "keras>=3.0"],
    extras_require={
        "cpu": ["tensorflow-cpu>=2.16"],
        "gpu": ["tensorflow[and-cuda]>=2.16", "nvidia-ml-py>=12"],
        "test": ["pytest>=8", "pytest-xdist>=3", "hypothesis>=6", "matplotlib>=3.7",
                 "pandas>=2", "ipython>=8", "ipykernel>=6", "nbclient>=0.10", "nbformat>=5"],
        "plot": ["matplotlib>=3.7"],
        "notebook": ["pandas>=2", "ipython>=8", "ipykernel>=6", "nbclient>=0.10", "nbformat>=5", "nbconvert>=7"],
    },
    entry_points={
        "console_scripts": ["tfplace = tfplace._cli:main"],
        "pytest11": ["tfplace = tfplace.pytest_plugin"],
    },
    classifiers=["Framework :: Pytest", "Programming Language :: Python :: 3"],
)
