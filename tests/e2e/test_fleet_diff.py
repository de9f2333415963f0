"""`envdoctor diff`, `check` of a same = true group and `snapshot` over a loopback fleet.

Six real sshd "homes" on 127.0.0.1, each a machine of its own (its HOME, its PATH with an
nvidia-smi answering for its GPUs, its driver root, its NCCL and HF variables, set by sshd's
SetEnv), and sixteen aliases: three reference nodes and thirteen that each differ from them in
one way (a distribution's version, a local edit, the patch ledger, the interpreter, torch and
its CUDA build, NCCL, the driver, the GPU model, the GPU count, a tokenizer file, a weights
shard, an NCCL variable, the HF token). Each node has its own copy of the job's venv (real
packages from PyPI) and of the model folder, at its own path. Every difference must be found
and attributed to its node, and nothing reported between identical nodes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from envdoctor.patching.ledger import LedgerEntry
from tests.conftest import make_venv
from tests.fleet_layouts import fake_driver_root, fake_smi, fake_torch, metadata_only_distribution
from tests.sshd import SSHServer, find_sshd, start_sshd

pytestmark = pytest.mark.e2e

PACKAGES = ["six==1.16.0", "packaging==24.1"]
H100, H200 = ("NVIDIA H100 80GB HBM3", "9.0"), ("NVIDIA H200", "9.0")
TOKEN, OTHER_TOKEN = "hf_" + "Q" * 34, "hf_" + "R" * 34
MODEL = "Kimi-K2.6"
SHARD = "model-00001-of-00002.safetensors"
REFERENCE = ("n1", "n2", "n3")
LEDGER_FILE = "packaging/_structures.py"
PATCH_ITEM = f"patch:speculators-tokenizer-trust-remote-code:lib/python3.11/site-packages/{LEDGER_FILE}"
#: Node -> the items where it, and only it, differs from the others.
VARIANTS = {
    "n-version": {"dist:packaging"},
    "n-edit": {"files:six"},
    "n-ledger": {PATCH_ITEM},
    "n-python": {"python"},
    "n-torch": {"torch", "torch.cuda"},
    "n-nccl": {"nccl", "dist:nvidia-nccl-cu12"},
    "n-driver": {"driver"},
    "n-gpu-model": {"gpu.model"},
    "n-gpu-count": {"gpu.count"},
    "n-tokenizer": {f"model:{MODEL}:tokenizer_config.json"},
    "n-weights": {f"model:{MODEL}:{SHARD}"},
    "n-nccl-var": {"env:NCCL_IB_HCA"},
    "n-token": {"env:HF_TOKEN"},
}
#: Which sshd home serves each node (the default: "base").
HOMES = {"n-driver": "driver", "n-gpu-model": "gpu-model", "n-gpu-count": "gpu-count", "n-nccl-var": "nccl-var",
         "n-token": "token"}


@dataclass
class Fleet:
    root: Path
    config: Path
    ssh_config: Path
    homes: dict[str, Path]
    venvs: dict[str, Path]

    def cli(self, run_cli, *args: str):
        return run_cli(*args, "--config", str(self.config), "--ssh-config", str(self.ssh_config), cwd=self.root)


def other_interpreter() -> str | None:
    """A CPython on this machine other than the tests' own (another version or build)."""
    candidates = ["/usr/bin/python3.11", "/usr/bin/python3", *sorted(Path("/root/.pyenv/versions").glob("3.1*/bin/python3"))]
    own = sys.version.split()[0]
    for candidate in map(str, candidates):
        if not os.path.exists(candidate):
            continue
        found = subprocess.run([candidate, "-c", "import sys, venv; print(sys.version.split()[0])"],
                               capture_output=True, text=True, check=False)
        if found.returncode == 0 and found.stdout.strip() != own:
            return candidate
    return None


def start_home(root: Path, name: str, *, driver: str = "580.95.05", gpus: list[tuple[str, str]] = [H100] * 8,
               nccl: str = "mlx5_0", token: str = TOKEN, client_key: Path | None = None) -> SSHServer:
    """An sshd standing for one machine: its own HOME, PATH (with its nvidia-smi), driver root and variables."""
    home = root / name
    (home / "home").mkdir(parents=True)
    fake_smi(home / "bin", gpus, driver)
    driver_root = fake_driver_root(home / "sysroot", driver)
    setenv = (f"SetEnv HOME={home / 'home'} PATH={home / 'bin'}:/usr/bin:/bin ENVDOCTOR_SYSFS_ROOT={driver_root} "
              f"NCCL_IB_HCA={nccl} HF_TOKEN={token}")
    return start_sshd(home / "sshd", [], client_key=client_key, extra_config=[setenv])


