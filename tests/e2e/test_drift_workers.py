"""The drift section's forked workers (envdoctor/probe/host/drift/consumers.py): real forks,
so outside the in-process unit tier."""

from __future__ import annotations

import os

from envdoctor.probe.host.drift import consumers as drift_consumers


class _Square:
    def __init__(self, die_at: int | None = None) -> None:
        self.die_at = die_at
        self.merged: list = []

    def __call__(self, index: int) -> int:
        if index == self.die_at and os.getpid() != self.parent:
            os._exit(3)  # a worker killed mid-way
        return index * index

    def extra(self) -> dict:
        return {"pid": os.getpid()}

    def merge(self, extra: dict) -> None:
        self.merged.append(extra)


def test_forked_workers_answer_in_order_and_a_dead_workers_share_is_done_here(monkeypatch) -> None:
    """Results come in index order from two workers; one dying leaves nothing out."""
    monkeypatch.setattr(drift_consumers, "DRIFT_PARALLEL_MIN_FILES", 4)
    work = _Square()
    work.parent = os.getpid()
    assert list(drift_consumers.forked_results(100, work, 2)) == [(i, i * i) for i in range(100)]
    assert len(work.merged) == 2
    dying = _Square(die_at=51)
    dying.parent = os.getpid()
    assert list(drift_consumers.forked_results(100, dying, 2)) == [(i, i * i) for i in range(100)]
