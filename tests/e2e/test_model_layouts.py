"""Differential test: `envdoctor facts` (files only) against what real transformers loads.

The corpus (tests/model_layouts.py) is written with the real ``tokenizers`` library in a
venv that has transformers from PyPI; the oracle (tests/transformers_oracle.py) loads each
folder with AutoTokenizer / AutoConfig / GenerationConfig in that venv (HF_HUB_OFFLINE=1).
`facts` runs over the real sshd without --trust-remote-code, so nothing of transformers
or of the model's code runs for it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.kimi_fixture import (
    CONFIG_ONLY_IDS,
    K26_NAMED,
    KIMI_CHAT_TEMPLATE,
    NAMED_SPECIAL,
    build_kimi,
)

pytestmark = pytest.mark.e2e

TESTS = Path(__file__).resolve().parent.parent
LAYOUT_NAMES = ["llama3-1", "qwen3", "deepseek-v3", "gemma3", "mistral-v0-3", "mistral-tekken", "mistral-spm",
                "qwen2-5-vl", "llama2-spm"]
ARCH_FIELDS = ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads", "num_key_value_heads",
               "kv_lora_rank", "q_lora_rank", "n_routed_experts", "num_experts_per_tok")


@pytest.fixture(scope="session")
def layout_env(tmp_path_factory, test_env) -> dict[str, str]:
    return {**test_env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}


@pytest.fixture(scope="session")
def corpus(tmp_path_factory, transformers_venv, layout_env) -> dict[str, Path]:
    """The layouts, written by the venv's tokenizers, plus the Kimi K2.6 layout (remote code)."""
    root = tmp_path_factory.mktemp("layouts")
    subprocess.run([str(transformers_venv / "bin" / "python"), str(TESTS / "model_layouts.py"), str(root)],
                   check=True, env=layout_env, capture_output=True)
    folders = {name: root / name for name in LAYOUT_NAMES}
    folders["kimi-k2.6"] = build_kimi(root / "kimi-k2.6", mark=root / "MARK", named_only=True)
    return folders


@pytest.fixture(scope="session")
def expected(corpus) -> dict:
    return json.loads((corpus["llama3-1"].parent / "expect.json").read_text())


