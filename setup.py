"""Package discovery for rayml (everything else is in pyproject.toml).

``actors/`` and ``kernels/`` are top-level folders installed as ``rayml.actors`` and
``rayml.kernels``; every folder with an ``__init__.py`` under them and under ``rayml/`` is a
package, found here so that adding a family needs no edit of a package list.
"""

from setuptools import find_packages, setup

MAPPED = {"rayml.actors": "actors", "rayml.kernels": "kernels"}

packages = find_packages(include=["rayml", "rayml.*"])
package_dir = {"rayml": "rayml"}
for name, folder in MAPPED.items():
    package_dir[name] = folder
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(where=folder)]

setup(packages=packages, package_dir=package_dir)
