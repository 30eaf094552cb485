"""Render a method's figures from its committed record: ``python scripts/render_figures.py NAME ...``
writes ``docs/methods/figures/<NAME>-<figure>.png`` from ``EXPERIMENT.plots(record)``, where the
record is ``docs/records/<NAME>.json`` read with ``rayml.records.load_record``: its long tables
come from the Parquet files beside it (``docs/records/<NAME>.tables/``). ``NAME`` may name another
committed record of the method (``epic@full``, ``epic@model=smollm2-135m``); its figures are
``<NAME>-<figure>.png``. Prints the Markdown lines that show them (a page embeds the ones it wants)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "methods" / "figures"
RECORDS = ROOT / "docs" / "records"


def render(name: str, figures: Path = FIGURES) -> list[Path]:
    """Write the figures of the committed record ``docs/records/<name>.json`` into ``figures``; their
    paths."""
    import matplotlib

    matplotlib.use("Agg")
    from rayml import records, registry

    path = RECORDS / f"{name}.json"
    if not path.exists():
        raise SystemExit(f"render_figures: no committed record {path.relative_to(ROOT)}")
    record = records.load_record(path)
    experiment = registry.get(name.split("@", 1)[0]).load_experiment()
    figs = experiment.plots(record) if experiment.plots else {}
    figures.mkdir(parents=True, exist_ok=True)
    out = []
    for key, fig in (figs or {}).items():
        target = figures / f"{name}-{key}.png"
        fig.savefig(target, dpi=110, bbox_inches="tight")
        out.append(target)
    return out


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python scripts/render_figures.py NAME [NAME ...]")
    for name in sys.argv[1:]:
        for path in render(name):
            print(f"![{path.stem.removeprefix(name + '-').replace('_', ' ')}](figures/{path.name})")
