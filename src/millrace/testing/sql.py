"""The SQL-app tester: run a SQL app over given records on the real bus and Spark.

`SqlAppTester` gives every run streams and checkpoints of its own, publishes the records you
pass to the app's inputs, runs the app until it has read them all, and returns what it wrote
(`SqlAppResult`): the rows of its result tables and the records of its output streams, with
the dead letters of its inputs and the late rows its tables dropped. It needs a SparkSession
and a workspace whose broker is up; docs/sql.md shows how to get both in a script.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from pyspark.sql import SparkSession

from millrace.apps.sql.running import start_sql_app
from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream, dead_letter_stream
from millrace.config.durations import parse_duration_ms
from millrace.config.workspace import Workspace
from millrace.records import JsonObject, event_time_ms
from millrace.sql.parser import SqlApp, load_app, parse_app
from millrace.warehouse.delta import is_delta_table
from millrace.warehouse.result_tables import read_result_rows

__all__ = ["CLOSING_RECORD_ID", "SqlAppResult", "SqlAppTester"]

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

    tables: dict[str, list[JsonObject]]
    streams: dict[str, list[JsonObject]]
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
        records: Mapping[str, Iterable[Mapping[str, object]]],
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
            table.name: read_result_rows(self.workspace, app.name, table.name)
            if is_delta_table(self.workspace.result_table(app.name, table.name))
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
        input_pairs = zip(self.app.inputs, app.inputs, strict=True)
        dead_letters = {
            original.name: sum(
                1
                for _ in tail(
                    dead_letter_stream(source.stream),
                    TailStart(from_beginning=True),
                    settings=settings,
                )
            )
            for original, source in input_pairs
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
    app: SqlApp, time_field: str, events: list[Mapping[str, object]], lateness: str | None
) -> int:
    """A time past every window of `events` by more than the lateness (epoch ms)."""
    latest = max(event_time_ms(event, time_field) or 0 for event in events)
    widest = max(
        (window.size_ms for table in app.tables for window in table.query.windows.values()),
        default=0,
    )
    lateness_ms = parse_duration_ms(lateness, what="lateness") if lateness else 0
    return latest + widest + lateness_ms + 1
