"""The plans of a SQL app's queries, for `millrace check`: compiled, never started."""

from __future__ import annotations

from pyspark.sql import SparkSession

from millrace.config.workspace import Workspace
from millrace.engine.plans import logical_plans
from millrace.sql.checks import require_output_streams
from millrace.sql.compiler import compile_app
from millrace.sql.parser import SqlApp


def explain_sql_app(spark: SparkSession, workspace: Workspace, app: SqlApp) -> dict[str, str]:
    """The Spark plan of each output of `app` (result tables and inserts), without running it.

    Compiling checks everything a run would: input and output streams, functions, columns.
    A plan is Spark's parsed and analyzed logical plans: Spark optimizes a streaming query and
    picks its physical plan only once the query starts.
    """
    require_output_streams(workspace, app)
    compiled = compile_app(spark, workspace, app, route_dead_letters=False)
    outputs = {
        f"table {name} ({compiled.plans[name]})": frame for name, frame in compiled.tables.items()
    }
    outputs |= {f"insert into stream {name}": frame for name, frame in compiled.inserts.items()}
    return {name: logical_plans(frame) for name, frame in outputs.items()}
