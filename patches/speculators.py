"""speculators' data generation, for targets whose model code ships with the model (Kimi K2.x).

Versions checked against the wheels on PyPI: 0.3.0, 0.4.0 and 0.4.0.1 load the tokenizer
without ``trust_remote_code`` two lines above an ``AutoConfig`` call that passes it; 0.5.0
removed ``vllm_hidden_states_generator.py`` (generation goes through a vLLM server).
0.3.0 takes ``base_model = model.model`` in the hidden-state worker; 0.4.0 asks
``get_language_model()`` first, so multimodal wrappers work there.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper
from packaging.specifiers import SpecifierSet

from envdoctor.cst_edits import AddTrustRemoteCode, callee_is
from envdoctor.patching import Patch, SkipFile, TransformMismatch

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
WORKER = "speculators/data_generation/custom_worker.py"


def tokenizer_trusts_remote_code(module: cst.Module) -> cst.Module:
    """Pass trust_remote_code=True to AutoTokenizer.from_pretrained, as the AutoConfig call does."""
    edit = AddTrustRemoteCode(callee_is("transformers.AutoTokenizer.from_pretrained"))
    new = MetadataWrapper(module).visit(edit)
    if edit.changed_lines:
        return new
    if edit.present_lines:
        raise SkipFile("AutoTokenizer.from_pretrained already passes trust_remote_code")
    raise TransformMismatch("no AutoTokenizer.from_pretrained call without **kwargs")


TOKENIZER = Patch(
    id="speculators-tokenizer-trust-remote-code",
    summary="VllmHiddenStatesGenerator loads the tokenizer with trust_remote_code=True",
    why=(
        "the generator loads the config with trust_remote_code=True but the tokenizer without it, "
        "so a model whose tokenizer is its own code (Kimi K2.x: TikTokenTokenizer) fails to load, "
        "or newer transformers silently loads a different, generic tokenizer"
    ),
    distribution="speculators",
    specifier=SpecifierSet(">=0.3.0,<0.5"),
    files=(GENERATOR,),
    transform=tokenizer_trusts_remote_code,
    fixed_in="0.5.0",
    # Passing the flag lets the model's own code run: only with the user's consent.
    needs_consent=True,
)


class _LanguageModelFirst(cst.CSTTransformer):
    """In _setup_hidden_states_capture: reach the decoder through language_model when there is one."""

    def __init__(self) -> None:
        super().__init__()
        self.in_setup = False
        self.replaced = 0
        self.resolves_itself = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if node.name.value == "_setup_hidden_states_capture":
            self.in_setup = True

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        if original.name.value == "_setup_hidden_states_capture":
            self.in_setup = False
        return updated

    def visit_Name(self, node: cst.Name) -> None:
        if self.in_setup and node.value in ("language_model", "get_language_model"):
            self.resolves_itself = True

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.RemovalSentinel:
        if not self.in_setup or len(updated.body) != 1:
            return updated
        statement = updated.body[0]
        if not (
            isinstance(statement, cst.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0].target, cst.Name)
            and statement.targets[0].target.value == "base_model"
            and isinstance(statement.value, cst.Attribute)
            and isinstance(statement.value.value, cst.Name)
            and statement.value.value.value == "model"
            and statement.value.attr.value == "model"
        ):
            return updated
        self.replaced += 1
        replacement = cst.parse_statement(
            "# Multimodal wrappers (e.g. KimiK25ForConditionalGeneration) keep the decoder\n"
            "# under language_model; text-only models have it at model.model.\n"
            'if hasattr(model, "language_model"):\n'
            "    base_model = model.language_model.model\n"
            "else:\n"
            "    pass\n"
        )
        assert isinstance(replacement, cst.If) and isinstance(replacement.orelse, cst.Else)
        # The original line (with its own comment) becomes the else branch, unchanged.
        orelse = replacement.orelse.with_changes(
            body=replacement.orelse.body.with_changes(body=[updated.with_changes(leading_lines=())])
        )
        return replacement.with_changes(leading_lines=[*updated.leading_lines, *replacement.leading_lines],
                                        orelse=orelse)


def decoder_through_language_model(module: cst.Module) -> cst.Module:
    """``base_model = model.model`` -> ``model.language_model.model`` when the wrapper has one."""
    edit = _LanguageModelFirst()
    new = module.visit(edit)
    if edit.resolves_itself:
        raise SkipFile("_setup_hidden_states_capture already reaches language_model")
    if edit.replaced != 1:
        raise TransformMismatch("no single `base_model = model.model` in _setup_hidden_states_capture")
    return new


MULTIMODAL_DECODER = Patch(
    id="speculators-multimodal-decoder-layers",
    summary="the hidden-state worker finds the decoder of multimodal wrappers (model.language_model.model)",
    why=(
        "the worker hooks the decoder at model.model, which a multimodal wrapper such as "
        "KimiK25ForConditionalGeneration does not have: hidden-state capture fails with AttributeError"
    ),
    distribution="speculators",
    specifier=SpecifierSet(">=0.3.0,<0.4"),
    files=(WORKER,),
    transform=decoder_through_language_model,
    fixed_in="0.4.0",
)
