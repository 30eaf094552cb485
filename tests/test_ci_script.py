"""``.ci/run`` installs as a new user does: a fresh venv, the README's install steps and test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CI = (ROOT / ".ci" / "run").read_text()
README = (ROOT / "README.md").read_text()


def _readme_commands() -> list[str]:
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S)][:2]


def test_ci_builds_a_fresh_venv_and_activates_it_before_installing():
    venv = CI.index('python -m venv "$work/venv"')
    activate = CI.index('. "$work/venv/bin/activate"')
    assert venv < activate < CI.index("pip install torch==2.13.0")


def test_ci_runs_the_readme_install_steps_and_test_command():
    first, second = _readme_commands()
    install, _, rest = first.rpartition(" && ")
    assert rest == "rayml run all --quick", first
    assert install in CI, "CI runs the README's first install step"
    assert second in CI, "CI runs the README's test command exactly"
    assert CI.index(install) < CI.index(second)
