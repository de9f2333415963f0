"""Bounds on untrusted source before libcst parses it.

Model code comes from a hub and installed packages from anyone; libcst's native parser and
its Python visitors recurse once per level of nesting. Measured with libcst 1.x: 400 nested
``not``/``+``/``.attr``/``lambda``/implicitly concatenated strings raise RecursionError, and
20,000 of them (a 10 KB file) crash the process with SIGSEGV or spin for minutes, which
would take the whole fleet's run down. So before libcst sees a file:

- its size is bounded;
- CPython's own parser (``ast``), which has a C-stack guard and fails with an exception,
  parses it, and the depth of that tree is measured without recursion;
- the tokens are scanned for what ``ast`` hides: a run of adjacent string literals (one
  node in ``ast``, one level per string in libcst), when a string node's lines hold enough
  quote characters to be such a run (tokenizing is the slow part).

When ``ast`` cannot parse the file (syntax newer than this Python, or plain invalid code),
the token scan also bounds bracket depth and the number of operators in one statement.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from typing import NamedTuple

#: Characters of one source file; model code above 512 KB is not even shipped by the probe.
MAX_SOURCE_CHARS = 8 * 1024 * 1024
#: Levels of the syntax tree. Real code stays under 60; libcst fails near 400.
MAX_DEPTH = 200
#: Adjacent string literals ("a" "b" ...), each one level deeper in libcst.
MAX_STRING_RUN = 200
#: Without an ``ast`` tree: open brackets at once, and operators in one logical line.
MAX_BRACKETS = 100
MAX_OPERATORS_PER_LINE = 2000

_CHAIN_KEYWORDS = frozenset({"not", "and", "or", "if", "else", "lambda", "await", "in", "is"})
_NOT_CHAINING_OPS = frozenset({",", ":", ";", ")", "]", "}", "=", "->"})


def source_problem(source: str, *, max_chars: int = MAX_SOURCE_CHARS, max_depth: int = MAX_DEPTH) -> str | None:
    """Why ``source`` must not be given to libcst (a short sentence), or None when it may."""
    return parsed_source_problem(source, max_chars=max_chars, max_depth=max_depth)[0]


class ParsedSource(NamedTuple):
    """What :func:`parsed_source_problem` found: the problem (None when libcst may parse),
    ``ast``'s tree (None when ``ast`` could not parse) and every node of it in the order
    ``ast.walk`` gives, so a caller that reads the tree too neither parses nor walks it again."""

    problem: str | None
    tree: ast.Module | None
    nodes: list[ast.AST]


def parsed_source_problem(
    source: str, *, max_chars: int = MAX_SOURCE_CHARS, max_depth: int = MAX_DEPTH
) -> ParsedSource:
    """:func:`source_problem`, with the tree and nodes it read (see :class:`ParsedSource`)."""
    if len(source) > max_chars:
        return ParsedSource(f"larger than {max_chars} characters; not parsed", None, [])
    try:
        tree = ast.parse(source)
    except (RecursionError, MemoryError):
        return ParsedSource("nested too deeply to parse safely; not parsed", None, [])
    except (SyntaxError, ValueError):
        # libcst reports the syntax error itself, once the tokens look safe
        return ParsedSource(token_problem(source, full=True), None, [])
    depth, nodes, strings = _walk(tree)
    if depth > max_depth:
        return ParsedSource(f"nested {depth} levels deep (more than {max_depth}); not parsed", tree, nodes)
    if not _string_run_possible(source, strings):
        return ParsedSource(None, tree, nodes)  # tokenizing (the slow part) could not find a long run
    return ParsedSource(token_problem(source, full=False), tree, nodes)


def _walk(tree: ast.AST) -> tuple[int, list[ast.AST], list[ast.expr]]:
    """The depth of an ast tree (level by level, no recursion), its nodes breadth first (as
    ``ast.walk`` yields them) and its string expressions."""
    depth, level, nodes, strings = 0, [tree], [], []
    while level:
        depth += 1
        nodes.extend(level)
        below: list[ast.AST] = []
        for node in level:
            if isinstance(node, ast.JoinedStr) or (
                isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))
            ):
                strings.append(node)
            below.extend(ast.iter_child_nodes(node))
        level = below
    return depth, nodes, strings


_LINE_END = re.compile(r"\r\n|\r|\n")


def _string_run_possible(source: str, strings: list[ast.expr]) -> bool:
    """Whether one of ``strings`` could be more than MAX_STRING_RUN adjacent literals.

    Adjacent literals are one ``ast`` node, and each literal takes at least two quote
    characters, so a node whose lines hold fewer than 2 * (MAX_STRING_RUN + 1) quote
    characters is not such a run; only when one might is the file tokenized.
    """
    limit = 2 * (MAX_STRING_RUN + 1)
    if source.count('"') + source.count("'") < limit:
        return False
    # Quote characters on lines 1..n (ast counts lines as the tokenizer splits them).
    totals = [0]
    for line in _LINE_END.split(source):
        totals.append(totals[-1] + line.count('"') + line.count("'"))
    last = len(totals) - 1
    return any(
        totals[min(node.end_lineno or last, last)] - totals[node.lineno - 1] >= limit for node in strings
    )


def token_problem(source: str, *, full: bool) -> str | None:
    """Runs of adjacent strings; with ``full`` also bracket depth and operators per statement."""
    run = brackets = operators = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            kind, text = token.type, token.string
            if kind == tokenize.STRING:
                run += 1
                if run > MAX_STRING_RUN:
                    return f"more than {MAX_STRING_RUN} adjacent string literals; not parsed"
                continue
            if kind in (tokenize.NL, tokenize.COMMENT):
                continue
            run = 0
            if not full:
                continue
            if kind == tokenize.NEWLINE:
                operators = 0
            elif kind == tokenize.OP:
                if text in "([{":
                    brackets += 1
                elif text in ")]}":
                    brackets = max(0, brackets - 1)
                if text not in _NOT_CHAINING_OPS:
                    operators += 1
            elif kind == tokenize.NAME and text in _CHAIN_KEYWORDS:
                operators += 1
            if brackets > MAX_BRACKETS:
                return f"more than {MAX_BRACKETS} nested brackets; not parsed"
            if operators > MAX_OPERATORS_PER_LINE:
                return f"more than {MAX_OPERATORS_PER_LINE} operators in one statement; not parsed"
    except (tokenize.TokenError, SyntaxError, ValueError):
        return raw_bracket_problem(source) if full else None
    return None


def raw_bracket_problem(source: str) -> str | None:
    """Last resort when even the tokenizer gives up: bracket depth counted character by character."""
    depth = 0
    for char in source:
        if char in "([{":
            depth += 1
            if depth > MAX_BRACKETS:
                return f"more than {MAX_BRACKETS} nested brackets; not parsed"
        elif char in ")]}":
            depth = max(0, depth - 1)
    return None