def oracle(venv: Path, env: dict[str, str], folders: list[Path], trust: bool = False) -> dict:
    argv = [str(venv / "bin" / "python"), str(TESTS / "transformers_oracle.py"), *map(str, folders)]
    proc = subprocess.run(argv + (["--trust"] if trust else []), capture_output=True, text=True, env=env,
                          timeout=900, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def loaded(corpus, transformers_venv, layout_env) -> dict:
    """What transformers loads from each layout (no remote code)."""
    return oracle(transformers_venv, layout_env, [corpus[n] for n in LAYOUT_NAMES])


@pytest.fixture(scope="session")
def facts_of(run_cli, sshd, corpus, transformers_venv):
    """facts over the real sshd for one layout, without --trust-remote-code (cached)."""
    cache: dict[str, dict] = {}

    def get(name: str) -> dict:
        if name not in cache:
            res = run_cli("facts", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(transformers_venv),
                          "--model", str(corpus[name]), "--format", "json")
            assert res.exit_status == 0, res.stdout[-2000:] + res.stderr
            cache[name] = json.loads(res.stdout)
        return cache[name]

    return get


@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_static_tokenizer_facts_equal_transformers(name, corpus, loaded, facts_of):
    """Every id, len(tokenizer), vocab_size, the added and special tokens and the chat template equal AutoTokenizer's."""
    doc = facts_of(name)
    tok = loaded[str(corpus[name])]["tokenizer"]
    assert "error" not in tok, tok
    for role in ("bos", "eos", "pad", "unk", "mask"):
        assert (doc[f"{role}_token"], doc[f"{role}_token_id"]) == (tok[f"{role}_token"], tok[f"{role}_token_id"]), role
    assert (doc["tokenizer_len"], doc["tokenizer_vocab_size"]) == (tok["len"], tok["vocab_size"])
    assert {str(t["id"]): t["content"] for t in doc["added_tokens"]} == {i: c for i, (c, _s) in tok["added_tokens"].items()}
    assert doc["chat_template"] == tok["chat_template"]
    assert doc["all_special_ids"] == tok["all_special_ids"]
    assert doc["unknown"] == {}, "a layout without remote code leaves nothing unknown"


@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_static_architecture_and_generation_ids_equal_transformers(name, corpus, loaded, facts_of):
    """The text config's fields equal AutoConfig's get_text_config(); generation_config eos lists stay lists."""
    doc = facts_of(name)
    config = loaded[str(corpus[name])]["config"]
    generation = loaded[str(corpus[name])]["generation"]
    assert {f: doc[f] for f in ARCH_FIELDS} == {f: config[f] for f in ARCH_FIELDS}
    assert (doc["model_type"], doc["text_model_type"]) == (config["model_type"], config["text_model_type"])
    assert doc["generation_config"].get("eos_token_id") == generation["eos_token_id"]
    eos = generation["eos_token_id"]
    assert doc["eos_token_ids"] == (eos if isinstance(eos, list) else [eos])


@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_mask_candidate_is_an_id_nothing_uses(name, corpus, loaded, facts_of, expected):
    """The candidate is the expected one, has an embedding row, and is no role, template or config id."""
    doc = facts_of(name)
    tok = loaded[str(corpus[name])]["tokenizer"]
    dflash = doc["dflash"]
    want = expected[name]
    assert (dflash["mask_token_id_candidate"], dflash["mask_token_source"]) == (want["mask_candidate"], want["mask_source"])
    if want["candidates"] is not None:
        assert dflash["mask_token_candidates"] == want["candidates"]
    candidate = dflash["mask_token_id_candidate"]
    if dflash["mask_token_source"] == "none":  # every row has a used token: only then must the vocabulary grow
        assert tok["len"] >= doc["vocab_size"] and "must grow" in dflash["mask_token_note"]
        return
    if dflash["mask_token_source"] == "tokenizer":
        assert candidate == tok["mask_token_id"]
        return
    assert candidate < doc["vocab_size"]
    assert candidate not in {tok[f"{r}_token_id"] for r in ("bos", "eos", "pad", "unk")}
    assert candidate not in {i for ids in doc["config_named_ids"].values() for i in ids}
    content = tok["added_tokens"].get(str(candidate), [None])[0]
    if content is not None:  # a token of the loaded tokenizer: a reserved one the template never writes
        assert any(word in content for word in ("reserved", "unused", "control", "place▁holder", "SPECIAL"))
        template = tok["chat_template"] if isinstance(tok["chat_template"], str) else json.dumps(tok["chat_template"])
        assert content not in template
    else:  # an embedding row the loaded tokenizer has no token for
        assert candidate >= tok["len"]


def test_kimi_k26_mask_candidate_is_an_unnamed_special_id(corpus, transformers_venv, layout_env, facts_of):
    """Kimi K2.6 (remote code, 14 named specials): ids equal the trusted load's; the candidate is unnamed.

    The candidate lies in 163584..163839, is named by no added token, no config id, not the
    chat template; the model's code never ran for facts, and len(tokenizer) is said to be unknown.
    """
    folder = corpus["kimi-k2.6"]
    doc = facts_of("kimi-k2.6")
    assert not (folder.parent / "MARK").exists(), "the model's tokenizer code ran without consent"
    loaded = oracle(transformers_venv, layout_env, [folder], trust=True)[str(folder)]["tokenizer"]
    assert loaded["class"] == "TikTokenTokenizer" and loaded["len"] == 163840
    for role in ("bos", "eos", "pad", "unk", "mask"):
        assert doc[f"{role}_token_id"] == loaded[f"{role}_token_id"], role
    candidate = doc["dflash"]["mask_token_id_candidate"]
    assert 163584 <= candidate <= 163839
    assert candidate not in {**NAMED_SPECIAL, **K26_NAMED} and candidate not in CONFIG_ONLY_IDS.values()
    assert doc["dflash"]["mask_token_source"] == "unnamed"
    assert doc["dflash"]["mask_token_candidates"] == 256 - 14 - len(CONFIG_ONLY_IDS)
    assert doc["dflash"]["mask_token_candidate"] not in KIMI_CHAT_TEMPLATE
    assert "tokenizer_len" in doc["unknown"] and "--trust-remote-code" in doc["unknown"]["tokenizer_len"]
    assert doc["tokenizer_len"] is None and doc["chat_template"] == KIMI_CHAT_TEMPLATE


def test_config_defaults_table_matches_transformers(transformers_venv, layout_env):
    """envdoctor's table of config-class defaults (vocab_size where config.json omits it) equals AutoConfig's."""
    from envdoctor.modelfacts.model import CONFIG_DEFAULTS

    program = ("import json,sys\nfrom transformers import AutoConfig\nout={}\n"
               "for mt in sys.argv[1:]:\n c=AutoConfig.for_model(mt).get_text_config()\n out[mt]=c.vocab_size\n"
               "print(json.dumps(out))")
    proc = subprocess.run([str(transformers_venv / "bin" / "python"), "-c", program, *CONFIG_DEFAULTS], capture_output=True,
                          text=True, env=layout_env, check=True, timeout=300)
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {mt: d["vocab_size"] for mt, d in CONFIG_DEFAULTS.items()}


def test_folders_that_cannot_be_a_model_fail_with_what_is_missing(run_cli, sshd, transformers_venv, corpus, tmp_path):
    """Empty, tokenizer-only and config-less folders fail model.config / model.tokenizer naming what is missing."""
    empty = tmp_path / "empty"
    empty.mkdir()
    tokenizer_only = tmp_path / "tokenizer-only"
    tokenizer_only.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tokenizer_only / name).write_bytes((corpus["qwen3"] / name).read_bytes())
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    (config_only / "config.json").write_bytes((corpus["qwen3"] / "config.json").read_bytes())
    res = run_cli("check", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(transformers_venv),
                  *[a for d in (empty, tokenizer_only, config_only) for a in ("--model", str(d))],
                  "--only", "model.config", "--only", "model.tokenizer", "--format", "json")
    assert res.exit_status == 1, res.stderr
    results = {r["id"]: r for r in json.loads(res.stdout)["hosts"][0]["results"]}
    config, tokenizer = results["model.config"], results["model.tokenizer"]
    assert config["status"] == "fail" and tokenizer["status"] == "fail"
    assert f"no config.json in {empty} (the folder is empty)" in config["message"]
    assert f"no config.json in {tokenizer_only} (it has: tokenizer.json, tokenizer_config.json)" in config["message"]
    assert f"{empty} has no tokenizer files" in tokenizer["message"]
    assert f"{config_only} has no tokenizer files" in tokenizer["message"] and "config.json)" in tokenizer["message"]
    assert f"{tokenizer_only}: Qwen2Tokenizer" in tokenizer["message"]


