# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "drift" section (sent before drift_resolve.py and drift.py): what a module
# of a provider defines, reduced from its syntax tree to plain JSON-able data. Nothing is
# imported or run: the host's own `ast` parses the files (its grammar is the one the job's
# interpreter will use).
#
# A module summary: {"pkg": bool, "names": {name: [binding...]}, "stars": [module...],
#   "getattr": bool (PEP 562 or a lazy-module object), "line": 1}
# A binding: {"k": kind, "line": N, "c": 1 when conditional, "tc": 1 under TYPE_CHECKING}
#   kind "def":   "sig", "dec" [[dotted, {kw: const}]], "ovl" (typing.overload), "wraps"
#   kind "class": "bases" [dotted|null], "dec", "meta" (a metaclass or class keywords),
#                 "body" {name: [binding]}, "fields" [[name, has_default, kind]]
#   kind "from":  "mod" (absolute), "name";  kind "import": "mod";  kind "alias": "to"
#   kind "value": anything else.
# A signature "sig": {"p": [[name, has_default, "p"|"pk"|"k"]], "va": bool, "kw": bool}

import ast
import re

#: Decorators that keep the signature of what they wrap (checked against the last part).
KEEP_SIGNATURE = frozenset([
    "staticmethod", "classmethod", "overload", "abstractmethod", "cache", "lru_cache", "cached_property",
    "wraps", "no_grad", "inference_mode", "contextmanager", "asynccontextmanager", "override", "final",
    "deprecated", "property", "setter", "getter", "deleter", "jit", "lazy", "total_ordering",
    "runtime_checkable", "unique", "register",
])
DATACLASS_DECORATORS = frozenset(["dataclass", "dataclasses.dataclass", "pydantic.dataclasses.dataclass"])
MAX_DEPTH = 24
#: Field specifiers of dataclasses and pydantic (`X.field()` of a class of one's own is a value).
FIELD_CALLS = frozenset(["field", "dataclasses.field", "Field", "pydantic.Field", "PrivateAttr", "pydantic.PrivateAttr"])
_EXEC_CALL = re.compile(rb"(?<![\w.])exec\(")


def _setattr_on(module, data):
    """Whether the source calls setattr on a name spelled as the module's own last part (the
    module imported into itself, as numpy.dtypes does)."""
    leaf = module.rsplit(".", 1)[-1].encode("ascii", "replace")
    return re.search(rb"(?<![\w.])setattr\(\s*" + re.escape(leaf) + rb"\s*,", data) is not None


def const_value(node):
    """(True, value) for a literal constant on every Python 3 version, else (False, None)."""
    if node is None:
        return False, None
    name = type(node).__name__
    if name == "Constant":
        return True, node.value
    if name == "Str" or name == "Bytes":
        return True, node.s
    if name == "Num":
        return True, node.n
    if name == "NameConstant":
        return True, node.value
    if name == "Ellipsis":
        return True, Ellipsis
    return False, None


_AST = ast.AST


def child_nodes(node):
    """The child nodes of a node (ast.iter_child_nodes without its generators, and without
    the Load/Store markers): walking every tree of a 50 MB library is most of the section's cost."""
    found = []
    for name in node._fields:
        if name == "ctx":
            continue
        value = getattr(node, name, None)
        if type(value) is list:
            found.extend(v for v in value if isinstance(v, _AST))
        elif isinstance(value, _AST):
            found.append(value)
    return found


