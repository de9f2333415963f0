"""The report's indented JSON writer gives json.dumps(indent=2)'s text exactly."""

from __future__ import annotations

import enum
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from envdoctor.report.envelope import indented

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=8))
keys = st.one_of(st.text(max_size=6), st.integers(-3, 3), st.booleans(), st.none(), st.floats(-2, 2))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                            st.dictionaries(keys, inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=25,
)


@settings(max_examples=600, deadline=None)
@given(values)
def test_indented_is_json_dumps_indent_2(value):
    """Any JSON-like value (tuples, non-text keys, NaN, non-ASCII text included) is written as json.dumps(indent=2) writes it."""
    assert indented(value) == json.dumps(value, indent=2)


class Level(enum.IntEnum):
    HIGH = 2


def test_subclasses_take_json_dumps_own_path():
    """An int subclass or str subclass inside a report is written as json.dumps writes it."""
    class Tag(str):
        pass

    value = {"level": Level.HIGH, "tags": [Tag("a"), 1], "nested": {"x": [Level.HIGH]}}
    assert indented(value) == json.dumps(value, indent=2)
