"""The in-memory processor tester: run a processor class without Spark or Kafka.

`ProcessorTester` runs a processor through the same execution core as the Spark runtime
(`millrace.processor.execution`): feed records, move the watermark and the clock, run
micro-batches, peek and set state, and collect productions, late records and dead letters.
Importing it loads no Spark, Kafka or Redis client.

Example:
    >>> from millrace.processor import Input, Processor
    >>> class Echo(Processor):
    ...     name = "echo"
    ...     inputs = [Input("queries", key="query", time="ts")]
    ...     def on_record(self, key, record, ctx):
    ...         ctx.produce("echoes", {"query": key})
    >>> tester = ProcessorTester(Echo)
    >>> len(tester.feed("queries", [{"query": "cats", "ts": 1_767_225_600_500}]))
    1
    >>> tester.run_batch().late
    []
    >>> tester.values("echoes")
    [{'query': 'cats'}]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from millrace.config.durations import parse_duration_ms
from millrace.config.settings import Settings
from millrace.errors import ProcessorError
from millrace.processor.context import Production
from millrace.processor.execution import BatchOutcome, DeadLetter, run_batch, watermark_after
from millrace.processor.keys import Key
from millrace.processor.lookups import TABLE_PREFIX, MemoryTables, Tables
from millrace.processor.processor import Processor
from millrace.processor.state import KeyState, MapState, bind_key_state
from millrace.processor.timers import KeyTimers, Timer
from millrace.records import JsonObject, Record, future_dated_reason

__all__ = ["ProcessorTester"]


class ProcessorTester:
    """Runs a processor in memory, micro-batch by micro-batch, with no Spark and no Kafka.

    It calls the same execution core as the Spark runtime (`millrace.processor.execution`),
    so a scenario gives the same productions, state, late records and dead letters here as on
    Spark. Records you `feed` wait until `run_batch` runs them as one micro-batch; the watermark
    moves between micro-batches, from the event times seen (or `advance_watermark`), and the
    processing-time clock moves only when you `advance_clock`.

    Times are epoch milliseconds (a number below 1e11 in a record reads as seconds, as
    everywhere in millrace); `T0` below is 2026-01-01T00:00:00Z.

    Example:
        >>> from millrace.processor import Input, MapState, Processor
        >>> T0 = 1_767_225_600_000
        >>> class WindowCounter(Processor):
        ...     name = "window_counter"
        ...     inputs = [Input("queries", key="query", time="ts")]
        ...     counts = MapState(key=int, value=int)
        ...     def on_record(self, key, record, ctx):
        ...         bucket = ctx.event_time_ms // 1000 * 1000
        ...         self.counts[bucket] = self.counts.get(bucket, 0) + 1
        ...         ctx.set_timer(f"close-{bucket}", event_time_ms=bucket + 1000)
        ...     def on_timer(self, key, timer, ctx):
        ...         bucket = timer.time_ms - 1000
        ...         ctx.produce("window_counts",
        ...                     {"query": key, "bucket": bucket, "count": self.counts.pop(bucket)})
        >>> tester = ProcessorTester(WindowCounter)
        >>> len(tester.feed("queries", [{"query": "cats", "ts": T0 + 500},
        ...                             {"query": "cats", "ts": T0 + 700}]))
        2
        >>> tester.run_batch().productions
        []
        >>> tester.advance_watermark(T0 + 1000)
        >>> len(tester.fire_timers().productions)
        1
        >>> tester.values("window_counts")
        [{'query': 'cats', 'bucket': 1767225600000, 'count': 2}]
    """

    def __init__(
        self,
        processor: type[Processor],
        *,
        clock_ms: int = 0,
        tables: Tables | None = None,
    ) -> None:
        """`tables` gives the serving tables `ctx.lookup` reads: table -> key -> row."""
        processor.validate()
        self.processor = processor
        self.tables = MemoryTables(tables or {})
        self.clock_ms = clock_ms
        self.watermark_ms: int | None = None
        self.productions: dict[str, list[Production]] = {}
        self.late: list[Record] = []
        self.duplicates: list[Record] = []
        self.dead_letters: list[DeadLetter] = []
        self._instance = processor()
        self._stored: dict[Key, JsonObject] = {}
        self._pending: list[Record] = []
        self._next_offset: dict[tuple[str, int], int] = {}
        self._max_event_time_ms: dict[tuple[str, int], int] = {}

    def feed(
        self,
        stream: str,
        records: Iterable[Mapping[str, object] | Record],
        *,
        bucket: int = 0,
        arrival_ms: int | None = None,
    ) -> list[Record]:
        """Queue `records` of input `stream` for the next micro-batch, in order; returns them.

        A dict gets bucket `bucket` and the next offset of that bucket, and no id: like a
        record written without one, it is known by its place, `stream/bucket/offset`. Pass a
        `Record` to choose its id, bucket and offset yourself (a `Record` with the id of one
        already processed is a copy, which `exactly_once` drops). With `arrival_ms`, the
        records' arrival time, a record dated more than its input's `max_future` ahead of it
        (5 minutes unless the `Input` says) goes to `dead_letters` with the reason the Spark
        runtime gives, as it would there, and is not queued.

        Example:
            >>> from millrace.processor import Input, Processor
            >>> class Echo(Processor):
            ...     name = "echo"
            ...     inputs = [Input("queries", key="query", time="ts")]
            ...     def on_record(self, key, record, ctx):
            ...         ctx.produce("echoes", {"query": key})
            >>> tester = ProcessorTester(Echo)
            >>> [record.offset for record in tester.feed("queries", [{"query": "cats"}] * 2)]
            [0, 1]
        """
        self.processor.input_of(stream)
        queued = []
        for record in records:
            if not isinstance(record, Record):
                offset = self._next_offset.get((stream, bucket), 0)
                self._next_offset[(stream, bucket)] = offset + 1
                record = Record(stream, bucket, offset, None, None, None, dict(record))
            elif record.stream != stream:
                raise ProcessorError(
                    f"feed({stream!r}) got a record of stream {record.stream!r}",
                    hint=f"feed records of {record.stream!r} with feed({record.stream!r}, ...)",
                )
            reason = self._future_dated(record, arrival_ms)
            if reason is None:
                queued.append(record)
            else:
                self.dead_letters.append(DeadLetter(self.processor.name, None, reason, record))
        self._pending.extend(queued)
        return queued

    def _future_dated(self, record: Record, arrival_ms: int | None) -> str | None:
        if arrival_ms is None:
            return None
        source = self.processor.input_of(record.stream)
        time_ms = record.time_ms if record.time_ms is not None else source.time_of(record.value)
        max_future = source.max_future or Settings().events_max_future
        return future_dated_reason(
            time_ms, arrival_ms, parse_duration_ms(max_future, what="max_future")
        )

    def advance_watermark(self, to_ms: int) -> None:
        """Move the watermark of the next micro-batches to `to_ms`; it never goes back.

        Example:
            >>> from millrace.processor import Input, Processor
            >>> class Echo(Processor):
            ...     name = "echo"
            ...     inputs = [Input("queries", key="query", time="ts")]
            ...     def on_record(self, key, record, ctx):
            ...         ctx.produce("echoes", {"query": key})
            >>> tester = ProcessorTester(Echo)
            >>> tester.advance_watermark(1_767_225_602_000)
            >>> _ = tester.feed("queries", [{"query": "cats", "ts": 1_767_225_601_500}])
            >>> [record.value for record in tester.run_batch().late]
            [{'query': 'cats', 'ts': 1767225601500}]
        """
        if self.watermark_ms is not None and to_ms < self.watermark_ms:
            raise ProcessorError(
                f"the watermark is at {self.watermark_ms} and cannot go back to {to_ms}",
                hint="a watermark only moves forward; give a time at or after it",
            )
        self.watermark_ms = to_ms

    def advance_clock(self, to_ms: int) -> None:
        """Move the processing-time clock of the next micro-batches to `to_ms`.

        Example:
            >>> from millrace.processor import Input, Processor
            >>> class Idle(Processor):
            ...     name = "idle"
            ...     inputs = [Input("clicks", key="user")]
            ...     def on_record(self, key, record, ctx):
            ...         ctx.set_timer("idle", processing_time_ms=ctx.processing_time_ms + 30_000)
            ...     def on_timer(self, key, timer, ctx):
            ...         ctx.produce("idle_users", {"user": key})
            >>> tester = ProcessorTester(Idle)
            >>> _ = tester.feed("clicks", [{"user": "u7", "time": 1_767_225_600_000}])
            >>> _ = tester.run_batch()
            >>> tester.advance_clock(tester.clock_ms + 30_000)
            >>> tester.fire_timers().productions[0].value
            {'user': 'u7'}
        """
        if to_ms < self.clock_ms:
            raise ProcessorError(
                f"the clock is at {self.clock_ms} and cannot go back to {to_ms}",
                hint="the processing-time clock only moves forward; give a time at or after it",
            )
        self.clock_ms = to_ms

    def run_batch(self) -> BatchOutcome:
        """Run the queued records as one micro-batch, then move the watermark past them.

        Productions, late records, dropped copies and dead letters are also added to
        `productions`, `late`, `duplicates` and `dead_letters`.

        Example:
            >>> from millrace.processor import Input, Processor
            >>> class Echo(Processor):
            ...     name = "echo"
            ...     inputs = [Input("queries", key="query", time="ts")]
            ...     def on_record(self, key, record, ctx):
            ...         ctx.produce("echoes", {"query": key})
            >>> tester = ProcessorTester(Echo)
            >>> _ = tester.feed("queries", [{"query": "cats", "ts": 1_767_225_600_500}])
            >>> outcome = tester.run_batch()
            >>> outcome.late, tester.watermark_ms
            ([], 1767225600500)
        """
        records, self._pending = self._pending, []
        outcome = run_batch(
            self._instance,
            self._stored,
            records,
            watermark_ms=self.watermark_ms,
            processing_time_ms=self.clock_ms,
            lookups=self.tables,
        )
        for key, stored in outcome.states.items():
            if stored is None:
                self._stored.pop(key, None)
            else:
                self._stored[key] = stored
        for production in outcome.productions:
            self.productions.setdefault(production.stream, []).append(production)
        self.late.extend(outcome.late)
        self.duplicates.extend(outcome.duplicates)
        self.dead_letters.extend(outcome.dead_letters)
        for place, time_ms in outcome.max_event_time_ms.items():
            self._max_event_time_ms[place] = max(
                self._max_event_time_ms.get(place, time_ms), time_ms
            )
        self.watermark_ms = watermark_after(
            self.processor, self._max_event_time_ms, self.watermark_ms
        )
        return outcome

    def fire_timers(self) -> BatchOutcome:
        """Run a micro-batch of no records: fire the timers that are due; queued records wait.

        Example:
            >>> from millrace.processor import Input, Processor
            >>> class Closer(Processor):
            ...     name = "closer"
            ...     inputs = [Input("queries", key="query", time="ts")]
            ...     def on_record(self, key, record, ctx):
            ...         ctx.set_timer("close", event_time_ms=ctx.event_time_ms + 1000)
            ...     def on_timer(self, key, timer, ctx):
            ...         ctx.produce("closed", {"query": key})
            >>> tester = ProcessorTester(Closer)
            >>> _ = tester.feed("queries", [{"query": "cats", "ts": 1_767_225_600_000}])
            >>> _ = tester.run_batch()
            >>> tester.advance_watermark(1_767_225_601_000)
            >>> [production.value for production in tester.fire_timers().productions]
            [{'query': 'cats'}]
        """
        pending, self._pending = self._pending, []
        try:
            return self.run_batch()
        finally:
            self._pending = pending

    def state(self, key: Key) -> JsonObject:
        """Every declared state of `key`, as a callback would read it now.

        Values, lists and dicts by state name (a monoid's aggregate under "aggregate"); None
        or empty when unset or expired.

        Example:
            >>> from millrace.processor import Input, Processor, ValueState
            >>> class Totals(Processor):
            ...     name = "totals"
            ...     inputs = [Input("orders", key="user", time="ts")]
            ...     total = ValueState(int)
            ...     def on_record(self, key, record, ctx):
            ...         total = self.total.get(0) + record["amount"]
            ...         self.total.set(total)
            ...         ctx.produce_to_table("user_totals", {"user": key, "total": total})
            >>> tester = ProcessorTester(Totals)
            >>> _ = tester.feed("orders", [{"user": "u1", "amount": 3, "ts": 1_767_225_600_000}])
            >>> _ = tester.run_batch()
            >>> tester.state("u1")
            {'total': 3}
        """
        return self._key_state(key).visible()

    def set_state(self, key: Key, **values: object) -> None:
        """Set states of `key` by name, as a callback would write them.

        Values are type-checked and stamped with the clock; a map state is replaced by the
        dict given.

        Example:
            >>> from millrace.processor import Input, Processor, ValueState
            >>> class Totals(Processor):
            ...     name = "totals"
            ...     inputs = [Input("orders", key="user", time="ts")]
            ...     total = ValueState(int)
            ...     def on_record(self, key, record, ctx):
            ...         total = self.total.get(0) + record["amount"]
            ...         self.total.set(total)
            ...         ctx.produce_to_table("user_totals", {"user": key, "total": total})
            >>> tester = ProcessorTester(Totals)
            >>> tester.set_state("u1", total=4)
            >>> _ = tester.feed("orders", [{"user": "u1", "amount": 3, "ts": 1_767_225_600_000}])
            >>> _ = tester.run_batch()
            >>> tester.state("u1")
            {'total': 7}
        """
        state = self._key_state(key)
        bind_key_state(self._instance, state)
        try:
            for name, value in values.items():
                declaration = state.declarations.get(name)
                if declaration is None:
                    raise ProcessorError(
                        f"{self.processor.__name__} declares no state {name!r}",
                        hint="its states are " + ", ".join(sorted(state.declarations)),
                    )
                handle = getattr(self._instance, name)
                if isinstance(declaration, MapState):
                    handle.clear()
                    handle.update(value)
                else:
                    handle.set(value)
        finally:
            bind_key_state(self._instance, None)
        stored = {**self._stored.get(key, {}), "state": state.stored()}
        self._stored[key] = {part: value for part, value in stored.items() if value}

    def timers(self, key: Key) -> list[Timer]:
        """The pending timers of `key`, in firing order.

        Example:
            >>> from millrace.processor import Input, Processor
            >>> class Closer(Processor):
            ...     name = "closer"
            ...     inputs = [Input("queries", key="query", time="ts")]
            ...     def on_record(self, key, record, ctx):
            ...         ctx.set_timer("close", event_time_ms=ctx.event_time_ms + 1000)
            ...     def on_timer(self, key, timer, ctx):
            ...         ctx.produce("closed", {"query": key})
            >>> tester = ProcessorTester(Closer)
            >>> _ = tester.feed("queries", [{"query": "cats", "ts": 1_767_225_600_000}])
            >>> _ = tester.run_batch()
            >>> tester.timers("cats")
            [Timer(tag='close', time_ms=1767225601000, domain='event_time')]
        """
        return KeyTimers(self._stored.get(key, {}).get("timers")).pending()

    def values(self, stream: str) -> list[JsonObject]:
        """The values produced to `stream` so far, in order.

        Example:
            >>> from millrace.processor import Input, Processor
            >>> class Echo(Processor):
            ...     name = "echo"
            ...     inputs = [Input("queries", key="query", time="ts")]
            ...     def on_record(self, key, record, ctx):
            ...         ctx.produce("echoes", {"query": key})
            >>> tester = ProcessorTester(Echo)
            >>> _ = tester.feed("queries", [{"query": "cats", "ts": 1_767_225_600_000},
            ...                             {"query": "dogs", "ts": 1_767_225_600_000}])
            >>> _ = tester.run_batch()
            >>> tester.values("echoes")
            [{'query': 'cats'}, {'query': 'dogs'}]
        """
        return [production.value for production in self.productions.get(stream, [])]

    def table_rows(self, table: str) -> list[JsonObject]:
        """The rows produced to serving table `table` (`ctx.produce_to_table`), in order.

        Example:
            >>> from millrace.processor import Input, Processor, ValueState
            >>> class Totals(Processor):
            ...     name = "totals"
            ...     inputs = [Input("orders", key="user", time="ts")]
            ...     total = ValueState(int)
            ...     def on_record(self, key, record, ctx):
            ...         total = self.total.get(0) + record["amount"]
            ...         self.total.set(total)
            ...         ctx.produce_to_table("user_totals", {"user": key, "total": total})
            >>> tester = ProcessorTester(Totals)
            >>> _ = tester.feed("orders", [{"user": "u1", "amount": 3, "ts": 1_767_225_600_000},
            ...                            {"user": "u1", "amount": 4, "ts": 1_767_225_600_000}])
            >>> _ = tester.run_batch()
            >>> tester.table_rows("user_totals")
            [{'user': 'u1', 'total': 3}, {'user': 'u1', 'total': 7}]
        """
        return self.values(f"{TABLE_PREFIX}{table}")

    def _key_state(self, key: Key) -> KeyState:
        return KeyState(
            self.processor.states(),
            self._stored.get(key, {}).get("state"),
            now_ms=self.clock_ms,
        )
