"""Compiling a parsed SQL app into Spark DataFrames: inputs, functions, views, results.

Input tables become streaming DataFrames (through `engine.read_stream`) registered as
temporary views under their names. A windowed reference `FROM t [5 minutes]` becomes a view
of `t` with a `_window` column, which the query groups by and whose bounds it selects as
`window_start` and `window_end`. A result table in mode 'final' with a sliding window or a
TOPK runs on a two-stage plan (partials per pane, combined per window) when its aggregates
split over panes, and on Spark's one-stage plan otherwise. Spark's analysis errors are mapped
back to `file:line:column`.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import sqlglot
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.udf import UserDefinedFunction
from sqlglot import exp

from millrace.config.durations import parse_duration_ms
from millrace.config.workspace import Workspace
from millrace.engine.streams import RECORD_TIME, StreamInput, read_batch, read_stream
from millrace.engine.user_code import ship_with_tasks
from millrace.errors import ServingError, SqlError, StreamNotFoundError, import_failure
from millrace.serving.sink import lookup_column
from millrace.serving.tables import describe_table
from millrace.sql.aggregates import (
    TOPK_FINISH,
    Split,
    is_aggregate,
    is_topk,
    single_stage,
    split,
    topk_finish,
    topk_item,
)
from millrace.sql.checks import missing_input_error, require_streaming_aggregates
from millrace.sql.parser import Function, Lookup, Position, Query, SqlApp, Window
from millrace.warehouse.archive import RecordSource, read_records

if TYPE_CHECKING:
    from pyspark.sql._typing import UserDefinedFunctionLike

WINDOW_COLUMN = "_window"
_PYTHON_TO_SPARK = {"float": "double", "int": "bigint", "str": "string", "bool": "boolean"}
_UNRESOLVED = re.compile(r"with name `(?:[^`]*`\.`)*(?P<name>[^`]+)`")


@dataclass(frozen=True)
class CompiledApp:
    """An app's DataFrames: each input read, each result table and each insert's query.

    `plans` says, per result table, which plan its aggregation runs on and why. `close`
    stops what the inputs started (`StreamInput.close`), once the queries reading them stop.
    """

    app: SqlApp
    inputs: dict[str, StreamInput]
    tables: dict[str, DataFrame]
    inserts: dict[str, DataFrame]
    plans: dict[str, str]
    _opened: ExitStack = field(default_factory=ExitStack, repr=False, compare=False)

    def close(self) -> None:
        """Stop routing the inputs' dead letters and ticking their idle buckets."""
        self._opened.close()


