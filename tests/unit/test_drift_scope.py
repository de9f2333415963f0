"""code.api-drift scoped to what the host's stages run: the request, and the check's wording."""

from __future__ import annotations

from pathlib import Path

from envdoctor.checks.drift import scope_of

from envdoctor.drift.request import stage_scope
from envdoctor.operations.gather import build_request
from envdoctor.inventory import load_inventory

INVENTORY = """
[hosts.node]
venv = "/root/venv"

[hosts.other]
venv = "/root/venv"

[hosts.serve]
venv = "/root/venv"

[stages.gen]
host = "node"
command = "{python} -m speculators.data_generation --model {model}"

[stages.train]
host = "node"
command = "{python} /root/jobs/train.py --epochs 3"

[stages.again]
host = "node"
command = "{python} -m speculators.data_generation --resume"

[stages.serve]
host = "serve"
command = "{venv}/bin/vllm serve {model}"

[stages.anywhere]
command = "{python} -m speculators.convert"
"""


def drift_entry(tmp_path: Path, host: str) -> object:
    path = tmp_path / "envdoctor.toml"
    path.write_text(INVENTORY, encoding="utf-8")
    path.chmod(0o600)
    return build_request(load_inventory(path).hosts[host], ["drift"])["drift"]["entry"]


def test_a_hosts_stages_scope_the_drift_request_to_the_union_of_their_entries(tmp_path: Path) -> None:
    """Stages bound to the host give their -m modules and scripts, each once; a stage of no host scopes nothing."""
    assert drift_entry(tmp_path, "node") == ["speculators.data_generation", "/root/jobs/train.py"]
    assert drift_entry(tmp_path, "other") is None


def test_a_stage_without_an_entry_leaves_the_check_unscoped(tmp_path: Path) -> None:
    """`vllm serve` names no -m module or script: nothing is scoped, and the scope says why."""
    assert drift_entry(tmp_path, "serve") is None
    scope = stage_scope(["{python} -m speculators.train", "{venv}/bin/vllm serve {model}"])
    assert scope.entries == () and "vllm serve" in scope.unscoped
    assert stage_scope(["{python} -m a.b", "{python} x.py", "{python} -m a.b"]).entries == ("a.b", "x.py")


def test_the_check_says_which_entry_scoped_it_or_why_none_did() -> None:
    """The message clause names the entries and file count, an entry the host lacks, or an entry-less stage."""
    details, note = scope_of({"entry": ["speculators.config"], "scoped_files": ["a.py", "b.py"]}, ["-m speculators.config"])
    assert details == {"entries": ["speculators.config"], "files": 2}
    assert note == " (scoped to the host's stage entry speculators.config, 2 consumer file(s))"
    details, note = scope_of({"entry": ["torch.distributed.run"], "entries_unfound": ["torch.distributed.run"],
                              "scoped_files": None}, ["{python} -m torch.distributed.run train.py"])
    assert details["entries"] is None and "torch.distributed.run is neither a module" in note
    assert "every file checked" in note
    details, note = scope_of({"entry": None}, ["{venv}/bin/vllm serve {model}"])
    assert "not scoped" in note and "vllm serve" in details["unscoped"]
    assert scope_of({"entry": None}, []) == ({"entries": None}, "")
