"""What `envdoctor diff` and `check` of a `same = true` group cost against a plain `check`
(bench/scale_bench.py runs it over its simulated fleet and prints the figures).

The job: this bench's own venv (its distributions stand for the job's), four of them named as
requirements (their closure is hashed), and a model folder laid out as a Kimi K2.x folder's
files with four small weight shards. The real probe runs once on this machine for each of the
three requests (`check`, `check` of a same = true group, `diff`); the simulated hosts answer
each request with its recording, so the controller does all of its real work for each command.
The hashing itself happens on the hosts, bounded and cached: `host_cost` measures it here, on
this machine's venv, cold (empty cache) and warm.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REQUIRES = ("rich", "click", "asyncssh", "libcst")


def model_folder(root: Path) -> Path:
    folder = root / "models" / "Kimi-K2.6"
    if folder.exists():
        return folder
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "kimi_k25", "text_config": {"hidden_size": 7168}}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"auto_map": {}, "model_max_length": 262144}))
    (folder / "tiktoken.model").write_bytes(b"".join(b"%d %d\n" % (i, i) for i in range(4096)))
    for shard in range(1, 5):
        (folder / f"model-{shard:05d}-of-00004.safetensors").write_bytes(os.urandom(1 << 20))
    return folder


def job_args(root: Path) -> list[str]:
    args = ["--venv", sys.prefix, "--model", str(model_folder(root))]
    for name in REQUIRES:
        args += ["--require", name]
    return args


def job_spec(root: Path) -> Any:
    from envdoctor.inventory import HostSpec

    return HostSpec("h", None, venv=sys.prefix, models=(str(model_folder(root)),), requires=REQUIRES)


def requests(root: Path) -> dict[str, dict[str, Any]]:
    """The probe request each command sends a host of the job, built as the commands build it."""
    from envdoctor.engine.executor import FleetSettings
    from envdoctor.engine.graph import load_checks
    from envdoctor.operations.compare import DIFF_SECTIONS
    from envdoctor.operations.fleet import HAVE_OVERRIDES, HAVE_SECTIONS, HostRun
    from envdoctor.operations.gather import build_request

    spec, graph = job_spec(root), load_checks()
    plain = HostRun(spec, graph, FleetSettings(), None).request()
    same = HostRun(spec, graph, FleetSettings(), None, extra_sections=HAVE_SECTIONS,
                   overrides=HAVE_OVERRIDES).request()
    return {"check": build_request(spec, plain[0], plain[1]), "same": build_request(spec, same[0], same[1]),
            "diff": build_request(spec, DIFF_SECTIONS, HAVE_OVERRIDES)}


def record(root: Path) -> list[str]:
    """Run the real probe for each request; return sim_fleet's --answer-for arguments."""
    from envdoctor.probe.program import build_program, encode_stdin, probe_command, venv_pythons
    from sim_fleet import sections_digest  # (bench/ is this script's folder, first on sys.path)

    found = []
    for name, request in requests(root).items():
        stdin = encode_stdin({"sections": request}, build_program(request))
        argv = probe_command(venv_pythons(sys.prefix))
        answer = subprocess.run(argv, input=stdin, capture_output=True, check=True, timeout=600).stdout
        path = root / f"answer-{name}"
        path.write_bytes(answer)
        found += ["--answer-for", f"{sections_digest(request)}={path}"]
    return found


def inventory(root: Path, aliases: list[str]) -> Path:
    """envdoctor.toml with the hosts as a plain group and as a same = true group."""
    names = ", ".join(json.dumps(a) for a in aliases)
    path = root / "envdoctor-diff.toml"
    path.write_text(f"[groups]\nplain = [{names}]\n[groups.job]\nhosts = [{names}]\nsame = true\n")
    return path


def commands(root: Path, aliases: list[str], ssh_config: Path) -> dict[str, list[str]]:
    config = ["--config", str(inventory(root, aliases)), "--ssh-config", str(ssh_config), "--format", "json"]
    base = [sys.executable, "-m", "envdoctor"]
    return {"check": [*base, "check", "plain", *config, *job_args(root)],
            "check, same = true": [*base, "check", "job", *config, *job_args(root)],
            "diff": [*base, "diff", "job", *config, *job_args(root)]}


def host_cost(root: Path) -> dict[str, float]:
    """Seconds the digests section takes on this machine for the job: cold, then from its cache."""
    from envdoctor.operations.gather import build_request
    from envdoctor.probe.program import build_program, encode_stdin, probe_command, venv_pythons

    request = build_request(job_spec(root), ["digests"])
    stdin = encode_stdin({"sections": request}, build_program(request))
    home = root / "host-home"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir()
    found = {}
    for run in ("cold", "warm"):
        begin = time.monotonic()
        out = subprocess.run(probe_command(venv_pythons(sys.prefix)), input=stdin, capture_output=True, check=True,
                             env={**os.environ, "HOME": str(home)}, timeout=600).stdout
        found[run] = time.monotonic() - begin
        data = next(json.loads(line) for line in out.splitlines() if b'"section": "digests"' in line)["data"]
        found[f"{run}_files"] = sum(d["files"] for d in data["distributions"])
    return found
