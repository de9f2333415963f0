"""The order the suite's work starts in (tests/conftest.py's start_order) and its list of slow modules."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SLOW_FIRST, start_order, work_unit

REPOSITORY = Path(__file__).resolve().parents[2]


def test_every_slow_module_named_exists_once() -> None:
    """A renamed or removed module must leave SLOW_FIRST too (else it silently stops counting)."""
    assert len(set(SLOW_FIRST)) == len(SLOW_FIRST)
    assert [name for name in SLOW_FIRST if not (REPOSITORY / name).is_file()] == []


def test_slow_modules_start_first_then_whole_modules_then_single_tests() -> None:
    nodeids = [
        "tests/unit/test_a.py::test_one",
        "tests/e2e/test_small.py::test_one",
        "tests/e2e/test_big.py::test_one", "tests/e2e/test_big.py::test_two",
        f"{SLOW_FIRST[1]}::test_x",
        f"{SLOW_FIRST[0]}::test_y",
        "tests/oracle/test_ssh_corpus_heldout.py::test_case[1]",
    ]
    order = start_order(nodeids)
    started = sorted(dict.fromkeys(work_unit(n) for n in nodeids), key=order.__getitem__)
    assert started == [SLOW_FIRST[0], SLOW_FIRST[1], "tests/e2e/test_big.py", "tests/e2e/test_small.py",
                       "tests/unit/test_a.py::test_one", "tests/oracle/test_ssh_corpus_heldout.py::test_case[1]"]
