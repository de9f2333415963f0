"""Fold per-node JSON reports into one fleet report.

A 5,000-node cluster does not run envdoctor from one controller: each node runs
``envdoctor check local --format json`` as its own gate (a Slurm prolog, a Kubernetes init
container) and the scheduler collects the files. ``envdoctor merge`` reads them back into
one :class:`FleetReport`, so the same text, JSON and JUnit renderers apply, and groups the
hosts by what differs between them: the healthy majority is one line, each distinct set of
problems is another, naming its hosts.

Reports are untrusted input (a node may be broken in any way): each file is bounded in
size, parsed, checked for the report's shape, and a file that is not a report is an error
that names it, never a traceback.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envdoctor.engine.results import CheckResult, Remedy, Status
from envdoctor.errors import UsageError
from envdoctor.inventory import HostSpec
from envdoctor.operations.fleet import Action, FleetReport, HostReport

#: A node's report is a few hundred KB at most; a bigger file is not one of ours.
MAX_REPORT_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 64


@dataclass(frozen=True)
class Outcome:
    """What one host's report says about one check, as far as grouping cares."""

    check_id: str
    status: str

    def __str__(self) -> str:
        return f"{self.check_id} {self.status}"


@dataclass(frozen=True)
class HostGroup:
    """Hosts whose reports have the same problems (the same checks not passing, same status)."""

    hosts: tuple[str, ...]
    differs: tuple[Outcome, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "hosts": list(self.hosts),
            "count": len(self.hosts),
            "differs": [{"id": o.check_id, "status": o.status} for o in self.differs],
        }


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of a parsed JSON value, giving up past ``limit``."""
    stack = [(value, 1)]
    deepest = 0
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def _refuse_unless_regular(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a regular file")
        raise UsageError(f"{path} is {kind}, not a report file; give the files written by --format json")


def read_report_bytes(path: Path) -> bytes:
    """The bytes of a report file: a regular file only, opened without blocking (a FIFO named
    ``x.json`` would hang the merge, a link to ``/dev/zero`` would never end), and never more
    than MAX_REPORT_BYTES however its size changes while it is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        try:  # (a socket cannot be opened at all: say what it is)
            _refuse_unless_regular(path, os.stat(path))
        except OSError:
            pass
        raise UsageError(f"cannot read report {path}: {exc.strerror}") from None
    try:
        _refuse_unless_regular(path, os.fstat(fd))
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_REPORT_BYTES:
            chunk = os.read(fd, min(1 << 20, MAX_REPORT_BYTES + 1 - size))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
        raise UsageError(f"{path}: more than {MAX_REPORT_BYTES} bytes is too large for an envdoctor report")
    except OSError as exc:
        raise UsageError(f"cannot read report {path}: {exc.strerror}") from None
    finally:
        os.close(fd)


def read_report(path: Path) -> dict[str, Any]:
    """One report file, parsed and checked for the shape ``check --format json`` writes."""
    try:
        text = read_report_bytes(path).decode("utf-8")
        data = json.loads(text)
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text; give the JSON written by --format json") from None
    except RecursionError:
        raise UsageError(f"{path} is nested too deeply to be an envdoctor report") from None
    except ValueError as exc:
        raise UsageError(f"{path} is not JSON ({exc}); give the output of --format json") from None
    if _depth(data, MAX_DEPTH) > MAX_DEPTH:
        raise UsageError(f"{path} is nested too deeply to be an envdoctor report")
    if not isinstance(data, dict) or not isinstance(data.get("hosts"), list):
        raise UsageError(f"{path} is not an envdoctor JSON report (no \"hosts\" list)",
                         hint="merge reads the files written by `envdoctor check --format json`")
    return data


