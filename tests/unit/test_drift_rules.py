"""The drift resolution rules, each on a small provider and consumer shaped like real code."""

from __future__ import annotations

import ast
import textwrap
from typing import Any

from envdoctor.drift.judge import ERROR, UNRESOLVED, WARN, Finding, judge
from envdoctor.probe.host.drift.summaries import summarize_source
from envdoctor.probe.host.drift.uses import UseFinder


def analyse(provider: dict[str, str], consumer: str, *, version: str = "1.0", module: str = "cons.mod") -> list[Finding]:
    """Findings of `consumer` (one file of distribution cons) against the provider modules given."""
    modules: dict[str, Any] = {}
    for name, source in provider.items():
        is_package = name.count(".") == 0 or name.endswith(".__init__")
        name = name.removesuffix(".__init__")
        summary = summarize_source(textwrap.dedent(source).encode(), name, is_package)
        summary["path"] = name.replace(".", "/") + ("/__init__.py" if is_package else ".py")
        modules[name] = summary
    tops = {m.split(".")[0] for m in modules}
    tree = ast.parse(textwrap.dedent(consumer))
    uses = UseFinder(tree, module, False, tops).run()
    for use in uses:
        use["file"] = module.replace(".", "/") + ".py"
        use["provider"] = use["path"].split(".")[0]
    data = {"consumers": [{"name": "cons", "version": "0.1", "requires": [], "uses": uses}],
            "providers": {t: {"version": version} for t in tops}, "import_names": {t: t for t in tops}, "modules": modules}
    return [f for pair in judge(data) for f in pair.findings]


def severities(findings: list[Finding]) -> list[tuple[int, str]]:
    return [(f.line, f.severity) for f in findings]


def test_unknown_keyword_and_missing_required_are_errors() -> None:
    """A removed keyword and a new required parameter are errors at the consumer's line."""
    found = analyse({"prov": """
        def get_config(vllm_config, groups, available_memory):
            pass
    """}, """
        from prov import get_config
        get_config(vllm_config=1, groups=2, specs=3, available_memory=4)
        get_config(1, 2)
    """)
    assert severities(found) == [(3, ERROR), (4, ERROR)]
    assert "keyword specs" in found[0].why and "available_memory" in found[1].why
    assert found[0].definition == "prov/__init__.py:2"


def test_overload_stubs_are_skipped_for_the_implementation() -> None:
    """@overload stubs are not the signature; the implementation behind them is."""
    found = analyse({"prov": """
        from typing import overload
        @overload
        def load(path: str) -> int: ...
        @overload
        def load(path: bytes) -> int: ...
        def load(path, *, strict=False, cache=None):
            pass
    """}, """
        import prov
        prov.load("x", strict=True, cache=1)
    """)
    assert found == []


def test_a_call_any_conditional_variant_accepts_is_accepted() -> None:
    """if is_hip(): def f(6 args) else: def f(4 args) — a call fitting either is fine."""
    provider = {"prov": """
        if is_hip():
            def kernel(a, b, c, d, e, f):
                pass
        else:
            def kernel(a, b, c, d):
                pass
    """}
    assert analyse(provider, "from prov import kernel\nkernel(1, 2, 3, 4)\n") == []
    found = analyse(provider, "from prov import kernel\nkernel(1, 2)\n")
    assert severities(found) == [(2, ERROR)] and "variants" in found[0].why


def test_a_name_bound_to_different_callees_is_not_an_error() -> None:
    """A name imported from the provider and also defined locally is ambiguous: unresolved."""
    found = analyse({"prov": "def old(a):\n    pass\n"}, """
        try:
            from prov import old as run
        except ImportError:
            def run(*args, **kwargs):
                pass
        run(1, 2, 3)
    """)
    assert [f.severity for f in found] == [UNRESOLVED]


def test_lazy_modules_are_unresolved_not_errors() -> None:
    """PEP 562 __getattr__ and transformers' _LazyModule make a missing name unresolved."""
    pep562 = {"prov": """
        MODULE_ATTRS = {"LLM": ".entrypoints.llm:LLM"}
        def __getattr__(name):
            return MODULE_ATTRS[name]
    """}
    assert [f.severity for f in analyse(pep562, "from prov import LLM\n")] == [UNRESOLVED]
    lazy = {"prov": """
        import sys
        from .utils import _LazyModule, define_import_structure
        _import_structure = define_import_structure(__file__)
        sys.modules[__name__] = _LazyModule(__name__, globals()["__file__"], _import_structure)
    """}
    assert [f.severity for f in analyse(lazy, "from prov import AutoTokenizer\n")] == [UNRESOLVED]


