"""known_hosts.hashed_name: the format ssh-keygen -H writes, checked against ssh-keygen itself."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from envdoctor.transport.known_hosts import hashed_name, host_keys

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def test_each_hash_has_its_own_salt():
    assert hashed_name("gpu1") != hashed_name("gpu1")


def test_read_back_by_our_lookup(tmp_path: Path):
    known = tmp_path / "known_hosts"
    known.write_text(f"{hashed_name('[10.0.0.5]:2222')} {KEY}\n")
    assert host_keys([str(known)], "[10.0.0.5]:2222").known
    assert not host_keys([str(known)], "10.0.0.5").known


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed")
def test_ssh_keygen_hashes_the_same_way(tmp_path: Path):
    """ssh-keygen -H hashes a plain line with its own salt; ours, given that salt, is identical."""
    import base64

    known = tmp_path / "known_hosts"
    known.write_text(f"[gpu1]:2222 {KEY}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(known)], check=True, capture_output=True)
    theirs = known.read_text().split()[0]
    salt = base64.b64decode(theirs.split("|")[2])
    assert hashed_name("[gpu1]:2222", salt) == theirs
