"""The node section's arguments and its test root: the stand-in root reaches only this
machine's probe, and only when the probe's own environment names the same folder."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from envdoctor.inventory import HostSpec
from envdoctor.operations.gather import build_request
from envdoctor.probe.host.node import section as node_probe
from envdoctor.probe.program import build_program
from envdoctor.transport.target import SSHTarget

HOST_MODULES = Path(node_probe.__file__).parent


def test_only_the_local_host_is_sent_the_test_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With ENVDOCTOR_TEST_ROOT set on the controller, `local` gets it, a remote host never does."""
    monkeypatch.setenv("ENVDOCTOR_TEST_ROOT", str(tmp_path))
    local = build_request(HostSpec("local", None, venv="/v"), ["node"])["node"]
    remote = build_request(HostSpec("ct200", SSHTarget("ct200")), ["node"])["node"]
    assert local == {"prefix": "/v", "test_root": str(tmp_path)}
    assert remote == {"prefix": ""}
    monkeypatch.delenv("ENVDOCTOR_TEST_ROOT")
    assert "test_root" not in build_request(HostSpec("local", None), ["node"])["node"]


def test_probe_honours_the_root_only_when_its_environment_agrees(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    """The argument alone, the environment alone, or the two naming different folders: no root."""
    monkeypatch.delenv("ENVDOCTOR_TEST_ROOT", raising=False)
    assert node_probe.node_test_root({"test_root": str(tmp_path)}) == ""
    monkeypatch.setenv("ENVDOCTOR_TEST_ROOT", str(tmp_path))
    assert node_probe.node_test_root({}) == ""
    assert node_probe.node_test_root({"test_root": str(tmp_path / "other")}) == ""
    assert node_probe.node_test_root({"test_root": str(tmp_path) + "/"}) == str(tmp_path)


#: Host programs of their own (not concatenated with the probe's sections), by program.
SEPARATE_PROGRAMS = ({"atomic_write", "patch_writer"}, {"stage_env", "stage_supervisor"}, {"stage_env", "stage_detacher"},
                     {"command_watch"})


@pytest.mark.parametrize("program", [None, *SEPARATE_PROGRAMS])
def test_host_modules_define_each_top_level_name_once(program: set[str] | None) -> None:
    """The modules of one host program (the probe's sections; each other program) are
    concatenated: two definitions of a name would silently replace one another."""
    separate = set().union(*SEPARATE_PROGRAMS)
    seen: dict[str, list[str]] = defaultdict(list)
    for path in sorted(HOST_MODULES.glob("*.py")):
        if path.stem == "__init__" or (path.stem in separate if program is None else path.stem not in program):
            continue
        for node in ast.parse(path.read_text("utf-8")).body:
            names = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [
                t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            for name in names:
                seen[name].append(path.stem)
    assert {n: m for n, m in seen.items() if len(m) > 1} == {}


def test_node_program_compiles_with_its_helpers() -> None:
    """The node section's program (core, gpu_host, node_run, node_host, node_toolchain, node) compiles."""
    program = build_program(["node"])
    compile(program, "<envdoctor-probe>", "exec")
    assert "def node_section" in program and "def run_all" in program and "from envdoctor" not in program
