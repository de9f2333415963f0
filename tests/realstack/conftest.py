"""The real-stack tier: the serving stacks users run (tests/real_stacks.py), built with uv once
and kept between runs. Off by default (`python -m pytest --realstack tests/realstack` runs it);
each module runs whole on one xdist worker, like e2e."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.real_stacks import StackUnavailable, build_stack


def _stack(name: str) -> Path:
    try:
        return build_stack(name)
    except StackUnavailable as exc:
        pytest.skip(f"the {name} stack cannot be built here: {exc}")


@pytest.fixture(scope="session")
def vllm_stack() -> Path:
    """A uv venv of vllm==0.33.0 speculators==0.9.0 (tests/real_stacks.py). Read it, never change it."""
    return _stack("vllm")


@pytest.fixture(scope="session")
def sglang_stack() -> Path:
    """A uv venv of sglang==0.5.23 (tests/real_stacks.py). Read it, never change it."""
    return _stack("sglang")
