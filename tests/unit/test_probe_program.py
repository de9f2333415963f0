"""The probe program: modules concatenated without their imports of each other."""

from __future__ import annotations

import ast
from pathlib import Path

from envdoctor.probe import program
from envdoctor.probe.host import module_source, without_host_imports


def test_every_section_program_compiles_without_envdoctor_imports() -> None:
    """Each section's program parses and imports nothing from envdoctor (it runs on a bare host)."""
    for name in program.SECTION_MODULES:
        tree = ast.parse(program.build_program([name]))
        modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not any(m and m.startswith("envdoctor") for m in modules), name


def test_parenthesized_imports_between_probe_modules_are_dropped_whole() -> None:
    """A `from envdoctor.probe.host.core import (a,\\n b)` over several lines leaves no dangling line."""
    source = "import os\nfrom envdoctor.probe.host.core import (a,\n    b,\n    c)\nx = 1\nfrom envdoctor.probe.host.core import d\n"
    assert without_host_imports(source) == "import os\nx = 1\n"


def test_every_probe_module_is_read_without_its_probe_imports() -> None:
    """Each shipped probe module comes out of _module_source with no import of another probe module."""
    folder = Path(program.__file__).parent / "host"
    for path in sorted(folder.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        text = module_source(".".join(path.relative_to(folder).with_suffix("").parts))
        assert "from envdoctor.probe" not in text and text.strip(), path.name


def test_compiling_a_librarys_sources_warns_nothing():
    """The probe reads sources with ast; their invalid escapes (SyntaxWarning on 3.12, a
    DeprecationWarning before) are filtered before the sections run, so nothing reaches stderr."""
    import warnings

    from envdoctor.probe.host.guard import quiet_compile_warnings

    source = "pattern = '\\d+'\n"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        compile(source, "lib.py", "exec")
        assert seen, "this Python no longer warns on an invalid escape: the test needs another trigger"
        seen.clear()
        quiet_compile_warnings()
        compile(source, "lib.py", "exec")
        import ast

        ast.parse(source)
    assert not seen, [str(w.message) for w in seen]