def compile_app(
    spark: SparkSession,
    workspace: Workspace,
    app: SqlApp,
    *,
    route_dead_letters: bool = True,
    time_range: tuple[int, int] | None = None,
    panes: bool = True,
    max_records_per_batch: int | None = None,
    sources: Mapping[str, DataFrame] | None = None,
    batch_source: RecordSource = "bus",
    idle_ticks: bool = False,
) -> CompiledApp:
    """Build the DataFrames of `app`, without starting any query.

    With `time_range` (start and end, epoch ms), the inputs are read in batch: the records
    whose event time is in `[start, end)`, and the DataFrames are not streaming;
    `batch_source="warehouse"` reads them from the streams' archives instead of the bus.
    `panes=False` keeps every result table on a one-stage plan (for comparing plans).
    `max_records_per_batch` caps each micro-batch. `sources` gives DataFrames to read instead
    of some inputs' streams, by input table name, with the input's columns (including its
    time column as a TIMESTAMP): to feed an app from elsewhere, such as in-memory data.
    `idle_ticks` moves the watermark of inputs whose buckets went idle on with the wall clock
    (`IDLE TIMEOUT`, see `millrace.engine.low_watermark`), for a query that runs on.

    Raises `SqlError` pointing into the app file for an input stream that does not exist, a
    function that cannot be imported, or a column, table or type error that Spark's analysis
    finds.
    """
    if time_range is None:
        require_streaming_aggregates(app)
    spark.udf.register(TOPK_FINISH, topk_finish())
    for function in app.functions:
        spark.udf.register(function.name, _load_function(function))
    # What the inputs start (dead-letter routers, idle tickers) stops if compiling fails.
    with ExitStack() as opened:
        inputs = {}
        for source in app.inputs:
            if sources is not None and source.name in sources:
                records = sources[source.name]
                if source.lateness is not None:
                    lateness_ms = parse_duration_ms(source.lateness, what="lateness")
                    records = records.withWatermark(source.time, f"{lateness_ms} milliseconds")
                inputs[source.name] = StreamInput(source.stream, records, None)
                records.createOrReplaceTempView(source.name)
                continue
            try:
                if time_range is None:
                    inputs[source.name] = read_stream(
                        spark,
                        workspace,
                        app.name,
                        source.stream,
                        source.schema,
                        time=source.time,
                        lateness=source.lateness,
                        route_dead_letters=route_dead_letters,
                        max_records_per_batch=max_records_per_batch or app.max_records_per_batch,
                        deduplicate=app.semantics == "exactly_once",
                        max_future=source.max_future,
                        idle_timeout=(
                            source.idle_timeout or workspace.settings.events_idle_timeout
                            if idle_ticks
                            else None
                        ),
                        # Its readers wait on the markers of the streams it writes.
                        publishes_markers=bool(app.inserts)
                        or any(table.emit is not None for table in app.tables),
                    )
                else:
                    inputs[source.name] = read_batch(
                        spark,
                        workspace,
                        source.stream,
                        source.schema,
                        time=source.time,
                        start_ms=time_range[0],
                        end_ms=time_range[1],
                        route_dead_letters=route_dead_letters,
                        kafka_records=read_records(spark, workspace, source.stream, batch_source),
                        max_future=source.max_future,
                    )
            except StreamNotFoundError as error:
                raise missing_input_error(source.position, error) from None
            opened.callback(inputs[source.name].close)
            inputs[source.name].records.createOrReplaceTempView(source.name)
        compiler = _QueryCompiler(spark, app, panes=panes, workspace=workspace)
        for view in app.views:
            compiler.dataframe(view.query, view.position).createOrReplaceTempView(view.name)
        tables = {
            table.name: compiler.dataframe(table.query, table.position, table.name)
            for table in app.tables
        }
        inserts = {
            insert.stream: compiler.dataframe(
                compiler.keeping_record_time(
                    compiler.keeping_record_id(insert.query), insert.position
                ),
                insert.position,
            )
            for insert in app.inserts
        }
        return CompiledApp(app, inputs, tables, inserts, compiler.plans, opened.pop_all())


