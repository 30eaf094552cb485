"""A result record on disk: the JSON a reader opens, with its long tables in Parquet files beside it.

``write_record(record, "docs/records/moe-x.json")`` writes every long table of ``record["tables"]``
to ``docs/records/moe-x.tables/<table>.parquet`` and the JSON keeps, in the table's place, a small
reference object::

    "tables": {"reconstruction": {"parquet": "moe-x.tables/reconstruction.parquet",
                                  "rows": 28764, "columns": ["method", "seed", ...],
                                  "head": [first rows, when they are short]}, ...}

A table is long when its JSON is over ``INLINE_TABLE_CHARS`` characters; if the record's JSON is
still over ``RECORD_CHARS``, its largest remaining tables follow until it is not. Short tables
stay inline, as rows. ``load_record(path)`` reads a record back with every table re-attached as
the list of rows it was, so a loaded record equals the one that was written (the in-memory
record ``rayml.experiments.run`` returns always holds its full tables).

One Parquet file per table, not one file with a ``table`` column: each table keeps its own
columns and types (``pandas.read_parquet("moe-x.tables/reconstruction.parquet")`` is that table and
nothing else), and a reader opens only the table it wants.

How rows map to Parquet columns, exactly and back: a column whose values are all booleans, all
integers, all floats (integers mixed in read back as floats) or all strings is stored with that
type; anything else (lists, objects, mixed types) is stored as JSON text, named in the file's
schema metadata (``rayml.json_columns``). A key absent from some rows is a null there, and the
loader leaves it out again (``rayml.sparse_columns``); an explicit ``null`` of such a column is
stored as JSON text so the two stay apart.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import quote

from rayml import results

__all__ = ["INLINE_TABLE_CHARS", "RECORD_CHARS", "tables_dir", "is_table_ref", "split_tables",
           "write_record", "load_record", "read_table", "table_to_parquet"]

INLINE_TABLE_CHARS = 8_000
RECORD_CHARS = 150_000
HEAD_ROWS = 3
HEAD_CHARS = 1_500


def tables_dir(path: str | os.PathLike) -> str:
    """The folder name (beside the JSON) that holds a record's Parquet tables: ``x.json`` ->
    ``x.tables``."""
    name = str(path).rstrip("/").rsplit("/", 1)[-1]
    return (name[:-5] if name.endswith(".json") else name) + ".tables"


def is_table_ref(table: Any) -> bool:
    """Whether a record's table is a reference to a Parquet file rather than its rows."""
    return isinstance(table, Mapping) and "parquet" in table


def _chars(obj: Any) -> int:
    return len(json.dumps(obj, allow_nan=False))


def _column_kind(values: Sequence[Any]) -> str:
    """``bool``, ``int``, ``float``, ``str``, ``null`` (no values) or ``json`` for a column's values."""
    present = [v for v in values if v is not None]
    if not present:
        return "null"
    types = {type(v) for v in present}
    if types == {bool}:
        return "bool"
    if types == {int}:
        return "int"
    if types <= {int, float}:
        return "float"
    if types == {str}:
        return "str"
    return "json"


