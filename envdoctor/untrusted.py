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
  node in ``ast``, one level per string in libcst).

When ``ast`` cannot parse the file (syntax newer than this Python, or plain invalid code),
the token scan also bounds bracket depth and the number of operators in one statement.
"""

from __future__ import annotations

import ast
import io
import tokenize

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
    if len(source) > max_chars:
        return f"larger than {max_chars} characters; not parsed"
    try:
        tree: ast.AST | None = ast.parse(source)
    except (RecursionError, MemoryError):
        return "nested too deeply to parse safely; not parsed"
    except (SyntaxError, ValueError):
        tree = None  # libcst reports the syntax error itself, once the tokens look safe
    if tree is not None:
        depth = tree_depth(tree)
        if depth > max_depth:
            return f"nested {depth} levels deep (more than {max_depth}); not parsed"
    return token_problem(source, full=tree is None)


def tree_depth(tree: ast.AST) -> int:
    """The depth of an ast tree, measured with an explicit stack (no recursion)."""
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


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
