"""The per-key execution core: one micro-batch of a processor over plain, stored data.

This is the part every runtime shares. The in-memory `ProcessorTester` and the Spark runtime
call the same functions: they hold the stored state of keys (plain JSON-able data), hand it in
with the micro-batch's records, watermark and processing time, and keep what comes back. There
is no global state and no Spark here, so an executor can run it on one key or one bucket:
the serving tables `ctx.lookup` reads come in as a `LookupSource` (`lookups=`).

One micro-batch, `run_batch`:

1. Each record gets its key and event time from its `Input`. A record dated before 1970,
   which Spark's watermark cannot place, is a dead letter, whatever `on_error` says. A record
   whose event time is behind the micro-batch's watermark (`time_ms < watermark_ms`) is late:
   it is not processed and is returned in `BatchOutcome.late`.
2. The other records are grouped by key, in arrival order, and the serving-table keys the
   processor's `lookups` name are fetched from the lookup source, one round trip per table.
   Each key with records, then each key whose stored timers hold a due one (or whose
   remembered ids have expired), runs `run_key` once.
3. Under `exactly_once`, `run_key` first drops the copies: a record whose id the key has
   already seen is returned in `BatchOutcome.duplicates`, not processed. A key remembers the
   ids of its records with their event times until the watermark passes them; a copy that
   comes later is behind the watermark, so it is late (MillWheel's record ids kept in the
   key's own state, with the horizon of `docs/semantics.md`). Records without an id (written
   by a tool other than millrace) are unique by their place in the stream and not remembered.
4. `run_key` runs the records, then the due timers. A monoid processor's records are first
   folded with `combine`, from `zero`, into one partial aggregate; the stored aggregate is
   then read once, combined with it, written once, and given to `on_aggregate`. Due timers
   fire one at a time, earliest first (ties by tag), re-checked after each firing, so a timer
   set while firing that is already due fires in the same pass.
5. The watermark moves between micro-batches only: `watermark_after` gives the next one.

A callback that raises leaves no trace: its state changes, timers and productions are undone.
With `on_error = "stop"` the micro-batch fails with a `ProcessorError` naming the processor,
the key and the record's stream, bucket and offset (or the timer); with `"dlq"` the record
becomes a `DeadLetter` and the batch goes on.

Example:
    >>> from millrace.processor import Input, Processor
    >>> class QueryCounts(Processor):
    ...     name = "query_counts"
    ...     inputs = [Input("queries", key="query", time="ts")]
    ...     zero = 0
    ...     def lift(self, record): return 1
    ...     def combine(self, a, b): return a + b
    >>> records = [Record("queries", 0, offset, None, None, None, {"query": "cats", "ts": 1000})
    ...            for offset in range(3)]
    >>> outcome = run_batch(QueryCounts(), {}, records, watermark_ms=None, processing_time_ms=0)
    >>> outcome.states
    {'cats': {'state': {'aggregate': [3, 0]}}}
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, cast

from millrace.errors import ProcessorError
from millrace.processor.context import Context, Production
from millrace.processor.keys import Key
from millrace.processor.lookups import LookupSource, prefetch
from millrace.processor.processor import AGGREGATE_STATE, Processor
from millrace.processor.state import KeyState, bind_key_state
from millrace.processor.timers import KeyTimers, Timer, has_due_timer
from millrace.records import JsonMapping, JsonObject, Record, before_1970_reason

MAX_TIMER_FIRINGS = 10_000
"""The most timers one key may fire in one micro-batch; more means a timer re-arms itself."""

Aggregate = Any  # Any: a monoid's values are whatever its zero, lift and combine make
"""A monoid processor's value: its `zero`, what `lift` makes of a record, what `combine` gives."""