def test_module_that_sets_names_on_itself_is_unresolved_not_an_error() -> None:
    """numpy.dtypes imports itself and adds its DType classes with setattr (called from
    compiled code): a name its source does not bind may exist. A module that calls setattr
    on something else still answers for its names."""
    numpy_like = {"prov.__init__": "", "prov.dtypes": """
        __all__ = []
        def _add_dtype_helper(DType, alias):
            from prov import dtypes
            setattr(dtypes, DType.__name__, DType)
            __all__.append(DType.__name__)
    """}
    found = analyse(numpy_like, "import prov.dtypes\nSAFE = [prov.dtypes.UInt32DType]\n")
    assert [f.severity for f in found] == [UNRESOLVED]
    plain = {"prov.__init__": "", "prov.dtypes": """
        class Box:
            pass
        def label(box):
            setattr(box, "name", "x")
    """}
    assert severities(analyse(plain, "import prov.dtypes\nprov.dtypes.UInt32DType\n")) == [(2, ERROR)]


def test_dataclass_under_a_metaclass_has_no_known_constructor() -> None:
    """transformers' ModelOutput has a metaclass that wraps the __init__ @dataclass writes, so
    CausalLMOutputWithPast(past_key_values=...) runs (the keyword becomes cache=): no error.
    The same dataclass without the metaclass refuses the keyword."""
    provider = """
        from dataclasses import dataclass
        class Meta(type):
            def __setattr__(cls, name, value):
                super().__setattr__(name, value)
        class Output(dict, metaclass=Meta):
            pass
        @dataclass
        class CausalOut(Output):
            loss: float = None
            cache: object = None
    """
    consumer = "from prov import CausalOut\nCausalOut(loss=1.0, past_key_values=2)\n"
    assert [f.severity for f in analyse({"prov": provider}, consumer)] == [UNRESOLVED]
    plain = provider.replace("class Output(dict, metaclass=Meta):", "class Output(dict):")
    assert severities(analyse({"prov": plain}, consumer)) == [(2, ERROR)]


def test_except_importerror_fallback_is_dead_when_the_try_import_resolves() -> None:
    """The fallback import only runs when the try import fails; a resolving try makes it dead."""
    provider = {"prov": "def new_api(x):\n    pass\n"}
    consumer = """
        try:
            from prov import new_api
        except ImportError:
            from prov import old_api
    """
    assert analyse(provider, consumer) == []
    consumer_broken = """
        try:
            from prov import newer_api
        except ImportError:
            from prov import old_api
    """
    assert severities(analyse(provider, consumer_broken)) == [(3, WARN), (5, WARN)]


def test_simple_version_checks_are_evaluated_against_the_installed_version() -> None:
    """if version.parse(prov.__version__) >= "0.12": the branch the installed version skips is dead."""
    provider = {"prov": "__version__ = '0.16.0'\ndef build(a, block_size):\n    pass\n"}
    consumer = """
        import prov
        from packaging import version
        if version.parse(prov.__version__) >= version.parse("0.12.0"):
            prov.build(1, block_size=2)
        else:
            prov.build(1)
    """
    assert analyse(provider, consumer, version="0.16.0") == []
    found = analyse(provider, consumer, version="0.11.0")
    assert severities(found) == [(7, ERROR)]  # the else branch runs on 0.11


def test_hasattr_and_type_checking_guards_make_warnings() -> None:
    """Uses under hasattr() or TYPE_CHECKING are warnings, not errors."""
    found = analyse({"prov": "def f(a):\n    pass\n"}, """
        import prov
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from prov import Gone
        if hasattr(prov, "g"):
            prov.g(1)
    """)
    assert severities(found) == [(5, WARN), (7, WARN)]


def test_methods_called_through_the_class() -> None:
    """Cls.method(obj, ...) passes self explicitly; a classmethod binds the class."""
    provider = {"prov": """
        class Engine:
            def step(self, batch, *, sync=False):
                pass
            @classmethod
            def from_config(cls, config, usage=None):
                pass
            @staticmethod
            def helper(x):
                pass
    """}
    consumer = """
        from prov import Engine
        Engine.step(engine, batch, sync=True)
        Engine.from_config(cfg)
        Engine.helper(1)
        Engine.from_config(cfg, usage=1, extra=2)
        Engine.missing_method()
    """
    assert severities(analyse(provider, consumer)) == [(6, ERROR), (7, ERROR)]


