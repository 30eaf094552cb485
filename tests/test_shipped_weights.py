"""The checkpoints that ship inside rayml: 40 MB at most in all, each beside its card."""
from pathlib import Path

import rayml

ROOT = Path(rayml.__file__).parent
WEIGHTS = (".safetensors", ".npz", ".pt")


def _shipped() -> list[Path]:
    return [p for p in ROOT.glob("**/weights/**/*") if p.is_file() and p.suffix in WEIGHTS]


def _card(path: Path) -> Path | None:
    for card in (path.parent / "card.json", path.with_name(path.stem + ".card.json"), path.with_suffix(".json")):
        if card.exists():
            return card
    return None


def test_every_shipped_checkpoint_has_a_card():
    shipped = _shipped()
    assert len(shipped) >= 6  # base, two digits models, two merge3 endpoints, dpsdp's warm-up
    assert [str(p.relative_to(ROOT)) for p in shipped if _card(p) is None] == []


def test_the_shipped_files_stay_within_40_mb():
    total = sum(p.stat().st_size for p in ROOT.glob("**/weights/**/*") if p.is_file())
    assert total <= 40 * 10**6, f"{total / 1e6:.1f} MB shipped under rayml/**/weights"
