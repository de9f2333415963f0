"""Patch transforms, with the code before and after inline (as libcst's CodemodTest does)."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst
import pytest

from envdoctor.patching.cst_edits import KeywordEdit, add_keyword_at_sites
from envdoctor.patching.proof import AddKeyword, prove
from envdoctor.patching.engine import SkipFile, TransformMismatch
from envdoctor.patches import trust_remote_code
from envdoctor.patches.speculators import decoder_through_language_model, tokenizer_trusts_remote_code

AUTO_TOKENIZER = "transformers.AutoTokenizer.from_pretrained"


def add_flag(before: str) -> tuple[str, KeywordEdit]:
    edit = add_keyword_at_sites(cst.parse_module(dedent(before)), callee=AUTO_TOKENIZER)
    return edit.module.code, edit


def assert_adds_flag(before: str, after: str) -> None:
    code, _ = add_flag(before)
    assert code == dedent(after)
    # The proof accepts exactly this change (one keyword per missing call, comments kept).
    assert prove((AddKeyword("trust_remote_code", callee=AUTO_TOKENIZER),), "m.py",
                 dedent(before).encode(), code.encode()) == []


def test_one_line_call_gains_flag_without_spaces_around_equals():
    """A one-line call gets `, trust_remote_code=True` at its end, no spaces around `=`."""
    assert_adds_flag(
        """
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(path, use_fast=True)
        """,
        """
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(path, use_fast=True, trust_remote_code=True)
        """,
    )


def test_one_argument_per_line_with_trailing_comma_stays_so():
    """One argument per line with a trailing comma: the new argument is its own line, comma kept."""
    assert_adds_flag(
        """
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(
            path,  # where the model is
            use_fast=True,
        )
        """,
        """
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(
            path,  # where the model is
            use_fast=True,
            trust_remote_code=True,
        )
        """,
    )


def test_one_argument_per_line_without_trailing_comma_gets_none():
    """Without a trailing comma, none is invented; a comment stays on its argument's line."""
    assert_adds_flag(
        """
        import transformers
        tok = transformers.AutoTokenizer.from_pretrained(
            path,
            revision="main"  # pinned
        )
        """,
        """
        import transformers
        tok = transformers.AutoTokenizer.from_pretrained(
            path,
            revision="main",  # pinned
            trust_remote_code=True
        )
        """,
    )


def test_single_argument_on_its_own_line_and_hanging_indent():
    """A lone argument on its own line and a hanging indent both keep their layout."""
    assert_adds_flag(
        """
        from transformers import AutoTokenizer as AT
        a = AT.from_pretrained(
            path
        )
        b = AT.from_pretrained(path,
                               use_fast=False)
        c = AT.from_pretrained(
            path, use_fast=False
        )
        """,
        """
        from transformers import AutoTokenizer as AT
        a = AT.from_pretrained(
            path,
            trust_remote_code=True
        )
        b = AT.from_pretrained(path,
                               use_fast=False,
                               trust_remote_code=True)
        c = AT.from_pretrained(
            path, use_fast=False, trust_remote_code=True
        )
        """,
    )


def test_kwargs_call_and_call_with_flag_are_left_alone():
    """A call passing **kwargs is not patched (and is reported); one that passes the flag is untouched."""
    before = """
        from transformers import AutoTokenizer
        a = AutoTokenizer.from_pretrained(path, **options)
        b = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
        """
    code, edit = add_flag(before)
    assert code == dedent(before)
    assert [k[0] for k in edit.kwargs] == [3] and [k[0] for k in edit.present] == [4] and edit.changed == ()


def test_local_class_sharing_the_name_is_not_transformers():
    """A local class called AutoTokenizer is not a transformers loader and is not patched."""
    before = """
        class AutoTokenizer:
            @classmethod
            def from_pretrained(cls, path):
                return cls()
        tok = AutoTokenizer.from_pretrained(path)
        """
    code, edit = add_flag(before)
    assert code == dedent(before) and edit.changed == ()


