# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "drift" section (sent before drift.py): what a consumer's file uses of
# other installed packages, from its syntax tree: imports, attribute chains and calls on
# imported names, each with the guards it sits under (try/except ImportError, version
# checks, hasattr, TYPE_CHECKING), so the controller can grade what it finds.

import ast
import re

from envdoctor.probe.host.drift.summaries import absolute_module, child_nodes, const_value, dotted, walk_nodes
from envdoctor.probe.host.drift.flags import FlagScope

#: Handlers that make their try body guarded code (the author expected it could fail).
GUARD_EXCEPTIONS = frozenset(["ImportError", "ModuleNotFoundError", "AttributeError", "TypeError",
                              "Exception", "BaseException"])
IMPORT_ERRORS = frozenset(["ImportError", "ModuleNotFoundError"])
#: Words that name a hardware backend in a function's name or a branch's test (`def
#: _build_xpu_ids`, `if is_npu():`): code for a device this host may not have, whose
#: provider build may lack what it calls (the CUDA sgl_kernel has no XPU kernels).
_BACKEND = re.compile(r"(?:^|_|\b)(xpu|npu|hpu|musa|rocm|hip|mps|tpu|habana|gaudi|ascend|neuron|mlu)(?:$|_|\b)", re.I)
_VERSION_CALLS = frozenset(["parse", "Version", "LooseVersion", "StrictVersion", "version", "parse_version"])
_OPS = {"Lt": "<", "LtE": "<=", "Gt": ">", "GtE": ">=", "Eq": "==", "NotEq": "!="}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


def handler_names(handler):
    if handler.type is None:
        return set(["BaseException"])
    nodes = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return set((dotted(n) or "").split(".")[-1] for n in nodes)


class Bindings(object):
    """Every name a file binds, in any scope, from one walk of its tree: an import binds it
    to a dotted path; anything else (def, class, assignment, parameter) to "other". Once the
    watched packages are known (`watch`), an import of anything else is "other" too. A name
    bound to two different things is ambiguous and never followed."""

    def __init__(self, tree, module, is_package):
        self.imports = []  # (name, dotted path)
        self.others = set()
        self.tops = set()  # the top-level names of every absolute import
        self.paths = {}
        self.compares = []  # (name, comparison) of `name = a < b`: a flag a version check may set
        # `name = None` (or another constant) beside an import is a placeholder for when
        # the import fails, not a second callee (ast.walk visits an Assign before its targets).
        placeholders = set()
        other = self.others.add
        for node in walk_nodes(tree):
            kind = type(node)
            if kind is ast.Name:
                if type(node.ctx) is not ast.Load and id(node) not in placeholders:
                    other(node.id)
            elif kind is ast.Assign:
                if const_value(node.value)[0]:
                    placeholders.update(id(t) for t in node.targets if type(t) is ast.Name)
                elif type(node.value) is ast.Compare and len(node.targets) == 1 and type(node.targets[0]) is ast.Name:
                    self.compares.append((node.targets[0].id, node.value))
            elif kind is ast.Import:
                for alias in node.names:
                    root = alias.name.split(".")[0]
                    self.tops.add(root)
                    self.imports.append((alias.asname, alias.name) if alias.asname else (root, root))
            elif kind is ast.ImportFrom:
                mod = absolute_module(node.module, node.level, module, is_package)
                if mod:
                    self.tops.add(mod.split(".")[0])
                for alias in node.names:
                    if alias.name != "*":
                        self.imports.append((alias.asname or alias.name, mod + "." + alias.name if mod else None))
            elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda):
                args = node.args
                if kind is not ast.Lambda:
                    other(node.name)
                for arg in list(getattr(args, "posonlyargs", [])) + args.args + args.kwonlyargs:
                    other(arg.arg)
                for arg in (args.vararg, args.kwarg):
                    if arg is not None:
                        other(arg.arg)
            elif kind is ast.ClassDef:
                other(node.name)
            elif kind is ast.ExceptHandler:
                if node.name:
                    other(node.name)
            elif kind is ast.Global or kind is ast.Nonlocal:
                for name in node.names:
                    other(name)

    def watch(self, tops):
        self.paths = {}
        for name, path in self.imports:
            if path is not None and path.split(".")[0] in tops:
                self.paths.setdefault(name, set()).add(path)
            else:
                self.others.add(name)
        return self

    def path_of(self, name):
        """(dotted path, ambiguous) of a name, or (None, False) when it is not a watched import."""
        paths = self.paths.get(name)
        if not paths:
            return None, False
        if len(paths) > 1 or name in self.others:
            return sorted(paths)[0], True
        return next(iter(paths)), False


