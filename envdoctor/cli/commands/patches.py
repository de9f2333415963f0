"""``envdoctor patches list|show``: the patches fix can apply."""

from __future__ import annotations

from typing import Any

import click

from envdoctor.cli.exits import handle_errors
from envdoctor.cli.options import PATCHES, output_options
from envdoctor.cli.output import emit
from envdoctor.errors import ConfigError, UsageError
from envdoctor.patching.engine import generic_patches, load_patches
from envdoctor.report.listing import render_patch, render_patch_list
from envdoctor.suggestions import did_you_mean


@click.group("patches")
def patches_group() -> None:
    """The patches envdoctor can apply (shipped in patches/, or your own with --patches)."""


@patches_group.command("list")
@PATCHES
@output_options()
@handle_errors
def list_patches(patch_files: tuple[str, ...], fmt: str, output: str | None) -> None:
    """List every patch fix can apply: id, distribution and versions, summary (the generic
    trust-remote-code patch too, whose files check finds on each host)."""
    emit(render_patch_list([*load_patches(patch_files).patches, *generic_patches()], fmt), output)


@patches_group.command("show")
@click.argument("patch_id", metavar="ID")
@PATCHES
@output_options()
@handle_errors
def show_patch(patch_id: str, patch_files: tuple[str, ...], fmt: str, output: str | None) -> None:
    """Show what patch ID changes, where, for which versions, and why."""
    emit(render_patch(known_patch(patch_id, patch_files), fmt), output)


def known_patch(patch_id: str, patch_files: tuple[str, ...]) -> Any:
    """The patch named ``patch_id`` (shipped, generic or the user's); an unknown id is exit 2."""
    for generic in generic_patches():
        if generic.id == patch_id:
            return generic
    try:
        return load_patches(patch_files).get(patch_id)
    except ConfigError:
        known = [p.id for p in load_patches(patch_files).patches] + [g.id for g in generic_patches()]
        raise UsageError(f"no patch named {patch_id!r}{did_you_mean(patch_id, known)}",
                         hint=f"known patches: {', '.join(known)} "
                         "(`envdoctor patches list`; a patch of your own needs --patches FILE)") from None