class _QueryCompiler:
    def __init__(
        self,
        spark: SparkSession,
        app: SqlApp,
        *,
        panes: bool,
        workspace: Workspace | None = None,
    ) -> None:
        self.spark = spark
        self.app = app
        self.panes = panes
        self.workspace = workspace
        self.plans: dict[str, str] = {}
        # Views that add a lookup's columns to a table, and the table each one extends.
        self.lookup_views: dict[str, str] = {}

    def dataframe(self, query: Query, position: Position, table: str | None = None) -> DataFrame:
        """The query's DataFrame, on a two-stage plan for a 'final' table that can use one.

        `self.plans[table]` tells which plan was chosen, and why.
        """
        query = self._with_lookups(query)
        tree = self._with_own_aggregates(query.tree.copy(), position)
        if query.windows:
            tree = self._windowed(tree, query.windows, position)
        # The one-stage plan is analysed whichever plan runs: its errors point into the file,
        # and its column names are the table's.
        one_stage = self._run(tree.sql(dialect="spark"), query, position)
        if table is None:
            return one_stage
        mode = next(result.mode for result in self.app.tables if result.name == table)
        if not _gains_from_panes(query):
            self.plans[table] = _one_stage_description(query, None)
            return one_stage
        reason: str | None
        if not self.panes:
            reason = "panes are turned off"
        elif mode == "updates":
            reason = "mode 'updates' allows one stateful stage"
        else:
            plan, reason = _TwoStagePlan.build(self, query, position, one_stage.columns)
            if plan is not None:
                self.plans[table] = plan.description
                return plan.dataframe
        self.plans[table] = _one_stage_description(query, reason)
        return one_stage

    def _with_lookups(self, query: Query) -> Query:
        """`query` reading, for each `JOIN LOOKUP`, a view of its table with the lookup column.

        The view is the joined table with one more column, named like the lookup's alias, a
        struct of the serving table's value columns (`c.topic` then reads its field): the
        rows of a lookup join are the table's rows, with NULLs where the key is missing.
        """
        if not query.lookups:
            return query
        tree = query.tree.copy()
        windows = dict(query.windows)
        for lookup in query.lookups:
            reference = self._lookup_reference(tree, lookup)
            view = f"__lookup_{query.offset}_{lookup.alias}"
            self.spark.table(reference.name).withColumn(
                lookup.alias, self._lookup_column(lookup, reference)
            ).createOrReplaceTempView(view)
            self.lookup_views[view] = reference.name
            if reference.name in windows:
                windows[view] = windows.pop(reference.name)
            reference.replace(exp.to_table(view).as_(reference.alias_or_name))
        return dataclasses.replace(query, tree=tree, windows=windows)

    def _lookup_reference(self, tree: exp.Query, lookup: Lookup) -> exp.Table:
        tables = list(tree.find_all(exp.Table))
        if lookup.left is None and len(tables) == 1:
            return tables[0]
        for table in tables:
            if lookup.left is not None and table.alias_or_name.lower() == lookup.left.lower():
                return table
        raise SqlError(
            f"{lookup.position}: JOIN LOOKUP {lookup.table}: cannot tell which table of the "
            "FROM clause its key is computed from",
            hint=f"qualify the key's columns, such as ON {lookup.alias}.k = e.k with FROM t e",
        )

    def _lookup_column(self, lookup: Lookup, reference: exp.Table) -> Column:
        if self.workspace is None:
            raise SqlError(f"{lookup.position}: lookup joins need a workspace")
        settings = self.workspace.settings
        try:
            spec = describe_table(settings, lookup.table)
        except ServingError as error:
            raise SqlError(
                f"{lookup.position}: JOIN LOOKUP: {error.message}", hint=error.hint
            ) from None
        given = {column for column, _ in lookup.keys}
        if given != set(spec.key_names) or len(given) != len(lookup.keys):
            raise SqlError(
                f"{lookup.position}: JOIN LOOKUP {lookup.table}: the condition binds "
                f"{', '.join(sorted(given))}, and the table's key is "
                f"{', '.join(spec.key_names)}",
                hint="write one equality per key column of the serving table",
            )
        source = self.spark.table(reference.name)
        if lookup.alias in source.columns:
            raise SqlError(
                f"{lookup.position}: JOIN LOOKUP {lookup.table} {lookup.alias}: "
                f"{reference.name} has a column named {lookup.alias!r} already",
                hint="give the lookup another alias",
            )
        by_column = dict(lookup.keys)
        keys = []
        for column in spec.key_names:
            expression = sqlglot.parse_one(by_column[column], read="spark")
            for part in expression.find_all(exp.Column):
                part.set("table", None)
            keys.append(F.expr(expression.sql(dialect="spark")))
        return lookup_column(keys, spec, settings.redis, max_age_s=settings.redis_lookup_cache_s)

    def keeping_record_id(self, query: Query) -> Query:
        """`query` selecting its input's `record_id` too, when it reads one table that has it.

        An insert's records take their ids from the records they come from (see
        `millrace.apps.sql.running`); a query that selects `*` keeps the id already.
        """
        select, table = query.tree, _single_table(query.tree)
        if table is None or any(
            expression.is_star or expression.alias_or_name == "record_id"
            for expression in select.expressions
        ):
            return query
        try:
            columns = self.spark.table(table.name).columns
        except AnalysisException:
            return query  # an unknown table: the query's own analysis says where
        if "record_id" not in columns:
            return query
        tree = select.copy()
        tree.select(exp.column("record_id", table=table.alias_or_name), copy=False)
        return dataclasses.replace(query, tree=tree)

    def keeping_record_time(self, query: Query, position: Position) -> Query:
        """`query` selecting its input's event time as `record_time` too, when it reads one table.

        An insert's records carry their input's event time that way, in their `time` header,
        whether or not they select the time column (`millrace.engine.streams.written_time`).
        A query that joins, aggregates, selects DISTINCT rows or names a `record_time` of its
        own is left as it is.
        """
        select, table = query.tree, _single_table(query.tree)
        if (
            table is None
            or select.args.get("distinct")
            or query.is_aggregation
            or any(expression.alias_or_name == RECORD_TIME for expression in select.expressions)
        ):
            return query
        try:
            time = self._time_column(table.name, position)
            columns = self.spark.table(table.name).columns
        except (SqlError, AnalysisException):
            return query  # no time to keep, or an unknown table that the query's analysis names
        if time not in columns or RECORD_TIME in columns:
            return query
        tree = select.copy()
        tree.select(
            exp.alias_(exp.column(time, table=table.alias_or_name), RECORD_TIME), copy=False
        )
        return dataclasses.replace(query, tree=tree)

    def _run(self, sql: str, query: Query, position: Position) -> DataFrame:
        try:
            return self.spark.sql(sql)
        except AnalysisException as error:
            raise self._analysis_error(error, query, position) from None

    def _with_own_aggregates(self, tree: exp.Query, position: Position) -> exp.Query:
        def rewrite(node: exp.Expr) -> exp.Expr:
            return single_stage(node, str(position)) or node

        rewritten = tree.transform(rewrite, copy=False)
        assert isinstance(rewritten, exp.Query), "only aggregate calls are rewritten, not the query"
        return rewritten

    def _windowed(
        self, tree: exp.Query, windows: dict[str, Window], position: Position
    ) -> exp.Select:
        if not isinstance(tree, exp.Select):
            raise SqlError(
                f"{position}: a window needs a plain SELECT ... GROUP BY",
                hint="move set operations into a view, and window the view",
            )
        self._window_tables(tree, windows, position)
        window_column = exp.column(WINDOW_COLUMN)
        tree.set("expressions", [*_window_bounds(), *tree.expressions])
        return tree.group_by(window_column, copy=False)

    def _window_tables(
        self, tree: exp.Select, windows: dict[str, Window], position: Position
    ) -> None:
        """Replace each windowed table of `tree` by a view of it with a `_window` column."""
        for reference in list(tree.find_all(exp.Table)):
            window = windows.get(reference.name)
            if window is None:
                continue
            windowed_view = self._window_view(reference.name, window, position)
            alias = reference.alias or reference.name
            reference.replace(exp.to_table(windowed_view).as_(alias))

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
        name = self.lookup_views.get(name, name)
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


