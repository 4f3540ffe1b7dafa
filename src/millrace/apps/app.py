"""An app, whatever its kind: a SQL app's file or a processor class, behind one type.

`App.load(source)` reads the text a user gives for an app (`examples/top_events.sql`,
`module:Class`, `path/to/file.py:Class`; the kind told by
`millrace.apps.sources.source_kind`) and gives a `SqlFileApp` or a `ProcessorApp`:
its kind and name, its source with paths made absolute (so a process started in another
folder finds it), the fingerprint of its state (`millrace.apps.state_schema`), its
streaming queries and result tables. Loading starts no Spark.

Every verb that runs an app goes through it: `start` starts the app's streaming queries and
gives the `Streaming` handle that `millrace.apps.runner` watches, stops and sums up (for
`millrace run`, deployed apps and so the demo); `run_batch` runs it once over an event-time
range of the bus, and `backfill` over the warehouse's archives, both giving a `BatchResult`.

Example:
    >>> app_file = tmp_path / "top_events.sql"
    >>> _ = app_file.write_text("CREATE APPLICATION top_events; CREATE INPUT TABLE events "
    ...                         "(event STRING) FROM STREAM('events_stream') TIME event_time;")
    >>> App.load(str(app_file)).kind
    'sql'
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from millrace.apps.processors.batch import ProcessorBatchRun, run_processor_batch
from millrace.apps.processors.errors import require_processor_stream
from millrace.apps.processors.streaming import RunningProcessor, start_processor_app
from millrace.apps.progress_lines import QueryTotals, count
from millrace.apps.sources import Kind, source_kind
from millrace.apps.sql.running import (
    BatchRun,
    RunningApp,
    run_sql_app_batch,
    select_outputs,
    start_sql_app,
    state_store_notices,
)
from millrace.apps.state_schema import Fingerprint, processor_fingerprint, sql_fingerprint
from millrace.bus.streams import dead_letter_stream
from millrace.config.workspace import Workspace
from millrace.engine.triggers import Trigger
from millrace.engine.user_code import ship_with_tasks
from millrace.errors import LifecycleError
from millrace.processor.loading import load_processor
from millrace.processor.processor import Processor
from millrace.sql.compiler import require_input_streams, require_streaming_aggregates
from millrace.sql.parser import SqlApp, load_app
from millrace.warehouse.layout import require_archive

PROCESSOR_QUERIES = ("processor",)
"""The queries of a processor app: one, whose checkpoint is `<app>/processor`."""


@dataclass(frozen=True)
class RoutedInput:
    """The bad records of one input of a SQL app, routed to its stream's dead-letter stream."""

    input: str
    stream: str
    records: int

    def line(self) -> str:
        """What a run prints of it.

        Example:
            >>> RoutedInput("events", "clicks", 2).line()
            'input events: 2 bad records routed to clicks.dlq'
        """
        return (
            f"input {self.input}: {count(self.records, 'bad record')} "
            f"routed to {dead_letter_stream(self.stream)}"
        )


@dataclass(frozen=True)
class BatchResult:
    """What a batch run or a backfill of an app wrote, by count, whatever the app's kind.

    `tables` counts the rows merged into each result table and `streams` the records written
    to each stream (a SQL app's inserts and tables' `emit`); `productions` the records a
    processor produced, over its output streams; `dead_letters` the records sent to
    dead-letter streams, of which `routed` are those of each input of a SQL app.

    Example:
        >>> BatchResult("top_events", "sql", 0, 1, tables={"top_events_5min": 288}).tables
        {'top_events_5min': 288}
    """

    app: str
    kind: Kind
    start_ms: int
    end_ms: int
    tables: dict[str, int] = field(default_factory=dict)
    streams: dict[str, int] = field(default_factory=dict)
    productions: int = 0
    dead_letters: int = 0
    routed: tuple[RoutedInput, ...] = ()

    @classmethod
    def of_sql(cls, run: BatchRun, start_ms: int, end_ms: int) -> BatchResult:
        """The result of a SQL app's batch run (`run_sql_app_batch`)."""
        routed = tuple(
            RoutedInput(source.name, source.stream, run.dead_letters.get(source.name, 0))
            for source in run.app.inputs
        )
        return cls(
            run.app.name,
            "sql",
            start_ms,
            end_ms,
            tables=dict(run.tables),
            streams=dict(run.streams),
            dead_letters=sum(each.records for each in routed),
            routed=routed,
        )

    @classmethod
    def of_processor(cls, run: ProcessorBatchRun) -> BatchResult:
        """The result of a processor's batch run (`run_processor_batch`)."""
        return cls(
            run.processor.name,
            "processor",
            run.start_ms,
            run.end_ms,
            productions=run.productions,
            dead_letters=run.dead_letters,
        )


