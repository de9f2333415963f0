"""What both stage programs start from (stdlib only, Python 3.6): their argv and the command's
environment.

argv: venv, command, stage name, and a JSON object of ``ENVDOCTOR_*`` variables (the facts, so
a command can read a model's values from its environment instead of having them spliced into
its text). The programs run under ``-I -S`` with the venv's interpreter: no PYTHON* variables,
no working folder on sys.path, no ``.pth`` files; only the stage's own command runs the
environment.
"""

import json
import os


def stage_arguments(argv):
    """(venv, command, stage, environment) from a stage program's argv."""
    venv, command, stage, extra_env = argv[1], argv[2], argv[3], json.loads(argv[4])
    env = dict(os.environ)
    if venv:
        env["VIRTUAL_ENV"] = venv
        env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")
    env.update(extra_env)
    return venv, command, stage, env
