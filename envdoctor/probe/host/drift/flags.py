# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "drift" section (sent after drift_ast.py, before drift_uses.py): which way
# a branch goes in this environment, read from files. Libraries choose code by what is
# installed: `if Version(importlib.metadata.version("transformers")) >= Version("5.17"):`,
# a flag bound once to such a test (`WITH_ROPE = Version(V) >= ...`, `V = version("x")`), or an
# availability flag (`NIBABEL_AVAILABLE = importlib.util.find_spec("nibabel") is not None`,
# read through `from .. import config; if config.NIBABEL_AVAILABLE:`). FlagFacts decides
# such a test True or False from the installed files (what the finder finds, the versions
# in the dist-info folders), or None when it cannot: then the branch is judged as before.
# Nothing is imported or run.

import ast
import re

from envdoctor.probe.host.drift.summaries import absolute_module, const_value, dotted

_FLAG_VERSION_TEXT = re.compile(r"^v?(\d+(?:\.\d+)*)(?:[-_.]?(a|b|c|rc|alpha|beta|pre|preview)[-_.]?(\d*))?"
                           r"(?:[-_.]?(post|rev|r)[-_.]?(\d*))?(?:[-_.]?(dev)[-_.]?(\d*))?(?:\+[a-z0-9.]*)?$")
_FLAG_PHASES = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
_FLAG_VERSION_CALLS = frozenset(["Version", "parse", "parse_version", "LooseVersion", "StrictVersion"])
_FLAG_METADATA_VERSION = frozenset(["importlib.metadata.version", "importlib_metadata.version", "metadata.version",
                               "version"])
_FLAG_FIND_SPEC = frozenset(["importlib.util.find_spec", "util.find_spec", "find_spec"])
#: How deep a flag may refer to another flag (WITH_ROPE -> V -> version("x")).
MAX_FLAG_DEPTH = 6