GENERATOR_BEFORE = '''
from transformers import AutoConfig, AutoTokenizer


class VllmHiddenStatesGenerator:
    def __init__(self, model_path: str):
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)

        config = AutoConfig.from_pretrained(model_path, trust_remote_code=True)
'''

GENERATOR_AFTER = '''
from transformers import AutoConfig, AutoTokenizer


class VllmHiddenStatesGenerator:
    def __init__(self, model_path: str):
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=True)

        config = AutoConfig.from_pretrained(model_path, trust_remote_code=True)
'''


def test_speculators_tokenizer_patch_and_its_second_run():
    """The generator's tokenizer call gains the flag; run again, the transform says already applied."""
    assert tokenizer_trusts_remote_code(cst.parse_module(GENERATOR_BEFORE)).code == GENERATOR_AFTER
    with pytest.raises(SkipFile):
        tokenizer_trusts_remote_code(cst.parse_module(GENERATOR_AFTER))


def test_speculators_tokenizer_patch_refuses_code_it_does_not_know():
    """A file without the tokenizer call is a mismatch, not a silent no-op."""
    with pytest.raises(TransformMismatch):
        tokenizer_trusts_remote_code(cst.parse_module("import os\n"))


WORKER_BEFORE = '''
class HiddenStatesWorkerExtension:
    def _setup_hidden_states_capture(self, layer_ids: list[int]):
        model = self.model_runner.model  # type: ignore[attr-defined]

        base_model = model.model  # type: ignore[attr-defined]
        base_model._extension = self  # noqa: SLF001
'''

WORKER_AFTER = '''
class HiddenStatesWorkerExtension:
    def _setup_hidden_states_capture(self, layer_ids: list[int]):
        model = self.model_runner.model  # type: ignore[attr-defined]

        # Multimodal wrappers (e.g. KimiK25ForConditionalGeneration) keep the decoder
        # under language_model; text-only models have it at model.model.
        if hasattr(model, "language_model"):
            base_model = model.language_model.model
        else:
            base_model = model.model  # type: ignore[attr-defined]
        base_model._extension = self  # noqa: SLF001
'''

WORKER_040 = '''
class HiddenStatesWorkerExtension:
    def _setup_hidden_states_capture(self, layer_ids: list[int]):
        model = self.model_runner.model
        if hasattr(model, "get_language_model"):
            base_model = model.get_language_model().model
        elif hasattr(model, "model") and hasattr(model.model, "layers"):
            base_model = model.model
'''


def test_speculators_worker_reaches_decoder_through_language_model():
    """`base_model = model.model` becomes an if/else on language_model, keeping its own comment."""
    assert decoder_through_language_model(cst.parse_module(WORKER_BEFORE)).code == WORKER_AFTER
    with pytest.raises(SkipFile):
        decoder_through_language_model(cst.parse_module(WORKER_AFTER))


def test_speculators_worker_040_resolves_the_language_model_itself():
    """0.4.0's worker already asks get_language_model(): nothing to change."""
    with pytest.raises(SkipFile):
        decoder_through_language_model(cst.parse_module(WORKER_040))




def generic(before: str, *sites: tuple[int, int, str], path: str = "lib/m.py") -> str:
    """The generic patch's new text for the scanner's sites, proven as the engine proves it."""
    from envdoctor.patching.engine import transform_source

    patch = trust_remote_code.for_file("lib", "1.0", path, set(sites))
    new = transform_source(patch, dedent(before).encode(), path)
    assert new is not None
    return new.decode()


def missing_sites(before: str, path: str = "lib/m.py") -> list[tuple[int, int, str]]:
    from envdoctor.scan.scanner import package_of_relative_path, scan_source

    sites, _ = scan_source(dedent(before).encode(), path, package=package_of_relative_path(path))
    return [(s.line, s.column, s.callee) for s in sites if s.state == "missing"]


def assert_generic(before: str, after: str) -> None:
    """The scanner's missing sites of `before`, patched by the generic patch, give `after`."""
    assert generic(before, *missing_sites(before)) == dedent(after)


