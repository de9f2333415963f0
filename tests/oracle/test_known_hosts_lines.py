"""known_hosts lines and fields split exactly as OpenSSH's hostfile.c splits them: lines at
"\\n" only (not at \\v, \\f, \\x1c-\\x1e, U+0085 or U+2028, where str.splitlines() breaks),
fields at spaces and tabs only, markers case-sensitive. Real `ssh-keygen -F HOST -f FILE` is
the oracle: it lists each line that names HOST, with its line number and marker."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from envdoctor.transport import known_hosts

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs OpenSSH's ssh-keygen (the oracle)")

#: Characters str.splitlines() (and str.split()) break at and OpenSSH does not.
BREAKS = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``ssh-ed25519 BASE64`` of a real key."""
    path = tmp_path_factory.mktemp("key") / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return " ".join(Path(f"{path}.pub").read_text().split()[:2])


def lines_for(key: str) -> list[str]:
    """A known_hosts file's lines (without their "\\n"), each with a name of its own."""
    lines = []
    for i, ch in enumerate(BREAKS):
        lines += [
            f"# old key of c{i}{ch}c{i} {key}",                      # a comment: c{i} is not in it
            f"k{i} {key} # rotated{ch}k{i}x {key}",                   # a comment after the key
            f"@cert-authority{ch}m{i} {key}",                          # a marker not ended by a blank
            f"@revoked{ch}r{i} {key}",
            f"h{i}{ch}g{i},n{i} {key}",                                 # one host field: n{i} only
            f"p{i} {key} trailing{ch}",
        ]
    lines += [
        f"crlf {key}\r",                       # a CRLF file: the \r goes with the key
        f"crlf2 {key} comment\r",
        f"\t  indented {key}",
        f"tabbed\t{key.replace(' ', chr(9))}",
        f"@CERT-AUTHORITY upper {key}",       # markers are case-sensitive: an invalid line
        f"@cert-authority ca {key}",
        f"@revoked rv {key}",
        f"nul {key}\0junk",
        f"last {key}",
    ]
    return lines


def names_in(lines: list[str]) -> list[str]:
    return sorted({w for line in lines for w in re.split(r"[\s,]+", line) if re.fullmatch(r"[a-z]+\d*x?", w)}
                  - {"old", "key", "of", "rotated", "trailing", "comment", "junk"})


def ssh_keygen_finds(path: Path, name: str) -> list[tuple[int, str]]:
    """(line, marker) of the lines `ssh-keygen -F name` lists."""
    out = subprocess.run(["ssh-keygen", "-F", name, "-f", str(path)], check=False, capture_output=True,
                         timeout=30).stdout
    found = re.findall(rb"^# Host .* found: line (\d+) ?(CA|REVOKED)?$", out, re.MULTILINE)
    return [(int(n), {b"CA": "cert-authority", b"REVOKED": "revoked"}.get(m, "")) for n, m in found]


def envdoctor_finds(path: Path, name: str) -> list[tuple[int, str]]:
    parsed = known_hosts.read_file(str(path))
    return [(int(k.where.rsplit(":", 1)[1]), marker) for marker, patterns, k in parsed.entries
            if known_hosts.patterns_match(patterns, name)]


def test_lines_split_as_openssh_splits_them(tmp_path: Path, key: str) -> None:
    """For every name of a file full of such characters, envdoctor's lines (and line numbers,
    and markers) naming it are those ssh-keygen -F finds; the lookup agrees too."""
    path = tmp_path / "known_hosts"
    lines = lines_for(key)
    path.write_bytes("\n".join(lines).encode() + b"\n")
    names = names_in(lines)
    assert len(names) > 50
    for name in names:
        want = ssh_keygen_finds(path, name)
        assert envdoctor_finds(path, name) == want, name
        found = known_hosts.host_keys([str(path)], name)
        assert sorted(int(k.where.rsplit(":", 1)[1]) for k in found.trusted) == [n for n, m in want if m == ""]
        assert sorted(int(k.where.rsplit(":", 1)[1]) for k in found.cert_authorities) == [
            n for n, m in want if m == "cert-authority"]


@pytest.mark.parametrize("ch", BREAKS)
def test_a_comment_never_trusts_a_host(tmp_path: Path, key: str, ch: str) -> None:
    """`# note<U+2028>gpu1 KEY` is one comment line for OpenSSH: gpu1 stays unknown (a key it
    presents is new, not listed), and a CA hidden the same way is no CA."""
    path = tmp_path / "known_hosts"
    path.write_text(f"# note{ch}gpu1 {key}\n# note{ch}@cert-authority *.example {key}\n", encoding="utf-8")
    assert ssh_keygen_finds(path, "gpu1") == [] and ssh_keygen_finds(path, "a.example") == []
    assert not known_hosts.host_keys([str(path)], "gpu1").known
    assert not known_hosts.host_keys([str(path)], "a.example").known


def test_a_revocation_openssh_skips_still_revokes(tmp_path: Path, key: str) -> None:
    """The one deliberate difference: a line that says @revoked in another case or spacing is
    an invalid line for OpenSSH, but envdoctor still refuses its key (the safe side)."""
    path = tmp_path / "known_hosts"
    path.write_text(f"@REVOKED gpu1 {key}\n@revoked\tgpu2 {key}\n")
    assert ssh_keygen_finds(path, "gpu1") == [] and ssh_keygen_finds(path, "gpu2") == []
    blob = known_hosts.parse_line(f"gpu1 {key}", "x")[2].blob  # type: ignore[index]
    found = known_hosts.host_keys([str(path)], "elsewhere")
    assert found.is_revoked(blob) and len(found.revoked) == 2 and not found.known
