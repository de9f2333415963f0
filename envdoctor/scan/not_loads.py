"""Calls that have a loader's name but load nothing a model's own code could be in.

Two shapes, each decided with CPython's ``ast`` over the whole module once libcst has found
the sites (so the pruning of :mod:`envdoctor.scan.prune` never hides what decides them):

- **Settings built only to be read.** ``vllm.EngineArgs`` and ``vllm.AsyncEngineArgs`` are
  dataclasses of settings: building one loads nothing; the model's config is read when they
  become an engine or a config (``create_engine_config``, ``LLM(**vars(args))``). An object
  assigned to a name whose every use in its scope only reads it (``args.model``,
  ``getattr(args, f)``, ``dataclasses.fields(args)``, a comparison) never becomes either:
  vLLM's ``get_non_default_args`` builds ``EngineArgs(model=args.model)`` to compare defaults.
- **``Auto*.from_config`` on a config of transformers' own.** ``from_config`` reads no model
  folder: it runs model code only when the config object carries an ``auto_map`` naming the
  Auto class, which only a config that a model folder's own code defined carries (see
  transformers' ``_BaseAutoModelClass.from_config``). The call is no load when the config's
  class is known to be one of transformers' own (an in-library class, never the generic
  ``PretrainedConfig``/``PreTrainedConfig`` bases that a remote config derives from too, nor
  ``AutoConfig``), and so are its sub-configs (``config.vision_config``), whose classes the
  in-library parent picks. What tells the class, inside the function that makes the call:
  a call of the class itself (``SiglipVisionConfig(...)``, ``Gemma3Config.from_dict(...)``,
  ``AutoConfig.for_model("siglip")``), an annotation (``config: Gemma3Config``, every member of
  ``A | B | None``), ``typing.cast``, ``ctx.get_hf_config(Cls)``, and, in a vLLM model module,
  the served model's ``model_config.hf_config`` when the module declares its config class to
  vLLM through ``get_hf_config(Cls)`` (vLLM raises unless the served config is a ``Cls``) and
  every class it declares so is in-library. A config the function receives untyped (a
  parameter ``config: PreTrainedConfig``, nemotron_vl's RADIO tower) stays a site.

Standard library only; pure.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Mapping

from envdoctor.scan.exports import resolve_relative
from envdoctor.scan.loaders import Site

#: The vLLM callees that are settings objects: building one loads nothing.
SETTINGS_CALLEES = frozenset({"vllm.EngineArgs", "vllm.AsyncEngineArgs"})
#: Calls that only read the object given as their first argument.
#: Not ``vars`` or ``asdict``: their dict can be passed on (``LLM(**vars(args))`` loads the model).
_READERS = frozenset({"getattr", "hasattr", "repr", "str", "id", "type", "isinstance", "dataclasses.fields", "fields"})
#: Config classes of transformers that a model folder's own config class may be, or derive from.
_GENERIC_CONFIGS = frozenset({"PretrainedConfig", "PreTrainedConfig", "AutoConfig"})
_CONFIG_CLASS = re.compile(r"^[A-Za-z]\w*Config$")
#: Class methods of an in-library config class that build an instance of that class.
_CONFIG_BUILDERS = frozenset({"from_dict", "from_pretrained", "from_json_file"})
#: How deep one config's derivation is followed (name -> assignment -> attribute ...).
_MAX_DEPTH = 12


def drop_non_loads(sites: list[Site], tree: ast.Module, source: str, package: str | None) -> list[Site]:
    """``sites`` without the calls this module's doc says load nothing (the others kept in order)."""
    wanted = [s for s in sites if s.callee in SETTINGS_CALLEES or s.callee.endswith(".from_config")]
    if not wanted:
        return sites
    module = _Module(tree, source, package)
    dropped = {id(s) for s in wanted if module.is_not_load(s)}
    return [s for s in sites if id(s) not in dropped]


