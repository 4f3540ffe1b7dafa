"""Declared aggregates: a monoid processor declaring Count, Sum, Min, Max, TopK or a tuple of
them aggregates what plain Python computes over the same records, whatever the batches and
copies; a record without a number goes to the dead letters or stops the app; a declaration
that is not one is refused when the class is defined."""

# Processor classes declare `inputs` as a list, the way users write them.
# ruff: noqa: RUF012

import heapq
import random

import pytest

from millrace import Count, Input, Max, Min, Processor, Sum, TopK
from millrace.errors import ProcessorError
from millrace.processor.execution import fold
from millrace.records import Record
from millrace.testing import ProcessorTester

T0 = 1_767_225_600_000


class Spending(Processor):
    """Per user: the payments, their total, the smallest, the largest and the two largest."""

    name = "spending"
    inputs = [Input("payments", key="user", time="ts")]
    monoid = (Count(), Sum("amount"), Min("amount"), Max("amount"), TopK(2, "amount"))

    def on_aggregate(self, key, aggregate, ctx):
        ctx.produce("spending", {"user": key, "aggregate": aggregate})


def _payments(count: int) -> list[dict]:
    chosen = random.Random(46)
    return [
        {"user": chosen.choice(["ann", "bob", "cy"]), "amount": chosen.randint(1, 500), "ts": T0}
        for _ in range(count)
    ]


def _expected(payments: list[dict], user: str) -> list:
    amounts = [payment["amount"] for payment in payments if payment["user"] == user]
    return [len(amounts), sum(amounts), min(amounts), max(amounts), heapq.nlargest(2, amounts)]


def test_declared_aggregates_equal_plain_python_over_the_records_whatever_the_batches() -> None:
    payments = _payments(300)
    tester = ProcessorTester(Spending)
    for start in range(0, len(payments), 37):
        tester.feed("payments", payments[start : start + 37])
        tester.run_batch()

    for user in ("ann", "bob", "cy"):
        assert tester.state(user) == {"aggregate": _expected(payments, user)}
    last = {value["user"]: value["aggregate"] for value in tester.values("spending")}
    assert last == {user: _expected(payments, user) for user in ("ann", "bob", "cy")}


def test_a_declared_aggregate_counts_each_record_once_whatever_its_copies() -> None:
    payments = _payments(40)
    records = [
        Record("payments", 0, offset, None, f"p{offset % 40}", None, payments[offset % 40])
        for offset in range(80)
    ]
    tester = ProcessorTester(Spending)
    tester.feed("payments", records[:50])
    tester.run_batch()
    tester.feed("payments", records[50:])
    tester.run_batch()

    assert len(tester.duplicates) == 40
    for user in ("ann", "bob", "cy"):
        assert tester.state(user) == {"aggregate": _expected(payments, user)}


def test_a_fold_in_parts_equals_the_fold_record_by_record() -> None:
    payments = [payment for payment in _payments(60) if payment["user"] == "ann"]
    processor = Spending()
    halves = processor.combine(fold(processor, payments[:25]), fold(processor, payments[25:]))

    assert halves == fold(processor, payments) == _expected(payments, "ann")


def test_a_single_declared_aggregate_is_its_own_value_not_a_list() -> None:
    class Total(Processor):
        name = "total"
        inputs = [Input("payments", key="user", time="ts")]
        monoid = Sum("amount")

    tester = ProcessorTester(Total)
    tester.feed("payments", [{"user": "ann", "amount": 2.5, "ts": T0}] * 2)
    tester.run_batch()

    assert Total.kind() == "monoid"
    assert tester.state("ann") == {"aggregate": 5.0}


@pytest.mark.parametrize(
    ("payment", "error"),
    [
        ({"user": "ann", "ts": T0}, "Sum(field='amount'): the record has no field 'amount'"),
        (
            {"user": "ann", "amount": "12", "ts": T0},
            "Sum(field='amount'): field 'amount' holds '12', not a number",
        ),
        (
            {"user": "ann", "amount": True, "ts": T0},
            "Sum(field='amount'): field 'amount' holds True, not a number",
        ),
    ],
)
def test_a_record_without_a_number_goes_to_the_dead_letters_with_the_field_named(
    payment: dict, error: str
) -> None:
    class Total(Processor):
        name = "total"
        inputs = [Input("payments", key="user", time="ts")]
        on_error = "dlq"
        monoid = Sum("amount")

    tester = ProcessorTester(Total)
    tester.feed("payments", [{"user": "ann", "amount": 3, "ts": T0}, payment])
    tester.run_batch()

    [letter] = tester.dead_letters
    assert letter.error == error
    assert tester.state("ann") == {"aggregate": 3}


def test_a_record_without_a_number_stops_the_app_naming_the_record_by_default() -> None:
    class Total(Processor):
        name = "total"
        inputs = [Input("payments", key="user", time="ts")]
        monoid = Max("amount")

    tester = ProcessorTester(Total)
    tester.feed("payments", [{"user": "ann", "ts": T0}])

    with pytest.raises(ProcessorError, match="offset 0: Max\\(field='amount'\\): the record"):
        tester.run_batch()


def test_a_class_both_declaring_and_writing_its_monoid_is_refused() -> None:
    with pytest.raises(ProcessorError, match="declares monoid and also defines zero, combine"):

        class Both(Processor):
            name = "both"
            inputs = [Input("payments", key="user", time="ts")]
            monoid = Count()
            zero = 0

            def combine(self, a, b):
                return a + b


@pytest.mark.parametrize(
    ("declare", "message", "hint"),
    [
        (lambda: 5, "Bad.monoid is 5, which is not a declared aggregate", "TopK(k, 'field')"),
        (lambda: (), "Bad.monoid is \\(\\), which is not a declared", "or a tuple of them"),
        (lambda: (Count(), "amount"), "which is not a declared aggregate", "Sum('field')"),
        (lambda: Sum(""), "Sum\\(''\\): the field is not a non-empty string", "Sum('field')"),
        (lambda: TopK(0, "amount"), "TopK\\(0, 'amount'\\): k is not a whole", "TopK(3, 'field')"),
    ],
)
def test_a_declaration_that_is_not_an_aggregate_is_refused_with_what_to_write(
    declare, message: str, hint: str
) -> None:
    with pytest.raises(ProcessorError, match=message) as refused:

        class Bad(Processor):
            name = "bad"
            inputs = [Input("payments", key="user", time="ts")]
            monoid = declare()

    assert hint in refused.value.hint
