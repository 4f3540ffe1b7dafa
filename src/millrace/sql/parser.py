"""Reading a SQL app file: statements, their positions, and the checks that need no Spark.

An app file holds `CREATE APPLICATION`, then input tables, views, functions, result tables
and stream inserts, each ending with `;`. The DDL around the queries is parsed here; each
SELECT is parsed by sqlglot (Spark dialect) after its window brackets (`FROM t [5 minutes]`)
are noted and blanked out, so every position in an error still points into the file.

Example:
    >>> app = parse_app("CREATE APPLICATION a; CREATE INPUT TABLE t (x) FROM STREAM('s') TIME ts;")
    >>> app.name, app.inputs[0].columns
    ('a', (('x', 'STRING'), ('ts', 'TIMESTAMP')))
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import sqlglot
from sqlglot import exp

from millrace.config.durations import parse_duration_ms
from millrace.errors import ConfigError, SqlError
from millrace.sql.aggregates import is_aggregate
from millrace.warehouse.sql_text import readable, untokenizable

EmitMode = Literal["final", "updates"]

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_STATEMENT_KINDS = (
    "CREATE APPLICATION, CREATE INPUT TABLE, CREATE VIEW, CREATE FUNCTION, CREATE TABLE "
    "or INSERT INTO STREAM"
)
_APPLICATION = re.compile(
    rf"CREATE\s+APPLICATION\s+(?P<name>{_IDENT})\s*(?:WITH\s*\((?P<options>[^)]*)\)\s*)?$",
    re.I | re.S,
)
_SEMANTICS = ("exactly_once", "at_least_once", "at_most_once")
_STATE_STORES = ("memory", "rocksdb")
_INPUT = re.compile(
    rf"CREATE\s+INPUT\s+TABLE\s+(?P<name>{_IDENT})\s*\((?P<columns>.*)\)\s*"
    r"FROM\s+(?:STREAM|SCRIBE)\s*\(\s*'(?P<stream>[^']*)'\s*\)\s*"
    rf"TIME\s+(?P<time>{_IDENT})(?:\s+LATENESS\s+'(?P<lateness>[^']*)')?"
    r"(?:\s+MAX\s+FUTURE\s+'(?P<max_future>[^']*)')?"
    r"(?:\s+IDLE\s+TIMEOUT\s+'(?P<idle_timeout>[^']*)')?\s*$",
    re.I | re.S,
)
_INPUT_DURATIONS = {
    "lateness": "LATENESS",
    "max_future": "MAX FUTURE",
    "idle_timeout": "IDLE TIMEOUT",
}
_VIEW = re.compile(rf"CREATE\s+VIEW\s+(?P<name>{_IDENT})\s+AS\s+(?P<query>.*)$", re.I | re.S)
_FUNCTION = re.compile(
    rf"CREATE\s+FUNCTION\s+(?P<name>{_IDENT})\s+AS\s+'(?P<target>[^']*)'\s*$", re.I | re.S
)
_TABLE = re.compile(
    rf"CREATE\s+TABLE\s+(?P<name>{_IDENT})\s*(?:WITH\s*\((?P<options>[^)]*)\)\s*)?"
    r"AS\s+(?P<query>.*)$",
    re.I | re.S,
)
_INSERT = re.compile(
    r"INSERT\s+INTO\s+(?:STREAM|SCRIBE)\s*\(\s*'(?P<stream>[^']*)'\s*\)\s*(?P<query>.*)$",
    re.I | re.S,
)
_OPTION = re.compile(rf"\s*(?P<key>{_IDENT})\s*=\s*'(?P<value>[^']*)'\s*")
_WINDOWED_TABLE = re.compile(
    rf"\b(?:FROM|JOIN)\s+(?P<table>{_IDENT})\s*(?P<window>\[[^\]]*\])", re.I
)
_WINDOW = re.compile(r"^\s*(?P<size>.+?)(?:\s+SLIDE\s+(?P<slide>.+?))?\s*$", re.I | re.S)
_LOOKUP_JOIN = re.compile(
    rf"\bJOIN\s+LOOKUP\s+(?P<table>{_IDENT})\s+(?:AS\s+)?(?P<alias>{_IDENT})\s+ON\s+",
    re.I | re.S,
)
# What ends a lookup's ON condition, outside brackets: the next clause, or a closing bracket.
_CLAUSE_END = re.compile(
    r"\b(?:WHERE|GROUP|HAVING|ORDER|LIMIT|UNION|JOIN|LEFT|INNER|CROSS|WINDOW|CLUSTER|"
    r"DISTRIBUTE|SORT)\b",
    re.I,
)
_TABLE_OPTIONS = ("emit", "mode", "serve", "ttl")


@dataclass(frozen=True)
class Position:
    """A place in an app file, 1-based, as editors show it."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Window:
    """An event-time window: tumbling when `slide_ms` is None, else sliding."""

    size_ms: int
    slide_ms: int | None = None

    @property
    def is_sliding(self) -> bool:
        """True for `[size SLIDE slide]` with a slide shorter than the size."""
        return self.slide_ms is not None and self.slide_ms != self.size_ms


