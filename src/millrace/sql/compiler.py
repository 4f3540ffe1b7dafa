"""Compiling a parsed SQL app into Spark DataFrames: inputs, functions, views, results.

Input tables become streaming DataFrames (through `engine.read_stream`) registered as
temporary views under their names. A windowed reference `FROM t [5 minutes]` becomes a view
of `t` with a `_window` column, which the query groups by and whose bounds it selects as
`window_start` and `window_end`. Spark's analysis errors are mapped back to `file:line:column`.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.udf import UserDefinedFunction
from sqlglot import exp

from millrace.config.workspace import Workspace
from millrace.engine.streams import StreamInput, read_stream
from millrace.errors import SqlError, StreamNotFoundError
from millrace.sql.parser import Function, Position, Query, SqlApp, Window

WINDOW_COLUMN = "_window"
_PYTHON_TO_SPARK = {"float": "double", "int": "bigint", "str": "string", "bool": "boolean"}
_UNRESOLVED = re.compile(r"with name `(?:[^`]*`\.`)*(?P<name>[^`]+)`")


@dataclass(frozen=True)
class CompiledApp:
    """An app's DataFrames: each input read, each result table and each insert's query."""

    app: SqlApp
    inputs: dict[str, StreamInput]
    tables: dict[str, DataFrame]
    inserts: dict[str, DataFrame]


def compile_app(
    spark: SparkSession,
    workspace: Workspace,
    app: SqlApp,
    *,
    available_now: bool = False,
    route_dead_letters: bool = True,
) -> CompiledApp:
    """Build the DataFrames of `app`; starts only the inputs' dead-letter queries, if any.

    Raises `SqlError` pointing into the app file for an input stream that does not exist, a
    function that cannot be imported, or a column, table or type error that Spark's analysis
    finds.

    Example:
        >>> app = load_app(Path("examples/top_events.sql"))  # doctest: +SKIP
        >>> compile_app(spark, workspace, app).tables["top_events_5min"]  # doctest: +SKIP
        DataFrame[window_start: timestamp, window_end: timestamp, category: string, ...]
    """
    for function in app.functions:
        spark.udf.register(function.name, _load_function(function))
    inputs = {}
    for source in app.inputs:
        try:
            inputs[source.name] = read_stream(
                spark,
                workspace,
                app.name,
                source.stream,
                source.schema,
                time=source.time,
                lateness=source.lateness,
                available_now=available_now,
                route_dead_letters=route_dead_letters,
            )
        except StreamNotFoundError as error:
            raise SqlError(f"{source.position}: input {error.message}", hint=error.hint) from None
        inputs[source.name].records.createOrReplaceTempView(source.name)
    compiler = _QueryCompiler(spark, app)
    for view in app.views:
        compiler.dataframe(view.query, view.position).createOrReplaceTempView(view.name)
    tables = {table.name: compiler.dataframe(table.query, table.position) for table in app.tables}
    inserts = {
        insert.stream: compiler.dataframe(insert.query, insert.position) for insert in app.inserts
    }
    return CompiledApp(app, inputs, tables, inserts)


def group_key_columns(query: Query) -> list[str]:
    """The output columns that identify a result row: the window bounds and the group keys."""
    select = query.tree
    keys = ["window_start", "window_end"] if query.windows else []
    if not isinstance(select, exp.Select) or not select.args.get("group"):
        return keys
    grouped = {expression.sql(dialect="spark") for expression in select.args["group"].expressions}
    for expression in select.expressions:
        inner = expression.this if isinstance(expression, exp.Alias) else expression
        if inner.sql(dialect="spark") in grouped:
            keys.append(expression.alias_or_name)
    return keys


class _QueryCompiler:
    def __init__(self, spark: SparkSession, app: SqlApp) -> None:
        self.spark = spark
        self.app = app

    def dataframe(self, query: Query, position: Position) -> DataFrame:
        tree = query.tree.copy()
        if query.windows:
            tree = self._windowed(tree, query, position)
        try:
            return self.spark.sql(tree.sql(dialect="spark"))
        except AnalysisException as error:
            raise self._analysis_error(error, query, position) from None

    def _windowed(self, tree: exp.Query, query: Query, position: Position) -> exp.Query:
        if not isinstance(tree, exp.Select):
            raise SqlError(
                f"{position}: a window needs a plain SELECT ... GROUP BY",
                hint="move set operations into a view, and window the view",
            )
        for table in tree.find_all(exp.Table):
            window = query.windows.get(table.name)
            if window is None:
                continue
            windowed_view = self._window_view(table.name, window, position)
            alias = table.alias or table.name
            table.replace(exp.to_table(windowed_view).as_(alias))
        window_column = exp.column(WINDOW_COLUMN)
        bounds = [
            exp.alias_(exp.Dot.build([window_column.copy(), exp.to_identifier(bound)]), name)
            for bound, name in (("start", "window_start"), ("end", "window_end"))
        ]
        tree.set("expressions", [*bounds, *tree.expressions])
        return tree.group_by(window_column, copy=False)

    def _window_view(self, name: str, window: Window, position: Position) -> str:
        time = self._time_column(name, position)
        size = f"{window.size_ms} milliseconds"
        assigner = (
            F.window(time, size, f"{window.slide_ms} milliseconds")
            if window.is_sliding
            else F.window(time, size)
        )
        view = f"__{name}_window_{window.size_ms}_{window.slide_ms or window.size_ms}"
        self.spark.table(name).withColumn(WINDOW_COLUMN, assigner).createOrReplaceTempView(view)
        return view

    def _time_column(self, name: str, position: Position) -> str:
        source = self.app.input(name)
        if source is not None:
            return source.time
        view = next((view for view in self.app.views if view.name == name), None)
        bases = (
            [] if view is None else [table.name for table in view.query.tree.find_all(exp.Table)]
        )
        for base in bases:
            source = self.app.input(base)
            if source is not None:
                return source.time
        raise SqlError(
            f"{position}: cannot window {name!r}: it reads no input table, so it has no time",
            hint="window an input table, or a view that keeps its input's time column",
        )

    def _analysis_error(
        self, error: AnalysisException, query: Query, position: Position
    ) -> SqlError:
        summary = str(error).strip().splitlines()[0]
        where = position
        match = _UNRESOLVED.search(summary)
        if match is not None:
            for column in query.tree.find_all(exp.Column):
                if column.name == match["name"] and column.this.meta.get("start") is not None:
                    where = self.app.position(query.offset + column.this.meta["start"])
                    break
        return SqlError(
            f"{where}: {summary}",
            hint="check the names against the input tables and views declared above",
        )


def _load_function(function: Function) -> UserDefinedFunction:
    module_name, _, attribute = function.target.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise SqlError(
            f"{function.position}: function {function.name}: cannot import module "
            f"{module_name!r}: {error}",
            hint="put the module on the PYTHONPATH of the app (or install it in the virtualenv)",
        ) from None
    target = getattr(module, attribute, None)
    if target is None:
        raise SqlError(
            f"{function.position}: function {function.name}: module {module_name!r} has no "
            f"{attribute!r}",
            hint=f"define {attribute} in {module.__file__}",
        )
    if isinstance(target, UserDefinedFunction) or hasattr(target, "returnType"):
        return target  # already a Spark UDF, e.g. a vectorised @pandas_udf
    annotation = inspect.signature(target).return_annotation
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", None)
    returns = _PYTHON_TO_SPARK.get(name or "", name if isinstance(annotation, str) else None)
    if returns is None:
        raise SqlError(
            f"{function.position}: function {function.name}: {function.target} has no return "
            "type annotation that Spark can use",
            hint="annotate it, such as `-> float`, or decorate it with @pandas_udf('double')",
        )
    return F.udf(target, returns)
