"""Declared aggregates of monoid processors: `Count`, `Sum`, `Min`, `Max` and `TopK`.

A monoid processor may declare what it aggregates instead of writing `zero`, `lift` and
`combine`: `monoid = Sum("amount")`, or a tuple such as `monoid = (Count(), Max("amount"))`,
whose aggregate is the list of its parts' values. `Processor` takes the declaration's `zero`,
`lift` and `combine` as the class's own, so a declared monoid runs wherever a written one does,
`ProcessorTester` included. Unlike code, a declaration says what it computes, by field: what an
engine needs to compute it with Spark's own aggregation rather than in Python.

`Sum`, `Min`, `Max` and `TopK` read one top-level field of each record, which must hold a
number (a record without it, or with something else there, fails in `lift`, and its
processor's `on_error` says whether it stops the app or goes to the dead letters). Sums of
whole numbers are exact; sums of floats may differ in their last digits between runs that
fold the records in a different order, as floating-point sums do.

Example:
    >>> total = Sum("amount")
    >>> total.combine(total.zero(), total.lift({"amount": 5}))
    5
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from millrace.errors import ProcessorError
from millrace.records import JsonObject

Aggregate = Any  # Any: each declared aggregate's value is JSON of its own shape
Number = int | float


class DeclaredAggregate(ABC):
    """A monoid over records, declared by what it computes: its identity, lift and combine."""

    @abstractmethod
    def zero(self) -> Aggregate:
        """The identity of `combine`, a fresh value each call."""

    @abstractmethod
    def lift(self, record: JsonObject) -> Aggregate:
        """The value of one record; raises `ProcessorError` when the record cannot give one."""

    @abstractmethod
    def combine(self, a: Aggregate, b: Aggregate) -> Aggregate:
        """The aggregate of two aggregates; associative, with `zero()` as its identity."""


@dataclass(frozen=True)
class Count(DeclaredAggregate):
    """The number of records.

    Example:
        >>> Count().combine(Count().lift({}), Count().lift({}))
        2
    """

    def zero(self) -> int:
        """No records: 0."""
        return 0

    def lift(self, record: JsonObject) -> int:
        """One record: 1."""
        return 1

    def combine(self, a: int, b: int) -> int:
        """The two counts added."""
        return a + b


@dataclass(frozen=True)
class Sum(DeclaredAggregate):
    """The sum of a numeric field.

    Example:
        >>> Sum("amount").lift({"amount": 2.5})
        2.5
    """

    field: str

    def __post_init__(self) -> None:
        _check_field(self, self.field)

    def zero(self) -> Number:
        """No records: 0."""
        return 0

    def lift(self, record: JsonObject) -> Number:
        """The record's number."""
        return _number(self, record, self.field)

    def combine(self, a: Number, b: Number) -> Number:
        """The two sums added."""
        return a + b


@dataclass(frozen=True)
class _Extreme(DeclaredAggregate):
    """The least value of a numeric field, or the largest (`_largest`); `None` at first."""

    _largest: ClassVar[bool]
    field: str

    def __post_init__(self) -> None:
        _check_field(self, self.field)

    def zero(self) -> Number | None:
        """No records: None."""
        return None

    def lift(self, record: JsonObject) -> Number:
        """The record's number."""
        return _number(self, record, self.field)

    def combine(self, a: Number | None, b: Number | None) -> Number | None:
        """The lesser of the two, or the larger; None gives way."""
        if a is None or b is None:
            return b if a is None else a
        return max(a, b) if self._largest else min(a, b)


@dataclass(frozen=True)
class Min(_Extreme):
    """The least value of a numeric field; `None` until a record has one.

    Example:
        >>> Min("latency_ms").combine(None, 12)
        12
    """

    _largest = False


@dataclass(frozen=True)
class Max(_Extreme):
    """The largest value of a numeric field; `None` until a record has one.

    Example:
        >>> Max("latency_ms").combine(12, 40)
        40
    """

    _largest = True


@dataclass(frozen=True)
class TopK(DeclaredAggregate):
    """The `k` largest values of a numeric field, largest first; equal values each count.

    Example:
        >>> TopK(2, "score").combine([9, 3], [5])
        [9, 5]
    """

    k: int
    field: str

    def __post_init__(self) -> None:
        if type(self.k) is not int or self.k < 1:
            raise ProcessorError(
                f"TopK({self.k!r}, {self.field!r}): k is not a whole number of 1 or more",
                hint="write TopK(3, 'field') for the 3 largest values of the field",
            )
        _check_field(self, self.field)

    def zero(self) -> list[Number]:
        """No records: []."""
        return []

    def lift(self, record: JsonObject) -> list[Number]:
        """The record's number, alone."""
        return [_number(self, record, self.field)]

    def combine(self, a: list[Number], b: list[Number]) -> list[Number]:
        """The k largest of both lists."""
        return heapq.nlargest(self.k, [*a, *b])


@dataclass(frozen=True)
class Together(DeclaredAggregate):
    """Several declared aggregates at once; the aggregate is the list of their values, in order.

    `Processor` builds it from a tuple (`monoid = (Count(), Sum("amount"))`).

    Example:
        >>> both = Together((Count(), Sum("amount")))
        >>> both.combine([1, 5], both.lift({"amount": 2}))
        [2, 7]
    """

    parts: tuple[DeclaredAggregate, ...]

    def zero(self) -> list[Aggregate]:
        """Each part's zero."""
        return [part.zero() for part in self.parts]

    def lift(self, record: JsonObject) -> list[Aggregate]:
        """Each part's value of the record."""
        return [part.lift(record) for part in self.parts]

    def combine(self, a: list[Aggregate], b: list[Aggregate]) -> list[Aggregate]:
        """Each part combined with its own."""
        return [part.combine(x, y) for part, x, y in zip(self.parts, a, b, strict=True)]


def declared_aggregate(declared: object, where: str) -> DeclaredAggregate:
    """The declared aggregate of a processor's `monoid` option; a tuple gives `Together`.

    Raises `ProcessorError` when `declared` is neither a declared aggregate nor a non-empty
    tuple of them.

    Example:
        >>> declared_aggregate((Count(), Max("amount")), "Spend")
        Together(parts=(Count(), Max(field='amount')))
    """
    if isinstance(declared, DeclaredAggregate):
        return declared
    if (
        isinstance(declared, tuple)
        and declared
        and all(isinstance(part, DeclaredAggregate) for part in declared)
    ):
        return Together(declared)
    raise ProcessorError(
        f"{where}.monoid is {declared!r}, which is not a declared aggregate",
        hint="write monoid = Count(), Sum('field'), Min('field'), Max('field'), "
        "TopK(k, 'field'), or a tuple of them",
    )


def _check_field(aggregate: DeclaredAggregate, field: object) -> None:
    if not isinstance(field, str) or not field:
        raise ProcessorError(
            f"{type(aggregate).__name__}({field!r}): the field is not a non-empty string",
            hint=f"write {type(aggregate).__name__}('field') with the name of a numeric field",
        )


def _number(aggregate: DeclaredAggregate, record: JsonObject, field: str) -> Number:
    # bool is an int to Python, but true is not a number in a JSON record.
    value = record.get(field)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    found = (
        f"the record has no field {field!r}"
        if field not in record
        else f"field {field!r} holds {value!r}, not a number"
    )
    raise ProcessorError(
        f"{aggregate!r}: {found}",
        hint=f"check the records' field {field!r}, or aggregate another field",
    )
