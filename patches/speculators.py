"""speculators' data generation, for targets whose model code ships with the model (Kimi K2.x).

Versions checked against the wheels on PyPI: 0.3.0, 0.4.0 and 0.4.0.1 load the tokenizer
without ``trust_remote_code`` two lines above an ``AutoConfig`` call that passes it; 0.5.0
removed ``vllm_hidden_states_generator.py`` (generation goes through a vLLM server).
0.3.0 takes ``base_model = model.model`` in the hidden-state worker; 0.4.0 asks
``get_language_model()`` first, so multimodal wrappers work there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envdoctor.patching.engine import AddKeyword, Patch, ReplaceStatement, SkipFile, TransformMismatch

if TYPE_CHECKING:
    import libcst as cst

# libcst (~150 ms to import) is imported inside the transforms, so that listing and
# checking patches does not pay for it; the transformer classes live in _speculators_cst.

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
WORKER = "speculators/data_generation/custom_worker.py"
AUTO_TOKENIZER = "transformers.AutoTokenizer.from_pretrained"


def tokenizer_trusts_remote_code(module: cst.Module) -> cst.Module:
    """Pass trust_remote_code=True to AutoTokenizer.from_pretrained, as the AutoConfig call does."""
    from envdoctor.patching.cst_edits import add_keyword_at_sites

    edit = add_keyword_at_sites(module, callee=AUTO_TOKENIZER, path=GENERATOR,
                                package="speculators.data_generation")
    if edit.changed:
        return edit.module
    if edit.present:
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
    specifier=">=0.3.0,<0.5",
    files=(GENERATOR,),
    transform=tokenizer_trusts_remote_code,
    fixed_in="0.5.0",
    # Passing the flag lets the model's own code run: only with the user's consent.
    needs_consent=True,
    declares=(AddKeyword("trust_remote_code", "True", callee=AUTO_TOKENIZER),),
)


def decoder_through_language_model(module: cst.Module) -> cst.Module:
    """``base_model = model.model`` -> ``model.language_model.model`` when the wrapper has one."""
    from envdoctor.patches._speculators_cst import LanguageModelFirst

    edit = LanguageModelFirst()
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
    specifier=">=0.3.0,<0.4",
    files=(WORKER,),
    transform=decoder_through_language_model,
    fixed_in="0.4.0",
    declares=(
        ReplaceStatement(
            "_setup_hidden_states_capture",
            old="base_model = model.model",
            new=(
                'if hasattr(model, "language_model"):\n'
                "    base_model = model.language_model.model\n"
                "else:\n"
                "    base_model = model.model\n"
            ),
        ),
    ),
)