def _text(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _remedy(data: Any) -> Remedy | None:
    if not isinstance(data, Mapping):
        return None
    argv = data.get("argv")
    return Remedy(
        summary=_text(data.get("summary")),
        argv=tuple(a for a in argv if isinstance(a, str)) if isinstance(argv, list) else (),
        kind=_text(data.get("kind"), "command"),
        automatic=bool(data.get("automatic", False)),
    )


def _status(value: Any, where: str) -> Status:
    try:
        return Status(value)
    except ValueError:
        raise UsageError(f"{where}: unknown status {value!r}") from None


def _result(data: Any, where: str) -> CheckResult:
    if not isinstance(data, Mapping) or not isinstance(data.get("id"), str):
        raise UsageError(f"{where}: a result without an \"id\"")
    details = data.get("details")
    return CheckResult(
        id=data["id"],
        status=_status(data.get("status"), f"{where} ({data['id']})"),
        message=_text(data.get("message")),
        title=_text(data.get("title")),
        why=_text(data.get("why")),
        remedy=_remedy(data.get("remedy")),
        blocked_by=_text(data.get("blocked_by")) or None,
        details=details if isinstance(details, Mapping) else {},
    )


def _action(data: Any) -> Action:
    data = data if isinstance(data, Mapping) else {}
    status = data.get("exit_status")
    return Action(
        check_id=_text(data.get("check")),
        summary=_text(data.get("summary")),
        command=_text(data.get("command")),
        exit_status=status if isinstance(status, int) and not isinstance(status, bool) else None,
        output=_text(data.get("output")),
        diff=_text(data.get("diff")),
    )


def _host(data: Any, where: str, node: str) -> HostReport:
    if not isinstance(data, Mapping) or not isinstance(data.get("host"), str):
        raise UsageError(f"{where}: a host entry without a \"host\" name")
    # A node-local gate names itself "local": the file's name is what tells the nodes apart.
    name = node if data["host"] == "local" else data["host"]
    where = f"{where} ({name})"
    results = data.get("results")
    if not isinstance(results, list):
        raise UsageError(f"{where}: no \"results\" list")
    before = data.get("before")
    return HostReport(
        HostSpec(name=name, ssh=None, venv=_text(data.get("venv")) or None),
        [_result(r, where) for r in results],
        before=[_result(r, where) for r in before] if isinstance(before, list) else None,
        actions=[_action(a) for a in data.get("actions") or [] if isinstance(a, Mapping)],
    )


def merge_reports(paths: Sequence[Path]) -> FleetReport:
    """One fleet report from per-node reports; a host named twice is a usage error."""
    hosts: list[HostReport] = []
    seen: dict[str, Path] = {}
    for path in paths:
        data = read_report(path)
        for entry in data["hosts"]:
            host = _host(entry, str(path), node=path.stem)
            name = host.spec.name
            if name in seen:
                raise UsageError(f"host {name} is in both {seen[name]} and {path}",
                                 hint="give each node's report once (name the files after the nodes)")
            seen[name] = path
            hosts.append(host)
    hosts.sort(key=lambda h: h.spec.name)
    return FleetReport("merge", hosts)


def _outcomes(host: HostReport) -> frozenset[Outcome]:
    return frozenset(Outcome(r.id, str(r.status)) for r in host.results if r.status is not Status.PASS)


def common_outcomes(hosts: Sequence[HostReport]) -> tuple[Outcome, ...]:
    """Outcomes other than pass that every host shares (they are not what differs)."""
    if not hosts:
        return ()
    shared = frozenset.intersection(*(_outcomes(h) for h in hosts))
    return tuple(sorted(shared, key=str))


def group_hosts(hosts: Sequence[HostReport]) -> list[HostGroup]:
    """Hosts grouped by the outcomes, other than pass and other than those every host shares,
    that they have; the largest group first."""
    common = set(common_outcomes(hosts))
    groups: dict[tuple[Outcome, ...], list[str]] = {}
    for host in hosts:
        key = tuple(sorted(_outcomes(host) - common, key=str))
        groups.setdefault(key, []).append(host.spec.name)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), [str(o) for o in kv[0]]))
    return [HostGroup(tuple(names), key) for key, names in ordered]


def render_groups_text(groups: Sequence[HostGroup], common: Sequence[Outcome] = (), *, show: int = 8) -> str:
    lines = [f"{sum(len(g.hosts) for g in groups)} hosts in {len(groups)} group(s) by what differs"]
    if common:
        lines[0] += f" (every host: {'; '.join(str(o) for o in common)})"
    lines[0] += ":"
    for group in groups:
        names = ", ".join(group.hosts[:show]) + (f", ... (+{len(group.hosts) - show})" if len(group.hosts) > show else "")
        what = "; ".join(str(o) for o in group.differs) or "nothing beyond what every host shares"
        lines.append(f"  {len(group.hosts):>5} host(s): {what}")
        lines.append(f"         {names}")
    return "\n".join(lines) + "\n"
