"""The Python examples on the reworked methods' pages run as written (issues 36, 37: runnable examples)."""

from __future__ import annotations

import pathlib
import re

import pytest

PAGES = pathlib.Path(__file__).resolve().parents[1] / "docs" / "methods"


@pytest.mark.parametrize("name", ["kl-bandit", "cross-learning", "equal-share", "eig-augment", "multinoulli-scg", "kernel-pde", "parallel-sampling"])
def test_the_pages_python_examples_run(name):
    page = (PAGES / f"{name}.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    assert blocks, f"{name}.md has a Python example"
    for code in blocks:
        exec(compile(code, f"{name}.md", "exec"), {})
