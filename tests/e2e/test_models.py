"""Model checks and `envdoctor facts` over the real sshd, in a real venv with transformers from PyPI.

The venv starts without tiktoken (and jinja2); `fix` with consent installs them. Tests in
this module run in file order: the consent test changes the venv.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import make_venv
from tests.kimi_fixture import FIRST_RESERVED, build_broken_config, build_flat, build_kimi

pytestmark = pytest.mark.e2e

MODEL_CHECKS = ["model.config", "model.code-imports", "model.tokenizer", "model.tokenizer-live", "model.mask-token"]
ONLY = [arg for check in MODEL_CHECKS for arg in ("--only", check)]


@pytest.fixture(scope="module")
def kimi_venv(tmp_path_factory) -> Path:
    """A venv with transformers and speculators 0.3.0 (no deps) from PyPI, without tiktoken or jinja2.

    One venv for the module, installed straight from the index: a separate download step
    would resolve the same packages twice for a single install.
    """
    path = tmp_path_factory.mktemp("model venvs") / "kimi venv"
    make_venv(path, ["transformers"])
    subprocess.run([str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--no-deps", "speculators==0.3.0"], check=True)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """The Kimi-shaped model, its broken variants, and a flat Qwen-style model."""
    root = tmp_path_factory.mktemp("model dirs")
    mark = root / "MARK"
    kimi = build_kimi(root / "Kimi-K2.6", mark=mark)
    ranks = kimi / "tiktoken.model"
    return {
        "mark": mark,
        "kimi": kimi,
        "legacy": build_kimi(root / "legacy-gpt2", mark=mark, legacy_import=True, ranks_source=ranks),
        "noranks": build_kimi(root / "no-ranks", mark=mark, ranks=False),
        "notemplate": build_kimi(root / "no-template", mark=mark, chat_template=False, ranks_source=ranks),
        "broken": build_broken_config(root / "broken-config"),
        "flat": build_flat(root / "Qwen3-flat"),
    }


def results_by_id(stdout: str) -> dict[str, dict]:
    return {r["id"]: r for r in json.loads(stdout)["hosts"][0]["results"]}


def test_check_without_consent_reads_files_and_never_runs_model_code(run_cli, sshd, kimi_venv, models):
    """Without consent: config and tokenizer read statically, tiktoken reported missing, no model code imported."""
    res = run_cli("check", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(kimi_venv),
                  "--model", str(models["kimi"]), *ONLY, "--format", "json")
    assert res.exit_status == 1, res.stderr
    results = results_by_id(res.stdout)
    assert results["model.config"]["status"] == "pass"
    assert results["model.config"]["details"]["num_hidden_layers"] == 61
    assert results["model.config"]["details"]["nested_in"] == "text_config"
    imports = results["model.code-imports:tiktoken"]
    assert imports["status"] == "fail" and "tiktoken" in imports["message"]
    assert imports["remedy"]["argv"][:4] == [str(kimi_venv / "bin" / "python"), "-m", "pip", "install"]
    assert len(imports["details"]["files"]["tokenization_kimi.py"]) == 64
    tokenizer = results["model.tokenizer"]
    assert tokenizer["status"] == "fail" and "lacks jinja2" in tokenizer["message"]
    assert tokenizer["details"]["ranks"]["lines"] == 163584
    assert results["model.tokenizer-live"]["status"] == "skipped"
    assert results["model.mask-token"]["details"]["mask_token_id_candidate"] == FIRST_RESERVED
    assert not models["mark"].exists(), "the model's tokenizer code ran without consent"


def test_facts_without_consent(run_cli, sshd, kimi_venv, models):
    """facts gives the absolute interpreter, static ids, architecture and drafter settings as JSON."""
    res = run_cli("facts", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(kimi_venv),
                  "--model", str(models["kimi"]), "--draft-layers", "6", "--format", "json")
    assert res.exit_status == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["python"] == str(kimi_venv / "bin" / "python")
    assert (doc["vocab_size"], doc["hidden_size"], doc["num_hidden_layers"]) == (163840, 7168, 61)
    assert (doc["bos_token_id"], doc["eos_token_id"], doc["pad_token_id"]) == (163584, 163585, 163839)
    assert doc["mask_token_id"] is None and doc["tokenizer_class"] == "TikTokenTokenizer"
    assert doc["tokenizer_facts_from"] == "static"
    assert doc["dflash"] == {**doc["dflash"], "target_layer_ids": [1, 12, 24, 35, 47, 58],
                             "mask_token_id_candidate": FIRST_RESERVED}
    assert doc["eagle3"]["target_layer_ids"] == [2, 30, 58, 60]
    assert doc["eagle3"]["speculators_version"] == "0.3.0"
    assert len(doc["files"]["config.json"]["sha256"]) == 64
    assert not models["mark"].exists()


def test_broken_variants_each_name_their_problem(run_cli, sshd, kimi_venv, models):
    """Missing ranks, legacy gpt2 import, no template, non-JSON config and a flat model, in one run."""
    dirs = {k: models[k] for k in ("legacy", "noranks", "notemplate", "broken", "flat")}
    res = run_cli("check", "b300", "--ssh-config", str(sshd.ssh_config), "--venv", str(kimi_venv),
                  *[a for d in dirs.values() for a in ("--model", str(d))], *ONLY, "--format", "json")
    assert res.exit_status == 1, res.stderr
    results = results_by_id(res.stdout)
    config = results["model.config"]["message"]
    assert f"{dirs['broken']}: config.json is not valid JSON" in config
    assert f"{dirs['flat']}: qwen3, 36 layers" in config
    imports = results["model.code-imports:bytes_to_unicode"]["message"]
    assert "bytes_to_unicode" in imports and "transformers<5" in imports
    tokenizer = results["model.tokenizer"]["message"]
    assert f"{dirs['noranks']}: the tokenizer's code reads a tiktoken ranks file" in tokenizer
    assert f"{dirs['notemplate']}: " in tokenizer and "no chat template" in tokenizer
    assert f"{dirs['flat']}: no mask token and no unused reserved token; whether the embedding has rows no token " \
           "names is not known" in results["model.mask-token"]["message"]
    assert not models["mark"].exists()


def test_fix_with_consent_installs_tiktoken_then_live_load_reports_ids(run_cli, sshd, kimi_venv, models):
    """With consent, fix installs what the model code needs; the live load then reports its class and ids."""
    base = ["--ssh-config", str(sshd.ssh_config), "--venv", str(kimi_venv), "--model", str(models["kimi"]),
            "--trust-remote-code"]
    fixed = run_cli("fix", "ct200", *base, *ONLY, "--format", "json")
    assert fixed.exit_status == 0, fixed.stdout[-3000:] + fixed.stderr
    host = json.loads(fixed.stdout)["hosts"][0]
    before = {r["id"]: r for r in host["before"]}
    assert before["model.tokenizer-live"]["status"] == "fail" and "tiktoken" in before["model.tokenizer-live"]["message"]
    assert any("tiktoken" in a["command"] for a in host["actions"])
    after = {r["id"]: r for r in host["results"]}
    assert after["model.code-imports"]["status"] == "pass"
    assert after["model.tokenizer"]["status"] == "pass"
    live = after["model.tokenizer-live"]
    assert live["details"]["class"] == "TikTokenTokenizer"
    assert (live["details"]["bos_token_id"], live["details"]["eos_token_id"]) == (163584, 163585)
    assert live["status"] == "warn" and live["details"]["untrusted_class"] != "TikTokenTokenizer"
    assert models["mark"].exists(), "with consent the tokenizer's own code is what loaded"

    res = run_cli("facts", "ct200", *base, "--format", "json")
    assert res.exit_status == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["tokenizer_facts_from"] == "live" and doc["tokenizer_class"] == "TikTokenTokenizer"
    assert doc["tokenizer_len"] == 163840 and doc["mask_token_id"] is None
    assert doc["rendered_chat_template"] == "<|im_user|>user<|im_middle|>Hello<|im_end|><|im_assistant|>assistant<|im_middle|>"
    assert doc["dflash"]["target_layer_ids"] == [1, 15, 30, 44, 58]


def test_facts_usage_errors(run_cli, sshd, kimi_venv, models):
    """facts without a model, or with a bad --draft-layers, is a usage error (exit 2) in one line."""
    res = run_cli("facts", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(kimi_venv))
    assert res.exit_status == 2 and "needs one model" in res.stderr and "Traceback" not in res.stderr
    res = run_cli("facts", "ct200", "--ssh-config", str(sshd.ssh_config), "--model", str(models["kimi"]),
                  "--draft-layers", "0")
    assert res.exit_status == 2 and "Traceback" not in res.stderr
