"""RECORD digests are compared as text (canonical urlsafe base64 or hex), never decoded per row:
the verdicts are those of decoding both sides and comparing bytes, on real RECORDs and files."""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import io
import shutil
from pathlib import Path

import pytest

from envdoctor.probe.host.audit import hashing as audit_hash
from envdoctor.probe.host.audit import record as audit_record
from tests.unit.test_audit import fake_env, run_section  # noqa: F401  # fake_env is a fixture

ALGOS = ("sha256", "sha512", "sha384", "sha1", "md5")


def decoded(value: str) -> bytes:
    """The oracle: a RECORD digest's bytes, whatever its spelling (hex, base64 of either alphabet, padded or not)."""
    algo, _, text = value.partition("=")
    if len(text) == 2 * hashlib.new(algo).digest_size:
        return bytes.fromhex(text)
    return base64.b64decode(text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4))


def spellings(raw: bytes) -> list[str]:
    urlsafe = base64.urlsafe_b64encode(raw).decode()
    return [urlsafe.rstrip("="), urlsafe, base64.b64encode(raw).decode(), raw.hex(), raw.hex().upper()]


def real_records() -> list[tuple[Path, str]]:
    """RECORD files of the distributions installed for this interpreter (real, written by pip)."""
    found = []
    for dist in importlib.metadata.distributions():
        text = dist.read_text("RECORD")
        if text:
            found.append((Path(str(dist.locate_file(""))), text))
    assert len(found) >= 10
    return found


@pytest.mark.parametrize("algo", ALGOS)
def test_every_spelling_of_a_digest_compares_as_its_bytes(algo):
    """Padded, unpadded, standard-alphabet and hex spellings of a digest all match the file; a wrong one never does."""
    data = b"print('spelled')\n"
    raw = hashlib.new(algo, data).digest()
    other = hashlib.new(algo, data + b"#").digest()
    for spelling in spellings(raw) + spellings(other):
        parsed_algo, digest, encoding = audit_record.parse_record_hash(f"{algo}={spelling}")
        assert parsed_algo == algo and encoding in ("b64", "hex")
        assert audit_record.digest_hex(algo, digest) == decoded(f"{algo}={spelling}").hex()
        hasher = hashlib.new(algo, data)
        assert (audit_hash.digest_as(hasher, digest) == digest) == (decoded(f"{algo}={spelling}") == raw)


def test_spare_bits_in_the_last_character_are_what_the_decoder_makes_of_them():
    """A base64 digest whose last character has its spare bits set decodes to the same bytes: it still matches."""
    data = b"x = 1\n"
    raw = hashlib.sha256(data).digest()
    canonical = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    sloppy = canonical[:-1] + alphabet[alphabet.index(canonical[-1]) + 1]  # the spare bits: 2 for sha256
    assert decoded("sha256=" + sloppy) == raw
    _, digest, _ = audit_record.parse_record_hash("sha256=" + sloppy)
    assert digest == canonical and audit_hash.digest_as(hashlib.sha256(data), digest) == digest


def test_real_records_parse_as_the_csv_module_reads_them():
    """Every real RECORD: the same paths, sizes and digest bytes as csv.reader and a base64 decoder give."""
    rows_seen = 0
    for _, text in real_records():
        rows, problems = audit_record.parse_record(text)
        expected = [f for f in csv.reader(io.StringIO(text)) if f and f[0]]
        assert [r[0] for r in rows] == [f[0] for f in expected]
        assert [r[4] for r in rows] == [int(f[2]) if f[2] else None for f in expected]
        for row, fields in zip(rows, expected):
            if fields[1]:
                assert bytes.fromhex(audit_record.digest_hex(row[1], row[2])) == decoded(fields[1])
            else:
                assert row[1:4] == (None, None, "none")
        assert problems == []
        rows_seen += len(rows)
    assert rows_seen > 500


def test_csv_and_split_readings_agree_on_quotes_and_line_ends():
    """A RECORD with a quoted path (csv) and the same rows with CRLF line ends (split) give the same rows."""
    value = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(b"a").digest()).decode().rstrip("=")
    plain = f"pkg/a.py,{value},1\r\npkg/b.py,,\r\n\r\nonly,two\r\npkg/c.py,{value}, \r\n"
    quoted = plain + '"pkg/d, e.py",' + value + ",1\r\n"
    plain_rows, plain_problems = audit_record.parse_record(plain)
    quoted_rows, quoted_problems = audit_record.parse_record(quoted)
    assert quoted_rows[:-1] == plain_rows and quoted_problems == plain_problems
    assert quoted_rows[-1][0] == "pkg/d, e.py"
    assert plain_problems == ["line 4 has 2 fields, not 3", "line 4: malformed hash 'two'"]
    assert plain_rows[-1][4] is None


def test_real_files_verify_under_every_spelling_and_a_change_is_reported_in_hex(fake_env):  # noqa: F811
    """Real files of an installed distribution, listed with sha256/sha512/md5/sha1 in several spellings: all
    verify; a changed one is `modified` with the RECORD's digest as hex, as decoding it gives."""
    prefix, site = fake_env
    source = importlib.metadata.distribution("packaging")
    files = [f for f in source.files or () if f.suffix == ".py" and f.hash][:12]
    assert len(files) >= 8
    rows, expected_hex = [], {}
    for number, entry in enumerate(files):
        data = Path(str(source.locate_file(entry))).read_bytes()
        target = site / str(entry)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source.locate_file(entry), target)
        algo = ALGOS[number % len(ALGOS)]
        spelling = spellings(hashlib.new(algo, data).digest())[number % 5]
        rows.append(f"{entry},{algo}={spelling},{len(data)}")
        expected_hex[str(target)] = decoded(f"{algo}={spelling}").hex()
    info = site / "packaging-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: packaging\nVersion: 0\n\n")
    (info / "RECORD").write_text("\r\n".join(rows + ["packaging-0.dist-info/RECORD,,"]) + "\r\n")
    data, items = run_section(prefix, full=True)
    assert items == {} and data["distributions"][0]["verified"] == len(files)
    changed = sorted(expected_hex)[:5]
    for path in changed:
        with open(path, "ab") as handle:
            handle.write(b"# changed\n")
    data, items = run_section(prefix, full=True)
    assert sorted(items) == changed
    for path in changed:
        assert items[path]["state"] == "modified" and items[path]["expected"] == expected_hex[path]
        assert items[path]["sha256"] == hashlib.sha256(Path(path).read_bytes()).hexdigest()
