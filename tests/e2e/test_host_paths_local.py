"""Host paths are compared as the probe resolved them on the host, never with this machine's links.

The facts come from real probe answers (the probe run here, on a layout of links under a
temporary folder). After the probe has answered, the links are pointed elsewhere: the
controller's file system then says something else than the host said, as a remote host's
would, and the verdicts must still follow the answer.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import venv as venv_module
from pathlib import Path

import pytest

from envdoctor.checks._common import belongs_to
from envdoctor.install.env_choice import others_than
from envdoctor.engine.facts import HostFacts
from envdoctor.engine.host_paths import program_folder, same_environment
from envdoctor.probe.program import (
    ProbeOutput,
    build_program,
    encode_stdin,
    parse_lines,
    probe_command,
)
from envdoctor.probe.host.env.venvs import venvs_section
from envdoctor.probe.schema import SECTION_SCHEMAS, SchemaMismatch, check_shape, conforms
from tests.e2e.test_probe_schema_fast import REPLACEMENTS, nodes, replaced, shape_ok

REAL_KEYS = ("real_prefix", "real_bin", "real_executable_dir", "real_dir", "interpreter_real_dir")


@pytest.fixture(scope="module")
def layout(tmp_path_factory) -> Path:
    """root/real/a: a venv with pip; root/real/b: a plain folder with a bin folder."""
    root = tmp_path_factory.mktemp("host paths")
    venv_module.EnvBuilder(with_pip=True).create(root / "real" / "a")
    (root / "real" / "b" / "bin").mkdir(parents=True)
    return root


@pytest.fixture
def link(layout: Path):
    """root/link -> root/real/a for one test (a test may point it elsewhere)."""
    path = layout / "link"
    path.symlink_to(layout / "real" / "a")
    yield path
    path.unlink()


def probe(path_head: str, configured: list[str]) -> dict:
    """The real probe's host and venvs sections, run with `path_head` first on PATH."""
    sections = {"host": {}, "venvs": {"configured": configured, "discover": False}}
    stdin = encode_stdin({"sections": sections}, build_program(sections))
    env = {**os.environ, "PATH": f"{path_head}:{os.environ['PATH']}"}
    out = subprocess.run(probe_command([sys.executable]), input=stdin, capture_output=True, timeout=120, check=True,
                         env=env)
    answer = parse_lines(out.stdout.splitlines())
    assert not answer.errors, answer.errors
    return answer.sections


def facts_of(sections: dict) -> HostFacts:
    return HostFacts.from_probe(ProbeOutput(sections=sections))


def repoint(link: Path, target: Path) -> None:
    """Point the link elsewhere on this machine (the host's answer is already in hand)."""
    link.unlink()
    link.symlink_to(target)


def without_real_paths(value):
    """An answer as a probe older than the host-resolution fields would have sent it."""
    if isinstance(value, dict):
        return {k: without_real_paths(v) for k, v in value.items() if k not in REAL_KEYS}
    if isinstance(value, list):
        return [without_real_paths(v) for v in value]
    return value


def test_interpreter_through_a_linked_folder_belongs_to_the_venv_the_host_resolved(layout, link):
    """python3 and pip reached through a linked folder are the venv's, as the host resolved them, whatever the link is here later."""
    venv = layout / "real" / "a"
    facts = facts_of(probe(f"{link}/bin", [str(venv)]))
    env = facts.env_at(str(venv))
    python3, pip = facts.on_path["python3"], facts.on_path["pip"]
    assert python3.path == f"{link}/bin/python3"
    repoint(link, layout / "real" / "b")
    assert program_folder(python3) == str(venv / "bin")
    assert belongs_to(python3, env) and belongs_to(pip, env, interpreter=True)


def test_dot_dot_after_a_link_is_resolved_by_the_host_not_lexically(layout, link):
    """`link/../x` on PATH is where the host's link leads, not where lexical normalisation or this machine's link would lead."""
    hop = layout / "hop"
    hop.symlink_to(layout / "real" / "a" / "bin")  # hop/.. is real/a on the host, but root by lexical rules
    try:
        facts = facts_of(probe(f"{hop}/../bin", [str(layout / "real" / "a")]))
        hop.unlink()
        hop.symlink_to(layout / "real" / "b" / "bin")
        python3 = facts.on_path["python3"]
        assert python3.path == f"{hop}/../bin/python3"
        assert program_folder(python3) == str(layout / "real" / "a" / "bin") != os.path.normpath(f"{hop}/../bin")
        assert belongs_to(python3, facts.env_at(str(layout / "real" / "a")))
    finally:
        hop.unlink()


