"""Edits to libcst trees that keep the code's own layout, for patches to build on.

A patched call must read as if a person had typed the argument: ``name=value`` with no
spaces around ``=``, one argument per line staying one per line, a trailing comma kept
where the call had one (and not invented where it had none), comments left on their lines.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import libcst as cst
from libcst.metadata import PositionProvider, QualifiedNameProvider

Whitespace = cst.BaseParenthesizableWhitespace


def _without_comment(ws: Whitespace) -> Whitespace:
    """The same line break and indentation, minus any comment riding on it."""
    if isinstance(ws, cst.ParenthesizedWhitespace):
        return ws.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=())
    return ws


def _separator(call: cst.Call) -> Whitespace:
    """What the call puts after each comma between its arguments."""
    args = call.args
    if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma):
        return _without_comment(args[-2].comma.whitespace_after)
    if isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
        # One argument on its own line: a new one goes on the next line, same indent.
        return _without_comment(call.whitespace_before_args)
    return cst.SimpleWhitespace(" ")


def _keep_comment(ws: Whitespace, separator: Whitespace) -> Whitespace:
    """``ws`` (which may hold the last argument's comment) ending as ``separator`` does."""
    if isinstance(ws, cst.ParenthesizedWhitespace) and isinstance(separator, cst.ParenthesizedWhitespace):
        return ws.with_changes(indent=separator.indent, last_line=separator.last_line)
    return separator


def has_keyword(call: cst.Call, name: str) -> bool:
    return any(arg.keyword is not None and arg.keyword.value == name for arg in call.args)


def has_double_star(call: cst.Call) -> bool:
    return any(arg.star == "**" for arg in call.args)


def add_keyword_argument(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """``call`` with ``name=value`` appended as its last argument, in the call's own layout."""
    new_arg = cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    if not call.args:
        return call.with_changes(args=[new_arg])
    separator = _separator(call)
    last = call.args[-1]
    if isinstance(last.comma, cst.Comma):
        # Trailing comma: the old last argument keeps its comma (and comment), the new one
        # gets a comma too and the line break before ``)``.
        closing = last.comma.whitespace_after
        old_last = last.with_changes(
            comma=last.comma.with_changes(whitespace_after=_keep_comment(closing, separator))
        )
        if isinstance(closing, cst.ParenthesizedWhitespace):
            new_arg = new_arg.with_changes(comma=cst.Comma(whitespace_after=_without_comment(closing)))
        else:
            new_arg = new_arg.with_changes(comma=last.comma.with_changes(whitespace_before=cst.SimpleWhitespace("")))
    else:
        closing = last.whitespace_after_arg
        old_last = last.with_changes(
            comma=cst.Comma(whitespace_after=_keep_comment(closing, separator)),
            whitespace_after_arg=cst.SimpleWhitespace(""),
        )
        new_arg = new_arg.with_changes(whitespace_after_arg=_without_comment(closing))
    return call.with_changes(args=[*call.args[:-1], old_last, new_arg])


TRUE = cst.Name("True")


class AddTrustRemoteCode(cst.CSTTransformer):
    """Add ``trust_remote_code=True`` to the calls ``wanted`` picks (by qualified name or line).

    Calls that already pass the keyword are left alone; calls that pass ``**kwargs`` are
    left alone and listed in :attr:`skipped_kwargs` (the dict may already hold the flag).
    """

    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider)

    def __init__(self, wanted: Callable[[set[str], int], bool]) -> None:
        super().__init__()
        self.wanted = wanted
        self.changed_lines: list[int] = []
        self.present_lines: list[int] = []
        self.skipped_kwargs: list[int] = []

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        names = {q.name for q in self.get_metadata(QualifiedNameProvider, original, set())}
        line = self.get_metadata(PositionProvider, original).start.line
        if not self.wanted(names, line):
            return updated
        if has_keyword(updated, "trust_remote_code"):
            self.present_lines.append(line)
            return updated
        if has_double_star(updated):
            self.skipped_kwargs.append(line)
            return updated
        self.changed_lines.append(line)
        return add_keyword_argument(updated, "trust_remote_code", TRUE)


def callee_is(*qualified: str) -> Callable[[set[str], int], bool]:
    targets = set(qualified)
    return lambda names, line: bool(names & targets)


def at_lines(lines: Collection[int]) -> Callable[[set[str], int], bool]:
    chosen = set(lines)
    return lambda names, line: line in chosen
