"""Processor classes: options, inputs, kinds, and the checks made when a class is defined."""

# Processor classes declare `inputs` as a list, the way users write them.
# ruff: noqa: RUF012

from typing import Any

import pytest

from millrace import Input, ListState, MapState, Processor, ValueState
from millrace.errors import ProcessorError


def define(**attributes: Any) -> type[Processor]:
    body = {
        "name": "p",
        "inputs": [Input("events", key="k")],
        "on_record": lambda self, key, record, ctx: None,
        **attributes,
    }
    return type("MyProcessor", (Processor,), {key: v for key, v in body.items() if v is not ...})


def test_a_processor_declares_its_kind_by_what_it_defines() -> None:
    assert define().kind() == "stateless"
    assert define(total=ValueState(int)).kind() == "stateful"
    monoid = define(
        on_record=...,
        zero=0,
        lift=lambda self, record: 1,
        combine=lambda self, a, b: a + b,
    )
    assert monoid.kind() == "monoid"
    assert list(monoid.states()) == ["aggregate"]


@pytest.mark.parametrize(
    ("attributes", "message", "hint"),
    [
        ({"semantics": "exactly-once"}, "MyProcessor.semantics is 'exactly-once'", "at_most_once"),
        ({"on_error": "ignore"}, "MyProcessor.on_error is 'ignore'", "'stop', 'dlq'"),
        ({"max_records_per_batch": 0}, "MyProcessor.max_records_per_batch is 0", "1 or more"),
        ({"max_records_per_batch": "1k"}, "max_records_per_batch is '1k'", "whole number"),
        ({"buckets": 0}, "MyProcessor.buckets is 0", "from 1 to 1024"),
        ({"buckets": 8.0}, "MyProcessor.buckets is 8.0", "checkpoint was started with"),
        ({"name": "my processor"}, "MyProcessor.name is 'my processor'", "letters"),
        ({"inputs": []}, "MyProcessor.inputs is []", "Input("),
        ({"inputs": ["events"]}, "MyProcessor.inputs holds 'events'", "Input("),
        (
            {"inputs": [Input("events", key="a"), Input("events", key="b")]},
            "reads stream 'events' twice",
            "two processors",
        ),
        ({"on_record": ...}, "MyProcessor defines no on_record", "monoid"),
        ({"zero": 0}, "declares part of a monoid but not lift, combine", "combine(self, a, b)"),
        (
            {"zero": 0, "lift": lambda self, r: 1, "combine": lambda self, a, b: a + b},
            "defines both on_record and a monoid",
            "through lift",
        ),
        ({"total": ValueState(set)}, "state MyProcessor.total declares value type set", "JSON"),
        ({"counts": MapState(key=list, value=int)}, "declares key type list", "str, int"),
        ({"items": ListState(dict[int, str])}, "declares value type dict[int, str]", "JSON"),
        (
            {"seen": ValueState(int, ttl="a week")},
            "has ttl 'a week', which is not a duration",
            "3d",
        ),
        ({"seen": ValueState(int, ttl="0s")}, "which is not positive", "ttl"),
    ],
)
def test_a_bad_class_is_refused_when_defined_naming_the_class_and_attribute(
    attributes: dict[str, Any], message: str, hint: str
) -> None:
    with pytest.raises(ProcessorError) as raised:
        define(**attributes)
    assert message in raised.value.message
    assert hint in (raised.value.hint or "")
    assert raised.value.code == "processor"


def test_a_monoid_cannot_take_the_aggregate_name_for_something_else() -> None:
    with pytest.raises(ProcessorError, match="aggregate is taken"):
        define(
            on_record=...,
            zero=0,
            lift=lambda self, record: 1,
            combine=lambda self, a, b: a + b,
            aggregate=lambda self: None,
        )


def test_a_class_without_a_name_is_a_base_checked_in_full_when_run() -> None:
    class Base(Processor):
        inputs = [Input("events", key="k")]
        semantics = "at_least_once"

    class Concrete(Base):
        name = "concrete"

        def on_record(self, key, record, ctx):
            pass

    assert Concrete.semantics == "at_least_once"
    with pytest.raises(ProcessorError, match="Base has no name"):
        Base.validate()


def test_a_bad_option_is_refused_even_on_a_base_class() -> None:
    with pytest.raises(ProcessorError, match=r"Base\.on_error is 'retry'"):

        class Base(Processor):
            on_error = "retry"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"stream": "", "key": "k"}, "the stream must be a non-empty string"),
        ({"stream": "s", "key": 3}, "key 3 is neither a column, nor a tuple of columns"),
        ({"stream": "s", "key": ()}, r"key \(\) is neither a column, nor a tuple of columns"),
        ({"stream": "s", "key": ("k", "")}, "key .'k', ''. is neither a column, nor a tuple"),
        ({"stream": "s", "key": ["k", "j"]}, "key .'k', 'j'. is neither a column, nor a tuple"),
        ({"stream": "s", "key": "k", "time": ""}, "is not a column name"),
        ({"stream": "s", "key": "k", "lateness": "soon"}, "lateness 'soon' is not a duration"),
    ],
)
def test_a_bad_input_is_refused_naming_its_stream(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ProcessorError, match=message):
        Input(**arguments)


def test_an_input_reads_keys_by_columns_or_function_and_times_in_any_platform_form() -> None:
    by_column = Input("s", key="user", time="ts", lateness="10s")
    by_columns = Input("s", key=("user", "page"), time="ts")
    by_function = Input("s", key=lambda record: record["user"].lower(), time="ts")

    assert by_column.key_of({"user": "Ann"}) == "Ann"
    assert by_columns.key_of({"page": "/", "user": "Ann"}) == ("Ann", "/")
    assert by_function.key_of({"user": "Ann"}) == "ann"
    assert by_column.lateness_ms == 10_000
    assert by_column.time_of({"ts": "2026-01-01T00:00:01Z"}) == 1_767_225_601_000
    assert by_column.time_of({"ts": 1_767_225_601}) == 1_767_225_601_000
    with pytest.raises(ProcessorError, match="no key column 'user'"):
        by_column.key_of({})
    with pytest.raises(ProcessorError, match="no key column 'page'"):
        by_columns.key_of({"user": "Ann"})
    with pytest.raises(ProcessorError, match="no event time in column 'ts'"):
        by_column.time_of({"user": "Ann"})


def test_processor_names_are_importable_from_millrace() -> None:
    import millrace

    assert {"Processor", "Input", "ValueState", "ListState", "MapState"} <= set(millrace.__all__)
