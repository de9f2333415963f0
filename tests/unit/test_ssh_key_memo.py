"""Identity files are read once per run, as asyncssh's connect would read them, and never shared mutably."""

from __future__ import annotations

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


def test_only_encrypted_keys_leave_the_options_to_asyncssh(tmp_path):
    """With every key needing a passphrase, the paths go to asyncssh unchanged (an empty list would load ~/.ssh's keys)."""
    write_key(tmp_path / "id_locked", "ecdsa-sha2-nistp256", passphrase="secret")
    kwargs = {"client_keys": [str(tmp_path / "id_locked")], "ignore_encrypted": True}
    assert ssh._with_loaded_keys(kwargs) is kwargs
