"""Packaging that pyproject.toml alone cannot say: the card's top-level folders install as
``rafka.<folder>`` (one namespace, no top-level ``log``/``client`` to collide with a user's
modules), and the optional C accelerator of the record codec (``log/_codec.c`` →
``rafka.log._codec``, issue 13).  Everything else (metadata, dependencies, scripts) lives in
pyproject.toml.

The extension is optional: when it does not compile (no C compiler or no Python headers) the
install goes on and prints one line saying so; ``rafka.log.speedups`` then picks the
pure-Python codec."""

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

CARD = ["wire", "kraft", "metadata", "log", "broker", "client", "spark_source", "chaos_tests", "security"]

packages = ["rafka"]
for folder in CARD:
    packages += [f"rafka.{folder}"] + [f"rafka.{folder}.{sub}" for sub in find_packages(folder)]


class OptionalBuildExt(build_ext):
    """``build_ext`` that never fails the install: a compile error leaves the pure path."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - distutils raises several types for "no compiler"
            print(f"rafka: C codec not built ({exc}); the pure-Python codec is used")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            print(f"rafka: C codec {ext.name} not built ({exc}); the pure-Python codec is used")


setup(
    packages=packages,
    package_dir={"rafka": "rafka", **{f"rafka.{f}": f for f in CARD}},
    ext_modules=[
        Extension("rafka.log._codec", ["log/_codec.c"],
                  depends=["log/_murmur2.h", "log/_msgpack_put.h"],
                  extra_compile_args=["-O2"]),
        Extension("rafka.client._sendpath", ["client/_sendpath.c"],
                  depends=["log/_murmur2.h", "log/_msgpack_put.h"],
                  extra_compile_args=["-O2"]),
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
