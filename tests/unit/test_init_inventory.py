"""envdoctor init's pure parts: which environment, models and GPU count a host's table gets,
the TOML it renders, and how that table goes into an existing file (nothing else changes)."""

from __future__ import annotations

import os
import stat
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from envdoctor.cli.main import cli
from envdoctor.engine.facts import HostFacts
from envdoctor.errors import ConfigError
from envdoctor.inventory import HostSpec, load_inventory
from envdoctor.operations.init import HostEntry, entry_from_facts
from envdoctor.probe.program import ProbeOutput
from envdoctor.report.init_toml import TableOptions, defined_elsewhere, host_table, splice
from tests.unit.fakes import dist, env, facts

SPEC = HostSpec("ct200", None)
KIMI = {"path": "/root/models/Kimi-K2.6", "source": "~/models", "model_type": "kimi_k25", "auto_map": True,
        "tokenizer_files": ["tiktoken.model", "tokenizer_config.json"], "weight_files": 0}


def host_facts(*envs, default=None, smi: str | None = None, gpus: tuple[str, ...] = (), models=(KIMI,),
               search_error: str | None = None) -> HostFacts:
    probe = ProbeOutput(sections={"model-search": {"models": list(models), "searched": ["/root/models"],
                                                    "visited": 12, "truncated": ""}},
                        errors={"model-search": search_error} if search_error else {})
    return replace(facts(*envs, default=default), probe=probe, configured_envs=(), nvidia_smi=smi, gpus=gpus)


def sglang() -> object:
    return env("/root/venv_sglang211", dist("transformers", "4.57.1"), dist("sglang", "0.5.2"))


def test_the_environment_with_the_stack_is_chosen_and_the_others_are_named():
    """The venv with transformers and sglang ranks first; one with less, and one with none, are the others."""
    other = env("/root/venv_old", dist("transformers", "4.46.0"))
    bare = env("/root/venv_empty")
    entry = entry_from_facts(SPEC, host_facts(bare, other, sglang()))
    assert entry.choice.env.prefix == "/root/venv_sglang211"
    assert [c.env.prefix for c in entry.others] == ["/root/venv_old"]
    assert entry.unranked == ("/root/venv_empty",)
    assert [m.path for m in entry.models] == ["/root/models/Kimi-K2.6"]


def test_require_decides_between_environments():
    """--require tiktoken: the venv that has it ranks above one with more of the stack."""
    with_tiktoken = env("/root/venv_tok", dist("tiktoken", "0.9.0"), dist("transformers", "4.57.1"))
    spec = replace(SPEC, requires=("tiktoken",))
    assert entry_from_facts(SPEC, host_facts(sglang(), with_tiktoken)).choice.env.prefix == "/root/venv_sglang211"
    assert entry_from_facts(spec, host_facts(sglang(), with_tiktoken)).choice.env.prefix == "/root/venv_tok"


def test_another_users_environment_is_named_but_never_chosen():
    """A foreign venv with the whole stack is a comment; nothing is chosen when it is the only one."""
    foreign = replace(sglang(), foreign=True)
    entry = entry_from_facts(SPEC, host_facts(foreign))
    assert entry.choice is None and entry.others[0].env.foreign


@pytest.mark.parametrize("smi, gpus, count", [
    (None, (), 0),
    ("/usr/bin/nvidia-smi", ("GPU 0: NVIDIA H100 (UUID: a)", "GPU 1: NVIDIA H100 (UUID: b)"), 2),
    ("/usr/bin/nvidia-smi", (), None),
])
def test_gpus_are_counted_zero_without_a_driver_and_left_out_when_nvidia_smi_fails(smi, gpus, count):
    """No nvidia-smi: gpus = 0 (a CPU-only host's gate can pass); nvidia-smi listing none: no gpus key."""
    entry = entry_from_facts(SPEC, host_facts(sglang(), smi=smi, gpus=gpus))
    assert entry.gpus == count
    table = tomllib.loads(host_table(entry))["hosts"]["ct200"]
    assert table.get("gpus") == count


def render(entry: HostEntry, **options) -> dict:
    return tomllib.loads(host_table(entry, TableOptions(**options)))["hosts"]["ct200"]


def test_the_table_says_venv_models_gpus_and_consent_only_when_given():
    """The rendered table parses to venv, models, gpus; trust_remote_code only with the flag (else a comment)."""
    entry = entry_from_facts(SPEC, host_facts(sglang()))
    text = host_table(entry)
    assert render(entry) == {"venv": "/root/venv_sglang211", "models": ["/root/models/Kimi-K2.6"], "gpus": 0}
    assert "# trust_remote_code = true" in text and "the models' own code may run" in text
    assert render(entry, trust_remote_code=True, requires=("tiktoken",))["trust_remote_code"] is True
    assert render(entry, requires=("tiktoken",))["requires"] == ["tiktoken"]


def test_text_from_the_host_cannot_break_out_of_a_comment_or_a_string():
    """A model_type with a newline and a path with quotes stay a comment and a string."""
    hostile = {**KIMI, "path": '/m/a"b\\c', "model_type": "x\n[hosts.evil]\nvenv = \"/tmp\""}
    entry = entry_from_facts(SPEC, host_facts(sglang(), models=(hostile,)))
    data = tomllib.loads(host_table(entry))
    assert list(data["hosts"]) == ["ct200"] and data["hosts"]["ct200"]["models"] == ['/m/a"b\\c']


