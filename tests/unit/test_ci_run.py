""".ci/run runs the README's test command in a venv of its own, then the lowest-versions tier."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CI_RUN = (ROOT / ".ci" / "run").read_text()
README = (ROOT / "README.md").read_text()


def readme_test_command() -> str:
    """The README's command that installs the test extra and runs pytest."""
    lines = [line for line in README.splitlines() if "'.[test]'" in line and "pytest" in line]
    assert len(lines) == 1, lines
    return lines[0].strip()


def test_ci_runs_the_readmes_test_command_in_a_venv_of_its_own() -> None:
    """The README's command, its .venv replaced by the fresh venv .ci/run makes, is in .ci/run."""
    command = readme_test_command()
    assert command.startswith("python3 -m venv .venv && .venv/bin/python -m pip install -e '.[test]'")
    ci_line = " ".join(CI_RUN.split("\\\n"))  # (a command continued on the next line)
    assert command.replace(".venv", '"$venv"').replace(" -m pip install ", " -m pip install -q ") in ci_line
    assert "python3 -m pip" not in CI_RUN and "python3 -m pytest" not in CI_RUN  # never the machine's python3


def test_the_lowest_tier_installs_the_lowest_versions_and_names_real_tests() -> None:
    """The second tier installs with uv's lowest-direct and runs test paths that exist."""
    assert re.search(r"uv\" pip install -q --python \"\$lowest/bin/python\" --resolution lowest-direct "
                     r"-e '\.\[test\]'", CI_RUN)
    block = re.search(r"LOWEST_TIER=\((.*?)\)", CI_RUN, re.DOTALL)
    assert block is not None
    paths = shlex.split(block.group(1))
    assert "tests/unit" in paths and len(paths) > 1
    assert all((ROOT / path).exists() for path in paths), [p for p in paths if not (ROOT / p).exists()]
    assert '-m pytest "${LOWEST_TIER[@]}"' in CI_RUN