def site(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def write_ledger(venv: Path) -> None:
    """A patch of envdoctor's recorded in the venv's ledger, in the ledger's own format."""
    target = site(venv) / LEDGER_FILE
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    state = venv / ".envdoctor"
    state.mkdir(mode=0o700)
    lines = [LedgerEntry(op="apply", phase=phase, patch="speculators-tokenizer-trust-remote-code", file=str(target),
                         distribution="packaging", version="24.1", sha256_before=digest, sha256_after=digest,
                         backup=str(state / "backups" / "x"), time="2026-01-01T00:00:00Z", envdoctor="0.1.0").to_json()
             for phase in ("intent", "done")]
    (state / "ledger.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def job_venv(base: Path, target: Path, node: str) -> Path:
    """The node's copy of the job's venv, changed in the node's one way."""
    if node == "n-python":
        python = other_interpreter()
        if python is None:
            return Path()
        subprocess.run([python, "-m", "venv", "--without-pip", str(target)], check=True)
        subprocess.run([sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), "install", "-q",
                        *PACKAGES], check=True)
    else:
        shutil.copytree(base, target, symlinks=True)
    fake_torch(target, "2.8.0+cu126" if node == "n-torch" else "2.9.1+cu128", "12.6" if node == "n-torch" else "12.8")
    metadata_only_distribution(target, "nvidia-nccl-cu12", "2.26.2" if node == "n-nccl" else "2.27.3")
    if node == "n-version":
        subprocess.run([str(target / "bin" / "python"), "-m", "pip", "install", "-q", "packaging==24.2"], check=True)
    elif node == "n-edit":
        with open(site(target) / "six.py", "a") as handle:
            handle.write("# edited on this node\n")
    elif node == "n-ledger":
        write_ledger(target)
    return target


def model_copy(base: Path, target: Path, node: str) -> Path:
    shutil.copytree(base, target)
    if node == "n-tokenizer":
        (target / "tokenizer_config.json").write_text('{"auto_map": {}, "model_max_length": 4096}')
    elif node == "n-weights":
        data = bytearray((target / SHARD).read_bytes())
        data[100] ^= 0xFF  # same size, one byte inside the first sample
        (target / SHARD).write_bytes(bytes(data))
    return target


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    if find_sshd() is None:
        pytest.fail("openssh-server is not installed; .ci/run installs it (apt-get install openssh-server)")
    root = tmp_path_factory.mktemp("fleet")
    base_venv = make_venv(root / "base-venv", PACKAGES)
    base_model = root / "base-model" / MODEL
    base_model.mkdir(parents=True)
    (base_model / "config.json").write_text('{"model_type": "kimi_k25", "text_config": {"hidden_size": 7168}}')
    (base_model / "tokenizer_config.json").write_text('{"auto_map": {}}')
    (base_model / "tiktoken.model").write_bytes(b"IQ== 0\nIg== 1\n")
    for shard in (SHARD, "model-00002-of-00002.safetensors"):
        (base_model / shard).write_bytes(hashlib.sha256(shard.encode()).digest() * 8192)  # 256 KiB each
    servers: dict[str, SSHServer] = {}
    try:
        servers["base"] = start_home(root, "base")
        key = servers["base"].client_key
        servers["driver"] = start_home(root, "driver", driver="570.86.15", client_key=key)
        servers["gpu-model"] = start_home(root, "gpu-model", gpus=[H200] * 8, client_key=key)
        servers["gpu-count"] = start_home(root, "gpu-count", gpus=[H100] * 7, client_key=key)
        servers["nccl-var"] = start_home(root, "nccl-var", nccl="mlx5_1", client_key=key)
        servers["token"] = start_home(root, "token", token=OTHER_TOKEN, client_key=key)
        nodes = [*REFERENCE, *VARIANTS]
        blocks, hosts, venvs = [], [], {}
        for node in nodes:
            server = servers[HOMES.get(node, "base")]
            blocks.append(server.write_alias_config([node], path=root / f"ssh-{node}").read_text())
            venv = job_venv(base_venv, root / "nodes" / node / "venv", node)
            if venv == Path():
                continue  # no second interpreter on this machine: that way is not tried
            venvs[node] = venv
            model = model_copy(base_model, root / "nodes" / node / "models" / MODEL, node)
            hosts.append(f'[hosts.{json.dumps(node)}]\nssh = "{node}"\nvenv = "{venv}"\nmodels = ["{model}"]\n'
                         'requires = ["six"]\n')
        ssh_config = root / "ssh_config"
        ssh_config.write_text("\n".join(blocks))
        names = ", ".join(json.dumps(n) for n in venvs)
        config = root / "envdoctor.toml"
        config.write_text("".join(hosts) + f'[groups]\nref = ["n1", "n2", "n3"]\n'
                          f'[groups.train]\nhosts = [{names}]\nsame = true\n')
        yield Fleet(root, config, ssh_config, {name: s.root.parent for name, s in servers.items()}, venvs)
    finally:
        for server in servers.values():
            server.stop()


def differences_by_host(data: dict) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for difference in data["differences"]:
        for other in difference["differs"]:
            found.setdefault(other["host"], set()).add(difference["item"])
    return found


@pytest.fixture(scope="module")
def diff_json(fleet, run_cli):
    result = fleet.cli(run_cli, "diff", "train", "--format", "json")
    assert result.exit_status == 1, result.stderr
    return result, json.loads(result.stdout)


def test_every_difference_is_found_and_attributed_to_its_node(fleet, diff_json):
    """Each node that differs in one way differs in exactly those items, against a majority of all
    the others; the reference nodes differ in nothing. (The node with another interpreter may
    also have another pip and setuptools: its extra differences are its own too.)"""
    _, data = diff_json
    found = differences_by_host(data)
    for node, expected in VARIANTS.items():
        if node not in fleet.venvs:
            continue
        if node == "n-python":
            assert "python" in found[node]
            assert all(k.startswith(("dist:", "python")) for k in found[node]), found[node]
        else:
            assert found.get(node) == expected, (node, found.get(node))
    assert not set(found) & set(REFERENCE)
    for difference in data["differences"]:
        assert len(difference["differs"]) == 1 and difference["of"] == len(fleet.venvs)
        assert set(REFERENCE) <= set(difference["hosts_with_majority"])
    hosts = {h["host"]: h for h in data["hosts"]}
    assert all(hosts[n]["ok"] and hosts[n]["differs"] == [] for n in REFERENCE)


def test_the_values_that_differ_are_the_nodes_own(diff_json):
    """The majority's value and the odd node's, as each node has them (paths never compared)."""
    _, data = diff_json
    items = {d["item"]: (d["majority"], d["differs"][0]["value"], d["differs"][0].get("detail", ""))
             for d in data["differences"]}
    assert items["dist:packaging"][:2] == ("24.1", "24.2")
    assert items["torch"][:2] == ("2.9.1+cu128", "2.8.0+cu126") and items["torch.cuda"][:2] == ("12.8", "12.6")
    assert items["nccl"][:2] == ("2.27.3 (nvidia-nccl-cu12)", "2.26.2 (nvidia-nccl-cu12)")
    assert items["driver"][:2] == ("580.95.05", "570.86.15")
    assert items["gpu.model"][:2] == ("NVIDIA H100 80GB HBM3", "NVIDIA H200")
    assert items["gpu.count"][:2] == ("8", "7")
    assert items["env:NCCL_IB_HCA"][:2] == ("mlx5_0", "mlx5_1")
    assert items[PATCH_ITEM][:2] == ("not applied", "applied (packaging 24.1)")
    assert "modified against RECORD: six.py" in items["files:six"][2]
    assert items[f"model:{MODEL}:{SHARD}"][0].startswith("262144 bytes, sampled:")


def test_secrets_never_leave_the_nodes(fleet, run_cli, diff_json):
    """The HF tokens differ and are reported as differing, masked: neither token is in any output."""
    result, data = diff_json
    token = next(d for d in data["differences"] if d["item"] == "env:HF_TOKEN")
    assert token["majority"].startswith("*** (fingerprint ") and token["differs"][0]["value"] != token["majority"]
    text = fleet.cli(run_cli, "diff", "train")
    junit = fleet.cli(run_cli, "diff", "train", "--format", "junit")
    for output in (result.stdout, result.stderr, text.stdout, junit.stdout):
        assert TOKEN not in output and OTHER_TOKEN not in output


def test_identical_nodes_report_nothing_and_exit_0(fleet, run_cli):
    """The three reference nodes (own venvs and model folders at their own paths): exit 0, one line."""
    result = fleet.cli(run_cli, "diff", "ref")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[1:] == ["  the same on every host compared"]
    data = json.loads(fleet.cli(run_cli, "diff", "n1", "n2", "n3", "--format", "json").stdout)
    assert data["exit_status"] == 0 and data["differences"] == [] and data["items_compared"] > 20


def test_text_and_junit_name_the_node_that_differs(fleet, run_cli):
    """The text shows each differing item with the majority and the odd node; JUnit fails the odd
    node's suite in that category and no reference node's."""
    text = fleet.cli(run_cli, "diff", "train").stdout
    assert "✗ driver: 580.95.05 on" in text and "570.86.15 on n-driver" in text
    assert "n-edit: modified against RECORD: six.py" in text
    suites = {s.get("name"): s for s in ET.fromstring(
        fleet.cli(run_cli, "diff", "train", "--format", "junit").stdout.split("\n", 1)[1])}
    assert all(suites[n].get("failures") == "0" for n in REFERENCE)
    failing = {c.get("name") for c in suites["n-gpu-count"] if c.find("failure") is not None}
    assert failing == {"GPUs"}


def test_ignored_items_do_not_fail(fleet, run_cli):
    """--ignore 'env:HF_TOKEN': the token difference is shown as ignored, exit 0."""
    result = fleet.cli(run_cli, "diff", "n1", "n2", "n-token", "--ignore", "env:HF_TOKEN")
    assert result.exit_status == 0 and "env:HF_TOKEN (ignored)" in result.stdout


def test_check_of_a_same_group_adds_fleet_same_to_each_node(fleet, run_cli):
    """check train (same = true): fleet.same passes on the reference nodes and fails on each odd
    node, naming its item; exit 1."""
    result = fleet.cli(run_cli, "check", "train", "--only", "host.python", "--format", "json")
    assert result.exit_status == 1, result.stderr
    same = {h["host"]: next(r for r in h["results"] if r["id"] == "fleet.same") for h in json.loads(result.stdout)["hosts"]}
    assert all(same[n]["status"] == "pass" for n in REFERENCE)
    for node, expected in VARIANTS.items():
        if node in fleet.venvs:
            assert same[node]["status"] == "fail" and min(expected) in same[node]["message"], same[node]
    plain = fleet.cli(run_cli, "check", "ref", "--only", "host.python", "--format", "json")
    assert all(r["id"] != "fleet.same" for h in json.loads(plain.stdout)["hosts"] for r in h["results"])


def test_per_node_snapshots_are_compared_like_hosts(fleet, run_cli, tmp_path):
    """Each node writes `snapshot local`'s JSON (here over SSH, one file per node, host named by
    the file); diff of the files attributes torch to n-torch as diff of the hosts does."""
    for node in ("n1", "n2", "n-torch"):
        result = fleet.cli(run_cli, "snapshot", node, "--only", "host.python", "--format", "json",
                           "--output", str(tmp_path / f"{node}.json"))
        assert result.exit_status == 0, result.stderr
    result = run_cli("diff", *sorted(str(p) for p in tmp_path.glob("*.json")), "--format", "json")
    data = json.loads(result.stdout)
    assert result.exit_status == 1 and differences_by_host(data) == {"n-torch": {"torch", "torch.cuda"}}


def test_the_snapshot_of_a_node_has_collect_envs_facts(fleet, run_cli):
    """Over SSH: the node's GPUs with their compute capability, driver, topology, torch, NCCL, the
    variables with the token masked, the ledger, and the check findings."""
    result = fleet.cli(run_cli, "snapshot", "n-ledger", "--only", "host.python", "--format", "json")
    doc = json.loads(result.stdout)["hosts"][0]["snapshot"]
    assert doc["gpus"][0] == {"index": 0, "name": H100[0], "compute_capability": "9.0"} and len(doc["gpus"]) == 8
    assert doc["driver"]["version"] == "580.95.05" and doc["topology"]["text"].startswith("\tGPU0")
    assert doc["torch"]["version"] == "2.9.1+cu128" and doc["nccl"] == "2.27.3 (nvidia-nccl-cu12)"
    assert doc["environment_variables"]["NCCL_IB_HCA"] == "mlx5_0" and TOKEN not in result.stdout
    assert [p["state"] for p in doc["patches"]] == ["applied"]
    text = fleet.cli(run_cli, "snapshot", "n-ledger", "--only", "host.python").stdout
    assert "GPU models and configuration: GPU 0,1,2,3,4,5,6,7: NVIDIA H100 80GB HBM3" in text


def test_hashes_are_cached_on_each_host_owner_only(fleet, diff_json):
    """After a diff, every node's hashes sit in its home's ~/.cache/envdoctor/digests-*, mode 0600."""
    caches = sorted((fleet.homes["base"] / "home" / ".cache" / "envdoctor").glob("digests-*"))
    assert len(caches) >= 3 and all(oct(p.stat().st_mode & 0o777) == "0o600" for p in caches)
