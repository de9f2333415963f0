"""Prove a patch before it is written: the new file differs from the old only as declared.

A patch declares what it changes (:class:`AddKeyword`, :class:`ReplaceStatement`). After
its transform built the new text, :func:`prove` compares the two files three ways, none of
which trusts the transform or libcst:

1. CPython's ``ast`` of both: every difference must be a declared one (a keyword added to
   a named call, a declared statement replaced by its declared replacement), and every
   declared change must be there, once. A keyword added to another call on the same line
   (``len(...)``, a chained ``.to("cuda")``) is a difference nobody declared.
2. The bytes outside the changed calls or statements are identical (layout kept).
3. No comment is lost (Python's ``tokenize``); a keyword patch keeps them all, in order.

Any other difference refuses the patch: :func:`prove` returns what is wrong, and the engine
writes nothing.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass, field

#: A call as a patch names it: (line, column, qualified callee), as the scanner reports it.
SiteKey = tuple[int, int, str]


@dataclass(frozen=True)
class AddKeyword:
    """Declares ``keyword=value`` added once to each named call, and nothing else.

    The calls are ``sites`` (line, 0-based column in characters, callee) or, when no sites
    are given, every call of ``callee`` that the scanner finds ``missing`` the flag in the
    file before the patch.
    """

    keyword: str
    value: str = "True"
    callee: str | None = None
    sites: tuple[SiteKey, ...] = ()

    def describe(self) -> str:
        where = ", ".join(f"{line}:{column} {callee}" for line, column, callee in self.sites) or f"calls of {self.callee}"
        return f"add {self.keyword}={self.value} to {where}"


@dataclass(frozen=True)
class ReplaceStatement:
    """Declares one statement ``old`` (in the def named ``function``; "" for module level)
    replaced by the statements ``new`` (source text; compared as ``ast``, so comments and
    layout are free)."""

    function: str
    old: str
    new: str

    def describe(self) -> str:
        return f"replace `{self.old.strip()}` in {self.function or 'the module'}"


Declared = AddKeyword | ReplaceStatement


@dataclass
class _KeywordAdded:
    old: ast.Call
    new: ast.Call
    keyword: ast.keyword


@dataclass
class _Replaced:
    function: str
    old: list[ast.AST]
    new: list[ast.AST]
    statements: bool = False


@dataclass
class _Differences:
    items: list[_KeywordAdded | _Replaced] = field(default_factory=list)


def _dump(node: object) -> str:
    return ast.dump(node) if isinstance(node, ast.AST) else repr(node)


def _compare(old: ast.AST, new: ast.AST, function: str, out: _Differences) -> None:
    if type(old) is not type(new):
        out.items.append(_Replaced(function, [old], [new], isinstance(old, ast.stmt)))
        return
    scalars = [f for f in old._fields if not isinstance(getattr(old, f), (ast.AST, list))]
    if any(getattr(old, f) != getattr(new, f) for f in scalars):
        out.items.append(_Replaced(function, [old], [new], isinstance(old, ast.stmt)))
        return
    if isinstance(old, (ast.FunctionDef, ast.AsyncFunctionDef)):
        function = old.name
    for name in old._fields:
        a, b = getattr(old, name), getattr(new, name)
        if isinstance(old, ast.Call) and name == "keywords":
            _compare_keywords(old, new, function, out)
        elif isinstance(a, list):
            _compare_lists(a, b, function, out, parent=old)
        elif isinstance(a, ast.AST) and isinstance(b, ast.AST):
            _compare(a, b, function, out)
        elif a is not b and _dump(a) != _dump(b):
            out.items.append(_Replaced(function, [old], [new], isinstance(old, ast.stmt)))
            return


def _compare_keywords(old: ast.Call, new: ast.Call, function: str, out: _Differences) -> None:
    names = [k.arg for k in old.keywords]
    added = [k for k in new.keywords if k.arg is not None and k.arg not in names]
    kept = [k for k in new.keywords if not any(k is a for a in added)]
    if [k.arg for k in kept] != names:
        out.items.append(_Replaced(function, [old], [new]))
        return
    out.items.extend(_KeywordAdded(old, new, k) for k in added)
    for a, b in zip(old.keywords, kept):
        _compare(a, b, function, out)


def _compare_lists(a: list, b: list, function: str, out: _Differences, *, parent: ast.AST) -> None:
    if len(a) == len(b) and all(_dump(x) == _dump(y) for x, y in zip(a, b)):
        return
    start = 0
    while start < min(len(a), len(b)) and _dump(a[start]) == _dump(b[start]):
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and _dump(a[-1 - end]) == _dump(b[-1 - end]):
        end += 1
    middle_a, middle_b = a[start:len(a) - end], b[start:len(b) - end]
    if len(middle_a) == len(middle_b) and all(isinstance(x, ast.AST) and isinstance(y, ast.AST)
                                              for x, y in zip(middle_a, middle_b)):
        for x, y in zip(middle_a, middle_b):
            _compare(x, y, function, out)
    elif all(isinstance(x, ast.stmt) for x in middle_a + middle_b) and (middle_a or middle_b):
        out.items.append(_Replaced(function, middle_a, middle_b, True))
    else:
        out.items.append(_Replaced(function, [parent], [parent]))


class _Text:
    """Byte offsets of ``ast`` positions (lines split as the tokenizer splits them)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.starts = [0] + [m.end() for m in re.finditer(rb"\r\n|\r|\n", data)]

    def offset(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def column(self, line: int, col: int) -> int:
        """The 0-based column in characters (libcst's) of an ``ast`` UTF-8 byte offset."""
        start = self.starts[line - 1]
        return len(self.data[start:start + col].decode("utf-8", "replace"))

    def span(self, node: ast.AST, *, whole_lines: bool = False, leading_comments: bool = False) -> tuple[int, int]:
        start = self.offset(node.lineno, 0 if whole_lines else node.col_offset)  # type: ignore[attr-defined]
        line = node.lineno  # type: ignore[attr-defined]
        while leading_comments and line > 1:
            previous = self.data[self.starts[line - 2]:self.starts[line - 1]].strip()
            if not previous.startswith(b"#"):
                break
            line -= 1
            start = self.starts[line - 1]
        return start, self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]