def version_key(text):
    """A sort key for a PEP 440 version (dev < a < b < rc < final < post), None when not one."""
    match = _FLAG_VERSION_TEXT.match(str(text).strip().lower())
    if not match:
        return None
    release = [int(p) for p in match.group(1).split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    phase, number = (_FLAG_PHASES[match.group(2)], int(match.group(3) or 0)) if match.group(2) else (3, 0)
    post = int(match.group(5) or 0) if match.group(4) else -1
    dev = (0, int(match.group(7) or 0)) if match.group(6) else (1, 0)
    if match.group(6) and not match.group(2) and not match.group(4):
        phase = -1  # 1.0.dev0 comes before 1.0a1
    return (tuple(release), phase, number, post, dev)


_FLAG_COMPARE = {"Lt": lambda a, b: a < b, "LtE": lambda a, b: a <= b, "Gt": lambda a, b: a > b,
            "GtE": lambda a, b: a >= b, "Eq": lambda a, b: a == b, "NotEq": lambda a, b: a != b}


class FlagVersion(object):
    """A version string read from the environment or written as one (Version("5.17.0.dev0"))."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text


#: What find_spec returns for a module the files show (anything but None).
FLAG_FOUND = object()
#: An expression whose value the files cannot tell.
FLAG_UNKNOWN = object()


class FlagScope(object):
    """What one module binds once, unconditionally, at its top level: name -> value expression,
    and name -> the dotted name an import binds it to (a module, or a name in one)."""

    def __init__(self, tree, module, is_package):
        self.module = module
        counts = {}
        self.values = {}
        self.imports = {}
        stack = list(tree.body)
        while stack:  # every module-level binding (function bodies bind locals, not these)
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                counts[node.name] = counts.get(node.name, 0) + 1
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)) else []
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        counts[name.id] = counts.get(name.id, 0) + 1
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    counts[bound] = counts.get(bound, 0) + 1
            for field in ("body", "orelse", "finalbody", "handlers"):
                stack.extend(getattr(node, field, []) or [])
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
                if counts.get(name) == 1:
                    self.values[name] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                if counts.get(node.target.id) == 1:
                    self.values[node.target.id] = node.value
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.imports[alias.asname] = alias.name
                    else:
                        self.imports[alias.name.split(".")[0]] = alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                base = absolute_module(node.module, node.level, module, is_package)
                if base:
                    for alias in node.names:
                        if alias.name != "*":
                            self.imports[alias.asname or alias.name] = base + "." + alias.name


class FlagFacts(object):
    """Decides tests from what is installed. `found(module)` -> True/False/None (does the
    import system find it), `version(name)` -> the installed version of a distribution or
    import name (None: not known), `scope(module)` -> the FlagScope of another module or None."""

    def __init__(self, found, version, scope):
        self.found = found
        self.version = version
        self.scope = scope

    def decide(self, test, scope, depth=0):
        value = self.value(test, scope, depth)
        if value is FLAG_UNKNOWN or isinstance(value, FlagVersion):
            return None
        if value is FLAG_FOUND:
            return True
        if isinstance(value, (bool, int, str, tuple)) or value is None:
            return bool(value)
        return None

    def value(self, node, scope, depth=0):
        if depth > MAX_FLAG_DEPTH or node is None:
            return FLAG_UNKNOWN
        ok, constant = const_value(node)
        if ok:
            return constant
        kind = type(node).__name__
        if kind == "UnaryOp" and type(node.op).__name__ == "Not":
            inner = self.decide(node.operand, scope, depth + 1)
            return FLAG_UNKNOWN if inner is None else not inner
        if kind == "BoolOp":
            values = [self.decide(v, scope, depth + 1) for v in node.values]
            if type(node.op).__name__ == "And":
                return False if False in values else (FLAG_UNKNOWN if None in values else True)
            return True if True in values else (FLAG_UNKNOWN if None in values else False)
        if kind == "Compare" and len(node.ops) == 1:
            return self.compare(type(node.ops[0]).__name__, self.value(node.left, scope, depth + 1),
                                self.value(node.comparators[0], scope, depth + 1))
        if kind == "Call":
            return self.call(node, scope, depth)
        if kind == "Subscript":  # `np.__version__.split(".")[0]`
            inner = self.value(node.value, scope, depth + 1)
            index = node.slice.value if type(node.slice).__name__ == "Index" else node.slice
            ok, position = const_value(index)
            if isinstance(inner, tuple) and ok and isinstance(position, int) and -len(inner) <= position < len(inner):
                return inner[position]
            return FLAG_UNKNOWN
        name = dotted(node)
        if name is None or scope is None:
            return FLAG_UNKNOWN
        return self.named(name, scope, depth)

    def named(self, name, scope, depth):
        parts = name.split(".")
        if parts[-1] == "__version__" and len(parts) > 1:
            target = self.qualified(".".join(parts[:-1]), scope)
            text = self.version(target.split(".")[0]) if target else None
            return FlagVersion(text) if text else FLAG_UNKNOWN
        if len(parts) == 1 and parts[0] in scope.values:
            return self.value(scope.values[parts[0]], scope, depth + 1)
        target = self.qualified(name, scope)
        if not target or "." not in target:
            return FLAG_UNKNOWN
        module, _, leaf = target.rpartition(".")
        other = self.scope(module)
        if other is None or leaf not in other.values:
            return FLAG_UNKNOWN
        return self.value(other.values[leaf], other, depth + 1)

    @staticmethod
    def qualified(name, scope):
        parts = name.split(".")
        base = scope.imports.get(parts[0])
        return ".".join([base] + parts[1:]) if base else None

    def call(self, node, scope, depth):
        func = dotted(node.func) or ""
        last = func.split(".")[-1]
        if isinstance(node.func, ast.Attribute) and node.func.attr == "split" and not node.keywords:
            text = self.value(node.func.value, scope, depth + 1)
            text = text.text if isinstance(text, FlagVersion) else text
            ok, sep = const_value(node.args[0]) if len(node.args) == 1 else (True, None)
            if isinstance(text, str) and ok and (sep is None or isinstance(sep, str)) and len(node.args) <= 1:
                return tuple(text.split(sep))
            return FLAG_UNKNOWN
        if len(node.args) != 1 or node.keywords:
            return FLAG_UNKNOWN
        if func == "int":
            inner = self.value(node.args[0], scope, depth + 1)
            try:
                return int(inner) if isinstance(inner, str) else FLAG_UNKNOWN
            except ValueError:
                return FLAG_UNKNOWN
        if func in _FLAG_FIND_SPEC or (last == "find_spec" and scope is not None and
                                  (self.qualified(func, scope) or "").endswith("util.find_spec")):
            ok, module = const_value(node.args[0])
            found = self.found(module) if ok and isinstance(module, str) and module else None
            return FLAG_UNKNOWN if found is None else (FLAG_FOUND if found else None)
        if func in _FLAG_METADATA_VERSION:
            ok, name = const_value(node.args[0])
            text = self.version(name) if ok and isinstance(name, str) else None
            return FlagVersion(text) if text else FLAG_UNKNOWN  # (not installed: version() raises)
        if last in _FLAG_VERSION_CALLS:
            inner = self.value(node.args[0], scope, depth + 1)
            if isinstance(inner, str):
                return FlagVersion(inner)
            return inner if isinstance(inner, FlagVersion) else FLAG_UNKNOWN
        return FLAG_UNKNOWN

    @staticmethod
    def compare(op, left, right):
        if left is FLAG_UNKNOWN or right is FLAG_UNKNOWN:
            return FLAG_UNKNOWN
        if op in ("Is", "IsNot"):
            if left is None or right is None:
                same = left is right if (left is None and right is None) else False
                return same if op == "Is" else not same
            return FLAG_UNKNOWN
        compare = _FLAG_COMPARE.get(op)
        if compare is None:
            return FLAG_UNKNOWN
        if isinstance(left, FlagVersion) or isinstance(right, FlagVersion):
            keys = [version_key(v.text if isinstance(v, FlagVersion) else v) if isinstance(v, (FlagVersion, str)) else None
                    for v in (left, right)]
            if None in keys:
                return FLAG_UNKNOWN
            return compare(keys[0], keys[1])
        if left is FLAG_FOUND or right is FLAG_FOUND:
            return FLAG_UNKNOWN
        try:
            return bool(compare(left, right))
        except TypeError:
            return FLAG_UNKNOWN
