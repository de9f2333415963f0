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

from envdoctor.probe import shared_answers

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
    limit here either. It runs on every value of every host's answer, so the path of a value
    is kept as a chain of (parent, step) tuples and written out only for a mismatch, and a
    list of plain values (``[str]``) is checked in one loop."""
    stack: list[tuple[Any, Any, Any]] = [(value, schema, (None, where))]
    seen = 0
    while stack:
        value, schema, path = stack.pop()
        seen += 1
        if seen > MAX_ITEMS:
            raise SchemaMismatch(f"{_path(path)}: more than {MAX_ITEMS} values")
        if schema is Any:
            continue
        if isinstance(schema, tuple):
            matched = [s for s in schema if _matches_outer(value, s)]
            if not matched:
                raise SchemaMismatch(f"{_path(path)}: expected {_name(schema)}, got {type(value).__name__}")
            stack.append((value, matched[0], path))
            continue
        if isinstance(schema, list):
            if not isinstance(value, list):
                raise SchemaMismatch(f"{_path(path)}: expected a list, got {type(value).__name__}")
            item_schema = schema[0]
            if item_schema in _PLAIN:
                seen += len(value)
                if seen > MAX_ITEMS:
                    raise SchemaMismatch(f"{_path(path)}: more than {MAX_ITEMS} values")
                for i, item in enumerate(value):
                    if not _matches_outer(item, item_schema):
                        raise SchemaMismatch(f"{_path((path, ('[', i)))}: expected {_name(item_schema)}, "
                                             f"got {type(item).__name__}")
                continue
            stack.extend((item, item_schema, (path, ("[", i))) for i, item in enumerate(value))
            continue
        if isinstance(schema, Keys):
            if not isinstance(value, dict):
                raise SchemaMismatch(f"{_path(path)}: expected an object, got {type(value).__name__}")
            plain, nested = _split(schema)
            for k, types in plain:
                if k in value:
                    item = value[k]
                    if not isinstance(item, types) or (item.__class__ is bool and bool not in types):
                        raise SchemaMismatch(f"{_path((path, ('.', k)))}: expected {_name(schema.keys[k])}, "
                                             f"got {type(item).__name__}")
            seen += len(plain)
            stack.extend((value[k], s, (path, (".", k))) for k, s in nested if k in value)
            continue
        if isinstance(schema, MapOf):
            if not isinstance(value, dict):
                raise SchemaMismatch(f"{_path(path)}: expected an object, got {type(value).__name__}")
            stack.extend((v, schema.value, (path, ("[r", k))) for k, v in value.items())
            continue
        if not _matches_outer(value, schema):
            raise SchemaMismatch(f"{_path(path)}: expected {_name(schema)}, got {type(value).__name__}")


#: Schemas whose values are checked in place, without a stack entry each.
_PLAIN = (str, int, bool, dict, float)
_SPLITS: dict[int, tuple[tuple[tuple[str, tuple[type, ...]], ...], tuple[tuple[str, Any], ...]]] = {}


def _plain_types(schema: Any) -> tuple[type, ...] | None:
    """The isinstance() types of a schema made only of plain types (None otherwise). A bool
    is an int to isinstance: check_shape refuses a bool where bool is not among the types."""
    options = schema if isinstance(schema, tuple) else (schema,)
    if not all(o in _PLAIN or o is NONE for o in options):
        return None
    types = tuple(dict.fromkeys((int, float) if o is float else (o,) for o in options))
    return tuple(t for group in types for t in group)


def _split(schema: Keys) -> tuple[tuple[tuple[str, tuple[type, ...]], ...], tuple[tuple[str, Any], ...]]:
    """A Keys schema's fields of plain types (checked in place) and the rest (stacked)."""
    found = _SPLITS.get(id(schema))
    if found is None:
        plain, nested = [], []
        for key, sub in schema.keys.items():
            types = _plain_types(sub)
            if types is None:
                nested.append((key, sub))
            else:
                plain.append((key, types))
        found = _SPLITS[id(schema)] = (tuple(plain), tuple(nested))
    return found


def _path(path: Any) -> str:
    """``venvs.envs[3].distributions`` from the chain of steps check_shape keeps."""
    steps = []
    while path is not None:
        path, step = path
        if isinstance(step, str):
            steps.append(step)
        elif step[0] == "[":
            steps.append(f"[{step[1]}]")
        elif step[0] == "[r":
            steps.append(f"[{step[1]!r}]")
        else:
            steps.append(f".{step[1]}")
    return "".join(reversed(steps))


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
    "not_a_venv": TEXT, "static": bool, "foreign": bool, "externally_managed": bool,
    # the host's own resolution of the paths compared (present only where links change them)
    "real_prefix": str, "real_bin": str, "real_executable_dir": str,
})
_PROGRAM = (NONE, Keys({"path": str, "realpath": str, "interpreter": TEXT, "resolved": TEXT, "via": [str],
                        "error": TEXT, "real_dir": str, "interpreter_real_dir": str,
                        "found_in": str}))  # (uv: "PATH", "~/.local/bin" or "~/.cargo/bin")
