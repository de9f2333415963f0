"""model.architecture's rules (envdoctor.modelfacts.engines) on registry excerpts as the probe
sends them, and the probe's readers of SGLang's config registry and get_config rewrites
(envdoctor.probe.host.scan.engine_registry, registry_literals), on source text."""

from __future__ import annotations

import textwrap

import pytest

from envdoctor.modelfacts.engines import judge_model
from envdoctor.modelfacts.model import ModelFacts
from envdoctor.probe.host.scan.engine_registry import Sources, config_rewrites, read_sglang
from envdoctor.probe.host.scan.registry_literals import read_tables

pytestmark = pytest.mark.unit

INTERNLM2 = {"architectures": ["InternLM2ForCausalLM"], "model_type": "internlm2",
             "auto_map": {"AutoConfig": "configuration_internlm2.InternLM2Config",
                          "AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM"}}
DEEPSEEK_V32 = {"architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32"}


def model(config: dict) -> ModelFacts:
    files = [ref.split(".")[0] + ".py" for ref in (config.get("auto_map") or {}).values()]
    return ModelFacts.from_probe({
        "path": "/m", "json": {"config.json": config},
        "auto_map": [{"from": "config.json", "file": f} for f in files],
        "code": {f: {"sha256": "ab" * 32, "size": 10} for f in files}})


def transformers_part(*types: str) -> dict:
    return {"version": "4.57.6", "config_types": {t: f"{t.title()}Config" for t in types},
            "models": {t: {"MODEL_FOR_CAUSAL_LM_MAPPING_NAMES": f"{t.title()}ForCausalLM"} for t in types},
            "classes": {}}


def section(transformers: dict, **servers: dict) -> dict:
    return {"engines": {"transformers": transformers, **servers}}


def consent(value: bool) -> dict[str, bool]:
    return dict.fromkeys(("transformers", "vllm", "sglang"), value)


def test_a_registered_architecture_whose_config_only_auto_map_describes_is_supported_with_consent():
    """vLLM serves InternLM2ForCausalLM natively once --trust-remote-code lets its auto_map config load."""
    vllm = {"version": "0.11.0", "config_types": {"internlm2": None},
            "architectures": {"InternLM2ForCausalLM": ["internlm2", "InternLM2ForCausalLM", "text_generation_models"]},
            "transformers_backend": True}
    data = section(transformers_part(), vllm=vllm)
    without = judge_model(data, model(INTERNLM2), consent(False))["vllm"]
    assert (without.supported, without.needs_consent, without.certain, without.ready) == (True, True, True, False)
    assert without.as_class == "vllm.model_executor.models.internlm2.InternLM2ForCausalLM"
    assert "once --trust-remote-code lets its config load" in without.sentence()
    assert "configuration_internlm2.py (sha256" in without.sentence()
    with_consent = judge_model(data, model(INTERNLM2), consent(True))["vllm"]
    assert (with_consent.supported, with_consent.needs_consent, with_consent.ready) == (True, False, True)
    assert with_consent.config == "auto_map configuration_internlm2.InternLM2Config"


def test_a_registered_architecture_without_any_config_stays_unsupported():
    """No config anywhere and no auto_map: registering the class is not enough."""
    sglang = {"version": "0.5.3", "config_types": {}, "architectures": {"NoConfigForCausalLM": "noconfig"}}
    answer = judge_model(section(transformers_part(), sglang=sglang),
                         model({"architectures": ["NoConfigForCausalLM"], "model_type": "noconfig"}),
                         consent(True))["sglang"]
    assert (answer.supported, answer.needs_consent) == (False, False)


SGLANG_053 = {"version": "0.5.3", "config_types": {"deepseek_v32": None, "deepseek_v3": None},
              "architectures": {"DeepseekV32ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v2"},
              "rewrites": {"deepseek_v32": {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
                                            "by": "_load_deepseek_v32_model"}}}


def test_a_model_type_the_engines_get_config_rewrites_is_supported_when_transformers_knows_the_target():
    """SGLang 0.5.3 beside a transformers without deepseek_v32: get_config builds it as deepseek_v3."""
    answer = judge_model(section(transformers_part("deepseek_v3"), sglang=SGLANG_053), model(DEEPSEEK_V32),
                         consent(False))["sglang"]
    assert (answer.supported, answer.certain, answer.needs_consent) == (True, True, False)
    assert answer.as_class == "sglang.srt.models.deepseek_v2.DeepseekV3ForCausalLM"
    assert "rewrites model type deepseek_v32 to deepseek_v3" in answer.config
    assert "transformers Deepseek_V3Config" in answer.config


