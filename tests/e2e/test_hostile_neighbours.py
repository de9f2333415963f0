"""Issue 14 over the real sshd: hostile models, hosts and a second local user.

Each case checks what the issue's reviewers check: no marker written by planted code
appears, nothing outside the run's own files changes, the run reports the problem and
exits 1 or 2 without a traceback, and the other hosts of the run still get results.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import pwd
import stat
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.faults_support import hosts_by_name, results_by_id
from tests.kimi_fixture import build_kimi

pytestmark = pytest.mark.e2e


@dataclass(frozen=True)
class LocalUser:
    name: str
    uid: int
    gid: int

    def run(self, script: str) -> None:
        """Run a shell script as this user (files it makes are really theirs)."""
        subprocess.run(["runuser", "-u", self.name, "--", "sh", "-c", script], check=True, timeout=60)


@pytest.fixture(scope="module")
def other_user() -> Iterator[LocalUser]:
    """A second local user (tests run as root), removed after the module."""
    name = f"edoc{os.getpid() % 100000}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True, capture_output=True)
    try:
        entry = pwd.getpwnam(name)
        yield LocalUser(name, entry.pw_uid, entry.pw_gid)
    finally:
        subprocess.run(["userdel", "--force", name], capture_output=True)


@pytest.fixture()
def open_tmp() -> Iterator[Path]:
    """A folder under /tmp the second user can reach (pytest's own tmp folders are root-only)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="envdoctor-neighbour-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def assert_clean_exit(res, statuses=(1, 2)) -> None:  # type: ignore[no-untyped-def]  # CLIResult
    assert res.exit_status in statuses, res.stdout[-2000:] + res.stderr[-2000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]


def tree_state(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under folder: (mode, uid, bytes) - to prove nothing changed."""
    state = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        state[str(path)] = (info.st_mode, info.st_uid, data)
    return state


# -- 3: config files another user could have written ----------------------------------------


def test_planted_config_in_a_shared_folder_is_refused(run_cli, other_user, open_tmp):
    """envdoctor.toml written by another user (in a 0777 folder, or theirs in a sticky one) is refused, exit 2."""
    marker = open_tmp / "PLANTED-RAN"
    for mode in (0o777, 0o1777):
        shared = open_tmp / f"shared-{mode:o}"
        shared.mkdir()
        shared.chmod(mode)
        other_user.run(f"printf '[hosts.local]\\ntrust_remote_code = true\\n[stages.x]\\ncommand = \"touch {marker}\"\\n'"
                       f" > {shared}/envdoctor.toml")
        for args in (["run", "local", "x"], ["check", "--only", "host.reachable"]):
            res = run_cli(*args, cwd=shared)
            assert_clean_exit(res, (2,))
            assert "refusing config file envdoctor.toml" in res.stderr
            assert "another user" in res.stderr or "not sticky" in res.stderr
    assert not marker.exists()


def test_own_config_is_named_in_json_and_verbose_output(run_cli, tmp_path):
    """A config of ours (0644, in a folder of ours) is loaded, and named: -v logs it, JSON has "config"."""
    project = tmp_path / "project"
    project.mkdir(mode=0o755)
    (project / "envdoctor.toml").write_text("[hosts.box]\nssh = \"local\"\n")
    res = run_cli("-v", "check", "box", "--only", "host.reachable", "--format", "json", cwd=project)
    assert res.exit_status == 0, res.stderr
    assert json.loads(res.stdout)["config"] == str(project / "envdoctor.toml")
    assert "config_loaded" in res.stderr and str(project / "envdoctor.toml") in res.stderr
    bare = run_cli("check", "--only", "host.reachable", "--format", "json", cwd=tmp_path)
    assert json.loads(bare.stdout)["config"] is None


@pytest.mark.parametrize("option", ["--checks", "--patches"])
def test_python_files_of_another_user_are_never_imported(run_cli, other_user, tmp_path, option):
    """A --checks or --patches file owned by another user is refused before it is imported (its code never runs)."""
    marker = tmp_path / f"IMPORTED{option}"
    folder = tmp_path / f"mine{option}"
    folder.mkdir(mode=0o755)
    planted = folder / "extra.py"
    planted.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    os.chown(planted, other_user.uid, other_user.gid)
    res = run_cli("check", "--only", "host.reachable", option, str(planted))
    assert_clean_exit(res, (2,))
    assert "belongs to another user" in res.stderr
    assert not marker.exists()
    planted.chmod(0o666)
    os.chown(planted, 0, 0)
    res = run_cli("check", "--only", "host.reachable", option, str(planted))
    assert_clean_exit(res, (2,))
    assert "writable by other users" in res.stderr and not marker.exists()


# -- 2: read-only sections run no .pth file --------------------------------------------------


@pytest.fixture(scope="module")
def pth_venv(venv_factory, tmp_path_factory) -> tuple[Path, Path, Path]:
    """A venv whose site-packages holds a .pth that writes a marker when any interpreter starts with site."""
    venv = venv_factory("pth trap")
    marker = tmp_path_factory.mktemp("pth") / "PTH-RAN"
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "zz_trap.pth").write_text(f"import os; open({str(marker)!r}, 'a').write('ran\\n')\n")
    model = build_kimi(tmp_path_factory.mktemp("pthmodel") / "Kimi", mark=marker.with_name("MODEL-CODE-RAN"))
    return venv, marker, model


def test_check_audit_and_facts_never_run_the_venvs_pth_files(run_cli, sshd, pth_venv):
    """check, audit and facts read the venv with -I -S: its .pth never runs, and audit still reports it as extra."""
    venv, marker, model = pth_venv
    ssh = ["--ssh-config", str(sshd.ssh_config), "--venv", str(venv)]
    check = run_cli("check", "ct200", *ssh, "--model", str(model), "--format", "json")
    assert_clean_exit(check, (0, 1))
    assert results_by_id(json.loads(check.stdout)["hosts"][0])["python.venv"]["status"] == "pass"
    audit = run_cli("audit", "ct200", *ssh, "--format", "json")
    assert_clean_exit(audit, (1,))
    extra = [f for f in json.loads(audit.stdout)["hosts"][0]["files"] if f["path"].endswith("zz_trap.pth")]
    assert extra and extra[0]["state"] == "extra"
    facts = run_cli("facts", "ct200", *ssh, "--model", str(model), "--format", "json")
    assert_clean_exit(facts, (0, 1))
    assert json.loads(facts.stdout)["python"] == str(venv / "bin" / "python")
    assert not marker.exists(), marker.read_text()
    assert not marker.with_name("MODEL-CODE-RAN").exists()


# -- 4: placeholders and model facts in stage commands --------------------------------------


@pytest.fixture(scope="module")
def evil_stage_setup(tmp_path_factory, venv_factory) -> dict[str, Path]:
    """A model whose tokenizer_class is shell text, and an inventory with stages that use it."""
    root = tmp_path_factory.mktemp("evilstage")
    marker = root / "CLASS-RAN"
    model = build_kimi(root / "Kimi", mark=root / "MODEL-CODE-RAN")
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = f"X$(touch {marker})`touch {marker}`"
    del config["auto_map"]  # (else the class name comes from auto_map)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    venv = venv_factory("evil stage venv")
    stages = {
        "quoted": 'echo "{tokenizer_class}"',
        "single": "echo '{tokenizer_class}'",
        "bare": "echo {tokenizer_class}",
        "by-env": 'echo "vocab=$ENVDOCTOR_VOCAB_SIZE class=$ENVDOCTOR_TOKENIZER_CLASS host=$ENVDOCTOR_HOST"',
    }
    lines = ["[hosts.trainer]", 'ssh = "ct200"', f"venv = {json.dumps(str(venv))}", f"models = [{json.dumps(str(model))}]"]
    for name, command in stages.items():
        lines += [f"[stages.{name}]", 'host = "trainer"', f"command = {json.dumps(command)}"]
    (root / "envdoctor.toml").write_text("\n".join(lines) + "\n")
    return {"root": root, "marker": marker, "inventory": root / "envdoctor.toml"}


@pytest.mark.parametrize("stage, status, words", [
    ("quoted", 2, "inside quotes"),
    ("single", 2, "inside quotes"),
    ("bare", 1, "not a plain name"),
])
def test_hostile_tokenizer_class_never_runs_in_a_stage(run_cli, sshd, evil_stage_setup, stage, status, words):
    """A placeholder inside quotes is refused (exit 2); a class name that is shell text is refused (exit 1)."""
    res = run_cli("run", "trainer", stage, "--config", str(evil_stage_setup["inventory"]),
                  "--ssh-config", str(sshd.ssh_config))
    assert_clean_exit(res, (status,))
    assert words in res.stderr
    assert not evil_stage_setup["marker"].exists()


def test_facts_reach_the_command_as_environment_variables(run_cli, sshd, evil_stage_setup):
    """ENVDOCTOR_VOCAB_SIZE and ENVDOCTOR_HOST are set for the command; an invalid class is left unset."""
    res = run_cli("run", "trainer", "by-env", "--config", str(evil_stage_setup["inventory"]),
                  "--ssh-config", str(sshd.ssh_config))
    assert res.exit_status == 0, res.stderr
    assert res.stdout.strip() == "vocab=163840 class= host=trainer"
    assert not evil_stage_setup["marker"].exists()


# -- 5: run --detach logs --------------------------------------------------------------------


def test_detached_log_is_private_and_records_the_exit_status(run_cli, sshd, other_user, tmp_path):
    """--detach logs in ~/.cache/envdoctor/logs (0700, file 0600), never through /tmp/envdoctor-logs a neighbour planted."""
    victim = tmp_path / "root-only"
    victim.write_text("secret\n")
    victim.chmod(0o600)
    planted = Path("/tmp/envdoctor-logs")
    if not planted.exists():
        other_user.run(f"mkdir -p {planted} && for s in $(seq 0 120); do "
                       f"ln -sf {victim} {planted}/job-$(date -u -d @$(( $(date +%s) + s )) +%Y%m%dT%H%M%SZ).log; done")
    inventory = tmp_path / "envdoctor.toml"
    inventory.write_text('[hosts.box]\nssh = "ct200"\n[stages.job]\nhost = "box"\n'
                         'command = "echo started $ENVDOCTOR_STAGE; exit 7"\n')
    try:
        res = run_cli("run", "box", "job", "--detach", "--format", "json", "--config", str(inventory),
                      "--ssh-config", str(sshd.ssh_config))
        assert res.exit_status == 0, res.stderr
        log = Path(json.loads(res.stdout)["log"])
        assert log.parent == Path.home() / ".cache" / "envdoctor" / "logs"
        assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(log.lstat().st_mode) == 0o600 and not log.is_symlink()
        deadline = time.monotonic() + 60
        while "exited with status" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)  # a poll interval for the detached process
        assert "started job" in log.read_text() and "exited with status 7" in log.read_text()
        assert victim.read_text() == "secret\n"
    finally:
        subprocess.run(["rm", "-rf", str(planted)], check=False)


def test_detach_refuses_a_log_folder_that_is_a_symlink(run_cli, other_user, tmp_path):
    """With ~/.cache/envdoctor/logs a symlink to a neighbour's folder, --detach refuses and writes nothing there."""
    home = tmp_path / "home"
    (home / ".cache" / "envdoctor").mkdir(parents=True, mode=0o700)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, other_user.uid, other_user.gid)
    (home / ".cache" / "envdoctor" / "logs").symlink_to(theirs)
    inventory = tmp_path / "envdoctor.toml"
    inventory.write_text('[stages.job]\ncommand = "echo hi"\n')
    before = tree_state(theirs)
    res = run_cli("run", "local", "job", "--detach", "--config", str(inventory), env={"HOME": str(home)})
    assert_clean_exit(res, (1,))
    assert "log folder" in res.stderr
    assert tree_state(theirs) == before


# -- 6: hostile hosts and models -------------------------------------------------------------


HOSTILE_ANSWERS = {
    "host-data-is-a-list": 'printf \'%s\\n\' \'{"section": "host", "data": [1]}\' \'{"done": true}\'',
    "deeply-nested": "python3 -c 'print(\"[\" * 100000)'",
    "millions-of-values": "python3 -c 'print(\"[\" + \"1,\" * 5000000 + \"1]\")'",
    "section-name-is-a-list": 'printf \'%s\\n\' \'{"section": [1], "data": 1}\' \'{"done": true}\'',
    "venvs-of-wrong-shape": 'printf \'%s\\n\' \'{"section": "venvs", "data": {"envs": [7]}}\' \'{"done": true}\'',
}


@pytest.mark.parametrize("case", sorted(HOSTILE_ANSWERS))
def test_a_hostile_host_answer_is_that_hosts_error_only(run_cli, sshd, venv_factory, tmp_path, case):
    """One host answering garbage gets an error result; the other host of the run still gets its results."""
    fake = tmp_path / "compromised"
    (fake / "bin").mkdir(parents=True)
    script = fake / "bin" / "python3"
    # It reads the request line, not to the end of stdin: envdoctor holds stdin open until the
    # probe ends (its EOF tells the probe's watchdog that envdoctor is gone).
    script.write_text(f"#!/bin/sh\nhead -n 1 > /dev/null\n{HOSTILE_ANSWERS[case]}\n")
    script.chmod(0o755)
    good = venv_factory("healthy neighbour")
    inventory = tmp_path / "envdoctor.toml"
    inventory.write_text(f'[hosts.bad]\nssh = "ct200"\nvenv = {json.dumps(str(fake))}\n'
                         f'[hosts.good]\nssh = "b300"\nvenv = {json.dumps(str(good))}\n')
    for fmt in ("json", "junit") if case == "host-data-is-a-list" else ("json",):
        res = run_cli("check", "bad", "good", "--config", str(inventory), "--ssh-config", str(sshd.ssh_config),
                      "--format", fmt)
        assert_clean_exit(res, (1,))
        if fmt == "junit":
            ET.fromstring(res.stdout)
            continue
        hosts = hosts_by_name(res.stdout)
        assert results_by_id(hosts["good"])["python.venv"]["status"] == "pass"
        problems = [r for r in hosts["bad"]["results"] if r["status"] in ("fail", "error")]
        assert problems and "probe" in problems[0]["message"], hosts["bad"]["results"][:3]


def test_a_model_file_of_5000_nested_parentheses_does_not_crash_the_run(run_cli, sshd, venv_factory, tmp_path):
    """A 10 KB model file that segfaults libcst is refused before parsing; the run and its report finish."""
    model = build_kimi(tmp_path / "Kimi", mark=tmp_path / "MODEL-CODE-RAN")
    (model / "tokenization_kimi.py").write_text("import tiktoken\nx = " + "(" * 5000 + "1" + ")" * 5000 + "\n")
    venv = venv_factory("deep model venv")
    res = run_cli("check", "ct200", "b300", "--ssh-config", str(sshd.ssh_config), "--venv", str(venv),
                  "--model", str(model), "--format", "json")
    assert_clean_exit(res, (1,))
    hosts = hosts_by_name(res.stdout)
    assert set(hosts) == {"ct200", "b300"}
    assert "nested brackets" in json.dumps(hosts["ct200"])
    assert not (tmp_path / "MODEL-CODE-RAN").exists()


# -- 7: index credentials --------------------------------------------------------------------


PASSWORD = "pa55-Wd-xyzzy"
TOKEN = "tok3n-4be1c0ffee"


@pytest.fixture()
def spying_index() -> Iterator[tuple[str, list[dict[str, object]]]]:
    """An empty index on 127.0.0.1 that, at each request, looks at every process's argv for the password."""
    seen: list[dict[str, object]] = []

    def password_on_some_argv() -> bool:
        """Whether a pip process (not envdoctor's own command line, where the user typed it) shows it."""
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    argv = (entry / "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if b"envdoctor" not in argv and any(PASSWORD.encode() in word for word in argv):
                    return True
        return False

    class Spy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802  # the name http.server calls
            seen.append({"path": self.path, "auth": self.headers.get("Authorization"),
                         "on_argv": password_on_some_argv()})
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Spy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()


def test_index_password_is_never_on_pips_argv_nor_in_reports(run_cli, sshd, venv_factory, tmp_path, spying_index):
    """pip gets --index-url through its environment: while it talks to the index no argv holds the password,
    and no report (text, JSON, JUnit) shows the password or a token used as the URL's user."""
    address, seen = spying_index
    venv = venv_factory("index secrets")
    args = ["fix", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(venv),
            "--require", "envdoctor-no-such-package-qq", "--index-url", f"http://alice:{PASSWORD}@{address}/simple",
            "--extra-index-url", f"http://{TOKEN}@{address}/extra"]
    outputs = []
    for fmt in ("text", "junit"):
        res = run_cli("-v", *args, "--format", fmt)
        assert_clean_exit(res, (1,))
        outputs.append(res.stdout + res.stderr)
    assert seen, "pip never reached the index"
    expected = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    assert any(s["auth"] == expected for s in seen), seen  # pip really got the credentials
    assert not any(s["on_argv"] for s in seen)
    everything = "\n".join(outputs)
    assert PASSWORD not in everything and TOKEN not in everything
    assert f"***@{address}/simple" in everything


# -- 8, 9: --output and control characters --------------------------------------------------


def test_output_never_writes_through_a_neighbours_symlink(run_cli, other_user, tmp_path, open_tmp):
    """In a sticky shared folder, a report path that is another user's symlink is refused; the target is unchanged."""
    victim = tmp_path / "root-only"
    victim.write_text("keep\n")
    shared = open_tmp / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    other_user.run(f"ln -s {victim} {shared}/report.json")
    res = run_cli("check", "--only", "host.reachable", "--format", "json", "--output", str(shared / "report.json"))
    assert_clean_exit(res, (2,))
    assert "symlink another user owns" in res.stderr
    assert victim.read_text() == "keep\n"
    mine = tmp_path / "mine" / "report.json"
    mine.parent.mkdir()
    ok = run_cli("check", "--only", "host.reachable", "--format", "json", "--output", str(mine))
    assert ok.exit_status == 0 and json.loads(mine.read_text())["exit_status"] == 0
    assert [p.name for p in mine.parent.iterdir()] == ["report.json"]  # no temp file left behind


def test_terminal_escapes_from_a_model_are_escaped_in_text_and_stripped_from_junit(run_cli, sshd, venv_factory, tmp_path):
    """A tokenizer_class with ESC/BEL and a newline cannot set the title or draw a fake line; JUnit stays XML."""
    model = build_kimi(tmp_path / "Kimi", mark=tmp_path / "MODEL-CODE-RAN", chat_template=False)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "Evil\x1b]0;pwned\x07\x1b[2J\x01\n  \u2713 all checks passed"
    del config["auto_map"]  # (else the class name comes from auto_map)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    venv = venv_factory("escape venv")
    args = ["check", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(venv), "--model", str(model)]
    text = run_cli(*args)
    assert_clean_exit(text, (0, 1))
    assert "Evil" in text.stdout and "\\x1b" in text.stdout
    assert not any(c in text.stdout for c in "\x1b\x07\x01")
    assert "\n  \u2713 all checks passed" not in text.stdout
    junit = run_cli(*args, "--format", "junit")
    assert_clean_exit(junit, (0, 1))
    ET.fromstring(junit.stdout)


# -- 10: audit confines RECORD paths ---------------------------------------------------------


def test_audit_reports_record_paths_outside_the_environment_without_reading_them(run_cli, sshd, venv_factory, tmp_path):
    """RECORD rows that climb out (../../etc/shadow, an absolute path) are `outside`, never hashed or sized."""
    venv = venv_factory("outside record")
    site = next((venv / "lib").glob("python3*/site-packages"))
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret\n")
    dist = site / "sneaky-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sneaky\nVersion: 1.0\n")
    climb = os.path.relpath(secret, site)
    (dist / "RECORD").write_text(f"{climb},sha256=AAAA,11\n/etc/shadow,sha256=AAAA,1\n"
                                 "../../../bin/sneaky,,\nsneaky-1.0.dist-info/RECORD,,\n")
    res = run_cli("audit", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(venv), "--format", "json")
    assert_clean_exit(res, (1,))
    files = {f["path"]: f for f in json.loads(res.stdout)["hosts"][0]["files"]}
    assert files[str(secret)]["state"] == "outside" and files["/etc/shadow"]["state"] == "outside"
    assert "top secret" not in res.stdout and str(venv / "bin" / "sneaky") not in json.dumps(
        [f for f in files.values() if f["state"] == "outside"])


# -- 11: the live tokenizer load ignores the caller's folder ---------------------------------


def test_live_tokenizer_load_does_not_import_from_the_working_folder(test_env, venv_factory, tmp_path):
    """With --trust-remote-code, a json.py in the folder envdoctor runs from is never imported by the loader."""
    marker = tmp_path / "JSON-PY-RAN"
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "json.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nfrom _json import *\n")
    model = build_kimi(tmp_path / "Kimi", mark=tmp_path / "MODEL-CODE-RAN")
    venv = venv_factory("live loader venv")
    proc = subprocess.run([sys.executable, "-I", "-m", "envdoctor", "facts", "local", "--venv", str(venv),
                           "--model", str(model), "--trust-remote-code", "--format", "json"],
                          capture_output=True, text=True, cwd=workdir, env=test_env, timeout=300)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "transformers" in proc.stdout  # the loader ran (and said transformers is missing)
    assert not marker.exists()


