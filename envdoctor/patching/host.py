"""The controller side of the patch writer: send it to the host with a request, read its
per-file results.

Everything that must hold even when two ``fix`` runs race or a run is killed happens on the
host, in one stdlib-only program (envdoctor/probe/host/patch/writer.py): take the
environment's lock, re-verify each file's hash under it, append an ``intent`` ledger line,
keep a backup, replace the file atomically, drop its stale bytecode, append ``done``.
A file whose hash is neither the expected before nor after is refused, never overwritten.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from envdoctor.errors import PatchError
from envdoctor.probe.host import program_text
from envdoctor.probe.host.patch import writer as patch_writer
from envdoctor.transport.interface import Transport
from envdoctor.transport.watched import run_watched

#: Exit status of the host program when at least one file was refused, and when the
#: environment's .envdoctor folder is unsafe (a symlink, another user's).
REFUSED, UNSAFE = patch_writer.REFUSED_STATUS, patch_writer.UNSAFE_STATUS

#: The host program, assembled from its real module (envdoctor/probe/host/patch/writer.py).
HOST_PROGRAM = program_text(("patch.atomic_write", "patch.writer"), "main")

#: Environment variable (tests only) that makes the host program SIGKILL itself right after
#: the intent line, to prove the next run completes the change.
KILL_AFTER_INTENT_ENV = "ENVDOCTOR_TEST_KILL_AFTER_INTENT"


async def run_host_program(
    transport: Transport, python: str, request: Mapping[str, Any], *, timeout: float | None = 300
) -> tuple[int, list[dict[str, Any]], str]:
    """Send the program and the request; returns (exit status, per-file results, stderr tail).
    It runs under the host's command watch: envdoctor interrupted or killed, it is ended
    (SIGTERM) with the rest of the run; the ledger's intent and done lines make that safe."""
    result = await run_watched(transport, [python, "-I", "-c", HOST_PROGRAM], python=python,
                               stdin=json.dumps(request).encode("utf-8"), timeout=timeout or 300)
    outcomes = []
    for line in result.stdout.splitlines():
        try:
            outcomes.append(json.loads(line))
        except ValueError:
            continue
    if result.exit_status not in (0, REFUSED) and not outcomes:
        raise PatchError(
            f"the patch writer failed on {transport.name} (exit status {result.exit_status}): "
            f"{result.stderr_tail(2) or 'no output'}"
        )
    return result.exit_status, outcomes, result.stderr_tail(3)


def change_request(
    op: str, prefix: str, changes: Sequence[Mapping[str, Any]], *, version: str, kill_after_intent: bool = False
) -> dict[str, Any]:
    return {"op": op, "prefix": prefix, "envdoctor": version, "changes": list(changes),
            "kill_after_intent": kill_after_intent}