def test_one_environment_under_two_names_is_one_as_the_host_resolved_it(layout, link):
    """The same venv named through a link and by its own folder is one environment, even after the link here moves."""
    through_link = facts_of(probe(f"{layout}/real/b/bin", [str(link)])).env_at(str(link))
    direct = facts_of(probe(f"{layout}/real/b/bin", [str(layout / "real" / "a")])).env_at(str(layout / "real" / "a"))
    repoint(link, layout / "real" / "b")
    assert same_environment(through_link, direct)
    assert others_than(direct, [through_link]) == []
    assert through_link.real_prefix == str(layout / "real" / "a")


def test_default_interpreter_of_a_venv_is_that_venv(layout, link):
    """A venv's python3 first on PATH (reported with its base install as prefix) is that venv, not a second environment."""
    default = facts_of(probe(f"{link}/bin", [])).default_env
    venv = facts_of(probe(f"{layout}/real/b/bin", [str(layout / "real" / "a")])).env_at(str(layout / "real" / "a"))
    repoint(link, layout / "real" / "b")
    assert default is not None and default.prefix != str(layout / "real" / "a")
    assert default.executable == f"{link}/bin/python3"
    assert others_than(default, [venv]) == []


def test_an_older_answer_is_compared_lexically_not_with_this_machines_links(layout, link):
    """Without the host's resolution (an older probe) paths are normalised lexically; this machine's links are never followed."""
    venv = layout / "real" / "a"
    sections = probe(f"{link}/bin", [str(venv), str(link)])
    facts = facts_of(without_real_paths(copy.deepcopy(sections)))
    python3 = facts.on_path["python3"]
    assert not belongs_to(python3, facts.env_at(str(venv)))  # here link -> real/a, but the host did not say so
    assert belongs_to(python3, facts.env_at(str(link)))
    assert not same_environment(facts.env_at(str(venv)), facts.env_at(str(link)))
    assert same_environment(facts_of(sections).env_at(str(venv)), facts_of(sections).env_at(str(link)))


def test_only_paths_that_links_change_are_reported(layout, link):
    """A path no link changes adds nothing to the answer; a linked prefix adds its realpath, not a second one for bin."""
    venv = layout / "real" / "a"
    sections = probe(f"{venv}/bin", [str(venv), str(link)])
    by_prefix = {e["prefix"]: e for e in sections["venvs"]["envs"]}
    assert not [k for k in REAL_KEYS if k in by_prefix[str(venv)]]
    assert not [k for k in REAL_KEYS if k in sections["host"]["on_path"]["python3"]]
    linked = by_prefix[str(link)]
    assert linked["real_prefix"] == str(venv) and "real_bin" not in linked
    assert linked["real_executable_dir"] == str(venv / "bin")


def test_the_default_interpreters_venv_is_not_also_reported_from_its_files(tmp_path, monkeypatch):
    """The probe drops a discovered venv whose bin folder holds the default python3 (its answer would only repeat it)."""
    home = tmp_path / "home"
    venv_module.EnvBuilder(with_pip=False).create(home / "venv_job")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("PYENV_ROOT", raising=False)
    monkeypatch.setenv("ENVDOCTOR_PY3", str(home / "venv_job" / "bin" / "python3"))
    data = venvs_section({"configured": [], "discover": True}, lambda item: None)
    assert data["default"]["runs"] and str(home / "venv_job") in data["discovered"]
    assert str(home / "venv_job") not in [e["prefix"] for e in data["envs"]]


def test_resolution_fields_are_text_when_present_for_both_schema_paths(layout, link):
    """Each host-resolution field of a real answer: text passes, anything else is refused by conforms and check_shape alike."""
    sections = probe(f"{link}/bin", [str(link)])
    fields = [(name, path) for name, data in sections.items() for path, _ in nodes(data)
              if path and path[-1] in REAL_KEYS]
    assert {path[-1] for _, path in fields} == {"real_prefix", "real_executable_dir", "real_dir"}
    for name, path in fields:
        schema, data = SECTION_SCHEMAS[name], sections[name]
        assert conforms(data, schema) and shape_ok(data, schema)
        for new in REPLACEMENTS:
            mutated = replaced(data, path, copy.deepcopy(new))
            fast, slow = conforms(mutated, schema), shape_ok(mutated, schema)
            assert not (fast and not slow), (path, new)
            assert slow is (new.__class__ is str or isinstance(new, str)), (path, new)
    with pytest.raises(SchemaMismatch, match=r"venvs\.envs\[0\]\.real_bin: expected str, got int"):
        check_shape({"envs": [{"prefix": "/p", "real_bin": 1}]}, SECTION_SCHEMAS["venvs"], "venvs")
    with pytest.raises(SchemaMismatch, match=r"host\.on_path\['pip'\]\.interpreter_real_dir: expected str"):
        check_shape({"on_path": {"pip": {"path": "/p", "interpreter_real_dir": None}}}, SECTION_SCHEMAS["host"], "host")
