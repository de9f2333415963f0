"""The layout keeps its promises: no import cycles, layers import downward only, the host side
of the probe imports only the standard library, every package says what it owns, and the
content packages load from this checkout.

The import graph is read with ``ast`` from the source, imports inside functions included: an
import deferred for start-up cost is still an edge, so a deferral can never hide a cycle.
"""

from __future__ import annotations

import ast
import graphlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Low to high: a module may import its own layer and those below, never one above.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("envdoctor", "envdoctor.errors", "envdoctor.logsafe", "envdoctor.config_trust", "envdoctor.untrusted",
     "envdoctor.safe_text", "envdoctor.suggestions", "envdoctor.user_cache"),
    ("envdoctor.probe.host",),
    ("envdoctor.transport",),
    ("envdoctor.probe",),
    ("envdoctor.inventory",),
    ("envdoctor.engine",),
    ("envdoctor.scan", "envdoctor.modelfacts", "envdoctor.gpu"),
    ("envdoctor.install", "envdoctor.patching", "envdoctor.drift", "envdoctor.compare"),
    ("envdoctor.audit",),
    ("envdoctor.operations",),
    ("envdoctor.stages",),
    ("envdoctor.report",),
    ("envdoctor.cli", "envdoctor.__main__"),
)
#: Content a user reads and extends: loaded by the engine by name, and allowed the engine and
#: the domain packages, never what runs commands (operations and above).
CONTENT = ("envdoctor.checks", "envdoctor.patches")
CONTENT_CEILING = "envdoctor.audit"


def module_files() -> dict[str, Path]:
    modules = {}
    for base, package in (("envdoctor", "envdoctor"), ("checks", "envdoctor.checks"), ("patches", "envdoctor.patches")):
        for path in sorted((ROOT / base).rglob("*.py")):
            parts = list(path.relative_to(ROOT / base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join([package, *parts])] = path
    return modules


MODULES = module_files()


def imports_of(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import in the file, at any depth, resolved to a module
    of envdoctor when it names one (``from pkg import name`` names the submodule when there is one)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in MODULES else base), node.lineno


def envdoctor_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {module: set() for module in MODULES}
    for module, path in MODULES.items():
        for target, _ in imports_of(module, path):
            if target in MODULES and target != module:
                edges[module].add(target)
    return edges


def layer_of(module: str) -> str:
    """The longest layer unit (or content package) that holds ``module``."""
    units = [u for layer in LAYERS for u in layer] + list(CONTENT)
    holding = [u for u in units if module == u or module.startswith(u + ".")]
    assert holding, f"{module} is in no layer: add it to LAYERS (and to docs/architecture.md)"
    return max(holding, key=len)


RANK = {unit: rank for rank, layer in enumerate(LAYERS) for unit in layer}


def test_the_import_graph_has_no_cycle():
    """No two modules import each other, directly or around a loop (function-level imports count)."""
    try:
        list(graphlib.TopologicalSorter(envdoctor_edges()).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")


def test_every_module_belongs_to_a_layer():
    """Each module of envdoctor, checks and patches sits in a named layer or content package."""
    for module in MODULES:
        layer_of(module)


def test_layers_import_only_downward():
    """No module imports one from a higher layer; content stays below operations."""
    wrong = []
    for source, targets in envdoctor_edges().items():
        here = layer_of(source)
        for target in targets:
            there = layer_of(target)
            if here in CONTENT:
                if there not in CONTENT and RANK[there] > RANK[CONTENT_CEILING]:
                    wrong.append(f"{source} -> {target}")
            elif there in CONTENT:
                if here not in ("envdoctor.cli",):  # the CLI may build checks from a user's patches
                    wrong.append(f"{source} -> {target}")
            elif RANK[there] > RANK[here]:
                wrong.append(f"{source} -> {target}")
    assert not wrong, "imports that go up a layer:\n" + "\n".join(sorted(wrong))


def test_transport_knows_nothing_of_the_inventory_or_the_cli():
    """transport/ reaches nothing but the foundation modules and the host programs it sends."""
    allowed = {"envdoctor", "envdoctor.errors", "envdoctor.logsafe", "envdoctor.safe_text", "envdoctor.user_cache",
               "envdoctor.probe.host"}
    for source, targets in envdoctor_edges().items():
        if source.startswith("envdoctor.transport"):
            outside = {t for t in targets if not t.startswith("envdoctor.transport") and t not in allowed}
            assert not outside, f"{source} imports {sorted(outside)}"


def test_host_modules_import_only_the_standard_library():
    """What runs on the host imports the stdlib and its own siblings, nothing installed."""
    for module, path in MODULES.items():
        if not module.startswith("envdoctor.probe.host"):
            continue
        for target, line in imports_of(module, path):
            top = target.split(".")[0]
            sibling = target.startswith("envdoctor.probe.host")
            assert sibling or top in sys.stdlib_module_names or top == "__future__", \
                f"{path.relative_to(ROOT)}:{line} imports {target}"


def test_every_package_says_what_it_owns_and_may_import():
    """Each package's __init__ has a docstring; the engine's subpackages name what they may import."""
    for module, path in MODULES.items():
        if path.name != "__init__.py":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text("utf-8")))
        assert doc, f"{path.relative_to(ROOT)} has no docstring"
        if module.count(".") >= 1 and module not in CONTENT:
            assert "import" in doc, f"{path.relative_to(ROOT)}: say what the package may import"


def test_content_packages_load_from_this_checkout():
    """envdoctor.checks and envdoctor.patches are this repository's checks/ and patches/."""
    import envdoctor.checks
    import envdoctor.patches

    assert Path(envdoctor.checks.__file__).resolve() == ROOT / "checks" / "__init__.py"
    assert Path(envdoctor.patches.__file__).resolve() == ROOT / "patches" / "__init__.py"


def test_few_modules_sit_at_the_top_of_envdoctor():
    """The top of the package holds only the foundation modules; the rest live in packages by domain."""
    top = sorted(p.stem for p in (ROOT / "envdoctor").glob("*.py"))
    assert top == ["__init__", "__main__", "config_trust", "errors", "inventory", "logsafe", "safe_text",
                   "suggestions", "untrusted", "user_cache"], top


#: The probe's bootstrap travels in argv (``python -c``), compacted to a few hundred bytes;
#: it only reads the request and the program from stdin and runs them.
ARGV_SIZED = {("envdoctor.probe.program", "_BOOTSTRAP")}


def program_strings(module: str, tree: ast.Module) -> Iterator[ast.Constant]:
    """String constants of a module, leaving out the values of the ARGV_SIZED names."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any((module, getattr(t, "id", "")) in ARGV_SIZED for t in node.targets):
            skipped |= {id(inner) for inner in ast.walk(node.value)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
            yield node


def test_host_programs_are_files_not_strings():
    """No module outside probe/host holds a Python program in a string (it would escape linters,
    ast tests and coverage); every program assembled from probe/host compiles."""
    from envdoctor.patching.host import HOST_PROGRAM
    from envdoctor.stages.programs import DETACHER, SUPERVISOR

    for module, path in MODULES.items():
        if module.startswith("envdoctor.probe.host"):
            continue
        for node in program_strings(module, ast.parse(path.read_text("utf-8"))):
            if node.value.count("\n") > 8:
                code = [line for line in node.value.splitlines() if line.startswith(("def ", "import ", "class "))]
                assert not code, f"{path.relative_to(ROOT)}:{node.lineno} holds a program in a string: {code[0]}"
    for program in (HOST_PROGRAM, SUPERVISOR, DETACHER):
        compile(program, "<host program>", "exec")