def table_to_parquet(rows: Sequence[Mapping[str, Any]], metadata: Mapping[str, str] | None = None) -> bytes:
    """The Parquet bytes of a table (a list of JSON-ready row objects) that ``read_table`` turns back
    into the same rows; ``metadata`` is added to the schema's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns: dict[str, None] = {}
    for r in rows:
        columns.update(dict.fromkeys(r))
    data, json_cols, sparse = {}, [], []
    for col in columns:
        present = [col in r for r in rows]
        values = [r.get(col) for r in rows]
        kind = _column_kind(values)
        if not all(present):
            sparse.append(col)
            if any(p and v is None for p, v in zip(present, values)):
                kind = "json"  # an explicit null beside absent keys: keep them apart
        arrow = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "str": pa.string(),
                 "null": pa.null()}.get(kind)
        if arrow is not None:
            try:
                data[col] = pa.array([None if v is None else (float(v) if kind == "float" else v) for v in values],
                                     type=arrow)
                continue
            except (OverflowError, pa.ArrowException):
                pass  # an integer past int64: JSON text keeps it
        json_cols.append(col)
        data[col] = pa.array([json.dumps(v, allow_nan=False) if p else None for p, v in zip(present, values)],
                             type=pa.string())
    meta = {**(metadata or {}), "rayml.columns": json.dumps(list(columns)),
            "rayml.json_columns": json.dumps(json_cols), "rayml.sparse_columns": json.dumps(sparse),
            "rayml.rows": str(len(rows))}
    table = pa.table(data) if data else pa.table({})
    table = table.replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def read_table(source: str | os.PathLike) -> list[dict]:
    """The rows of a table file written by ``write_record`` (a local path or a URI)."""
    import pyarrow.parquet as pq

    if results._is_uri(source):
        from pyarrow import fs as pafs

        filesystem, path = pafs.FileSystem.from_uri(str(source))
        table = pq.read_table(path, filesystem=filesystem)
    else:
        table = pq.read_table(str(source))
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    if "rayml.columns" not in meta:
        raise ValueError(f"{source}: not a rayml record table (no rayml.columns in its schema metadata)")
    columns = json.loads(meta["rayml.columns"])
    json_cols, sparse = set(json.loads(meta["rayml.json_columns"])), set(json.loads(meta["rayml.sparse_columns"]))
    n = int(meta["rayml.rows"])
    values = {c: table.column(c).to_pylist() for c in columns}
    rows = []
    for i in range(n):
        row = {}
        for c in columns:
            v = values[c][i]
            if c in json_cols:
                if v is not None:
                    row[c] = json.loads(v)
            elif v is not None or c not in sparse:
                row[c] = v
        rows.append(row)
    return rows


def _ref(name: str, rows: Sequence[Mapping], folder: str) -> dict:
    columns = list({k: None for r in rows for k in r})
    ref = {"parquet": f"{folder}/{quote(name, safe='')}.parquet", "rows": len(rows), "columns": columns}
    head = list(rows[:HEAD_ROWS])
    if _chars(head) <= HEAD_CHARS:
        ref["head"] = head
    return ref


def split_tables(record: Mapping, path: str | os.PathLike) -> tuple[dict, dict[str, tuple[str, list]]]:
    """The record as its JSON file at ``path`` holds it, and ``{file name: rows}`` of the tables that
    go to Parquet beside it, ``{file name: (table name, rows)}`` (file names relative to the JSON's
    folder). A record whose tables are references already (``load_record(..., tables=False)``) is
    refused: its rows are not at hand."""
    tables = record.get("tables")
    if not isinstance(tables, Mapping):
        raise ValueError("record: 'tables' must be an object of tables")
    folder = tables_dir(path)
    refs = [k for k, v in tables.items() if is_table_ref(v)]
    if refs:
        raise ValueError(f"record: tables {refs} are references to Parquet files; load the record with "
                         f"load_record(path) (tables=True) before writing it again")
    inline = dict(tables)
    out = {k for k, v in inline.items() if v and _chars(v) > INLINE_TABLE_CHARS}

    def on_disk():
        return {**record, "tables": {k: _ref(k, v, folder) if k in out else v for k, v in inline.items()}}

    for k in sorted((k for k in inline if k not in out and inline[k]), key=lambda k: -_chars(inline[k])):
        if _chars(on_disk()) <= RECORD_CHARS:
            break
        out.add(k)
    result = on_disk()
    files = {result["tables"][k]["parquet"]: (k, list(inline[k])) for k in inline if k in out}
    return result, files


def write_record(record: Mapping, path: str | os.PathLike) -> str | Path:
    """Write ``record`` to ``path`` (local, atomically, or a URI): its long tables as Parquet files
    in ``<stem>.tables/`` beside it, then the JSON. Parquet files of an earlier record at ``path``
    that this one no longer refers to are removed (locally)."""
    on_disk, files = split_tables(record, path)
    base = str(path).rstrip("/").rsplit("/", 1)[0] if "/" in str(path) else "."
    meta = {"rayml.name": str(record.get("name")), "rayml.kind": str(record.get("kind")),
            "rayml.size": str(record.get("size")), "rayml.seed": str(record.get("seed")),
            "rayml.git": str((record.get("env") or {}).get("git")),
            "rayml.claims_fingerprint": str(record.get("claims_fingerprint"))}
    for rel, (table, rows) in files.items():
        results._write_bytes(results._join(base, rel), table_to_parquet(rows, {**meta, "rayml.table": table}))
    written = results.write_json(on_disk, path)
    if not results._is_uri(path):
        folder = Path(path).parent / tables_dir(path)
        if folder.is_dir():
            keep = {Path(rel).name for rel in files}
            for stale in folder.glob("*.parquet"):
                if stale.name not in keep:
                    stale.unlink()
            if not any(folder.iterdir()):
                folder.rmdir()
    return written


def _read_text(path: str | os.PathLike) -> str:
    if results._is_uri(path):
        from pyarrow import fs as pafs

        filesystem, p = pafs.FileSystem.from_uri(str(path))
        with filesystem.open_input_stream(p) as fh:
            return fh.read().decode()
    return Path(path).read_text()


def load_record(path: str | os.PathLike, *, tables: bool = True) -> dict:
    """The record written to ``path``; with ``tables`` (the default) every table that lives in a
    Parquet file beside it is read back as its rows, else the JSON as it is (references kept)."""
    record = json.loads(_read_text(path))
    if not tables or not isinstance(record.get("tables"), Mapping):
        return record
    base = str(path).rstrip("/").rsplit("/", 1)[0] if "/" in str(path) else "."
    for name, table in record["tables"].items():
        if is_table_ref(table):
            source = results._join(base, table["parquet"])
            if not results._is_uri(source) and not Path(source).exists():
                raise FileNotFoundError(f"{path}: table {name!r} lives in {source}, which is missing "
                                        f"(a record's {tables_dir(path)}/ folder travels with its JSON)")
            rows = read_table(source)
            if len(rows) != table["rows"]:
                raise ValueError(f"{path}: table {name!r} has {len(rows)} rows in {source}, the record says "
                                 f"{table['rows']}")
            record["tables"][name] = rows
    return record
