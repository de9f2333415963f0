"""Over SSH, whether an interpreter is the venv's follows the host's file system, not the controller's.

The sshd here is this machine, so to give the host a file system of its own every session
of this module's sshd runs in a private mount namespace (``unshare --mount``, the key's
forced command) in which ``T/view`` shows ``T/hostview``:

    controller: T/view/venv -> T/real/nest/venv (venv B)    T/view/sub/  (a folder)
    host:       T/view/venv -> T/real/a         (venv A)    T/view/sub -> T/real/nest/inner

and PATH starts with the folder the test writes to ``T/pathhead``. So a path means one
environment on the host and another here, as on a real remote host.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import host_roots
from tests.conftest import make_venv
from tests.sshd import find_sshd, start_sshd

pytestmark = pytest.mark.e2e

ALIAS = "remote-ns"

ENTER = """#!/bin/sh
# Each session: a private mount namespace where {view} shows {hostview}; PATH starts with
# the folder named in {pathhead}; then the command the client asked for.
exec unshare --mount --propagation private sh -c \\
  'mount --bind "$1" "$2" && PATH="$(cat "$3"):$PATH" && export PATH && exec sh -c "$SSH_ORIGINAL_COMMAND"' \\
  enter {hostview} {view} {pathhead}
"""


@pytest.fixture(scope="module")
def layout(tmp_path_factory) -> Path:
    """T/real/a and T/real/nest/venv (real venvs), the controller's T/view and the host's T/hostview."""
    unshare = subprocess.run(["unshare", "--mount", "true"], capture_output=True, check=False)
    if os.geteuid() != 0 or unshare.returncode != 0:
        pytest.skip("needs `unshare --mount` (root) to give the test sshd's sessions their own file system view")
    root = tmp_path_factory.mktemp("hostpaths")
    make_venv(root / "real" / "a")
    make_venv(root / "real" / "nest" / "venv")
    (root / "real" / "nest" / "inner").mkdir()
    (root / "view" / "sub").mkdir(parents=True)
    (root / "view" / "venv").symlink_to(root / "real" / "nest" / "venv")
    (root / "hostview").mkdir()
    (root / "hostview" / "venv").symlink_to(root / "real" / "a")
    (root / "hostview" / "sub").symlink_to(root / "real" / "nest" / "inner")
    (root / "pathhead").write_text("/nonexistent\n")  # each check writes its own
    return root


@pytest.fixture(scope="module")
def remote(layout, tmp_path_factory):
    """An sshd whose sessions see the host's view (see the module docstring); yields its ssh_config."""
    if find_sshd() is None:
        pytest.fail("openssh-server is not installed; .ci/run installs it (apt-get install openssh-server)")
    server = start_sshd(tmp_path_factory.mktemp("sshd-ns"), [ALIAS])
    enter = layout / "enter.sh"
    enter.write_text(ENTER.format(view=shlex.quote(str(layout / "view")),
                                  hostview=shlex.quote(str(layout / "hostview")),
                                  pathhead=shlex.quote(str(layout / "pathhead"))))
    key = (server.root / "authorized_keys").read_text().strip()
    forced = shlex.quote(str(enter)).replace('"', '\\"')
    (server.root / "authorized_keys").write_text(f'command="sh {forced}" {key}\n')
    yield server.ssh_config
    server.stop()


def on_host(ssh_config: Path, command: str) -> str:
    out = subprocess.run(["ssh", "-F", str(ssh_config), ALIAS, command], capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL, check=True)
    return out.stdout.strip()


def check(run_cli, ssh_config: Path, layout: Path, path_head: str, *args: str) -> dict[str, dict]:
    (layout / "pathhead").write_text(path_head + "\n")
    res = run_cli("check", ALIAS, "--ssh-config", str(ssh_config), "--format", "json", *args)
    assert res.stdout.startswith("{"), res.stderr
    return {r["id"]: r for r in json.loads(res.stdout)["hosts"][0]["results"]}


def test_python3_through_a_linked_folder_is_the_venvs_as_the_host_resolves_it(run_cli, remote, layout):
    """PATH's T/view/venv/bin is venv A's bin on the host (B's here): `python3` and `pip` are --venv A's, the check passes."""
    venv = layout / "real" / "a"
    # The setting: one path, two venvs (A on the host, B here).
    assert on_host(remote, f"realpath {shlex.quote(str(layout / 'view' / 'venv'))}") == str(venv)
    assert os.path.realpath(layout / "view" / "venv") == str(layout / "real" / "nest" / "venv")
    results = check(run_cli, remote, layout, f"{layout}/view/venv/bin", "--venv", str(venv), "--only", "python.pip-path")
    pip_path = results["python.pip-path"]
    assert pip_path["status"] == "pass", pip_path["message"]
    assert pip_path["message"].startswith(f"`python3` and `pip` on PATH are {venv}'s")


def test_a_path_equal_after_normalisation_is_another_venv_when_the_host_says_so(run_cli, remote, layout):
    """PATH's T/view/sub/../venv/bin normalises to --venv T/view/venv's bin, but the host resolves it to venv B: warned."""
    view_venv = layout / "view" / "venv"
    head = f"{layout}/view/sub/../venv/bin"
    assert os.path.normpath(head) == f"{view_venv}/bin"
    results = check(run_cli, remote, layout, head, "--venv", str(view_venv), "--only", "python.pip-path")
    pip_path = results["python.pip-path"]
    assert pip_path["status"] == "warn", pip_path["message"]
    assert f"`python3` is {head}/python3, not {view_venv}/bin/python" in pip_path["message"]


def test_the_default_interpreters_venv_is_not_a_second_environment(run_cli, remote, layout):
    """No --venv and venv A's python3 first on PATH: A, also found under /opt/<name>/venv, is not offered as another venv."""
    with host_roots.exclusive():
        opt = host_roots.plant_folder("hostpaths")
        opt.mkdir()
        try:
            (opt / "venv").symlink_to(layout / "real" / "a")
            results = check(run_cli, remote, layout, f"{layout}/view/venv/bin", "--only", "python.venv")
        finally:
            shutil.rmtree(opt)
    venv = results["python.venv"]
    assert venv["status"] == "pass", venv["message"]
    assert f"using `python3` on PATH: {layout}/view/venv/bin/python3" in venv["message"]
    assert str(opt / "venv") not in json.dumps(venv)