def test_missing_auto_map_file_fails_with_remedy_and_can_be_waived(run_cli, sshd, transformers_venv, tmp_path):
    """A file auto_map names but the folder lacks is a model.code-imports finding of its own, with a copy
    remedy; --skip model.code-imports:FILE waives that finding alone, --skip model.code-imports all."""
    folder = build_kimi(tmp_path / "Kimi-no-code", mark=tmp_path / "MARK", model_code=False)
    base = ["--ssh-config", str(sshd.ssh_config), "--venv", str(transformers_venv), "--model", str(folder),
            "--only", "model.code-imports", "--format", "json"]
    res = run_cli("check", "ct200", *base)
    results = {r["id"]: r for r in json.loads(res.stdout)["hosts"][0]["results"]}
    result = results["model.code-imports:modeling_kimi_k25.py"]
    assert res.exit_status == 1 and result["status"] == "fail"
    assert (result["check"], result["subject"]) == ("model.code-imports", "modeling_kimi_k25.py")
    assert "the model folder lacks modeling_kimi_k25.py, which auto_map names" in result["message"]
    assert "modeling_kimi_k25.py" in result["remedy"]["summary"]
    assert "copy the model's code files from its source" in result["remedy"]["summary"]
    assert "configuration_kimi_k25.py" not in result["message"]
    assert not (tmp_path / "MARK").exists()
    one = run_cli("check", "ct200", *base, "--skip", "model.code-imports:modeling_kimi_k25.py")
    statuses = {r["id"]: r["status"] for r in json.loads(one.stdout)["hosts"][0]["results"]}
    assert statuses["model.code-imports:modeling_kimi_k25.py"] == "waived"
    assert statuses["model.code-imports:configuration_kimi_k25.py"] == "fail" and one.exit_status == 1
    waived = run_cli("check", "ct200", *base, "--skip", "model.code-imports")
    assert waived.exit_status == 0, waived.stdout + waived.stderr
    statuses = {r["id"]: r["status"] for r in json.loads(waived.stdout)["hosts"][0]["results"]}
    assert {s for i, s in statuses.items() if i.startswith("model.code-imports")} == {"waived"}
