"""The README states what is true: its set-up and test commands, its size, its Serve apps."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rayml.cli import SERVE_APPS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_setup_commands_and_test_command():
    assert 'pip install -e ".[all]" && rayml run all --quick' in README
    assert 'pip install -e ".[test]" && python -m pytest -q' in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -e ".[test]" && python -m pytest -q' in ci


def test_the_readme_is_what_a_newcomer_reads_in_five_minutes():
    assert len(README.splitlines()) < 200


def test_serve_apps_in_the_docs_exist():
    serving = (ROOT / "docs" / "serving.md").read_text()
    for name, path in SERVE_APPS.items():
        assert f"rayml serve {name}" in README and path in serving


def test_the_methods_table_script_writes_what_the_docs_builder_checks():
    spec = importlib.util.spec_from_file_location("update_readme_table", ROOT / "scripts" / "update_readme_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tables = module.tables()
    assert set(tables) == {ROOT / "README.md", ROOT / "docs" / "index.md"}
    for path, text in tables.items():
        assert "| paper claims held (quick run) | paper claims held (full run) |" in text
        assert text == path.read_text(), f"stale: run python scripts/update_readme_table.py ({path.name})"
    assert module.main(["--check"]) == 0
