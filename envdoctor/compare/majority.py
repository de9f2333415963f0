"""Hosts compared item by item: the value most of them have, and the hosts that differ.

Pure. A host whose value is unknown (None) is left out of that item's count and named
apart; it is never a difference. Two values held by as many hosts each are a tie: the
value of the first host given (in the order of the command line or the group) stands as the
majority, and the tie is said. ``--ignore PATTERN`` (fnmatch, on the item's key) keeps a
difference in the report without failing the run.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envdoctor.compare.have import Have, category


@dataclass(frozen=True)
class Other:
    """A host whose value of an item is not the majority's."""

    host: str
    value: str
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "value": self.value, **({"detail": self.detail} if self.detail else {})}


@dataclass(frozen=True)
class Difference:
    key: str
    majority: str
    holders: tuple[str, ...]
    others: tuple[Other, ...]
    unknown: tuple[str, ...] = ()
    tie: bool = False
    ignored: bool = False

    @property
    def category(self) -> str:
        return category(self.key)

    @property
    def of(self) -> int:
        return len(self.holders) + len(self.others)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"item": self.key, "category": self.category, "majority": self.majority,
                                "hosts_with_majority": list(self.holders), "of": self.of,
                                "differs": [o.to_json() for o in self.others]}
        if self.unknown:
            data["unknown"] = list(self.unknown)
        if self.tie:
            data["tie"] = True
        if self.ignored:
            data["ignored"] = True
        return data


@dataclass(frozen=True)
class Comparison:
    hosts: tuple[str, ...]
    compared: int
    differences: tuple[Difference, ...]
    #: Items some host could not tell (key -> those hosts), when the others agree.
    unknown: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Nothing the job depends on differs (ignored items aside)."""
        return not any(not d.ignored for d in self.differences)

    def differs_on(self, host: str) -> list[Difference]:
        """The items where ``host`` does not have the majority's value (ignored ones too)."""
        return [d for d in self.differences if any(o.host == host for o in d.others)]


def compare(haves: Sequence[tuple[str, Have]], ignore: Sequence[str] = ()) -> Comparison:
    """Every item any host has, compared across ``haves`` ((host, have) in the order given)."""
    names = tuple(host for host, _ in haves)
    if not haves:
        return Comparison(names, 0, ())
    first = haves[0][1]
    if all(have.items == first.items and have.models == first.models and have.known == first.known
           for _, have in haves[1:]):  # one image: nothing differs (a dict comparison, in C)
        return Comparison(names, len(first.items), (), _unknown(first, names))
    keys = sorted({key for _, have in haves for key in have.items})
    differences = []
    unknown: dict[str, tuple[str, ...]] = {}
    for key in keys:
        found = _item(key, haves, ignore)
        if isinstance(found, Difference):
            differences.append(found)
        elif found:
            unknown[key] = found
    return Comparison(names, len(keys), tuple(differences), unknown)


def _unknown(have: Have, names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    return {key: names for key, value in have.items.items() if value is None}


def _item(key: str, haves: Sequence[tuple[str, Have]], ignore: Sequence[str]) -> Difference | tuple[str, ...]:
    """The item's Difference, or the hosts that could not tell (when the others agree)."""
    by_value: dict[str, list[str]] = {}
    unknown = []
    for host, have in haves:
        value = have.value(key)
        if value is None:
            unknown.append(host)
        else:
            by_value.setdefault(value, []).append(host)
    if len(by_value) <= 1:
        return tuple(unknown)
    counts = sorted(by_value.items(), key=lambda kv: -len(kv[1]))  # stable: the first host's value first on ties
    majority, holders = counts[0]
    tie = len(counts[1][1]) == len(holders)
    details = dict(haves)
    others = tuple(Other(host, value, details[host].details.get(key, ""))
                   for value, hosts in counts[1:] for host in hosts)
    return Difference(key, majority, tuple(holders), others, tuple(unknown), tie,
                      any(fnmatch.fnmatchcase(key, pattern) for pattern in ignore))
