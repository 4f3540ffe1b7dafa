"""The `Processor` base class that users subclass, its `Input` declarations, and their checks.

A processor class names itself, declares its inputs, its per-key state and its options, and
defines callbacks: `on_record` for each record and `on_timer` for each timer of a key, or, for
a monoid processor, `zero`, `lift`, `combine` and optionally `on_aggregate`. A class is checked
as soon as it is defined: a class without a `name` is taken as a base for other processors and
is checked again, in full, when an engine is given it (`Processor.validate`).

Example:
    >>> from millrace.processor.state import MapState
    >>> class WindowCounter(Processor):
    ...     name = "window_counter"
    ...     inputs = [Input("queries", key="query", time="ts", lateness="10s")]
    ...     counts = MapState(key=int, value=int)
    ...
    ...     def on_record(self, key, record, ctx):
    ...         bucket = ctx.event_time_ms // 1000 * 1000
    ...         self.counts[bucket] = self.counts.get(bucket, 0) + 1
    ...         ctx.set_timer(f"close-{bucket}", event_time_ms=bucket + 1000)
    ...
    ...     def on_timer(self, key, timer, ctx):
    ...         bucket = timer.time_ms - 1000
    ...         ctx.produce("window_counts",
    ...                     {"query": key, "bucket": bucket, "count": self.counts.pop(bucket)},
    ...                     time_ms=bucket)
    >>> WindowCounter.kind()
    'stateful'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args

from millrace.config.durations import parse_duration_ms
from millrace.errors import ConfigError, ProcessorError, PublishError
from millrace.processor.aggregates import declared_aggregate
from millrace.processor.keys import Key
from millrace.processor.state import StateDeclaration, ValueState
from millrace.records import JsonObject, event_time_ms

if TYPE_CHECKING:
    from millrace.processor.context import Context
    from millrace.processor.timers import Timer

Semantics = Literal["exactly_once", "at_least_once", "at_most_once"]
"""What a processor's productions promise downstream; see docs/processor.md."""

OnError = Literal["stop", "dlq"]
"""What an exception in a processor's code does: stop the app, or dead-letter and go on."""

ProcessorKind = Literal["stateless", "stateful", "monoid"]
"""Stylus's processor kinds: no declared state, declared state, or a monoid aggregate."""

AGGREGATE_STATE = "aggregate"
"""The name of the value state in which a monoid processor keeps each key's aggregate."""

MONOID = "monoid"
"""The option declaring a monoid processor's aggregate (`millrace.processor.aggregates`)."""

_STATES_CACHE = "_millrace_states"
_KIND_CACHE = "_millrace_kind"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_MONOID_PARTS = ("zero", "lift", "combine")
# More buckets than this only add per-group cost: a bucket is the unit Spark's tasks share.
_MAX_BUCKETS = 1024


