"""Packaging beyond pyproject.toml: the top-level ``assets/`` folder ships as ``recap/assets``.

The repository keeps the assets at the top (the app, the Space and the docs name them there);
an installed package reads them as package data next to the code (``recap.core.assets``).
pyproject.toml's tables cannot add a mapped package to the ones they discover, hence this file.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["recap", "recap.*", "app", "app.*"]), "recap.assets"],
    package_dir={"recap.assets": "assets"},
    package_data={"recap.assets": ["**/*"]},  # every file below assets/, in any folder
)
