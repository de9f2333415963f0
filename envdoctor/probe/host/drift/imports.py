# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "drift" section (sent before drift_walk.py and drift.py): the import
# statements of one file, each with how surely it runs when the file is imported. The walk
# of drift_walk.py follows them from a stage's entry; code.imports judges the ones whose
# module is missing by that class.
#
# Classes, from surest to least sure (a walk keeps the surest way it reached a file):
#   0 "import"    runs whenever the file is imported (module level, class bodies, a
#                 condition this interpreter is known to meet: sys.version_info, sys.platform)
#   1 "condition" module level under an `if` that cannot be decided from files
#   2 "deferred"  inside a function: runs when that function is called
#   3 "guarded"   under `try/except ImportError` (ModuleNotFoundError, Exception, bare):
#                 the author expected it could fail
#   4 "typing"    under `if TYPE_CHECKING`: never runs
# Branches that cannot run here (`if sys.version_info < (3, 8)` on 3.11, the
# `if __name__ == "__main__"` block of a file that is not the entry) are left out.

import ast
import sys

from envdoctor.probe.host.drift.summaries import absolute_module, const_value, dotted
from envdoctor.probe.host.drift.flags import FlagScope
from envdoctor.probe.host.drift.uses import handler_names

IMPORT, CONDITION, DEFERRED, GUARDED, TYPING = 0, 1, 2, 3, 4
CLASS_NAMES = ("import", "condition", "deferred", "guarded", "typing")
#: Handlers that make their try body's imports guarded.
IMPORT_GUARDS = frozenset(["ImportError", "ModuleNotFoundError", "Exception", "BaseException"])
_COMPARE = {"Lt": lambda a, b: a < b, "LtE": lambda a, b: a <= b, "Gt": lambda a, b: a > b,
            "GtE": lambda a, b: a >= b, "Eq": lambda a, b: a == b, "NotEq": lambda a, b: a != b}


class ImportSite(object):
    """One import statement: the absolute module it imports, the names it takes from it
    (`from m import a, b`: a and b may be submodules), its line and class. `fallback`: the
    modules the `try` body imports when this import sits in an `except ImportError` handler
    (it runs only when one of them fails)."""

    __slots__ = ("module", "names", "line", "klass", "fallback", "relative_error")

    def __init__(self, module, names, line, klass, fallback=None, relative_error=False):
        self.module = module
        self.names = names
        self.line = line
        self.klass = klass
        self.fallback = fallback
        self.relative_error = relative_error


class Conditions(object):
    """What this interpreter makes of the conditions files test: True, False, or None (unknown).
    `facts` (drift_flags.FlagFacts): what the installed files make of the rest (versions of
    installed distributions, availability flags); None: those stay unknown."""

    def __init__(self, version=None, platform=None, facts=None):
        self.version = tuple(version or sys.version_info[:3])
        self.platform = platform or sys.platform
        self.facts = facts

    def decide(self, test):
        kind = type(test).__name__
        if kind == "UnaryOp" and type(test.op).__name__ == "Not":
            inner = self.decide(test.operand)
            return None if inner is None else not inner
        if kind == "BoolOp":
            values = [self.decide(v) for v in test.values]
            if type(test.op).__name__ == "And":
                return False if False in values else (None if None in values else True)
            return True if True in values else (None if None in values else False)
        if kind == "Compare" and len(test.ops) == 1:
            left, right = self.value(test.left), self.value(test.comparators[0])
            op = _COMPARE.get(type(test.ops[0]).__name__)
            if left is not None and right is not None and op is not None:
                try:
                    return bool(op(left, right))
                except TypeError:
                    return None
        if kind == "Call" and isinstance(test.func, ast.Attribute) and test.func.attr == "startswith" \
                and len(test.args) == 1 and dotted(test.func.value) == "sys.platform":
            ok, prefix = const_value(test.args[0])
            if ok and isinstance(prefix, str):
                return self.platform.startswith(prefix)
        return None

    def value(self, node):
        ok, value = const_value(node)
        if ok:
            return value
        if isinstance(node, ast.Tuple):
            items = [self.value(e) for e in node.elts]
            return None if any(i is None for i in items) else tuple(items)
        name = dotted(node)
        if name == "sys.platform":
            return self.platform
        if name == "sys.version_info":
            return self.version
        if name in ("sys.version_info.major", "sys.version_info.minor"):
            return self.version[0 if name.endswith("major") else 1]
        if isinstance(node, ast.Subscript) and dotted(node.value) == "sys.version_info":
            index = node.slice.value if type(node.slice).__name__ == "Index" else node.slice
            if isinstance(index, ast.Slice) and index.lower is None and index.step is None:
                ok, upper = const_value(index.upper)
                if ok and isinstance(upper, int):
                    return self.version[:upper]
            ok, position = const_value(index)
            if ok and isinstance(position, int) and 0 <= position < 3:
                return self.version[position]
        return None


