"""The known-good provider of a pair: the version the consumer's own metadata pins, installed
in another environment of the host (``probe/host/drift/baseline.py`` finds it, the drift section
summarizes the modules the pair's uses reach there).

An error that also fails against that version is not news about this upgrade: it becomes a
warning. One that resolves there and breaks here stays an error and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The severities of a drift finding (judge.py adds "unresolved").
ERROR, WARN = "error", "warn"


@dataclass(frozen=True)
class KnownGood:
    consumer: str
    consumer_version: str
    provider: str
    version: str
    prefix: str
    requirement: str
    extra: str = ""

    @classmethod
    def from_section(cls, item: Mapping[str, Any], consumer_version: str) -> KnownGood:
        return cls(str(item.get("consumer", "")), consumer_version, str(item.get("provider", "")),
                   str(item.get("version", "")), str(item.get("prefix", "")), str(item.get("requirement", "")),
                   str(item.get("extra") or ""))

    @property
    def pinned_by(self) -> str:
        return f"{self.consumer}{f' [{self.extra}]' if self.extra else ''}"

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "prefix": self.prefix, "requirement": self.requirement,
                "extra": self.extra or None}

    def describe(self) -> str:
        return (f"{self.provider} {self.version} in {self.prefix} ({self.pinned_by} requires "
                f"{self.requirement.split(';')[0].strip()})")

    def regrade(self, why: str, there: tuple[str, str, str] | None, installed: str) -> tuple[str, str]:
        """(severity, why) of an error here, given the verdict on the same use against the
        known-good version (None: it fits there)."""
        if there is None:
            return ERROR, (f"{why}; resolves against {self.provider} {self.version} (pinned by {self.pinned_by}); "
                           f"breaks against {installed}")
        if there[0] == ERROR:
            return WARN, (f"{why}; also fails against {self.provider} {self.version}, the version "
                          f"{self.consumer} names")
        return ERROR, why  # not resolved there either: nothing to tell


def view(data: Mapping[str, Any], item: Mapping[str, Any]) -> dict[str, Any]:
    """The section's data as the known-good environment would have answered it for one pair."""
    modules = item.get("modules")
    return {"modules": modules if isinstance(modules, dict) else {}, "import_names": data.get("import_names") or {},
            "providers": {str(item.get("provider", "")): {"version": item.get("version", "")}}}