class Streaming(Protocol):
    """A started streaming run of an app: what the runner watches, stops and sums up."""

    @property
    def queries(self) -> list[StreamingQuery]:
        """The app's streaming queries."""

    @property
    def started(self) -> str:
        """The line said once the queries run."""

    @property
    def stopping(self) -> str:
        """The line said when the run is asked to stop."""

    def stop(self) -> None:
        """End the run once its queries were stopped between micro-batches."""

    def await_termination(self) -> None:
        """Block until the queries end by themselves (`available-now`) or fail."""

    def summary(self, totals: Mapping[str, QueryTotals]) -> list[str]:
        """The lines said at the end, from the totals of the micro-batches said."""


@dataclass(frozen=True)
class App(ABC):
    """An app as every verb sees it: kind, name, source, state fingerprint, queries, tables.

    `source` is what `millrace run` takes, paths made absolute; `queries` are the names of
    its streaming queries (their checkpoints' folders), `tables` those of its result tables.
    """

    kind: Kind
    name: str
    source: str
    fingerprint: Fingerprint
    queries: tuple[str, ...]
    tables: tuple[str, ...]

    @staticmethod
    def load(source: str) -> App:
        """The app `source` names: a SQL app's file, `module:Class` or `file.py:Class`.

        Raises `LifecycleError` for a SQL app's file that does not exist, and what loading
        raises (`SqlError`, `ProcessorError`) for code that cannot be read.

        Example:
            >>> app_file = tmp_path / "app.sql"
            >>> _ = app_file.write_text("CREATE APPLICATION top_events; CREATE INPUT TABLE "
            ...                         "events (event STRING) FROM STREAM('events') TIME ts;")
            >>> App.load(str(app_file)).name
            'top_events'
        """
        if source_kind(source) == "processor":
            return ProcessorApp.of(source)
        path = Path(source)
        if not path.is_file():
            raise LifecycleError(
                f"no file {source!r}",
                hint="give a SQL app's file, or a processor as module:Class or file.py:Class",
            )
        return SqlFileApp.of(path)

    @abstractmethod
    def require_streamable(self) -> None:
        """Refuse, before Spark starts, what the app cannot run as a stream."""

    @abstractmethod
    def require_inputs(self, workspace: Workspace) -> None:
        """Refuse, before Spark starts, an input stream the bus does not have.

        Raises `BusError` when the bus refuses the login or does not answer: a run says so
        in seconds, where Spark's start and its Kafka source would take half a minute.
        """

    @abstractmethod
    def start(
        self, spark: SparkSession, workspace: Workspace, trigger: Trigger | None
    ) -> Streaming:
        """Start the app's streaming queries, micro-batches run by `trigger` (default: at once)."""

    @abstractmethod
    def run_batch(
        self, spark: SparkSession, workspace: Workspace, *, start_ms: int, end_ms: int
    ) -> BatchResult:
        """Run the app once over its inputs' records on the bus with event times in the range."""

    @abstractmethod
    def backfill(
        self,
        spark: SparkSession,
        workspace: Workspace,
        *,
        start_ms: int,
        end_ms: int,
        into: Sequence[str],
    ) -> BatchResult:
        """Run the app once over its inputs' archives, writing only the outputs `into` names.

        Raises `WarehouseError` for an output a SQL app does not have, or an input without
        an archive.
        """


@dataclass(frozen=True)
class SqlFileApp(App):
    """A SQL app, read from its file (`millrace.sql.parser`), run by `runtime.sql_apps`."""

    sql: SqlApp

    @classmethod
    def of(cls, path: Path) -> SqlFileApp:
        """The SQL app in the file at `path`; `SqlError` says what is wrong and where."""
        sql = load_app(path)
        queries = tuple(f"insert.{insert.stream}" for insert in sql.inserts)
        queries += tuple(f"table.{table.name}" for table in sql.tables)
        tables = tuple(table.name for table in sql.tables)
        return cls(
            "sql", sql.name, str(path.absolute()), sql_fingerprint(sql), queries, tables, sql
        )

    def require_streamable(self) -> None:
        """Refuse an aggregate Spark cannot run on a stream (`COUNT(DISTINCT x)`), at its place."""
        require_streaming_aggregates(self.sql)

    def require_inputs(self, workspace: Workspace) -> None:
        """`SqlError` at the input's place in the file for a stream that does not exist."""
        require_input_streams(workspace, self.sql)

    def start(
        self, spark: SparkSession, workspace: Workspace, trigger: Trigger | None
    ) -> Streaming:
        """Start a query per output of the app (`start_sql_app`)."""
        # Read before the start, which writes the store of a new checkpoint.
        notices = state_store_notices(workspace, self.sql)
        running = start_sql_app(spark, workspace, self.sql, trigger=trigger)
        return _SqlStreaming(self.sql, running, notices)

    def run_batch(
        self, spark: SparkSession, workspace: Workspace, *, start_ms: int, end_ms: int
    ) -> BatchResult:
        """Run the app's queries once over the range (`run_sql_app_batch`)."""
        run = run_sql_app_batch(spark, workspace, self.sql, start_ms=start_ms, end_ms=end_ms)
        return BatchResult.of_sql(run, start_ms, end_ms)

    def backfill(
        self,
        spark: SparkSession,
        workspace: Workspace,
        *,
        start_ms: int,
        end_ms: int,
        into: Sequence[str],
    ) -> BatchResult:
        """Run the queries of the outputs `into` names once over the archives' range."""
        selected = select_outputs(self.sql, into)
        for source in selected.inputs:
            require_archive(workspace, source.stream)
        run = run_sql_app_batch(
            spark, workspace, selected, start_ms=start_ms, end_ms=end_ms, source="warehouse"
        )
        return BatchResult.of_sql(run, start_ms, end_ms)


