"""Each method's extras cover the optional packages its code imports (so a light install fails
with the one-line ``MissingExtra`` before work, never with an ImportError half-way), and a
missing extra is refused before any work."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from rayml import registry

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL: dict[str, set[str]] = {}
for _extra, _mods in registry.EXTRAS.items():
    for _mod in _mods:
        OPTIONAL.setdefault(_mod, set()).add(_extra)
# Optional adapters that report an absent package instead of needing it: the Serve apps, the
# transformers backend (``HFLM`` in ``rayml.llm.backends``) and the real-model loader
# (``rayml.llm.smollm2``), both chosen by the user, the benchmark's peers (an absent peer is a
# row saying so).
ADAPTERS = ("rayml.actors", "rayml.llm.hf", "rayml.llm.backends", "rayml.llm.smollm2", "rayml.decoding.peers",
            "rayml.agents.syncmind_llm",  # SyncMind's SmolLM2 agent: only with `--set model=smollm2-135m`
            "rayml.merging.hf_endpoints",  # MERGE^3's Hugging Face endpoints: only with `--set model=...`
            "rayml.agents.design_dsl_lm",  # its SmolLM2 writer's constrained decoding: only with that model too
            "rayml.data.minilm",  # DIRECT's text sets (quick and full; [text], checked before work by the run)
            "rayml.purify.adapters",  # pretrained diffusers score models ([diffusion]): only when asked for
            "rayml.experiments.zapformat_vllm")  # the bench's vLLM part: a child in the vLLM venv, else one skip line


def _source(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError, AttributeError):  # "pkg.module.attribute", or a missing package
        return None
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def optional_imports(module: str, stop: tuple[str, ...] = ADAPTERS) -> dict[str, str]:
    """Optional top-level packages reachable from ``module`` through rayml's own imports
    (module-level and inside functions), each with the rayml module that imports it."""
    seen, todo, found = set(), [module], {}
    while todo:
        mod = todo.pop()
        if mod in seen or mod.startswith(stop):
            continue
        seen.add(mod)
        path = _source(mod)
        if path is None:
            continue
        for name in _imports(path):
            top = name.split(".")[0]
            if top in OPTIONAL:
                found.setdefault(top, mod)
            elif top == "rayml" and _source(name) is not None:
                todo.append(name)
    return found


@pytest.mark.parametrize("name", [m.name for m in registry.implemented()])
def test_extras_cover_what_the_method_imports(name):
    m = registry.get(name)
    have = set(registry.extras_of(name))
    missing = {pkg: mod for pkg, mod in optional_imports(m.experiment).items() if not OPTIONAL[pkg] & have}
    assert not missing, f"{name} imports {missing} but declares extras {sorted(have)}"


def test_light_methods_need_no_extra():
    assert registry.extras_of("gs-poweropt") == () and registry.extras_of("multinoulli-scg") == ()
    assert registry.extras_of("qp-gnn") == ("optim",)
