"""Spark's plans of a query, as `millrace check` shows them: compiled, never run."""

from __future__ import annotations

import contextlib
import io

from pyspark.sql import DataFrame


def logical_plans(frame: DataFrame) -> str:
    """Spark's parsed and analyzed logical plans of `frame`, as text.

    Spark optimizes a streaming query and picks its physical plan only once the query
    starts, so these are the plans there are before it runs.
    """
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        frame.explain(mode="extended")
    # In place of the plans a streaming query gets only when it starts, explain() prints
    # "AnalysisException: Queries with streaming sources must be executed with
    # writeStream.start()", which reads as a failure.
    logical, _, _ = printed.getvalue().partition("== Optimized Logical Plan ==")
    return logical.rstrip() + "\n"
