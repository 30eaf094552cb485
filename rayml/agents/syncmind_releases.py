"""Real version histories for SyncBench-style scenarios: consecutive sdist releases of a small
pure-Python package, one commit snapshot per release (SyncMind, ICML 2025; issue 43).

SyncBench (Guo et al., "SyncMind: Measuring Agent Out-of-Sync Recovery in Collaborative Software
Engineering", ICML 2025, Sec. 3) traces the functions of 21 GitHub repositories through their commit
histories. No repository is cloned here; instead, a package's consecutive releases on PyPI are its
history: ``pip download --no-deps --no-binary :all: NAME==V`` fetches each release's sdist (once:
they are cached under ``rayml.runtime.cache_root() / "syncmind" / "sdists"``, and everything after
runs offline), and ``release_repository`` turns them into the ``{"name", "kind": "release",
"commits": [...]}`` a generated repository is, one commit per release, oldest first: the package's
modules re-rooted at the repository's top and its unittest / plain-function test modules under
``tests/`` (``syncmind_bench.run_tests`` runs both, with the standard library only).

Assumed: a release stands for a commit (a release bundles many commits, so a traced function's
older version may differ from the current one by several changes); modules and tests that need a
third-party package are left out (``RELEASES`` names them per package).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Mapping, Sequence

__all__ = ["RELEASES", "sdist_path", "download_sdist", "sdist_files", "release_repository"]

# package -> (consecutive releases, oldest first; module folder in the sdist; test folder;
# files left out because they import a third-party package)
RELEASES: dict = {
    "semantic_version": {"versions": ["2.6.0", "2.7.0", "2.7.1", "2.8.0", "2.8.1", "2.8.2", "2.8.3", "2.8.4", "2.8.5",
                                      "2.9.0", "2.10.0"], "module": "semantic_version",
                         "tests": "tests", "exclude": ["semantic_version/django_fields.py", "tests/test_django.py",
                                                       "tests/setup_django.py", "tests/django_test_app"]},
}


def _cache_dir(cache_dir: str | os.PathLike | None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    from rayml.runtime import cache_root

    return cache_root() / "syncmind" / "sdists"


def _check_name(package: str, version: str) -> None:
    if not isinstance(package, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", package):
        raise ValueError(f"package must be a PyPI project name, got {package!r}")
    if not isinstance(version, str) or not re.fullmatch(r"[0-9][0-9A-Za-z.+-]*", version):
        raise ValueError(f"version must be a release version such as '2.10.0', got {version!r}")


def sdist_path(package: str, version: str, cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The cached sdist of ``package==version`` (``.tar.gz``), or ``None`` if it is not cached."""
    _check_name(package, version)
    root = _cache_dir(cache_dir)
    stem = re.sub(r"[-_.]+", "[-_.]", package.lower())
    for p in sorted(root.glob("*.tar.gz")) if root.is_dir() else []:
        if re.fullmatch(f"{stem}-{re.escape(version)}\\.tar\\.gz", p.name.lower()):
            return p
    return None


def download_sdist(package: str, version: str, cache_dir: str | os.PathLike | None = None,
                   timeout_s: float = 120.0) -> Path:
    """The sdist of ``package==version``: from the cache, else fetched once with ``pip download``
    (the ordinary PyPI client; no dependencies, no build) into the cache."""
    found = sdist_path(package, version, cache_dir)
    if found is not None:
        return found
    root = _cache_dir(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
           "--no-build-isolation", f"{package}=={version}", "-d", str(root)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    found = sdist_path(package, version, cache_dir)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"pip download of {package}=={version} failed (needs PyPI once, then it is cached under "
                           f"{root}): {proc.stderr.strip()[-500:]}")
    return found


def sdist_files(path: str | os.PathLike, module: str, tests: str, exclude: Sequence[str] = (),
                metadata_as: str | None = None) -> dict:
    """The ``.py`` files of an sdist under its ``module`` and ``tests`` folders (``src/`` layouts
    too), re-rooted (``module/...``, ``tests/...``), less ``exclude`` (files or folders); with
    ``metadata_as`` (``NAME-V.dist-info/METADATA``) also its ``PKG-INFO`` under that path."""
    out = {}
    with tarfile.open(path, "r:gz") as tar:
        for m in tar.getmembers():
            rel = m.name.split("/", 1)[1] if "/" in m.name else m.name
            if m.isfile() and rel == "PKG-INFO" and metadata_as:
                # the release's metadata, where importlib.metadata finds it (a package that reads
                # its own version at import needs it)
                out[metadata_as] = io.TextIOWrapper(tar.extractfile(m), encoding="utf-8").read()
                continue
            if not m.isfile() or not m.name.endswith(".py"):
                continue
            if rel.startswith("src/"):
                rel = rel[4:]
            if not (rel.startswith(module + "/") or rel.startswith(tests + "/")):
                continue
            if any(rel == e or rel.startswith(e.rstrip("/") + "/") for e in exclude):
                continue
            out[rel] = io.TextIOWrapper(tar.extractfile(m), encoding="utf-8").read()
    if not any(p.startswith(module + "/") for p in out):
        raise ValueError(f"no module files under {module!r} in {path}")
    return out


def release_repository(package: str, versions: Sequence[str] | None = None, *,
                       spec: Mapping | None = None, cache_dir: str | os.PathLike | None = None) -> dict:
    """A source repository whose commits are ``package``'s consecutive releases (module docstring).

    Args:
        package: a key of ``RELEASES``, or any package with ``spec`` given.
        versions: the releases, oldest first (default: ``RELEASES[package]["versions"]``).
        spec: ``{"module", "tests", "exclude"}`` for a package not in ``RELEASES``.
        cache_dir: where the sdists are cached (default ``cache_root()/syncmind/sdists``).

    Returns:
        ``{"name": "pypi-<package>", "kind": "release", "commits": [{"message", "files"}]}``.
    """
    spec = dict(spec if spec is not None else RELEASES.get(package) or {})
    if not spec:
        raise ValueError(f"package must be one of {sorted(RELEASES)} or come with a spec, got {package!r}")
    versions = list(versions if versions is not None else spec["versions"])
    if len(versions) < 2:
        raise ValueError(f"versions must name at least 2 releases, got {versions!r}")
    commits = []
    for v in versions:
        path = download_sdist(package, v, cache_dir)
        files = sdist_files(path, spec["module"], spec["tests"], spec.get("exclude", ()),
                            metadata_as=f"{package}-{v}.dist-info/METADATA")
        commits.append({"message": f"{package} {v} (release)", "files": files})
    return {"name": f"pypi-{package}", "kind": "release", "commits": commits}
