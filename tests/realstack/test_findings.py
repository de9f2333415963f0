"""issue 40's smaller findings, on the real stacks and against their authorities: the scan's sites
(read by hand: vLLM's compare-defaults EngineArgs and its in-library Gemma towers load nothing,
speculators' eagle3 verifier config does), the snapshot against `python -m torch.utils.collect_env`
run in the same venv, and audit against the venv's own install folders."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def envdoctor(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The CLI of this checkout, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "envdoctor", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)


def site_packages(venv: Path) -> Path:
    return next(venv.glob("lib/python3*/site-packages"))


# -- the scan ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def vllm_scan(vllm_stack: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], dict[str, Any]]:
    """`envdoctor scan` of the stack's vllm and speculators: (path under site-packages, line) -> site."""
    site = site_packages(vllm_stack)
    found = {}
    for package in ("vllm", "speculators"):
        out = tmp_path_factory.mktemp("scan") / f"{package}.json"
        done = envdoctor("scan", str(site / package), "--format", "json", "--output", str(out))
        assert done.returncode in (0, 1), done.stderr
        report = json.loads(out.read_text())
        found.update({(f"{package}/{s['path']}", s["line"]): s for s in report["sites"]})
    return found


def test_the_scan_drops_calls_that_load_nothing_and_keeps_the_verifiers_gap(vllm_scan):
    """vLLM's `EngineArgs(model=...)` built to compare defaults and its Gemma towers' `from_config`
    on the config vLLM asserts is transformers' own are no sites; speculators' eagle3 verifier
    `AutoConfig.from_pretrained` without the flag (a true gap for a Kimi verifier) is one."""
    site = vllm_scan
    not_loads = [("vllm/entrypoints/common/startup.py", 78)] + [
        (f"vllm/model_executor/models/{name}", line) for name, line in (
            ("diffusion_gemma.py", 216), ("embedding_gemma2.py", 1058), ("embedding_gemma2.py", 1078),
            ("gemma3n_mm.py", 617), ("gemma3n_mm.py", 623), ("gemma4_mm.py", 1102), ("gemma4_mm.py", 1122))]
    assert [key for key in not_loads if key in site] == []
    verifier = site.get(("speculators/models/eagle3/core.py", 180))
    assert verifier is not None and (verifier["callee"], verifier["state"]) == (
        "transformers.AutoConfig.from_pretrained", "missing")
    # nemotron_vl's RADIO tower takes a config typed only as PreTrainedConfig: still a site (it passes the flag).
    assert site[("vllm/model_executor/models/nemotron_vl.py", 174)]["state"] == "parameterized"


def test_the_calls_dropped_are_really_what_the_rule_says(vllm_stack):
    """Read as a user would: startup.py:78 is `EngineArgs(model=args.model)` only compared, and the
    Gemma modules declare transformers' own config class to vLLM."""
    models = site_packages(vllm_stack) / "vllm" / "model_executor" / "models"
    startup = (site_packages(vllm_stack) / "vllm/entrypoints/common/startup.py").read_text().splitlines()
    assert "default_args = EngineArgs(model=args.model)" in startup[77]
    for name, config in (("gemma3n_mm.py", "Gemma3nConfig"), ("gemma4_mm.py", "Gemma4Config"),
                         ("embedding_gemma2.py", "EmbeddingGemma2Config"),
                         ("diffusion_gemma.py", "DiffusionGemmaConfig")):
        assert f"get_hf_config({config})" in (models / name).read_text(), name


# -- the snapshot against collect_env ------------------------------------------------------------