class _Module:
    """One module's imports, functions and calls, indexed for :func:`drop_non_loads`."""

    def __init__(self, tree: ast.Module, source: str, package: str | None) -> None:
        self.tree = tree
        self.package = package
        self.lines = source.splitlines()
        self.imports = _imports(tree, package)
        #: (line, character column) -> the Calls starting there, each with the innermost function
        #: (or the module) around it; ``f(x)(y)`` starts two.
        self.calls: dict[tuple[int, int], list[tuple[ast.Call, ast.AST]]] = {}
        self._index(tree, tree)
        self._declared: bool | None = None
        self._parents: dict[int, dict[int, ast.AST]] = {}

    def _index(self, node: ast.AST, scope: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else scope
            if isinstance(child, ast.Call):
                key = (child.lineno, self._char_column(child.lineno, child.col_offset))
                self.calls.setdefault(key, []).append((child, scope))
            self._index(child, inner)

    def _char_column(self, line: int, byte_offset: int) -> int:
        # ast counts UTF-8 bytes, libcst characters.
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return len(text.encode("utf-8")[:byte_offset].decode("utf-8", "replace"))

    def qualified(self, node: ast.expr) -> str | None:
        """The dotted name an expression names through the module's imports, or None."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.imports:
            return None
        return ".".join([self.imports[node.id], *reversed(parts)])

    def parents(self, scope: ast.AST) -> dict[int, ast.AST]:
        if id(scope) not in self._parents:
            self._parents[id(scope)] = _parents(scope)
        return self._parents[id(scope)]

    def is_not_load(self, site: Site) -> bool:
        last = site.callee.rsplit(".", 1)[-1]
        found = [(call, scope) for call, scope in self.calls.get((site.line, site.column), ())
                 if (call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)) == last]
        if len(found) != 1:
            return False
        call, scope = found[0]
        if site.callee in SETTINGS_CALLEES:
            return self._only_read(call, scope)
        config = _config_argument(call)
        return config is not None and self.in_library(config, scope, 0)

    # -- settings built only to be read ------------------------------------------------------

    def _only_read(self, call: ast.Call, scope: ast.AST) -> bool:
        target = _assigned_name(scope, call)
        if target is None:
            return False
        uses = [n for n in _own_nodes(scope) if isinstance(n, ast.Name) and n.id == target]
        bindings = [n for n in uses if not isinstance(n.ctx, ast.Load)]
        if len(bindings) != 1 or _is_global(scope, target) or _nested_use(scope, target):
            return False  # bound again, or shared with other scopes: its uses are not only this object's
        parents = self.parents(scope)
        return all(self._reads_only(use, parents) for use in uses if isinstance(use.ctx, ast.Load))

    def _reads_only(self, use: ast.Name, parents: Mapping[int, ast.AST]) -> bool:
        parent = parents.get(id(use))
        if isinstance(parent, ast.Attribute) and parent.value is use:
            # `args.model` read, never called (`args.create_engine_config()` reads the model)
            return not (isinstance(parents.get(id(parent)), ast.Call) and parents[id(parent)].func is parent)
        if isinstance(parent, ast.Call) and parent.args and parent.args[0] is use:
            name = self.qualified(parent.func) or (parent.func.id if isinstance(parent.func, ast.Name) else None)
            return name in _READERS
        return isinstance(parent, ast.Compare)

    # -- from_config on an in-library config -------------------------------------------------

    def is_config_class(self, node: ast.expr) -> bool:
        """Whether an expression names one of transformers' own model config classes."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value, mode="eval").body  # a quoted annotation
            except SyntaxError:
                return False
        name = self.qualified(node)
        if not name or name.split(".", 1)[0] != "transformers":
            return False
        last = name.rsplit(".", 1)[-1]
        return bool(_CONFIG_CLASS.match(last)) and last not in _GENERIC_CONFIGS

    def annotation_in_library(self, node: ast.expr) -> bool:
        """``Gemma3Config``, ``A | B``, ``Optional[A]``, ``A | None``: every class named is in-library."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return False
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            sides = [node.left, node.right]
            return all(_is_none(s) or self.annotation_in_library(s) for s in sides) and not all(map(_is_none, sides))
        if isinstance(node, ast.Subscript) and (self.qualified(node.value) or "").rsplit(".", 1)[-1] in ("Optional", "Union"):
            members = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return all(_is_none(m) or self.annotation_in_library(m) for m in members) and not all(map(_is_none, members))
        return self.is_config_class(node)

    def in_library(self, node: ast.expr, scope: ast.AST, depth: int) -> bool:
        """Whether ``node`` (inside ``scope``) is known to be a config of an in-library class."""
        if depth > _MAX_DEPTH:
            return False
        if isinstance(node, ast.Call):
            return self._built_in_library(node, scope, depth)
        if isinstance(node, ast.Attribute):
            if node.attr in ("hf_config", "hf_text_config") and _ends_with_model_config(node.value):
                return self.module_declares_in_library()
            return node.attr.endswith("_config") and self.in_library(node.value, scope, depth + 1)
        if isinstance(node, ast.Name):
            return self._name_in_library(node.id, scope, depth)
        return False

    def _built_in_library(self, call: ast.Call, scope: ast.AST, depth: int) -> bool:
        func = call.func
        if self.is_config_class(func):
            return True
        if isinstance(func, ast.Attribute):
            owner = self.qualified(func.value) or ""
            if func.attr in _CONFIG_BUILDERS and self.is_config_class(func.value):
                return True
            if func.attr == "for_model" and owner.startswith("transformers") and owner.endswith(".AutoConfig"):
                return True  # AutoConfig.for_model picks from transformers' own CONFIG_MAPPING
            if func.attr == "get_hf_config" and call.args:
                return self.annotation_in_library(call.args[0])
            if func.attr == "get_text_config":
                return self.in_library(func.value, scope, depth + 1)
        name = self.qualified(func) or (func.id if isinstance(func, ast.Name) else "")
        if name in ("typing.cast", "cast") and call.args:
            return self.annotation_in_library(call.args[0])
        if name == "getattr" and len(call.args) >= 2:
            attribute = call.args[1]
            default_none = len(call.args) < 3 or _is_none(call.args[2])
            return (isinstance(attribute, ast.Constant) and isinstance(attribute.value, str)
                    and attribute.value.endswith("_config") and default_none
                    and self.in_library(call.args[0], scope, depth + 1))
        return False

    def _name_in_library(self, name: str, scope: ast.AST, depth: int) -> bool:
        """Every binding of ``name`` in its function says in-library (a parameter by its annotation)."""
        if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False  # a module-level name can be rebound from anywhere
        known = False
        for arg in _arguments(scope.args):
            if arg.arg == name:
                if arg.annotation is None or not self.annotation_in_library(arg.annotation):
                    return False
                known = True
        for node in _own_nodes(scope):
            if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
                bound = _bound_value(node, self.parents(scope))
                if bound is None:
                    return False  # bound by a loop, a with, an unpacking, del...: not known
                annotation, value = bound
                if not (self.annotation_in_library(annotation) if annotation is not None
                        else self.in_library(value, scope, depth + 1)):
                    return False
                known = True
            elif isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
                return False
        return known

    def module_declares_in_library(self) -> bool:
        """Whether this module declares its config class to vLLM (``get_hf_config(Cls)``), every one in-library."""
        if self._declared is None:
            declared = [call.args[0] for starting in self.calls.values() for call, _ in starting
                        if isinstance(call.func, ast.Attribute) and call.func.attr == "get_hf_config" and call.args]
            self._declared = bool(declared) and all(self.annotation_in_library(c) for c in declared)
        return self._declared


def _imports(tree: ast.Module, package: str | None) -> dict[str, str]:
    """Name -> the dotted name its imports bind it to; a name imported as two things is left out."""
    bound: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound.setdefault(alias.asname, set()).add(alias.name)
                else:
                    top = alias.name.split(".", 1)[0]
                    bound.setdefault(top, set()).add(top)
        elif isinstance(node, ast.ImportFrom):
            base = resolve_relative("." * node.level + (node.module or ""), package) if node.level else node.module
            for alias in node.names:
                if base and alias.name != "*":
                    bound.setdefault(alias.asname or alias.name, set()).add(f"{base}.{alias.name}")
    return {name: next(iter(targets)) for name, targets in bound.items() if len(targets) == 1}


def _config_argument(call: ast.Call) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == "config":
            return keyword.value
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    return None


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function (or module) body, not those of the functions and classes nested in it."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def _parents(scope: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in [scope, *_own_nodes(scope)] for child in ast.iter_child_nodes(node)}


def _assigned_name(scope: ast.AST, call: ast.Call) -> str | None:
    """The name ``call`` is assigned to alone (``x = call``, ``x: T = call``), or None."""
    for node in _own_nodes(scope):
        if isinstance(node, ast.Assign) and node.value is call and len(node.targets) == 1:
            target = node.targets[0]
            return target.id if isinstance(target, ast.Name) else None
        if isinstance(node, ast.AnnAssign) and node.value is call and isinstance(node.target, ast.Name):
            return node.target.id
    return None


def _bound_value(name: ast.Name, parents: Mapping[int, ast.AST]) -> tuple[ast.expr | None, ast.expr] | None:
    """(annotation, value) of the binding ``name`` is the target of: ``x = v``, ``x: T = v`` (what
    decides is ``T``), ``(x := v)``; None for any other binding."""
    parent = parents.get(id(name))
    if isinstance(parent, ast.Assign) and any(t is name for t in parent.targets):
        return None, parent.value
    if isinstance(parent, ast.AnnAssign) and parent.target is name:
        return parent.annotation, parent.value or parent.annotation
    if isinstance(parent, ast.NamedExpr) and parent.target is name:
        return None, parent.value
    return None


def _nested_use(scope: ast.AST, name: str) -> bool:
    """Whether a function, lambda or class nested in ``scope`` mentions ``name`` (a closure may pass it on)."""
    for node in _own_nodes(scope):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node)):
                return True
    return False


def _is_global(scope: ast.AST, name: str) -> bool:
    return isinstance(scope, ast.Module) or any(
        isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in _own_nodes(scope))


def _arguments(args: ast.arguments) -> Iterable[ast.arg]:
    yield from args.posonlyargs
    yield from args.args
    yield from args.kwonlyargs
    if args.vararg:
        yield args.vararg
    if args.kwarg:
        yield args.kwarg


def _ends_with_model_config(node: ast.expr) -> bool:
    """``vllm_config.model_config``, ``self.model_config``, ``ctx.model_config``, ``model_config``."""
    return (isinstance(node, ast.Attribute) and node.attr == "model_config") or (
        isinstance(node, ast.Name) and node.id == "model_config")


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None
