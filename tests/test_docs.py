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

from _timing import limit
from rayml import records, registry, results

ROOT = Path(__file__).resolve().parent.parent


def _build_docs():
    spec = importlib.util.spec_from_file_location("build_docs", ROOT / "scripts" / "build_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pages_and_readme_table_match_the_records_and_registry():
    stale = [str(p.relative_to(ROOT)) for p, text in _build_docs().outputs().items() if p.read_text() != text]
    assert stale == [], "stale docs: run python scripts/build_docs.py"


RECORDS = ROOT / "docs" / "records"
RECORD_LIMIT = 200_000  # bytes: a committed record is JSON a reader opens; long tables live in Parquet


@pytest.mark.parametrize("path", sorted(RECORDS.glob("*.json")), ids=lambda p: p.stem)
def test_committed_records_are_valid_records_of_implemented_methods(path):
    record = records.load_record(path)  # tables re-attached from the Parquet files beside it
    results.validate_record(record)
    name, size, variant = _build_docs().parse_record_file(path.stem)
    assert record["name"] == name and registry.get(name).status == registry.IMPLEMENTED
    assert record["size"] == size, f"{path.name} holds a {record['size']} run"
    assert (ROOT / "docs" / "methods" / f"{name}.md").exists(), "a record is quoted on its method's page"
    if variant:  # NAME@KEY=VALUE.json: a run with --set KEY=VALUE
        key, _, value = variant.partition("=")
        assert key in record["config"] and str(record["config"][key]) == value, (variant, record["config"].get(key))


@pytest.mark.parametrize("path", sorted(RECORDS.glob("*.json")), ids=lambda p: p.stem)
def test_committed_records_are_small_and_their_tables_are_beside_them(path):
    assert path.stat().st_size < RECORD_LIMIT, f"{path.name}: {path.stat().st_size} bytes; write it with rayml.records"
    on_disk = json.loads(path.read_text())
    refs = {t["parquet"] for t in on_disk["tables"].values() if records.is_table_ref(t)}
    folder = RECORDS / records.tables_dir(path)
    beside = {f"{folder.name}/{p.name}" for p in folder.iterdir()} if folder.exists() else set()
    assert refs == beside, "every Parquet table beside a record is one it refers to, and there"


def test_no_table_folder_without_its_record():
    orphans = [p.name for p in RECORDS.glob("*.tables") if not (RECORDS / (p.name[: -len(".tables")] + ".json")).exists()]
    assert orphans == []


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
    full = docs.record_block({**record, "size": "full"}, "model=m")
    assert "## Measured (full run, model=m)" in full and "`docs/records/x@full@model=m.json`" in full
    assert "`rayml run x --size full --set model=m --seed 0`" in full and "12 s" in full


def test_a_record_whose_claims_changed_since_is_marked_stale():
    docs = _build_docs()
    today = docs.current_fingerprint("kl-bandit")
    assert today is not None
    record = json.loads((ROOT / "docs" / "records" / "kl-bandit.json").read_text())
    assert not docs.is_stale(record) and "**Stale:**" not in docs.record_block(record)
    old = {**record, "claims_fingerprint": "0000000000000000"}
    assert docs.is_stale(old) and docs.held(old).endswith("(stale)")
    assert f"**Stale:** the claims have changed since this run (today's claims fingerprint `{today}`)" \
        in docs.record_block(old)


def test_record_file_names_parse_to_name_size_and_variant():
    docs = _build_docs()
    assert docs.parse_record_file("epic") == ("epic", "quick", None)
    assert docs.parse_record_file("epic@model=smollm2-135m") == ("epic", "quick", "model=smollm2-135m")
    assert docs.parse_record_file("epic@full") == ("epic", "full", None)
    assert docs.parse_record_file("epic@full@model=m") == ("epic", "full", "model=m")
    for bad in ("epic@huge", "epic@model=m@full", "epic@full@model"):
        with pytest.raises(ValueError, match="NAME@full.json"):
            docs.parse_record_file(bad)
    for stem in ("epic", "epic@full", "epic@full@model=m", "epic@model=m"):
        name, size, variant = docs.parse_record_file(stem)
        assert docs.record_file(name, size, variant) == stem + ".json"


def _synthetic(name, size, held, total, seconds, git):
    """A small record of ``name`` at ``size`` with ``held`` of ``total`` paper claims holding, a long
    table (it goes to Parquet) and a short one."""
    claims = [{"text": f"claim {i}", "kind": "paper", "source": "Table 1", "metric": "metrics.a", "compare": 0,
               "op": ">", "margin": 0.0, "test": None, "holds": i < held, "p_value": None, "measured": f"{i} vs 0",
               "controls": [], "discriminating": None, "status": "holds" if i < held else "fails"}
              for i in range(total)]
    return {"schema_version": 2, "name": name, "kind": "run", "size": size, "seed": 0, "paper": "p",
            "config": {}, "metrics": {"a": 1.0}, "baselines": {}, "claims": claims,
            "summary": {"paper": {"total": total, "held": held, "failed": total - held, "not_discriminating": 0,
                                  "incomplete": 0, "with_controls": 0}, "sanity": {"total": 0, "passed": 0}},
            "claims_fingerprint": results.claims_fingerprint(registry.get(name).load_experiment().claims),  # current
            "tables": {"curve": [{"step": i, "value": i / 3} for i in range(900)],
                                                          "short": [{"value": 1}]},
            "env": {"ray_nodes": 1, "cpus": 2, "gpus": 0, "seconds": seconds, "rayml": "0", "git": git,
                    "python": "3", "torch": "2", "ray": "2", "tasks": 3, "worker_pids": 2}}


@pytest.fixture()
def synthetic_records(tmp_path, monkeypatch):
    """build_docs reading a folder that holds a quick and a full record of gs-poweropt and a quick
    one of ssni (its full run not yet run), all written by ``rayml.records``."""
    docs = _build_docs()
    records.write_record(_synthetic("gs-poweropt", "quick", 4, 8, 61.0, "aaaaaaa"), tmp_path / "gs-poweropt.json")
    records.write_record(_synthetic("gs-poweropt", "full", 6, 8, 3605.0, "bbbbbbb"), tmp_path / "gs-poweropt@full.json")
    records.write_record(_synthetic("ssni", "quick", 5, 8, 40.0, "ccccccc"), tmp_path / "ssni.json")
    assert (tmp_path / "gs-poweropt@full.tables" / "curve.parquet").exists()
    monkeypatch.setattr(docs, "RECORDS", tmp_path)
    return docs


def test_the_readme_table_shows_quick_and_full_claims_held_linked_to_the_page(synthetic_records):
    table = synthetic_records.readme_table()
    assert "| paper claims held (quick run) | paper claims held (full run) |" in table.splitlines()[0]
    row = next(r for r in table.splitlines() if r.startswith("| [gs-poweropt]"))
    assert row.endswith("| [4 / 8](docs/methods/gs-poweropt.md#measured) "
                        "| [6 / 8](docs/methods/gs-poweropt.md#measured-full-run) |")
    ssni = next(r for r in table.splitlines() if r.startswith("| [ssni]"))
    assert ssni.endswith("| [5 / 8](docs/methods/ssni.md#measured) | not yet run |")
    assert "| no committed record | not yet run |" in synthetic_records.readme_table("methods/")


def test_a_page_shows_the_quick_and_the_full_record(synthetic_records):
    page = synthetic_records.page_text(registry.get("gs-poweropt"), "# gs-poweropt\n\nprose\n")
    quick, full = page.index("## Measured\n"), page.index("## Measured (full run)\n")
    assert quick < full and "prose" in page
    assert "`rayml run gs-poweropt --quick --seed 0`" in page and "`rayml run gs-poweropt --size full --seed 0`" in page
    assert "commit `aaaaaaa`" in page and "commit `bbbbbbb`" in page and "61 s" in page and "3605 s" in page
    assert "**4 / 8**" in page and "**6 / 8**" in page and "Not yet run" not in page
    ssni = synthetic_records.page_text(registry.get("ssni"), "# ssni\n")
    assert "## Measured (full run)\n\nNot yet run" in ssni and "--size full --json docs/records/ssni@full.json" in ssni


@pytest.mark.skipif(shutil.which("mkdocs") is None and importlib.util.find_spec("mkdocs") is None,
                    reason="mkdocs is not installed (pip install -e '.[docs]')")
def test_the_site_builds_strictly(tmp_path):
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=limit(300),
                         env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "site" / "methods" / "epic" / "index.html").exists()


def test_a_page_opens_with_every_paper_claims_verdict_per_record(synthetic_records):
    page = synthetic_records.page_text(registry.get("gs-poweropt"), "# gs-poweropt\n\nprose\n")
    glance = page[page.index("<!-- glance:start -->"):page.index("<!-- glance:end -->")]
    assert page.index("<!-- registry:end -->") < page.index("<!-- glance:start -->") < page.index("prose")
    assert "| paper claim | [quick](#measured) | [full](#measured-full-run) |" in glance
    # quick holds claims 0-3 of 8, full claims 0-5: a row per claim text, a column per record
    assert "| claim 3 | **holds** | **holds** |" in glance and "| claim 5 | fails | **holds** |" in glance
    assert "| claim 7 | fails | fails |" in glance and glance.count("| claim ") == 8
    ssni = synthetic_records.page_text(registry.get("ssni"), "# ssni\n")
    assert "| paper claim | [quick](#measured) |" in ssni and "| claim 4 | **holds** |" in ssni
    assert synthetic_records.page_text(registry.get("gs-poweropt"), page) == page  # stable on re-build
