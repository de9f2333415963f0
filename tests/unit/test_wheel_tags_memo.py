"""packages.tags judges each WHEEL file once per run: the hosts after the first get the same verdict."""

from __future__ import annotations

from envdoctor.install.wheel_tags import judge_wheels

INTERPRETER = {"version": [3, 11, 7], "implementation": "cpython", "platform": "linux-x86_64",
               "glibc": "glibc 2.36", "bits": 64, "system": "Linux", "soabi": "cpython-311-x86_64-linux-gnu"}


def section(*dists: dict[str, object]) -> dict[str, object]:
    return {"prefix": "/v", "interpreter": dict(INTERPRETER), "distributions": [dict(d) for d in dists]}


FITS = {"name": "regex", "version": "2024.1", "path": "/v/regex.dist-info",
        "tags": ["cp311-cp311-manylinux_2_17_x86_64"], "requires_python": ">=3.8"}
ARM = {"name": "tiktoken", "version": "0.9", "path": "/v/tiktoken.dist-info",
       "tags": ["cp311-cp311-manylinux_2_17_aarch64"], "requires_python": ">=3.8"}


def verdict_of(data: dict[str, object]) -> tuple[object, ...]:
    v = judge_wheels(data)
    return v.checked, [m.to_json() for m in v.mismatches], v.no_wheel, v.not_judged


def test_every_host_gets_the_verdict_the_first_got():
    """Judged again (from the memo), a fleet's second host has the same findings as its first."""
    first = verdict_of(section(FITS, ARM, {"name": "old", "version": "1", "path": "/v/old.egg-info", "tags": None}))
    again = verdict_of(section(FITS, ARM, {"name": "old", "version": "1", "path": "/v/old.egg-info", "tags": None}))
    assert first == again
    assert [m["name"] for m in first[1]] == ["tiktoken"] and first[2] == ["old"]


def test_a_wheel_that_fitted_elsewhere_is_still_judged_by_its_own_tags_and_python():
    """The memo is keyed by the tags and Requires-Python: the same name with other tags is judged anew."""
    verdict_of(section(FITS))
    other = dict(FITS, tags=["cp311-cp311-manylinux_2_17_aarch64"])
    assert [m["name"] for m in verdict_of(section(other))[1]] == ["regex"]
    newer_python = dict(FITS, requires_python=">=3.12")
    assert [m["kind"] for m in verdict_of(section(newer_python))[1]] == ["requires-python"]