# -- 13: the patch writer and .envdoctor -----------------------------------------------------


def _run_host_program(prefix: Path, op: str, changes: list[dict[str, str]]) -> tuple[int, list[dict], str]:
    import asyncio

    from envdoctor.patching.host import change_request, run_host_program
    from envdoctor.transport.local import LocalTransport

    request = change_request(op, str(prefix), changes, version="test")
    return asyncio.run(run_host_program(LocalTransport(), sys.executable, request))


def test_patch_writer_refuses_a_symlinked_or_open_envdoctor_folder(other_user, tmp_path):
    """A .envdoctor that is a symlink (to a neighbour's folder) or not owner-only is refused: no chmod, no lock."""
    from envdoctor.errors import PatchError

    prefix = tmp_path / "venv"
    prefix.mkdir()
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, other_user.uid, other_user.gid)
    (prefix / ".envdoctor").symlink_to(theirs)
    before = tree_state(tmp_path / "theirs") | {"mode": (theirs.stat().st_mode, theirs.stat().st_uid, b"")}
    with pytest.raises(PatchError, match="not a real folder"):
        _run_host_program(prefix, "apply", [])
    after = tree_state(tmp_path / "theirs") | {"mode": (theirs.stat().st_mode, theirs.stat().st_uid, b"")}
    assert after == before
    (prefix / ".envdoctor").unlink()
    (prefix / ".envdoctor").mkdir(mode=0o755)
    (prefix / ".envdoctor").chmod(0o755)
    with pytest.raises(PatchError, match="not owner-only"):
        _run_host_program(prefix, "apply", [])
    assert not (prefix / ".envdoctor" / "lock").exists()


