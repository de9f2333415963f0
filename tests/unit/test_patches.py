"""Patch transforms, with the code before and after inline (as libcst's CodemodTest does)."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper

from envdoctor.cst_edits import AddTrustRemoteCode, callee_is
from envdoctor.patching import SkipFile, TransformMismatch
from envdoctor.patches import trust_remote_code
from envdoctor.patches.speculators import decoder_through_language_model, tokenizer_trusts_remote_code

AUTO_TOKENIZER = "transformers.AutoTokenizer.from_pretrained"


def add_flag(before: str) -> tuple[str, AddTrustRemoteCode]:
    edit = AddTrustRemoteCode(callee_is(AUTO_TOKENIZER))
    return MetadataWrapper(cst.parse_module(dedent(before))).visit(edit).code, edit


def assert_adds_flag(before: str, after: str) -> None:
    code, _ = add_flag(before)
    assert code == dedent(after)


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
    assert edit.skipped_kwargs == [3] and edit.present_lines == [4] and edit.changed_lines == []


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
    assert code == dedent(before) and edit.changed_lines == []


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


def test_generic_patch_changes_only_the_named_lines():
    """The generic patch adds the flag at the scanner's lines only, and skips a **kwargs call there."""
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
    assert trust_remote_code.add_flag_at({3, 5})(cst.parse_module(before)).code == after
    with pytest.raises(TransformMismatch):
        trust_remote_code.add_flag_at({5})(cst.parse_module(before))
    with pytest.raises(SkipFile):
        trust_remote_code.add_flag_at({3})(cst.parse_module(after))