@dataclass(frozen=True)
class Lookup:
    """`JOIN LOOKUP table alias ON alias.k = expr [AND ...]`: a lookup join on a serving table.

    `keys` pairs each key column of the serving table with the Spark SQL expression, over
    the table it joins (`left`, the alias or name that the expressions name), giving its value.
    """

    table: str
    alias: str
    keys: tuple[tuple[str, str], ...]
    left: str | None
    position: Position


@dataclass(frozen=True)
class Query:
    """A SELECT of the app: its text with window brackets blanked, and what sqlglot made of it.

    `lookups` are its `JOIN LOOKUP` clauses, which are blanked out of `text` and `tree` too.
    """

    text: str
    offset: int
    windows: dict[str, Window]
    tree: exp.Query
    lookups: tuple[Lookup, ...] = ()

    @property
    def is_aggregation(self) -> bool:
        """True when the query groups or aggregates at its top level."""
        if not isinstance(self.tree, exp.Select):
            return False
        return bool(self.tree.args.get("group")) or any(
            any(is_aggregate(node) for node in expression.walk())
            for expression in self.tree.expressions
        )


@dataclass(frozen=True)
class InputTable:
    """`CREATE INPUT TABLE name (columns) FROM STREAM('s') TIME col [LATENESS 'd']`.

    `MAX FUTURE 'd'` and `IDLE TIMEOUT 'd'` may follow, in that order; without them the
    settings `events.max_future` and `events.idle_timeout` apply.
    """

    name: str
    columns: tuple[tuple[str, str], ...]
    stream: str
    time: str
    lateness: str | None
    position: Position
    max_future: str | None = None
    idle_timeout: str | None = None

    @property
    def schema(self) -> str:
        """The value's columns as a Spark DDL string, without the time column."""
        return ", ".join(f"`{name}` {kind}" for name, kind in self.columns if name != self.time)


@dataclass(frozen=True)
class View:
    """`CREATE VIEW name AS SELECT ...`: a query reused inside the app."""

    name: str
    query: Query
    position: Position


@dataclass(frozen=True)
class Function:
    """`CREATE FUNCTION name AS 'module.function'`: a Python UDF."""

    name: str
    target: str
    position: Position


@dataclass(frozen=True)
class ResultTable:
    """`CREATE TABLE name [WITH (emit = 's', mode = 'final', serve = 't', ttl = '7d')] AS ...`.

    `serve` names the serving table its rows are also upserted into, `ttl` that table's TTL.
    """

    name: str
    query: Query
    emit: str | None
    mode: EmitMode
    position: Position
    serve: str | None = None
    ttl: str | None = None


@dataclass(frozen=True)
class StreamInsert:
    """`INSERT INTO STREAM('s') SELECT ...`: a stateless app writing a derived stream."""

    stream: str
    query: Query
    position: Position


