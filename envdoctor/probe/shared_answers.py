"""Probe answer lines that many hosts send byte for byte alike, decoded and judged once.

The nodes of a fleet built from one image describe the same environments: the ``venvs``
line (every distribution of every environment, tens of kilobytes) is the same bytes on
each. Decoding it, checking its shape and building its typed view cost about a millisecond
per host, the largest share of the controller's own work at 1,000 hosts. A line seen before
is looked up by its bytes (equal bytes, not only an equal hash), so a host whose line
differs in a single byte gets its own decoding, as before.

What is shared is never modified: the facts copy what they keep into frozen values, and
only the sections listed in ``SHAREABLE`` (read by nothing else) are shared. Memos on a
shared object are keyed by its identity, and the object itself is kept alive here while
the memo lasts, so an identity can never be reused by another object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: Sections whose data only the schema check, the typed facts and pure readers read (the
#: wheel-tags section: every distribution's WHEEL tags, judged by packages.tags).
SHAREABLE = frozenset({"venvs", "wheel-tags"})
#: Shorter lines are decoded each time: looking them up would save nothing.
MIN_BYTES = 4096
#: Distinct shared lines kept at once (a fleet of a few images has a few).
MAX_LINES = 32

_LINES: dict[bytes, dict[str, Any]] = {}
#: id -> object, for every object inside a shared record that a memo may be keyed on.
_OWNED: dict[int, Any] = {}
_MEMOS: dict[tuple[str, int], Any] = {}


def known_record(raw: bytes) -> dict[str, Any] | None:
    """The record decoded from these exact bytes before, if it was shared."""
    return _LINES.get(raw) if len(raw) >= MIN_BYTES else None


def share(raw: bytes, record: dict[str, Any]) -> None:
    """Keep a validated record of a shareable section for the hosts that send it again."""
    if len(raw) < MIN_BYTES or record.get("section") not in SHAREABLE:
        return
    if len(_LINES) >= MAX_LINES:
        clear()
    _LINES[raw] = record
    _own(record.get("data"))


def _own(data: Any) -> None:
    """Register the containers memos are keyed on: the section's data and each environment."""
    if not isinstance(data, dict):
        return
    _OWNED[id(data)] = data
    for env in [data.get("default"), *(data.get("envs") or ())]:
        if isinstance(env, dict):
            _OWNED[id(env)] = env


def memo(kind: str, obj: Any, make: Callable[[Any], T]) -> T:
    """``make(obj)``, once per shared ``obj`` (every time for anything else)."""
    if _OWNED.get(id(obj)) is not obj:
        return make(obj)
    key = (kind, id(obj))
    try:
        return _MEMOS[key]
    except KeyError:
        made = _MEMOS[key] = make(obj)
        return made


def clear() -> None:
    _LINES.clear()
    _OWNED.clear()
    _MEMOS.clear()
