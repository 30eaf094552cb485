"""The README states what is true: its method table is the registry's, its commands exist."""

from __future__ import annotations

import re
from pathlib import Path

from rayml.cli import SERVE_APPS, markdown_table

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_method_table_is_the_registrys():
    block = re.search(r"<!-- methods:start -->\n(.*?)\n<!-- methods:end -->", README, re.S)
    assert block, "README lacks the methods block"
    assert block.group(1).strip() == markdown_table().strip(), (
        "README's method table is stale: regenerate it with `rayml list --markdown`")


def test_setup_commands_and_test_command():
    assert "pip install -e . && rayml run all --quick" in README
    assert 'pip install -e ".[test]" && python -m pytest -q' in README
    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text()
    assert 'pip install -e ".[test]" && python -m pytest -q' in ci


def test_serve_apps_in_the_readme_exist():
    for name, path in SERVE_APPS.items():
        assert f"rayml serve {name}" in README or path in README