@dataclass(frozen=True)
class _TwoStagePlan:
    """A windowed aggregation as partial aggregates per pane, then combined per window.

    Stage one groups the rows by pane (a tumbling window one slide long), by the query's
    group keys and by the TOPK item if there is one, computing each aggregate's partials.
    Stage two assigns each pane row to the windows that hold the pane and combines the
    partials. A sliding window then touches each pane row `size / slide` times instead of
    each input row, and TOPK keeps one entry per item and pane instead of one per row.
    """

    dataframe: DataFrame
    description: str

    @classmethod
    def build(
        cls, compiler: _QueryCompiler, query: Query, position: Position, columns: list[str]
    ) -> tuple[_TwoStagePlan | None, str | None]:
        """The plan and None, or None and why the query cannot use one.

        Called for queries that would gain from panes (`_gains_from_panes`).
        """
        select = query.tree
        if not isinstance(select, exp.Select) or len(query.windows) != 1:
            return None, "it does not read exactly one windowed table"
        if select.args.get("distinct") or any(
            not _outermost_aggregates(expression) and expression.find(exp.Star)
            for expression in select.expressions
        ):
            return None, "it selects DISTINCT or *"
        having = select.args.get("having")
        outputs = [*select.expressions, *([having.this] if having else [])]
        aggregates = [node for output in outputs for node in _outermost_aggregates(output)]
        ((table, window),) = query.windows.items()
        items = [topk_item(node, str(position)) for node in aggregates if is_topk(node)]
        if len({item.sql(dialect="spark") for item in items}) > 1:
            return None, "its TOPK calls rank different items"
        maybe_splits = [
            split(
                node,
                str(position),
                "_item" if items else None,
                one_pane_per_window=not window.is_sliding,
            )
            for node in aggregates
        ]
        splits = [piece for piece in maybe_splits if piece is not None]
        if len(splits) < len(maybe_splits):
            pairs = zip(aggregates, maybe_splits, strict=True)
            names = sorted(
                {node.sql(dialect="spark").partition("(")[0] for node, piece in pairs if not piece}
            )
            return None, f"{', '.join(names)} cannot be combined over panes"
        keys = list(select.args["group"].expressions) if select.args.get("group") else []
        pane = Window(window.slide_ms or window.size_ms)
        stage_one = select.copy()
        stage_one.set("having", None)
        stage_one.set("group", None)
        partials = [partial for piece in splits for partial in piece.partials]
        stage_one.set(
            "expressions",
            [
                exp.alias_(exp.column(WINDOW_COLUMN), "_pane"),
                *(exp.alias_(key.copy(), f"_k{index}") for index, key in enumerate(keys)),
                *([exp.alias_(items[0].copy(), "_item")] if items else []),
                *(exp.alias_(partial, f"_p{index}") for index, partial in enumerate(partials)),
            ],
        )
        compiler._window_tables(stage_one, {table: pane}, position)
        stage_one = stage_one.group_by(
            exp.column(WINDOW_COLUMN),
            *(key.copy() for key in keys),
            *([items[0].copy()] if items else []),
            copy=False,
        )
        panes_view = f"__panes_{query.offset}"
        compiler._run(stage_one.sql(dialect="spark"), query, position).createOrReplaceTempView(
            panes_view
        )
        combined = iter(_combinations(splits))
        key_columns = {key.sql(dialect="spark"): f"_k{index}" for index, key in enumerate(keys)}

        def stage_two(output: exp.Expr) -> exp.Expr:
            rewritten = output.copy()
            for node in _outermost_aggregates(rewritten):
                replacement = next(combined)
                if node is rewritten:
                    return replacement
                node.replace(replacement)
            return rewritten.transform(_replace_keys, key_columns, copy=False)

        names = columns[len(_window_bounds()) :]
        expressions = [
            exp.alias_(stage_two(_unaliased(output)), name)
            for output, name in zip(select.expressions, names, strict=True)
        ]
        # A tumbling window is its one pane, so the panes' own window column groups stage two.
        assigner = (
            f"window(window_time(_pane), '{window.size_ms} milliseconds', "
            f"'{window.slide_ms} milliseconds')"
            if window.is_sliding
            else "_pane"
        )
        stage_two_tree = (
            exp.select(*_window_bounds(), *expressions)
            .from_(
                exp.select("*", f"{assigner} AS {WINDOW_COLUMN}")
                .from_(panes_view)
                .subquery("_panes")
            )
            .group_by(exp.column(WINDOW_COLUMN), *key_columns.values())
        )
        if having is not None:
            stage_two_tree = stage_two_tree.having(stage_two(having.this))
        dataframe = compiler._run(stage_two_tree.sql(dialect="spark"), query, position)
        description = (
            f"two stages: partial aggregates per {pane.size_ms} ms pane"
            + (" and TOPK item" if items else "")
            + f", combined into {_describe(window)}"
        )
        return cls(dataframe, description), None