EXISTING = """\
# the fleet of the team: do not remove this line
[hosts.b300]
venv = "/root/venv_dflash"   # b300's own note
gpus = 8

# the data stage
[stages.gen]
host = "b300"
command = "{python} -m sglang.launch_server --model-path {model}"
"""


def test_a_new_host_goes_after_the_last_host_table_and_nothing_else_changes():
    """Every line of the old file stays (comments included); the new table follows b300's."""
    table = host_table(entry_from_facts(SPEC, host_facts(sglang())))
    new = splice(EXISTING, {"ct200": table})
    assert new.startswith(EXISTING.split("\n# the data stage")[0])
    assert new.endswith("# the data stage\n" + EXISTING.split("# the data stage\n")[1])
    assert all(line in new.splitlines() for line in EXISTING.splitlines())
    data = tomllib.loads(new)
    assert set(data["hosts"]) == {"b300", "ct200"} and data["stages"]["gen"]["host"] == "b300"


def test_force_replaces_only_the_hosts_own_text():
    """Replacing b300: its old keys and note go, the comment above it and the stage's comment stay."""
    entry = entry_from_facts(HostSpec("b300", None), host_facts(sglang()))
    new = splice(EXISTING, {"b300": host_table(entry)})
    assert "# the fleet of the team: do not remove this line" in new and "# the data stage" in new
    assert "b300's own note" not in new and "/root/venv_dflash" not in new
    assert tomllib.loads(new)["hosts"]["b300"]["venv"] == "/root/venv_sglang211"
    again = splice(new, {"b300": host_table(entry)})
    assert again == new, "init --force twice writes the same file"


def test_an_empty_file_gets_the_table_alone():
    """No file yet: the inventory is the table."""
    table = host_table(entry_from_facts(SPEC, host_facts(sglang())))
    assert splice("", {"ct200": table}) == table


def test_a_host_written_as_an_inline_table_is_not_edited_by_lines():
    """hosts.ct200 as an inline table or dotted keys: init says it cannot replace it, writes nothing."""
    inline = '[hosts]\nct200 = { venv = "/old" }\n'
    assert defined_elsewhere(inline, "ct200") and not defined_elsewhere(EXISTING, "b300")
    with pytest.raises(ConfigError, match="line by line"):
        splice(inline, {"ct200": host_table(entry_from_facts(SPEC, host_facts(sglang())))})


def test_init_keeps_an_existing_entry_without_force(tmp_path: Path, monkeypatch):
    """init of a host the inventory has: kept, exit 0, the file byte for byte as it was, no probe run."""
    monkeypatch.chdir(tmp_path)
    os.chmod(tmp_path, 0o755)
    path = tmp_path / "envdoctor.toml"
    path.write_text('# mine\n[hosts.local]\nvenv = "/opt/v"\n')
    os.chmod(path, 0o600)
    result = CliRunner().invoke(cli, ["init", "local"])
    assert result.exit_code == 0, result.output
    assert "kept" in result.output and "--force replaces it" in result.output
    assert path.read_text() == '# mine\n[hosts.local]\nvenv = "/opt/v"\n'


def test_init_refuses_a_folder_where_envdoctor_would_refuse_the_file(tmp_path: Path):
    """--config in a folder others can write (not sticky): exit 2 before any host is probed."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    result = CliRunner().invoke(cli, ["init", "local", "--config", str(shared / "envdoctor.toml")])
    assert result.exit_code == 2
    assert "would refuse an inventory written at" in result.output and "writable by other users" in result.output
    assert not (shared / "envdoctor.toml").exists()


def test_init_refuses_to_extend_a_file_it_cannot_read(tmp_path: Path):
    """An existing inventory that is not valid TOML is exit 2, and left as it was."""
    os.chmod(tmp_path, 0o755)
    path = tmp_path / "envdoctor.toml"
    path.write_text("[hosts.ct200\n")
    os.chmod(path, 0o644)
    result = CliRunner().invoke(cli, ["init", "local", "--config", str(path)])
    assert result.exit_code == 2 and "is not valid TOML" in result.output
    assert path.read_text() == "[hosts.ct200\n"


def test_the_written_file_has_a_mode_config_trust_accepts(tmp_path: Path):
    """write_inventory: the old mode without group/other write, and load_inventory reads the result."""
    from envdoctor.cli.inventory_file import open_inventory, write_inventory

    os.chmod(tmp_path, 0o755)
    path = tmp_path / "envdoctor.toml"
    path.write_text(EXISTING)
    os.chmod(path, 0o664)
    with pytest.raises(ConfigError, match="writable by other users"):
        open_inventory(path, writing=True)  # as envdoctor would refuse to read it
    os.chmod(path, 0o640)
    target = open_inventory(path, writing=True)
    write_inventory(target, splice(target.text, {"ct200": host_table(entry_from_facts(SPEC, host_facts(sglang())))}))
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert set(load_inventory(path).hosts) == {"b300", "ct200"}
    assert [p.name for p in tmp_path.iterdir()] == ["envdoctor.toml"], "no temp file left behind"
