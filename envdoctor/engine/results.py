"""Results are values: what a check found, and what would fix it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
        return self in _PROBLEMS


_PROBLEMS = frozenset({Status.FAIL, Status.BLOCKED, Status.ERROR})



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
    #: For a remedy fix holds back for lack of consent or of a setting: the options that would
    #: let fix apply it (``--trust-remote-code``, ``--require 'pycairo>=1.16.0'``). Empty when
    #: it is by hand whatever the options (a downgrade, a file to copy).
    unlocked_by: str = ""

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
        if self.unlocked_by:
            data["unlocked_by"] = self.unlocked_by
        return data


#: Separates a check id from the subject of one of its findings: ``model.code-imports:tiktoken``.
SUBJECT_SEPARATOR = ":"


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome on one host.

    A check that finds several things about different subjects (each import a model's code
    lacks, each file it misses) returns them as ``findings``, each with its ``subject``: the
    engine reports each as a result of its own, id ``CHECK:SUBJECT``, waivable on its own
    (``--skip model.code-imports:tiktoken``); the check's own result stands for them all to
    the checks that require it.
    """

    id: str
    status: Status
    message: str
    title: str = ""
    #: Why this matters to the job that will run on the host.
    why: str = ""
    remedy: Remedy | None = None
    blocked_by: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    #: What this finding is about, for one of several findings of a check (see the class).
    subject: str = ""
    findings: tuple[CheckResult, ...] = ()

    @property
    def check_id(self) -> str:
        """The check that produced it (the id without its subject)."""
        return self.id.partition(SUBJECT_SEPARATOR)[0] if self.subject else self.id

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "status": str(self.status),
            "message": self.message,
            "title": self.title,
        }
        if self.subject:
            data["check"] = self.check_id
            data["subject"] = self.subject
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


#: Worst first: which finding's status a check with several stands for.
_SEVERITY = {Status.ERROR: 5, Status.FAIL: 4, Status.BLOCKED: 3, Status.WARN: 2, Status.PASS: 1, Status.WAIVED: 1,
             Status.SKIPPED: 0}


def worst(results: Sequence[CheckResult]) -> CheckResult:
    """The result whose status is the most serious (the first of equals)."""
    return max(results, key=lambda r: _SEVERITY[r.status])


def by_subject(findings: Sequence[CheckResult], **details: Any) -> CheckResult:
    """One result standing for several findings, each with its ``subject`` (see CheckResult):
    the worst status, and each finding's message on its own line."""
    if not findings:
        raise ValueError("by_subject needs at least one finding")
    top = worst(findings)
    message = "; ".join(f"{f.subject}: {f.message}" for f in findings)
    return CheckResult("", top.status, message, why=top.why, details=details, findings=tuple(findings))


def about(subject: str, result: CheckResult) -> CheckResult:
    """``result`` as the finding about ``subject`` (one of several: see :func:`by_subject`)."""
    from dataclasses import replace

    return replace(result, subject=subject)


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