@dataclass(frozen=True)
class DeadLetter:
    """A record (or a timer) whose callback raised under `on_error = "dlq"`, with the error.

    `key` is None when the key itself could not be read from the record.

    Example:
        >>> from millrace.processor import Input, Processor
        >>> class Ratios(Processor):
        ...     name = "ratios"
        ...     inputs = [Input("queries", key="query", time="ts")]
        ...     on_error = "dlq"
        ...     def on_record(self, key, record, ctx):
        ...         ctx.produce("ratios", {"ratio": 1 / record["n"]})
        >>> record = Record("queries", 0, 7, None, None, 1000, {"query": "cats", "n": 0})
        >>> outcome = run_batch(Ratios(), {}, [record], watermark_ms=None, processing_time_ms=0)
        >>> outcome.dead_letters[0].error
        'ZeroDivisionError: division by zero'
    """

    processor: str
    key: Key
    error: str
    record: Record | None = None
    timer: Timer | None = None


@dataclass(frozen=True)
class KeyOutcome:
    """What one key's run gave: its new stored state, productions and dead letters.

    `state` is None when the key has neither state nor timers left.

    Example:
        >>> from millrace.processor import Input, Processor, ValueState
        >>> class Counter(Processor):
        ...     name = "counter"
        ...     inputs = [Input("queries", key="query")]
        ...     count = ValueState(int)
        ...     def on_record(self, key, record, ctx):
        ...         self.count.set(self.count.get(0) + 1)
        >>> records = [Record("queries", 0, 0, None, None, 1500, {"query": "cats"})]
        >>> run_key(Counter(), "cats", None, records, watermark_ms=None, processing_time_ms=0).state
        {'state': {'count': [1, 0]}}
    """

    state: JsonObject | None
    productions: list[Production] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    duplicates: list[Record] = field(default_factory=list)


@dataclass(frozen=True)
class BatchOutcome:
    """What one micro-batch gave.

    `states` holds the new stored state of every key that ran (None: delete the key's state);
    other keys are unchanged. `duplicates` are the copies of records already processed,
    dropped under `exactly_once`. `max_event_time_ms` is the largest event time per input
    stream and bucket among the batch's records, late ones and copies included, for
    `watermark_after`.

    Example:
        >>> from millrace.processor import Input, Processor
        >>> class Echo(Processor):
        ...     name = "echo"
        ...     inputs = [Input("queries", key="query", time="ts")]
        ...     def on_record(self, key, record, ctx):
        ...         ctx.produce("echoes", record)
        >>> value = {"query": "cats", "ts": 1_767_225_600_500}
        >>> outcome = run_batch(Echo(), {}, [Record("queries", 0, 0, None, "r0", None, value)],
        ...                     watermark_ms=None, processing_time_ms=0)
        >>> outcome.productions[0].stream, outcome.max_event_time_ms
        ('echoes', {('queries', 0): 1767225600500})
    """

    states: dict[Key, JsonObject | None]
    productions: list[Production]
    dead_letters: list[DeadLetter]
    late: list[Record]
    duplicates: list[Record]
    max_event_time_ms: dict[tuple[str, int], int]