_MODEL = Keys({
    "path": str, "error": TEXT, "listing": [str], "files": MapOf(dict), "json": MapOf(Any), "json_errors": MapOf(str),
    "ranks": (NONE, dict), "auto_map": [Keys({"from": str, "auto_class": str, "ref": str, "file": str})],
    "code": MapOf(Keys({"source": str, "sha256": str, "size": int, "error": TEXT})), "live": (NONE, dict),
    "cached": bool,  # replayed from the host's cache (probe/host/model/cache.py)
})

_COMMAND = Keys({"status": (int, NONE), "out": str, "err": str, "truncated": bool, "seconds": float})
_TOOLCHAIN = Keys({
    "compilers": MapOf(MapOf(str)), "cc_env": TEXT, "cxx_env": TEXT, "cuda_home": TEXT, "cuda_home_source": TEXT,
    "nvcc": TEXT, "nvcc_on_path": TEXT, "nvcc_version": TEXT, "nvcc_version_source": TEXT, "nvcc_version_output": str,
    "headers": MapOf(TEXT), "ninja": TEXT, "venv_ninja": TEXT, "deep_gemm": TEXT, "pip_nvcc": TEXT,
    "python_h": Keys({"version": TEXT, "path": TEXT, "looked_in": [str]}),
    "torch": (NONE, Keys({"version": TEXT, "cuda": TEXT})),
})
_NODE = Keys({
    "root": TEXT, "nvidia_smi": TEXT, "smi": MapOf(_COMMAND),
    "processes": MapOf(Keys({"exists": bool, "uid": (int, NONE), "user": TEXT, "cmdline": TEXT})),
    "devices": MapOf(Keys({"kind": str, "access": bool})),
    "driver": Keys({"nvidia_loaded": bool, "uvm_loaded": bool, "nvswitches": int}),
    "fabric_manager": (bool, NONE), "xid": (NONE, Keys({"lines": [str], "error": TEXT})),
    "env": MapOf(str), "toolchain": _TOOLCHAIN, "limits": TEXT, "nccl_conf": MapOf(str), "container": [str],
    "shm": Keys({"exists": bool, "total": (int, NONE), "free": (int, NONE),
                 "mount": (NONE, Keys({"source": str, "fstype": str, "options": str}))}),
    "net": (NONE, MapOf(Keys({"operstate": TEXT}))),
    "infiniband": MapOf(Keys({"ports": MapOf(Keys({"state": TEXT, "link_layer": TEXT}))})),
    "libnccl": [Keys({"path": str, "version": str})], "seconds": float,
})
_DIST_DIGEST = Keys({"name": str, "version": str, "digest": TEXT, "files": int, "modified": [str], "missing": [str],
                     "modified_count": int, "missing_count": int, "unhashed": int, "record": str})
_MODEL_DIGEST = Keys({"path": str, "error": TEXT, "truncated": bool,
                      "files": MapOf(Keys({"kind": str, "size": (int, NONE), "hash": TEXT}))})