class UseFinder(object):
    """The uses of watched packages (`tops`: their import names) in one consumer file."""

    def __init__(self, tree, module, is_package, tops, bindings=None, facts=None):
        self.facts = facts  # drift_flags.FlagFacts: availability and version flags this host decides
        self.flag_scope = None
        self.module = module
        self.is_package = is_package
        self.tops = tops
        self.bindings = (bindings or Bindings(tree, module, is_package)).watch(tops)
        self.uses = []
        self.sets = set()  # provider names the file assigns (module.attr = ...)
        self.tries = 0
        self.tree = tree
        self.super_base = None  # the provider class the class being visited derives from
        # `lt_4_56 = version.parse(transformers.__version__) < version.parse("4.56")`, then
        # `if lt_4_56:` — a flag bound once to a version test stands for it.
        tests = {}
        for name, compare in self.bindings.compares:
            test = self.version_test(compare)
            if test not in tests.setdefault(name, []):
                tests[name].append(test)
        self.version_flags = dict((n, t[0]) for n, t in tests.items() if len(t) == 1 and t[0] is not None)

    def run(self):
        self.visit_block(self.tree.body, [])
        return self.uses

    def visit_block(self, body, guards):
        for node in body:
            self.visit(node, guards)

    def visit(self, node, guards):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            backend = _BACKEND.search(node.name)
            if backend:
                guards = guards + [{"backend": backend.group(1).lower()}]
            for item in child_nodes(node):
                if isinstance(item, ast.stmt):
                    self.visit(item, guards)
                else:
                    self.visit_expr(item, guards)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            # `provider_module.name = ...`: the consumer sets a provider name at run time
            # (modelscope keeps transformers' original function there): not a missing name.
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Attribute):
                    path = self.watched(target)
                    if path is not None and not path[1]:
                        self.sets.add(path[0])
            for item in child_nodes(node):
                self.visit_expr(item, guards)
        elif isinstance(node, ast.ClassDef):
            # super().m(...) in a subclass of a provider class calls the provider's m (bound):
            # only with that one base, so no other class of the MRO can provide m first.
            outer = self.super_base
            first = self.watched(node.bases[0]) if len(node.bases) == 1 else None
            self.super_base = first[0] if first is not None and not first[1] else None
            for item in node.bases + node.decorator_list + [k.value for k in node.keywords]:
                self.visit_expr(item, guards)
            self.visit_block(node.body, guards)
            self.super_base = outer
        elif isinstance(node, ast.If):
            self.visit_expr(node.test, guards)
            body_guard, else_guard = self.condition_guards(node.test)
            if body_guard is not None:  # None: a branch the installed files say is not taken
                self.visit_block(node.body, guards + body_guard)
            if else_guard is not None:
                self.visit_block(node.orelse, guards + else_guard)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            self.tries += 1
            tid = self.tries
            caught = set()
            for handler in node.handlers:
                caught |= handler_names(handler)
            body_guards = guards + ([{"try": tid, "imp": 1 if caught & IMPORT_ERRORS else 0}]
                                    if caught & GUARD_EXCEPTIONS else [])
            self.visit_block(node.body, body_guards)
            for handler in node.handlers:
                names = handler_names(handler)
                extra = [{"fallback": tid}] if names & IMPORT_ERRORS else []
                self.visit_block(handler.body, guards + extra)
            self.visit_block(node.orelse, guards)
            self.visit_block(node.finalbody, guards)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in self.tops:
                    self.add(node, alias.name, "import", alias.name, guards)
        elif isinstance(node, ast.ImportFrom):
            mod = absolute_module(node.module, node.level, self.module, self.is_package)
            if mod and mod.split(".")[0] in self.tops:
                for alias in node.names:
                    if alias.name != "*":
                        self.add(node, mod + "." + alias.name, "import", alias.name, guards)
        else:
            for item in child_nodes(node):
                if isinstance(item, ast.stmt):
                    self.visit(item, guards)
                else:
                    self.visit_expr(item, guards)

    def visit_expr(self, node, guards):
        stack = [node]
        callees = set()
        while stack:
            item = stack.pop()
            if isinstance(item, ast.Call):
                path = self.watched(item.func)
                if path is not None:
                    callees.add(id(item.func))
                    self.add_call(item, path, guards)
                elif self.super_base is not None and self.is_super_call(item.func):
                    self.add_call(item, (self.super_base + "." + item.func.attr, False), guards, bound=True)
            elif isinstance(item, ast.Attribute) and id(item) not in callees and isinstance(item.ctx, ast.Load):
                path = self.watched(item)
                if path is not None:
                    self.add(item, path[0], "attr", dotted(item), guards, ambiguous=path[1])
                    for sub in walk_nodes(item):
                        callees.add(id(sub))
            if isinstance(item, ast.Attribute):
                # the inner chain of a.b.c is not a use of its own
                callees.add(id(item.value))
            stack.extend(child_nodes(item))

    @staticmethod
    def is_super_call(func):
        """`super().name` (with arguments, super may start the lookup anywhere)."""
        return (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call)
                and isinstance(func.value.func, ast.Name) and func.value.func.id == "super"
                and not func.value.args)

    def watched(self, node):
        """(dotted provider path, ambiguous) for a Name or attribute chain on a watched import."""
        text = dotted(node)
        if text is None or isinstance(node, ast.Subscript):
            return None
        parts = text.split(".")
        path, ambiguous = self.bindings.path_of(parts[0])
        if path is None:
            return None
        return ".".join([path] + parts[1:]), ambiguous

    def add_call(self, call, path, guards, bound=False):
        kws = [kw.arg for kw in call.keywords if kw.arg]
        # (only what is there: tens of thousands of calls travel)
        shape = {}
        positional = sum(1 for a in call.args if not type(a).__name__ == "Starred")
        if positional:
            shape["n"] = positional
        if any(type(a).__name__ == "Starred" for a in call.args):
            shape["star"] = True
        if kws:
            shape["kw"] = kws
        if any(kw.arg is None for kw in call.keywords):
            shape["dstar"] = True
        if bound:
            shape["bound"] = 1
        self.add(call, path[0], "call", dotted(call.func) or "super()." + call.func.attr, guards,
                 ambiguous=path[1], call=shape)

    def add(self, node, path, kind, written, guards, ambiguous=False, call=None):
        use = {"line": getattr(node, "lineno", 0), "path": path, "kind": kind, "src": written}
        if guards:
            use["g"] = guards
        if ambiguous:
            use["amb"] = 1
        if call is not None:
            use["call"] = call
        self.uses.append(use)

    def condition_guards(self, test):
        """Guards for the body and the else branch of `if test:`."""
        text = dotted(test) or ""
        if text.split(".")[-1] == "TYPE_CHECKING":
            return [{"tc": 1}], []
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        inner = test.operand if negated else test
        if isinstance(inner, ast.Name) and inner.id in self.version_flags:
            version = self.version_flags[inner.id]
        else:
            version = self.version_test(inner)
        if version is not None:
            return [dict(version, neg=1 if negated else 0)], [dict(version, neg=0 if negated else 1)]
        if any(_BACKEND.search(dotted(sub) or "") for sub in walk_nodes(test) if isinstance(sub, (ast.Name, ast.Attribute))):
            return [{"backend": 1}], []
        if self.facts is not None:
            verdict = self.facts.decide(test, self.scope())
            if verdict is not None:
                return ([], None) if verdict else (None, [])
        for sub in ast.walk(test):
            if isinstance(sub, ast.Call) and (dotted(sub.func) or "") in ("hasattr", "getattr"):
                return [{"hasattr": 1}], [{"hasattr": 1}]
            if isinstance(sub, ast.Compare) and (self.version_test(sub) is not None or self.provider_state(sub)):
                return [{"vercheck": 1}], [{"vercheck": 1}]
        return [], []

    def scope(self):
        if self.flag_scope is None:
            self.flag_scope = FlagScope(self.tree, self.module, self.is_package)
        return self.flag_scope

    def provider_state(self, compare):
        """`CUDA_VERSION.major == 12`: a provider's value against a literal, a state of the
        installed provider that files cannot tell (a version or build check of its own kind)."""
        sides = [compare.left] + list(compare.comparators)
        literal = any(const_value(s)[0] and isinstance(const_value(s)[1], (int, str)) and
                      not isinstance(const_value(s)[1], bool) for s in sides)
        return literal and any(self.watched(s) is not None for s in sides if not const_value(s)[0])

    def version_test(self, node):
        """{"ver": import name, "op", "v"} for `<version of a watched package> OP "x.y"`."""
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            return None
        op = _OPS.get(type(node.ops[0]).__name__)
        if op is None:
            return None
        left, right = node.left, node.comparators[0]
        lib, literal = self.versionish(left), self.version_literal(right)
        if lib is None:
            lib, literal = self.versionish(right), self.version_literal(left)
            op = _FLIP[op]
        if lib is None or literal is None:
            return None
        return {"ver": lib, "op": op, "v": literal}

    def version_literal(self, node):
        ok, value = const_value(node)
        if ok and isinstance(value, str):
            return value
        if isinstance(node, ast.Call) and (dotted(node.func) or "").split(".")[-1] in _VERSION_CALLS and node.args:
            return self.version_literal(node.args[0])
        return None

    def versionish(self, node, depth=0):
        if isinstance(node, ast.Call) and node.args:
            callee = (dotted(node.func) or "").split(".")[-1]
            if callee in _VERSION_CALLS:
                ok, value = const_value(node.args[0])
                if ok and isinstance(value, str) and callee == "version":
                    return value  # importlib.metadata.version("vllm")
                return self.versionish(node.args[0], depth + 1)
            return None
        text = dotted(node)
        if text and text.endswith("__version__"):
            parts = text.split(".")
            path, ambiguous = self.bindings.path_of(parts[0])
            if path is not None and not ambiguous:
                return path.split(".")[0]
        if isinstance(node, ast.Name) and depth < 4:
            # `V = importlib.metadata.version("transformers")`, then `Version(V) >= ...`
            value = self.scope().values.get(node.id)
            if value is not None:
                return self.versionish(value, depth + 1)
        return None


def imported_modules(tree, module, is_package):
    """Every absolute module name a file may import (with each `from X import n`, X.n too)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            mod = absolute_module(node.module, node.level, module, is_package)
            if mod:
                found.add(mod)
                for alias in node.names:
                    if alias.name != "*":
                        found.add(mod + "." + alias.name)
    return found
