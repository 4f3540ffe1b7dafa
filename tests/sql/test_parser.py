from pathlib import Path

import pytest

from millrace.errors import SqlError
from millrace.sql.parser import Window, load_app, parse_app

EXAMPLE = Path(__file__).parents[2] / "examples" / "top_events.sql"
HEADER = (
    "CREATE APPLICATION app;\n"
    "CREATE INPUT TABLE events (event_time, event, category, score DOUBLE)\n"
    "  FROM STREAM('events') TIME event_time LATENESS '30 seconds';\n"
)


def test_the_example_app_parses_into_its_inputs_tables_and_inserts() -> None:
    app = load_app(EXAMPLE)
    assert app.name == "top_events"
    [source] = app.inputs
    assert (source.name, source.stream, source.time, source.lateness) == (
        "events_score",
        "events_stream",
        "event_time",
        "30 seconds",
    )
    assert source.schema == "`event` STRING, `category` STRING, `score` DOUBLE"
    [table] = app.tables
    assert (table.name, table.mode, table.emit) == ("top_events_5min", "final", None)
    assert table.query.windows == {"events_score": Window(300_000)}
    [insert] = app.inserts
    assert insert.stream == "superbowl_posts"
    assert insert.position.line == 14


def test_untyped_columns_are_strings_and_the_time_column_a_timestamp() -> None:
    app = parse_app(HEADER)
    assert app.inputs[0].columns == (
        ("event_time", "TIMESTAMP"),
        ("event", "STRING"),
        ("category", "STRING"),
        ("score", "DOUBLE"),
    )


def test_scribe_is_a_synonym_of_stream_and_sliding_windows_and_options_are_read() -> None:
    app = parse_app(
        "CREATE APPLICATION a;\n"
        "CREATE INPUT TABLE t (x BIGINT, s STRUCT<a: INT, b: INT>) FROM SCRIBE('s') TIME ts;\n"
        "CREATE VIEW big AS SELECT * FROM t WHERE x > 10;\n"
        "CREATE TABLE counts WITH (emit = 'counts_stream', mode = 'updates') AS\n"
        "  SELECT COUNT(*) AS n FROM big [1 hour SLIDE 5 minutes];\n"
    )
    assert app.inputs[0].stream == "s"
    assert [view.name for view in app.views] == ["big"]
    [table] = app.tables
    assert (table.emit, table.mode) == ("counts_stream", "updates")
    assert table.query.windows == {"big": Window(3_600_000, 300_000)}
    assert table.query.windows["big"].is_sliding


def test_comments_and_semicolons_inside_strings_do_not_split_statements() -> None:
    app = parse_app(
        HEADER + "-- a comment; with a semicolon\n"
        "INSERT INTO STREAM('out') SELECT event FROM events WHERE event <> 'a;b' /* ; */;\n"
    )
    [insert] = app.inserts
    assert insert.position.line == 5
    assert "a;b" in insert.query.text


