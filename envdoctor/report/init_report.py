"""What ``envdoctor init`` did for each host, as text (the TOML it wrote, shown whole) or JSON."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envdoctor.operations.init import HostEntry
from envdoctor.report.envelope import dump_json

WRITTEN, WOULD_WRITE, KEPT, NOT_WRITTEN = "written", "would-write", "kept", "not-written"


@dataclass(frozen=True)
class InitOutcome:
    """One host: what init found (``entry``; None when the host was not probed), what it did
    (``state``) and the table's text."""

    host: str
    destination: str
    state: str
    table: str = ""
    entry: HostEntry | None = None

    @property
    def ok(self) -> bool:
        return self.state != NOT_WRITTEN


def exit_status(outcomes: Sequence[InitOutcome]) -> int:
    return 0 if all(o.ok for o in outcomes) else 1


def render(outcomes: Sequence[InitOutcome], fmt: str, *, config: str) -> str:
    if fmt == "json":
        body = {"hosts": [_host_json(o) for o in outcomes]}
        return dump_json("init", exit_status(outcomes), body, config=config)
    return _text(outcomes, config)


def _text(outcomes: Sequence[InitOutcome], config: str) -> str:
    lines: list[str] = []
    for outcome in outcomes:
        head = f"{outcome.host}  {outcome.destination}" if outcome.destination != outcome.host else outcome.host
        if outcome.state == KEPT:
            lines.append(f"{head}: kept: {config} already has [hosts.{outcome.host}] (--force replaces it)")
        elif outcome.state == NOT_WRITTEN:
            problem = outcome.entry.problem if outcome.entry else None
            why = f"{problem.kind}: {problem.message}" if problem else "not probed"
            lines.append(f"{head}: not written: {why}")
            if problem and problem.hint:
                lines.append(f"  hint: {problem.hint}")
        else:
            verb = "written to" if outcome.state == WRITTEN else "would be written to (--dry-run)"
            lines += [f"{head}: {verb} {config}:", "", *outcome.table.rstrip("\n").split("\n")]
        lines.append("")
    ready = [o.host for o in outcomes if o.state in (WRITTEN, KEPT)]
    if ready:
        names = " ".join(shlex.quote(h) for h in ready)
        lines.append(f"next: envdoctor check {names}   (no flags: {config} says what each host's job uses)")
    return "\n".join(lines) + "\n"


def _host_json(outcome: InitOutcome) -> dict[str, Any]:
    data: dict[str, Any] = {"host": outcome.host, "destination": outcome.destination, "state": outcome.state}
    entry = outcome.entry
    if outcome.table:
        data["table"] = outcome.table
    if entry is None:
        return data
    if entry.problem is not None:
        data["problem"] = {"kind": entry.problem.kind, "message": entry.problem.message, "hint": entry.problem.hint}
        return data
    data.update(
        venv=entry.choice.env.prefix if entry.choice else None,
        candidates=[c.describe() for c in ([entry.choice] if entry.choice else []) + list(entry.others)],
        other_environments=list(entry.unranked),
        system_interpreter=(entry.system.executable or entry.system.python) if entry.system else None,
        models=[{"path": m.path, "model_type": m.model_type or None, "repo": m.repo or None,
                 "weight_files": m.weight_files} for m in entry.models],
        model_search={"searched": list(entry.searched), "stopped": entry.search_note or None},
        gpus=entry.gpus, gpu_note=entry.gpu_note,
    )
    return data