@dataclass(frozen=True)
class Input:
    """One input stream of a processor: its key extractor, time column and allowed lateness.

    `key` is a column name, a tuple of column names (the key is the tuple of their values), or
    a function from the record (a dict) to the key. `time` is the
    column holding the event time (ISO-8601, or epoch milliseconds or seconds). `lateness` is
    how far behind the largest event time read from its own bucket of the stream a record may
    arrive, as a duration. `max_future` (how far ahead of its arrival a record may be dated)
    and `idle_timeout` (how long a bucket read to its end waits before the wall clock moves
    its time on) default to the settings `events.max_future` and `events.idle_timeout`.

    Example:
        >>> Input("queries", key="query", time="ts", lateness="10s").lateness_ms
        10000
    """

    stream: str
    key: str | tuple[str, ...] | Callable[[JsonObject], Key]
    time: str = "time"
    lateness: str = "0s"
    max_future: str | None = None
    idle_timeout: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.stream, str) or not self.stream:
            raise ProcessorError(
                f"Input({self.stream!r}): the stream must be a non-empty string",
                hint="write Input('stream-name', key=..., time=...)",
            )
        if not _is_column(self.key) and not _are_columns(self.key) and not callable(self.key):
            raise ProcessorError(
                f"Input({self.stream!r}): key {self.key!r} is neither a column, nor a tuple of "
                "columns, nor a function",
                hint="give the name of the key column, a tuple of names (a key of several "
                "columns), or a function from the record to its key",
            )
        if not isinstance(self.time, str) or not self.time:
            raise ProcessorError(
                f"Input({self.stream!r}): time {self.time!r} is not a column name",
                hint="give the name of the column holding the event time",
            )
        for what in ("lateness", "max_future", "idle_timeout"):
            value = getattr(self, what)
            if value is None and what != "lateness":
                continue
            try:
                parse_duration_ms(value, what=what)
            except (ConfigError, AttributeError):
                raise ProcessorError(
                    f"Input({self.stream!r}): {what} {value!r} is not a duration",
                    hint="write a number and a unit, such as 500ms, 10s or 5m",
                ) from None

    @property
    def lateness_ms(self) -> int:
        """The allowed lateness in milliseconds."""
        return parse_duration_ms(self.lateness, what="lateness")

    def key_of(self, record: Mapping[str, object]) -> Key:
        """The key of `record`, by the column or the function.

        Example:
            >>> Input("queries", key="query").key_of({"query": "cats"})
            'cats'
            >>> Input("queries", key=("query", "lang")).key_of({"query": "cats", "lang": "en"})
            ('cats', 'en')
        """
        if callable(self.key):
            return self.key(dict(record))
        if isinstance(self.key, tuple):
            return tuple(self._column(record, name) for name in self.key)
        return self._column(record, self.key)

    def _column(self, record: Mapping[str, object], name: str) -> object:
        if name not in record:
            raise ProcessorError(
                f"a record of {self.stream!r} has no key column {name!r}",
                hint=f"check the records of {self.stream!r}, or the key of its Input",
            )
        return record[name]

    def time_of(self, record: Mapping[str, object]) -> int:
        """The event time of `record` in epoch milliseconds, read from the time column.

        Example:
            >>> Input("queries", key="query", time="ts").time_of({"ts": 1_700_000_000_000})
            1700000000000
        """
        try:
            time_ms = event_time_ms(record, self.time)
        except PublishError as error:
            raise ProcessorError(error.message, hint=error.hint) from None
        if time_ms is None:
            raise ProcessorError(
                f"a record of {self.stream!r} has no event time in column {self.time!r}",
                hint=f"check the records of {self.stream!r}, or the time of its Input",
            )
        return time_ms


