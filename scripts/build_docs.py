"""Regenerate the parts of the docs that come from data: each method page's registry header and
measured-figures block (from its committed record, ``docs/records/<name>.json``), and the README's
method table. ``python scripts/build_docs.py`` rewrites them; ``--check`` exits 1 if any is stale
(``tests/test_docs.py`` runs the same check).

``--committed`` builds as a clean checkout of HEAD would: experiments and pages that git does not
track yet (work in progress in a shared checkout) count as absent.

A record is what ``rayml run NAME --quick --json docs/records/NAME.json`` wrote; the page then
quotes exactly that run (its command, commit, claims fingerprint, seconds and every claim's
verdict). A method may also have variant records, ``docs/records/NAME@KEY=VALUE.json``, written by
``rayml run NAME --quick --set KEY=VALUE`` (a real model instead of the substrate, say), and
full-size records, ``docs/records/NAME@full.json`` (``rayml run NAME --size full``) and
``NAME@full@KEY=VALUE.json``: each is quoted in its own block after the main one, and the README's
table lists the claims held by the quick and by the full run side by side ("not yet run" where no
full record is committed). Records are read with ``rayml.records.load_record`` (their long tables
live in Parquet beside them; the docs quote only the JSON's claims and provenance).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RECORDS = DOCS / "records"
README = ROOT / "README.md"
MARK = {"header": ("<!-- registry:start -->", "<!-- registry:end -->"),
        "record": ("<!-- record:start -->", "<!-- record:end -->"),
        "glance": ("<!-- glance:start -->", "<!-- glance:end -->"),
        "methods": ("<!-- methods:start -->", "<!-- methods:end -->")}


SIZES = ("quick", "full")


def record_file(name: str, size: str = "quick", variant: str | None = None) -> str:
    """The committed record's file name: ``NAME[@SIZE][@KEY=VALUE].json`` (no ``@SIZE`` for quick)."""
    return f"{name}{'' if size == 'quick' else '@' + size}{'@' + variant if variant else ''}.json"


def parse_record_file(stem: str) -> tuple[str, str, str | None]:
    """``(name, size, variant)`` of a record file's stem: ``epic@full@model=m`` -> ``("epic", "full",
    "model=m")``; ``ValueError`` for a stem that is not ``NAME[@SIZE][@KEY=VALUE]``."""
    name, *rest = stem.split("@")
    size = rest.pop(0) if rest and "=" not in rest[0] else "quick"
    if size not in SIZES or len(rest) > 1 or (rest and "=" not in rest[0]):
        raise ValueError(f"record file {stem}.json: expected NAME.json, NAME@KEY=VALUE.json, NAME@full.json "
                         f"or NAME@full@KEY=VALUE.json")
    return name, size, (rest[0] if rest else None)


def _read(path: Path) -> dict:
    from rayml import records

    return records.load_record(path, tables=False)  # claims and provenance: the tables are not quoted


def load_record(name: str, size: str = "quick") -> dict | None:
    """The committed record of ``name`` at ``size`` (``docs/records/<name>[@full].json``), or ``None``."""
    path = RECORDS / record_file(name, size)
    return _read(path) if path.exists() else None


def variant_records(name: str, size: str = "quick") -> list[tuple[str, dict]]:
    """``[(KEY=VALUE, record)]`` of the variant records ``docs/records/<name>[@full]@KEY=VALUE.json``."""
    out = []
    for p in sorted(RECORDS.glob(f"{name}@*.json")):
        rec_name, rec_size, variant = parse_record_file(p.stem)
        if rec_name == name and rec_size == size and variant:
            out.append((variant, _read(p)))
    return out


_FINGERPRINTS: dict = {}


def current_fingerprint(name: str, kind: str = "run") -> str | None:
    """The claims fingerprint of ``name``'s experiment as the code declares it today (``None`` where the
    method has no experiment to load): a record with another fingerprint quotes older declarations."""
    key = (name, kind)
    if key not in _FINGERPRINTS:
        from rayml import registry, results

        try:
            exp = registry.get(name).load_experiment()
            _FINGERPRINTS[key] = results.claims_fingerprint(exp.claims if kind == "run" else exp.bench_claims)
        except Exception:  # noqa: BLE001 - a planned method or missing extra: nothing to compare with
            _FINGERPRINTS[key] = None
    return _FINGERPRINTS[key]


def is_stale(record: dict) -> bool:
    """Whether ``record``'s claim declarations are no longer the code's (see ``current_fingerprint``)."""
    fp = current_fingerprint(record["name"], record["kind"])
    return fp is not None and fp != record["claims_fingerprint"]


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def header_block(method) -> str:
    """What the registry says of a method: paper, module, status, Ray parts, checks."""
    from rayml import registry

    row = registry.details(method)
    lines = [f"**Paper:** {method.title} ({method.ref} in `shared/papers`)  ",
             f"**Module:** `{method.module}` · **family:** {method.family} · **status:** {method.status}"
             + (f" · **authors' code:** {method.code}" if method.code else "") + "  "]
    if row.get("ray"):
        lines.append(f"**On Ray:** {row['ray']}  ")
    if row.get("checked_against"):
        lines.append(f"**Checked against:** {row['checked_against']}")
    return "\n".join(lines)


