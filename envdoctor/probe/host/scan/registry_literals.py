# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "architecture" section (sent before engine_registry.py): the value of the
# mapping tables a module builds at its top level, read from its syntax tree, never run.
# transformers spells CONFIG_MAPPING_NAMES as `OrderedDict[str, str]([(k, v), ...])` (4.x),
# imports it from auto_mappings.py and `.update()`s it (5.x); vLLM builds _VLLM_MODELS as
# `{**_TEXT_GENERATION_MODELS, ...}` and _CONFIG_REGISTRY as `LazyConfigDict(k="Cls", ...)`;
# SGLang's _CONFIG_REGISTRY is a list of classes turned into `{c.model_type: c for c in ...}`,
# with `_CONFIG_REGISTRY["deepseek_v32"] = Alias` added below it (0.5.2x).
# A name that is not a table (a class, a function's result) stays a Symbol: its dotted text.

import ast

from envdoctor.probe.host.drift.summaries import const_value, dotted

#: Callables that build a mapping from pairs or keywords.
MAPPING_CALLS = frozenset(["OrderedDict", "dict", "LazyConfigDict", "_LazyConfigMapping", "defaultdict"])
#: Elements a table may hold; a bigger one is cut (a module cannot make the host build gigabytes).
MAX_ITEMS = 200000


class Symbol(str):
    """A name the module binds to something that is not a table (a class, usually)."""


