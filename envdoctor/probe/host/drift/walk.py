# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "drift" section (sent after drift_imports.py, before drift.py): where an
# import would be found, and the walk from a stage's entry along the imports it reaches.
#
# ImportFinder looks a module up as the interpreter would, without importing anything:
# builtin modules, then the entry's first sys.path folder (the script's folder, or the
# working folder for -m), the folders a .pth file's code puts first (pth_code_paths), the
# standard library, the site folders and the folders their .pth files add, then setuptools'
# editable finders (__editable___*_finder.py MAPPING). A package
# folder needs __init__.py; a folder without one is a namespace portion that a later
# regular package wins over, as importlib decides.
#
# ImportWalk follows the imports (drift_imports.py) from the entries through the job's own
# files (the entry's folder, .pth and editable folders) and the distributions the drift
# section reads (consumers); every other module is only looked up, not read. It keeps, per
# file, the surest class it was reached by, and lists each import whose module is missing.
# The drift section's entry scope is the consumer files this same walk reaches.

import ast
import os
import re
import sys

from envdoctor.probe.host.core import open_regular
from envdoctor.probe.host.drift.summaries import const_value, dotted, walk_nodes
from envdoctor.probe.host.drift.imports import CLASS_NAMES, IMPORT, TYPING, import_sites

try:
    from importlib.machinery import EXTENSION_SUFFIXES
except ImportError:  # (the probe's own interpreter always has it; a guard for a stripped one)
    EXTENSION_SUFFIXES = [".so"]

#: How many missing imports of each class the answer lists (all are counted).
MAX_LISTED = 400


def stdlib_names():
    """The standard library's top-level names for this interpreter (3.10+ says; older: its folder)."""
    names = set(getattr(sys, "stdlib_module_names", ()) or ())
    names.update(sys.builtin_module_names)
    if not getattr(sys, "stdlib_module_names", None):
        folder = os.path.dirname(os.__file__)
        for sub in (folder, os.path.join(folder, "lib-dynload")):
            try:
                for entry in os.listdir(sub):
                    names.add(entry.split(".")[0])
            except OSError:
                continue
    names.add("__future__")
    names.add("__main__")  # always in sys.modules: the running program
    return names


def editable_mapping(folders):
    """name -> folder from setuptools' editable finders (`MAPPING = {...}`), read as a literal."""
    found = {}
    for folder in folders:
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            if not (entry.startswith("__editable__") and entry.endswith("_finder.py")):
                continue
            try:
                with open_regular(os.path.join(folder, entry)) as handle:
                    tree = ast.parse(handle.read(1 << 20))
            except (OSError, SyntaxError, ValueError):
                continue
            for node in tree.body:
                target = getattr(node, "target", None) or (node.targets[0] if isinstance(node, ast.Assign) else None)
                if getattr(target, "id", None) == "MAPPING" and getattr(node, "value", None) is not None:
                    try:
                        mapping = ast.literal_eval(node.value)
                    except ValueError:
                        continue
                    if isinstance(mapping, dict):
                        for name, path in mapping.items():
                            if isinstance(name, str) and isinstance(path, str):
                                found.setdefault(name, path)
    return found


