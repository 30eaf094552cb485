"""Package discovery for rayml (everything else is in pyproject.toml).

``actors/`` and ``kernels/`` are top-level folders installed as ``rayml.actors`` and
``rayml.kernels``; every folder with an ``__init__.py`` under them and under ``rayml/`` is a
package, found here so that adding a family needs no edit of a package list. Files under a
package's ``weights/`` folder (shipped checkpoints with their cards) are package data.
"""

import os

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

MAPPED = {"rayml.actors": "actors", "rayml.kernels": "kernels"}

packages = find_packages(include=["rayml", "rayml.*"])
package_dir = {"rayml": "rayml"}
for name, folder in MAPPED.items():
    package_dir[name] = folder
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(where=folder)]



def _shipped_files(package: str) -> list[str]:
    """Files under a package's ``weights/`` folder (checkpoints, tokenizers, their cards)."""
    root = package_dir.get(package) or package.replace(".", os.sep)
    if package not in package_dir and package.startswith("rayml."):
        root = os.path.join("rayml", *package.split(".")[1:])
    out = []
    for folder, _, files in os.walk(os.path.join(root, "weights")):
        out += [os.path.relpath(os.path.join(folder, f), root) for f in files if not f.endswith(".pyc") and f != "resume.pt"]
    return out


package_data = {p: files for p in packages if (files := _shipped_files(p))}


class _OptionalBuildExt(build_ext):
    """Build the C extensions, but never fail the install: without a compiler, a one-line notice
    here and ``rayml.decoding`` falls back to its pure-Python engine (with a warning at import)."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - no compiler / headers: the pure engine is used
            print(f"rayml: optional C extensions not built ({exc}); using the pure-Python engines")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001 - as above, per extension
            print(f"rayml: optional C extension {ext.name} not built ({exc}); using the pure-Python engine")


# ZapFormat's compiled core (plain C-API, no Cython needed at build time): rayml/decoding/_zapcore.c
ext_modules = [Extension("rayml.decoding._zapcore", ["rayml/decoding/_zapcore.c"], optional=True,
                         extra_compile_args=["-O3"] if os.name != "nt" else [])]
setup(packages=packages, package_dir=package_dir, package_data=package_data, ext_modules=ext_modules,
      cmdclass={"build_ext": _OptionalBuildExt})
