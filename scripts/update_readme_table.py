"""Rewrite the methods table of README.md and docs/index.md (between the methods markers): registry
status and the paper claims held by each method's committed quick record and full record
(``docs/records/<name>.json``, ``docs/records/<name>@full.json``; "not yet run" without one), each
linked to the method's page. The table is ``scripts/build_docs.py``'s ``readme_table`` (that script
also rewrites it, with the pages; this one touches the two tables only).

``python scripts/update_readme_table.py``; ``--check`` exits 1 if either table is stale."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import build_docs as docs  # noqa: E402  (the script beside this one)


def tables() -> dict[Path, str]:
    """README.md and docs/index.md with their methods tables regenerated."""
    out = {}
    for path, prefix in ((docs.README, "docs/methods/"), (docs.DOCS / "index.md", "methods/")):
        text = path.read_text()
        if docs.MARK["methods"][0] not in text:
            raise SystemExit(f"{path.relative_to(ROOT)} lacks the methods markers")
        out[path] = docs._replace_block(text, "methods", docs.readme_table(prefix), where="end")
    return out


def main(argv: list[str]) -> int:
    new = tables()
    stale = [p for p, text in new.items() if p.read_text() != text]
    if "--check" in argv:
        for p in stale:
            print(f"stale: {p.relative_to(ROOT)} (run python scripts/update_readme_table.py)")
        return 1 if stale else 0
    for p in stale:
        p.write_text(new[p])
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
