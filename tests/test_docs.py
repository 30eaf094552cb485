"""The docs match the data they quote: each method page's registry header and measured figures
equal what its committed record and the registry say, the README's method table likewise, and
the site builds with ``mkdocs build --strict``."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rayml import registry, results

ROOT = Path(__file__).resolve().parent.parent


def _build_docs():
    spec = importlib.util.spec_from_file_location("build_docs", ROOT / "scripts" / "build_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pages_and_readme_table_match_the_records_and_registry():
    stale = [str(p.relative_to(ROOT)) for p, text in _build_docs().outputs().items() if p.read_text() != text]
    assert stale == [], "stale docs: run python scripts/build_docs.py"


@pytest.mark.parametrize("path", sorted((ROOT / "docs" / "records").glob("*.json")), ids=lambda p: p.stem)
def test_committed_records_are_valid_records_of_implemented_methods(path):
    record = json.loads(path.read_text())
    results.validate_record(record)
    name, _, variant = path.stem.partition("@")
    assert record["name"] == name and registry.get(name).status == registry.IMPLEMENTED
    assert (ROOT / "docs" / "methods" / f"{name}.md").exists(), "a record is quoted on its method's page"
    if variant:  # NAME@KEY=VALUE.json: a run with --set KEY=VALUE
        key, _, value = variant.partition("=")
        assert key in record["config"] and str(record["config"][key]) == value, (variant, record["config"].get(key))


def test_every_implemented_method_has_a_page():
    missing = [m.name for m in registry.runnable() if not (ROOT / "docs" / "methods" / f"{m.name}.md").exists()]
    assert missing == []


def test_a_record_block_quotes_every_claim_and_its_controls():
    docs = _build_docs()
    record = {"name": "x", "kind": "run", "size": "quick", "seed": 0, "claims_fingerprint": "abc",
              "env": {"git": "1234567", "seconds": 12.0, "cpus": 2, "tasks": 8, "worker_pids": 2},
              "summary": {"paper": {"total": 1, "held": 0, "failed": 0, "not_discriminating": 1, "incomplete": 0},
                          "sanity": {"total": 0, "passed": 0}},
              "claims": [{"kind": "paper", "status": "not discriminating", "text": "beats | base", "source": "Table 1",
                          "measured": "2 vs 1", "controls": [{"name": "ctl", "holds": True, "measured": "3 vs 1"}]}]}
    block = docs.record_block(record)
    assert "`rayml run x --quick --seed 0`" in block and "`abc`" in block and "**0 / 1**" in block
    assert "| paper | not discriminating | beats \\| base | Table 1 | 2 vs 1 | ctl: passes (3 vs 1) |" in block
    variant = docs.record_block(record, "model=m")
    assert "## Measured (model=m)" in variant and "`docs/records/x@model=m.json`" in variant
    assert "`rayml run x --quick --set model=m --seed 0`" in variant


@pytest.mark.skipif(shutil.which("mkdocs") is None and importlib.util.find_spec("mkdocs") is None,
                    reason="mkdocs is not installed (pip install -e '.[docs]')")
def test_the_site_builds_strictly(tmp_path):
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "site" / "methods" / "epic" / "index.html").exists()
