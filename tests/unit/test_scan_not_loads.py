"""Calls with a loader's name that load nothing: settings built only to be read, and
`Auto*.from_config` on a config whose class is transformers' own (envdoctor.scan.not_loads)."""

from __future__ import annotations

import textwrap

import pytest

from envdoctor.scan.scanner import scan_source

pytestmark = pytest.mark.unit

ENGINE = "vllm.EngineArgs"
MODEL = "transformers.AutoModel.from_config"


def sites_of(source: str, *, package: str | None = None) -> list[tuple[int, str, str]]:
    """(line, callee, state) of every site, the same with and without the ast shortcuts."""
    data = textwrap.dedent(source).encode()
    sites, error = scan_source(data, "m.py", package=package)
    reference, reference_error = scan_source(data, "m.py", package=package, shortcuts=False)
    assert error is None and reference_error is None
    assert sites == reference
    return [(s.line, s.callee, s.state) for s in sites]


def test_engine_args_built_only_to_compare_defaults_is_not_a_load():
    """vLLM's get_non_default_args: `EngineArgs(model=...)` only read by getattr and attributes."""
    source = """
    import dataclasses
    from vllm.engine.arg_utils import EngineArgs

    def get_non_default_args(args):
        out = {}
        default_args = EngineArgs(model=args.model)  # Create default instance
        for field in dataclasses.fields(args):
            if getattr(args, field.name) != getattr(default_args, field.name):
                out[field.name] = getattr(args, field.name)
        if default_args.model != EngineArgs.model:
            out["model"] = default_args.model
        return out
    """
    assert sites_of(source) == []


@pytest.mark.parametrize(
    "use",
    [
        pytest.param("return default_args", id="returned"),
        pytest.param("engine = default_args.create_engine_config()", id="method-called"),
        pytest.param("start(default_args)", id="passed-on"),
        pytest.param("self.args = default_args", id="stored"),
        pytest.param("llm = LLM(**vars(default_args)) if default_args.model else None", id="vars-passed-on"),
        pytest.param("print(default_args.model)\n        keep(default_args)", id="passed-after-a-read"),
        pytest.param("default_args = EngineArgs(model='other')", id="bound-twice"),
        pytest.param("go = lambda: start(default_args)", id="closure"),
    ],
)
def test_engine_args_that_may_become_an_engine_stays_a_site(use):
    """Built to be used (returned, passed on, a method called, kept, rebound, closed over): a site."""
    source = f"""
    from vllm import EngineArgs, LLM

    def run(self, args, start, keep):
        default_args = EngineArgs(model=args.model)
        {use}
    """
    assert (5, ENGINE, "missing") in sites_of(source)


def test_model_config_and_llm_load_even_when_only_read():
    """`ModelConfig(...)` reads the model's config when built, `LLM(...)` loads it: never dropped."""
    source = """
    from vllm import LLM
    from vllm.config import ModelConfig

    def f(path):
        config = ModelConfig(model=path)
        llm = LLM(model=path)
        return config.max_model_len == llm.llm_engine
    """
    assert [s[1] for s in sites_of(source)] == ["vllm.config.ModelConfig", "vllm.LLM"]


VLLM_GEMMA = """
from transformers import AutoModel
from transformers.models.gemma3n import Gemma3nConfig

class Gemma3nProcessingInfo:
    def get_hf_config(self):
        return self.ctx.get_hf_config(Gemma3nConfig)

class Gemma3nForConditionalGeneration:
    def __init__(self, *, vllm_config, prefix=""):
        config = vllm_config.model_config.hf_config
        self.vision_tower = AutoModel.from_config(config=config.vision_config)
        vision_config = getattr(config, "vision_config", None)
        self.other = AutoModel.from_config(vision_config)
"""


def test_from_config_on_a_vllm_module_s_declared_in_library_config_is_not_a_load():
    """vLLM raises unless the served config is the Gemma3nConfig the module declares: its towers are in-library."""
    assert sites_of(VLLM_GEMMA) == []


def test_from_config_on_a_generic_or_remote_config_stays_a_site():
    """Declared as a generic PreTrainedConfig (nemotron_vl's RADIO tower), or not declared at all: a site."""
    generic = VLLM_GEMMA.replace("from transformers.models.gemma3n import Gemma3nConfig",
                                 "from transformers import PreTrainedConfig as Gemma3nConfig")
    assert [s[0] for s in sites_of(generic)] == [12, 14]
    undeclared = VLLM_GEMMA.replace("self.ctx.get_hf_config(Gemma3nConfig)", "self.ctx.get_hf_config()")
    assert [s[0] for s in sites_of(undeclared)] == [12, 14]
    remote = VLLM_GEMMA.replace("from transformers.models.gemma3n import Gemma3nConfig",
                                "from .configuration_remote import Gemma3nConfig")
    assert [s[0] for s in sites_of(remote, package="vllm.models")] == [12, 14]


@pytest.mark.parametrize(
    ("body", "dropped"),
    [
        pytest.param("m = AutoModel.from_config(SiglipVisionConfig(hidden_size=8))", True, id="built-in-place"),
        pytest.param("m = AutoModel.from_config(SiglipVisionConfig.from_dict(d))", True, id="class-builder"),
        pytest.param("m = AutoModel.from_config(AutoConfig.for_model('siglip'))", True, id="for-model"),
        pytest.param("c: SiglipVisionConfig = make()\n        m = AutoModel.from_config(c)", True, id="annotated"),
        pytest.param("m = AutoModel.from_config(typed.vision_config)", True, id="sub-config-of-parameter"),
        pytest.param("m = AutoModel.from_config(maybe.vision_config)", True, id="optional-union"),
        pytest.param("m = AutoModel.from_config(cast(SiglipVisionConfig, d))", True, id="cast"),
        pytest.param("m = AutoModel.from_config(typed.get_text_config())", True, id="text-config"),
        pytest.param("m = AutoModel.from_config(generic.vision_config)", False, id="generic-parameter"),
        pytest.param("m = AutoModel.from_config(untyped)", False, id="untyped-parameter"),
        pytest.param("m = AutoModel.from_config(AutoConfig.from_pretrained(p, trust_remote_code=True))", False,
                     id="auto-config-load"),
        pytest.param("c = SiglipVisionConfig()\n        c = load(p)\n        m = AutoModel.from_config(c)", False,
                     id="rebound-otherwise"),
        pytest.param("for c in typed.sub_configs:\n            m = AutoModel.from_config(c)", False, id="loop"),
        pytest.param("m = AutoModel.from_config(typed.vision_config, trust_remote_code=False)", True,
                     id="explicit-false-on-in-library"),
        pytest.param("m = AutoModel.from_config(typed)\n        n = AutoModel.from_pretrained(p)", None,
                     id="from-pretrained-kept"),
    ],
)
def test_from_config_is_dropped_only_on_a_config_known_in_library(body, dropped):
    """What tells an in-library config class inside the calling function, and what does not."""
    source = f"""
    from typing import Optional, cast
    from transformers import AutoConfig, AutoModel, PreTrainedConfig, SiglipVisionConfig
    from transformers.models.gemma3 import Gemma3Config

    def build(typed: Gemma3Config, maybe: "Optional[Gemma3Config]", generic: PreTrainedConfig, untyped, d, p):
        {body}
    """
    found = [s[1] for s in sites_of(source)]
    if dropped is None:
        assert found == ["transformers.AutoModel.from_pretrained"]
    else:
        assert (MODEL not in found) is dropped