def record_block(record: dict, variant: str | None = None) -> str:
    """The measured figures of a committed record: command, provenance and every claim (a variant
    record, ``KEY=VALUE``, names its setting in the heading, the file and the command)."""
    name, size, seed = record["name"], record["size"], record["seed"]
    flag = "--quick" if size == "quick" else f"--size {size}"
    if variant:
        flag += f" --set {variant}"
    env = record["env"]
    p, s = record["summary"]["paper"], record["summary"]["sanity"]
    what = ", ".join(([] if size == "quick" else [f"{size} run"]) + ([variant] if variant else []))
    lines = [
        f"## Measured ({what})" if what else "## Measured",
        "",
        f"From `docs/records/{record_file(name, size, variant)}`, written by "
        f"`rayml {record['kind']} {name} {flag} --seed {seed}` "
        f"(commit `{env.get('git')}`, claims fingerprint `{record['claims_fingerprint']}`, {env['seconds']:.0f} s "
        f"on {env['cpus']} CPUs, {env['tasks']} Ray tasks on {env['worker_pids']} worker processes)."
        + (f" Verdicts re-judged from the record's own tables under claim contract {env['judged']['contract']} "
           f"(`scripts/rejudge_records.py`, commit `{env['judged']['git']}`)." if env.get("judged") else ""),
        "",
        f"Paper claims held: **{p['held']} / {p['total']}** (not discriminating: {p['not_discriminating']}, "
        f"incomplete: {p['incomplete']}); sanity checks passed: {s['passed']} / {s['total']}.",
        "",
    ]
    if is_stale(record):
        lines += [f"**Stale:** the claims have changed since this run (today's claims fingerprint "
                  f"`{current_fingerprint(name, record['kind'])}`): these verdicts are those of older "
                  f"declarations, and the command above re-runs it.", ""]
    lines += [
        "| kind | status | claim | source | measured | controls |",
        "|---|---|---|---|---|---|",
    ]
    for c in record["claims"]:
        controls = "; ".join(f"{x['name']}: {'passes' if x['holds'] else 'fails'} ({x['measured']})"
                             for x in c.get("controls", ()))
        lines.append(f"| {c['kind']} | {c['status']} | {_cell(c['text'])} | {_cell(c.get('source', ''))} | "
                     f"{_cell(c['measured'])} | {_cell(controls)} |")
    return "\n".join(lines)


def _replace_block(text: str, key: str, body: str, *, where: str) -> str:
    start, end = MARK[key]
    block = f"{start}\n{body}\n{end}"
    if start in text:
        return re.sub(re.escape(start) + r".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    if where == "after-title":
        first, _, rest = text.partition("\n")
        return f"{first}\n\n{block}\n{rest}"
    if where == "after-header" and MARK["header"][1] in text:
        head, mark, rest = text.partition(MARK["header"][1])
        return f"{head}{mark}\n\n{block}\n{rest}"
    return text.rstrip("\n") + f"\n\n{block}\n"


_SHORT_STATUS = {"holds": "**holds**", "fails": "fails", "not discriminating": "not discriminating",
                 "incomplete": "incomplete"}


def _short_claim(text: str, width: int = 110) -> str:
    """The opening of a claim's text, cut at a word boundary."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width].rsplit(" ", 1)[0] + " ..."


def glance_block(name: str) -> str | None:
    """Every paper claim of a method's committed records in one small table (a row per claim text,
    a column per record: quick, full, variants), with the sanity checks passed, so a reader sees the
    verdicts before the page's history; ``None`` without a record."""
    columns = [(size, "#measured" if size == "quick" else f"#measured-{size}-run", record)
               for size in SIZES if (record := load_record(name, size)) is not None]
    columns += [(f"{size} {variant}" if size != "quick" else variant, None, r)
                for size in SIZES for variant, r in variant_records(name, size)]
    if not columns:
        return None
    texts: list[str] = []
    for _, _, record in columns:
        texts += [c["text"] for c in record["claims"] if c["kind"] == "paper" and c["text"] not in texts]
    heads = [(f"[{label}]({link})" if link else label) + (" (stale)" if is_stale(r) else "")
             for label, link, r in columns]
    lines = ["**At a glance** (paper claims in the committed records; each record's table below has the "
             "measured numbers, controls and sources):", "",
             "| paper claim | " + " | ".join(heads) + " |", "|---|" + "---|" * len(columns)]
    for text in texts:
        cells = []
        for _, _, record in columns:
            status = next((c["status"] for c in record["claims"] if c["text"] == text), None)
            cells.append(_SHORT_STATUS.get(status, "-"))
        lines.append(f"| {_cell(_short_claim(text))} | " + " | ".join(cells) + " |")
    sanity = " · ".join(f"{label} {r['summary']['sanity']['passed']} / {r['summary']['sanity']['total']}"
                        for label, _, r in columns)
    lines += ["", f"Sanity checks and gates passed: {sanity}."]
    return "\n".join(lines)


