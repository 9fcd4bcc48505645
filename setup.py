"""Packaging that pyproject.toml alone cannot say: the card's top-level folders install as
``rafka.<folder>`` (one namespace, no top-level ``log``/``client`` to collide with a user's
modules).  Everything else (metadata, dependencies, scripts) lives in pyproject.toml."""

from setuptools import find_packages, setup

CARD = ["kraft", "metadata", "log", "broker", "client", "spark_source", "chaos_tests", "security"]

packages = ["rafka"]
for folder in CARD:
    packages += [f"rafka.{folder}"] + [f"rafka.{folder}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir={"rafka": "rafka", **{f"rafka.{f}": f for f in CARD}})