def _single_table(tree: exp.Expr) -> exp.Table | None:
    """The one table a SELECT reads, with no join; None for any other query."""
    source = tree.args.get("from_") if isinstance(tree, exp.Select) else None
    if source is None or not isinstance(source.this, exp.Table) or tree.args.get("joins"):
        return None
    return source.this


def _combinations(splits: list[Split]) -> list[exp.Expr]:
    """Each aggregate's combination over the pane columns `_p0`, `_p1`, ... in order."""
    combinations, index = [], 0
    for piece in splits:
        columns: list[exp.Expr] = [
            exp.column(f"_p{index + offset}") for offset in range(len(piece.partials))
        ]
        combinations.append(piece.combine(columns))
        index += len(piece.partials)
    return combinations


def _outermost_aggregates(node: exp.Expr) -> list[exp.Expr]:
    if is_aggregate(node):
        return [node]
    return [found for child in node.iter_expressions() for found in _outermost_aggregates(child)]


def _unaliased(expression: exp.Expr) -> exp.Expr:
    return expression.this if isinstance(expression, exp.Alias) else expression


def _window_bounds() -> list[exp.Expr]:
    window_column = exp.column(WINDOW_COLUMN)
    return [
        exp.alias_(exp.Dot.build([window_column.copy(), exp.to_identifier(bound)]), name)
        for bound, name in (("start", "window_start"), ("end", "window_end"))
    ]


