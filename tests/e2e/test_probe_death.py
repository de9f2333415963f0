"""A probe that dies mid-run (killed, out of memory) loses only what it had not sent: the
sections it answered are judged, the others are their checks' errors, nothing is blocked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# The venv's python3: the real interpreter, killed with SIGKILL as soon as the probe has sent
# the `venvs` section's line (what the kernel's out-of-memory killer does to a probe that grew
# too large in a later section). Everything else reaches the controller untouched.
KILLER = """#!/bin/sh
fifo="$(mktemp -u)"; mkfifo "$fifo"
exec 3<&0
{real} "$@" <&3 > "$fifo" 3<&- &
child=$!
while IFS= read -r line; do
  printf '%s\\n' "$line"
  case "$line" in *'"section": "venvs"'*) kill -9 "$child"; rm -f "$fifo"; exit 137;; esac
done < "$fifo"
rm -f "$fifo"
wait "$child"
"""


def test_sections_sent_before_the_probe_was_killed_are_judged(tmp_path: Path, run_cli) -> None:
    """Killed after `venvs`: host.python and python.venv pass, every check whose section never
    came is an error saying the probe was killed, none is blocked, host.probe names them."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    real = (venv / "bin" / "python3").resolve()
    wrapper = venv / "bin" / "python3"
    wrapper.unlink()
    wrapper.write_text(KILLER.format(real=real))
    wrapper.chmod(0o755)
    result = run_cli("check", "local", "--venv", str(venv), "--format", "json", "--timeout", "120",
                     env={"XDG_CACHE_HOME": str(tmp_path / "cache")}, timeout=180)
    assert result.exit_status == 1, result.stderr[-2000:]
    results = {r["id"]: r for r in json.loads(result.stdout)["hosts"][0]["results"]}
    assert results["host.python"]["status"] == "pass" and results["python.venv"]["status"] == "pass"
    assert not [r for r in results.values() if r["status"] == "blocked"]
    killed = [r for r in results.values() if "killed (SIGKILL)" in r["message"] and r["id"] != "host.probe"]
    assert killed and all(r["status"] == "error" for r in killed), killed
    assert results["host.probe"]["status"] == "warn" and "killed" in results["host.probe"]["message"]