class Processor:
    """Base class of processors: per-key callbacks with state, timers and productions.

    Class options: `name` (required; names the app's state and production ids), `inputs` (a
    list of `Input`), `semantics` ("exactly_once" by default, "at_least_once" or
    "at_most_once"), `on_error` ("stop" by default, or "dlq"), `max_records_per_batch`
    (None by default: a micro-batch reads all there is; the SQL option of the same name) and
    `buckets` (the hash buckets its keys are spread over, each one group of Spark's operator
    per micro-batch; None by default: the count its checkpoint was started with, else 8).

    Callbacks run for one key at a time and see only that key's state:

    - `on_record(self, key, record, ctx)`: once per record, `record` being its value (a dict);
    - `on_timer(self, key, timer, ctx)`: once per due timer of the key.

    A monoid processor defines instead `zero` (a class attribute), `lift(self, record)` (the
    record's monoid value) and `combine(self, a, b)` (associative, with `zero` as identity),
    and optionally `on_aggregate(self, key, aggregate, ctx)`; or it declares its aggregate,
    `monoid = Sum("amount")` or a tuple such as `(Count(), Max("amount"))`
    (`millrace.processor.aggregates`), which gives it those three. The engine folds each key's
    records of a micro-batch with `combine` first, then combines that with the stored aggregate
    (`self.aggregate`, a value state) once, and calls `on_aggregate` with the result. The
    aggregate is a `ValueState(Any)` holding JSON-able data; declare `aggregate = ValueState(T)`
    yourself to check its type or give it a `ttl`.

    Example:
        >>> class QueryCounts(Processor):
        ...     name = "query_counts"
        ...     inputs = [Input("queries", key="query")]
        ...     zero = 0
        ...     def lift(self, record): return 1
        ...     def combine(self, a, b): return a + b
        ...     def on_aggregate(self, key, aggregate, ctx):
        ...         ctx.produce("query_totals", {"query": key, "count": aggregate})
        >>> QueryCounts.kind()
        'monoid'
    """

    name: ClassVar[str]
    inputs: ClassVar[list[Input]]
    semantics: ClassVar[Semantics] = "exactly_once"
    on_error: ClassVar[OnError] = "stop"
    max_records_per_batch: ClassVar[int | None] = None
    buckets: ClassVar[int | None] = None

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if MONOID in cls.__dict__:
            _take_declared_monoid(cls)
        if _is_monoid(cls) and not hasattr(cls, AGGREGATE_STATE):
            aggregate: ValueState[Any] = ValueState(Any)  # Any: what combine gives, any JSON
            aggregate.__set_name__(cls, AGGREGATE_STATE)
            setattr(cls, AGGREGATE_STATE, aggregate)
        _check_options(cls)
        if hasattr(cls, "name"):
            cls.validate()

    def on_timer(self, key: Key, timer: Timer, ctx: Context) -> None:
        """Called for each due timer of `key`; override it in a processor that sets timers."""
        raise ProcessorError(
            f"processor {type(self).__name__} set timer {timer.tag!r} but defines no on_timer",
            hint="define on_timer(self, key, timer, ctx), or set no timers",
        )

    @classmethod
    def validate(cls) -> None:
        """Check the class in full, as an engine runs it; raises `ProcessorError` naming the fault.

        Example:
            >>> class Unnamed(Processor):
            ...     inputs = [Input("queries", key="query")]
            ...     def on_record(self, key, record, ctx): pass
            >>> try:
            ...     Unnamed.validate()
            ... except ProcessorError as error:
            ...     print(error.message)
            Unnamed has no name
        """
        _check_options(cls)
        _check_complete(cls)

    @classmethod
    def states(cls) -> dict[str, StateDeclaration]:
        """The declared states by attribute name, a monoid's `aggregate` included."""
        # The engine asks for every key it runs: the walk over the class's namespaces is done
        # once per class, when the class is complete (after its monoid aggregate is added).
        cached = cls.__dict__.get(_STATES_CACHE)
        if cached is not None:
            return dict(cached)
        found: dict[str, StateDeclaration] = {}
        for klass in reversed(cls.__mro__):
            for attribute, value in vars(klass).items():
                if isinstance(value, StateDeclaration):
                    found[attribute] = value
                elif attribute in found:
                    del found[attribute]
        if hasattr(cls, "name"):
            setattr(cls, _STATES_CACHE, dict(found))
        return found

    @classmethod
    def kind(cls) -> ProcessorKind:
        """The processor's kind: "monoid", "stateful" (declared state) or "stateless"."""
        cached: ProcessorKind | None = cls.__dict__.get(_KIND_CACHE)
        if cached is not None:
            return cached
        kind: ProcessorKind = (
            "monoid" if _is_monoid(cls) else "stateful" if cls.states() else "stateless"
        )
        if hasattr(cls, "name"):
            setattr(cls, _KIND_CACHE, kind)
        return kind

    @classmethod
    def input_of(cls, stream: str) -> Input:
        """The `Input` of `stream`; raises `ProcessorError` when the processor does not read it."""
        for source in cls.inputs:
            if source.stream == stream:
                return source
        raise ProcessorError(
            f"processor {cls.__name__} has no input {stream!r}",
            hint="its inputs are " + ", ".join(repr(source.stream) for source in cls.inputs),
        )


def _is_column(key: object) -> bool:
    return isinstance(key, str) and bool(key)


def _are_columns(key: object) -> bool:
    return isinstance(key, tuple) and bool(key) and all(_is_column(name) for name in key)


def _is_monoid(cls: type) -> bool:
    return any(hasattr(cls, part) for part in _MONOID_PARTS)


def _take_declared_monoid(cls: type[Processor]) -> None:
    """Give a class declaring `monoid = ...` its declaration's zero, lift and combine."""
    where = cls.__name__
    written = [part for part in _MONOID_PARTS if part in cls.__dict__]
    if written:
        raise ProcessorError(
            f"{where} declares monoid and also defines " + ", ".join(written),
            hint="declare the aggregate (monoid = Count(), Sum('field'), ...) or write zero, "
            "lift and combine, not both",
        )
    declared = declared_aggregate(cls.__dict__[MONOID], where)
    setattr(cls, MONOID, declared)
    # The class's zero is copied before each use (`execution`), so one value serves all.
    cls.zero = declared.zero()  # type: ignore[attr-defined]
    cls.lift = staticmethod(declared.lift)  # type: ignore[attr-defined]
    cls.combine = staticmethod(declared.combine)  # type: ignore[attr-defined]


