"""No top-level folder of the repository shadows an installed package (issue 35).

The README runs everything from the repository root, where ``sys.path`` starts with the root
(``python -m pytest``; Ray workers get the driver's directory too). A top-level folder with an
``__init__.py`` there would be imported instead of an installed package of the same name, as
``kernels/`` once was instead of PyPI's ``kernels`` that transformers imports.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from _timing import limit

ROOT = Path(__file__).resolve().parents[1]
TOP_PACKAGES = sorted(p.name for p in ROOT.iterdir()
                      if (p / "__init__.py").is_file() and p.name not in ("rayml", "tests"))


def _run(code: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=limit(timeout))


def test_the_mapped_folders_are_found():
    assert {"actors", "kernels"} <= set(TOP_PACKAGES)


@pytest.mark.parametrize("name", TOP_PACKAGES)
def test_bare_import_from_the_root_is_never_the_folder(name):
    proc = _run(f"""
import sys
sys.path.insert(0, '')  # as python -m and Ray workers started from the root have it
import importlib.metadata
import {name} as m
try:
    importlib.metadata.version({name!r})
    print('installed', m.__file__)
except importlib.metadata.PackageNotFoundError:
    print('absent', [n for n in dir(m) if not n.startswith('_')])
""")
    assert proc.returncode == 0, proc.stderr
    kind, _, rest = proc.stdout.strip().splitlines()[-1].partition(" ")
    if kind == "installed":  # the installed package, never the folder
        assert not rest.startswith(str(ROOT / name)), f"{name!r} from the root is the folder: {rest}"
    else:  # nothing to shadow: the folder's module is empty, and importing it does not fail
        assert rest == "[]", rest


def test_the_mapped_packages_still_import_as_rayml():
    proc = _run("import rayml.actors.pool, rayml.kernels.lut_gemm; print('ok')")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def _has(dist: str) -> bool:
    try:
        importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(not (_has("kernels") and _has("transformers")),
                    reason="needs PyPI's kernels and transformers installed")
def test_transformers_model_in_a_ray_worker_started_from_the_root(ray_session):
    # transformers' hub-kernel integration imports ``from kernels import CUDAProperties``: it
    # failed from the root, in the driver and in every Ray worker, while kernels/ shadowed it.
    # The script's driver joins the session's shared Ray (a Ray of its own costs seconds to start):
    # Ray puts a driver's directory on the sys.path of the workers that run its job's tasks either way.
    import ray

    proc = _run(f"""
import ray
def build():
    import os, sys
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, vocab_size=50)
    import kernels
    root = any(os.path.realpath(p or os.getcwd()) == {str(ROOT)!r} for p in sys.path if isinstance(p, str))
    return type(LlamaForCausalLM(cfg)).__name__, kernels.__file__, "root on sys.path" if root else "no root"
ray.init(address={ray.get_runtime_context().gcs_address!r})
print(build())
print(ray.get(ray.remote(build).remote()))
ray.shutdown()
""")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()[-2:]
    for line in lines:
        assert "LlamaForCausalLM" in line and str(ROOT / "kernels") not in line, line
        assert "root on sys.path" in line, line  # else the worker could not have met the folder
