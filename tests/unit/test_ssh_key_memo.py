"""Identity files are read once per run, as asyncssh's connect would read them, and never shared mutably."""

from __future__ import annotations

import asyncio

import asyncssh

from envdoctor.transport import ssh


def write_key(path, algorithm="ssh-ed25519", passphrase=None):
    key = asyncssh.generate_private_key(algorithm)
    if passphrase:  # PKCS#8 encryption needs no bcrypt
        key.write_private_key(str(path), "pkcs8-pem", passphrase=passphrase)
    else:
        key.write_private_key(str(path))
    key.write_public_key(str(path) + ".pub")
    return key


def test_loaded_keys_match_asyncssh_and_are_copied_per_connection(tmp_path):
    """Each connection gets its own key-pair objects, with the keys asyncssh would load from the files."""
    write_key(tmp_path / "id_a")
    write_key(tmp_path / "id_b", "ssh-rsa")
    paths = [str(tmp_path / "id_a"), str(tmp_path / "id_b")]
    kwargs = {"client_keys": paths, "agent_identities": paths, "ignore_encrypted": True}
    first, second = ssh._with_loaded_keys(kwargs), ssh._with_loaded_keys(kwargs)
    expected = asyncssh.load_keypairs(paths, None, (), False, True)
    assert [p.public_data for p in first["client_keys"]] == [p.public_data for p in expected]
    assert first["agent_identities"] == [p.public_data for p in expected]
    assert all(a is not b for a, b in zip(first["client_keys"], second["client_keys"]))
    first["client_keys"][1].set_sig_algorithm(b"rsa-sha2-512")
    second["client_keys"][1].set_sig_algorithm(b"ssh-rsa")
    assert first["client_keys"][1].sig_algorithm == b"rsa-sha2-512"
    assert kwargs["client_keys"] == paths  # the caller's options are left as they were


def test_replaced_identity_file_is_read_again(tmp_path):
    """A key file rewritten during the run is loaded again, not served from the memo."""
    path = tmp_path / "id"
    write_key(path)
    kwargs = {"client_keys": [str(path)], "ignore_encrypted": True}
    before = ssh._with_loaded_keys(kwargs)["client_keys"][0].public_data
    replaced = write_key(path)
    after = ssh._with_loaded_keys(kwargs)["client_keys"][0].public_data
    assert after != before and after == replaced.public_data


def test_only_encrypted_keys_offer_no_key_not_asyncssh_defaults(tmp_path, monkeypatch):
    """With every key needing a passphrase (BatchMode skips it) and no agent, no key is offered:
    neither the locked file nor ~/.ssh's default keys, which asyncssh would read for an empty list."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    write_key(tmp_path / "id_locked", "ecdsa-sha2-nistp256", passphrase="secret")
    kwargs = {"client_keys": [str(tmp_path / "id_locked")], "ignore_encrypted": True}
    loaded = ssh._with_loaded_keys(kwargs)
    assert loaded["client_keys"] == []
    options, agent = asyncio.run(ssh._with_agent_keys(loaded))
    assert agent is None and options["public_key_auth"] is False and options["client_keys"] is None


def test_a_public_key_as_identity_file_is_passed_over(tmp_path):
    """IdentityFile naming a public key (its private half in an agent): no error, no key from it."""
    write_key(tmp_path / "id_a")
    kwargs = {"client_keys": [str(tmp_path / "id_a.pub"), str(tmp_path / "id_a")], "ignore_encrypted": True}
    assert len(ssh._with_loaded_keys(kwargs)["client_keys"]) == 1


def test_an_agent_that_never_answers_does_not_hold_the_connection(tmp_path):
    """SSH_AUTH_SOCK names a socket that accepts and stays silent: after the connect timeout the
    agent counts as absent (no key to offer), instead of the run waiting forever."""
    import socket
    import time

    path = str(tmp_path / "agent.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    try:
        started = time.monotonic()
        options, agent = asyncio.run(ssh._with_agent_keys({"client_keys": [], "agent_path": path}, timeout=0.5))
        assert time.monotonic() - started < 5
        assert agent is None and options["public_key_auth"] is False
    finally:
        server.close()