@dataclass(frozen=True)
class ProcessorApp(App):
    """A processor class (`millrace.processor`), run by `runtime.processors` on Spark."""

    processor: type[Processor]

    @classmethod
    def of(cls, target: str) -> ProcessorApp:
        """The processor `target` names (`module:Class` or `file.py:Class`), checked."""
        processor = load_processor(target)
        where, _, name = target.rpartition(":")
        source = f"{Path(where).absolute()}:{name}" if where.endswith(".py") else target
        return cls(
            "processor",
            processor.name,
            source,
            processor_fingerprint(processor),
            PROCESSOR_QUERIES,
            (),
            processor,
        )

    def require_streamable(self) -> None:
        """Nothing to refuse: a processor runs as a stream whatever it does."""

    def require_inputs(self, workspace: Workspace) -> None:
        """`ProcessorError` naming the input whose stream does not exist."""
        for source in self.processor.inputs:
            require_processor_stream(
                workspace, source.stream, f"input of processor {self.processor.name!r}"
            )

    def start(
        self, spark: SparkSession, workspace: Workspace, trigger: Trigger | None
    ) -> Streaming:
        """Start the processor's one query (`start_processor_app`)."""
        self._ship()
        running = start_processor_app(spark, workspace, self.processor, trigger=trigger)
        return _ProcessorStreaming(running)

    def run_batch(
        self, spark: SparkSession, workspace: Workspace, *, start_ms: int, end_ms: int
    ) -> BatchResult:
        """Run the processor once over the range (`run_processor_batch`)."""
        self._ship()
        run = run_processor_batch(
            spark, workspace, self.processor, start_ms=start_ms, end_ms=end_ms
        )
        return BatchResult.of_processor(run)

    def backfill(
        self,
        spark: SparkSession,
        workspace: Workspace,
        *,
        start_ms: int,
        end_ms: int,
        into: Sequence[str],
    ) -> BatchResult:
        """Run the processor once over the archives' range, producing to the streams named."""
        self._ship()
        for source in self.processor.inputs:
            require_archive(workspace, source.stream)
        run = run_processor_batch(
            spark,
            workspace,
            self.processor,
            start_ms=start_ms,
            end_ms=end_ms,
            source="warehouse",
            into=into,
        )
        return BatchResult.of_processor(run)

    def _ship(self) -> None:
        """Send the processor's module with Spark's tasks, for workers that cannot import it."""
        ship_with_tasks(sys.modules[self.processor.__module__])


@dataclass
class _SqlStreaming:
    """A SQL app's running queries, one per output."""

    app: SqlApp
    running: RunningApp
    notices: list[str]

    @property
    def queries(self) -> list[StreamingQuery]:
        return self.running.queries

    @property
    def started(self) -> str:
        running = f"app {self.app.name!r} running: {len(self.queries)} queries (Ctrl-C stops)"
        return "\n".join([running, *(f"note: {notice}" for notice in self.notices)])

    stopping = "stopping once the running micro-batches are done..."

    def stop(self) -> None:
        self.running.stop()

    def await_termination(self) -> None:
        self.running.await_termination()

    def summary(self, totals: Mapping[str, QueryTotals]) -> list[str]:
        lines = [
            totals.get(query.name, QueryTotals()).summary(query.name) for query in self.queries
        ]
        dead_letters = self.running.dead_letters()
        return lines + [
            RoutedInput(source.name, source.stream, dead_letters.get(source.name, 0)).line()
            for source in self.app.inputs
        ]


@dataclass
class _ProcessorStreaming:
    """A processor's running query."""

    running: RunningProcessor
    stopping = "stopping once the running micro-batch is done..."

    @property
    def queries(self) -> list[StreamingQuery]:
        return [self.running.query]

    @property
    def started(self) -> str:
        return f"processor {self.running.processor.name!r} running (Ctrl-C stops)"

    def stop(self) -> None:
        # The query has stopped: this releases the clock and the marker publisher, and raises
        # the error it stopped with, if any.
        self.running.await_termination()

    def await_termination(self) -> None:
        self.running.await_termination()

    def summary(self, totals: Mapping[str, QueryTotals]) -> list[str]:
        read = totals.get(self.running.query.name, QueryTotals()).read
        running = self.running
        return [
            f"{count(read, 'record')} read: "
            f"{count(running.productions, 'production')}, "
            f"{count(running.late, 'late record')} dropped, "
            f"{count(running.duplicates, 'duplicate')} dropped, "
            f"{count(running.dead_letters, 'dead letter')}"
        ]