@pytest.mark.parametrize(
    ("text", "where", "complaint", "advice"),
    [
        (
            "CREATE INPUT TABLE t (a) FROM STREAM('s') TIME ts;",
            "1:1",
            "must start with CREATE APPLICATION",
            "CREATE APPLICATION name;",
        ),
        ("", "1:1", "has no CREATE APPLICATION", "start the file with"),
        (
            HEADER + "CREATE TABLE n AS SELECT COUNT(*) FROM nowhere [5 minutes];",
            "4:40",
            "unknown table 'nowhere'",
            "define it before this statement",
        ),
        (
            HEADER + "CREATE TABLE n AS SELECT category, COUNT(*) FROM events GROUP BY category;",
            "4:1",
            "mode 'final' needs a window",
            "use mode = 'updates'",
        ),
        (
            "CREATE APPLICATION a;\nCREATE INPUT TABLE t (x) FROM STREAM('s') TIME ts;\n"
            "CREATE TABLE n AS SELECT COUNT(*) FROM t [5 minutes];",
            "3:1",
            "input 't' declares no LATENESS",
            "add LATENESS",
        ),
        (
            HEADER + "CREATE TABLE n AS SELECT event FROM events [5 minutes];",
            "4:1",
            "does not aggregate",
            "INSERT INTO STREAM",
        ),
        (
            HEADER + "CREATE TABLE n AS SELECT MAX(score) FROM events [5 minutes];",
            "4:1",
            "the result column MAX(score) has no name",
            "name it with AS",
        ),
        (
            HEADER + "INSERT INTO STREAM('x') SELECT COUNT(*) FROM events;",
            "4:1",
            "is for stateless apps",
            "CREATE TABLE",
        ),
        (
            HEADER + "INSERT INTO STREAM('x') SELECT event FROM events WHERE (;",
            "4:56",
            "the query is not valid SQL",
            "Spark SQL",
        ),
        (
            "CREATE APPLICATION a;\nCREATE INPUT TABLE t (x FLOATY) FROM STREAM('s') TIME ts;",
            "2:25",
            "'FLOATY' is not a Spark SQL type",
            "STRING, BIGINT",
        ),
        (
            "CREATE APPLICATION a;\nCREATE INPUT TABLE t (ts STRING) FROM STREAM('s') TIME ts;",
            "2:56",
            "time column 'ts' is declared STRING",
            "declare it TIMESTAMP",
        ),
        (
            HEADER + "CREATE TABLE n AS SELECT COUNT(*) FROM events [5 parsecs];",
            "4:47",
            "is not a duration",
            "30s",
        ),
        (
            HEADER + "CREATE TABLE n AS SELECT COUNT(*) FROM events [5 minutes SLIDE 2 minutes];",
            "4:47",
            "the slide must divide the size",
            "1 minute",
        ),
        (
            HEADER + "CREATE TABLE n WITH (mode = 'eventually') AS SELECT COUNT(*) FROM events;",
            "4:22",
            "mode 'eventually' is not known",
            "'final' or 'updates'",
        ),
        (HEADER + "CREATE VIEW events AS SELECT 1;", "4:1", "already defined at line 2", ""),
        (HEADER + "DROP TABLE events;", "4:1", "unknown or malformed statement", "expected"),
        (
            HEADER + "CREATE FUNCTION f AS 'no_module';",
            "4:23",
            "is not 'module.function'",
            "my_udfs.normalize",
        ),
    ],
)
def test_invalid_apps_are_refused_with_file_line_column_and_what_to_do(
    text: str, where: str, complaint: str, advice: str
) -> None:
    with pytest.raises(SqlError) as raised:
        parse_app(text, "app.sql")
    assert raised.value.message.startswith(f"app.sql:{where}: ")
    assert complaint in raised.value.message
    assert advice in (raised.value.hint or "")


def test_the_app_shown_in_the_sql_docs_is_the_example_app() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "sql.md").read_text()
    shown = docs.split("```sql\n", 1)[1].split("```", 1)[0]
    example = EXAMPLE.read_text()
    statements = example[example.index("CREATE APPLICATION") :]
    assert shown == statements
    assert parse_app(shown).tables[0].name == "top_events_5min"


@pytest.mark.parametrize(
    ("query", "column", "complaint", "advice"),
    [
        ("SELECT event FROM events WHERE event = 'oops;", 64, "string that starts here", "'"),
        ('SELECT "oops FROM events;', 32, 'starts here with " is never closed', '""'),
        ("SELECT `oops FROM events;", 32, "quoted name that starts here", "`"),
        ("SELECT event /* oops FROM events;", 38, "comment that starts here", "*/"),
    ],
)
def test_an_unterminated_string_or_comment_is_a_sql_error_at_its_start(
    query: str, column: int, complaint: str, advice: str
) -> None:
    with pytest.raises(SqlError) as raised:
        parse_app(HEADER + f"INSERT INTO STREAM('x') {query}", "app.sql")
    assert raised.value.message.startswith(f"app.sql:4:{column}: ")
    assert complaint in raised.value.message
    assert advice in (raised.value.hint or "")


@pytest.mark.parametrize(
    ("query", "complaint"),
    [
        ("SELECT score * FROM events", "`*` needs an expression after it"),
        ("SELECT score + FROM events", "`+` needs an expression after it"),
        ("SELECT event FROM events WHERE", "`WHERE` needs an expression after it"),
        ("SELECT NOT FROM events", "`NOT` needs an expression after it"),
    ],
)
def test_sql_errors_name_the_sql_not_sqlglot_classes(query: str, complaint: str) -> None:
    with pytest.raises(SqlError) as raised:
        parse_app(HEADER + f"INSERT INTO STREAM('x') {query};", "app.sql")
    assert f"the query is not valid SQL: {complaint}" in raised.value.message
    assert "<class" not in raised.value.message and "sqlglot" not in raised.value.message
