"""The libcst transformer behind the speculators patches, imported only when one runs.

Kept apart from :mod:`patches.speculators` so that loading the patch definitions (every
``envdoctor`` command does) does not import libcst; modules whose names start with ``_``
are helpers, not patch definitions.
"""

from __future__ import annotations

import libcst as cst


class LanguageModelFirst(cst.CSTTransformer):
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
