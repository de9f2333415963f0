"""docs/checks.md's table of checks is what `envdoctor checks` lists: every check, in its row
the checks it runs after, and no row for a check that is gone."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from envdoctor.cli.main import cli

CHECKS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "checks.md"
SECTION = "## What `check` looks at"


def listed_checks() -> dict[str, set[str]]:
    """`envdoctor checks --format json`, in-process: check id -> the ids it requires."""
    result = CliRunner().invoke(cli, ["checks", "--format", "json"])
    assert result.exit_code == 0, result.output
    return {c["id"]: set(c["requires"]) for c in json.loads(result.output)["checks"]}


def page_rows() -> list[tuple[str, set[str]]]:
    """(check id, ids in the "runs after" cell) for each row of the table under SECTION."""
    text = CHECKS_PAGE.read_text(encoding="utf-8")
    assert SECTION in text, f"{CHECKS_PAGE} has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = line.split("|")
        ids = re.findall(r"`([a-z0-9_.-]+)`", cells[1])
        assert len(ids) == 1, f"a row names one check in its first cell: {line!r}"
        rows.append((ids[0], set(re.findall(r"`([a-z0-9_.-]+)`", cells[2]))))
    return rows


def test_checks_page_has_one_row_per_check_and_none_for_a_check_that_is_gone():
    """Each check `envdoctor checks` lists (code.*, model.*, patch.* too) has one row in docs/checks.md; no row names a check that does not exist."""
    listed = listed_checks()
    ids = [check_id for check_id, _ in page_rows()]
    assert len(ids) == len(set(ids)), "a check has two rows"
    assert sorted(set(listed) - set(ids)) == [], "checks missing from docs/checks.md"
    assert sorted(set(ids) - set(listed)) == [], "docs/checks.md rows for checks that do not exist"


def test_checks_page_says_what_each_check_runs_after_as_envdoctor_checks_does():
    """The "runs after" cell of each row names exactly the checks that check requires."""
    listed = listed_checks()
    wrong = {check_id: (after, listed[check_id]) for check_id, after in page_rows()
             if check_id in listed and after != listed[check_id]}
    assert wrong == {}, "rows whose 'runs after' differs from envdoctor checks (page, code)"