def run_batch(
    processor: Processor,
    stored: Mapping[Key, JsonMapping],
    records: Iterable[Record],
    *,
    watermark_ms: int | None,
    processing_time_ms: int,
    timer_keys: Iterable[Key] | None = None,
    lookups: LookupSource | None = None,
) -> BatchOutcome:
    """Run one micro-batch of `processor` over `records`, given the stored state of its keys.

    `stored` maps each key to its stored state, as `KeyOutcome.state` gave it; it must hold
    every key that has state (a bucket's keys, for a runtime that splits keys into buckets).
    Only its `get` is used when `timer_keys` is given: the keys that may have a due timer
    (a runtime that indexes its keys' timers), instead of looking through every key.
    `lookups` is where `ctx.lookup` reads serving tables; without it, a lookup is an error.

    Example:
        >>> from millrace.processor import Input, Processor
        >>> class WindowCloser(Processor):
        ...     name = "window_closer"
        ...     inputs = [Input("queries", key="query", time="ts")]
        ...     def on_record(self, key, record, ctx):
        ...         ctx.set_timer("close", event_time_ms=ctx.event_time_ms // 1000 * 1000 + 1000)
        ...     def on_timer(self, key, timer, ctx):
        ...         ctx.produce("closed", {"query": key})
        >>> value = {"query": "cats", "ts": 1_767_225_600_500}
        >>> record = Record("queries", 0, 0, None, "r0", None, value)
        >>> outcome = run_batch(WindowCloser(), {}, [record],
        ...                     watermark_ms=None, processing_time_ms=0)
        >>> outcome.states["cats"]["timers"]
        {'close': ['event_time', 1767225601000]}
    """
    processor_class = type(processor)
    by_key: dict[Key, list[Record]] = {}
    late: list[Record] = []
    dead_letters: list[DeadLetter] = []
    max_event_time_ms: dict[tuple[str, int], int] = {}
    for record in records:
        try:
            source = processor_class.input_of(record.stream)
            time_ms = record.time_ms if record.time_ms is not None else source.time_of(record.value)
            key = source.key_of(record.value)
            if not isinstance(key, Hashable):
                raise ProcessorError(
                    f"the key of a record of {record.stream!r} is a {type(key).__name__}, "
                    "which cannot be a key",
                    hint="make the Input's key function return a str, an int or a tuple",
                )
        except Exception as error:
            dead_letters.append(_failed_record(processor, None, record, error))
            continue
        unplaced = before_1970_reason(time_ms)
        if unplaced is not None:
            # Bad input, not a failure of the processor: a dead letter whatever `on_error`.
            dead_letters.append(DeadLetter(processor_class.name, key, unplaced, record=record))
            continue
        place = (record.stream, record.bucket)
        max_event_time_ms[place] = max(max_event_time_ms.get(place, time_ms), time_ms)
        if watermark_ms is not None and time_ms < watermark_ms:
            late.append(record)
            continue
        if record.time_ms != time_ms:
            record = replace(record, time_ms=time_ms)
        by_key.setdefault(key, []).append(record)
    candidates = (
        stored.items() if timer_keys is None else ((key, stored.get(key)) for key in timer_keys)
    )
    for key, key_stored in candidates:
        if key not in by_key and (
            has_due_timer(
                (key_stored or {}).get("timers"),
                watermark_ms=watermark_ms,
                processing_time_ms=processing_time_ms,
            )
            or _has_expired_ids(key_stored, watermark_ms)
        ):
            by_key[key] = []
    states: dict[Key, JsonObject | None] = {}
    productions: list[Production] = []
    duplicates: list[Record] = []
    # The batch's lookup keys in one round trip, before the callbacks look them up.
    prefetch(
        lookups,
        getattr(processor_class, "lookups", {}),
        (record.value for key_records in by_key.values() for record in key_records),
    )
    for key, key_records in by_key.items():
        outcome = run_key(
            processor,
            key,
            stored.get(key),
            key_records,
            watermark_ms=watermark_ms,
            processing_time_ms=processing_time_ms,
            lookups=lookups,
        )
        states[key] = outcome.state
        productions.extend(outcome.productions)
        dead_letters.extend(outcome.dead_letters)
        duplicates.extend(outcome.duplicates)
    return BatchOutcome(states, productions, dead_letters, late, duplicates, max_event_time_ms)


