"""Environment discovery reads files only (probe/host/env/discovery.py), and the job's environment is ranked by its needs."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import venv as venv_module
from pathlib import Path

import pytest

from envdoctor.install.env_choice import Need, job_needs, rank, stage_distributions
from envdoctor.engine.facts import Environment, HostFacts
from envdoctor.inventory import HostSpec
from envdoctor.probe.host.env.discovery import describe_static, discover_envs
from envdoctor.probe.host.env.venvs import venvs_section
from tests.unit.fakes import dist, env, facts


def add_dist(site: Path, name: str, version: str, *requires: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("Metadata-Version: 2.1\n" + "\n".join(lines) + "\n\nbody\n")


def planted_python(prefix: Path, marker: Path) -> None:
    for name in ("python", "python3"):
        script = prefix / "bin" / name
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(f"#!/bin/sh\necho ran >> {marker}\n")
        script.chmod(0o755)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder with a venv, a pyenv install and virtualenv, a conda env and uv's .venv,
    each with a python that leaves a marker if anything runs it."""
    home = tmp_path / "home"
    marker = tmp_path / "RAN"
    real = home / "venv_sglang"
    venv_module.EnvBuilder(with_pip=False).create(real)
    site = next(real.glob("lib/python3*/site-packages"))
    add_dist(site, "transformers", "5.2.0", "tokenizers>=0.22")
    add_dist(site, "sglang", "0.5.2")
    (real / "bin" / "python").unlink()
    (real / "bin" / "python3").unlink(missing_ok=True)
    planted_python(real, marker)
    pyenv = home / ".pyenv" / "versions" / "3.11.7"
    (pyenv / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    planted_python(pyenv, marker)
    penv = home / ".pyenv" / "versions" / "3.11.7" / "envs" / "tools"
    (penv / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    (penv / "pyvenv.cfg").write_text("home = /x/bin\nversion_info = 3.11.7.final.0\n")
    planted_python(penv, marker)
    (home / ".pyenv" / "versions" / "tools").symlink_to(penv)
    conda = home / "miniconda3" / "envs" / "torch"
    (conda / "conda-meta").mkdir(parents=True)
    (conda / "conda-meta" / "python-3.12.4-h1234_0.json").write_text("{}")
    add_dist(conda / "lib" / "python3.12" / "site-packages", "torch", "2.5.1")
    planted_python(conda, marker)
    uv = home / ".venv"
    (uv / "lib" / "python3.13" / "site-packages").mkdir(parents=True)
    (uv / "pyvenv.cfg").write_text("home = /usr/bin\nimplementation = CPython\nuv = 0.5.0\nversion_info = 3.13.1\n")
    planted_python(uv, marker)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("PYENV_ROOT", raising=False)
    return home


def test_discovery_finds_every_kind_once_and_runs_nothing(home: Path):
    """venv, uv .venv, pyenv version and virtualenv (once, under its link), conda env: found, none started."""
    found = discover_envs()
    assert str(home / "venv_sglang") in found and str(home / ".venv") in found
    assert str(home / ".pyenv" / "versions" / "3.11.7") in found
    assert str(home / ".pyenv" / "versions" / "tools") in found
    assert str(home / ".pyenv" / "versions" / "3.11.7" / "envs" / "tools") not in found
    assert str(home / "miniconda3" / "envs" / "torch") in found
    data = venvs_section({"configured": [], "discover": True}, lambda item: None)
    by_prefix = {e["prefix"]: e for e in data["envs"]}
    sglang = by_prefix[str(home / "venv_sglang")]
    assert sglang["static"] is True and sglang["runs"] is False
    assert {d["name"]: d["version"] for d in sglang["distributions"]} == {"transformers": "5.2.0", "sglang": "0.5.2"}
    assert by_prefix[str(home / "miniconda3" / "envs" / "torch")]["version"] == "3.12.4"
    assert by_prefix[str(home / ".venv")]["markers"]["python_version"] == "3.13"
    assert by_prefix[str(home / ".pyenv" / "versions" / "tools")]["version"] == "3.11.7"
    assert not (home.parent / "RAN").exists()


def test_static_description_reads_pyvenv_cfg(home: Path):
    """Version, markers and site folders come from pyvenv.cfg and the layout."""
    env_raw, sites = describe_static(str(home / ".venv"), str(home / ".venv" / "bin" / "python"))
    assert env_raw["version"] == "3.13.1" and env_raw["markers"]["python_full_version"] == "3.13.1"
    assert sites == [str(home / ".venv" / "lib" / "python3.13" / "site-packages")]


def test_rank_prefers_what_the_job_needs_then_the_stack():
    """The venv with the model's imports and the stack ranks first and is described with versions and gaps."""
    sglang = env("/root/venv_sglang211", dist("transformers", "5.24.0"), dist("sglang", "0.5.2"))
    torch_only = env("/root/venv_torch", dist("torch", "2.5.1"))
    bare = env("/root/venv_bare")
    needs = [Need("transformers", "the model's code"), Need("tiktoken", "the model's code")]
    ranked = rank([bare, torch_only, sglang], needs)
    assert ranked[0].env.prefix == "/root/venv_sglang211"
    assert ranked[0].describe() == "pass --venv /root/venv_sglang211 (it has transformers 5.24.0, sglang 0.5.2; lacks tiktoken)"
    assert [c.env.prefix for c in ranked] == ["/root/venv_sglang211", "/root/venv_torch", "/root/venv_bare"]


def test_foreign_environment_ranks_last_among_equals():
    """Of two equally good venvs, the one another user owns comes second and says so."""
    mine = env("/root/venv_a", dist("vllm", "0.11.0"))
    theirs = Environment(**{**mine.__dict__, "prefix": "/opt/alice/venv", "foreign": True})
    ranked = rank([theirs, mine], [Need("vllm", "--require")])
    assert ranked[0].env.prefix == "/root/venv_a"
    assert "another user" in ranked[1].describe()


def test_stage_commands_name_what_they_run():
    """`{python} -m sglang.launch_server`, `torchrun`, `{venv}/bin/vllm serve` need sglang, torch, vllm."""
    assert stage_distributions("{python} -m sglang.launch_server --model-path {model}") == ["sglang"]
    assert stage_distributions("torchrun --nproc-per-node 8 train.py") == ["torch"]
    assert stage_distributions("{venv}/bin/vllm serve {model}") == ["vllm"]
    spec = HostSpec("h", None, requires=("tiktoken>=0.7",))
    needs = job_needs(spec, HostFacts(probe=facts().probe), ["{python} -m vllm.entrypoints.openai.api_server"])
    assert [n.requirement for n in needs] == ["tiktoken>=0.7", "vllm"]


def test_default_python3_that_is_a_venvs_reports_the_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A venv's python3 first on PATH: the default environment is that venv (its prefix and its
    site-packages), although the interpreter reports on itself under -S, where sys.prefix is
    the base install."""
    venv = tmp_path / "job venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    monkeypatch.setenv("ENVDOCTOR_PY3", str(venv / "bin" / "python3"))
    data = venvs_section({"configured": [], "discover": False}, lambda item: None)
    default = data["default"]
    assert default["runs"] is True
    assert default["prefix"] == str(venv)
    assert default["base_prefix"] == sys.base_prefix
    assert [os.path.realpath(p) for p in default["site_packages"]] == \
        [os.path.realpath(p) for p in glob.glob(str(venv / "lib" / "python3*" / "site-packages"))]
    assert Environment.from_probe(default).is_venv


def test_suggested_venv_is_quoted_for_the_shell():
    """`pass --venv P` names a path with a space so that pasting it passes that path."""
    spaced = env("/srv/job venv", dist("vllm", "0.11.0"))
    ranked = rank([spaced], [Need("vllm", "--require")])
    assert ranked[0].describe().startswith("pass --venv '/srv/job venv' (it has vllm 0.11.0")
