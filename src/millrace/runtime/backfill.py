"""Backfill: an app re-run in batch over an event-time range read from the warehouse.

As in the Facebook paper's Hive backfills, the app's own code runs unchanged over archived
records: a SQL app is compiled as for its streaming run and run once with
`run_sql_app_batch` over its inputs' archives (`millrace.engine.archive`), whose records are
decoded by the code that decodes the live stream. The outputs chosen with `into` (result
tables, by merge on their keys, and streams, with deterministic ids) get the same final
results as the streaming run, so running a backfill again changes nothing.

`backfill` tells the app's kind by `millrace.runtime.app_sources.source_kind`: a processor
app (`module:Class`) runs with `run_processor_batch` over its inputs' archives the same way,
writing its productions to the streams `into` names.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from millrace.config.workspace import Workspace
from millrace.engine.user_code import ship_with_tasks
from millrace.errors import WarehouseError
from millrace.processor.loading import load_processor
from millrace.runtime.app_sources import source_kind
from millrace.runtime.processor_batch import ProcessorBatchRun, run_processor_batch
from millrace.runtime.sql_apps import BatchRun, run_sql_app_batch
from millrace.sql.parser import SqlApp, load_app
from millrace.warehouse.layout import require_archive


def backfill(
    spark: SparkSession,
    workspace: Workspace,
    app: str,
    *,
    start_ms: int,
    end_ms: int,
    into: Sequence[str],
) -> BatchRun | ProcessorBatchRun:
    """Re-run `app` over its inputs' archived records with event times in `[start_ms, end_ms)`.

    `app` is a SQL app's file or a processor as `module:Class`; `into` names the outputs to
    write: result tables of the app and streams it writes (`INSERT INTO STREAM`, a table's
    `emit`, a processor's productions). Other outputs are left alone. Raises
    `WarehouseError` for an output a SQL app does not have, or an input without an archive.

    Example:
        >>> run = backfill(spark, workspace, "examples/top_events.sql",  # doctest: +SKIP
        ...                start_ms=1_767_225_600_000, end_ms=1_767_312_000_000,
        ...                into=["top_events_5min"])
        >>> run.tables  # doctest: +SKIP
        {'top_events_5min': 288}
    """
    if start_ms >= end_ms:
        raise WarehouseError(
            f"the range from {start_ms} to {end_ms} is empty",
            hint="give an end (--to) after the start (--from)",
        )
    if source_kind(app) == "processor":
        return _backfill_processor(spark, workspace, app, start_ms, end_ms, into)
    sql_app = select_outputs(load_app(Path(app)), into)
    for source in sql_app.inputs:
        require_archive(workspace, source.stream)
    return run_sql_app_batch(
        spark, workspace, sql_app, start_ms=start_ms, end_ms=end_ms, source="warehouse"
    )


def select_outputs(app: SqlApp, into: Sequence[str]) -> SqlApp:
    """`app` keeping only the outputs `into` names: result tables and output streams.

    A table is kept when it or the stream it emits to is named; an `INSERT INTO STREAM`
    when its stream is named.

    Example:
        >>> select_outputs(load_app(Path("examples/top_events.sql")),  # doctest: +SKIP
        ...                ["superbowl_posts"]).tables
        ()
    """
    if not into:
        raise WarehouseError(
            f"no output of app {app.name!r} to backfill was named",
            hint=f"name some with --into; app {app.name!r} has: {_outputs(app)}",
        )
    names = set(into)
    tables = tuple(table for table in app.tables if {table.name, table.emit} & names)
    inserts = tuple(insert for insert in app.inserts if insert.stream in names)
    known = {table.name for table in app.tables} | {insert.stream for insert in app.inserts}
    known |= {table.emit for table in app.tables if table.emit is not None}
    unknown = sorted(names - known)
    if unknown:
        raise WarehouseError(
            f"app {app.name!r} has no result table or output stream {unknown[0]!r}",
            hint=f"--into takes one of: {_outputs(app)}",
        )
    return dataclasses.replace(app, tables=tables, inserts=inserts)


def _backfill_processor(
    spark: SparkSession,
    workspace: Workspace,
    target: str,
    start_ms: int,
    end_ms: int,
    into: Sequence[str],
) -> ProcessorBatchRun:
    processor = load_processor(target)
    ship_with_tasks(sys.modules[processor.__module__])
    for source in processor.inputs:
        require_archive(workspace, source.stream)
    return run_processor_batch(
        spark,
        workspace,
        processor,
        start_ms=start_ms,
        end_ms=end_ms,
        source="warehouse",
        into=into,
    )


def _outputs(app: SqlApp) -> str:
    names = [table.name for table in app.tables] + [insert.stream for insert in app.inserts]
    names += [table.emit for table in app.tables if table.emit is not None]
    return ", ".join(dict.fromkeys(names)) or "(no outputs)"
