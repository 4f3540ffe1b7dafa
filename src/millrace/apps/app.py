"""An app, whatever its kind: a SQL app's file or a processor class, behind one type.

`App.load(source)` reads the text a user gives for an app (`examples/top_events.sql`,
`module:Class`, `path/to/file.py:Class`; the kind told by
`millrace.apps.sources.source_kind`) and gives a `SqlFileApp` or a `ProcessorApp`:
its kind and name, its source with paths made absolute (so a process started in another
folder finds it), the fingerprint of its state (`millrace.apps.state_schema`), its
streaming queries and result tables, and what it declares it reads and writes. Loading
starts no Spark.

Every verb goes through it, and asks it rather than its kind: `check` its plans (`explain`),
`run` and `deploy` its start (`start` gives the `Streaming` handle that
`millrace.apps.runner` watches, stops and sums up), `run --batch` and `backfill` its batch
runs (`run_batch`, `backfill`, both giving a `BatchResult`), `sql --app` its inputs decoded
(`input_views`), the registry what it declares (`declared`).

Example:
    >>> app_file = tmp_path / "top_events.sql"
    >>> _ = app_file.write_text("CREATE APPLICATION top_events; CREATE INPUT TABLE events "
    ...                         "(event STRING) FROM STREAM('events_stream') TIME event_time;")
    >>> App.load(str(app_file)).kind
    'sql'
"""

from __future__ import annotations

import functools
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal, Protocol, Self

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from millrace.apps.declarations import Declared
from millrace.apps.processors.batch import (
    ProcessorBatchRun,
    archived_input,
    run_processor_batch,
)
from millrace.apps.processors.errors import require_inputs
from millrace.apps.processors.streaming import explain_processor, start_processor_app
from millrace.apps.progress_lines import QueryTotals, RoutedInput, count
from millrace.apps.sources import Kind, require_source, source_kind
from millrace.apps.sql.batch import BatchRun, decoded_archive, run_sql_app_batch, select_outputs
from millrace.apps.sql.explain import explain_sql_app
from millrace.apps.sql.running import start_sql_app
from millrace.apps.state_schema import (
    PROCESSOR_QUERY,
    Fingerprint,
    processor_fingerprint,
    processor_placement,
    sql_fingerprint,
)
from millrace.config.workspace import Workspace
from millrace.engine.triggers import Trigger
from millrace.engine.user_code import ship_with_tasks
from millrace.processor.loading import load_processor
from millrace.processor.processor import Processor
from millrace.sql.checks import require_input_streams, require_streaming_aggregates
from millrace.sql.parser import SqlApp, load_app
from millrace.warehouse.adhoc_sql import View
from millrace.warehouse.layout import is_archived, require_archive, view_name

PROCESSOR_QUERIES = (PROCESSOR_QUERY,)
"""The queries of a processor app: one, whose checkpoint is `<app>/processor`."""


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

    def lines(self, span: str, done: Literal["ran", "backfilled"]) -> list[str]:
        """What a run prints of it: `span` names the range, `done` what was done over it.

        Example:
            >>> day = BatchResult("top_events", "sql", 0, 1, tables={"top_events_5min": 288})
            >>> day.lines("over the day", "ran")
            ["app 'top_events' ran over the day", 'table top_events_5min: 288 rows merged']
        """
        if self.kind == "processor":
            wrote = (
                f"{count(self.productions, 'production')}, "
                f"{count(self.dead_letters, 'dead letter')}"
            )
            if done == "ran":
                return [f"processor {self.app!r} ran {span}", wrote]
            return [f"processor {self.app!r} backfilled {span} from the warehouse: {wrote}"]
        read_from = "" if done == "ran" else " from the warehouse"
        lines = [f"app {self.app!r} {done} {span}{read_from}"]
        lines += [
            f"table {table}: {count(rows, 'row')} merged" for table, rows in self.tables.items()
        ]
        lines += [
            f"stream {stream}: {count(records, 'record')} written"
            for stream, records in self.streams.items()
        ]
        return lines + [routed.line() for routed in self.routed]


class Streaming(Protocol):
    """A started streaming run of an app: what the runner watches, stops and sums up.

    It is a context manager: leaving it, however, stops what the run started beside its
    queries (dead-letter routers, idle tickers, the clock, the marker publisher) and any
    query still running, so that an error leaks no thread.
    """

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

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None: ...


