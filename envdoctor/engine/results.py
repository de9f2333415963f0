"""Results are values: what a check found, and what would fix it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from envdoctor.transport.interface import shell_join


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    BLOCKED = "blocked"
    SKIPPED = "skipped"
    ERROR = "error"
    #: The user waived the check (``--skip ID`` or ``skip`` in envdoctor.toml): it still runs
    #: and says what it found, but never fails the run.
    WAIVED = "waived"

    @property
    def is_problem(self) -> bool:
        """Whether this status makes the run exit 1."""
        return self in (Status.FAIL, Status.BLOCKED, Status.ERROR)



@dataclass(frozen=True)
class Remedy:
    """What fixes a failing check.

    ``kind`` names the runner that applies it (``command`` runs ``argv`` on the host; other
    kinds, such as ``patch``, are registered by the modules that implement them).
    ``automatic`` is False for fixes that ``fix`` must not apply by itself (a downgrade
    other packages may rely on, anything destructive): they are shown, never run.
    """

    summary: str
    argv: tuple[str, ...] = ()
    kind: str = "command"
    automatic: bool = True
    payload: Mapping[str, Any] = field(default_factory=dict)

    @property
    def display(self) -> str:
        """The exact command a person would type, or the summary when there is none."""
        return shell_join(self.argv) if self.argv else self.summary

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": self.kind,
            "summary": self.summary,
            "automatic": self.automatic,
        }
        if self.argv:
            data["argv"] = list(self.argv)
            data["command"] = self.display
        return data


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome on one host."""

    id: str
    status: Status
    message: str
    title: str = ""
    #: Why this matters to the job that will run on the host.
    why: str = ""
    remedy: Remedy | None = None
    blocked_by: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "status": str(self.status),
            "message": self.message,
            "title": self.title,
        }
        if self.why:
            data["why"] = self.why
        if self.remedy is not None:
            data["fix"] = self.remedy.display
            data["remedy"] = self.remedy.to_json()
        if self.blocked_by:
            data["blocked_by"] = self.blocked_by
        if self.details:
            data["details"] = dict(self.details)
        return data


def passed(message: str, **details: Any) -> CheckResult:
    """Shorthand for checks: the engine fills in the id and title."""
    return CheckResult("", Status.PASS, message, details=details)


def warned(message: str, *, why: str = "", remedy: Remedy | None = None, **details: Any) -> CheckResult:
    return CheckResult("", Status.WARN, message, why=why, remedy=remedy, details=details)


def failed(message: str, *, why: str = "", remedy: Remedy | None = None, **details: Any) -> CheckResult:
    return CheckResult("", Status.FAIL, message, why=why, remedy=remedy, details=details)


def skipped(reason: str, **details: Any) -> CheckResult:
    return CheckResult("", Status.SKIPPED, reason, details=details)


def waive(result: CheckResult, reason: str) -> CheckResult:
    """The user's waiver over a check's own outcome: status ``waived``, the reason first, and
    what the check found kept (``waived_status``) so that the report still shows it."""
    from dataclasses import replace

    return replace(
        result, status=Status.WAIVED, message=f"waived ({reason}): {result.status}: {result.message}",
        remedy=None, blocked_by=None,
        details={**result.details, "waived_status": str(result.status), "waiver_reason": reason},
    )


def errored(message: str, *, why: str = "", remedy: Remedy | None = None, **details: Any) -> CheckResult:
    return CheckResult("", Status.ERROR, message, why=why, remedy=remedy, details=details)
