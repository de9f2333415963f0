"""Pure logic of model.architecture and packages.tags: which engine a stage runs, what fails
and what warns, and the tags an interpreter supports (packaging's own for this machine)."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
from packaging import tags as packaging_tags

from envdoctor.checks.architecture import model_architecture
from envdoctor.engine.graph import CheckContext
from envdoctor.engine.results import Status
from envdoctor.inventory import HostSpec
from envdoctor.install.wheel_tags import Interpreter, interpreter_from_probe, linux_platforms, supported_tags
from envdoctor.modelfacts.engines import engines_of_words
from envdoctor.probe.host.env.wheel_tags import interpreter_facts
from envdoctor.probe.program import ProbeOutput
from tests.unit import fakes

KIMI_CONFIG = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
               "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config",
                            "AutoModel": "modeling_kimi_k25.KimiK25ForConditionalGeneration"},
               "text_config": {"model_type": "kimi_k2", "hidden_size": 7168, "num_hidden_layers": 61,
                               "vocab_size": 163840}}
MODEL = {"path": "/m/kimi", "listing": ["config.json", "configuration_kimi_k25.py", "modeling_kimi_k25.py"],
         "json": {"config.json": KIMI_CONFIG},
         "auto_map": [{"from": "config.json", "auto_class": "AutoConfig", "ref": "configuration_kimi_k25.KimiK25Config",
                       "file": "configuration_kimi_k25.py"},
                      {"from": "config.json", "auto_class": "AutoModel",
                       "ref": "modeling_kimi_k25.KimiK25ForConditionalGeneration", "file": "modeling_kimi_k25.py"}],
         "code": {"configuration_kimi_k25.py": {"sha256": "a" * 64, "size": 10},
                  "modeling_kimi_k25.py": {"sha256": "b" * 64, "size": 10}}}
#: The architecture section's answer for a host with transformers 4.57.6, vLLM 0.16.0 and SGLang 0.5.3.
SECTION = {"engines": {
    "transformers": {"version": "4.57.6", "config_types": {"kimi_k25": None, "kimi_k2": None},
                     "models": {"kimi_k25": {}, "kimi_k2": {}}, "classes": {"KimiK25ForConditionalGeneration": False}},
    "vllm": {"version": "0.16.0", "config_types": {"kimi_k25": "KimiK25Config"}, "transformers_backend": True,
             "architectures": {"KimiK25ForConditionalGeneration": ["kimi_k25", "KimiK25ForConditionalGeneration",
                                                                   "multimodal_models"]}, "previously": {}},
    "sglang": {"version": "0.5.3", "config_types": {"kimi_k25": None}, "transformers_backend": True,
               "architectures": {"KimiK25ForConditionalGeneration": None}},
}, "cache": "miss"}


def context(commands: tuple[str, ...] = (), trust: bool = False) -> CheckContext:
    spec = HostSpec("h", None, venv="/v", models=("/m/kimi",), stage_commands=commands, trust_remote_code=trust)
    facts = replace(fakes.facts(fakes.env("/v")), probe=ProbeOutput(sections={"models": [MODEL], "architecture": SECTION}))
    return CheckContext(spec, facts)


@pytest.mark.parametrize(("words", "engines"), [
    (["{python}", "-m", "vllm.entrypoints.openai.api_server"], {"vllm"}),
    (["{venv}/bin/vllm", "serve", "{model}"], {"vllm"}),
    (["python", "-m", "sglang.launch_server"], {"sglang"}),
    (["{python}", "-m", "speculators.train"], {"transformers"}),
])
def test_the_engine_a_stage_runs_is_read_from_its_words(words, engines):
    """vllm/sglang as a module or a program name that engine; any other Python job loads with transformers."""
    assert engines_of_words(words) == engines


def test_a_vllm_stage_passes_when_vllm_knows_the_model_though_other_engines_do_not():
    """vLLM 0.16.0 registers Kimi K2.6: the vllm stage is fine whatever SGLang 0.5.3 thinks."""
    result = model_architecture(context(("{python} -m vllm.entrypoints.openai.api_server --model {model}",)))
    assert result.status is Status.PASS, result.message
    assert result.details["architecture"]["vllm"]["as"] == \
        "vllm.model_executor.models.kimi_k25.KimiK25ForConditionalGeneration"


def test_an_sglang_stage_fails_naming_the_release_that_knows_the_model():
    """SGLang 0.5.3 registers no KimiK25ForConditionalGeneration: fail, naming SGLang >= 0.5.9."""
    result = model_architecture(context(("{python} -m sglang.launch_server --model-path {model}",)))
    assert result.status is Status.FAIL
    assert "SGLang 0.5.3" in result.message and "SGLang >= 0.5.9 registers" in result.message
    assert "--trust-remote-code would run configuration_kimi_k25.py (sha256 aaaaaaaaaaaa)" in result.message


def test_a_stage_passing_trust_remote_code_to_the_engine_is_consent_for_that_engine():
    """`--trust-remote-code` in the SGLang stage's own words: its Transformers backend may load the model's code."""
    result = model_architecture(context(("{python} -m sglang.launch_server --trust-remote-code",)))
    assert result.status is Status.PASS
    assert result.details["architecture"]["sglang"]["certain"] is False


def test_a_training_stage_on_a_transformers_without_the_model_type_needs_consent():
    """A speculators stage loads with transformers 4.57.6, which knows no kimi_k25: fail without consent,
    pass with --trust-remote-code (through auto_map)."""
    commands = ("{python} -m speculators.train --model {model}",)
    assert model_architecture(context(commands)).status is Status.FAIL
    assert model_architecture(context(commands, trust=True)).status is Status.PASS


def test_without_a_stage_an_engine_that_cannot_load_the_model_warns():
    """No stage names an engine: SGLang's and transformers' gaps warn, vLLM's support is stated."""
    result = model_architecture(context())
    assert result.status is Status.WARN
    assert "vLLM 0.16.0 loads it as" in result.message


def host_interpreter() -> Interpreter:
    return interpreter_from_probe(interpreter_facts(sys.executable, 30))


def test_the_tags_computed_for_this_machine_are_packagings_own():
    """This interpreter, as the probe describes it, supports exactly packaging.tags.sys_tags()."""
    assert supported_tags(host_interpreter()) == frozenset(packaging_tags.sys_tags())


def test_manylinux_tags_follow_the_glibc_and_the_legacy_aliases():
    """glibc 2.31 on x86_64: manylinux_2_31 down to 2_5 with manylinux2014/2010/1; nothing newer."""
    platforms = linux_platforms("x86_64", (2, 31))
    assert platforms[:3] == ["linux_x86_64", "manylinux_2_31_x86_64", "manylinux_2_30_x86_64"]
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "manylinux_2_5_x86_64"} <= set(platforms)
    assert "manylinux_2_32_x86_64" not in platforms and "manylinux_2_4_x86_64" not in platforms
    assert "manylinux_2_16_aarch64" not in linux_platforms("aarch64", (2, 31))