def test_revert_confines_ledger_paths_to_the_environment(tmp_path):
    """A ledger naming a file or a backup outside the venv is refused: the outside file is not restored over."""
    prefix = tmp_path / "venv"
    (prefix / ".envdoctor").mkdir(parents=True, mode=0o700)
    outside = tmp_path / "passwd-copy"
    outside.write_text("root:x:0:0\n")
    inside_backup = prefix / ".envdoctor" / "backups" / "p" / "orig"
    inside_backup.parent.mkdir(parents=True, mode=0o700)
    inside_backup.write_text("attacker text\n")
    import hashlib

    digest = hashlib.sha256(outside.read_bytes()).hexdigest()
    change = {"patch": "p", "file": str(outside), "distribution": "d", "version": "1", "path": "x",
              "sha256_before": hashlib.sha256(b"attacker text\n").hexdigest(), "sha256_after": digest,
              "backup": str(inside_backup)}
    status, outcomes, _ = _run_host_program(prefix, "revert", [change])
    assert outcomes[0]["result"] == "refused" and "outside the environment" in outcomes[0]["message"]
    inside_file = prefix / "lib" / "mod.py"
    inside_file.parent.mkdir(parents=True)
    inside_file.write_text("patched\n")
    change.update(file=str(inside_file), sha256_after=hashlib.sha256(b"patched\n").hexdigest(),
                  backup=str(outside))
    status, outcomes, _ = _run_host_program(prefix, "revert", [change])
    assert outcomes[0]["result"] == "refused" and "backup" in outcomes[0]["message"]
    assert outside.read_text() == "root:x:0:0\n" and inside_file.read_text() == "patched\n"