def _pth_value(node, site, imported):
    """The folder an expression of a .pth line names, read without running it: a string,
    os.path.join/dirname/abspath of such, or `pkg.__path__[0]` / `pkg.__file__` of a package
    the line imports from this site folder. None for anything else."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "__path__":
        name = dotted(node.value.value)
        if name in imported and os.path.isdir(os.path.join(site, *name.split("."))):
            return os.path.join(site, *name.split("."))
        return None
    if isinstance(node, ast.Attribute) and node.attr == "__file__":
        name = dotted(node.value)
        if name in imported and os.path.isfile(os.path.join(site, *name.split(".") + ["__init__.py"])):
            return os.path.join(site, *name.split(".") + ["__init__.py"])
        return None
    ok, value = const_value(node)
    if ok:
        return value if isinstance(value, str) else None
    if isinstance(node, ast.Call) and not node.keywords:
        func = dotted(node.func) or ""
        args = [_pth_value(a, site, imported) for a in node.args]
        if any(a is None for a in args) or not args:
            return None
        if func in ("os.path.join", "join", "path.join"):
            return os.path.join(*args)
        if func in ("os.path.dirname", "dirname") and len(args) == 1:
            return os.path.dirname(args[0])
        if func in ("os.path.abspath", "os.path.realpath") and len(args) == 1:
            return os.path.abspath(args[0])
    return None


def pth_code_paths(site):
    """(front, back): the folders the code lines of a site folder's .pth files put on sys.path
    (`import sys, os, nvidia_cutlass_dsl; sys.path.insert(0, os.path.join(
    nvidia_cutlass_dsl.__path__[0], 'dsl_packages'))`), read with ast, never run; front for
    `sys.path.insert(0, ...)`, back for `sys.path.append(...)`. A line this cannot read adds
    nothing (the import system may then find more than files say: never less than here)."""
    front, back = [], []
    try:
        names = sorted(n for n in os.listdir(site) if n.endswith(".pth") and not n.startswith("."))
    except OSError:
        return front, back
    for name in names:
        try:
            with open_regular(os.path.join(site, name)) as handle:
                text = handle.read(1 << 16).decode("utf-8", "replace")
        except OSError:
            continue
        for line in text.splitlines():
            if not line.startswith(("import ", "import\t")):
                continue
            try:
                tree = ast.parse(line)
            except (SyntaxError, ValueError):
                continue
            imported = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    imported.update(alias.name for alias in node.names if not alias.asname)
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call) or dotted(node.func) not in ("sys.path.insert", "sys.path.append"):
                    continue
                where = node.args[-1] if node.args else None
                folder = _pth_value(where, site, imported) if where is not None else None
                if folder is None or not os.path.isdir(folder):
                    continue
                folder = os.path.normpath(folder)
                chosen = front if dotted(node.func) == "sys.path.insert" else back
                if folder not in front and folder not in back:
                    chosen.append(folder)
    return front, back


class ImportFinder(object):
    """Where a module would be found. find(module) -> Found. `front`: folders searched after
    path0 and before the standard library (what a .pth line inserts at 0)."""

    def __init__(self, path0, sites, extra, editable=None, stdlib=None, front=()):
        self.path0 = list(path0)
        self.sites = list(sites)
        self.front = [p for p in front if p not in self.sites]
        self.extra = [p for p in extra if p not in self.sites and p not in self.front]
        self.editable = editable or {}
        self.stdlib = stdlib if stdlib is not None else stdlib_names()
        self.listings = {}
        self.found = {}

    def names_in(self, folder):
        if folder not in self.listings:
            try:
                self.listings[folder] = set(os.listdir(folder))
            except OSError:
                self.listings[folder] = set()
        return self.listings[folder]

    def in_folder(self, folder, name):
        """(kind, path) of `name` in one folder: pkg (its __init__.py), ext, mod, ns (a folder), or None."""
        names = self.names_in(folder)
        base = os.path.join(folder, name)
        if name in names and os.path.isdir(base):
            init = os.path.join(base, "__init__.py")
            if os.path.isfile(init):
                return "pkg", init
            if any(os.path.isfile(os.path.join(base, "__init__" + s)) for s in EXTENSION_SUFFIXES + [".pyc"]):
                return "ext", base
        # A folder without __init__ is a namespace portion only when no module of the name is
        # beside it (FileFinder: pydantic_core/_pydantic_core/ of stubs beside the .so).
        for suffix in EXTENSION_SUFFIXES:
            if name + suffix in names:
                return "ext", base + suffix
        if name + ".py" in names:
            return "mod", base + ".py"
        if name + ".pyc" in names:
            return "ext", base + ".pyc"
        if name in names and os.path.isdir(base):
            return "ns", base
        return None

    def search(self, folders, name, origins):
        """The first regular hit in the folders, else the namespace portions found."""
        portions = []
        for folder, origin in zip(folders, origins):
            hit = self.in_folder(folder, name)
            if hit is None:
                continue
            if hit[0] == "ns":
                portions.append(hit[1])
                continue
            return hit[0], hit[1], origin, portions
        return None, None, None, portions

    def top(self, name):
        if name in sys.builtin_module_names:
            return Found("found", "builtin", None, "stdlib")
        first = self.path0 + self.front
        folders = first + self.sites + self.extra
        origins = ["local"] * len(self.path0) + ["path"] * len(self.front) + ["site"] * len(self.sites) + \
            ["path"] * len(self.extra)
        kind, path, origin, portions = self.search(first, name, origins[:len(first)])
        if kind is None and name in self.stdlib:
            return Found("found", "stdlib", None, "stdlib")
        if kind is None:
            kind, path, origin, more = self.search(folders[len(first):], name, origins[len(first):])
            portions += more
        if kind is None and name in self.editable:
            return self.mapped(name, self.editable[name])
        if kind is None and portions:
            return Found("found", "ns", None, "path", dirs=portions)
        if kind is None:
            return Found("missing", None, None, None, missing=name)
        return Found("found", kind, path, origin, name=name)

    def mapped(self, name, path, chain=None):
        if os.path.isfile(os.path.join(path, "__init__.py")):
            return Found("found", "pkg", os.path.join(path, "__init__.py"), "path", chain=chain, name=name)
        if os.path.isfile(path) and path.endswith(".py"):
            return Found("found", "mod", path, "path", chain=chain, name=name)
        if os.path.isdir(path):
            return Found("found", "ns", None, "path", dirs=[path], chain=chain)
        return Found("missing", None, None, None, missing=name, chain=chain)

    def find(self, module):
        """Found for a dotted module: each prefix is looked up inside its parent's folder(s)."""
        if module in self.found:
            return self.found[module]
        parent, _, leaf = module.rpartition(".")
        if not parent:
            result = self.top(module)
        else:
            above = self.find(parent)
            result = self.child(above, module, leaf)
        self.found[module] = result
        return result

    def child(self, above, module, leaf):
        if above.status != "found":
            return above
        if above.kind not in ("pkg", "ns"):
            # A plain module, a compiled one or the standard library: what it provides as
            # submodules (six.moves, os.path) is not in files.
            return Found("unknown", None, None, above.origin, chain=above.chain)
        dirs = above.dirs or [os.path.dirname(above.path)]
        kind, path, _, portions = self.search(dirs, leaf, [above.origin] * len(dirs))
        if kind is None and module in self.editable:
            return self.mapped(module, self.editable[module], above.chain)
        if kind is None and portions:
            return Found("found", "ns", None, above.origin, dirs=portions, chain=above.chain)
        if kind is None and above.kind == "pkg" and _extends_path(above.path):
            return Found("unknown", None, None, above.origin, chain=above.chain)
        if kind is None:
            return Found("missing", None, None, None, missing=module, parent=above, chain=above.chain)
        return Found("found", kind, path, above.origin, chain=above.chain, name=module)


