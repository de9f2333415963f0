"""The two small host programs behind ``envdoctor run``: the supervisor (the command in a
process group of its own, stopped when the client goes away) and the detacher (``--detach``:
the command in a session of its own, its output in a private log). Both are real modules in
envdoctor/probe/host/ (``stage_supervisor.py``, ``stage_detacher.py``, with
``stage_env.py``), assembled here and run with the venv's interpreter under ``-I -S``.
"""

from __future__ import annotations

from envdoctor.probe.host import program_text

SUPERVISOR = program_text(("stage.env", "stage.supervisor"), "supervise")
DETACHER = program_text(("stage.env", "stage.detacher"), "detach")
