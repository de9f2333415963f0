"""End-to-end tests share this machine's discovery roots (/opt/*/venv) with each other."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import host_roots


@pytest.fixture(autouse=True)
def _host_roots_shared() -> Iterator[None]:
    """No test plants under /opt while this one runs (see tests/host_roots.py)."""
    with host_roots.shared():
        yield