#: Section name -> the schema of its ``data``.
SECTION_SCHEMAS: dict[str, Any] = {
    "host": Keys({"hostname": str, "path_env": str, "on_path": MapOf(_PROGRAM), "uv": _PROGRAM,
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
    "node": _NODE,
    "system": Keys({"os": dict, "machine": str, "kernel": str, "libc": dict, "python": dict, "cpu": dict,
                    "memory": dict, "limits": MapOf(list), "cuda_toolkit": dict,
                    "environment": Keys({"vars": MapOf(str), "masked": [str]}),
                    "topology": Keys({"text": TEXT, "error": TEXT})}),
    "digests": Keys({"prefix": str, "distributions": [_DIST_DIGEST], "models": [_MODEL_DIGEST]}),
    "model-search": Keys({"models": [Keys({"path": str, "source": str, "repo": str, "model_type": str,
                                           "architectures": [str], "auto_map": bool, "config_error": str,
                                           "tokenizer_files": [str], "weight_files": int})],
                          "searched": [str], "visited": int, "truncated": str}),
    "architecture": Keys({"engines": MapOf(Keys({"version": str, "error": TEXT, "config_types": MapOf(TEXT),
                                                 "models": MapOf(MapOf(Any)), "classes": MapOf(bool),
                                                 "architectures": MapOf((NONE, [str], str)),
                                                 "previously": MapOf(str), "transformers_backend": bool})),
                          "models": MapOf(Keys({"model_types": [str], "architectures": [str]})), "cache": str}),
    "wheel-tags": Keys({"prefix": str, "interpreter": dict, "site_packages": [str], "truncated": bool,
                        "distributions": [Keys({"path": str, "name": str, "version": str, "requires_python": TEXT,
                                                "tags": (NONE, [str]), "error": TEXT})]}),
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
        if not shared_answers.memo(f"conforms {name}", data, lambda d: conforms(d, schema)):
            try:
                check_shape(data, schema, name)
            except SchemaMismatch as exc:
                problems.append(str(exc))
    for name, found in items.items():
        schema = [ITEM_SCHEMAS.get(name, Any)]
        if not conforms(found, schema):
            try:
                check_shape(found, schema, f"{name} items")
            except SchemaMismatch as exc:
                problems.append(str(exc))
    return problems


# A fast yes for answers that conform, which is every answer of an honest probe. JSON
# gives values of exactly these types, so a check of the exact type (one set lookup, or one
# set of the types of a whole list) is enough; anything else (a subclass, a mismatch, an
# answer near MAX_ITEMS) is decided by check_shape, which also says where it went wrong.
# Each test returns how many values it looked at, at least what check_shape counts, or -1.

_TESTS: dict[int, tuple[Any, Any]] = {}


def conforms(value: Any, schema: Any) -> bool:
    """True only if check_shape(value, schema) would pass (False: ask check_shape)."""
    seen = _test(schema)(value)
    return 0 <= seen <= MAX_ITEMS // 2


def _exact_types(schema: Any) -> frozenset[type] | None:
    """The classes of the JSON values a plain schema accepts: check_shape's isinstance types,
    compared exactly (JSON gives no subclasses, and a bool is not an int there either)."""
    types = _plain_types(schema)
    return None if types is None else frozenset(types)


def _test(schema: Any) -> Any:
    found = _TESTS.get(id(schema))
    if found is None or found[0] is not schema:
        found = _TESTS[id(schema)] = (schema, _build_test(schema))  # (the schema kept: its id stays unique)
    return found[1]


def _build_test(schema: Any) -> Any:
    if schema is Any:
        return lambda value: 1
    exact = _exact_types(schema)
    if exact is not None:
        return lambda value: 1 if value.__class__ in exact else -1
    if isinstance(schema, tuple):
        options = [(_outer_types(s), _test(s)) for s in schema]

        def first_match(value: Any) -> int:
            for outer, test in options:
                if outer is None or value.__class__ in outer:
                    seen = test(value)
                    return -1 if seen < 0 else seen + 2
            return -1
        return first_match
    if isinstance(schema, list):
        item_exact = _exact_types(schema[0])
        if item_exact is not None:
            def plain_list(value: Any) -> int:
                if value.__class__ is not list or not set(map(type, value)) <= item_exact:
                    return -1
                return len(value) + 1
            return plain_list
        item_test = _test(schema[0])
        return lambda value: _sum_all(item_test, value) if value.__class__ is list else -1
    if isinstance(schema, MapOf):
        item_exact = _exact_types(schema.value)
        if item_exact is not None:
            return lambda value: (len(value) + 1 if value.__class__ is dict
                                  and set(map(type, value.values())) <= item_exact else -1)
        item_test = _test(schema.value)
        return lambda value: _sum_all(item_test, value.values()) if value.__class__ is dict else -1
    if isinstance(schema, Keys):
        plain = [(k, _exact_types(s)) for k, s in schema.keys.items()]
        nested = [(k, _test(s)) for (k, s), (_, e) in zip(schema.keys.items(), plain) if e is None]
        plain = [(k, e) for k, e in plain if e is not None]
        base = 1 + len(plain)

        def keys(value: Any) -> int:
            if value.__class__ is not dict:
                return -1
            for k, exact in plain:
                if k in value and value[k].__class__ not in exact:
                    return -1
            seen = base
            for k, test in nested:
                if k in value:
                    found = test(value[k])
                    if found < 0:
                        return -1
                    seen += found
            return seen
        return keys
    return lambda value: -1  # a schema this fast path does not know: check_shape decides


def _outer_types(schema: Any) -> frozenset[type] | None:
    """The exact types check_shape's first-match of a tuple would accept for this option."""
    if schema is Any:
        return None
    if isinstance(schema, list):
        return frozenset({list})
    if isinstance(schema, (Keys, MapOf)):
        return frozenset({dict})
    if isinstance(schema, tuple):
        parts = [_outer_types(s) for s in schema]
        return None if any(p is None for p in parts) else frozenset(t for p in parts for t in p)
    return _exact_types(schema) or frozenset()


def _sum_all(test: Any, values: Any) -> int:
    seen = 1
    for item in values:
        found = test(item)
        if found < 0:
            return -1
        seen += found
    return seen
