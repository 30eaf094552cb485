"""Re-judge committed records under today's claim contract, from their own numbers and tables.

``python scripts/rejudge_records.py [NAME ...]`` evaluates each committed record of the named methods
(every method without names) again with its experiment's claims, when the declarations are unchanged
(same claims fingerprint); a record whose verdicts change is rewritten with ``env.judged`` (commit and
contract) and listed. Records whose declarations changed are listed as needing a new run. Nothing runs
an experiment. Then ``python scripts/build_docs.py`` refreshes the pages.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rayml import records, registry, results

ROOT = Path(__file__).resolve().parent.parent


def _verdicts(record: dict) -> list:
    """What a re-judgement may change: each claim's status, outcome and measured text, and its
    controls' outcomes and marks."""
    return [(c["status"], c["holds"], c["measured"], c.get("discriminating"),
             [(x["holds"], x["measured"], x.get("unmeasured"), x.get("equals_baseline")) for x in c["controls"]])
            for c in record["claims"]]


def main(names: list[str]) -> int:
    paths = sorted((ROOT / "docs" / "records").glob("*.json"))
    for path in paths:
        name = path.stem.split("@")[0]
        if names and name not in names:
            continue
        record = records.load_record(path)
        if record["kind"] != "run" or registry.get(name).status != registry.IMPLEMENTED:
            continue
        exp = registry.get(name).load_experiment()
        try:
            new = results.rejudge(record, exp.claims)
        except ValueError:
            print(f"needs a new run (declarations changed): {path.name}")
            continue
        if _verdicts(new) == _verdicts(record):
            continue
        records.write_record(new, path)
        print(f"re-judged: {path.name}: held {record['summary']['paper']['held']} -> {new['summary']['paper']['held']}"
              f" / {new['summary']['paper']['total']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
