"""Hosts compared item by item (pure logic): the majority and who differs, what a missing item
means, what is never a difference, the items built from a probe answer, the reports, and the
fleet.same result check adds for a same = true group."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from envdoctor.compare.have import Have, build_have
from envdoctor.compare.majority import compare
from envdoctor.engine.facts import HostFacts
from envdoctor.engine.results import Status
from envdoctor.errors import UsageError
from envdoctor.inventory import HostSpec
from envdoctor.operations.compare import HostHave, add_same_results, compare_hosts
from envdoctor.operations.fleet import FleetReport, HostReport
from envdoctor.probe.program import ProbeOutput
from envdoctor.report.diff_report import diff_reports, render_json, render_junit, render_text

BASE = {"python": "CPython 3.11.7", "dist:torch": "2.9.1", "torch": "2.9.1", "env:NCCL_IB_HCA": "mlx5_0"}
KNOWN = frozenset({"dist", "env", "patch"})


def have(**changes: str | None) -> Have:
    items = {**BASE, **{k.replace("__", ":").replace("_DOT_", "."): v for k, v in changes.items()}}
    return Have({k: v for k, v in items.items()}, known=KNOWN)


def test_the_majority_stands_and_the_host_that_differs_is_named():
    """Three hosts with torch 2.9.1 and one with 2.8.0: the item names the majority, its hosts
    and the one that differs with its value."""
    found = compare([("n1", have()), ("n2", have()), ("n3", have(torch="2.8.0")), ("n4", have())])
    assert [d.key for d in found.differences] == ["torch"]
    torch = found.differences[0]
    assert torch.majority == "2.9.1" and torch.holders == ("n1", "n2", "n4")
    assert [(o.host, o.value) for o in torch.others] == [("n3", "2.8.0")] and not torch.tie
    assert not found.ok and found.differs_on("n3") == [torch] and found.differs_on("n1") == []


def test_identical_hosts_report_nothing():
    """Hosts with the same items: no difference, the run is fine, every item was compared."""
    found = compare([(f"n{i}", have()) for i in range(5)])
    assert found.ok and found.differences == () and found.compared == len(BASE)


def test_what_a_missing_item_means_depends_on_what_the_host_could_list():
    """A distribution one host lacks is 'absent' there and a variable it lacks '(unset)'; from a
    host whose variables could not be read, a missing variable is unknown, never a difference."""
    lacking = Have({k: v for k, v in BASE.items() if k not in ("dist:torch", "env:NCCL_IB_HCA")}, known=KNOWN)
    found = compare([("n1", have()), ("n2", have()), ("n3", lacking)])
    assert {d.key: [(o.host, o.value) for o in d.others] for d in found.differences} == {
        "dist:torch": [("n3", "absent")], "env:NCCL_IB_HCA": [("n3", "(unset)")]}
    blind = Have({k: v for k, v in BASE.items() if k != "env:NCCL_IB_HCA"}, known=frozenset({"dist"}))
    found = compare([("n1", have()), ("n2", blind)])
    assert found.ok and "env:NCCL_IB_HCA" in found.unknown


def test_unknown_values_are_never_differences():
    """A digest a host could not compute (its budget ran out) is unknown there, not a difference."""
    found = compare([("n1", have(files__torch="abc")), ("n2", have(files__torch=None)), ("n3", have(files__torch="abc"))])
    assert found.ok and found.unknown == {"files:torch": ("n2",)}


def test_a_tie_keeps_the_first_hosts_value_and_says_so():
    """Two hosts, two values: the first host's value stands, the tie is said."""
    found = compare([("a", have(torch="2.9.1")), ("b", have(torch="2.8.0"))])
    torch = found.differences[0]
    assert torch.tie and torch.majority == "2.9.1" and torch.others[0].host == "b"


def test_ignored_items_are_reported_but_do_not_fail():
    """--ignore 'env:*' keeps the difference in the report, marked, and the comparison passes."""
    found = compare([("n1", have()), ("n2", have(env__NCCL_IB_HCA="mlx5_1")), ("n3", have())], ignore=["env:*"])
    assert found.ok and found.differences[0].ignored


def probe(**sections) -> HostFacts:
    return HostFacts.from_probe(ProbeOutput(sections=sections))


def venvs(prefix: str, dists: list[tuple[str, str]]) -> dict:
    env = {"prefix": prefix, "python": f"{prefix}/bin/python", "exists": True, "runs": True, "version": "3.11.7",
           "executable": f"{prefix}/bin/python", "base_prefix": "/usr",
           "markers": {"platform_python_implementation": "CPython", "python_full_version": "3.11.7"},
           "distributions": [{"name": n, "version": v, "requires": [], "path": f"{prefix}/x/{n}.dist-info",
                              "site": f"{prefix}/x"} for n, v in dists]}
    return {"configured": [prefix], "discovered": [], "envs": [env], "default": None}


