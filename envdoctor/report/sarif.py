"""SARIF 2.1.0 for ``envdoctor scan``: what code-scanning tools (GitHub, GitLab, IDEs) read.

One run per scanned root, whose folder is the run's ``SRCROOT`` base, so each result's
location is the contract's relative path. ``ok`` sites are not results; the gaps are errors,
and the calls whose flag only the running code decides (``parameterized``, ``kwargs``) notes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envdoctor import __version__
from envdoctor.scan.loaders import EXPLICIT_FALSE, KWARGS, MISSING, PARAMETERIZED
from envdoctor.scan.scanner import ScanReport

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"

#: state -> (rule id, level, short description, help)
RULES: dict[str, tuple[str, str, str, str]] = {
    MISSING: (
        "trust-remote-code/missing", "error",
        "Model-loading call without trust_remote_code",
        "Models that ship their own code (Kimi K2.x, ...) fail to load, or silently load a different "
        "class, unless the call passes trust_remote_code=True.",
    ),
    EXPLICIT_FALSE: (
        "trust-remote-code/explicit-false", "error",
        "Model-loading call with trust_remote_code=False",
        "The call refuses the model's own code; models that need it will not load correctly.",
    ),
    PARAMETERIZED: (
        "trust-remote-code/parameterized", "note",
        "trust_remote_code comes from an expression",
        "Whether the flag is True depends on the value passed at run time; make sure callers pass it.",
    ),
    KWARGS: (
        "trust-remote-code/kwargs", "note",
        "trust_remote_code may come from **kwargs",
        "The call passes a **dict that may or may not hold trust_remote_code.",
    ),
}
_RULE_ORDER = list(RULES)


def _rules() -> list[dict[str, Any]]:
    return [
        {
            "id": rule_id,
            "shortDescription": {"text": short},
            "help": {"text": help_text},
            "defaultConfiguration": {"level": level},
        }
        for rule_id, level, short, help_text in RULES.values()
    ]


def _run(root: Path, report: ScanReport) -> dict[str, Any]:
    results = []
    for site in report.sites:
        if site.state not in RULES:
            continue
        rule_id, level, short, _ = RULES[site.state]
        results.append({
            "ruleId": rule_id,
            "ruleIndex": _RULE_ORDER.index(site.state),
            "level": level,
            "message": {"text": f"{site.callee}: {short.lower()}"},
            "locations": [{
                "physicalLocation": {
                    "artifactLocation": {"uri": Path(site.path).as_posix(), "uriBaseId": "SRCROOT"},
                    "region": {"startLine": site.line, "startColumn": site.column + 1},
                }
            }],
        })
    base = root if root.is_dir() else root.parent
    return {
        "tool": {"driver": {"name": "envdoctor", "version": __version__, "rules": _rules()}},
        "originalUriBaseIds": {"SRCROOT": {"uri": base.resolve().as_uri() + "/"}},
        "results": results,
        "invocations": [{
            "executionSuccessful": True,
            "toolExecutionNotifications": [
                {"level": "warning", "message": {"text": f"{e.path}: {e.message}"}} for e in report.errors
            ],
        }],
    }


def render(scans: Sequence[tuple[Path, ScanReport]]) -> str:
    data = {"$schema": SCHEMA, "version": "2.1.0", "runs": [_run(root, report) for root, report in scans]}
    return json.dumps(data, indent=2) + "\n"
