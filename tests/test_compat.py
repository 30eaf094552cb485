"""rayml._compat: the old paths of modules that moved in 0.2 give the same module, with a warning."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from rayml import _compat


@pytest.mark.parametrize("old", sorted(_compat.MOVED))
def test_every_old_path_is_the_new_module_and_warns(old):
    new = importlib.import_module(_compat.MOVED[old])
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {_compat.MOVED[old]}"):
        module = importlib.import_module(old)
    assert module is new


def test_submodules_of_a_moved_package_resolve_to_one_module():
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "import rayml.decoding.logits as new\n"
            "try:\n    import rayml.llm.grammar.logits\nexcept DeprecationWarning as e:\n    print('warned', e)\n"
            "warnings.simplefilter('ignore')\n"
            "from rayml.llm.grammar.logits import GrammarCache\n"
            "print(GrammarCache is new.GrammarCache)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "warned rayml.llm.grammar moved to rayml.decoding" in out
    assert out.strip().endswith("True")


def test_new_names_and_unknown_modules():
    assert _compat.new_name("rayml.llm.grammar.matcher") == "rayml.decoding.matcher"
    assert _compat.new_name("rayml.llm.epic_vllm") == "rayml.kvcache.epic_vllm"
    assert _compat.new_name("rayml.llm.model") is None
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("rayml.llm.no_such_module")


def test_the_substrate_package_imports_no_method_module():
    code = ("import sys, rayml.llm, rayml.llm.model, rayml.llm.training, rayml.llm.generation\n"
            "print(sorted(m for m in sys.modules if m.startswith(('rayml.decoding', 'rayml.kvcache', "
            "'rayml.quant', 'rayml.merging'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