def page_text(method, text: str) -> str:
    """A method page with its registry header and its record block regenerated."""
    text = _replace_block(text, "header", header_block(method), where="after-title")
    glance = glance_block(method.name)
    if glance is not None:
        text = _replace_block(text, "glance", glance, where="after-header")
    blocks = []
    for size in SIZES:
        record = load_record(method.name, size)
        blocks += [record_block(record)] if record is not None else []
        blocks += [record_block(r, variant) for variant, r in variant_records(method.name, size)]
    if blocks:
        if load_record(method.name, "full") is None and not variant_records(method.name, "full"):
            blocks.append(not_yet_run_block(method.name))
        text = _replace_block(text, "record", "\n\n".join(blocks), where="end")
    return text


def not_yet_run_block(name: str) -> str:
    """What a page says while no full-size record of ``name`` is committed."""
    return "\n".join([
        "## Measured (full run)", "",
        f"Not yet run: no `docs/records/{record_file(name, 'full')}` is committed. "
        f"`rayml run {name} --size full --json docs/records/{record_file(name, 'full')}` makes it "
        "(see docs/contributing.md)."])


def held(record: dict | None) -> str:
    """``held / total`` paper claims of a record, marked ``(stale)`` when its claims have changed since."""
    p = record["summary"]["paper"]
    return f"{p['held']} / {p['total']}" + (" (stale)" if is_stale(record) else "")


def _held_cell(name: str, size: str, link: str | None) -> str:
    rec = load_record(name, size)
    cell = held(rec) if rec else ""
    if rec and link:
        cell = f"[{cell}]({link}#{'measured' if size == 'quick' else 'measured-' + size + '-run'})"
    variants = [f"{variant}: {held(r)}" for variant, r in variant_records(name, size)]
    return "; ".join(([cell] if cell else []) + variants)


def readme_table(prefix: str = "docs/methods/") -> str:
    """The README's method table: registry status, paper claims held in the committed record, page
    (links start with ``prefix``: ``docs/methods/`` from the README, ``methods/`` from the site)."""
    from rayml import registry

    lines = ["| method | paper (ICML 2025) | family | status | paper claims held (quick run) "
             "| paper claims held (full run) |",
             "|---|---|---|---|---|---|"]
    for m in (*registry.METHODS, *registry.SUBSTRATES):
        title = m.title.removesuffix(" (ICML 2025)")
        page = DOCS / "methods" / f"{m.name}.md"
        link = f"{prefix}{m.name}.md" if _page_exists(page) else None
        name = f"[{m.name}]({link})" if link else m.name
        implemented = m.status == registry.IMPLEMENTED
        quick = _held_cell(m.name, "quick", link) or ("no committed record" if implemented else "")
        full = _held_cell(m.name, "full", link) or ("not yet run" if implemented else "")
        lines.append(f"| {name} | {_cell(title)} | {m.family} | {m.status} | {quick} | {full} |")
    return "\n".join(lines)


def outputs() -> dict[Path, str]:
    """Every generated file and its expected text."""
    from rayml import registry

    out = {}
    for m in (*registry.METHODS, *registry.SUBSTRATES):
        page = DOCS / "methods" / f"{m.name}.md"
        if _page_exists(page):
            out[page] = page_text(m, page.read_text())
    out[README] = _replace_block(README.read_text(), "methods", readme_table(), where="end")
    index = DOCS / "index.md"
    out[index] = _replace_block(index.read_text(), "methods", readme_table("methods/"), where="end")
    return out


def _only_committed() -> None:
    """Make the registry and page checks see only what git tracks (see ``--committed``)."""
    import dataclasses
    import subprocess

    from rayml import registry

    tracked = set(subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True,
                                 check=True).stdout.split())

    def committed(m):
        path = f"rayml/experiments/{m.name.replace('-', '_')}.py"
        return m if path in tracked else dataclasses.replace(m, status=registry.PLANNED, experiment="")

    registry.METHODS = tuple(committed(m) for m in registry.METHODS)
    registry.SUBSTRATES = tuple(committed(m) for m in registry.SUBSTRATES)
    global _page_exists
    _page_exists = lambda page: str(page.relative_to(ROOT)) in tracked  # noqa: E731


def _page_exists(page: Path) -> bool:
    return page.exists()


def main(argv: list[str]) -> int:
    if "--committed" in argv:
        _only_committed()
    stale = [p for p, text in outputs().items() if p.read_text() != text]
    if "--check" in argv:
        for p in stale:
            print(f"stale: {p.relative_to(ROOT)} (run python scripts/build_docs.py)")
        return 1 if stale else 0
    for p, text in outputs().items():
        if p in stale:
            p.write_text(text)
            print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