def walk_nodes(tree):
    """Every node of a tree, parents before their children (as ast.walk, depth first)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child_nodes(node))


def dotted(node):
    """'a.b.c' for a Name or an attribute chain on a Name (subscripts dropped: Generic[T] -> Generic)."""
    if isinstance(node, ast.Subscript):
        node = node.value
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def absolute_module(module, level, current, is_package):
    """The absolute name of `from <level dots><module> import ...` inside module `current`."""
    if not level:
        return module or ""
    base = current.split(".") if is_package else current.split(".")[:-1]
    if level > 1:
        base = base[:len(base) - (level - 1)]
    if not base:
        return None
    return ".".join(base + ([module] if module else []))


def signature_of(args):
    params = []
    positional = list(getattr(args, "posonlyargs", [])) + list(args.args)
    first_default = len(positional) - len(args.defaults)
    posonly = len(getattr(args, "posonlyargs", []))
    for index, arg in enumerate(positional):
        params.append([arg.arg, 1 if index >= first_default else 0, "p" if index < posonly else "pk"])
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        params.append([arg.arg, 0 if default is None else 1, "k"])
    return {"p": params, "va": args.vararg is not None, "kw": args.kwarg is not None}


def decorator_list(node):
    found = []
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        keywords = {}
        if isinstance(dec, ast.Call):
            for kw in dec.keywords:
                ok, value = const_value(kw.value)
                if kw.arg and ok and isinstance(value, (bool, int, str)):
                    keywords[kw.arg] = value
        found.append([dotted(target) or "?", keywords])
    return found


def _uses_wraps(func):
    """A decorator whose wrapper is made with functools.wraps and forwards what it is given:
    one that edits its **kwargs first (huggingface_hub's validate_hf_hub_args drops
    deprecated keywords) changes what the wrapped function accepts."""
    for node in walk_nodes(func):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node is not func:
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                if (dotted(target) or "").split(".")[-1] == "wraps":
                    return not _edits_kwargs(node)
    return False


def _edits_kwargs(func):
    kwarg = func.args.kwarg.arg if func.args.kwarg is not None else None
    if kwarg is None:
        return False
    for node in walk_nodes(func):
        if isinstance(node, ast.Name) and node.id == kwarg and not isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == kwarg \
                and not isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                and node.func.value.id == kwarg and node.func.attr in ("pop", "update", "setdefault", "clear", "popitem"):
            return True
    return False


def _only_raises(func):
    """A body that is one `raise` (after its docstring): a marker a preprocessor rewrites
    (cutlass's `range_constexpr`), or an abstract method: not called for its signature."""
    body = func.body
    if body and isinstance(body[0], ast.Expr) and const_value(body[0].value)[0]:
        body = body[1:]
    return len(body) == 1 and isinstance(body[0], ast.Raise)


def _returns_its_argument(func):
    """`def mark(fn): ...; return fn` — a decorator that hands back what it was given."""
    params = func.args.args
    if not params:
        return False
    first = params[0].arg
    return any(isinstance(node, ast.Return) and isinstance(node.value, ast.Name) and node.value.id == first
               for node in func.body)


def _calls_dataclass(func):
    """A decorator of the provider's own that makes a dataclass (vLLM's @config calls
    pydantic's dataclass on the class)."""
    for node in walk_nodes(func):
        if isinstance(node, ast.Call) and (dotted(node.func) or "").split(".")[-1] == "dataclass":
            return True
    return False


def _field_default(value):
    """Whether a dataclass field's value gives it a default (field()/Field() without one does not)."""
    if value is None:
        return 0
    if isinstance(value, ast.Call):
        callee = dotted(value.func) or ""
        if callee in FIELD_CALLS:
            names = set(kw.arg for kw in value.keywords)
            if names & set(["default", "default_factory"]):
                return 1
            if value.args:
                ok, first = const_value(value.args[0])
                return 0 if (ok and first is Ellipsis) else 1
            return 0
    return 1


def _field_kind(annotation, value):
    text = dotted(annotation) or ""
    last = text.split(".")[-1]
    if last == "ClassVar":
        return "cv"
    if last == "InitVar":
        return "iv"
    if last == "KW_ONLY":
        return "kwmark"
    if isinstance(value, ast.Call) and (dotted(value.func) or "") in FIELD_CALLS:
        for kw in value.keywords:
            ok, flag = const_value(kw.value)
            if kw.arg == "init" and ok and flag is False:
                return "ni"
            if kw.arg == "kw_only" and ok and flag is True:
                return "kw"
    return "f"


class Summarizer(object):
    """One module's top-level bindings (and class bodies), conditional ones marked."""

    def __init__(self, module, is_package, data=None):
        self.module = module
        self.is_package = is_package
        self.stars = []
        self.getattr = False
        # Walking every function body costs more than parsing: only when the text can match.
        self.may_wrap = data is None or b"wraps" in data
        self.may_make_dataclass = data is None or b"dataclass" in data
        self.may_bind_globals = data is None or b"global " in data
        # Names made at run time (globals().update, setattr on the module, exec): what the
        # source does not define may still exist. numpy.dtypes imports itself and sets its
        # DType classes with setattr(dtypes, ...), from compiled code that calls it.
        self.dynamic = data is not None and (b"globals()" in data or b"sys.modules[__name__]" in data
                                             or _EXEC_CALL.search(data) is not None
                                             or (b"setattr(" in data and _setattr_on(module, data)))

    def summarize(self, tree):
        names = {}
        self.block(tree.body, names, cond=False, tc=False, top=True)
        return {"pkg": self.is_package, "names": names, "stars": self.stars, "getattr": self.getattr or self.dynamic}

    def add(self, names, name, binding, cond, tc):
        if cond:
            binding["c"] = 1
        if tc:
            binding["tc"] = 1
        names.setdefault(name, []).append(binding)

    def block(self, body, names, cond, tc, top):
        for node in body:
            self.statement(node, names, cond, tc, top)

    def statement(self, node, names, cond, tc, top):
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            binding = {"k": "def", "line": line, "sig": signature_of(node.args), "dec": decorator_list(node)}
            if any(d[0].split(".")[-1] == "overload" for d in binding["dec"]):
                binding["ovl"] = 1
            if _only_raises(node):
                binding["raises"] = 1
            if top and self.may_wrap and _uses_wraps(node):
                binding["wraps"] = 1
            if top and self.may_make_dataclass and _calls_dataclass(node):
                binding["dc"] = 1
            if top and _returns_its_argument(node):
                binding["wraps"] = 1  # an identity decorator (it marks the function and returns it)
            if top and node.name == "__getattr__":
                self.getattr = True
            if top and self.may_bind_globals:
                for inner in walk_nodes(node):
                    if isinstance(inner, ast.Global):
                        for global_name in inner.names:
                            self.add(names, global_name, {"k": "value", "line": inner.lineno}, True, tc)
            self.add(names, node.name, binding, cond, tc)
        elif isinstance(node, ast.ClassDef):
            self.add(names, node.name, self.class_binding(node, line), cond, tc)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.add(names, alias.asname, {"k": "import", "line": line, "mod": alias.name}, cond, tc)
                else:
                    root = alias.name.split(".")[0]
                    self.add(names, root, {"k": "import", "line": line, "mod": root}, cond, tc)
        elif isinstance(node, ast.ImportFrom):
            mod = absolute_module(node.module, node.level, self.module, self.is_package)
            if mod is None:
                return
            for alias in node.names:
                if alias.name == "*":
                    if top and mod not in self.stars:
                        self.stars.append(mod)
                    continue
                binding = {"k": "from", "line": line, "mod": mod, "name": alias.name}
                self.add(names, alias.asname or alias.name, binding, cond, tc)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            self.assignment(node, names, cond, tc, top, line)
        elif isinstance(node, ast.If):
            test = dotted(node.test) or ""
            is_tc = test.split(".")[-1] == "TYPE_CHECKING"
            self.block(node.body, names, True, tc or is_tc, top)
            self.block(node.orelse, names, True, tc, top)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            self.block(node.body, names, True, tc, top)
            for handler in node.handlers:
                self.block(handler.body, names, True, tc, top)
            self.block(node.orelse, names, True, tc, top)
            self.block(node.finalbody, names, cond, tc, top)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            self.block(node.body, names, cond, tc, top)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            for target in ast.walk(getattr(node, "target", node)):
                if isinstance(target, ast.Name):
                    self.add(names, target.id, {"k": "value", "line": line}, True, tc)
            self.block(node.body, names, True, tc, top)
            self.block(node.orelse, names, True, tc, top)
        elif isinstance(node, ast.Expr) and top:
            self.lazy_call(node.value)

    def lazy_call(self, value):
        # sys.modules[__name__] = _LazyModule(...) is an Assign; a bare call that installs a
        # lazy loader (lazy.attach / install_lazy) is recognised by its name only.
        if isinstance(value, ast.Call) and "lazy" in (dotted(value.func) or "").lower():
            self.getattr = True

    def assignment(self, node, names, cond, tc, top, line):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        value = node.value
        for target in targets:
            if isinstance(target, ast.Name):
                if isinstance(node, ast.AugAssign):
                    continue
                to = dotted(value) if value is not None else None
                if to is not None and not isinstance(value, ast.Subscript):
                    binding = {"k": "alias", "line": line, "to": to}
                else:
                    binding = {"k": "value", "line": line}
                if value is None:
                    binding["ann"] = 1  # a bare annotation: no runtime binding
                self.add(names, target.id, binding, cond, tc)
            elif isinstance(target, (ast.Tuple, ast.List)):
                for element in ast.walk(target):
                    if isinstance(element, ast.Name):
                        self.add(names, element.id, {"k": "value", "line": line}, cond, tc)

    def class_binding(self, node, line):
        body = {}
        fields = []
        kw_mode = False
        for child in node.body:
            self.class_statement(child, body, fields, False)
        for entry in fields:
            if entry[2] == "kwmark":
                kw_mode = True
            elif kw_mode and entry[2] == "f":
                entry[2] = "kw"
        fields = [f for f in fields if f[2] != "kwmark"]
        binding = {"k": "class", "line": line, "bases": [dotted(b) for b in node.bases],
                   "dec": decorator_list(node), "body": body, "fields": fields}
        if node.keywords:
            binding["meta"] = 1
        return binding

    def class_statement(self, child, body, fields, cond):
        line = getattr(child, "lineno", 0)
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            binding = {"k": "def", "line": line, "sig": signature_of(child.args), "dec": decorator_list(child)}
            if any(d[0].split(".")[-1] == "overload" for d in binding["dec"]):
                binding["ovl"] = 1
            if _only_raises(child):
                binding["raises"] = 1
            if cond:
                binding["c"] = 1
            body.setdefault(child.name, []).append(binding)
        elif isinstance(child, ast.ClassDef):
            body.setdefault(child.name, []).append({"k": "class", "line": line, "bases": [], "dec": [], "body": {},
                                                     "fields": [], "meta": 1})
        elif isinstance(child, ast.AnnAssign) and isinstance(child.target, ast.Name):
            name = child.target.id
            kind = _field_kind(child.annotation, child.value)
            fields.append([name, _field_default(child.value), kind])
            if child.value is not None or kind == "cv":
                body.setdefault(name, []).append({"k": "value", "line": line})
            else:
                body.setdefault(name, []).append({"k": "value", "line": line, "ann": 1})
        elif isinstance(child, ast.Assign):
            for target in child.targets:
                for element in ast.walk(target):
                    if isinstance(element, ast.Name):
                        body.setdefault(element.id, []).append({"k": "value", "line": line})
        elif isinstance(child, ast.If) or isinstance(child, ast.Try):
            parts = [child.body, child.orelse] + [h.body for h in getattr(child, "handlers", [])]
            for part in parts:
                for grand in part:
                    self.class_statement(grand, body, fields, True)


def summarize_source(data, module, is_package, path="<module>"):
    """The summary of one module's source bytes (SyntaxError propagates)."""
    tree = ast.parse(data, filename=path)
    summary = Summarizer(module, is_package, data if isinstance(data, bytes) else None).summarize(tree)
    for name, bindings in summary["names"].items():
        if name == "__getattr__":  # def __getattr__, or __getattr__ = deprecate_attr(...) (transformers)
            summary["getattr"] = True
    return summary