def test_call_around_the_loader_on_the_same_line_is_left_alone():
    """`len(AutoTokenizer.from_pretrained(...))` (sentence-transformers): only the loader gains the flag."""
    assert_generic(
        """
        from transformers import AutoTokenizer
        n = len(AutoTokenizer.from_pretrained(model_name_or_path))
        """,
        """
        from transformers import AutoTokenizer
        n = len(AutoTokenizer.from_pretrained(model_name_or_path, trust_remote_code=True))
        """,
    )


def test_call_chained_on_the_loader_is_left_alone():
    """`.from_pretrained(...).to("cuda")` (trl): the chained call starts at the same place and is not touched."""
    assert_generic(
        """
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B").to("cuda")
        """,
        """
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B", trust_remote_code=True).to("cuda")
        """,
    )


def test_call_in_the_loaders_arguments_is_left_alone():
    """`str(self.model_dir)` among the arguments (lm-eval) keeps its one argument."""
    assert_generic(
        """
        from transformers import AutoConfig
        class M:
            def load(self):
                self.config = AutoConfig.from_pretrained(str(self.model_dir), revision=str(rev))
        """,
        """
        from transformers import AutoConfig
        class M:
            def load(self):
                self.config = AutoConfig.from_pretrained(str(self.model_dir), revision=str(rev), trust_remote_code=True)
        """,
    )


def test_two_sites_on_one_line_each_get_one_flag():
    """A loader inside another loader's arguments: each named site gets exactly one keyword."""
    assert_generic(
        """
        from transformers import AutoConfig, AutoModel
        m = AutoModel.from_pretrained(p, config=AutoConfig.from_pretrained(p))
        """,
        """
        from transformers import AutoConfig, AutoModel
        m = AutoModel.from_pretrained(p, config=AutoConfig.from_pretrained(p, trust_remote_code=True), trust_remote_code=True)
        """,
    )


def test_trailing_comment_on_the_last_argument_is_kept():
    """`p, use_fast=True  # fast` then `)`: the flag joins the line and `# fast` stays at its end."""
    assert_generic(
        """
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(
            p, use_fast=True  # fast
        )
        tok = AutoTokenizer.from_pretrained(
            p, use_fast=True,  # fast, with a trailing comma
        )
        """,
        """
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(
            p, use_fast=True, trust_remote_code=True  # fast
        )
        tok = AutoTokenizer.from_pretrained(
            p, use_fast=True, trust_remote_code=True,  # fast, with a trailing comma
        )
        """,
    )


def test_from_config_and_alias_sites_are_patched_by_identity():
    """`load_class.from_config(...)` through a multi-binding alias is patched like any other site."""
    assert_generic(
        """
        from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM
        def load(config, seq2seq):
            if seq2seq:
                load_class = AutoModelForSeq2SeqLM
            else:
                load_class = AutoModelForCausalLM
            return load_class.from_config(config)
        """,
        """
        from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM
        def load(config, seq2seq):
            if seq2seq:
                load_class = AutoModelForSeq2SeqLM
            else:
                load_class = AutoModelForCausalLM
            return load_class.from_config(config, trust_remote_code=True)
        """,
    )


def test_generic_patch_changes_only_the_named_sites():
    """Only the named sites change; a **kwargs site is never patched; a second run is a no-op."""
    before = dedent("""
        from transformers import AutoConfig, AutoModel
        config = AutoConfig.from_pretrained(path)
        model = AutoModel.from_pretrained(path)
        other = AutoModel.from_pretrained(path, **kw)
        """)
    after = dedent("""
        from transformers import AutoConfig, AutoModel
        config = AutoConfig.from_pretrained(path, trust_remote_code=True)
        model = AutoModel.from_pretrained(path)
        other = AutoModel.from_pretrained(path, **kw)
        """)
    config = (3, 9, "transformers.AutoConfig.from_pretrained")
    assert generic(before, config) == after
    with pytest.raises(TransformMismatch):
        trust_remote_code.add_flag_at({(5, 8, "transformers.AutoModel.from_pretrained")})(cst.parse_module(before))
    with pytest.raises(TransformMismatch, match="no such call"):
        trust_remote_code.add_flag_at({(3, 9, "transformers.AutoModel.from_pretrained")})(cst.parse_module(before))
    with pytest.raises(SkipFile):
        trust_remote_code.add_flag_at({config})(cst.parse_module(after))


