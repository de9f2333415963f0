"""model.architecture over the real registries of transformers 4.57.6 and 5.25.0, vLLM 0.11.0
and 0.16.0 and SGLang 0.5.3 and 0.5.9 (their wheels' files, tests/engine_registries.py): Kimi
K2.6 as seed 002 ships it (kimi_k25 on top, text_config kimi_k2 inside, auto_map), and models
some engines know and some do not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envdoctor.modelfacts.engines import judge_model
from envdoctor.modelfacts.model import ModelFacts
from envdoctor.probe.host.scan.engine_registry import architecture_section
from envdoctor.probe.host.model.files import inspect_model
from tests.engine_registries import environment
from tests.kimi_fixture import build_flat, build_kimi

OLD = ("transformers==4.57.6", "vllm==0.11.0", "sglang==0.5.3")
NEW = ("transformers==5.25.0", "vllm==0.16.0", "sglang==0.5.9")
#: A model only vLLM registers among these (transformers 4.57.6 has no kimi_k25).
MIXED = ("transformers==4.57.6", "vllm==0.16.0")
#: SGLang 0.5.3 beside a transformers that knows no deepseek_v32 (nor internlm2).
SGLANG_OLD = ("transformers==4.57.6", "sglang==0.5.3")


def flat_model(folder: Path, model_type: str, arch: str, auto_map: dict | None = None) -> Path:
    folder.mkdir(parents=True)
    config = {"architectures": [arch], "model_type": model_type, "hidden_size": 1024, "num_hidden_layers": 4,
              "vocab_size": 32000, "num_attention_heads": 8}
    if auto_map:
        config["auto_map"] = auto_map
        for ref in auto_map.values():
            (folder / f"{ref.split('.')[0]}.py").write_text("class Stub:\n    pass\n")
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("arch-models")
    return {
        "kimi": build_kimi(root / "Kimi-K2.6", mark=root / "MARK", named_only=True, ranks=False),
        "qwen3": build_flat(root / "Qwen3"),
        # afmoe: in transformers 5.25 and vLLM 0.16's registries, in none of the older releases
        "afmoe": flat_model(root / "afmoe", "afmoe", "AfmoeForCausalLM"),
        # a model only its own code describes
        "custom": flat_model(root / "custom", "acme_lm", "AcmeForCausalLM",
                             {"AutoConfig": "configuration_acme.AcmeConfig",
                              "AutoModelForCausalLM": "modeling_acme.AcmeForCausalLM"}),
        "unknown": flat_model(root / "unknown", "nosuch_arch", "NoSuchForCausalLM"),
        # DeepSeek V3.2: a model type transformers 4.57.6 does not know
        "deepseek_v32": flat_model(root / "DeepSeek-V3.2", "deepseek_v32", "DeepseekV32ForCausalLM"),
        # InternLM2: a config only its auto_map describes, an architecture the engines register
        "internlm2": flat_model(root / "internlm2", "internlm2", "InternLM2ForCausalLM",
                                {"AutoConfig": "configuration_internlm2.InternLM2Config",
                                 "AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM"}),
    }


@pytest.fixture(scope="module")
def section(tmp_path_factory: pytest.TempPathFactory, models):
    """section(requirements) -> the architecture section's answer for every model, on real registries."""
    root = tmp_path_factory.mktemp("arch-envs")
    answers = {}

    def get(requirements: tuple[str, ...]) -> dict:
        if requirements not in answers:
            prefix = environment(root, *requirements)
            answers[requirements] = architecture_section(
                {"prefix": str(prefix), "models": [str(m) for m in models.values()], "cache": False}, None)
        return answers[requirements]

    return get


def judge(section_data: dict, folder: Path, consent: bool = False) -> dict:
    model = ModelFacts.from_probe(inspect_model(str(folder), {}))
    return judge_model(section_data, model, dict.fromkeys(("transformers", "vllm", "sglang"), consent))


def test_kimi_k26_on_the_older_releases_needs_its_own_code_or_newer_engines(section, models):
    """transformers 4.57.6 knows no kimi_k25 (auto_map, with the files that would run); vLLM 0.11.0 and
    SGLang 0.5.3 register no KimiK25ForConditionalGeneration, and the releases that do are named."""
    answers = judge(section(OLD), models["kimi"])
    hf, vllm, sglang = answers["transformers"], answers["vllm"], answers["sglang"]
    assert (hf.supported, hf.needs_consent) == (False, True)
    assert "configuration_kimi_k25.py (sha256" in hf.reason and "modeling_kimi_k25.py (sha256" in hf.reason
    assert "transformers >= 5.13.0" in hf.known_in
    assert vllm.supported is False and "does not register KimiK25ForConditionalGeneration" in vllm.reason
    assert "vLLM >= 0.15.0" in vllm.known_in
    assert sglang.supported is False and "SGLang >= 0.5.9" in sglang.known_in


