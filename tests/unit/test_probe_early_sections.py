"""The probe's run order: a section whose slow children started early answers after the others."""

from __future__ import annotations

import json

import pytest

from envdoctor.probe.host import core, guard


def _answered(capsys: pytest.CaptureFixture[str]) -> list[str]:
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return [line["section"] for line in lines if "section" in line]


@pytest.fixture
def sections(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """Three sections; ``started[name]`` says whether its prestart starts something."""
    started = {"first": False, "loads": True, "last": False}
    for name in started:
        monkeypatch.setitem(core.SECTIONS, name, lambda args, emit, name=name: {"name": name})
        monkeypatch.setitem(core.PRESTARTS, name, lambda args, name=name: started[name])
    return started


def test_a_section_that_started_children_answers_after_the_others(sections, capsys):
    """The section whose prestart started a load runs last; the others keep the order asked."""
    guard.main({"sections": {"first": {}, "loads": {}, "last": {}}})
    assert _answered(capsys) == ["first", "last", "loads"]


def test_without_early_children_the_order_asked_is_kept(sections, capsys):
    """A prestart that started nothing (a cache hit, no consent) leaves its section in place."""
    sections["loads"] = False
    guard.main({"sections": {"first": {}, "loads": {}, "last": {}}})
    assert _answered(capsys) == ["first", "loads", "last"]


def test_a_waiting_section_still_answers_before_those_that_read_whole_libraries(monkeypatch, capsys):
    """The sections that read whole libraries (drift, sources, architecture) stay last, so a probe
    that dies in one of them has already sent the waiting section."""
    for name in ("light", "models", "sources", "drift"):
        monkeypatch.setitem(core.SECTIONS, name, lambda args, emit, name=name: {"name": name})
        monkeypatch.setitem(core.PRESTARTS, name, lambda args, name=name: name == "models")
    guard.main({"sections": {"models": {}, "light": {}, "sources": {}, "drift": {}}})
    assert _answered(capsys) == ["light", "models", "sources", "drift"]
