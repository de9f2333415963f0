"""The host side of model facts (probe functions on real files) and the checks over its output."""

from __future__ import annotations

import base64
import functools
import json
from pathlib import Path

import pytest

from envdoctor.engine.facts import Distribution, Environment, HostFacts
from envdoctor.engine.graph import CheckContext
from envdoctor.inventory import HostSpec
from envdoctor.probe.host.model import files as probe
from envdoctor.probe.program import ProbeOutput
from envdoctor.engine.results import Status
from envdoctor.stages.handoff import FACT_PLACEHOLDERS, facts_document, lookup
from envdoctor.checks import models as model_checks
from tests.kimi_fixture import build_broken_config, build_flat, build_kimi, write_ranks

V = "/v"


@pytest.fixture(scope="module")
def model_root(tmp_path_factory) -> Path:
    """Kimi-shaped folders (full, legacy import, no ranks, no template), a flat model and a broken config."""
    root = tmp_path_factory.mktemp("models")
    mark = root / "MARK"
    kimi = build_kimi(root / "kimi", mark=mark)
    build_kimi(root / "legacy", mark=mark, legacy_import=True, ranks_source=kimi / "tiktoken.model")
    build_kimi(root / "noranks", mark=mark, ranks=False)
    build_kimi(root / "notemplate", mark=mark, chat_template=False, ranks_source=kimi / "tiktoken.model")
    build_flat(root / "flat")
    build_broken_config(root / "broken")
    return root


@functools.cache
def _inspect(path: str) -> str:
    return json.dumps(probe.inspect_model(path, {}))


def inspect(path: Path) -> dict:
    """The probe's view of a model folder, read once per test run (a fresh copy each call)."""
    return json.loads(_inspect(str(path)))


def ctx_for(*models: dict, dists: tuple[tuple[str, str], ...] = (("transformers", "5.24.0"),),
            trust: bool = False, draft: bool = True) -> CheckContext:
    site = f"{V}/lib/python3.11/site-packages"
    env = Environment(prefix=V, python=f"{V}/bin/python", exists=True, runs=True, version="3.11.7",
                      distributions=tuple(Distribution(n, v, (), f"{site}/{n}-{v}.dist-info", site) for n, v in dists))
    facts = HostFacts(probe=ProbeOutput(sections={"models": list(models)}), envs=(env,), configured_envs=(V,))
    spec = HostSpec("h", None, venv=V, models=tuple(m["path"] for m in models), trust_remote_code=trust, draft=draft)
    return CheckContext(spec, facts)


def finding(result, subject: str):
    """The finding of a check's result about ``subject`` (model.code-imports reports one per subject)."""
    [found] = [f for f in result.findings if f.subject == subject]
    return found


def test_ranks_file_of_kimi_size_is_counted_and_verified(model_root):
    """163584 dense ranks with all 256 single bytes are counted and found sound."""
    ranks = probe.check_ranks(str(model_root / "kimi" / "tiktoken.model"))
    assert ranks["lines"] == 163584 and ranks["dense"] and ranks["single_bytes"] == 256 and not ranks["duplicates"]


def test_ranks_file_problems_are_found(tmp_path):
    """Ranks out of order, a malformed line and missing single bytes are each reported."""
    path = tmp_path / "tiktoken.model"
    write_ranks(path, count=300)
    lines = path.read_text().splitlines()
    lines[10] = f"{base64.b64encode(b'zz').decode()} 999"
    lines.append("not-base64!! 301")
    path.write_text("\n".join(lines[1:]) + "\n")  # drop the first single byte
    ranks = probe.check_ranks(str(path))
    assert not ranks["dense"] and ranks["bad_lines"] == 1 and ranks["single_bytes"] == 254


def test_broken_json_is_a_per_model_error(model_root):
    """A config.json that is not JSON becomes a message for that model; the probe goes on."""
    found = inspect(model_root / "broken")
    assert "not valid JSON" in found["json_errors"]["config.json"]
    assert "config.json" not in found["json"]


def test_auto_map_files_are_hashed_and_shipped_not_run(model_root):
    """Every file auto_map names is hashed and its source shipped; nothing is imported."""
    found = inspect(model_root / "kimi")
    assert set(found["code"]) == {"tokenization_kimi.py", "configuration_kimi_k25.py", "modeling_kimi_k25.py"}
    assert len(found["code"]["tokenization_kimi.py"]["sha256"]) == 64
    assert "import tiktoken" in found["code"]["tokenization_kimi.py"]["source"]
    assert "live" not in found
    assert not (model_root / "MARK").exists()