def _is_dotted(func: ast.expr) -> bool:
    while isinstance(func, ast.Attribute):
        func = func.value
    return isinstance(func, ast.Name)


def _comments(data: bytes) -> list[str]:
    try:
        return [t.string for t in tokenize.tokenize(io.BytesIO(data).readline) if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError):
        return []


def _is_subsequence(short: list[str], long: list[str]) -> bool:
    remaining = iter(long)
    return all(any(item == other for other in remaining) for item in short)


def _describe(item: _KeywordAdded | _Replaced, text: _Text) -> str:
    if isinstance(item, _KeywordAdded):
        call = item.old
        return (f"line {call.lineno}:{text.column(call.lineno, call.col_offset)}: keyword "
                f"`{ast.unparse(item.keyword)}` added to `{ast.unparse(call.func)}(...)`")
    where = f"line {item.old[0].lineno}" if item.old and hasattr(item.old[0], "lineno") else "the file"  # type: ignore[attr-defined]
    old = "; ".join(ast.unparse(n) for n in item.old)[:120] or "nothing"
    new = "; ".join(ast.unparse(n) for n in item.new)[:120] or "nothing"
    return f"{where}: `{old}` became `{new}`"


def _expected_sites(change: AddKeyword, path: str, old: bytes) -> list[SiteKey]:
    if change.sites:
        return list(change.sites)
    # Declared by callee: the scanner names the calls in the file as it was.
    from envdoctor.scan.scanner import package_of_relative_path, scan_source
    from envdoctor.scan.loaders import MISSING

    sites, _ = scan_source(old, path, package=package_of_relative_path(path), shortcuts=False)
    return [(s.line, s.column, s.callee) for s in sites if s.callee == change.callee and s.state == MISSING]