def ledger(prefix: str, sha_now: str) -> dict:
    file = f"{prefix}/lib/python3.11/site-packages/speculators/data.py"
    line = json.dumps({"op": "apply", "phase": "done", "patch": "speculators-tokenizer-trust-remote-code",
                       "file": file, "distribution": "speculators", "version": "0.3.0", "sha256_after": "bb"})
    return {"prefix": prefix, "path": f"{prefix}/.envdoctor/ledger.jsonl", "exists": True, "lines": [line],
            "files": {file: {"exists": True, "sha256": sha_now}}}


def test_items_come_from_the_probe_answer_without_the_paths_that_differ_by_design():
    """The venv's and the model folder's paths are details, not values: two hosts with their
    environments and models in other places, holding the same, have the same items."""
    def facts(prefix: str, model: str, nccl_var: str) -> HostFacts:
        return probe(
            venvs=venvs(prefix, [("torch", "2.9.1"), ("nvidia-nccl-cu12", "2.27.3")]),
            **{"patch-ledger": ledger(prefix, "bb"),
               "gpu-stack": {"driver": {"kernel": {"version": "580.95.05", "source": "/sys/module/nvidia/version"}},
                             "smi": {"gpus": [{"name": "NVIDIA H100", "compute_cap": "9.0"}] * 8},
                             "torch": {"version": "2.9.1+cu128", "cuda": "12.8"}},
               "system": {"environment": {"vars": {"NCCL_IB_HCA": nccl_var, "LD_PRELOAD": "x", "PATH_X": "y"},
                                          "masked": []}},
               "digests": {"prefix": prefix, "distributions": [{"name": "torch", "version": "2.9.1", "digest": "f" * 64}],
                           "models": [{"path": model, "files": {"config.json": {"kind": "config", "size": 10,
                                                                                "hash": "sha256:" + "a" * 64}}}]}})

    one = build_have(HostSpec("n1", None, venv="/root/venv_a"), facts("/root/venv_a", "/m/Kimi-K2.6", "mlx5_0"))
    two = build_have(HostSpec("n2", None, venv="/srv/v"), facts("/srv/v", "/data/Kimi-K2.6", "mlx5_0"))
    assert one.items == two.items and one.details != two.details
    assert one.items["patch:speculators-tokenizer-trust-remote-code:lib/python3.11/site-packages/speculators/data.py"] \
        == "applied (speculators 0.3.0)"
    assert {k: one.items[k] for k in ("python", "torch", "torch.cuda", "nccl", "driver", "gpu.count", "gpu.model",
                                      "files:torch", "model:Kimi-K2.6:config.json", "env:NCCL_IB_HCA")} == {
        "python": "CPython 3.11.7", "torch": "2.9.1+cu128", "torch.cuda": "12.8",
        "nccl": "2.27.3 (nvidia-nccl-cu12)", "driver": "580.95.05", "gpu.count": "8", "gpu.model": "NVIDIA H100",
        "files:torch": "f" * 16, "model:Kimi-K2.6:config.json": "10 bytes, sha256:aaaaaaaaaaaa",
        "env:NCCL_IB_HCA": "mlx5_0"}
    assert "env:PATH_X" not in one.items and "env:LD_PRELOAD" in one.items
    three = build_have(HostSpec("n3", None, venv="/srv/v"), facts("/srv/v", "/data/Kimi-K2.6", "mlx5_1"))
    assert [d.key for d in compare([("n1", one), ("n2", two), ("n3", three)]).differences] == ["env:NCCL_IB_HCA"]


def test_a_patch_overwritten_since_shows_as_changed():
    """The ledger says applied but the file's hash is no longer the patched one: not the same state."""
    facts = probe(venvs=venvs("/v", []), **{"patch-ledger": ledger("/v", "cc")})
    items = build_have(HostSpec("n", None, venv="/v"), facts).items
    assert [v for k, v in items.items() if k.startswith("patch:")] == ["applied, file changed since"]


def diff_of(*hosts: HostHave):
    return compare_hosts(list(hosts))


def test_reports_name_the_majority_and_each_host_that_differs_in_every_format():
    """Text, JSON and JUnit say torch differs on n3 (2.8.0 against 2.9.1 on 2 of 3); an
    unreachable host is its own entry with its error; one suite per host in JUnit."""
    from envdoctor.engine.facts import Problem

    report = diff_of(HostHave(HostSpec("n1", None), have()), HostHave(HostSpec("n2", None), have()),
                     HostHave(HostSpec("n3", None), have(torch="2.8.0")),
                     HostHave(HostSpec("n4", None), None, Problem("unreachable", "connection refused")))
    assert report.exit_status == 1
    text = render_text(report)
    assert "✗ torch: 2.9.1 on 2 of 3 (n1, n2)" in text and "2.8.0 on n3" in text
    assert "n4: not compared: connection refused" in text
    data = json.loads(render_json(report))
    assert data["command"] == "diff" and data["exit_status"] == 1 and data["schema"] == 1
    assert data["differences"] == [{"item": "torch", "category": "GPU stack", "majority": "2.9.1",
                                    "hosts_with_majority": ["n1", "n2"], "of": 3,
                                    "differs": [{"host": "n3", "value": "2.8.0"}]}]
    assert {h["host"]: (h["ok"], h["differs"]) for h in data["hosts"]} == {
        "n1": (True, []), "n2": (True, []), "n3": (False, ["torch"]), "n4": (False, [])}
    suites = {s.get("name"): s for s in ET.fromstring(render_junit(report).split("\n", 1)[1])}
    assert set(suites) == {"n1", "n2", "n3", "n4"}
    assert suites["n3"].get("failures") == "1" and suites["n1"].get("failures") == "0"
    assert suites["n4"].get("errors") == "1"


