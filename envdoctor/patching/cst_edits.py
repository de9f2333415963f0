"""Edits to libcst trees that keep the code's own layout, for patches to build on.

A patched call must read as if a person had typed the argument: ``name=value`` with no
spaces around ``=``, one argument per line staying one per line, a trailing comma kept
where the call had one (and not invented where it had none), comments left on their lines.
The calls to edit are chosen by identity: the Call node the scanner finds at a site's
line and column with the site's resolved callee (:func:`add_keyword_at_sites`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst
from libcst.metadata import MetadataWrapper

if TYPE_CHECKING:
    from envdoctor.scan.exports import ExportTable

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


def _has_comment(ws: Whitespace) -> bool:
    return isinstance(ws, cst.ParenthesizedWhitespace) and (
        ws.first_line.comment is not None or any(line.comment is not None for line in ws.empty_lines)
    )


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
        if _has_comment(closing) and not isinstance(separator, cst.ParenthesizedWhitespace):
            # `p, x=1,  # c` then `)`: the new argument joins that line before the comment.
            old_last = last.with_changes(comma=last.comma.with_changes(whitespace_after=separator))
            new_arg = new_arg.with_changes(comma=cst.Comma(whitespace_after=closing))
            return call.with_changes(args=[*call.args[:-1], old_last, new_arg])
        old_last = last.with_changes(
            comma=last.comma.with_changes(whitespace_after=_keep_comment(closing, separator))
        )
        if isinstance(closing, cst.ParenthesizedWhitespace):
            new_arg = new_arg.with_changes(comma=cst.Comma(whitespace_after=_without_comment(closing)))
        else:
            new_arg = new_arg.with_changes(comma=last.comma.with_changes(whitespace_before=cst.SimpleWhitespace("")))
    else:
        closing = last.whitespace_after_arg
        if _has_comment(closing) and not isinstance(separator, cst.ParenthesizedWhitespace):
            # `p, use_fast=True  # fast` then `)`: the new argument joins that line, and the
            # comment stays at its end.
            old_last = last.with_changes(comma=cst.Comma(whitespace_after=separator),
                                         whitespace_after_arg=cst.SimpleWhitespace(""))
            return call.with_changes(args=[*call.args[:-1], old_last, new_arg.with_changes(whitespace_after_arg=closing)])
        old_last = last.with_changes(
            comma=cst.Comma(whitespace_after=_keep_comment(closing, separator)),
            whitespace_after_arg=cst.SimpleWhitespace(""),
        )
        new_arg = new_arg.with_changes(whitespace_after_arg=_without_comment(closing))
    return call.with_changes(args=[*call.args[:-1], old_last, new_arg])


TRUE = cst.Name("True")

#: A site as a patch names it: (line, column, qualified callee), as the scanner reports it.
SiteKey = tuple[int, int, str]


@dataclass(frozen=True)
class KeywordEdit:
    """What :func:`add_keyword_at_sites` did: the new module and the fate of each site."""

    module: cst.Module
    changed: tuple[SiteKey, ...] = ()
    #: Sites that already pass the keyword (any value).
    present: tuple[SiteKey, ...] = ()
    #: Sites that pass ``**kwargs``: never patched (the dict may already hold the keyword).
    kwargs: tuple[SiteKey, ...] = ()
    #: Named sites the scanner does not find in this file (a changed or unknown file).
    unknown: tuple[SiteKey, ...] = ()


class _AddKeywordTo(cst.CSTTransformer):
    """Adds ``name=value`` to exactly the given Call nodes, chosen by identity."""

    def __init__(self, calls: Collection[cst.Call], name: str, value: cst.BaseExpression) -> None:
        super().__init__()
        self.ids = {id(call) for call in calls}
        self.name = name
        self.value = value

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if id(original) not in self.ids:
            return updated
        return add_keyword_argument(updated, self.name, self.value)


def add_keyword_at_sites(
    module: cst.Module,
    keys: Collection[SiteKey] | None = None,
    *,
    callee: str | None = None,
    path: str = "",
    package: str | None = None,
    exports: ExportTable | None = None,
    keyword: str = "trust_remote_code",
    value: cst.BaseExpression = TRUE,
) -> KeywordEdit:
    """``keyword=value`` added to the Call nodes the scanner finds at ``keys`` (line, column
    and resolved callee all equal), or to every site of ``callee`` when no keys are given.

    Selection is by identity, never by line: another call on the same line (``len(...)``,
    ``.to("cuda")`` chained on the loader, ``str(path)`` in its arguments) is never touched.
    """
    from envdoctor.scan.sites import site_nodes  # libcst side of the scanner

    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)  # nodes stay those of `module`
    found = site_nodes(wrapper, path, package=package, precheck=False, exports=exports)
    by_key = {(site.line, site.column, site.callee): (site, node) for site, node in found}
    wanted = set(keys) if keys is not None else {k for k in by_key if k[2] == callee}
    chosen, changed, present, kwargs = [], [], [], []
    for key in sorted(wanted & by_key.keys()):
        site, node = by_key[key]
        if has_keyword(node, keyword):
            present.append(key)
        elif has_double_star(node):
            kwargs.append(key)
        else:
            chosen.append(node)
            changed.append(key)
    new = module.visit(_AddKeywordTo(chosen, keyword, value)) if chosen else module
    return KeywordEdit(new, tuple(changed), tuple(present), tuple(kwargs), tuple(sorted(wanted - by_key.keys())))
