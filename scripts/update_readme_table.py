"""Rewrite README.md's method table (between the methods markers) from the registry."""

from __future__ import annotations

import re
from pathlib import Path

from rayml.cli import markdown_table

README = Path(__file__).resolve().parent.parent / "README.md"


def main() -> None:
    text = README.read_text()
    new, n = re.subn(r"(<!-- methods:start -->\n).*?(\n<!-- methods:end -->)",
                     lambda m: m.group(1) + markdown_table().strip() + m.group(2), text, flags=re.S)
    if n != 1:
        raise SystemExit("README.md lacks the methods markers")
    README.write_text(new)


if __name__ == "__main__":
    main()
