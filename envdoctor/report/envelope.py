"""The top level every ``--format json`` output shares: ``schema``, ``command``, ``exit_status``.

Programs that read envdoctor's JSON (CI gates, ``envdoctor merge``, dashboards) first look
at these three keys, whatever the command; the command's own keys sit beside them. A
command that reads the inventory also names it: ``"config"``, its absolute path (null when
none was loaded), right after ``exit_status``. Every command builds its JSON through
:func:`json_envelope` (or :func:`dump_json`), so the shape is decided in one place.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any, Final, Literal

from envdoctor import __version__

#: Bumped only when a key that programs rely on changes meaning or disappears.
SCHEMA_VERSION = 1
ENVELOPE_KEYS = ("schema", "envdoctor", "command", "exit_status", "config")


class _NoConfig(enum.Enum):
    NO_CONFIG = "no config"


#: The ``config`` of a command that reads no inventory (scan, merge, checks, patches): no key.
NO_CONFIG: Final = _NoConfig.NO_CONFIG
#: The inventory a command read (None: none was found), or NO_CONFIG.
Config = str | None | Literal[_NoConfig.NO_CONFIG]


def json_envelope(command: str, exit_status: int, body: Mapping[str, Any], *,
                  config: Config = NO_CONFIG) -> dict[str, Any]:
    """``body`` with the envelope keys first; a key of ``body`` never overrides them."""
    clash = [key for key in ENVELOPE_KEYS if key in body]
    if clash:
        raise ValueError(f"the JSON of {command} must not set the envelope's keys {clash}")
    envelope: dict[str, Any] = {"schema": SCHEMA_VERSION, "envdoctor": __version__, "command": command,
                                "exit_status": exit_status}
    if config is not NO_CONFIG:
        envelope["config"] = config
    return {**envelope, **body}


def dump_json(command: str, exit_status: int, body: Mapping[str, Any], *, sort_keys: bool = False,
              config: Config = NO_CONFIG) -> str:
    """The rendered document: indented, one trailing newline."""
    data = json_envelope(command, exit_status, body, config=config)
    if sort_keys:  # envelope first, then the body's keys sorted (facts documents are sorted)
        data = {**{k: data[k] for k in ENVELOPE_KEYS if k in data}, **dict(sorted(body.items()))}
    return indented(data) + "\n"


#: Exact types the C encoder writes as json.dumps(indent=2) would (no subclasses: an IntEnum
#: or a str subclass with its own __str__ goes through json.dumps itself).
_SCALARS = frozenset({str, int, float, bool, type(None)})
_text = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]  # C, when available
_compact = json.JSONEncoder(ensure_ascii=True, allow_nan=True).encode
_CONSTANTS = {True: "true", False: "false", None: "null"}


def _scalar(value: Any) -> str:
    kind = value.__class__
    if kind is str:
        return _text(value)
    if kind is int:
        return int.__repr__(value)
    if kind is bool or value is None:
        return _CONSTANTS[value]
    return _compact(value)  # floats: NaN and Infinity as json writes them


def indented(value: Any, indent: str = "") -> str:
    """``json.dumps(value, indent=2)``, byte for byte, with each container of plain values
    written by the C encoder (json.dumps with an indent is all pure Python: a third of a
    millisecond per host of a fleet report). Anything unusual falls back to json.dumps."""
    kind = value.__class__
    if kind in _SCALARS:
        return _scalar(value)
    inner = indent + "  "
    if kind is dict:
        if not value:
            return "{}"
        if all(k.__class__ is str for k in value):
            parts = [_text(k) + ": " + (_scalar(v) if v.__class__ in _SCALARS else indented(v, inner))
                     for k, v in value.items()]
            return "{\n" + inner + (",\n" + inner).join(parts) + "\n" + indent + "}"
    elif kind is list or kind is tuple:
        if not value:
            return "[]"
        parts = [_scalar(v) if v.__class__ in _SCALARS else indented(v, inner) for v in value]
        return "[\n" + inner + (",\n" + inner).join(parts) + "\n" + indent + "]"
    # Strings never hold a raw newline in JSON, so re-indenting json.dumps's text is exact.
    return json.dumps(value, indent=2).replace("\n", "\n" + indent)