def test_kimi_k26_with_consent_loads_through_auto_map_on_the_older_releases(section, models):
    """--trust-remote-code: transformers runs the model's classes; vLLM/SGLang only through their Transformers backend."""
    answers = judge(section(OLD), models["kimi"], consent=True)
    assert answers["transformers"].supported and answers["transformers"].via == "auto_map (remote code)"
    assert answers["transformers"].as_class == "modeling_kimi_k25.KimiK25ForConditionalGeneration (the model's code)"
    assert answers["vllm"].supported and not answers["vllm"].certain
    assert answers["vllm"].via == "Transformers backend with auto_map (remote code)"


def test_kimi_k26_on_the_newer_releases_loads_natively_everywhere(section, models):
    """transformers 5.25.0 as Kimi_K25ForConditionalGeneration (AutoModelForImageTextToText); vLLM 0.16.0 and
    SGLang 0.5.9 as their own kimi_k25 modules, with vLLM's own KimiK25Config."""
    answers = judge(section(NEW), models["kimi"])
    assert answers["transformers"].as_class == "Kimi_K25ForConditionalGeneration"
    assert answers["transformers"].via.startswith("AutoModelForImageTextToText")
    assert answers["vllm"].as_class == "vllm.model_executor.models.kimi_k25.KimiK25ForConditionalGeneration"
    assert answers["vllm"].config == "vLLM KimiK25Config"
    assert answers["sglang"].as_class == "sglang.srt.models.kimi_k25.KimiK25ForConditionalGeneration"
    assert all(a.supported and a.certain for a in answers.values())


def test_a_model_vllm_knows_and_this_transformers_does_not(section, models):
    """Kimi K2.6 beside transformers 4.57.6 and vLLM 0.16.0: vLLM builds its own config and loads it."""
    answers = judge(section(MIXED), models["kimi"])
    assert answers["vllm"].supported and answers["vllm"].config == "vLLM KimiK25Config"
    assert answers["transformers"].supported is False


def test_a_model_type_newer_than_the_installed_releases_is_unknown_to_them(section, models):
    """afmoe: known to transformers 5.25 and vLLM 0.16; transformers 4.57.6 does not recognize it."""
    old = judge(section(OLD), models["afmoe"])
    assert old["transformers"].supported is False and "does not recognize model type afmoe" in old["transformers"].reason
    assert old["vllm"].supported is False
    new = judge(section(NEW), models["afmoe"])
    assert new["transformers"].supported and new["transformers"].as_class == "AfmoeForCausalLM"
    assert new["vllm"].supported


def test_a_model_known_only_through_auto_map_needs_consent_and_then_runs_its_files(section, models):
    """acme_lm: no engine registers it; only auto_map loads it, after --trust-remote-code."""
    without = judge(section(NEW), models["custom"])
    assert all(a.supported is False and a.needs_consent for a in without.values())
    assert "configuration_acme.py (sha256" in without["transformers"].reason
    with_consent = judge(section(NEW), models["custom"], consent=True)
    assert with_consent["transformers"].as_class == "modeling_acme.AcmeForCausalLM (the model's code)"


def test_a_model_no_engine_knows_and_no_code_describes_is_unsupported_everywhere(section, models):
    """nosuch_arch without auto_map: every engine says no, and nothing needs consent."""
    answers = judge(section(NEW), models["unknown"])
    assert all(a.supported is False and not a.needs_consent for a in answers.values())


def test_qwen3_loads_natively_on_every_release(section, models):
    """A model every release here knows: supported by all six registries."""
    for requirements in (OLD, NEW):
        answers = judge(section(requirements), models["qwen3"])
        assert all(a.supported and a.certain for a in answers.values()), answers
        assert answers["vllm"].as_class == "vllm.model_executor.models.qwen3.Qwen3ForCausalLM"


def test_sglang_053_serves_deepseek_v32_through_its_get_configs_rewrite(section, models):
    """transformers 4.57.6 knows no deepseek_v32; SGLang 0.5.3 registers DeepseekV32ForCausalLM and its
    get_config (_load_deepseek_v32_model) builds the config as deepseek_v3: supported, and certain."""
    answers = judge(section(SGLANG_OLD), models["deepseek_v32"])
    assert answers["transformers"].supported is False
    sglang = answers["sglang"]
    assert (sglang.supported, sglang.certain, sglang.needs_consent) == (True, True, False)
    assert "rewrites model type deepseek_v32 to deepseek_v3: transformers DeepseekV3Config" in sglang.config
    assert sglang.as_class == "sglang.srt.models.deepseek_v2.DeepseekV3ForCausalLM"


def test_internlm2_is_served_natively_once_its_auto_map_config_loads(section, models):
    """SGLang 0.5.3 and vLLM 0.16.0 register InternLM2ForCausalLM; its config is only the model's code:
    supported with the consent it needs, then supported outright with --trust-remote-code."""
    for requirements in (SGLANG_OLD, NEW):
        for engine, answer in judge(section(requirements), models["internlm2"]).items():
            if engine == "transformers":
                continue
            assert (answer.supported, answer.needs_consent, answer.certain) == (True, True, True), answer
            assert answer.as_class.endswith("internlm2.InternLM2ForCausalLM")
        for engine, answer in judge(section(requirements), models["internlm2"], consent=True).items():
            assert answer.supported and not answer.needs_consent, answer