def _check_options(cls: type[Processor]) -> None:
    where = cls.__name__
    for option, literal in (("semantics", Semantics), ("on_error", OnError)):
        value = getattr(cls, option)
        allowed = get_args(literal)
        if value not in allowed:
            raise ProcessorError(
                f"{where}.{option} is {value!r}, which is not one of the allowed values",
                hint=f"set {option} to one of " + ", ".join(repr(choice) for choice in allowed),
            )
    cap = cls.max_records_per_batch
    if cap is not None and (type(cap) is not int or cap < 1):
        raise ProcessorError(
            f"{where}.max_records_per_batch is {cap!r}, which is not a number of records",
            hint="set it to a whole number of 1 or more, or leave it out to read all there is",
        )
    buckets = cls.buckets
    if buckets is not None and (type(buckets) is not int or not 1 <= buckets <= _MAX_BUCKETS):
        raise ProcessorError(
            f"{where}.buckets is {buckets!r}, which is not a number of buckets",
            hint=f"set it to a whole number from 1 to {_MAX_BUCKETS}, or leave it out to keep "
            "the count the app's checkpoint was started with",
        )
    if hasattr(cls, "name") and (not isinstance(cls.name, str) or not _NAME.match(cls.name)):
        raise ProcessorError(
            f"{where}.name is {cls.name!r}, which is not a processor name",
            hint="use letters, digits, '_', '.' and '-', starting with a letter or '_'",
        )
    if hasattr(cls, "inputs"):
        _check_inputs(cls)
    for declaration in cls.states().values():
        declaration.validate()
    if _is_monoid(cls):
        _check_monoid(cls)


def _check_inputs(cls: type[Processor]) -> None:
    where = cls.__name__
    inputs = cls.inputs
    if not isinstance(inputs, list | tuple) or not inputs:
        raise ProcessorError(
            f"{where}.inputs is {inputs!r}, not a non-empty list of Input",
            hint="write inputs = [Input('stream', key='column', time='column')]",
        )
    seen: set[str] = set()
    for source in inputs:
        if not isinstance(source, Input):
            raise ProcessorError(
                f"{where}.inputs holds {source!r}, which is not an Input",
                hint="write each input as Input('stream', key='column', time='column')",
            )
        if source.stream in seen:
            raise ProcessorError(
                f"{where}.inputs reads stream {source.stream!r} twice",
                hint="read each stream once; to key one stream two ways, use two processors",
            )
        seen.add(source.stream)


def _check_monoid(cls: type[Processor]) -> None:
    where = cls.__name__
    missing = [part for part in _MONOID_PARTS if not hasattr(cls, part)]
    if missing:
        raise ProcessorError(
            f"{where} declares part of a monoid but not " + ", ".join(missing),
            hint="a monoid processor defines zero (the identity), lift(self, record) and "
            "combine(self, a, b)",
        )
    if hasattr(cls, "on_record"):
        raise ProcessorError(
            f"{where} defines both on_record and a monoid (zero, lift, combine)",
            hint="a monoid processor receives its records through lift; move the per-record "
            "logic there, or drop zero, lift and combine",
        )
    aggregate = getattr(cls, AGGREGATE_STATE, None)
    if not isinstance(aggregate, ValueState):
        raise ProcessorError(
            f"{where}.{AGGREGATE_STATE} is taken by something other than the monoid's aggregate",
            hint=f"a monoid processor keeps its aggregate in self.{AGGREGATE_STATE}; rename "
            "that attribute",
        )


def _check_complete(cls: type[Processor]) -> None:
    where = cls.__name__
    for option in ("name", "inputs"):
        if not hasattr(cls, option):
            raise ProcessorError(
                f"{where} has no {option}",
                hint="a processor sets name = 'its-name' and inputs = [Input(...), ...]",
            )
    if not _is_monoid(cls) and not hasattr(cls, "on_record"):
        raise ProcessorError(
            f"{where} defines no on_record",
            hint="define on_record(self, key, record, ctx); or, for a monoid processor, "
            "declare monoid = Count(), Sum('field'), ... or define zero, lift and combine",
        )
