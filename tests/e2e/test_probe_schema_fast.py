"""The schema's fast path (``conforms``) never accepts what ``check_shape`` refuses.

The oracle is ``check_shape`` itself, on a real probe answer of this machine and on
thousands of mutations of it (a bool where an int goes, a float, a subclass of str, a list
where an object goes, None, a missing level), with a fixed seed so a failure repeats.
"""

from __future__ import annotations

import copy
import random
import subprocess
import sys

import pytest

from envdoctor.operations.gather import build_request
from envdoctor.inventory import HostSpec
from envdoctor.probe.program import build_program, encode_stdin, parse_lines, probe_command
from envdoctor.probe.schema import ITEM_SCHEMAS, MAX_ITEMS, SECTION_SCHEMAS, SchemaMismatch, check_shape, conforms


class Text(str):
    pass


class Number(int):
    pass


REPLACEMENTS = [True, False, 0, 7, 1.5, "x", Text("y"), Number(3), None, [], ["a"], [1], {}, {"k": "v"}, [[]]]


@pytest.fixture(scope="module")
def answer():
    """The real probe's host and venvs sections on this machine (the interpreter running the tests)."""
    spec = HostSpec("local", None)
    request = build_request(spec, ["host", "venvs"])
    stdin = encode_stdin({"sections": request}, build_program(request))
    out = subprocess.run(probe_command([sys.executable]), input=stdin, capture_output=True, timeout=120, check=True)
    return parse_lines(out.stdout.splitlines())


def shape_ok(value, schema) -> bool:
    try:
        check_shape(value, schema, "x")
    except SchemaMismatch:
        return False
    return True


def nodes(value, path=()):
    """Every (path, value) of a JSON tree."""
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from nodes(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from nodes(item, (*path, index))


def replaced(value, path, new):
    if not path:
        return new
    copied = copy.deepcopy(value)
    parent = copied
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = new
    return copied


def test_a_real_answer_takes_the_fast_path(answer):
    """Every section of an honest probe answer conforms (the fast path is really used)."""
    assert set(answer.sections) == {"host", "venvs"}
    for name, data in answer.sections.items():
        assert conforms(data, SECTION_SCHEMAS[name]), name
        assert shape_ok(data, SECTION_SCHEMAS[name])


def test_mutations_never_pass_the_fast_path_alone(answer):
    """For 3,000 mutated answers, conforms() is True only where check_shape() passes too."""
    rng = random.Random(20261201)
    accepted = refused = 0
    for name, data in answer.sections.items():
        schema = SECTION_SCHEMAS[name]
        every = list(nodes(data))
        for _ in range(1500):
            path, _old = rng.choice(every)
            mutated = replaced(data, path, copy.deepcopy(rng.choice(REPLACEMENTS)))
            fast, slow = conforms(mutated, schema), shape_ok(mutated, schema)
            assert not (fast and not slow), (name, path)
            accepted += fast
            refused += not slow
    assert accepted and refused  # both outcomes occurred: the comparison means something


@pytest.mark.parametrize("schema, value", [
    (SECTION_SCHEMAS["models"], [{"path": "/m", "code": {"a.py": {"size": True}}}]),  # bool is not an int
    (SECTION_SCHEMAS["host"], {"on_path": {"pip": {"path": "/p", "via": ["a", 1]}}}),
    (SECTION_SCHEMAS["venvs"], {"envs": [{"distributions": [{"requires": "not a list"}]}]}),
    (SECTION_SCHEMAS["venvs"], {"default": []}),
    ([ITEM_SCHEMAS["sources"]], [{"data": None}]),
])
def test_known_mismatches_are_left_to_check_shape(schema, value):
    """Hand-made mismatches: the fast path says no and check_shape names the place."""
    assert not conforms(value, schema)
    assert not shape_ok(value, schema)


def test_subclasses_and_huge_lists_fall_back_to_check_shape():
    """A str subclass or a list near MAX_ITEMS is not accepted by the fast path; check_shape decides."""
    schema = SECTION_SCHEMAS["host"]
    value = {"hostname": Text("h")}
    assert not conforms(value, schema) and shape_ok(value, schema)
    big = {"configured": ["p"] * (MAX_ITEMS // 2 + 1)}
    assert not conforms(big, SECTION_SCHEMAS["venvs"]) and shape_ok(big, SECTION_SCHEMAS["venvs"])