@dataclass(frozen=True)
class App(ABC):
    """An app as every verb sees it: kind, name, source, state fingerprint, queries, tables.

    `source` is what `millrace run` takes, paths made absolute; `queries` are the names of
    its streaming queries (their checkpoints' folders), `tables` those of its result tables;
    `declared` what it says it reads and writes besides its inputs.
    """

    kind: Kind
    name: str
    source: str
    queries: tuple[str, ...]
    tables: tuple[str, ...]
    declared: Declared

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
        require_source(source)
        if source_kind(source) == "processor":
            return ProcessorApp.of(source)
        return SqlFileApp.of(Path(source))

    @abstractmethod
    def fingerprint(self, workspace: Workspace) -> Fingerprint:
        """What the app's stateful queries keep, as it would start in `workspace`."""

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
    def explain(self, spark: SparkSession, workspace: Workspace) -> dict[str, str]:
        """Spark's plan of each of the app's queries, by output, without running them.

        Building the plans checks what a run would: streams, functions, columns, tables.
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

    @abstractmethod
    def input_views(self, spark: SparkSession, workspace: Workspace) -> dict[str, View]:
        """A view of each input whose stream is archived: its records as the app reads them.

        Named `<app>__<input>`, for `millrace sql --app`.
        """


@dataclass(frozen=True)
class SqlFileApp(App):
    """A SQL app, read from its file (`millrace.sql.parser`), run by `millrace.apps.sql`."""

    sql: SqlApp

    @classmethod
    def of(cls, path: Path) -> SqlFileApp:
        """The SQL app in the file at `path`; `SqlError` says what is wrong and where."""
        sql = load_app(path)
        queries = tuple(f"insert.{insert.stream}" for insert in sql.inserts)
        queries += tuple(f"table.{table.name}" for table in sql.tables)
        tables = tuple(table.name for table in sql.tables)
        every_query = [view.query for view in sql.views] + [table.query for table in sql.tables]
        every_query += [insert.query for insert in sql.inserts]
        declared = Declared(
            looked_up=tuple(sorted({lookup.table for q in every_query for lookup in q.lookups})),
            served=tuple(sorted({table.serve for table in sql.tables if table.serve})),
            streams=tuple(sorted({insert.stream for insert in sql.inserts})),
        )
        return cls(
            "sql",
            sql.name,
            str(path.absolute()),
            queries,
            tables,
            declared,
            sql,
        )

    def fingerprint(self, workspace: Workspace) -> Fingerprint:
        """What the result tables' queries keep (`sql_fingerprint`)."""
        return sql_fingerprint(self.sql)

    def require_streamable(self) -> None:
        """Refuse an aggregate Spark cannot run on a stream (`COUNT(DISTINCT x)`), at its place."""
        require_streaming_aggregates(self.sql)

    def require_inputs(self, workspace: Workspace) -> None:
        """`SqlError` at the input's place in the file for a stream that does not exist."""
        require_input_streams(workspace, self.sql)

    def explain(self, spark: SparkSession, workspace: Workspace) -> dict[str, str]:
        """The plan of each result table and insert (`explain_sql_app`)."""
        return explain_sql_app(spark, workspace, self.sql)

    def start(
        self, spark: SparkSession, workspace: Workspace, trigger: Trigger | None
    ) -> Streaming:
        """Start a query per output of the app (`start_sql_app`)."""
        return start_sql_app(spark, workspace, self.sql, trigger=trigger)

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

    def input_views(self, spark: SparkSession, workspace: Workspace) -> dict[str, View]:
        """Each archived input decoded with its declared columns by the code of a live read.

        Records that do not decode are left out, and not routed anywhere.
        """
        return {
            view_name(self.name, source.name): View(
                f"input {source.name} of app {self.name}, decoded from the archive",
                functools.partial(decoded_archive, spark, workspace, source),
            )
            for source in self.sql.inputs
            if is_archived(workspace, source.stream)
        }


@dataclass(frozen=True)
class ProcessorApp(App):
    """A processor class (`millrace.processor`), run by `millrace.apps.processors` on Spark."""

    processor: type[Processor]

    @classmethod
    def of(cls, target: str) -> ProcessorApp:
        """The processor `target` names (`module:Class` or `file.py:Class`), checked."""
        processor = load_processor(target)
        where, _, name = target.rpartition(":")
        source = f"{Path(where).absolute()}:{name}" if where.endswith(".py") else target
        lookups = getattr(processor, "lookups", {})
        return cls(
            "processor",
            processor.name,
            source,
            PROCESSOR_QUERIES,
            (),
            Declared(looked_up=tuple(sorted(lookups))),
            processor,
        )

    def fingerprint(self, workspace: Workspace) -> Fingerprint:
        """What the processor keeps, with the buckets it starts with (`processor_placement`)."""
        return processor_fingerprint(self.processor, processor_placement(workspace, self.processor))

    def require_streamable(self) -> None:
        """Nothing to refuse: a processor runs as a stream whatever it does."""

    def require_inputs(self, workspace: Workspace) -> None:
        """`ProcessorError` naming the input whose stream does not exist."""
        require_inputs(workspace, self.processor)

    def explain(self, spark: SparkSession, workspace: Workspace) -> dict[str, str]:
        """The plan of the processor's one query (`explain_processor`)."""
        self._ship()
        return explain_processor(
            spark,
            workspace,
            self.processor,
            placement=processor_placement(workspace, self.processor),
        )

    def start(
        self, spark: SparkSession, workspace: Workspace, trigger: Trigger | None
    ) -> Streaming:
        """Start the processor's one query (`start_processor_app`)."""
        self._ship()
        return start_processor_app(
            spark,
            workspace,
            self.processor,
            placement=processor_placement(workspace, self.processor),
            trigger=trigger,
        )

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

    def input_views(self, spark: SparkSession, workspace: Workspace) -> dict[str, View]:
        """Each archived input's records with the event time the processor reads them at.

        Named `<app>__<stream>`; see `archived_input` for the columns.
        """
        return {
            view_name(self.name, source.stream): View(
                f"input {source.stream} of processor {self.name}, from the archive",
                functools.partial(archived_input, spark, workspace, source),
            )
            for source in self.processor.inputs
            if is_archived(workspace, source.stream)
        }

    def _ship(self) -> None:
        """Send the processor's module with Spark's tasks, for workers that cannot import it.

        In the host, another app's start may have dropped the module from `sys.modules`
        (each app imports its code afresh, `millrace.ops.host`): cloudpickle then finds no
        module to import it from in the workers and sends the processor's code by value, as
        registering the module would.
        """
        module = sys.modules.get(self.processor.__module__)
        if module is not None:
            ship_with_tasks(module)