def collect_env(venv: Path) -> dict[str, Any]:
    """`python -m torch.utils.collect_env` in the venv: its `Key: value` lines and its [pip3] lines.

    collect_env lists packages with `python -m pip list`; a uv venv has no pip, so pip's own wheel
    (the one ensurepip bundles with the stack's Python) is put on PYTHONPATH: the venv is unchanged."""
    python = str(venv / "bin" / "python")
    bundled = subprocess.run([python, "-c", "import ensurepip, os; print(os.path.dirname(ensurepip.__file__))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    wheels = sorted(glob.glob(os.path.join(bundled, "_bundled", "pip-*.whl")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    if wheels:
        env["PYTHONPATH"] = wheels[-1]
    done = subprocess.run([python, "-m", "torch.utils.collect_env"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    fields, pip3 = {}, []
    for line in done.stdout.splitlines():
        if line.startswith("[pip3] "):
            pip3.append(line[len("[pip3] "):])
        elif ": " in line:
            key, _, value = line.partition(": ")
            fields.setdefault(key.strip(), value.strip())
    return {"fields": fields, "pip3": pip3}


@pytest.fixture(scope="module")
def vllm_snapshot(vllm_stack: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`envdoctor snapshot local --venv STACK` (JSON and text), with only python.venv's checks run:
    the snapshot's fields come from the probe whatever checks run."""
    folder = tmp_path_factory.mktemp("snapshot")
    done = envdoctor("snapshot", "local", "--venv", str(vllm_stack), "--only", "python.venv",
                     "--format", "json", "--output", str(folder / "snapshot.json"))
    assert done.returncode in (0, 1), done.stderr
    text = envdoctor("snapshot", "local", "--venv", str(vllm_stack), "--only", "python.venv")
    document = json.loads((folder / "snapshot.json").read_text())["hosts"][0]["snapshot"]
    return {"document": document, "text": text.stdout}


def test_the_snapshot_carries_every_line_collect_env_prints_of_the_stack(vllm_stack, vllm_snapshot):
    """Every [pip3] line, and the PyTorch, CUDA build, CUDA runtime and libc lines, as collect_env
    in the same venv prints them (`CUDA runtime version` is `nvcc --version` on PATH)."""
    authority = collect_env(vllm_stack)
    doc = vllm_snapshot["document"]
    assert authority["pip3"], "collect_env listed no packages: pip did not run"
    have = {f"{name}=={version}" for name, version in doc["packages"].items()}
    assert [line for line in authority["pip3"] if line not in have] == []
    fields = authority["fields"]
    torch = doc["torch"] or {}
    assert torch.get("version") == fields["PyTorch version"]
    assert torch.get("cuda") == fields["CUDA used to build PyTorch"]
    assert (doc["cuda_runtime_version"] or "Could not collect") == fields["CUDA runtime version"]
    assert doc["libc"] == fields["Libc version"]
    for label in ("PyTorch version", "CUDA used to build PyTorch", "CUDA runtime version", "Libc version"):
        row = next(line for line in vllm_snapshot["text"].splitlines() if line.startswith(label + " "))
        assert row.split(": ", 1)[1].startswith(fields[label]), row


# -- audit ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", ["vllm_stack", "sglang_stack"])
def test_audit_of_the_untouched_install_calls_nothing_inside_it_outside(stack, request, tmp_path):
    """Every RECORD path `outside` lies outside the venv's prefix once links are resolved; on the vLLM
    stack pynvvideocodec's data-scheme files (`<venv>/external/ffmpeg/...`) are verified, not `outside`."""
    venv: Path = request.getfixturevalue(stack)
    out = tmp_path / "audit.json"
    done = envdoctor("audit", "local", "--venv", str(venv), "--format", "json", "--output", str(out))
    assert done.returncode in (0, 1), done.stderr
    files = json.loads(out.read_text())["hosts"][0]["files"]
    prefix = os.path.realpath(venv) + os.sep
    inside = [f["path"] for f in files if f["state"] == "outside" and os.path.realpath(f["path"]).startswith(prefix)]
    assert inside == []
    ffmpeg = [f for f in files if "/external/ffmpeg/" in f["path"]]
    assert all(f["state"] != "outside" for f in ffmpeg)
    if stack == "vllm_stack":  # the files are there, and are what RECORD says (so no item at all)
        record = next(site_packages(venv).glob("pynvvideocodec-*.dist-info")) / "RECORD"
        listed = [line.split(",", 1)[0] for line in record.read_text().splitlines() if "external/ffmpeg/" in line]
        assert listed and all((record.parent.parent / rel).resolve().is_file() for rel in listed)
        assert ffmpeg == []