def test_proof_refuses_an_undeclared_keyword_on_the_same_line():
    """The proof names a keyword added to a call nobody declared (the old line-based bug) and refuses it."""
    old = b"from transformers import AutoTokenizer\nn = len(AutoTokenizer.from_pretrained(p))\n"
    wrong = b"from transformers import AutoTokenizer\nn = len(AutoTokenizer.from_pretrained(p, trust_remote_code=True), trust_remote_code=True)\n"
    right = b"from transformers import AutoTokenizer\nn = len(AutoTokenizer.from_pretrained(p, trust_remote_code=True))\n"
    declared = (AddKeyword("trust_remote_code", sites=((2, 8, AUTO_TOKENIZER),)),)
    problems = prove(declared, "m.py", old, wrong)
    assert len(problems) == 1 and "undeclared" in problems[0] and "`len(...)`" in problems[0]
    assert prove(declared, "m.py", old, right) == []
    # Declared but not done, another value, lost comment, changed layout elsewhere: each refused.
    assert "not done" in prove(declared, "m.py", old, old.replace(b"(p)", b"(q)"))[-1]
    assert prove(declared, "m.py", old, right.replace(b"=True", b"=1"))
    commented = old.replace(b"(p))", b"(p  # c\n))")
    assert "comments" in prove(declared, "m.py", commented, right.replace(b"True))", b"True\n))"))[0]
    assert "outside" in prove(declared, "m.py", old, right.replace(b"n = ", b"n =  "))[0]


def test_engine_refuses_a_patch_that_changes_more_than_it_declares():
    """A transform whose result differs beyond its declaration raises UndeclaredChange with the diff."""
    from packaging.specifiers import SpecifierSet

    from envdoctor.patching.engine import Patch, UndeclaredChange, transform_source

    def sneaky(module: cst.Module) -> cst.Module:
        return cst.parse_module(module.code.replace("(p)", "(p, trust_remote_code=True)").replace("x = 1", "x = 2"))

    patch = Patch(id="p", summary="s", why="w", distribution="d", specifier=SpecifierSet(">=0"), files=("d/m.py",),
                  transform=sneaky, declares=(AddKeyword("trust_remote_code", callee=AUTO_TOKENIZER),))
    source = b"from transformers import AutoTokenizer\nx = 1\nt = AutoTokenizer.from_pretrained(p)\n"
    with pytest.raises(UndeclaredChange) as refused:
        transform_source(patch, source, "d/m.py")
    assert "x = 1" in refused.value.diff and "line 2: `1` became `2`" in str(refused.value)
    undeclared = Patch(id="q", summary="s", why="w", distribution="d", specifier=SpecifierSet(">=0"),
                       files=("d/m.py",), transform=sneaky)
    with pytest.raises(UndeclaredChange):
        transform_source(undeclared, source, "d/m.py")


def test_speculators_patches_prove_against_their_declarations():
    """The shipped speculators patches pass their own proof on the code they target."""
    from envdoctor.patches.speculators import GENERATOR, MULTIMODAL_DECODER, TOKENIZER, WORKER

    assert prove(TOKENIZER.declares, GENERATOR, GENERATOR_BEFORE.encode(), GENERATOR_AFTER.encode()) == []
    assert prove(MULTIMODAL_DECODER.declares, WORKER, WORKER_BEFORE.encode(), WORKER_AFTER.encode()) == []
    assert prove(MULTIMODAL_DECODER.declares, WORKER, WORKER_BEFORE.encode(), GENERATOR_AFTER.encode())