def _is_type_checking(test):
    name = dotted(test) or ""
    return name == "TYPE_CHECKING" or name.endswith(".TYPE_CHECKING")


def _is_main_test(test):
    if type(test).__name__ != "Compare" or len(test.ops) != 1 or type(test.ops[0]).__name__ != "Eq":
        return False
    sides = [test.left, test.comparators[0]]
    names = [dotted(s) for s in sides]
    constants = [const_value(s)[1] for s in sides]
    return "__name__" in names and "__main__" in constants


def _imported_in(body, module, is_package):
    """The absolute modules the import statements of a block name (for a fallback handler)."""
    found = []
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Import):
                found.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                target = absolute_module(node.module, node.level, module, is_package)
                if target:
                    found.append(target)
    return found


class SiteLister(object):
    """The ImportSites of one parsed file. `as_main`: the file runs as __main__ (a stage's
    entry), so its `if __name__ == "__main__":` block runs too."""

    def __init__(self, module, is_package, conditions, as_main=False):
        self.module = module
        self.is_package = is_package
        self.conditions = conditions
        self.as_main = as_main
        self.sites = []
        self.tree = None
        self.flag_scope = None

    def run(self, tree):
        self.tree = tree
        self.block(tree.body, IMPORT, None)
        return self.sites

    def decide(self, test):
        verdict = self.conditions.decide(test)
        if verdict is None and self.conditions.facts is not None:
            if self.flag_scope is None:  # built once a test needs it
                self.flag_scope = FlagScope(self.tree, self.module, self.is_package)
            verdict = self.conditions.facts.decide(test, self.flag_scope)
        return verdict

    def block(self, body, klass, fallback):
        for node in body:
            self.statement(node, klass, fallback)

    def statement(self, node, klass, fallback):
        kind = type(node).__name__
        if kind == "Import":
            for alias in node.names:
                self.sites.append(ImportSite(alias.name, [], node.lineno, klass, fallback))
        elif kind == "ImportFrom":
            target = absolute_module(node.module, node.level, self.module, self.is_package)
            names = [a.name for a in node.names if a.name != "*"]
            self.sites.append(ImportSite(target or "." * node.level + (node.module or ""), names, node.lineno, klass,
                                         fallback, relative_error=target is None))
        elif kind in ("FunctionDef", "AsyncFunctionDef"):
            self.block(node.body, max(klass, DEFERRED), fallback)
        elif kind == "ClassDef":
            self.block(node.body, klass, fallback)
        elif kind in ("Try", "TryStar"):
            self.try_statement(node, klass, fallback)
        elif kind == "If":
            self.if_statement(node, klass, fallback)
        elif kind in ("For", "AsyncFor", "While", "With", "AsyncWith"):
            self.block(node.body, klass, fallback)
            self.block(getattr(node, "orelse", []), klass, fallback)
        elif kind == "Match":
            for case in node.cases:
                self.block(case.body, max(klass, CONDITION), fallback)

    def try_statement(self, node, klass, fallback):
        caught = set()
        for handler in node.handlers:
            caught |= handler_names(handler)
        guarded = bool(caught & IMPORT_GUARDS)
        self.block(node.body, max(klass, GUARDED) if guarded else klass, fallback)
        tried = _imported_in(node.body, self.module, self.is_package)
        for handler in node.handlers:
            # A handler's import runs only when the try body failed: when what the body
            # imports resolves, the walk drops it (see drift_walk.py).
            names = handler_names(handler)
            self.block(handler.body, klass, tried if (names & IMPORT_GUARDS and tried) else fallback)
        self.block(node.orelse, klass, fallback)
        self.block(node.finalbody, klass, fallback)

    def if_statement(self, node, klass, fallback):
        test = node.test
        if _is_type_checking(test):
            self.block(node.body, TYPING, fallback)
            self.block(node.orelse, klass, fallback)
            return
        if _is_main_test(test):
            if self.as_main:
                self.block(node.body, klass, fallback)
            self.block(node.orelse, klass, fallback)
            return
        verdict = self.decide(test)
        if verdict is True:
            self.block(node.body, klass, fallback)
        elif verdict is False:
            self.block(node.orelse, klass, fallback)
        else:
            self.block(node.body, max(klass, CONDITION), fallback)
            self.block(node.orelse, max(klass, CONDITION), fallback)


def import_sites(tree, module, is_package, conditions, as_main=False):
    """The ImportSites of a parsed file, in source order."""
    return SiteLister(module, is_package, conditions, as_main).run(tree)