def run_key(
    processor: Processor,
    key: Key,
    stored: JsonMapping | None,
    records: Sequence[Record],
    *,
    watermark_ms: int | None,
    processing_time_ms: int,
    lookups: LookupSource | None = None,
) -> KeyOutcome:
    """Run one key's records of a micro-batch, then its due timers, from its stored state.

    `records` are the key's records that are not late, each with its event time set, in
    arrival order. Returns the key's new stored state: `{"state": {...}, "timers": {...},
    "seen": {record id: event time}}`, leaving out empty parts, or None when it has none.
    `lookups` is where the callbacks' `ctx.lookup` reads serving tables.

    Example:
        >>> from millrace.processor import Input, Processor
        >>> class Pages(Processor):
        ...     name = "pages"
        ...     inputs = [Input("clicks", key="user")]
        ...     def on_record(self, key, record, ctx):
        ...         ctx.produce("pages", {"page": record["page"]})
        >>> records = [Record("clicks", 0, 0, None, "r0", 1500, {"user": "u7", "page": "/"})]
        >>> outcome = run_key(Pages(), "u7", None, records, watermark_ms=None, processing_time_ms=0)
        >>> [production.value for production in outcome.productions], outcome.state
        ([{'page': '/'}], {'seen': {'r0': 1500}})
    """
    stored = stored or {}
    run = _KeyRun(processor, key, stored, watermark_ms, processing_time_ms, lookups)
    if type(processor).semantics == "exactly_once":
        records = run.first_copies(records)
    bind_key_state(processor, run.state)
    try:
        if type(processor).kind() == "monoid":
            run.aggregate(records)
        else:
            on_record = cast(_RecordCallback, processor).on_record
            for record in records:
                run.callback(
                    functools.partial(on_record, key, record.value),
                    cause=["record", record_id(record)],
                    event_time_ms=record.time_ms,
                    record=record,
                    failed=[record],
                )
        run.fire_timers()
    finally:
        bind_key_state(processor, None)
    return KeyOutcome(run.stored(), run.productions, run.dead_letters, run.duplicates)


def fold(processor: Processor, values: Iterable[JsonObject]) -> Aggregate:
    """The monoid pre-aggregate of a key's record values: `combine` over `lift`, from `zero`.

    A pure function of the values, so a runtime may compute it any way it likes (vectorised,
    or in parts combined later) before it reads the key's stored aggregate.

    Example:
        >>> from millrace.processor import Input, Processor
        >>> class QueryCounts(Processor):
        ...     name = "query_counts"
        ...     inputs = [Input("queries", key="query")]
        ...     zero = 0
        ...     def lift(self, record): return 1
        ...     def combine(self, a, b): return a + b
        >>> fold(QueryCounts(), [{"query": "cats"}, {"query": "cats"}])
        2
    """
    partial = _fresh_zero(processor)
    for value in values:
        partial = fold_step(processor, partial, value)
    return partial


def watermark_after(
    processor_class: type[Processor],
    max_event_time_ms: Mapping[tuple[str, int], int],
    previous_ms: int | None,
) -> int | None:
    """The low watermark of the next micro-batch, from the largest event time seen per bucket.

    Per bucket of an input stream, the largest event time seen minus the input's lateness;
    the smallest of those over the buckets that have seen a record (as the Spark runtime
    takes the least over its buckets' watermarks); never going back.

    Example:
        >>> from millrace.processor import Input, Processor
        >>> class Pages(Processor):
        ...     name = "pages"
        ...     inputs = [Input("clicks", key="user", time="ts", lateness="10s")]
        ...     def on_record(self, key, record, ctx): pass
        >>> watermark_after(Pages, {("clicks", 0): 25_000, ("clicks", 1): 31_000}, None)
        15000
    """
    lateness_ms = {source.stream: source.lateness_ms for source in processor_class.inputs}
    candidates = [
        time_ms - lateness_ms[stream]
        for (stream, _), time_ms in max_event_time_ms.items()
        if stream in lateness_ms
    ]
    if not candidates:
        return previous_ms
    watermark = min(candidates)
    return watermark if previous_ms is None else max(previous_ms, watermark)


def record_id(record: Record) -> str:
    """The id that causes a production from `record`: its own id, else stream/bucket/offset.

    Example:
        >>> record_id(Record("queries", 0, 41, None, None, 1000, {}))
        'queries/0/41'
    """
    if record.id is not None:
        return record.id
    return f"{record.stream}/{record.bucket}/{record.offset}"