def test_identical_hosts_exit_0_with_nothing_reported():
    """No difference: exit 0, the text says the hosts are the same, the JSON lists none."""
    report = diff_of(*(HostHave(HostSpec(f"n{i}", None), have()) for i in range(3)))
    assert report.exit_status == 0
    assert "the same on every host compared" in render_text(report)
    assert json.loads(render_json(report))["differences"] == []


def snapshot_file(path: Path, host: str, value: Have | None) -> Path:
    entry: dict = {"host": host, "results": []}
    if value is not None:
        entry["have"] = value.to_json()
    path.write_text(json.dumps({"schema": 1, "command": "snapshot", "exit_status": 0, "hosts": [entry]}))
    return path


def test_per_node_reports_are_compared_as_hosts_are(tmp_path):
    """Reports of host `local` are named after their files; what differs is attributed to the file's node."""
    paths = [snapshot_file(tmp_path / f"node{i}.json", "local", have(torch="2.8.0" if i == 2 else "2.9.1"))
             for i in range(1, 4)]
    report = diff_reports(paths)
    assert [(d.key, [o.host for o in d.others]) for d in report.comparison.differences] == [("torch", ["node2"])]
    assert json.loads(render_json(report))["hosts"][0]["destination"] == str(paths[0])


def test_a_report_without_what_its_host_has_is_not_compared_and_named(tmp_path):
    """check's JSON carries no `have`: that node is reported as not compared (exit 1), with a hint."""
    report = diff_reports([snapshot_file(tmp_path / "a.json", "local", have()),
                           snapshot_file(tmp_path / "b.json", "local", None)])
    assert report.exit_status == 1 and "carries no" in report.hosts[1].problem.message


def test_a_node_in_two_reports_is_a_usage_error(tmp_path):
    """The same host named by two reports is exit 2, as for merge."""
    with pytest.raises(UsageError, match="is in both"):
        diff_reports([snapshot_file(tmp_path / "a.json", "n1", have()), snapshot_file(tmp_path / "b.json", "n1", have())])


def test_same_groups_add_a_fleet_same_result_to_each_of_their_hosts():
    """check of a same = true group: fleet.same passes on the hosts with the majority and fails on
    the one that differs, naming the item and the majority."""
    hosts = [HostReport(HostSpec(name, None), [], have=have(torch="2.8.0" if name == "n2" else "2.9.1"))
             for name in ("n1", "n2", "n3")]
    add_same_results(FleetReport("check", hosts), {"train": ("n1", "n2", "n3")})
    results = {h.spec.name: h.results[-1] for h in hosts}
    assert {n: r.status for n, r in results.items()} == {"n1": Status.PASS, "n2": Status.FAIL, "n3": Status.PASS}
    assert results["n2"].id == "fleet.same"
    assert "torch is 2.8.0 (majority 2.9.1 on 2 of 3)" in results["n2"].message


def test_a_model_folder_of_another_name_is_absent_on_the_other_hosts():
    """Hosts whose --model folders have other names do not compare as the same: each folder is
    absent where it is not; a file of a folder a host has but lacks is absent there (n1 against
    n2 is a tie, n3 has no such folder: unknown)."""
    def with_model(label: str, files: dict[str, str]) -> Have:
        items = {**BASE, f"model:{label}": "present", **{f"model:{label}:{k}": v for k, v in files.items()}}
        return Have(items, models=frozenset({label}), known=KNOWN | {"model"})

    found = compare([("n1", with_model("Kimi-K2.6", {"config.json": "1"})),
                     ("n2", with_model("Kimi-K2.6", {"config.json": "1", "extra.json": "2"})),
                     ("n3", with_model("Qwen3", {"config.json": "1"}))])
    assert {d.key: [(o.host, o.value) for o in d.others] for d in found.differences} == {
        "model:Kimi-K2.6": [("n3", "absent")], "model:Qwen3": [("n3", "present")],
        "model:Kimi-K2.6:extra.json": [("n2", "2")]}
    extra = next(d for d in found.differences if d.key == "model:Kimi-K2.6:extra.json")
    assert extra.tie and extra.majority == "absent" and extra.unknown == ("n3",)
