"""Old import paths that moved in 0.2 keep working for one release, with a ``DeprecationWarning``.

The language-model methods left ``rayml.llm`` (which now holds only the substrate) for family
packages: ``rayml.llm.grammar`` -> ``rayml.decoding``, ``rayml.llm.epic`` -> ``rayml.kvcache.epic``,
``rayml.llm.ganq`` -> ``rayml.quant.ganq`` and so on (``MOVED``). A meta-path finder answers
an old name with the module object of the new one, so ``import rayml.llm.grammar.logits`` and
``from rayml.llm.ganq import GANQConfig`` give the very same module (one class identity, no
second copy of any module state).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

__all__ = ["MOVED", "install"]

REMOVED_IN = "0.3"
MOVED = {
    "rayml.llm.grammar": "rayml.decoding",
    "rayml.llm.epic": "rayml.kvcache.epic",
    "rayml.llm.epic_vllm": "rayml.kvcache.epic_vllm",
    "rayml.llm.ganq": "rayml.quant.ganq",
    "rayml.llm.quant_linear": "rayml.quant.linear",
    "rayml.llm.quant_baselines": "rayml.quant.baselines",
    "rayml.llm.merge3": "rayml.merging.merge3",
    "rayml.llm.merging": "rayml.merging.operators",
    "rayml.llm.irt": "rayml.merging.irt",
}


def new_name(old: str) -> str | None:
    """The module ``old`` moved to (``rayml.llm.grammar.logits`` -> ``rayml.decoding.logits``)."""
    for prefix, target in MOVED.items():
        if old == prefix or old.startswith(prefix + "."):
            return target + old[len(prefix):]
    return None


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {self.target}; the old path will be removed in rayml {REMOVED_IN}",
                      DeprecationWarning, stacklevel=3)
        return importlib.import_module(self.target)

    def exec_module(self, module):  # the target module is already executed
        pass


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        new = new_name(fullname)
        if new is None:
            return None
        real = importlib.util.find_spec(new)
        if real is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new),
                                               is_package=real.submodule_search_locations is not None)


def install() -> None:
    """Put the alias finder on ``sys.meta_path`` once."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