def test_probe_never_hashes_ledger_paths_outside_the_environment(tmp_path):
    """The patch-ledger section skips a ledger line naming /etc/shadow (and a symlinked ledger is not read)."""
    import asyncio

    import envdoctor.operations.gather  # noqa: F401  # registers the probe's sections
    from envdoctor.probe.program import run_probe
    from envdoctor.transport.local import LocalTransport

    prefix = tmp_path / "venv"
    (prefix / ".envdoctor").mkdir(parents=True, mode=0o700)
    (prefix / ".envdoctor" / "ledger.jsonl").write_text(json.dumps({"file": "/etc/shadow", "op": "apply"}) + "\n")
    out = asyncio.run(run_probe(LocalTransport(), {"patch-ledger": {"prefix": str(prefix)}}))
    fact = out.sections["patch-ledger"]["files"]["/etc/shadow"]
    assert fact["sha256"] is None and "outside the environment" in fact["error"]
    (prefix / ".envdoctor" / "ledger.jsonl").unlink()
    (prefix / ".envdoctor" / "ledger.jsonl").symlink_to("/etc/passwd")
    out = asyncio.run(run_probe(LocalTransport(), {"patch-ledger": {"prefix": str(prefix)}}))
    assert out.sections["patch-ledger"]["lines"] == []
