"""What a SQL app is checked for before Spark starts: its streams, and what a stream can run.

Each check raises `SqlError` at the place in the app's file that it is about, so that a run
or a deploy is refused in a second, where Spark's start and its Kafka source would take half
a minute to fail.
"""

from __future__ import annotations

from millrace.bus.streams import require_stream
from millrace.config.workspace import Workspace
from millrace.errors import SqlError, StreamNotFoundError
from millrace.sql.aggregates import distinct_aggregates
from millrace.sql.parser import Position, SqlApp


def require_input_streams(workspace: Workspace, app: SqlApp) -> None:
    """Look up each input's stream on the bus, before Spark starts.

    Raises `SqlError` at the input's place in the app file for a stream that does not exist,
    and `BusError` when the bus refuses the login or does not answer.
    """
    for source in app.inputs:
        try:
            require_stream(workspace.settings, source.stream)
        except StreamNotFoundError as error:
            raise missing_input_error(source.position, error) from None


def require_output_streams(workspace: Workspace, app: SqlApp) -> None:
    """Look up each stream the app writes on the bus; `SqlError` at its place for a missing one."""
    outputs = [(insert.stream, insert.position) for insert in app.inserts]
    outputs += [(table.emit, table.position) for table in app.tables if table.emit is not None]
    for stream, position in outputs:
        try:
            require_stream(workspace.settings, stream)
        except StreamNotFoundError as error:
            raise SqlError(f"{position}: output {error.message}", hint=error.hint) from None


def missing_input_error(position: Position, error: StreamNotFoundError) -> SqlError:
    """The error for an input whose stream does not exist, at the input's place in the file."""
    return SqlError(f"{position}: input {error.message}", hint=error.hint)


def require_streaming_aggregates(app: SqlApp) -> None:
    """Refuse, at its place in the app file, an aggregate that Spark cannot run on a stream.

    That is an aggregate over DISTINCT values, such as `COUNT(DISTINCT user)`; a run over a
    time range (`millrace run --batch`) reads its inputs in batch and runs it exactly.

    Example:
        >>> from millrace.sql.parser import parse_app
        >>> app = parse_app(
        ...     "CREATE APPLICATION a; "
        ...     "CREATE INPUT TABLE t (u) FROM STREAM('s') TIME ts LATENESS '5 seconds'; "
        ...     "CREATE TABLE users AS SELECT COUNT(DISTINCT u) AS n FROM t [5 minutes];"
        ... )
        >>> try:
        ...     require_streaming_aggregates(app)
        ... except SqlError as error:
        ...     print(error.message)
        <string>:1:124: COUNT(DISTINCT u) cannot run on a stream: Spark would keep every
        distinct value in its state
    """
    queries = [view.query for view in app.views]
    queries += [table.query for table in app.tables]
    queries += [insert.query for insert in app.inserts]
    for query in queries:
        for node in distinct_aggregates(query.tree):
            written = node.sql(dialect="spark")
            values = node.this.expressions[0].sql(dialect="spark")
            raise SqlError(
                f"{app.position(query.offset + node.meta.get('start', 0))}: {written} cannot run "
                "on a stream: Spark would keep every distinct value in its state",
                hint=f"count with APPROX_COUNT_DISTINCT({values}) (a HyperLogLog sketch, about "
                "1.6% standard error), or run the exact aggregate over a time range with "
                "`millrace run --batch`",
            )