class _KeyRun:
    """One key's state, timers, productions and dead letters while `run_key` runs it."""

    def __init__(
        self,
        processor: Processor,
        key: Key,
        stored: JsonMapping,
        watermark_ms: int | None,
        processing_time_ms: int,
        lookups: LookupSource | None,
    ) -> None:
        self.processor = processor
        self.lookups = lookups
        self.key = key
        self.name = type(processor).name
        self.watermark_ms = watermark_ms
        self.processing_time_ms = processing_time_ms
        self.state = KeyState(
            type(processor).states(), stored.get("state"), now_ms=processing_time_ms
        )
        self.timers = KeyTimers(stored.get("timers"))
        self.seen: dict[str, int] = {
            record_id: time_ms
            for record_id, time_ms in stored.get("seen", {}).items()
            if watermark_ms is None or time_ms >= watermark_ms
        }
        self.productions: list[Production] = []
        self.dead_letters: list[DeadLetter] = []
        self.duplicates: list[Record] = []
        self.undo_failures = type(processor).on_error == "dlq"

    def first_copies(self, records: Sequence[Record]) -> list[Record]:
        """The records whose ids the key has not seen, remembering them; copies go aside."""
        first: list[Record] = []
        for record in records:
            if record.id is None:
                first.append(record)
            elif record.id in self.seen:
                self.duplicates.append(record)
            else:
                self.seen[record.id] = record.time_ms  # type: ignore[assignment]
                first.append(record)
        return first

    def callback(
        self,
        call: Callable[[Context], None],
        *,
        cause: Sequence[str | int],
        event_time_ms: int | None,
        record: Record | None = None,
        timer: Timer | None = None,
        failed: Sequence[Record] = (),
    ) -> bool:
        """Run one user callback as a unit; on failure undo it, then stop or dead-letter."""
        ctx = Context(
            processor=self.name,
            key=self.key,
            cause=cause,
            timers=self.timers,
            watermark_ms=self.watermark_ms,
            processing_time_ms=self.processing_time_ms,
            event_time_ms=event_time_ms,
            record=record,
            lookups=self.lookups,
        )
        if self.undo_failures:
            state_before = self.state.snapshot()
            timers_before = self.timers.snapshot()
        try:
            call(ctx)
        except Exception as error:
            if not self.undo_failures:
                raise _stop_error(self.processor, self.key, failed, timer, error) from error
            self.state.restore(state_before)
            self.timers.restore(timers_before)
            if timer is not None:
                self.dead_letters.append(
                    DeadLetter(self.name, self.key, _error_text(error), timer=timer)
                )
            self.dead_letters.extend(
                _failed_record(self.processor, self.key, failed_record, error)
                for failed_record in failed
            )
            return False
        self.productions.extend(ctx.productions)
        return True

    def aggregate(self, records: Sequence[Record]) -> None:
        """Fold the records, then read, combine and write the stored aggregate once."""
        processor = self.processor
        folded: list[Record] = []
        partial = _fresh_zero(processor)
        for record in records:
            try:
                partial = fold_step(processor, partial, record.value)
            except Exception as error:
                if not self.undo_failures:
                    raise _stop_error(processor, self.key, [record], None, error) from error
                self.dead_letters.append(_failed_record(processor, self.key, record, error))
                continue
            folded.append(record)
        if not folded:
            return

        def apply(ctx: Context) -> None:
            handle = getattr(processor, AGGREGATE_STATE)
            stored = handle.get(_fresh_zero(processor))
            combined = cast(_Monoid, processor).combine(stored, partial)
            handle.set(combined)
            on_aggregate = getattr(processor, "on_aggregate", None)
            if on_aggregate is not None:
                on_aggregate(self.key, combined, ctx)

        self.callback(
            apply,
            cause=["aggregate", _digest(sorted(record_id(record) for record in folded))],
            event_time_ms=max(record.time_ms for record in folded),  # type: ignore[type-var]
            failed=folded,
        )

    def fire_timers(self) -> None:
        """Fire the key's due timers, earliest first, until none is due."""
        for _ in range(MAX_TIMER_FIRINGS):
            timer = self.timers.pop_next_due(
                watermark_ms=self.watermark_ms, processing_time_ms=self.processing_time_ms
            )
            if timer is None:
                return
            self.callback(
                functools.partial(self.processor.on_timer, self.key, timer),
                cause=["timer", timer.domain, timer.tag, timer.time_ms],
                event_time_ms=timer.time_ms,
                timer=timer,
            )
        raise ProcessorError(
            f"processor {self.name!r} fired {MAX_TIMER_FIRINGS} timers for key {self.key!r} in "
            "one micro-batch",
            hint="a timer keeps setting a timer that is already due; set the next one after "
            "the watermark or the clock",
        )

    def stored(self) -> JsonObject | None:
        parts = (("state", self.state.stored()), ("timers", self.timers.stored()))
        stored = {part: value for part, value in (*parts, ("seen", self.seen)) if value}
        return stored or None