def test_dataclass_and_pydantic_fields_with_and_without_defaults() -> None:
    """Generated __init__: required fields, defaults, Field(init=False), ClassVar, InitVar, a wrapper decorator."""
    provider = {
        "prov.__init__": "",
        "prov.utils": """
            from pydantic.dataclasses import dataclass
            def config(cls):
                return dataclass(cls, config={"extra": "forbid"})
        """,
        "prov.sched": """
            from dataclasses import InitVar
            from typing import ClassVar
            from pydantic import Field
            from prov.utils import config

            @config
            class SchedulerConfig:
                max_model_len: InitVar[int]
                is_encoder_decoder: InitVar[bool]
                DEFAULT: ClassVar[int] = 2048
                max_num_seqs: int = Field(default=128, ge=1)
                encoder_cache_size: int = Field(init=False)
                policy: str = "fcfs"
        """,
    }
    consumer = """
        from prov.sched import SchedulerConfig
        SchedulerConfig(max_model_len=1, is_encoder_decoder=False, max_num_seqs=2)
        SchedulerConfig(max_model_len=1, max_num_seqs=2)
        SchedulerConfig(max_model_len=1, is_encoder_decoder=False, DEFAULT=3)
    """
    found = analyse(provider, consumer)
    assert severities(found) == [(4, ERROR), (5, ERROR)]
    assert "is_encoder_decoder" in found[0].why and "encoder_cache_size" not in found[0].why
    assert "keyword DEFAULT" in found[1].why


def test_constructors_init_new_and_inherited_init() -> None:
    """__init__ of the class or its same-provider base, __new__, and kwargs acceptance."""
    provider = {
        "prov.__init__": "",
        "prov.base": """
            class Executor:
                def __init__(self, vllm_config, *, log_stats=False):
                    pass
        """,
        "prov.impl": """
            from prov.base import Executor
            class MultiprocExecutor(Executor):
                pass
            class Token:
                def __new__(cls, value):
                    pass
            class Flexible:
                def __init__(self, *args, **kwargs):
                    pass
        """,
    }
    consumer = """
        from prov.impl import MultiprocExecutor, Token, Flexible
        MultiprocExecutor(vllm_config=1)
        MultiprocExecutor(config=1)
        Token(1)
        Token(1, 2)
        Flexible(1, 2, anything=3)
    """
    found = analyse(provider, consumer)
    assert severities(found) == [(4, ERROR), (6, ERROR)]
    assert found[0].definition == "prov/base.py:3"


def test_a_base_outside_the_provider_or_a_wrapping_decorator_is_unresolved() -> None:
    """What a foreign base or an unknown decorator does to a signature is not guessed."""
    provider = {"prov": """
        import torch
        def wrapper(fn):
            def inner(*args, **kwargs):
                return fn(*args, **kwargs)
            return inner
        class Layer(torch.nn.Module):
            pass
        @wrapper
        def op(a):
            pass
    """}
    found = analyse(provider, "import prov\nprov.Layer(1, 2)\nprov.op(1, 2)\n")
    assert [f.severity for f in found] == [UNRESOLVED, UNRESOLVED]


def test_star_reexports_and_missing_names() -> None:
    """A name re-exported by a star import resolves; a name no module defines is an error."""
    provider = {
        "prov.__init__": "",
        "prov.distributed.__init__": "from .parallel_state import *\n",
        "prov.distributed.parallel_state": "def get_tp_group():\n    pass\n",
    }
    found = analyse(provider, "from prov.distributed import get_tp_group, get_pp_group\n")
    assert severities(found) == [(1, ERROR)] and "get_pp_group" in found[0].use


def test_a_wraps_decorator_keeps_the_signature_and_a_none_placeholder_is_not_a_second_callee() -> None:
    """flashinfer's @flashinfer_api uses functools.wraps; sglang's `f = None` before a guarded import."""
    provider = {
        "prov.__init__": "",
        "prov.api_logging": """
            import functools
            def flashinfer_api(func=None, *, trace=None):
                def decorator(f):
                    @functools.wraps(f)
                    def wrapper(*args, **kwargs):
                        return f(*args, **kwargs)
                    return wrapper
                return decorator(func)
        """,
        "prov.core": """
            from .api_logging import flashinfer_api
            @flashinfer_api
            def block_scale_moe(routing_logits, hidden_states, *, num_experts, routing_method_type=0):
                pass
        """,
    }
    consumer = """
        block_scale_moe = None
        try:
            from prov.core import block_scale_moe
        except ImportError:
            block_scale_moe = None

        def forward(x):
            return block_scale_moe(routing_logits=x, hidden_states=x, num_experts=8, tile_tokens_dim=8)
    """
    found = analyse(provider, consumer)
    assert severities(found) == [(9, ERROR)] and "tile_tokens_dim" in found[0].why
    assert found[0].definition == "prov/core.py:4"  # the def line, not the decorator's


