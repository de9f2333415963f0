"""The README's table of checks is the loaded check graph: every shipped check, nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from envdoctor.engine.graph import load_checks

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_check_ids() -> list[str]:
    """Check ids in the first column of the table under "What `check` looks at"."""
    text = README.read_text(encoding="utf-8")
    section = text.split("### What `check` looks at", 1)[1].split("\n### ", 1)[0]
    ids = []
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            ids += re.findall(r"`([a-z0-9_.-]+)`", first_cell)
    return ids


def test_readme_table_lists_every_shipped_check_and_only_those():
    """Each check the graph loads (code.*, model.*, patch.* too) has a row; no row names a check that is gone."""
    shipped = set(load_checks().checks)
    listed = readme_check_ids()
    assert len(listed) == len(set(listed)), "a check is listed twice"
    assert sorted(shipped - set(listed)) == [], "checks missing from the README table"
    assert sorted(set(listed) - shipped) == [], "README rows for checks that do not exist"
