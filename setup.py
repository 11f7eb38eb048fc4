"""Packaging beyond pyproject.toml: folders of the repository installed under other names.

* ``assets/`` ships as ``recap/assets`` and ``docs/bench`` (the shipped benchmark results the
  app's Benchmark tab opens on) as ``recap/assets/bench``: package data next to the code
  (``recap.core.assets``); the repository keeps them at the top, where the app, the Space and
  the docs name them.
* ``app/`` (the Gradio app, which imports itself relatively) installs as ``recap_studio``: a
  top-level ``app`` package would collide with any other distribution's or project's ``app``.

pyproject.toml's tables cannot add mapped packages to the ones they discover, hence this file.
"""

from setuptools import find_packages, setup

APP = [name.replace("app", "recap_studio", 1) for name in find_packages(include=["app", "app.*"])]

setup(
    packages=[*find_packages(include=["recap", "recap.*"]), "recap.assets", "recap.assets.bench", *APP],
    package_dir={"recap.assets": "assets", "recap.assets.bench": "docs/bench", "recap_studio": "app"},
    package_data={"recap.assets": ["**/*"], "recap.assets.bench": ["**/*"]},  # every file, in any folder
)
