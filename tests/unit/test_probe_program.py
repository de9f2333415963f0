"""The probe program: modules concatenated without their imports of each other."""

from __future__ import annotations

import ast

from envdoctor.probe import program


def test_every_section_program_compiles_without_envdoctor_imports() -> None:
    """Each section's program parses and imports nothing from envdoctor (it runs on a bare host)."""
    for name in program.SECTION_MODULES:
        tree = ast.parse(program.build_program([name]))
        modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not any(m and m.startswith("envdoctor") for m in modules), name


def test_parenthesized_imports_between_probe_modules_are_dropped_whole(monkeypatch) -> None:
    """A `from envdoctor.probe.core import (a,\\n b)` over several lines leaves no dangling line."""
    source = "import os\nfrom envdoctor.probe.core import (a,\n    b,\n    c)\nx = 1\nfrom envdoctor.probe.core import d\n"

    class Files:
        def joinpath(self, _name: str) -> "Files":
            return self

        def read_text(self, _encoding: str) -> str:
            return source

    monkeypatch.setattr(program.resources, "files", lambda _pkg: Files())
    program._module_source.cache_clear()
    try:
        assert program._module_source("fake") == "import os\nx = 1\n"
    finally:
        program._module_source.cache_clear()
