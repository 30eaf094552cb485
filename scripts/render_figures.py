"""Render a method's figures from its committed record: ``python scripts/render_figures.py NAME ...``
writes ``docs/methods/figures/<NAME>-<figure>.png`` from ``EXPERIMENT.plots(docs/records/<NAME>.json)``
and prints the Markdown lines that show them (a page embeds the ones it wants)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "methods" / "figures"


def render(name: str) -> list[Path]:
    """Write the figures of method ``name``'s committed record; their paths."""
    import matplotlib

    matplotlib.use("Agg")
    from rayml import registry

    record = json.loads((ROOT / "docs" / "records" / f"{name}.json").read_text())
    figs = registry.get(name).load_experiment().plots(record) or {}
    FIGURES.mkdir(parents=True, exist_ok=True)
    out = []
    for key, fig in figs.items():
        path = FIGURES / f"{name}-{key}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        out.append(path)
    return out


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python scripts/render_figures.py NAME [NAME ...]")
    for name in sys.argv[1:]:
        for path in render(name):
            print(f"![{path.stem.removeprefix(name + '-').replace('_', ' ')}](figures/{path.name})")
