"""The fleet stays inside the process's descriptor limit (ulimit -n)."""

from __future__ import annotations

import resource

import pytest

from envdoctor.engine.executor import DESCRIPTORS_PER_HOST, DESCRIPTORS_RESERVED, descriptor_bound


@pytest.fixture
def nofile():
    """Set the soft descriptor limit for one test, then restore it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

    def set_limit(value: int) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (value, hard))

    yield set_limit
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_parallel_is_lowered_to_fit_the_descriptor_limit(nofile) -> None:
    """Under ulimit -n 256 at most (256 - reserve) / per-host hosts run at once."""
    nofile(256)
    assert descriptor_bound(64, 1000) == (256 - DESCRIPTORS_RESERVED) // DESCRIPTORS_PER_HOST
    nofile(min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 4096))
    assert descriptor_bound(64, 1000) == 64


def test_bound_never_exceeds_the_fleet_and_is_at_least_one(nofile) -> None:
    """A small fleet uses no more slots than hosts; a tiny limit still lets one host run."""
    nofile(min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 4096))
    assert descriptor_bound(64, 3) == 3
    nofile(DESCRIPTORS_RESERVED + 1)
    assert descriptor_bound(64, 1000) == 1
