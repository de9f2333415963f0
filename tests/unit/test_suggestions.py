""""Did you mean" by edit distance, one ranking for check ids, patch ids and host aliases: the
helper itself, then each place a user types a name, through the CLI in this process."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from envdoctor.cli.main import cli
from envdoctor.errors import ConfigError
from envdoctor.inventory import load_inventory, resolve_hosts
from envdoctor.suggestions import closest, did_you_mean, edit_distance


@pytest.mark.parametrize(("a", "b", "distance"), [
    ("", "", 0), ("ct20", "ct200", 1), ("kitten", "sitting", 3), ("model.mask_token", "model.mask-token", 1),
    ("bastoin", "bastion", 2), ("abc", "", 3),
])
def test_edit_distance_is_levenshtein(a: str, b: str, distance: int) -> None:
    """Insertions, deletions and substitutions, each counting one, either way round."""
    assert edit_distance(a, b) == distance == edit_distance(b, a)


def test_ranking_is_distance_then_prefix_then_natural_order() -> None:
    """`ct20`: ct200 before ct202 (natural order), both before ct21 (which `ct20` does not
    start), and ct2000 (two edits) not at all beside names one edit away."""
    assert closest("ct20", ["ct21", "ct2000", "ct202", "ct200"]) == ["ct200", "ct202", "ct21"]
    assert closest("ct9", ["ct10", "ct90", "ct9a"]) == ["ct9a", "ct90"]  # 9 before 90; ct10 is two edits away
    assert closest("gpu-node10", ["gpu-node100", "gpu-node9"], limit=1) == ["gpu-node100"]


def test_nothing_is_suggested_when_nothing_is_close() -> None:
    """A name far from every candidate, or a very short one, gets no suggestion (not noise)."""
    assert did_you_mean("zzz", ["ct200", "b300"]) == ""
    assert did_you_mean("a", ["b", "c"]) == ""
    assert did_you_mean("ct200", ["ct200"]) == ""  # (the name itself is not a suggestion)


def test_case_is_ignored_when_ranking() -> None:
    """`CT200` is one of the names, written in capitals."""
    assert did_you_mean("CT200", ["ct200", "ct300"]) == " (did you mean 'ct200'?)"


def run(*args: str) -> str:
    """A command that must be refused as a usage error (exit 2); its whole output."""
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return result.output


@pytest.mark.parametrize("option", ["--skip", "--only"])
def test_a_mistyped_check_id_on_the_command_line_gets_the_nearest(option: str, monkeypatch, tmp_path: Path) -> None:
    """`--skip model.mask_token` and `--only model.mask_token`: did you mean 'model.mask-token'."""
    monkeypatch.chdir(tmp_path)  # (no envdoctor.toml of the checkout's)
    output = run("check", "local", option, "model.mask_token")
    assert "no check named 'model.mask_token'" in output
    assert "(did you mean 'model.mask-token'?)" in output


def test_a_mistyped_check_id_in_a_skip_list_of_the_inventory_gets_the_nearest(tmp_path: Path) -> None:
    """skip = [...] in envdoctor.toml names its place and the nearest check id."""
    config = tmp_path / "envdoctor.toml"
    config.write_text('[hosts.ct200]\nssh = "root@10.0.0.5"\nskip = ["packages.requird"]\n')
    output = run("check", "ct200", "--config", str(config))
    assert "hosts.ct200.skip: no check named 'packages.requird' to waive" in output
    assert "(did you mean 'packages.required'?)" in output


@pytest.mark.parametrize("command", [["patches", "show"], ["revert", "local"]])
def test_a_mistyped_patch_id_gets_the_nearest(command: list[str], monkeypatch, tmp_path: Path) -> None:
    """`patches show` and `revert` with a patch id one letter off name the patch meant."""
    monkeypatch.chdir(tmp_path)
    output = run(*command, "speculators-tokenizer-trust-remote-cod")
    assert "no patch named 'speculators-tokenizer-trust-remote-cod'" in output
    assert "(did you mean 'speculators-tokenizer-trust-remote-code'?)" in output


def test_a_mistyped_alias_suggests_by_distance_then_prefix_then_natural_order(tmp_path: Path) -> None:
    """`ct20` among SSH config aliases ct202, ct200 and ct21: ct200 first, then ct202, then ct21."""
    config = tmp_path / "ssh_config"
    config.write_text("Host ct202\n  HostName 10.0.0.2\nHost ct21\n  HostName 10.0.0.3\nHost ct200\n"
                      "  HostName 10.0.0.1\n")
    with pytest.raises(ConfigError) as caught:
        resolve_hosts(["ct20"], load_inventory(None), ssh_config_files=[str(config)])
    assert str(caught.value).endswith("(did you mean 'ct200', 'ct202' or 'ct21'?)"), str(caught.value)


def test_inventory_hosts_and_groups_are_suggested_too(tmp_path: Path) -> None:
    """A name one letter off an inventory group is suggested like an alias."""
    (tmp_path / "envdoctor.toml").write_text('[hosts.node1]\nssh = "root@10.0.0.5"\n[groups]\ntrainers = ["node1"]\n')
    config = tmp_path / "ssh_config"
    config.write_text("")
    with pytest.raises(ConfigError, match=r"did you mean 'trainers'\?"):
        resolve_hosts(["trainer"], load_inventory(tmp_path / "envdoctor.toml"), ssh_config_files=[str(config)])