def _describe(window: Window) -> str:
    if window.is_sliding:
        return f"{window.size_ms} ms windows sliding every {window.slide_ms} ms"
    return f"{window.size_ms} ms tumbling windows"


def _gains_from_panes(query: Query) -> bool:
    """True for a windowed query with a sliding window or a TOPK: what two stages speed up."""
    return any(window.is_sliding for window in query.windows.values()) or (
        bool(query.windows) and any(is_topk(node) for node in query.tree.walk())
    )


def _replace_keys(node: exp.Expr, key_columns: dict[str, str]) -> exp.Expr:
    """`node` as its stage-one key column when it is a group key, else as it is."""
    column = key_columns.get(node.sql(dialect="spark"))
    return exp.column(column) if column is not None else node


def _one_stage_description(query: Query, reason: str | None) -> str:
    if not query.windows:
        return "one stage, without a window"
    window = next(iter(query.windows.values()))
    if reason is None:
        return f"one stage, {_describe(window)}"
    return f"one stage, Spark's own {_describe(window)} ({reason})"


def _load_function(function: Function) -> UserDefinedFunctionLike:
    module_name, _, attribute = function.target.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise SqlError(
            f"{function.position}: function {function.name}: cannot import module "
            f"{module_name!r}: {error}",
            hint="put the module on the PYTHONPATH of the app (or install it in the virtualenv)",
        ) from None
    except Exception as error:
        raise import_failure(
            error, module_name, SqlError, context=f"{function.position}: function {function.name}: "
        ) from None
    ship_with_tasks(module)
    target = getattr(module, attribute, None)
    if target is None:
        raise SqlError(
            f"{function.position}: function {function.name}: module {module_name!r} has no "
            f"{attribute!r}",
            hint=f"define {attribute} in {module.__file__}",
        )
    if isinstance(target, UserDefinedFunction) or hasattr(target, "returnType"):
        # Already a Spark UDF, e.g. a vectorised @pandas_udf.
        spark_udf: UserDefinedFunctionLike = target
        return spark_udf
    annotation = inspect.signature(target).return_annotation
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", None)
    returns = _PYTHON_TO_SPARK.get(name or "", name if isinstance(annotation, str) else None)
    if returns is None:
        raise SqlError(
            f"{function.position}: function {function.name}: {function.target} has no return "
            "type annotation that Spark can use",
            hint="annotate it, such as `-> float`, or decorate it with @pandas_udf('double')",
        )
    return F.udf(target, returns, useArrow=True)
