"""The probe's model search (envdoctor init) on real folders: what counts as a model, the Hugging
Face cache's snapshots, and the bounds on depth, entries visited and links."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envdoctor.probe.host.model import search as probe
from envdoctor.probe.schema import SECTION_SCHEMAS, check_shape


def model(folder: Path, *files: str, config: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config if config is not None else {"model_type": "qwen3"}))
    for name in files:
        (folder / name).write_text("x")
    return folder


def search(roots: list[str], **bounds) -> dict:
    answer = probe.model_search_section({"roots": roots, **bounds}, emit=None)
    check_shape(answer, SECTION_SCHEMAS["model-search"], "model-search")  # what the controller accepts
    return answer


def test_a_model_folder_has_config_json_and_tokenizer_or_weight_files(tmp_path: Path):
    """config.json with a tokenizer or weights counts (and is not entered); config.json alone does not."""
    model(tmp_path / "models" / "Kimi-K2.6", "tiktoken.model", "tokenizer_config.json",
          config={"model_type": "kimi_k25", "architectures": ["KimiK25ForConditionalGeneration"], "auto_map": {}})
    model(tmp_path / "models" / "org" / "Qwen3-8B", "model-00001-of-00002.safetensors")
    model(tmp_path / "models" / "just-a-config")
    model(tmp_path / "models" / "Kimi-K2.6" / "inner", "tokenizer.json")  # below a model: not searched
    found = {Path(m["path"]).name: m for m in search([str(tmp_path / "models")])["models"]}
    assert set(found) == {"Kimi-K2.6", "Qwen3-8B"}
    kimi = found["Kimi-K2.6"]
    assert (kimi["model_type"], kimi["architectures"], kimi["auto_map"]) == (
        "kimi_k25", ["KimiK25ForConditionalGeneration"], True)
    assert kimi["tokenizer_files"] == ["tiktoken.model", "tokenizer_config.json"] and kimi["weight_files"] == 0
    assert found["Qwen3-8B"]["weight_files"] == 1


def test_the_hub_cache_gives_the_snapshot_refs_main_names(tmp_path: Path, monkeypatch):
    """HF_HOME/hub/models--org--name: the snapshot refs/main names, with its repo id."""
    repo = tmp_path / "hf" / "hub" / "models--moonshotai--Kimi-K2.6"
    model(repo / "snapshots" / "aaa", "tokenizer_config.json")
    model(repo / "snapshots" / "bbb", "tokenizer_config.json")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("aaa")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    [found] = search(["hub"])["models"]
    assert found["path"] == str(repo / "snapshots" / "aaa") and found["repo"] == "moonshotai/Kimi-K2.6"


def test_the_search_stops_at_its_bounds_and_says_why(tmp_path: Path):
    """Deeper than max_depth is not searched; more entries than max_entries stops the search, named."""
    model(tmp_path / "data" / "a" / "b" / "c" / "deep", "tokenizer.json")
    assert search([str(tmp_path / "data")], max_depth=3)["models"] == []
    assert len(search([str(tmp_path / "data")], max_depth=4)["models"]) == 1
    for i in range(50):
        (tmp_path / "wide" / f"d{i:02}").mkdir(parents=True)
    stopped = search([str(tmp_path / "wide")], max_entries=20)
    assert stopped["truncated"] == "visited more than 20 entries"


def test_links_are_followed_once_and_a_loop_ends(tmp_path: Path):
    """A link to a model folder elsewhere is found; a link back up the tree is read once, not forever."""
    elsewhere = model(tmp_path / "big-disk" / "Kimi", "tiktoken.model")
    (tmp_path / "models").mkdir()
    os.symlink(elsewhere, tmp_path / "models" / "Kimi")
    os.symlink(tmp_path / "models", tmp_path / "models" / "loop")
    answer = search([str(tmp_path / "models")])
    assert [m["path"] for m in answer["models"]] == [str(tmp_path / "models" / "Kimi")]


@pytest.mark.parametrize("config, error", [("{not json", "config.json is not valid JSON"), ("[1]", "not a JSON object")])
def test_an_unreadable_config_is_noted_and_the_folder_still_counts(tmp_path: Path, config: str, error: str):
    """The checks will say what is wrong with it; the search names the folder and the reason."""
    folder = tmp_path / "models" / "broken"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(config)
    (folder / "tokenizer.json").write_text("{}")
    [found] = search([str(tmp_path / "models")])["models"]
    assert error in found["config_error"]