def test_model_code_is_shipped_as_python_reads_it(tmp_path):
    """A model file with a coding declaration travels as the text Python runs; bytes that
    do not decode keep U+FFFD in their place, and the hash is always of the bytes."""
    declared = tmp_path / "declared.py"
    declared.write_bytes(b"# coding: latin-1\nimport tiktoken\nNAME = 'caf\xe9'\n")
    entry = probe.read_model_code(str(declared))
    assert entry["source"] == declared.read_bytes().decode("latin-1")
    undeclared = tmp_path / "undeclared.py"
    undeclared.write_bytes(b"import tiktoken\nNAME = 'caf\xe9'\n")
    entry = probe.read_model_code(str(undeclared))
    assert entry["source"] == "import tiktoken\nNAME = 'caf\ufffd'\n"
    assert len(entry["sha256"]) == 64


def test_checks_on_kimi_without_tiktoken(model_root):
    """Config passes, the code check fails on tiktoken with the venv's pip, live is skipped, mask warns."""
    ctx = ctx_for(inspect(model_root / "kimi"))
    assert model_checks.model_config(ctx).status is Status.PASS
    imports = model_checks.code_imports(ctx)
    assert imports.status is Status.FAIL and "tiktoken" in imports.message
    tiktoken = finding(imports, "tiktoken")
    assert tiktoken.remedy is not None and tiktoken.remedy.argv == (f"{V}/bin/python", "-m", "pip", "install", "tiktoken")
    tokenizer = model_checks.tokenizer_static(ctx)
    assert tokenizer.status is Status.FAIL and "jinja2" in tokenizer.message
    assert tokenizer.remedy is not None and tokenizer.remedy.argv[-1] == "jinja2"
    assert model_checks.tokenizer_live(ctx).status is Status.SKIPPED
    mask = model_checks.mask_token(ctx)
    assert mask.status is Status.WARN and mask.details["mask_token_id_candidate"] == 163589


@pytest.mark.parametrize("name, check, status, words", [
    ("noranks", "tokenizer_static", Status.FAIL, "no tiktoken.model"),
    ("notemplate", "tokenizer_static", Status.WARN, "no chat template"),
    ("legacy", "code_imports", Status.FAIL, "bytes_to_unicode"),
    ("broken", "model_config", Status.FAIL, "not valid JSON"),
    ("flat", "mask_token", Status.FAIL, "not known: which ids the tokenizer gives a token"),
    ("flat", "code_imports", Status.PASS, "no auto_map"),
])
def test_broken_variants(model_root, name, check, status, words):
    """Each broken variant fails (or warns) its own check with a message that says why."""
    result = getattr(model_checks, check)(ctx_for(inspect(model_root / name),
                                                  dists=(("transformers", "5.24.0"), ("tiktoken", "0.9"))))
    assert result.status is status and words in result.message


def test_kimi_tokenizer_files_pass_when_jinja2_is_there(model_root):
    """With jinja2 installed the complete Kimi tokenizer files pass, ranks counted."""
    ctx = ctx_for(inspect(model_root / "kimi"), dists=(("transformers", "5.24.0"), ("Jinja2", "3.1")))
    result = model_checks.tokenizer_static(ctx)
    assert result.status is Status.PASS and "163584 ranks" in result.message


def test_legacy_import_names_the_working_version(model_root):
    """The gpt2 bytes_to_unicode import says transformers<5 works, as a manual (non-automatic) remedy."""
    result = model_checks.code_imports(ctx_for(inspect(model_root / "legacy"),
                                               dists=(("transformers", "5.24.0"), ("tiktoken", "0.9"))))
    assert "transformers<5" in result.message
    gone = finding(result, "bytes_to_unicode")
    assert gone.remedy is not None and not gone.remedy.automatic and "transformers<5" in gone.remedy.summary


def test_facts_document_for_a_config_that_is_not_json(model_root):
    """A broken config.json is a named problem in the facts, with null sizes, not a crash."""
    ctx = ctx_for(inspect(model_root / "broken"))
    from envdoctor.modelfacts.model import models_from_facts

    doc = facts_document(ctx.spec, ctx.facts, models_from_facts(ctx.facts)[0], 5)
    assert any("not valid JSON" in p for p in doc["problems"])
    assert doc["num_hidden_layers"] is None and doc["dflash"]["target_layer_ids"] is None


def test_probe_failure_is_an_error_not_a_skip():
    """When the user named models but the probe section crashed, the checks say so instead of skipping."""
    ctx = ctx_for()
    ctx = CheckContext(HostSpec("h", None, venv=V, models=("/m",)),
                       HostFacts(probe=ProbeOutput(errors={"models": "Traceback...\nOSError: boom"}),
                                 envs=ctx.facts.envs, configured_envs=(V,)))
    result = model_checks.model_config(ctx)
    assert result.status is Status.ERROR and "OSError: boom" in result.message


def test_live_class_mismatch_warns():
    """A tokenizer that loads as another class without trust_remote_code is a warning naming both."""
    raw = {"path": "/m", "json": {"config.json": {"num_hidden_layers": 2, "hidden_size": 2, "vocab_size": 9}},
           "live": {"transformers": "5.24.0",
                    "trusted": {"class": "TikTokenTokenizer", "len": 9, "chat_template": "x"},
                    "untrusted": {"class": "TokenizersBackend", "len": 9, "chat_template": "x"}}}
    result = model_checks.tokenizer_live(ctx_for(raw, trust=True))
    assert result.status is Status.WARN and "TokenizersBackend" in result.message


