"""A distribution's metadata file that is not a regular file (a FIFO in a venv its owner can
write) is named as that distribution's problem: in the audit's files and in the probe's list
of files not read."""

from __future__ import annotations

import pytest

from envdoctor.audit.records import DistributionSummary, FileState, unreadable_records
from envdoctor.probe.program import SkippedFile, metadata_owner

pytestmark = pytest.mark.unit

SITE = "/venv/lib/python3.12/site-packages"


def summary(name: str, record: str, notes: tuple[str, ...] = (), kind: str = "dist-info") -> DistributionSummary:
    return DistributionSummary(name=name, version="1.0", path=f"{SITE}/{name}-1.0.{kind}", kind=kind,
                               record=record, files=0, verified=0, problems=0, notes=notes)


def test_an_unreadable_record_is_its_distributions_modified_file_with_why():
    """Why comes from the probe's skipped file, else from the distribution's note."""
    skipped = [SkippedFile("audit", f"{SITE}/idna-1.0.dist-info/RECORD", "a FIFO, not a regular file")]
    noted = summary("six", "unreadable", ("RECORD not read (a character device, not a regular file): its files "
                                          "cannot be verified",))
    found = unreadable_records([summary("idna", "unreadable"), noted, summary("ok", "ok")], skipped)
    assert [(f.distribution, f.path, f.state, f.version) for f in found] == [
        ("idna", f"{SITE}/idna-1.0.dist-info/RECORD", FileState.MODIFIED, "1.0"),
        ("six", f"{SITE}/six-1.0.dist-info/RECORD", FileState.MODIFIED, "1.0")]
    assert found[0].reason == "unreadable: a FIFO, not a regular file; the distribution's files cannot be verified"
    assert found[1].reason.startswith("unreadable: a character device, not a regular file;")


def test_a_missing_or_renamed_record_is_not_a_file_state():
    """No RECORD at all (an egg-info, a distro's rename) stays a note: there is no file to name."""
    assert unreadable_records([summary("a", "missing"), summary("b", "renamed"), summary("c", "none", kind="egg-info")],
                              []) == []


@pytest.mark.parametrize(("path", "owner"), [
    (f"{SITE}/idna-3.21.dist-info/RECORD", ("idna", "3.21", "RECORD")),
    (f"{SITE}/charset_normalizer-3.4.0.dist-info/licenses/LICENSE", ("charset_normalizer", "3.4.0", "licenses/LICENSE")),
    (f"{SITE}/setuptools-69.0-py3.12.egg-info/PKG-INFO", ("setuptools", "69.0", "PKG-INFO")),
    (f"{SITE}/six.py", None),
    (f"{SITE}/odd.dist-info", None),
])
def test_a_skipped_file_names_the_distribution_whose_metadata_it_is(path, owner):
    assert metadata_owner(path) == owner


def test_the_skipped_files_description_says_whose_record_it_is():
    skipped = SkippedFile("audit", f"{SITE}/idna-3.21.dist-info/RECORD", "a FIFO, not a regular file")
    assert skipped.describe() == f"{SITE}/idna-3.21.dist-info/RECORD (idna 3.21's RECORD): a FIFO, not a regular file"
    assert SkippedFile("x", "/etc/motd", "a FIFO").describe() == "/etc/motd: a FIFO"
