"""The top level every ``--format json`` output shares: ``schema``, ``command``, ``exit_status``.

Programs that read envdoctor's JSON (CI gates, ``envdoctor merge``, dashboards) first look
at these three keys, whatever the command; the command's own keys sit beside them. Every
command builds its JSON through :func:`json_envelope` (or :func:`dump_json`), so the shape
is decided in one place.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from envdoctor import __version__

#: Bumped only when a key that programs rely on changes meaning or disappears.
SCHEMA_VERSION = 1
ENVELOPE_KEYS = ("schema", "envdoctor", "command", "exit_status")


def json_envelope(command: str, exit_status: int, body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` with the envelope keys first; a key of ``body`` never overrides them."""
    clash = [key for key in ENVELOPE_KEYS if key in body]
    if clash:
        raise ValueError(f"the JSON of {command} must not set the envelope's keys {clash}")
    return {"schema": SCHEMA_VERSION, "envdoctor": __version__, "command": command,
            "exit_status": exit_status, **body}


def dump_json(command: str, exit_status: int, body: Mapping[str, Any], *, sort_keys: bool = False) -> str:
    """The rendered document: indented, one trailing newline."""
    data = json_envelope(command, exit_status, body)
    if sort_keys:  # envelope first, then the body's keys sorted (facts documents are sorted)
        data = {**{k: data[k] for k in ENVELOPE_KEYS}, **dict(sorted(body.items()))}
    return json.dumps(data, indent=2) + "\n"
