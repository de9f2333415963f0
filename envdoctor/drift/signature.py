"""Does a call fit a definition? Signatures from the host's summaries, constructors included.

A signature is the probe's ``{"p": [[name, has_default, "p"|"pk"|"k"]], "va", "kw"}``. A
call is its shape: positional count, keyword names, and whether it unpacks ``*`` or ``**``
(then what it passes is unknown, and only what it names explicitly is checked).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envdoctor.probe.host.drift.summaries import DATACLASS_DECORATORS, KEEP_SIGNATURE
from envdoctor.probe.host.drift.resolve import Resolver, Target

Signature = Mapping[str, Any]


@dataclass(frozen=True)
class Callee:
    """What a call runs: a signature (None when it cannot be known), its definition, and why."""

    signature: Signature | None
    module: str
    line: int
    what: str
    drop_first: bool = False
    unknown: str = ""


def call_problems(sig: Signature, call: Mapping[str, Any], drop_first: bool = False) -> list[str]:
    """Why the call does not fit the signature; empty when it does."""
    params = list(sig.get("p", []))
    if drop_first:
        if not params:
            return [] if sig.get("va") else ["takes no arguments at all (not even self)"]
        params = params[1:]
    problems: list[str] = []
    positional = [p for p in params if p[2] in ("p", "pk")]
    count = int(call.get("n", 0))
    if count > len(positional) and not sig.get("va") and not call.get("star"):
        problems.append(f"passes {count} positional arguments; it takes at most {len(positional)}")
    bound = {p[0] for p in positional[:count]}
    keywords = set(call.get("kw", []))
    accepted = {p[0] for p in params if p[2] in ("pk", "k")}
    for keyword in call.get("kw", []):
        if keyword not in accepted and not sig.get("kw"):
            problems.append(f"passes the keyword {keyword}, which it does not accept (and it takes no **kwargs)")
    if not call.get("star") and not call.get("dstar"):
        for name, has_default, _kind in params:
            if not has_default and name not in bound and name not in keywords:
                problems.append(f"misses the required argument {name}")
    return problems


def qualified(resolver: Resolver, module: str, text: str) -> str:
    """The import-qualified name of a dotted name written in `module`, without loading the
    module it comes from (pydantic need not be installed to know its dataclass)."""
    summary = resolver.load(module) or {}
    parts = text.split(".")
    for binding in summary.get("names", {}).get(parts[0], []):
        if binding["k"] == "from":
            return ".".join([binding["mod"], binding["name"], *parts[1:]])
        if binding["k"] == "import":
            return ".".join([binding["mod"], *parts[1:]])
    return text


def _is_dataclass_decorator(resolver: Resolver, module: str, text: str) -> bool:
    name = qualified(resolver, module, text)
    if name in DATACLASS_DECORATORS or name.split(".")[-1] == "dataclass":
        return True
    return any(t.kind == "def" and t.binding.get("dc") for t in resolver.resolve_in(module, text))


def function_callee(resolver: Resolver, target: Target, drop_first: bool = False) -> Callee:
    binding = target.binding
    where = f"{target.name}()"
    if binding.get("raises"):
        return Callee(None, target.module, binding["line"], where,
                      unknown=f"{where} only raises: a placeholder that a preprocessor or a subclass replaces")
    for dec, _kw in binding.get("dec", []):
        last = dec.split(".")[-1]
        if last in KEEP_SIGNATURE:
            if last == "classmethod":
                drop_first = True
            continue
        wrapped = [t for t in resolver.resolve_in(target.module, dec) if t.kind == "def"]
        if wrapped and all(t.binding.get("wraps") for t in wrapped):
            continue
        return Callee(None, target.module, binding["line"], where, unknown=f"decorated by {dec}, which may change its signature")
    return Callee(binding["sig"], target.module, binding["line"], where, drop_first=drop_first)


def mro(resolver: Resolver, target: Target, limit: int = 32) -> list[Target]:
    """The class and its bases, depth first, left to right (enough for single-provider code)."""
    order: list[Target] = []
    stack = [target]
    seen: set[tuple[str, str | None, int]] = set()
    while stack and len(order) < limit:
        current = stack.pop(0)
        key = (current.module, current.name, current.binding.get("line", 0) if current.binding else 0)
        if key in seen:
            continue
        seen.add(key)
        order.append(current)
        if current.kind == "class":
            stack[0:0] = resolver.bases(current)
    return order


def constructor(resolver: Resolver, target: Target) -> Callee:
    """What calling a class runs: __init__ or __new__ of the first class in the MRO that
    has one, or the __init__ a dataclass decorator writes from the fields."""
    classes = mro(resolver, target)
    where = f"{target.name}()"
    for index, cls in enumerate(classes):
        if cls.kind != "class":
            if cls.kind == "missing":
                continue
            return Callee(None, target.module, target.binding["line"], where,
                          unknown=f"{target.name}'s constructor may come from a base outside the provider ({cls.why})")
        body = cls.binding.get("body", {})
        dataclass_kw = _dataclass_keywords(resolver, cls)
        if "__init__" in body:
            defs = [b for b in body["__init__"] if b["k"] == "def" and not b.get("ovl")] or body["__init__"]
            if defs[0]["k"] != "def":
                return Callee(None, cls.module, defs[0]["line"], where, unknown="__init__ is assigned, not defined")
            init = function_callee(resolver, Target("def", cls.module, "__init__", defs[0]), drop_first=True)
            return Callee(init.signature, cls.module, defs[0]["line"], f"{cls.name}.__init__", drop_first=True,
                          unknown=init.unknown)
        outer = _applied_after_dataclass(resolver, cls) if dataclass_kw is not None else None
        if outer:
            # huggingface_hub's @strict(accept_kwargs=True) over @dataclass rewraps the
            # __init__ the dataclass decorator wrote (transformers' PreTrainedConfig).
            return Callee(None, cls.module, cls.binding["line"], where,
                          unknown=f"{cls.name} is decorated by {outer} after its dataclass decorator, which may "
                                  f"change the __init__ it writes")
        if dataclass_kw is not None and dataclass_kw.get("init", True) is not False:
            # A metaclass sees the __init__ the decorator writes go onto the class, and may wrap
            # it: transformers' ModelOutput renames past_key_values= to cache= that way.
            meta = next((c for c in classes if c.kind == "class" and c.binding.get("meta")), None)
            if meta is not None:
                return Callee(None, cls.module, cls.binding["line"], where,
                              unknown=f"{meta.name} has a metaclass or class keywords, which may change the "
                                      f"__init__ the dataclass decorator writes for {cls.name}")
            return Callee(dataclass_signature(resolver, classes[index:]), cls.module, cls.binding["line"],
                          f"dataclass {cls.name}")
        if "__new__" in body:
            defs = [b for b in body["__new__"] if b["k"] == "def" and not b.get("ovl")] or body["__new__"]
            return Callee(defs[0].get("sig"), cls.module, defs[0]["line"], f"{cls.name}.__new__", drop_first=True)
        if cls.binding.get("meta"):
            return Callee(None, cls.module, cls.binding["line"], where, unknown=f"{cls.name} has a metaclass or class keywords")
        odd = [d for d, _ in cls.binding.get("dec", []) if d.split(".")[-1] not in KEEP_SIGNATURE]
        if odd:
            return Callee(None, cls.module, cls.binding["line"], where,
                          unknown=f"{cls.name} is decorated by {odd[0]}, which may give it a constructor")
    return Callee({"p": [], "va": False, "kw": False}, target.module, target.binding["line"], f"{target.name} (object.__init__)",
                  drop_first=False)


#: Decorators that mark a class for type checkers only.
_MARKERS = frozenset(["dataclass_transform", "final", "runtime_checkable", "total_ordering", "unique"])


def _applied_after_dataclass(resolver: Resolver, cls: Target) -> str:
    """A decorator written above the dataclass one (so applied to what it made) that may
    change the class's constructor; "" when there is none."""
    for dec, _keywords in cls.binding.get("dec", []):
        if _is_dataclass_decorator(resolver, cls.module, dec):
            return ""
        last = dec.split(".")[-1]
        if last not in KEEP_SIGNATURE and last not in _MARKERS:
            wrapped = [t for t in resolver.resolve_in(cls.module, dec) if t.kind == "def"]
            if not (wrapped and all(t.binding.get("wraps") for t in wrapped)):
                return dec
    return ""


def _dataclass_keywords(resolver: Resolver, cls: Target) -> dict[str, Any] | None:
    for dec, keywords in cls.binding.get("dec", []):
        if _is_dataclass_decorator(resolver, cls.module, dec):
            return dict(keywords)
    return None


def dataclass_signature(resolver: Resolver, classes: Sequence[Target]) -> Signature:
    """The generated __init__: fields of every dataclass in the MRO, bases first."""
    fields: dict[str, list[Any]] = {}
    for cls in reversed(classes):
        if cls.kind != "class":
            continue
        keywords = _dataclass_keywords(resolver, cls)
        if keywords is None:
            continue
        for name, has_default, kind in cls.binding.get("fields", []):
            if kind in ("cv", "ni"):
                fields.pop(name, None)
                continue
            kw_only = kind == "kw" or keywords.get("kw_only") is True
            fields[name] = [name, has_default, "k" if kw_only else "pk"]
    params = sorted(fields.values(), key=lambda p: p[2] == "k")  # keyword-only ones go last
    return {"p": params, "va": False, "kw": False}
