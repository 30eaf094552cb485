"""rayml.records: a record's long tables go to Parquet beside its JSON and come back exactly."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from rayml import records


def _record(tables):
    return {"schema_version": 2, "name": "x", "kind": "run", "size": "quick", "seed": 0, "paper": "p",
            "config": {}, "metrics": {"a": 1.0}, "baselines": {}, "claims": [], "summary": {},
            "claims_fingerprint": "f", "tables": tables, "env": {"git": "abc", "seconds": 1.0}}


def _long_rows(n=600):
    rows = []
    for i in range(n):
        row = {"method": "m" if i % 2 else "b", "seed": i, "step": i // 7, "metric": "loss",
               "value": i / 7, "ok": i % 3 == 0, "curve": [i, i + 0.5], "info": {"k": i}, "mixed": i if i % 2 else "s"}
        if i % 5 == 0:
            row["sparse"] = 0.25 * i          # absent from most rows
        if i % 4 == 0:
            row["sparse_null"] = None         # absent, or an explicit null
        elif i % 4 == 1:
            row["sparse_null"] = i
        row["nullable"] = None if i % 3 else 1.5  # in every row, sometimes null
        row["huge"] = 2 ** 70 if i == 3 else i    # past int64
        rows.append(row)
    return rows


def test_long_tables_go_to_parquet_and_load_back_exactly(tmp_path):
    rec = _record({"runs": _long_rows(), "short": [{"metric": "a", "value": 1}], "empty": []})
    path = tmp_path / "x.json"
    records.write_record(rec, path)
    on_disk = json.loads(path.read_text())
    ref = on_disk["tables"]["runs"]
    assert ref["parquet"] == "x.tables/runs.parquet" and ref["rows"] == 600
    assert ref["columns"][:5] == ["method", "seed", "step", "metric", "value"]
    assert on_disk["tables"]["short"] == [{"metric": "a", "value": 1}] and on_disk["tables"]["empty"] == []
    assert path.stat().st_size < 4000
    back = records.load_record(path)
    assert back == rec
    assert json.dumps(back, sort_keys=True) == json.dumps(rec, sort_keys=True)  # ints stay ints, absent stays absent
    assert records.load_record(path, tables=False) == on_disk
    schema = pq.read_schema(tmp_path / "x.tables" / "runs.parquet")
    assert str(schema.field("seed").type) == "int64" and str(schema.field("value").type) == "double"
    assert str(schema.field("ok").type) == "bool" and str(schema.field("method").type) == "string"
    assert schema.metadata[b"rayml.name"] == b"x" and schema.metadata[b"rayml.table"] == b"runs"


def test_a_rewrite_removes_the_tables_it_no_longer_refers_to(tmp_path):
    path = tmp_path / "x.json"
    records.write_record(_record({"a": _long_rows(), "b": _long_rows()}), path)
    assert sorted(p.name for p in (tmp_path / "x.tables").iterdir()) == ["a.parquet", "b.parquet"]
    records.write_record(_record({"a": _long_rows()}), path)
    assert sorted(p.name for p in (tmp_path / "x.tables").iterdir()) == ["a.parquet"]
    records.write_record(_record({"a": [{"v": 1}]}), path)
    assert not (tmp_path / "x.tables").exists() and records.load_record(path)["tables"] == {"a": [{"v": 1}]}


def test_many_middling_tables_keep_the_record_under_its_budget(tmp_path):
    middling = [{"metric": f"m{i}", "value": i / 3} for i in range(150)]   # under the per-table limit
    assert len(json.dumps(middling)) < records.INLINE_TABLE_CHARS
    rec = _record({f"t{i}": middling for i in range(50)})
    on_disk, files = records.split_tables(rec, "x.json")
    assert len(json.dumps(on_disk)) <= records.RECORD_CHARS and files
    records.write_record(rec, tmp_path / "x.json")
    assert records.load_record(tmp_path / "x.json") == rec


def test_missing_parquet_and_written_references_are_clear_errors(tmp_path):
    path = tmp_path / "x.json"
    records.write_record(_record({"runs": _long_rows()}), path)
    with pytest.raises(ValueError, match="load_record"):
        records.write_record(records.load_record(path, tables=False), tmp_path / "y.json")
    (tmp_path / "x.tables" / "runs.parquet").unlink()
    with pytest.raises(FileNotFoundError, match="x.tables"):
        records.load_record(path)
    with pytest.raises(ValueError, match="tables"):
        records.write_record({"name": "x", "tables": [1]}, path)


def test_a_record_goes_to_a_uri_and_back(tmp_path):
    uri = (tmp_path / "bucket" / "x.json").as_uri()
    rec = _record({"runs": _long_rows(), "odd name/1": _long_rows(50)})
    records.write_record(rec, uri)
    assert (tmp_path / "bucket" / "x.tables" / "runs.parquet").exists()
    assert records.load_record(uri) == rec