def test_no_rewrite_when_transformers_knows_the_type_itself_and_none_to_an_unknown_target():
    """transformers knowing deepseek_v32 makes get_config build it as is; a target no one knows is no config."""
    known = judge_model(section(transformers_part("deepseek_v32", "deepseek_v3"), sglang=SGLANG_053),
                        model(DEEPSEEK_V32), consent(False))["sglang"]
    assert known.supported and known.as_class.endswith(".DeepseekV32ForCausalLM")
    assert known.config == "transformers Deepseek_V32Config"
    unknown = judge_model(section(transformers_part(), sglang=SGLANG_053), model(DEEPSEEK_V32),
                          consent(False))["sglang"]
    assert unknown.supported is False


def test_an_absolute_vllm_module_path_is_not_prefixed_twice():
    """vLLM 0.3x registers DeepseekV32ForCausalLM in vllm.models.deepseek_v32, beside relative modules."""
    vllm = {"version": "0.33.0", "config_types": {"deepseek_v32": "DeepseekV3Config"},
            "architectures": {"DeepseekV32ForCausalLM": ["vllm.models.deepseek_v32", "DeepseekV32ForCausalLM",
                                                         "text_generation_models"]}}
    answer = judge_model(section(transformers_part(), vllm=vllm), model(DEEPSEEK_V32), consent(False))["vllm"]
    assert answer.as_class == "vllm.models.deepseek_v32.DeepseekV32ForCausalLM"


GET_CONFIG_053 = '''
def _load_deepseek_v32_model(model_path, trust_remote_code=False, revision=None, **kwargs):
    config_json = read(model_path)
    config_json["architectures"] = ["DeepseekV3ForCausalLM"]
    config_json["model_type"] = "deepseek_v3"
    unique_path = os.path.join(tmp_path, f"deepseek_v32_{os.getpid()}")
    return AutoConfig.from_pretrained(unique_path)

def get_config(model, trust_remote_code, revision=None, **kwargs):
    try:
        config = AutoConfig.from_pretrained(model)
    except ValueError as e:
        if not "deepseek_v32" in str(e):
            raise e
        config = _load_deepseek_v32_model(model)
    return config

def _fix_other(config_json):
    config_json["model_type"] = "llama"   # names no model type the module tests for
'''


def test_get_configs_rewrite_is_read_from_the_function_named_for_the_type_it_handles():
    """(SGLang 0.5.3's shape) deepseek_v32 -> deepseek_v3 and DeepseekV3ForCausalLM; nothing else."""
    assert config_rewrites(GET_CONFIG_053.encode()) == {
        "deepseek_v32": {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
                         "by": "_load_deepseek_v32_model"}}
    assert config_rewrites(b"def f(:\n") == {}


def test_a_registry_built_by_comprehension_and_item_assignments_is_read_whole():
    """0.5.2x: `{cls.model_type: cls for cls in [...]}` then `_CONFIG_REGISTRY["deepseek_v32"] = Alias` in a try."""
    source = textwrap.dedent('''
        _CONFIG_REGISTRY: Dict[str, Type[PretrainedConfig]] = {
            cls.model_type: cls
            for cls in [AfmoeConfig, KimiK25Config]
        }
        try:
            from transformers import DeepseekV3Config as _HF
            class _DeepseekV32ConfigAlias(_HF):
                model_type = "deepseek_v32"
            _CONFIG_REGISTRY["deepseek_v32"] = _DeepseekV32ConfigAlias
        except ImportError:
            pass
    ''')
    table = read_tables(source)["_CONFIG_REGISTRY"]
    assert table == {"AfmoeConfig.model_type": "AfmoeConfig", "KimiK25Config.model_type": "KimiK25Config",
                     "deepseek_v32": "_DeepseekV32ConfigAlias"}


def test_sglang_s_registry_is_found_behind_the_shim_it_left_in_the_old_place(tmp_path):
    """srt/utils/hf_transformers_utils.py re-exports srt/utils/hf_transformers: the table is read there."""
    root = tmp_path / "sglang"
    (root / "srt" / "models").mkdir(parents=True)
    (root / "srt" / "models" / "kimi_k25.py").write_text("EntryClass = KimiK25ForConditionalGeneration\n")
    (root / "srt" / "configs").mkdir()
    (root / "srt" / "configs" / "kimi_k25.py").write_text('class KimiK25Config(X):\n    model_type = "kimi_k25"\n')
    utils = root / "srt" / "utils"
    (utils / "hf_transformers").mkdir(parents=True)
    (utils / "hf_transformers_utils.py").write_text("from sglang.srt.utils.hf_transformers import *  # noqa\n")
    (utils / "hf_transformers" / "common.py").write_text(
        "_CONFIG_REGISTRY = {cls.model_type: cls for cls in [KimiK25Config]}\n"
        "_CONFIG_REGISTRY['deepseek_v32'] = _DeepseekV32ConfigAlias\n")
    read = read_sglang(str(root), Sources())
    assert read["config_types"] == {"kimi_k25": "KimiK25Config", "deepseek_v32": "_DeepseekV32ConfigAlias"}
    assert read["architectures"] == {"KimiK25ForConditionalGeneration": "kimi_k25"}
