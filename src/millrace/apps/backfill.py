"""Backfill: an app re-run in batch over an event-time range read from the warehouse.

As in the Facebook paper's Hive backfills, the app's own code runs unchanged over archived
records: a SQL app is compiled as for its streaming run and run once over its inputs'
archives (`millrace.warehouse.archive`), whose records are decoded by the code that decodes the
live stream; a processor (`module:Class`) runs its batch run over them the same way. The
outputs chosen with `into` (result tables, by merge on their keys, and streams, with
deterministic ids) get the same final results as the streaming run, so running a backfill
again changes nothing. The app is loaded as every verb loads it (`millrace.apps.app`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import SparkSession

from millrace.apps.app import App, BatchResult
from millrace.config.workspace import Workspace
from millrace.errors import WarehouseError


def backfill(
    spark: SparkSession,
    workspace: Workspace,
    app: str,
    *,
    start_ms: int,
    end_ms: int,
    into: Sequence[str],
) -> BatchResult:
    """Re-run `app` over its inputs' archived records with event times in `[start_ms, end_ms)`.

    `app` is a SQL app's file or a processor as `module:Class`; `into` names the outputs to
    write: result tables of the app and streams it writes (`INSERT INTO STREAM`, a table's
    `emit`, a processor's productions). Other outputs are left alone. Raises
    `WarehouseError` for an output a SQL app does not have, or an input without an archive.
    """
    if start_ms >= end_ms:
        raise WarehouseError(
            f"the range from {start_ms} to {end_ms} is empty",
            hint="give an end (--to) after the start (--from)",
        )
    return App.load(app).backfill(spark, workspace, start_ms=start_ms, end_ms=end_ms, into=into)
