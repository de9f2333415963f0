"""Make libcst's name resolution cheap: decide with CPython's ``ast`` what it needs to see.

libcst parses at about 1 MB/s, and resolving scopes, qualified names and positions costs
several times more; CPython's ``ast`` parses one to two orders of magnitude faster. So
before libcst sees a file, ``ast`` answers two questions:

1. Can any call here resolve to a model loader? QualifiedNameProvider resolves names only
   through imports, and the scanner adds simple aliases (``X = AutoTokenizer``), so a call
   is a candidate only when its leftmost name is bound by an import or by such an alias of
   an imported name, and it calls ``.from_pretrained`` or names a vLLM entry point. No
   candidate, no libcst at all.
2. Which statements can change what those leftmost names mean (and, for an alias, what
   the imported name it is assigned from means)? Only those that mention them (bindings,
   ``global``, the calls themselves) and the imports that bind them. Every other statement
   that fills its lines alone is replaced (a docstring, an assignment, an unrelated import,
   a whole def or class that never mentions them...), a run of them by one ``pass`` or one
   empty string over their lines, keeping every other line and column where it was, so
   libcst resolves the same names at the same positions in a much smaller tree.

Both are shortcuts the scanner can turn off (``shortcuts=False``); the tests and the
benchmark check that the findings are the same either way.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection, Iterable

#: Statements that may be replaced (imports too, when they bind none of the names): they bind no name that the scope of a kept
#: name depends on unless a line of theirs mentions it (which keeps them; see _kept_lines).
_REPLACEABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Raise, ast.Assert,
                ast.Delete, ast.Pass, ast.Break, ast.Continue, ast.FunctionDef, ast.AsyncFunctionDef,
                ast.ClassDef, ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
                ast.TryStar, ast.Match)


def candidate_names(
    tree: ast.AST, attributes: Collection[str], entry_points: Collection[str],
    may_load: Callable[[str], bool] | None = None, nodes: Iterable[ast.AST] | None = None,
) -> set[str]:
    """Leftmost names of the calls that might resolve to a loader, and what their aliases name.

    A call qualifies when its leftmost name is bound by an import, and it is an attribute
    in ``attributes`` (``from_pretrained``) or in ``entry_points``, or a bare name that
    imports one of ``entry_points``. A name assigned alone from an imported name or an
    attribute of one (``X = AutoTokenizer``, ``X = vllm.LLM``) counts as that import; the
    imported name it is assigned from is then a candidate too, since it decides what the
    alias means. Scopes are not told apart here: libcst decides which aliases really hold.

    ``may_load(dotted)`` (given the callee as imported, e.g. ``.model_config.ModelConfig`` or
    ``transformers.AutoConfig.from_pretrained``) says whether a name can resolve to a loader
    at all; a call whose every import says no is no candidate (sglang's own ``ModelConfig``
    shares vLLM's class name and is imported by hundreds of files). ``nodes``: every node of
    ``tree``, when the caller has walked it already.
    """
    imported: dict[str, str] = {}
    #: Name -> the dotted names its imports bind it to (relative ones start with dots).
    bound_to: dict[str, list[str]] = {}
    #: Alias name -> (leftmost name, last attribute or None) of each value it is assigned alone.
    aliases: dict[str, list[tuple[str, str | None]]] = {}
    #: Alias name -> (leftmost name, ``.b.c``) of each such value, for ``may_load``.
    alias_paths: dict[str, list[tuple[str, str]]] = {}
    #: Names bound by an assignment: libcst's qualified name for them is the name itself
    #: (``transformers = pytest.importorskip("transformers")`` then ``transformers.AutoModel...``).
    assigned: set[str] = set()
    funcs: list[ast.expr] = []
    for node in ast.walk(tree) if nodes is None else nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    imported[alias.asname] = alias.name.rsplit(".", 1)[-1]
                    bound_to.setdefault(alias.asname, []).append(alias.name)
                else:
                    top = alias.name.split(".")[0]
                    imported[top] = top
                    bound_to.setdefault(top, []).append(top)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name != "*":
                    imported[alias.asname or alias.name] = alias.name
                    joined = f"{base}{alias.name}" if not base or base.endswith(".") else f"{base}.{alias.name}"
                    bound_to.setdefault(alias.asname or alias.name, []).append(joined)
        elif isinstance(node, ast.Call):
            funcs.append(node.func)
        elif isinstance(node, ast.Assign):
            assigned.update(t.id for t in node.targets if isinstance(t, ast.Name))
            if len(node.targets) == 1:
                target, value = node.targets[0], _leftmost_and_last(node.value)
                if isinstance(target, ast.Name) and value is not None:
                    aliases.setdefault(target.id, []).append(value)
                    alias_paths.setdefault(target.id, []).append((value[0], _attributes(node.value)))
        elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
            assigned.add(node.target.id)
    names: set[str] = set()
    for func in funcs:
        leftmost = func
        while isinstance(leftmost, ast.Attribute):
            leftmost = leftmost.value
        if not isinstance(leftmost, ast.Name):
            continue
        # (leftmost name, what it imports): the name itself, or what its aliases are assigned from.
        meanings = [(leftmost.id, imported[leftmost.id])] if leftmost.id in imported else []
        if meanings and may_load is not None:
            rest = _attributes(func)
            if not any(may_load(full + rest) for full in bound_to.get(leftmost.id, ())):
                continue
        if not meanings:
            meanings = [(left, last or imported[left])
                        for left, last in aliases.get(leftmost.id, ()) if left in imported]
            if meanings and may_load is not None:
                rest = _attributes(func)
                if not any(may_load(full + path + rest) for left, path in alias_paths.get(leftmost.id, ())
                           for full in bound_to.get(left, ())):
                    continue
        if not meanings and leftmost.id in assigned and leftmost.id not in imported:
            # Assigned, not imported: it stands for itself, as libcst resolves it.
            if may_load is None or may_load(leftmost.id + _attributes(func)):
                meanings = [(leftmost.id, leftmost.id)]
        for source, target in meanings:
            if isinstance(func, ast.Attribute):
                wanted = func.attr in attributes or func.attr in entry_points
            else:
                wanted = target in entry_points
            if wanted:
                names.update({leftmost.id, source})
    return names


def _attributes(func: ast.expr) -> str:
    """``.b.c`` of ``a.b.c``; "" of a bare name."""
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    return "".join(f".{p}" for p in reversed(parts))


def _leftmost_and_last(value: ast.expr) -> tuple[str, str | None] | None:
    """(``a``, ``c``) of ``a.b.c``, (``a``, None) of ``a``; None for any other expression."""
    last = value.attr if isinstance(value, ast.Attribute) else None
    while isinstance(value, ast.Attribute):
        value = value.value
    if not isinstance(value, ast.Name):
        return None
    return value.id, last


def _import_matters(node: ast.Import | ast.ImportFrom, names: Collection[str]) -> bool:
    """Whether an import can change what one of `names` means: it binds one of them (``import
    a.b`` binds ``a``; libcst also records ``a.b``, which only an import of ``a`` can), it is
    a star import, or a ``__future__`` import (kept first in the module, as Python wants)."""
    if isinstance(node, ast.ImportFrom) and node.module == "__future__":
        return True
    for alias in node.names:
        if alias.name == "*":
            return True
        bound = alias.asname or (alias.name.split(".")[0] if isinstance(node, ast.Import) else alias.name)
        if bound in names:
            return True
    return False


def _kept_lines(tree: ast.AST, names: Collection[str]) -> set[int]:
    """Lines that mention one of `names` (binding, use, declaration, an import that binds one)."""
    keep: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if _import_matters(node, names):
                keep.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        elif isinstance(node, ast.Name):
            if node.id in names:
                keep.add(node.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name in names:
                keep.add(node.lineno)
        elif isinstance(node, ast.arg):
            if node.arg in names:
                keep.add(node.lineno)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            if any(n in names for n in node.names):
                keep.add(node.lineno)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)):
            if node.name in names:
                keep.add(node.lineno)
        elif isinstance(node, ast.MatchMapping):
            if node.rest in names:
                keep.add(node.lineno)
    return keep


def _statement_lists(node: ast.stmt) -> list[list[ast.stmt]]:
    """The lists of statements directly inside a compound statement (bodies, else, handlers, cases)."""
    found = [value for field in ("body", "orelse", "finalbody")
             if isinstance(value := getattr(node, field, None), list) and value]
    found.extend(handler.body for handler in getattr(node, "handlers", None) or ())
    found.extend(case.body for case in getattr(node, "cases", None) or ())
    return found


def prune_source(text: str, tree: ast.Module, names: Collection[str]) -> str | None:
    """`text` with every statement that cannot matter to `names` replaced.

    A statement matters when a line of it mentions one of `names` or is an import that binds
    one (see :func:`_import_matters`); a def, class or block that does not is replaced whole.
    Consecutive sibling statements that do not matter become one statement (with the
    comments and blank lines between them): ``pass`` on one line, or an empty triple-quoted
    string over several, so libcst sees one node where there were hundreds of lines (its
    resolution costs per node, blank lines included). Line numbers and the columns of every
    kept line are unchanged. None when the text has line breaks that ``ast`` and a plain
    split could count differently.
    """
    if "\r" in text.replace("\r\n", ""):
        return None  # old Mac line ends: line numbers would not match ast's
    lines = text.split("\n")
    keep = _kept_lines(tree, names)

    def span(node: ast.stmt) -> tuple[int, int, str] | None:
        """(first line, last line, indent) of a statement that may be replaced, else None."""
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if _import_matters(node, names):
                return None
        elif not isinstance(node, _REPLACEABLE):
            return None
        if node.end_lineno is None or node.end_col_offset is None:
            return None
        decorators = getattr(node, "decorator_list", None)
        first = min([node.lineno] + [d.lineno for d in decorators or ()])
        last = node.end_lineno
        if any(line in keep for line in range(first, last + 1)):
            return None
        line = lines[first - 1].encode("utf-8")
        if decorators:
            indent = line[: len(line) - len(line.lstrip())]
            if not line.lstrip().startswith(b"@"):
                return None
        else:
            indent = line[: node.col_offset]
        tail = lines[last - 1].encode("utf-8")[node.end_col_offset :].strip()
        if indent.strip() or (tail and not tail.startswith(b"#")):
            return None  # shares a line with other code (`a; b`, `if x: y`): leave it
        return first, last, indent.decode("utf-8")

    def replace(run: list[tuple[int, int, str]]) -> None:
        first, last, indent = run[0][0], run[-1][1], run[0][2]
        for index in range(first - 1, last):
            ending = "\r" if lines[index].endswith("\r") else ""
            if first == last:
                lines[index] = indent + "pass" + ending
            else:  # one string token over the lines: positions below stay, one node for libcst
                lines[index] = (indent + '"""' if index == first - 1 else '"""' if index == last - 1 else "") + ending

    def prune(body: list[ast.stmt]) -> None:
        run: list[tuple[int, int, str]] = []
        for node in body:
            found = span(node)
            if found is not None:
                run.append(found)
                continue
            if run:
                replace(run)
                run = []
            for inner in _statement_lists(node):
                prune(inner)
        if run:
            replace(run)

    prune(tree.body)
    return "\n".join(lines)
