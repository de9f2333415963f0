"""The engines' registries as the architecture section reads them (ast, on the host), against
the engines themselves: transformers' tables as the installed transformers imports them (two
releases, in real venvs), vLLM's tables as Python evaluates the same statements of the real
registry files (two releases), SGLang's EntryClass as Python evaluates each model module's
statement (two releases). Then model.architecture over those real registries, for Kimi K2.6
and models of other architectures."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

from envdoctor.probe.host.scan.engine_registry import Sources, entry_classes, read_sglang, read_transformers, read_vllm
from tests.conftest import make_venv
from tests.engine_registries import registry_files

TRANSFORMERS = ("4.57.6", "5.25.0")
VLLM = ("0.11.0", "0.16.0")
SGLANG = ("0.5.3", "0.5.9")

#: What importing the auto modules needs, beside transformers itself (5.25's `kernels` pin is
#: not on PyPI for Python 3.11, and the tables never import it).
IMPORT_NEEDS = {
    "4.57.6": ["huggingface-hub>=0.34,<1.0", "numpy", "packaging", "pyyaml", "regex", "tokenizers>=0.22,<0.23",
               "safetensors>=0.4.3", "tqdm", "requests", "filelock"],
    "5.25.0": ["huggingface-hub>=2.4,<3", "numpy", "packaging", "pyyaml", "regex>=2025.10.22",
               "tokenizers>=0.23.1,<0.24", "typer", "safetensors>=0.8", "tqdm"],
}

#: Run in a venv with transformers: its tables as the library itself builds them.
TABLES = """
import importlib, json
# Imported by module name: without torch, transformers' lazy package hands out a placeholder.
configuration_auto = importlib.import_module("transformers.models.auto.configuration_auto")
modeling_auto = importlib.import_module("transformers.models.auto.modeling_auto")
mappings = {k: dict(v) for k, v in vars(modeling_auto).items()
            if k.startswith("MODEL") and k.endswith("MAPPING_NAMES") and isinstance(v, dict)}
print(json.dumps({"config_types": dict(configuration_auto.CONFIG_MAPPING_NAMES), "mappings": mappings}))
"""


@pytest.mark.parametrize("version", TRANSFORMERS)
def test_transformers_tables_read_with_ast_are_those_transformers_builds(tmp_path_factory, version):
    """CONFIG_MAPPING_NAMES and every MODEL_*_MAPPING_NAMES equal the imported module's, key for key."""
    venv = make_venv(tmp_path_factory.mktemp("hf") / f"transformers-{version}", [f"transformers=={version}"],
                     pip_args=["--no-deps"], compile_bytecode=False)  # one import of the auto tables
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    *IMPORT_NEEDS[version]], check=True)
    out = subprocess.run([str(venv / "bin" / "python"), "-c", TABLES], capture_output=True, text=True, check=True)
    truth = json.loads(out.stdout)
    root = next(venv.glob("lib/python3*/site-packages/transformers"))
    read = read_transformers(str(root), Sources())
    assert read["config_types"] == truth["config_types"]
    assert set(read["mappings"]) == set(truth["mappings"])
    for name, table in truth["mappings"].items():
        assert read["mappings"][name] == table, name
    assert len(read["config_types"]) > 400


def python_values(path: Path, names: set[str]) -> dict:
    """The named top-level tables of a module, as Python evaluates their own statements
    (only those statements run; LazyConfigDict is vLLM's dict of class names)."""
    tree = ast.parse(path.read_bytes())
    statements = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(getattr(t, "id", None) in names for t in targets) and getattr(node, "value", None) is not None:
            statements.append(node)
    namespace: dict = {"LazyConfigDict": dict}
    exec(compile(ast.Module(body=statements, type_ignores=[]), str(path), "exec"), namespace)
    return {name: namespace[name] for name in names if name in namespace}


@pytest.mark.parametrize("version", VLLM)
def test_vllm_tables_read_with_ast_are_what_python_evaluates(version):
    """Every _*_MODELS group, _PREVIOUSLY_SUPPORTED_MODELS and _CONFIG_REGISTRY of the real wheel."""
    root = registry_files("vllm", version) / "vllm"
    read = read_vllm(str(root), Sources())
    registry = root / "model_executor" / "models" / "registry.py"
    groups = [n.id for node in ast.parse(registry.read_bytes()).body if isinstance(node, ast.Assign)
              for n in node.targets if isinstance(n, ast.Name) and n.id.endswith("_MODELS")]
    truth = python_values(registry, set(groups))
    expected = {}
    for group in groups:  # in file order: a later group wins, as the merged _VLLM_MODELS has it
        if group not in ("_VLLM_MODELS", "_PREVIOUSLY_SUPPORTED_MODELS"):
            for arch, (module, cls) in truth[group].items():
                expected[arch] = [module, cls, group.strip("_").lower()]
    assert read["architectures"] == expected
    assert set(read["architectures"]) == set(truth["_VLLM_MODELS"])
    assert read["previously"] == truth["_PREVIOUSLY_SUPPORTED_MODELS"]
    config = python_values(root / "transformers_utils" / "config.py", {"_CONFIG_REGISTRY"})["_CONFIG_REGISTRY"]
    assert read["config_types"] == config


class Names(dict):
    """A namespace in which every name is a class of that name."""

    def __missing__(self, key: str) -> type:
        return type(key, (), {})


@pytest.mark.parametrize("version", SGLANG)
def test_sglang_entry_classes_read_are_what_python_evaluates(version):
    """For every module of srt/models: the __name__ of each class its EntryClass statement names."""
    models = registry_files("sglang", version) / "sglang" / "srt" / "models"
    checked = 0
    for path in sorted(models.glob("*.py")):
        data = path.read_bytes()
        statements = [n for n in ast.parse(data).body if isinstance(n, ast.Assign)
                      and any(getattr(t, "id", None) == "EntryClass" for t in n.targets)]
        truth: list[str] = []
        if statements:
            names = Names()
            exec(compile(ast.Module(body=statements[-1:], type_ignores=[]), str(path), "exec"), {}, names)
            value = names["EntryClass"]
            truth = [c.__name__ for c in (value if isinstance(value, list) else [value])]
            checked += 1
        assert entry_classes(data) == truth, path.name
    assert checked > 100
    read = read_sglang(str(models.parent.parent), Sources())
    assert "TransformersForCausalLM" in read["architectures"]
    assert read["config_types"].get("kimi_vl") == "KimiVLConfig"