@dataclass(frozen=True)
class SqlApp:
    """A parsed app file, its statements grouped by kind in file order."""

    name: str
    file: str
    text: str
    inputs: tuple[InputTable, ...]
    views: tuple[View, ...]
    functions: tuple[Function, ...]
    tables: tuple[ResultTable, ...]
    inserts: tuple[StreamInsert, ...]
    semantics: str = "exactly_once"
    """`CREATE APPLICATION name WITH (semantics = '...')`: exactly_once, at_least_once or
    at_most_once (see docs/semantics.md)."""
    max_records_per_batch: int | None = None
    """`WITH (max_records_per_batch = 'N')`: the records each micro-batch reads at most."""
    state_store: str = "memory"
    """`WITH (state_store = '...')`: memory (on the JVM heap) or rocksdb (on local disk), the
    state store of the app's queries (see docs/sql.md)."""

    def input(self, name: str) -> InputTable | None:
        """The input table called `name`, if there is one."""
        return next((table for table in self.inputs if table.name.lower() == name.lower()), None)

    def position(self, offset: int) -> Position:
        """The line and column of character `offset` of the app file."""
        return _position(self.text, self.file, offset)


def load_app(path: Path) -> SqlApp:
    """Read and parse the app file at `path`; `SqlError` says what is wrong and where."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise SqlError(
            f"cannot read {path}: {error.strerror}", hint="check the path of the .sql file"
        ) from None
    return parse_app(text, str(path))


def parse_app(text: str, file: str = "<string>") -> SqlApp:
    """Parse the text of an app file; `SqlError` with `file:line:column` when it is not valid."""
    return _AppParser(text, file).parse()


class _AppParser:
    def __init__(self, text: str, file: str) -> None:
        self.text = text
        self.file = file
        self.name: str | None = None
        self.inputs: list[InputTable] = []
        self.views: list[View] = []
        self.functions: list[Function] = []
        self.tables: list[ResultTable] = []
        self.inserts: list[StreamInsert] = []
        self.defined: dict[str, Position] = {}
        self.semantics = "exactly_once"
        self.max_records_per_batch: int | None = None
        self.state_store = "memory"

    def parse(self) -> SqlApp:
        for offset, statement in _split_statements(self.text):
            self._statement(offset, statement)
        if self.name is None:
            raise self.error(
                0,
                "the app has no CREATE APPLICATION statement",
                "start the file with `CREATE APPLICATION name;`",
            )
        return SqlApp(
            self.name,
            self.file,
            self.text,
            tuple(self.inputs),
            tuple(self.views),
            tuple(self.functions),
            tuple(self.tables),
            tuple(self.inserts),
            self.semantics,
            self.max_records_per_batch,
            self.state_store,
        )

    def _statement(self, offset: int, statement: str) -> None:
        if match := _APPLICATION.match(statement):
            if self.name is not None:
                raise self.error(offset, "a second CREATE APPLICATION", "an app file holds one app")
            self.name = match["name"]
            if match["options"] is not None:
                self._app_options(match["options"], offset + match.start("options"))
            return
        if self.name is None:
            raise self.error(
                offset,
                "the app must start with CREATE APPLICATION",
                "put `CREATE APPLICATION name;` before the other statements",
            )
        position = self.position(offset)
        if match := _INPUT.match(statement):
            self._define(match["name"], offset)
            time = match["time"]
            declared = self._columns(match["columns"], offset + match.start("columns"))
            if time not in dict(declared):
                declared = (*declared, (time, "TIMESTAMP"))
            # An untyped column is a STRING, except the time column, which is a TIMESTAMP.
            columns = tuple(
                (name, kind or ("TIMESTAMP" if name == time else "STRING"))
                for name, kind in declared
            )
            if dict(columns)[time] != "TIMESTAMP":
                raise self.error(
                    offset + match.start("time"),
                    f"time column {time!r} is declared {dict(columns)[time]}",
                    "declare it TIMESTAMP, or leave its type out of the column list",
                )
            for clause, words in _INPUT_DURATIONS.items():
                if match[clause] is not None:
                    self._duration(match[clause], offset + match.start(clause), words)
            self.inputs.append(
                InputTable(
                    match["name"],
                    columns,
                    match["stream"],
                    time,
                    match["lateness"],
                    position,
                    max_future=match["max_future"],
                    idle_timeout=match["idle_timeout"],
                )
            )
        elif match := _VIEW.match(statement):
            self._define(match["name"], offset)
            query = self._query(match["query"], offset + match.start("query"))
            self.views.append(View(match["name"], query, position))
        elif match := _FUNCTION.match(statement):
            self._define(match["name"], offset)
            if not re.fullmatch(rf"{_IDENT}(\.{_IDENT})+", match["target"]):
                raise self.error(
                    offset + match.start("target"),
                    f"function target {match['target']!r} is not 'module.function'",
                    "name the Python function with its module, such as 'my_udfs.normalize'",
                )
            self.functions.append(Function(match["name"], match["target"], position))
        elif match := _TABLE.match(statement):
            self._define(match["name"], offset)
            options_offset = offset + (match.start("options"))
            emit, mode = self._table_options(match["options"], options_offset)
            serve, ttl = self._serving_options(match["options"], options_offset)
            query = self._query(match["query"], offset + match.start("query"))
            table = ResultTable(match["name"], query, emit, mode, position, serve=serve, ttl=ttl)
            self._check_result_table(table, offset)
            self.tables.append(table)
        elif match := _INSERT.match(statement):
            query = self._query(match["query"], offset + match.start("query"))
            if query.is_aggregation:
                raise self.error(
                    offset,
                    "INSERT INTO STREAM is for stateless apps, and this query aggregates",
                    "write aggregations as CREATE TABLE name WITH (emit = 'stream') AS SELECT ...",
                )
            self.inserts.append(StreamInsert(match["stream"], query, position))
        else:
            raise self.error(
                offset, "unknown or malformed statement", f"expected {_STATEMENT_KINDS}"
            )

    def _define(self, name: str, offset: int) -> None:
        earlier = self.defined.get(name.lower())
        if earlier is not None:
            raise self.error(
                offset,
                f"{name!r} is already defined at line {earlier.line}",
                "give each table, view and function its own name",
            )
        self.defined[name.lower()] = self.position(offset)

    def _columns(self, text: str, offset: int) -> tuple[tuple[str, str | None], ...]:
        columns: list[tuple[str, str | None]] = []
        # Types such as STRUCT<a: INT, b: INT> hold commas inside angle brackets.
        for start, part in _split_top_level(text, ",", "([<", ")]>"):
            match = re.fullmatch(rf"\s*({_IDENT})(?:\s+(.+?))?\s*", part, re.S)
            if match is None:
                raise self.error(
                    offset + start,
                    f"column {part.strip()!r} is not `name` or `name TYPE`",
                    "write columns like `score DOUBLE`; a column without a type is a STRING",
                )
            kind = match[2].upper() if match[2] else None
            if kind is not None:
                try:
                    exp.DataType.build(kind, dialect="spark")
                except (sqlglot.errors.SqlglotError, ValueError):
                    raise self.error(
                        offset + start + match.start(2),
                        f"{match[2]!r} is not a Spark SQL type",
                        "use STRING, BIGINT, DOUBLE, BOOLEAN, TIMESTAMP, DECIMAL(p, s), ARRAY<...>",
                    ) from None
            columns.append((match[1], kind))
        return tuple(columns)

    def _table_options(self, text: str | None, offset: int) -> tuple[str | None, EmitMode]:
        options: dict[str, str] = {}
        for start, part in _split_top_level(text or "", ","):
            match = _OPTION.fullmatch(part)
            if match is None or match["key"].lower() not in _TABLE_OPTIONS:
                raise self.error(
                    offset + start,
                    f"table option {part.strip()!r} is not known",
                    "the options are emit = 'stream_name', mode = 'final' or 'updates', "
                    "serve = 'serving_table' and ttl = 'duration'",
                )
            options[match["key"].lower()] = match["value"]
        mode = options.get("mode", "final").lower()
        if mode not in ("final", "updates"):
            raise self.error(offset, f"mode {mode!r} is not known", "use 'final' or 'updates'")
        return options.get("emit"), "final" if mode == "final" else "updates"

    def _serving_options(self, text: str | None, offset: int) -> tuple[str | None, str | None]:
        options = {
            match["key"].lower(): match["value"]
            for _, part in _split_top_level(text or "", ",")
            if (match := _OPTION.fullmatch(part)) is not None
        }
        serve, ttl = options.get("serve"), options.get("ttl")
        if serve is not None and not re.fullmatch(_IDENT, serve):
            raise self.error(
                offset,
                f"serve = {serve!r} is not a serving table name",
                "name it with letters, digits and underscores",
            )
        if ttl is not None:
            if serve is None:
                raise self.error(offset, "ttl without serve", "ttl is the serving table's TTL")
            self._duration(ttl, offset, "ttl")
        return serve, ttl

    def _lookups(self, text: str, offset: int) -> tuple[str, tuple[Lookup, ...]]:
        """`text` with its `JOIN LOOKUP` clauses blanked out, and the clauses."""
        lookups: list[Lookup] = []
        for match in list(_LOOKUP_JOIN.finditer(text)):
            start = offset + match.end()
            end = _condition_end(text, match.end())
            try:
                condition = sqlglot.parse_one(text[match.end() : end], read="spark")
            except sqlglot.errors.SqlglotError:
                condition = None
            pairs = _equalities(condition)
            keys: list[tuple[str, str]] = []
            lefts: set[str] = set()
            for left, right in pairs or []:
                for mine, other in ((left, right), (right, left)):
                    if isinstance(mine, exp.Column) and mine.table == match["alias"]:
                        keys.append((mine.name, other.sql(dialect="spark")))
                        lefts |= {column.table for column in other.find_all(exp.Column)}
                        break
                else:
                    pairs = None
            if not pairs or match["alias"] in lefts:
                raise self.error(
                    start,
                    f"JOIN LOOKUP {match['table']} {match['alias']}: the condition must be "
                    f"{match['alias']}.key = expression [AND ...]",
                    f"write ON {match['alias']}.dimension_id = e.dimension_id, one equality "
                    "per key column of the serving table",
                )
            lefts.discard("")
            if len(lefts) > 1:
                raise self.error(
                    start,
                    f"JOIN LOOKUP {match['table']}: the key reads {', '.join(sorted(lefts))}",
                    "compute the key from one table of the FROM clause",
                )
            lookups.append(
                Lookup(
                    match["table"],
                    match["alias"],
                    tuple(keys),
                    next(iter(lefts), None),
                    self.position(offset + match.start()),
                )
            )
            begin = match.start()
            text = text[:begin] + " " * (end - begin) + text[end:]
        return text, tuple(lookups)

    def _app_options(self, text: str, offset: int) -> None:
        for start, part in _split_top_level(text, ","):
            match = _OPTION.fullmatch(part)
            key = match["key"].lower() if match is not None else None
            if match is None or key not in ("semantics", "max_records_per_batch", "state_store"):
                raise self.error(
                    offset + start,
                    f"application option {part.strip()!r} is not known",
                    "the options are semantics = 'exactly_once', 'at_least_once' or "
                    "'at_most_once', max_records_per_batch = 'N', and state_store = 'memory' "
                    "or 'rocksdb'",
                )
            value = match["value"].strip()
            if key == "semantics":
                self.semantics = self._one_of(key, value, _SEMANTICS, offset + start)
            elif key == "state_store":
                self.state_store = self._one_of(key, value, _STATE_STORES, offset + start)
            else:
                if not value.isdigit() or int(value) < 1:
                    raise self.error(
                        offset + start,
                        f"max_records_per_batch {value!r} is not a positive whole number",
                        "give it like max_records_per_batch = '10000'",
                    )
                self.max_records_per_batch = int(value)

    def _one_of(self, key: str, value: str, choices: tuple[str, ...], offset: int) -> str:
        """`value` of option `key` in lower case; one of `choices`, the first being the default."""
        if value.lower() not in choices:
            listed = ", ".join(f"'{choice}'" for choice in choices)
            raise self.error(
                offset,
                f"{key} {value!r} is not known",
                f"use one of {listed}; '{choices[0]}' is the default",
            )
        return value.lower()

    def _query(self, text: str, offset: int) -> Query:
        windows: dict[str, Window] = {}
        text, lookups = self._lookups(text, offset)
        blanked = text
        for match in _WINDOWED_TABLE.finditer(text):
            bracket = match["window"]
            windows[match["table"]] = self._window(bracket[1:-1], offset + match.start("window"))
            start, end = match.span("window")
            blanked = blanked[:start] + " " * (end - start) + blanked[end:]
        try:
            tree = sqlglot.parse_one(blanked, read="spark")
        except sqlglot.errors.TokenError:
            inner, message, hint = untokenizable(blanked)
            raise self.error(offset + inner, message, hint) from None
        except sqlglot.errors.ParseError as error:
            detail = error.errors[0] if error.errors else {}
            inner = _offset_of(blanked, detail.get("line", 1), detail.get("col", 1))
            description = readable(str(detail.get("description", error)))
            raise self.error(
                offset + inner,
                f"the query is not valid SQL: {description}",
                "queries are Spark SQL; check the syntax near this position",
            ) from None
        if not isinstance(tree, exp.Query):
            raise self.error(offset, "expected a SELECT query here", "write `AS SELECT ...`")
        known = {name for name in self.defined} | {
            cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)
        }
        for table in tree.find_all(exp.Table):
            if table.name.lower() not in known:
                start = table.this.meta.get("start", 0) if table.this else 0
                raise self.error(
                    offset + start,
                    f"unknown table {table.name!r}",
                    "define it before this statement with CREATE INPUT TABLE or CREATE VIEW"
                    + (
                        f"; defined so far: {', '.join(sorted(self.defined))}"
                        if self.defined
                        else ""
                    ),
                )
        return Query(blanked, offset, windows, tree, lookups)

    def _window(self, text: str, offset: int) -> Window:
        match = _WINDOW.match(text)
        if match is None or not match["size"]:
            raise self.error(
                offset, f"window [{text}] is empty", "write [5 minutes] or [1 hour SLIDE 5 minutes]"
            )
        size_ms = self._duration(match["size"], offset, "window size")
        slide_ms = (
            self._duration(match["slide"], offset, "window slide") if match["slide"] else None
        )
        if slide_ms is not None and (slide_ms > size_ms or size_ms % slide_ms):
            raise self.error(
                offset,
                f"window [{text.strip()}]: the slide must divide the size",
                "choose a slide such as 1 minute for a 5 minute window",
            )
        return Window(size_ms, slide_ms)

    def _duration(self, text: str, offset: int, what: str) -> int:
        try:
            return parse_duration_ms(text, what=what)
        except ConfigError as error:
            raise self.error(offset, error.message, error.hint or "") from None

    def _check_result_table(self, table: ResultTable, offset: int) -> None:
        if not table.query.is_aggregation:
            raise self.error(
                offset,
                f"CREATE TABLE {table.name} does not aggregate",
                "a result table needs GROUP BY or an aggregate; "
                "stateless apps use INSERT INTO STREAM",
            )
        if table.mode == "final":
            if not table.query.windows:
                raise self.error(
                    offset,
                    f"CREATE TABLE {table.name}: mode 'final' needs a window, "
                    "and the query has none",
                    "add a window such as FROM t [5 minutes], or use mode = 'updates'",
                )
            for name in table.query.windows:
                source = next((i for i in self.inputs if i.name.lower() == name.lower()), None)
                if source is not None and source.lateness is None:
                    raise self.error(
                        offset,
                        f"CREATE TABLE {table.name}: mode 'final' closes a window when the "
                        f"watermark passes it, and input {name!r} declares no LATENESS",
                        f"add LATENESS '30 seconds' (or what fits) to input table {name}",
                    )
        for expression in table.query.tree.expressions:
            if not isinstance(expression, exp.Alias | exp.Column):
                raise self.error(
                    offset,
                    f"CREATE TABLE {table.name}: the result column "
                    f"{expression.sql(dialect='spark')} has no name",
                    "name it with AS, such as COUNT(*) AS n: result tables are stored and "
                    "queried by column name",
                )

    def position(self, offset: int) -> Position:
        return _position(self.text, self.file, offset)

    def error(self, offset: int, message: str, hint: str) -> SqlError:
        return SqlError(f"{self.position(offset)}: {message}", hint=hint)


def _condition_end(text: str, start: int) -> int:
    """Where the ON condition that starts at `start` ends: a clause or bracket closing it."""
    depth, quote, index = 0, "", start
    while index < len(text):
        char = text[index]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"`":
            quote = char
        elif char in "([":
            depth += 1
        elif char in ")]":
            if depth == 0:
                return index
            depth -= 1
        elif (
            depth == 0
            and (found := _CLAUSE_END.match(text, index))
            and (index == 0 or not (text[index - 1].isalnum() or text[index - 1] == "_"))
        ):
            return found.start()
        index += 1
    return len(text)


def _equalities(
    condition: exp.Expr | None,
) -> list[tuple[exp.Expr, exp.Expr]] | None:
    """The sides of each `a = b` of a condition made of equalities joined by AND, else None."""
    if isinstance(condition, exp.EQ):
        return [(condition.this, condition.expression)]
    if isinstance(condition, exp.And):
        left, right = _equalities(condition.this), _equalities(condition.expression)
        return None if left is None or right is None else left + right
    if isinstance(condition, exp.Paren):
        return _equalities(condition.this)
    return None


def _position(text: str, file: str, offset: int) -> Position:
    line = text.count("\n", 0, offset) + 1
    return Position(file, line, offset - (text.rfind("\n", 0, offset) + 1) + 1)


def _split_statements(text: str) -> list[tuple[int, str]]:
    """The statements of `text` with the offsets where their first keyword starts."""
    return [
        (start + len(part) - len(part.lstrip()), part.strip())
        for start, part in _split_top_level(_blank_comments(text), ";")
        if part.strip()
    ]


def _split_top_level(
    text: str, separator: str, opening: str = "([", closing: str = ")]"
) -> list[tuple[int, str]]:
    """Split on `separator` outside quotes and brackets, keeping each part's offset."""
    parts: list[tuple[int, str]] = []
    depth, quote, start = 0, "", 0
    for index, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"`":
            quote = char
        elif char in opening:
            depth += 1
        elif char in closing:
            depth -= 1
        elif char == separator and depth == 0:
            parts.append((start, text[start:index]))
            start = index + 1
    if text[start:].strip():
        parts.append((start, text[start:]))
    return parts


def _blank_comments(text: str) -> str:
    """`text` with `--` and `/* */` comments replaced by spaces, so offsets stay the same."""
    return re.sub(
        r"'(?:[^']|'')*'|--[^\n]*|/\*.*?\*/",
        lambda match: match[0] if match[0].startswith("'") else re.sub(r"[^\n]", " ", match[0]),
        text,
        flags=re.S,
    )


def _offset_of(text: str, line: int, column: int) -> int:
    lines = text.split("\n")
    return sum(len(earlier) + 1 for earlier in lines[: line - 1]) + max(column - 1, 0)


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