class TableReader(object):
    """Evaluates a module's top-level table assignments. `load(relative_module)` returns the
    names another module of the same package defines (for `from .x import NAME`)."""

    def __init__(self, load=None):
        self.load = load
        self.values = {}
        self.items = 0

    def run(self, tree):
        for node in tree.body:
            self.statement(node)
        return self.values

    def statement(self, node):
        kind = type(node).__name__
        if kind == "Assign":
            value = self.value(node.value)
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.values[target.id] = value
                elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    self.set_item(target, value)  # TABLE["key"] = value on a table read before
        elif kind == "AnnAssign" and node.value is not None and isinstance(node.target, ast.Name):
            self.values[node.target.id] = self.value(node.value)
        elif kind == "Expr" and isinstance(node.value, ast.Call):
            self.update_call(node.value)
        elif kind == "ImportFrom" and self.load is not None and node.level == 1 and node.module and \
                any(alias.name.isupper() for alias in node.names):  # tables are UPPER_CASE constants
            names = self.load(node.module or "")
            for alias in node.names:
                if alias.name in names:
                    self.values[alias.asname or alias.name] = names[alias.name]
        elif kind in ("Try", "TryStar"):
            for inner in node.body:
                self.statement(inner)
        elif kind == "If":
            # `if X: TABLE["k"] = A else: TABLE["k"] = B`: the key is there either way; the first
            # branch's value is kept (which one runs is the host's import state, never evaluated).
            for inner in node.body + node.orelse:
                if type(inner).__name__ in ("If", "Try", "TryStar"):
                    self.statement(inner)
                elif type(inner).__name__ == "Assign" and all(isinstance(t, ast.Subscript) for t in inner.targets):
                    for target in inner.targets:
                        if isinstance(target.value, ast.Name):
                            self.set_item(target, self.value(inner.value), keep=True)

    def set_item(self, target, value, keep=False):
        table = self.values.get(target.value.id)
        key_node = target.slice.value if type(target.slice).__name__ == "Index" else target.slice  # (3.8's Index)
        ok, key = const_value(key_node)
        if isinstance(table, dict) and ok and isinstance(key, str) and not (keep and key in table):
            self.count()
            table[key] = value

    def update_call(self, call):
        """`NAME.update({...})` (or pairs, or keywords) on a table read before."""
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr == "update" and isinstance(func.value, ast.Name)):
            return
        table = self.values.get(func.value.id)
        if not isinstance(table, dict):
            return
        for arg in call.args:
            self.merge(table, self.value(arg))
        for keyword in call.keywords:
            if keyword.arg is None:
                self.merge(table, self.value(keyword.value))
            else:
                table[keyword.arg] = self.value(keyword.value)

    def merge(self, table, value):
        if isinstance(value, dict):
            table.update(value)
        elif isinstance(value, list):
            for pair in value:
                if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str):
                    table[pair[0]] = pair[1]

    def count(self, n=1):
        self.items += n
        if self.items > MAX_ITEMS:
            raise ValueError("more than %d table items" % MAX_ITEMS)

    def value(self, node, scope=None):
        ok, constant = const_value(node)
        if ok:
            return constant
        kind = type(node).__name__
        if kind in ("Tuple", "List"):
            self.count(len(node.elts))
            items = []
            for element in node.elts:
                if type(element).__name__ == "Starred":  # [*list(OTHER.items()), ...]
                    inner = self.value(element.value, scope)
                    items.extend([[k, v] for k, v in inner.items()] if isinstance(inner, dict) else
                                 inner if isinstance(inner, list) else [])
                else:
                    items.append(self.value(element, scope))
            return items
        if kind == "Dict":
            table = {}
            self.count(len(node.keys))
            for key, item in zip(node.keys, node.values):
                if key is None:
                    self.merge(table, self.value(item, scope))
                else:
                    table[self.key(self.value(key, scope))] = self.value(item, scope)
            return table
        if kind == "Call":
            return self.call(node, scope)
        if kind == "DictComp":
            return self.dict_comprehension(node, scope)
        if kind == "Name":
            if scope and node.id in scope:
                return scope[node.id]
            if node.id in self.values:
                return self.values[node.id]
            return Symbol(node.id)
        if kind == "Attribute":
            base = self.value(node.value, scope)
            if isinstance(base, Symbol):
                return Symbol(base + "." + node.attr)
            return None
        return None

    def key(self, value):
        if isinstance(value, list):
            return tuple(value)
        try:
            hash(value)
        except TypeError:
            return repr(value)
        return value

    def call(self, node, scope):
        func = node.func.value if isinstance(node.func, ast.Subscript) else node.func
        name = (dotted(func) or "").split(".")[-1]
        if isinstance(func, ast.Attribute) and func.attr == "items" and not node.args:
            table = self.value(func.value, scope)  # OTHER.items(): its pairs
            return [[k, v] for k, v in table.items()] if isinstance(table, dict) else None
        if name in ("list", "tuple") and len(node.args) == 1 and not node.keywords:
            inner = self.value(node.args[0], scope)
            return inner if isinstance(inner, list) else None
        if name not in MAPPING_CALLS:
            return None
        table = {}
        for arg in node.args[:1] if name != "defaultdict" else node.args[1:2]:
            self.merge(table, self.value(arg, scope))
        for keyword in node.keywords:
            if keyword.arg is None:
                self.merge(table, self.value(keyword.value, scope))
            else:
                table[keyword.arg] = self.value(keyword.value, scope)
        return table

    def dict_comprehension(self, node, scope):
        """{k: v for target in TABLE_OR_PAIRS if CONDITION}: the targets a name or nested tuples
        of names, each condition a comparison of what they hold (else the table is not read)."""
        if len(node.generators) != 1:
            return None
        generator = node.generators[0]
        items = self.value(generator.iter, scope)
        if isinstance(items, dict):
            items = list(items)
        if not isinstance(items, list):
            return None
        table = {}
        self.count(len(items))
        for item in items:
            inner = dict(scope or {})
            if not self.bind(generator.target, item, inner):
                return None
            verdicts = [self.holds(test, inner) for test in generator.ifs]
            if None in verdicts:
                return None
            if all(verdicts):
                table[self.key(self.value(node.key, inner))] = self.value(node.value, inner)
        return table

    def bind(self, target, value, scope):
        if isinstance(target, ast.Name):
            scope[target.id] = value
            return True
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, list) and len(value) == len(target.elts):
            return all(self.bind(t, v, scope) for t, v in zip(target.elts, value))
        return False

    def holds(self, test, scope):
        """A comprehension's condition: ==, !=, in, not in, and/or/not of them; None when unknown."""
        kind = type(test).__name__
        if kind == "BoolOp":
            verdicts = [self.holds(v, scope) for v in test.values]
            if None in verdicts:
                return None
            return all(verdicts) if type(test.op).__name__ == "And" else any(verdicts)
        if kind == "UnaryOp" and type(test.op).__name__ == "Not":
            verdict = self.holds(test.operand, scope)
            return None if verdict is None else not verdict
        if kind != "Compare" or len(test.ops) != 1:
            return None
        left, right = self.value(test.left, scope), self.value(test.comparators[0], scope)
        if isinstance(left, Symbol) or isinstance(right, Symbol) or left is None or right is None:
            return None
        op = type(test.ops[0]).__name__
        try:
            return {"Eq": lambda: left == right, "NotEq": lambda: left != right,
                    "In": lambda: left in right, "NotIn": lambda: left not in right}[op]()
        except (KeyError, TypeError):
            return None


def read_tables(source, load=None):
    """The top-level names of a module's source bound to tables (dicts, lists, constants)."""
    return TableReader(load).run(ast.parse(source))
