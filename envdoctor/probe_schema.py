"""The shape each probe section's answer must have, checked before any of it is used.

A host may be compromised: its probe answer is untrusted input. ``{"section": "host",
"data": [1]}`` must become that host's ``error`` result with a message naming the section
and the place, never an AttributeError that takes the run down. Only the keys the
controller reads are described; other keys pass (newer probes may add some).

A schema is a type (``str``, ``int``, ``bool``, ``dict``, ``list``), a tuple of schemas (any
of them), ``[schema]`` (a list of such items), a :class:`Keys` (a mapping whose listed keys,
when present, match) or a :class:`MapOf` (a mapping of string keys to such values).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

NONE = type(None)
TEXT = (str, NONE)
#: Lists longer than this in one section are refused: a host cannot make us walk forever.
MAX_ITEMS = 1_000_000


@dataclass(frozen=True)
class Keys:
    keys: Mapping[str, Any]


@dataclass(frozen=True)
class MapOf:
    value: Any


class SchemaMismatch(ValueError):
    """The answer does not have the shape of its schema; the message says where."""


def check_shape(value: Any, schema: Any, where: str) -> None:
    """Raise SchemaMismatch naming ``where`` (a path like ``venvs.envs[3].distributions``).

    Iterative (an explicit stack), so a deeply nested answer cannot exhaust the recursion
    limit here either."""
    stack = [(value, schema, where)]
    seen = 0
    while stack:
        value, schema, where = stack.pop()
        seen += 1
        if seen > MAX_ITEMS:
            raise SchemaMismatch(f"{where}: more than {MAX_ITEMS} values")
        if schema is Any:
            continue
        if isinstance(schema, tuple):
            matched = [s for s in schema if _matches_outer(value, s)]
            if not matched:
                raise SchemaMismatch(f"{where}: expected {_name(schema)}, got {type(value).__name__}")
            stack.append((value, matched[0], where))
            continue
        if isinstance(schema, list):
            if not isinstance(value, list):
                raise SchemaMismatch(f"{where}: expected a list, got {type(value).__name__}")
            stack.extend((item, schema[0], f"{where}[{i}]") for i, item in enumerate(value))
            continue
        if isinstance(schema, Keys):
            if not isinstance(value, dict):
                raise SchemaMismatch(f"{where}: expected an object, got {type(value).__name__}")
            stack.extend((value[k], s, f"{where}.{k}") for k, s in schema.keys.items() if k in value)
            continue
        if isinstance(schema, MapOf):
            if not isinstance(value, dict):
                raise SchemaMismatch(f"{where}: expected an object, got {type(value).__name__}")
            stack.extend((v, schema.value, f"{where}[{k!r}]") for k, v in value.items())
            continue
        if not _matches_outer(value, schema):
            raise SchemaMismatch(f"{where}: expected {_name(schema)}, got {type(value).__name__}")


def _matches_outer(value: Any, schema: Any) -> bool:
    if schema is Any:
        return True
    if isinstance(schema, list):
        return isinstance(value, list)
    if isinstance(schema, (Keys, MapOf)):
        return isinstance(value, dict)
    if isinstance(schema, tuple):
        return any(_matches_outer(value, s) for s in schema)
    if schema is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if schema is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, schema)


def _name(schema: Any) -> str:
    if isinstance(schema, tuple):
        return " or ".join(_name(s) for s in schema)
    if isinstance(schema, list):
        return "a list"
    if isinstance(schema, (Keys, MapOf)):
        return "an object"
    return "null" if schema is NONE else getattr(schema, "__name__", str(schema))


_DISTRIBUTION = Keys({"name": str, "version": str, "requires": [str], "path": str, "site": str, "kind": str,
                      "active": bool, "error": TEXT})
_ENVIRONMENT = Keys({
    "prefix": str, "python": str, "exists": bool, "runs": bool, "error": TEXT, "version": str, "executable": str,
    "base_prefix": str, "markers": MapOf(str), "site_packages": [str], "distributions": [_DISTRIBUTION],
    "not_a_venv": TEXT, "static": bool, "foreign": bool,
})
_PROGRAM = (NONE, Keys({"path": str, "realpath": str, "interpreter": TEXT, "resolved": TEXT, "via": [str],
                        "error": TEXT}))
_MODEL = Keys({
    "path": str, "error": TEXT, "listing": [str], "files": MapOf(dict), "json": MapOf(Any), "json_errors": MapOf(str),
    "ranks": (NONE, dict), "auto_map": [Keys({"from": str, "auto_class": str, "ref": str, "file": str})],
    "code": MapOf(Keys({"source": str, "sha256": str, "size": int, "error": TEXT})), "live": (NONE, dict),
})

#: Section name -> the schema of its ``data``.
SECTION_SCHEMAS: dict[str, Any] = {
    "host": Keys({"hostname": str, "path_env": str, "on_path": MapOf(_PROGRAM),
                  "gpu": Keys({"gpus": [str], "error": TEXT}), "disk": MapOf(MapOf(Any))}),
    "venvs": Keys({"configured": [str], "discovered": [str], "envs": [_ENVIRONMENT],
                   "default": (NONE, _ENVIRONMENT)}),
    "models": [_MODEL],
    "patch_files": Keys({"prefix": str, "files": [Keys({"distribution": str, "path": str, "site": TEXT,
                                                         "file": str, "data": str, "error": TEXT})],
                         "ledger": [str], "error": TEXT}),
    "patch-ledger": Keys({"prefix": str, "path": str, "exists": bool, "lines": [str], "files": MapOf(dict)}),
    "sources": Keys({"site_packages": [str], "distributions": [dict], "not_found": [str], "skipped": [dict]}),
    "audit": dict,
}
#: Streamed items (``{"section", "item"}`` lines) of the sections that stream.
ITEM_SCHEMAS: dict[str, Any] = {
    "sources": Keys({"distribution": str, "version": str, "site": str, "path": str, "data": str}),
    "audit": dict,
}


def section_problems(sections: Mapping[str, Any], items: Mapping[str, list[Any]],
                     errors: Mapping[str, Any]) -> list[str]:
    """A sentence for each part of a probe answer that does not have its schema's shape."""
    problems = []
    for name, error in errors.items():
        if not isinstance(error, str):
            problems.append(f"section {name!r}: its error is a {type(error).__name__}, not text")
    for name, data in sections.items():
        schema = SECTION_SCHEMAS.get(name, Any)
        try:
            check_shape(data, schema, name)
        except SchemaMismatch as exc:
            problems.append(str(exc))
    for name, found in items.items():
        try:
            check_shape(found, [ITEM_SCHEMAS.get(name, Any)], f"{name} items")
        except SchemaMismatch as exc:
            problems.append(str(exc))
    return problems