def prove(changes: Sequence[Declared], path: str, old: bytes, new: bytes) -> list[str]:
    """What in ``new`` the ``changes`` do not declare (empty: proven). Pure; never raises."""
    try:
        old_tree, new_tree = ast.parse(old), ast.parse(new)
    except (SyntaxError, ValueError) as exc:
        return [f"the patched file does not compile: {exc}"]
    found = _Differences()
    _compare(old_tree, new_tree, "", found)
    old_text, new_text = _Text(old), _Text(new)
    problems: list[str] = []
    regions: list[tuple[tuple[int, int], tuple[int, int]]] = []
    #: Statements added or removed outright: only one side has a span.
    inserted: list[tuple[tuple[int, int] | None, tuple[int, int] | None]] = []
    keyword_only = all(isinstance(c, AddKeyword) for c in changes)

    wanted: dict[tuple[int, int], tuple[AddKeyword, SiteKey]] = {}
    for change in changes:
        if isinstance(change, AddKeyword):
            for key in _expected_sites(change, path, old):
                wanted[(key[0], key[1])] = (change, key)
    replacements = [c for c in changes if isinstance(c, ReplaceStatement)]
    for item in found.items:
        if isinstance(item, _KeywordAdded):
            call = item.old
            position = (call.lineno, old_text.column(call.lineno, call.col_offset))
            declared = wanted.get(position) if _is_dotted(call.func) else None
            if declared is None or item.keyword.arg != declared[0].keyword or _dump(item.keyword.value) != _dump(
                ast.parse(declared[0].value, mode="eval").body
            ):
                problems.append(f"undeclared: {_describe(item, old_text)}")
                continue
            del wanted[position]
            regions.append((old_text.span(call), new_text.span(item.new)))
            continue
        match = next((r for r in replacements if r.function == item.function and item.statements
                      and [_dump(n) for n in item.old] == [_dump(n) for n in ast.parse(r.old).body]
                      and [_dump(n) for n in item.new] == [_dump(n) for n in ast.parse(r.new).body]), None)
        if match is None:
            problems.append(f"undeclared: {_describe(item, old_text)}")
            continue
        replacements.remove(match)
        new_span = (new_text.span(item.new[0], whole_lines=True, leading_comments=True)[0],
                    new_text.span(item.new[-1])[1]) if item.new else None
        old_span = (old_text.span(item.old[0], whole_lines=True)[0], old_text.span(item.old[-1])[1]) if item.old else None
        if old_span is not None and new_span is not None:
            regions.append((old_span, new_span))
        elif old_span is not None or new_span is not None:
            inserted.append((old_span, new_span))
    for change, key in wanted.values():
        problems.append(f"declared but not done: {change.keyword}={change.value} at {key[0]}:{key[1]} {key[2]}")
    for replacement in replacements:
        problems.append(f"declared but not done: {replacement.describe()}")
    if not problems:
        problems.extend(_outside_regions_differ(old, new, regions, inserted))
        old_comments, new_comments = _comments(old), _comments(new)
        if (old_comments != new_comments) if keyword_only else not _is_subsequence(old_comments, new_comments):
            lost = [c for c in old_comments if c not in new_comments] or old_comments[:1]
            problems.append(f"comments changed (for example {lost[0]!r})")
    return problems


def _outside_regions_differ(
    old: bytes, new: bytes, regions: list[tuple[tuple[int, int], tuple[int, int]]],
    inserted: list[tuple[tuple[int, int] | None, tuple[int, int] | None]] = (),  # type: ignore[assignment]
) -> list[str]:
    """The bytes between changed regions must be identical: layout outside them is kept.

    A statement only added (or only removed) has no span on the other side; the text before
    it is identical, so its place there is found by removing it and comparing again.
    """
    # From the end, so that cutting one span leaves the offsets of the earlier ones valid.
    for new_span in sorted((n for _, n in inserted if n is not None), reverse=True):
        new = new[:new_span[0]] + new[new_span[1]:]
    for old_span in sorted((o for o, _ in inserted if o is not None), reverse=True):
        old = old[:old_span[0]] + old[old_span[1]:]
    if inserted:
        # Spans of the paired regions move by what was cut before them: recompute is costly, so
        # only files without paired regions take this path (a patch that only adds statements).
        if regions:
            return ["a patch may not both add statements and change calls"]
        return [] if old.strip() == new.strip() else ["text outside the added statements changed"]
    merged: list[list[int]] = []
    for (a0, a1), (b0, b1) in sorted(regions):
        if merged and a0 < merged[-1][1]:  # nested (a site in another site's arguments)
            merged[-1][1], merged[-1][3] = max(merged[-1][1], a1), max(merged[-1][3], b1)
        else:
            merged.append([a0, a1, b0, b1])
    old_at = new_at = 0
    for a0, a1, b0, b1 in merged:
        if old[old_at:a0] != new[new_at:b0]:
            line = old[:a0].count(b"\n") + 1
            return [f"text outside the patched code changed (before line {line})"]
        old_at, new_at = a1, b1
    if old[old_at:] != new[new_at:]:
        return ["text outside the patched code changed (at the end of the file)"]
    return []