def test_a_flag_bound_to_a_version_test_stands_for_it() -> None:
    """peft: lt_4_56 = version.parse(transformers.__version__) < version.parse("4.56"); if lt_4_56: old API."""
    provider = {"prov": "__version__ = '5.24.0'\nclass Cache:\n    def __init__(self, data=None):\n        pass\n"}
    consumer = """
        import packaging.version
        import prov
        from prov import Cache
        lt_4_56 = packaging.version.parse(prov.__version__) < packaging.version.parse("4.56.0.dev0")
        if lt_4_56:
            cache = Cache.from_legacy_cache(1)
        else:
            cache = Cache(1)
    """
    assert analyse(provider, consumer, version="5.24.0") == []
    assert severities(analyse(provider, consumer, version="4.50.0")) == [(7, ERROR)]


def test_a_wraps_wrapper_that_edits_its_kwargs_is_unresolved() -> None:
    """huggingface_hub's validate_hf_hub_args drops deprecated keywords before forwarding: not an error."""
    provider = {"prov": """
        from functools import wraps
        def validate_args(fn):
            @wraps(fn)
            def _inner_fn(*args, **kwargs):
                kwargs = drop_deprecated(kwargs)
                return fn(*args, **kwargs)
            return _inner_fn
        @validate_args
        def hf_hub_download(repo_id, filename, *, cache_dir=None):
            pass
    """}
    found = analyse(provider, "from prov import hf_hub_download\nhf_hub_download('r', 'f', proxies=None)\n")
    assert [f.severity for f in found] == [UNRESOLVED]


def test_super_calls_in_a_subclass_of_a_provider_class_are_checked_bound() -> None:
    """class MyScheduler(Scheduler): super().__init__(...) is checked against Scheduler.__init__ without self."""
    provider = {"prov": """
        class Scheduler:
            def __init__(self, vllm_config, kv_cache_config, block_size):
                pass
            def schedule(self, budget=None):
                pass
    """}
    consumer = """
        from prov import Scheduler
        class MyScheduler(Scheduler):
            def __init__(self, config):
                super().__init__(vllm_config=config, kv_cache_config=None)
            def schedule(self):
                return super().schedule(budget=1)
        class Other(object):
            def __init__(self):
                super().__init__()
    """
    found = analyse(provider, consumer)
    assert severities(found) == [(5, ERROR)] and "block_size" in found[0].why


def test_super_with_several_bases_or_explicit_arguments_is_not_followed() -> None:
    """peft: class PeftModel(PushToHubMixin, torch.nn.Module) — forward comes from the second base."""
    provider = {"prov": "class PushToHubMixin:\n    def push(self):\n        pass\n"}
    consumer = """
        import torch
        from prov import PushToHubMixin
        class PeftModel(PushToHubMixin, torch.nn.Module):
            def forward(self, x):
                return super().forward(x)
        class Single(PushToHubMixin):
            def forward(self, x):
                return super(Other, x).forward(x)
    """
    assert analyse(provider, consumer) == []


def test_a_module_getattr_bound_by_assignment_makes_the_module_lazy() -> None:
    """transformers: __getattr__ = deprecate_attr(__name__, rename={...}) still answers old names."""
    provider = {"prov": "__getattr__ = deprecate_attr(__name__, rename={'OldKwargs': (1, '5.29')})\n"}
    assert [f.severity for f in analyse(provider, "from prov import OldKwargs\n")] == [UNRESOLVED]


def test_a_lazy_mapping_value_does_not_make_its_module_lazy() -> None:
    """transformers' modeling_auto builds _LazyAutoMapping objects; a name it lacks is still missing."""
    provider = {"prov": "MODEL_MAPPING = _LazyAutoMapping(CONFIG, NAMES)\nMODEL_MAPPING_NAMES = {}\n"}
    found = analyse(provider, "from prov import MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES, MODEL_MAPPING\n")
    assert [f.severity for f in found] == [ERROR] and "VISION_2_SEQ" in found[0].use
