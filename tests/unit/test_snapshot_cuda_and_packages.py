"""The snapshot's CUDA versions as `nvcc --version` and collect_env say them, read from files
(probe/host/env/system.py), and the packages collect_env lists under `[pip3]` (compare/snapshot.py)."""

from __future__ import annotations

import json

import pytest

from envdoctor.compare.snapshot import _cuda_runtime, _packages, in_collect_env, pip_line
from envdoctor.engine.facts import Distribution, Environment
from envdoctor.probe.host.env import system as system

pytestmark = pytest.mark.unit

RELEASE = b"Cuda compilation tools, release 13.0, V13.0.88"


@pytest.fixture(autouse=True)
def _fresh_reads(monkeypatch):
    monkeypatch.setattr(system, "_NVCC_SEEN", {})


def fake_nvcc(path, *, at=5000, chunk_edge=False):
    """An 'nvcc binary' holding the version string `at` bytes in (across a 1 MiB read's edge if asked)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if chunk_edge:
        at = (1 << 20) - len(RELEASE) // 2
    path.write_bytes(b"\x7fELF" + b"\0" * at + RELEASE + b"\0" * 64)
    return path


def test_nvcc_version_is_the_string_nvcc_prints_even_across_a_read_boundary(tmp_path):
    """`V13.0.88` is read out of the binary, wherever in it the string sits."""
    assert system.nvcc_release(str(fake_nvcc(tmp_path / "a" / "nvcc")))[0] == "13.0.88"
    assert system.nvcc_release(str(fake_nvcc(tmp_path / "b" / "nvcc", chunk_edge=True)))[0] == "13.0.88"
    (tmp_path / "c").write_bytes(b"\x7fELF" + b"\0" * 100)
    version, why = system.nvcc_release(str(tmp_path / "c"))
    assert version is None and "no version string" in why


@pytest.mark.parametrize("script", [
    '#!/bin/sh\nexec {target} "$@"\n',
    "#!/bin/bash\n# a wrapper\nset -e\nexec '{target}' \"$@\"\n",
    '#!/bin/sh\nexport PATH=/x:$PATH; exec {target} "$@"\n',
])
def test_a_wrapper_script_in_nvccs_place_is_followed_to_the_binary(tmp_path, script):
    """/usr/local/bin/nvcc holding `exec /usr/local/cuda-13.0/bin/nvcc "$@"` leads to that binary."""
    target = fake_nvcc(tmp_path / "cuda-13.0" / "bin" / "nvcc")
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(script.format(target=target))
    assert system.nvcc_target(str(wrapper)) == str(target)
    assert system.nvcc_target(str(target)) == str(target)


def test_a_script_that_execs_itself_or_nothing_is_its_own_binary(tmp_path):
    """No loop, no guess: a script without an absolute `exec .../nvcc` is what runs."""
    wrapper = tmp_path / "nvcc"
    wrapper.write_text(f'#!/bin/sh\nexec {wrapper} "$@"\n')
    assert system.nvcc_target(str(wrapper)) == str(wrapper)
    wrapper.write_text('#!/bin/sh\nexec nvcc-real "$@"\n')
    assert system.nvcc_target(str(wrapper)) == str(wrapper)


def test_a_toolkit_made_of_wheels_is_versioned_by_its_nvcc(tmp_path, monkeypatch):
    """No version.json or version.txt (NVIDIA's nvidia-cuda-nvcc wheels): bin/nvcc's string says it;
    version.json, when there, wins for the toolkit, and the nvcc on PATH says its own."""
    home = tmp_path / "cuda"
    fake_nvcc(home / "bin" / "nvcc")
    wrapper = tmp_path / "path" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {home / "bin" / "nvcc"} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.setenv("PATH", str(wrapper.parent))
    found = system.cuda_toolkit()
    assert (found["version"], found["source"]) == ("13.0.88", str(home / "bin" / "nvcc"))
    assert found["nvcc_on_path"] == {"path": str(wrapper), "binary": str(home / "bin" / "nvcc"),
                                     "version": "13.0.88", "source": str(home / "bin" / "nvcc")}
    (home / "version.json").write_text(json.dumps({"cuda": {"version": "13.0.2"}}))
    found = system.cuda_toolkit()
    assert found["version"] == "13.0.2" and found["nvcc_on_path"]["version"] == "13.0.88"
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert system.cuda_toolkit()["nvcc_on_path"] is None


def test_the_cuda_runtime_version_is_the_nvcc_on_paths():
    """collect_env's "CUDA runtime version" is `nvcc --version` on PATH; none there, none known."""
    assert _cuda_runtime({"version": "13.0.2", "nvcc_on_path": {"version": "13.0.88"}}) == "13.0.88"
    assert _cuda_runtime({"version": "13.0.2", "nvcc_on_path": None}) is None
    assert _cuda_runtime(None) is None


@pytest.mark.parametrize(("name", "version", "listed"), [
    ("nvtx", "0.2.15", True),
    ("nvidia-nvtx", "13.0.85", True),
    ("nvidia-cublas", "13.1.1.3", True),
    ("torch_c_dlpack_ext", "0.1.5", True),
    ("mkl", "2025.0", True),
    ("cuda-toolkit", "13.0.3.0", False),
    ("nvidia-cutlass-dsl", "4.8.0", False),
    ("Jinja2", "3.1.6", False),
])
def test_collect_envs_pip3_lines_are_matched_as_it_matches_them(name, version, listed):
    """A pattern anywhere in `name==version` keeps the line, as torch's collect_env does."""
    assert pip_line(name, version) == f"{name}=={version}"
    assert in_collect_env(name, version) is listed


def test_the_snapshot_packages_hold_every_collect_env_line_and_the_relevant_names():
    """nvtx (no "nvidia", "torch"... in its name) is there; vllm by name; an unrelated package is not."""
    installed = {d.key: d for d in (Distribution("nvtx", "0.2.15", (), "/p", "/s"),
                                    Distribution("vllm", "0.33.0", (), "/p", "/s"),
                                    Distribution("Jinja2", "3.1.6", (), "/p", "/s"))}
    env = Environment(prefix="/v", python="/v/bin/python", exists=True, runs=True, distributions=tuple(installed.values()))
    assert _packages(env) == {"nvtx": "0.2.15", "vllm": "0.33.0"}