def test_live_missing_package_fails_with_install_remedy():
    """transformers' own 'packages that were not found' error becomes a fail with an install remedy."""
    error = ("ImportError: This modeling file requires the following packages that were not found in your "
             "environment: tiktoken. Run `pip install tiktoken`")
    raw = {"path": "/m", "live": {"trusted": {"error": error}, "untrusted": {"class": "TokenizersBackend"}}}
    result = model_checks.tokenizer_live(ctx_for(raw, trust=True))
    assert result.status is Status.FAIL and result.remedy.argv[-1] == "tiktoken"


def test_facts_document_for_kimi(model_root):
    """The facts JSON has the interpreter, static ids, architecture and drafter settings."""
    ctx = ctx_for(inspect(model_root / "kimi"), dists=(("speculators", "0.3.0"),))
    from envdoctor.modelfacts.model import models_from_facts

    doc = facts_document(ctx.spec, ctx.facts, models_from_facts(ctx.facts)[0], 6)
    assert doc["python"] == f"{V}/bin/python"
    assert (doc["vocab_size"], doc["hidden_size"], doc["num_hidden_layers"]) == (163840, 7168, 61)
    assert (doc["bos_token_id"], doc["eos_token_id"], doc["pad_token_id"], doc["mask_token_id"]) == (163584, 163585, 163839, None)
    assert doc["tokenizer_class"] == "TikTokenTokenizer"
    assert doc["dflash"]["target_layer_ids"] == [1, 12, 24, 35, 47, 58]
    assert doc["dflash"]["mask_token_id_candidate"] == 163589
    assert doc["eagle3"]["target_layer_ids"] == [2, 30, 58, 60]
    assert doc["problems"] == []
    missing = [name for name, key in FACT_PLACEHOLDERS.items() if lookup(doc, key) is None]
    assert missing == ["mask_token_id"]  # Kimi has no mask token of its own; every other fact is known


def test_missing_auto_map_file_has_a_copy_remedy(tmp_path):
    """A modeling file auto_map names but the folder lacks: a failure whose remedy says to copy the code files."""
    folder = build_kimi(tmp_path / "kimi", mark=tmp_path / "MARK", model_code=False, ranks=False)
    result = model_checks.code_imports(ctx_for(probe.inspect_model(str(folder), {}),
                                               dists=(("transformers", "5.24.0"), ("tiktoken", "0.9"))))
    assert result.status is Status.FAIL
    modeling = finding(result, "modeling_kimi_k25.py")
    assert modeling.message == "the model folder lacks modeling_kimi_k25.py, which auto_map names"
    assert modeling.remedy is not None and not modeling.remedy.automatic
    assert modeling.remedy.summary.startswith("the model folder lacks modeling_kimi_k25.py, which auto_map names: "
                                              "copy the model's code files from its source")
    assert {f.subject for f in result.findings} == {"configuration_kimi_k25.py", "modeling_kimi_k25.py"}


@pytest.mark.parametrize("files, check, words", [
    ({}, "model_config", "no config.json in {path} (the folder is empty)"),
    ({}, "tokenizer_static", "{path} has no tokenizer files"),
    ({"tokenizer_config.json": "{}"}, "model_config", "no config.json in {path} (it has: tokenizer_config.json)"),
    ({"config.json": "{}"}, "tokenizer_static", "AutoTokenizer cannot load it (it has: config.json)"),
    ({"tokenizer_config.json": "{}"}, "tokenizer_static", "{path} has tokenizer_config.json but no vocabulary"),
])
def test_folders_that_cannot_be_a_model_fail(tmp_path, files, check, words):
    """An empty, config-less or tokenizer-less folder fails its check naming what the folder has."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = getattr(model_checks, check)(ctx_for(probe.inspect_model(str(tmp_path), {})))
    assert result.status is Status.FAIL and words.format(path=tmp_path) in result.message


def test_a_tokenizer_class_with_a_newline_stays_on_one_line(model_root, tmp_path):
    """A hostile tokenizer_class (newline, ESC) is shown escaped in the check's message."""
    import shutil

    hostile = tmp_path / "hostile"
    shutil.copytree(model_root / "kimi", hostile)
    config = json.loads((hostile / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "Fake\n  \u2713 host.reachable ok\x1b]0;pwned\x07"
    config.pop("auto_map", None)  # the class then comes from this file, not from the model's code
    (hostile / "tokenizer_config.json").write_text(json.dumps(config))
    ctx = ctx_for(inspect(hostile), dists=(("transformers", "5.24.0"), ("Jinja2", "3.1")))
    result = model_checks.tokenizer_static(ctx)
    assert "\n" not in result.message and "\x1b" not in result.message and "\x07" not in result.message
    assert "Fake\\n" in result.message
