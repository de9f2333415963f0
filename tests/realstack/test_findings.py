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


# -- model.architecture on the real engines -------------------------------------------------------

def model_folder(folder: Path, config: dict[str, Any], code: tuple[str, ...] = ()) -> Path:
    """A model folder with its config.json only (and the stub code files its auto_map names); no weights."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"hidden_size": 4096, "num_hidden_layers": 32,
                                                    "num_attention_heads": 32, "vocab_size": 92544, **config}))
    for name in code:
        (folder / name).write_text("class Stub:\n    pass\n")
    return folder


@pytest.fixture(scope="module")
def arch_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "internlm2": model_folder(root / "internlm2-chat-7b", {
            "architectures": ["InternLM2ForCausalLM"], "model_type": "internlm2",
            "auto_map": {"AutoConfig": "configuration_internlm2.InternLM2Config",
                         "AutoModel": "modeling_internlm2.InternLM2ForCausalLM",
                         "AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM"}},
            ("configuration_internlm2.py", "modeling_internlm2.py")),
        "deepseek_v32": model_folder(root / "DeepSeek-V3.2", {
            "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32"}),
    }


def architecture(venv: Path, model: Path, *extra: str) -> dict[str, Any]:
    """model.architecture's result for the model on the stack (`check --only model.architecture`)."""
    with tempfile_json() as out:
        done = envdoctor("check", "local", "--venv", str(venv), "--model", str(model), "--only", "model.architecture",
                         *extra, "--format", "json", "--output", str(out))
        assert done.returncode in (0, 1), done.stderr
        results = json.loads(out.read_text())["hosts"][0]["results"]
    return next(r for r in results if r["id"] == "model.architecture")


class tempfile_json:
    def __enter__(self) -> Path:
        import tempfile

        self.folder = tempfile.TemporaryDirectory(prefix="envdoctor-realstack-")
        return Path(self.folder.name) / "out.json"

    def __exit__(self, *exc: object) -> None:
        self.folder.cleanup()


@pytest.mark.parametrize(("stack", "engine"), [("vllm_stack", "vllm"), ("sglang_stack", "sglang")])
def test_internlm2_is_served_natively_with_the_consent_its_config_needs(stack, engine, request, arch_models):
    """vLLM 0.33 and SGLang 0.5.23 register InternLM2ForCausalLM; its config is only its auto_map's code:
    supported, needing --trust-remote-code (a warning naming it), then supported outright with it."""
    venv: Path = request.getfixturevalue(stack)
    without = architecture(venv, arch_models["internlm2"])
    answer = without["details"]["architecture"][engine]
    assert (answer["supported"], answer["needs_trust_remote_code"], answer["certain"]) == (True, True, True)
    assert answer["as"].endswith("internlm2.InternLM2ForCausalLM")
    assert without["status"] == "warn" and "--trust-remote-code" in without["message"]
    consented = architecture(venv, arch_models["internlm2"], "--trust-remote-code")
    answer = consented["details"]["architecture"][engine]
    assert (answer["supported"], answer["needs_trust_remote_code"]) == (True, False)
    assert consented["status"] == "pass"


def test_sglang_registers_deepseek_v32_and_builds_its_config(sglang_stack, arch_models):
    """SGLang 0.5.23: DeepseekV32ForCausalLM in deepseek_v2's EntryClass, and a config for deepseek_v32
    (its own alias of transformers' DeepseekV3Config, as its get_config module registers it)."""
    result = architecture(sglang_stack, arch_models["deepseek_v32"])
    answer = result["details"]["architecture"]["sglang"]
    assert (answer["supported"], answer["certain"]) == (True, True)
    assert answer["as"] == "sglang.srt.models.deepseek_v2.DeepseekV32ForCausalLM"
    assert result["status"] == "pass"


SGLANG_REGISTRY = """
import json
from sglang.srt.utils.hf_transformers import common
print(json.dumps({k: v.__name__ for k, v in common._CONFIG_REGISTRY.items()}))
"""


def test_sglangs_config_registry_read_from_files_is_what_sglang_builds(sglang_stack):
    """The probe's reading of _CONFIG_REGISTRY (no import) against the stack's own Python importing it."""
    from envdoctor.probe.host.scan.engine_registry import Sources, read_sglang

    done = subprocess.run([str(sglang_stack / "bin" / "python"), "-c", SGLANG_REGISTRY], capture_output=True,
                          text=True, timeout=600, env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")})
    assert done.returncode == 0, done.stderr[-2000:]
    truth = json.loads(done.stdout.strip().splitlines()[-1])
    read = read_sglang(str(site_packages(sglang_stack) / "sglang"), Sources())
    # DEEPSEEK_V41_CONFIG_CLASSES is a list another module builds: its entries are the only ones not read.
    unread = {k for k in truth if k.startswith("deepseek_v41")}
    assert set(truth) - set(read["config_types"]) == unread
    assert set(read["config_types"]) - set(truth) == set()
    # mellum's class is chosen by an `if` on the installed transformers: the type is there, the name may differ.
    differ = {k for k in truth if k in read["config_types"] and read["config_types"][k] != truth[k]}
    assert differ <= {"mellum"}, {k: (read["config_types"][k], truth[k]) for k in differ}
    assert read["config_types"]["deepseek_v32"] == truth["deepseek_v32"] == "_DeepseekV32ConfigAlias"