def _has_expired_ids(stored: JsonMapping | None, watermark_ms: int | None) -> bool:
    """True when a key remembers a record id whose event time the watermark has passed."""
    if watermark_ms is None or not stored:
        return False
    return any(time_ms < watermark_ms for time_ms in stored.get("seen", {}).values())


class _RecordCallback(Protocol):
    """What a processor of any kind but a monoid defines: its callback for each record."""

    def on_record(self, key: Key, record: JsonObject, ctx: Context) -> None: ...


class _Monoid(Protocol):
    """What a monoid processor defines (`Processor.kind` tells it by these names)."""

    zero: Aggregate

    def lift(self, record: JsonObject) -> Aggregate: ...

    def combine(self, a: Aggregate, b: Aggregate) -> Aggregate: ...


def _fresh_zero(processor: Processor) -> Aggregate:
    """A monoid's `zero` that callers may change: a copy, unless it cannot be changed."""
    zero = cast(_Monoid, processor).zero
    if zero is None or type(zero) in (int, float, str, bool):
        return zero
    return copy.deepcopy(zero)


def fold_step(processor: Processor, partial: Aggregate, value: JsonObject) -> Aggregate:
    """One step of `fold`: `combine(partial, lift(value))`.

    Example:
        >>> from millrace.processor import Input, Processor
        >>> class QueryCounts(Processor):
        ...     name = "query_counts"
        ...     inputs = [Input("queries", key="query")]
        ...     zero = 0
        ...     def lift(self, record): return 1
        ...     def combine(self, a, b): return a + b
        >>> fold_step(QueryCounts(), 2, {"query": "cats"})
        3
    """
    monoid = cast(_Monoid, processor)
    return monoid.combine(partial, monoid.lift(value))


def _failed_record(processor: Processor, key: Key, record: Record, error: Exception) -> DeadLetter:
    if type(processor).on_error != "dlq":
        raise _stop_error(processor, key, [record], None, error) from error
    return DeadLetter(type(processor).name, key, _error_text(error), record=record)


def _stop_error(
    processor: Processor,
    key: Key,
    records: Sequence[Record],
    timer: Timer | None,
    error: Exception,
) -> ProcessorError:
    processor_class = type(processor)
    if timer is not None:
        where = f"timer {timer.tag!r} ({timer.domain} {timer.time_ms})"
    else:
        first = records[0]
        where = (
            f"record {record_id(first)!r} of stream {first.stream!r}, bucket {first.bucket}, "
            f"offset {first.offset}"
        )
        if len(records) > 1:
            where = f"the aggregate of {len(records)} records, the first being {where}"
    key_text = "an unknown key" if key is None else f"key {key!r}"
    return ProcessorError(
        f"processor {processor_class.name!r} failed on {key_text}, {where}: {_error_text(error)}",
        hint="fix the processor's code and restart the app: it resumes at this record; or set "
        f"on_error = 'dlq' on {processor_class.__name__} to dead-letter failing records and "
        "go on",
    )


def _error_text(error: Exception) -> str:
    if isinstance(error, ProcessorError):
        return error.message
    return f"{type(error).__name__}: {error}"


def _digest(parts: list[str]) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]
