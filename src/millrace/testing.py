"""Testing apps: run a SQL app over given records on the real bus and Spark, get its outputs.

`SqlAppTester` gives every run streams and checkpoints of its own, publishes the records you
pass to the app's inputs, runs the app until it has read them all, and returns what it wrote:
the rows of its result tables and the records of its output streams, with the dead letters
of its inputs and the late rows its tables dropped.

`ProcessorTester` runs a processor class in memory, without Spark or Kafka, through the same
execution core as the Spark runtime: feed records, move the watermark and the clock, run
micro-batches, peek and set state, and collect productions, late records and dead letters.

Example:
    >>> tester = SqlAppTester(Path("examples/top_events.sql"), spark=spark, workspace=workspace)
    >>> result = tester.run({"events_score": [  # doctest: +SKIP
    ...     {"event_time": "2026-01-01T00:00:10Z", "event": "goal", "category": "sports",
    ...      "score": 1.0}]})
    >>> result.tables["top_events_5min"][0]["n"]  # doctest: +SKIP
    1
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream, dead_letter_stream
from millrace.config.durations import parse_duration_ms
from millrace.config.settings import Settings
from millrace.config.workspace import Workspace
from millrace.errors import ProcessorError
from millrace.processor.context import Production
from millrace.processor.execution import BatchOutcome, DeadLetter, run_batch, watermark_after
from millrace.processor.lookups import TABLE_PREFIX, MemoryTables
from millrace.processor.processor import Processor
from millrace.processor.state import KeyState, MapState, bind_key_state
from millrace.processor.timers import KeyTimers, Timer
from millrace.records import Record, event_time_ms, future_dated_reason
from millrace.runtime.sql_apps import query_result_table, result_table_path, start_sql_app
from millrace.sql.parser import SqlApp, load_app, parse_app

CLOSING_RECORD_ID = "millrace-testing-close-windows"
"""The id of the record that `run` appends to close the last windows; never in the outputs."""


@dataclass(frozen=True)
class SqlAppResult:
    """What one run of a SQL app wrote, keyed by the names the app file uses.

    `late_rows` counts, per result table, the rows dropped for coming after the watermark
    closed their window (see `RunningApp.late_rows`). `app` is the app as it ran, with the
    run's own name and streams: to run it again over the same records, such as in batch,
    under a name of its own.
    """

    tables: dict[str, list[dict[str, Any]]]
    streams: dict[str, list[dict[str, Any]]]
    dead_letters: dict[str, int]
    late_rows: dict[str, int]
    app: SqlApp


class SqlAppTester:
    """Runs a SQL app (a path, the app's text, or a parsed app) over records you give it."""

    def __init__(
        self, app: SqlApp | Path | str, *, spark: SparkSession, workspace: Workspace
    ) -> None:
        if isinstance(app, Path):
            app = load_app(app)
        elif isinstance(app, str):
            app = parse_app(app)
        self.app = app
        self.spark = spark
        self.workspace = workspace

    def run(
        self,
        records: Mapping[str, Iterable[Mapping[str, Any]]],
        *,
        close_windows: bool = True,
        batch_size: int | None = None,
    ) -> SqlAppResult:
        """Publish `records` (input table name → events) and run the app over them.

        With `close_windows`, a last record far enough ahead in event time is appended to each
        input, so that the watermark passes every window holding your records and mode
        'final' tables emit them. That record is left out of the output streams and, being
        in a window that never closes, out of 'final' tables; a table in mode 'updates' would
        show it, so turn `close_windows` off for apps that have one.

        By default the app reads all the records in one micro-batch, and then none is late:
        the watermark moves only between micro-batches. With `batch_size`, each micro-batch
        reads at most that many records of an input, in the order given (each input is a
        stream of one bucket), so that records behind the watermark are dropped as a streaming run
        would drop them, and counted in `SqlAppResult.late_rows`.

        Example:
            >>> result = tester.run({"events_score": events}, batch_size=2)  # doctest: +SKIP
            >>> result.late_rows  # doctest: +SKIP
            {'top_events_5min': 1}
        """
        suffix = uuid.uuid4().hex[:8]
        app, renamed = _isolated(self.app, suffix)
        settings = self.workspace.settings
        for stream in renamed.values():
            # One bucket, so that the closing record moves the input's low watermark, which
            # is the least over its buckets.
            create_stream(settings, stream, buckets=1, retention="1d")
        inputs = []
        for source in app.inputs:
            events = list(records.get(source.name, ()))
            with Publisher(source.stream, settings=settings, time_field=source.time) as publisher:
                for event in events:
                    publisher.send(event)
                if close_windows and events:
                    closing_ms = _closing_ms(self.app, source.time, events, source.lateness)
                    # Events dated near now close their windows with a record dated ahead of
                    # the wall clock: the input allows it rather than dead-lettering it.
                    ahead_ms = closing_ms - int(time.time() * 1000) + 60_000
                    if ahead_ms > publisher.max_future_ms:
                        publisher.max_future_ms = ahead_ms
                        source = replace(source, max_future=f"{ahead_ms}ms")
                    publisher.send({source.time: closing_ms}, record_id=CLOSING_RECORD_ID)
            inputs.append(source)
        app = replace(app, inputs=tuple(inputs))
        running = start_sql_app(
            self.spark, self.workspace, app, available_now=True, max_records_per_batch=batch_size
        )
        running.await_termination()
        tables = {
            table.name: query_result_table(self.spark, self.workspace, app.name, table.name)
            if (result_table_path(self.workspace, app.name, table.name) / "_delta_log").is_dir()
            else []
            for table in app.tables
        }
        outputs = [insert.stream for insert in self.app.inserts] + [
            table.emit for table in self.app.tables if table.emit is not None
        ]
        streams = {
            original: [
                record.value
                for record in tail(
                    renamed[original], TailStart(from_beginning=True), settings=settings
                )
                if record.id != CLOSING_RECORD_ID
            ]
            for original in outputs
        }
        inputs = zip(self.app.inputs, app.inputs, strict=True)
        dead_letters = {
            original.name: sum(
                1
                for _ in tail(
                    dead_letter_stream(source.stream),
                    TailStart(from_beginning=True),
                    settings=settings,
                )
            )
            for original, source in inputs
        }
        return SqlAppResult(tables, streams, dead_letters, running.late_rows(), app)


def _isolated(app: SqlApp, suffix: str) -> tuple[SqlApp, dict[str, str]]:
    """`app` with its own name, input and output streams for this run, and the renaming."""
    renamed: dict[str, str] = {}

    def rename(stream: str) -> str:
        return renamed.setdefault(stream, f"{stream}.test-{suffix}")

    return (
        replace(
            app,
            name=f"{app.name}_test_{suffix}",
            inputs=tuple(replace(source, stream=rename(source.stream)) for source in app.inputs),
            inserts=tuple(replace(insert, stream=rename(insert.stream)) for insert in app.inserts),
            tables=tuple(
                replace(table, emit=rename(table.emit) if table.emit else None)
                for table in app.tables
            ),
        ),
        renamed,
    )


def _closing_ms(
    app: SqlApp, time_field: str, events: list[Mapping[str, Any]], lateness: str | None
) -> int:
    """A time past every window of `events` by more than the lateness (epoch ms)."""
    latest = max(event_time_ms(event, time_field) or 0 for event in events)
    widest = max(
        (window.size_ms for table in app.tables for window in table.query.windows.values()),
        default=0,
    )
    lateness_ms = parse_duration_ms(lateness, what="lateness") if lateness else 0
    return latest + widest + lateness_ms + 1


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
        >>> tester = ProcessorTester(WindowCounter)  # doctest: +SKIP
        >>> tester.feed("queries", [{"query": "cats", "ts": T0 + 500},  # doctest: +SKIP
        ...                         {"query": "cats", "ts": T0 + 700}])
        >>> tester.run_batch()  # doctest: +SKIP
        >>> tester.advance_watermark(T0 + 1000)  # doctest: +SKIP
        >>> tester.fire_timers()  # doctest: +SKIP
        >>> tester.values("window_counts")  # doctest: +SKIP
        [{'query': 'cats', 'bucket': 1767225600000, 'count': 2}]
    """

    def __init__(
        self,
        processor: type[Processor],
        *,
        clock_ms: int = 0,
        tables: Mapping[str, Mapping[Any, Mapping[str, Any]]] | None = None,
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
        self._stored: dict[Any, dict[str, Any]] = {}
        self._pending: list[Record] = []
        self._next_offset: dict[tuple[str, int], int] = {}
        self._max_event_time_ms: dict[tuple[str, int], int] = {}

    def feed(
        self,
        stream: str,
        records: Iterable[Mapping[str, Any] | Record],
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
            >>> tester.feed("queries", [{"query": "cats", "ts": 1500}])[0].offset  # doctest: +SKIP
            0
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
            >>> tester.advance_watermark(2000)  # doctest: +SKIP
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
            >>> tester.advance_clock(tester.clock_ms + 30_000)  # doctest: +SKIP
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
            >>> tester.run_batch().late  # doctest: +SKIP
            []
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
            >>> tester.fire_timers().productions  # doctest: +SKIP
            [Production(stream='window_counts', ...)]
        """
        pending, self._pending = self._pending, []
        try:
            return self.run_batch()
        finally:
            self._pending = pending

    def state(self, key: Any) -> dict[str, Any]:
        """Every declared state of `key`, as a callback would read it now.

        Values, lists and dicts by state name (a monoid's aggregate under "aggregate"); None
        or empty when unset or expired.

        Example:
            >>> tester.state("cats")  # doctest: +SKIP
            {'counts': {1000: 2}}
        """
        return self._key_state(key).visible()

    def set_state(self, key: Any, **values: Any) -> None:
        """Set states of `key` by name, as a callback would write them.

        Values are type-checked and stamped with the clock; a map state is replaced by the
        dict given.

        Example:
            >>> tester.set_state("cats", counts={1000: 5})  # doctest: +SKIP
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

    def timers(self, key: Any) -> list[Timer]:
        """The pending timers of `key`, in firing order.

        Example:
            >>> tester.timers("cats")  # doctest: +SKIP
            [Timer(tag='close-1000', time_ms=2000, domain='event_time')]
        """
        return KeyTimers(self._stored.get(key, {}).get("timers")).pending()

    def values(self, stream: str) -> list[dict[str, Any]]:
        """The values produced to `stream` so far, in order.

        Example:
            >>> tester.values("window_counts")  # doctest: +SKIP
            [{'query': 'cats', 'bucket': 1000, 'count': 2}]
        """
        return [production.value for production in self.productions.get(stream, [])]

    def table_rows(self, table: str) -> list[dict[str, Any]]:
        """The rows produced to serving table `table` (`ctx.produce_to_table`), in order.

        Example:
            >>> tester.table_rows("user_totals")  # doctest: +SKIP
            [{'user': 'u1', 'total': 7}]
        """
        return self.values(f"{TABLE_PREFIX}{table}")

    def _key_state(self, key: Any) -> KeyState:
        return KeyState(
            self.processor.states(),
            self._stored.get(key, {}).get("state"),
            now_ms=self.clock_ms,
        )