def _extends_path(init):
    """Whether a package's __init__.py changes its __path__ (pkgutil.extend_path and the
    like): its submodules may then live in folders files do not name."""
    try:
        with open_regular(init) as handle:
            return b"__path__" in handle.read(4 * 1024 * 1024)
    except OSError:
        return True


class Found(object):
    """status found/missing/unknown; kind pkg/mod/ext/ns/stdlib/builtin; path of the .py that
    runs (a package's __init__.py); chain: (module, file) of what importing it runs, parents first."""

    __slots__ = ("status", "kind", "path", "origin", "dirs", "missing", "parent", "chain")

    def __init__(self, status, kind, path, origin, dirs=None, missing=None, parent=None, chain=None, name=None):
        self.status = status
        self.kind = kind
        self.path = path
        self.origin = origin
        self.dirs = dirs
        self.missing = missing
        self.parent = parent
        self.chain = list(chain or []) + ([(name, path)] if path and kind in ("pkg", "mod") else [])


class ImportWalk(object):
    """The walk from entries along their imports. `owner(path)` -> the distribution name of a
    site file (or None); `follow_dists`: canonical names of the distributions whose files are
    read; `read(path)` -> bytes (the section's counted reader)."""

    def __init__(self, finder, conditions, read, owner, follow_dists, relative, max_files=20000,
                 library_class=TYPING):
        self.finder = finder
        # A library's files are read only when reached by imports up to this class: the
        # import-time closure (CONDITION) for code.imports alone; every import (TYPING) when
        # the walk also scopes drift, which reads what a function-level import reaches too.
        self.library_class = library_class
        self.conditions = conditions
        self.read = read
        self.owner = owner
        self.follow_dists = follow_dists
        self.relative = relative
        self.max_files = max_files
        self.buckets = [[] for _ in CLASS_NAMES]
        self.klass = {}  # path -> the surest class it was reached by
        self.done = set()
        self.main_files = set()
        self.missing = []
        self.counts = {"files": 0, "sites": 0, "unknown": 0, "missing": [0] * len(CLASS_NAMES)}
        self.errors = []
        self.truncated = False
        self.bound = {}  # path -> (names its module level binds, whether it makes names at run time)
        self.pending = []  # `from package import name`: a name or a submodule, told once the package is read
        self.library_files = set()  # files of libraries not followed, read for their sure imports

    def add(self, path, module, klass, as_main=False):
        if as_main:
            self.main_files.add(path)
        if path in self.klass and self.klass[path] <= klass:
            return
        self.klass[path] = klass
        self.buckets[klass].append((path, module))

    def in_site(self, path):
        return any(path.startswith(site.rstrip("/") + "/") for site in self.finder.sites)

    def enqueue(self, found, klass):
        """Queue the files importing a module runs: each package on the way, then the module.
        A file of another installed library is read too when the import surely runs (class
        "import"), for its own sure imports only: `safetensors.torch` runs `import torch`."""
        for module, path in found.chain:
            if not self.in_site(path) or (klass <= self.library_class and self.owner(path) in self.follow_dists):
                self.library_files.discard(path)
                self.add(path, module, klass)
            elif klass == IMPORT and path not in self.klass:
                self.library_files.add(path)
                self.add(path, module, klass)

    def run(self):
        for klass, bucket in enumerate(self.buckets):
            while bucket:
                path, module = bucket.pop()
                if path in self.done or self.klass.get(path) != klass:
                    continue
                if self.counts["files"] >= self.max_files:
                    self.truncated = True
                    return
                self.done.add(path)
                self.visit(path, module, klass)
        self.names_taken()

    def names_taken(self):
        """`from package import name` where name is neither a submodule nor bound by the
        package's __init__.py (when this walk read it and nothing there makes names at run time)."""
        for site, path, klass, found, name in self.pending:
            if found.path not in self.bound and not self.in_site(path):
                self.bound[found.path] = self.names_of(found.path)  # the job's own import of a library's name
            names, dynamic = self.bound.get(found.path, (None, True))
            if not dynamic and name not in names:
                missing = Found("missing", None, None, None, missing=site.module + "." + name, parent=found)
                self.note_missing(site, path, klass, missing)

    def names_of(self, init):
        try:
            return bound_names(ast.parse(self.read(init), filename=init))
        except (OSError, SyntaxError, ValueError, RecursionError):
            return None, True

    def visit(self, path, module, klass):
        if path in self.library_files:
            return self.visit_library(path, module)
        try:
            tree = ast.parse(self.read(path), filename=path)
        except (OSError, SyntaxError, ValueError, RecursionError) as exc:
            self.errors.append({"path": self.relative(path), "message": str(exc)[:300]})
            return
        self.counts["files"] += 1
        is_package = path.endswith("__init__.py")
        if is_package:
            self.bound[path] = bound_names(tree)
        library = path in self.library_files
        for site in import_sites(tree, module, is_package, self.conditions, path in self.main_files):
            if library and site.klass != IMPORT:
                continue  # the library's optional imports are its own affair
            self.site(site, path, max(klass, site.klass))

    def visit_library(self, path, module):
        """A library file's sure imports without parsing it: those are the import statements
        at the start of a line (any other is indented inside a block), each parsed alone. A
        docstring line that looks like one may add a module to follow; a missing module is
        reported only when the parsed file confirms the import."""
        try:
            data = self.read(path)
        except OSError as exc:
            self.errors.append({"path": self.relative(path), "message": str(exc)[:300]})
            return
        self.counts["files"] += 1
        is_package = path.endswith("__init__.py")
        confirmed = None
        for site in top_import_sites(data, module, is_package):
            if self.finder.find(site.module).status == "missing" and not site.relative_error:
                if confirmed is None:
                    try:
                        tree = ast.parse(data, filename=path)
                    except (SyntaxError, ValueError, RecursionError):
                        tree = None
                    confirmed = set((s.module, s.line) for s in import_sites(tree, module, is_package, self.conditions)
                                    if s.klass == IMPORT) if tree is not None else set()
                if (site.module, site.line) not in confirmed:
                    continue
            self.site(site, path, IMPORT)

    def resolves(self, module):
        return self.finder.find(module).status != "missing"

    def site(self, site, path, klass):
        self.counts["sites"] += 1
        if site.fallback and all(self.resolves(m) for m in site.fallback):
            return  # the try body it stands in for imports fine: this handler never runs
        if site.relative_error:
            self.note_missing(site, path, klass, None, "a relative import beyond the top-level package")
            return
        found = self.finder.find(site.module)
        # The packages on the way run even when the module is missing; imports only a type
        # checker reads are followed too (drift's scope reads them), at their class.
        self.enqueue(found, klass)
        if found.status == "missing":
            self.note_missing(site, path, klass, found)
            return
        if found.status == "unknown":
            self.counts["unknown"] += 1
        if found.kind in ("pkg", "ns") and site.names:
            for name in site.names:
                sub = self.finder.find(site.module + "." + name)
                if sub.status == "found":
                    self.enqueue(sub, klass)
                elif sub.status == "missing" and found.kind == "pkg":
                    self.pending.append((site, path, klass, found, name))

    def note_missing(self, site, path, klass, found, why=""):
        self.counts["missing"][klass] += 1
        listed = sum(1 for m in self.missing if m["class"] == CLASS_NAMES[klass])
        if listed >= MAX_LISTED:
            return
        record = {"file": self.relative(path), "line": site.line, "module": site.module, "names": site.names,
                  "class": CLASS_NAMES[klass], "entry_file": path in self.main_files,
                  "importer": self.owner(path) if self.in_site(path) else None}
        if found is not None:
            record["missing"] = found.missing
            if found.parent is not None:
                there = found.parent.path or (found.parent.dirs or [""])[0]
                record["parent"] = {"kind": found.parent.kind, "origin": found.parent.origin,
                                    "path": self.relative(there),
                                    "distribution": self.owner(there) if self.in_site(there) else None}
        else:
            record["missing"] = site.module
            record["why"] = why
        self.missing.append(record)

    def reached(self, predicate):
        """The files read (and how surely), for those the predicate accepts."""
        return dict((p, CLASS_NAMES[k]) for p, k in self.klass.items() if p in self.done and predicate(p))


_TOP_IMPORT = re.compile(rb"^(?:import|from)[ \t]", re.M)


def top_import_sites(data, module, is_package):
    """ImportSites of the import statements that start a line (module level, outside any
    block), each statement parsed on its own (with its parenthesised or continued lines)."""
    found = []
    line, counted = 1, 0
    for match in _TOP_IMPORT.finditer(data):
        start = match.start()
        line += data.count(b"\n", counted, start)
        counted = start
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        text = data[start:end]
        if b"(" in text and b")" not in text:
            close = data.find(b")", end)
            if close < 0:
                continue
            end = close + 1
        while data[start:end].rstrip().endswith(b"\\"):
            more = data.find(b"\n", end + 1)
            end = len(data) if more < 0 else more
        try:
            tree = ast.parse(data[start:end])
        except (SyntaxError, ValueError):
            continue
        for site in import_sites(tree, module, is_package, None):
            site.line = line
            site.klass = IMPORT
            found.append(site)
    return found


def bound_names(tree):
    """(the names a module binds at its top level, whether it may make others at run time: a
    star import, a module __getattr__, writes to globals() or sys.modules)."""
    names = set()
    dynamic = False
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        kind = type(node).__name__
        if kind in ("FunctionDef", "AsyncFunctionDef", "ClassDef"):
            names.add(node.name)
            dynamic = dynamic or node.name == "__getattr__"
            continue
        if kind in ("Import", "ImportFrom"):
            for alias in node.names:
                if alias.name == "*":
                    dynamic = True
                names.add(alias.asname or alias.name.split(".")[0])
            continue
        for child in walk_nodes(node):
            if isinstance(child, ast.Name) and not isinstance(child.ctx, ast.Load):
                names.add(child.id)
            elif isinstance(child, ast.Call) and (dotted(child.func) or "").split(".")[-1] in ("globals", "setattr",
                                                                                                "update"):
                dynamic = True
            elif isinstance(child, ast.Attribute) and child.attr == "modules":
                dynamic = True
        for field in ("body", "orelse", "finalbody", "handlers"):
            stack.extend(getattr(node, field, []) or [])
    return names, dynamic


def shadows(folders, finder, owner_of):
    """Modules and packages in the given folders (first on sys.path) that hide an installed
    top-level one of the same name: only a regular package, a module or a compiled module
    hides; a folder without __init__.py is a namespace portion a regular package wins over."""
    found = []
    installed_finder = ImportFinder([], finder.sites, finder.extra, finder.editable, set(), finder.front)
    for folder in folders:
        for entry in sorted(finder.names_in(folder)):
            name = entry[:-3] if entry.endswith(".py") else entry.split(".")[0] if "." in entry else entry
            if not name or name.startswith((".", "_")) or not name.replace("_", "a").isalnum():
                continue
            local = finder.in_folder(folder, name)
            if local is None or local[0] == "ns":
                continue
            installed = installed_finder.top(name)
            if installed.status != "found" or installed.kind in ("ns", "stdlib", "builtin"):
                continue
            there = installed.path or ""
            if os.path.realpath(local[1]) == os.path.realpath(there):
                continue  # the same files (an editable install of this very checkout)
            record = {"folder": folder, "name": name, "local": local[1], "installed": there,
                      "distribution": owner_of(there)}
            if record not in found:
                found.append(record)
    return found
