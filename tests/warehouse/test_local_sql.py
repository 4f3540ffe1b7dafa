"""DuckDB answers `millrace sql` as Spark does, over the same tables, and refuses what it cannot."""

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyspark.sql import SparkSession

from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.errors import QueryLimitError, QueryTooBigError, SqlError
from millrace.warehouse.adhoc_sql import run_query
from millrace.warehouse.archive import start_archive
from millrace.warehouse.layout import view_name
from millrace.warehouse.local_sql import run_local_query

START = datetime(2026, 1, 1, tzinfo=UTC)
PAGES = ["home", "cart", None, "search"]
EVENTS = [
    {"time": int((START + timedelta(seconds=7 * n)).timestamp() * 1000), "n": n}
    | ({"page": PAGES[n % 4]} if PAGES[n % 4] else {})
    for n in range(120)
]
# `{archive}` and `{weights}` are the tables of the `tables` fixture.
SAME_ON_BOTH = {
    "json fields, nulls first as Spark orders them": (
        "SELECT get_json_object(value, '$.page') AS page, COUNT(*) AS n,\n"
        "  SUM(CAST(get_json_object(value, '$.n') AS INT)) AS total\n"
        "FROM {archive} GROUP BY 1 ORDER BY 1"
    ),
    "time buckets of the event time": (
        "SELECT date_trunc('MINUTE', from_unixtime(get_json_object(value, '$.time') / 1000))\n"
        "  AS minute, COUNT(*) AS n FROM {archive} GROUP BY 1 ORDER BY 1"
    ),
    "a filter on time and on the archive's partition": (
        "SELECT COUNT(*) AS n, MIN(record_id) IS NOT NULL AS has_ids FROM {archive}\n"
        "WHERE event_date = DATE '2026-01-01' AND timestamp > TIMESTAMP '2026-01-01 00:00:00'"
    ),
    "text read as a number where Spark reads one ('10' > 3)": (
        "SELECT COUNT(*) AS n, SUM(get_json_object(value, '$.n')) AS total,\n"
        "  AVG(get_json_object(value, '$.n') * 2) AS twice FROM {archive}\n"
        "WHERE get_json_object(value, '$.n') > 30"
    ),
    "headers as a map, the id as the record's": (
        "SELECT COUNT(*) AS n FROM {archive} WHERE headers['id'] = record_id"
    ),
    "a result table joined with the archive": (
        "SELECT w.page, w.weight * COUNT(*) AS score, MAX(w.window_start) AS latest\n"
        "FROM {archive} a JOIN {weights} w ON get_json_object(a.value, '$.page') = w.page\n"
        "GROUP BY w.page, w.weight ORDER BY score DESC"
    ),
    "a result table's time column in buckets, with NULLs": (
        "SELECT date_trunc('HOUR', window_start) AS hour, SUM(weight) AS weight,\n"
        "  COUNT(note) AS notes FROM {weights} GROUP BY 1 ORDER BY 1"
    ),
    "a subquery, CASE and string functions": (
        "SELECT upper(page) AS page, CASE WHEN weight > 1 THEN 'heavy' ELSE 'light' END AS kind\n"
        "FROM (SELECT * FROM {weights} WHERE page LIKE '%a%') ORDER BY page"
    ),
}


@pytest.fixture(scope="module")
def tables(spark: SparkSession, workspace: Workspace) -> dict[str, str]:
    """An archived stream (archived by Spark) and a result table, by their query names."""
    stream = f"test.adhoc_{uuid.uuid4().hex[:8]}"
    create_stream(workspace.settings, stream, buckets=2)
    with Publisher(stream, settings=workspace.settings, time_field="time") as out:
        for event in EVENTS:
            out.send(event)
    start_archive(spark, workspace, stream, available_now=True).awaitTermination()
    app = f"adhoc_{uuid.uuid4().hex[:8]}"
    hours = [START + timedelta(hours=n) for n in (0, 0, 1, 2)]
    write_deltalake(
        str(workspace.result_table(app, "weights")),
        pa.table(
            {
                "page": ["home", "cart", "search", "about"],
                "weight": [1.5, 2.0, 0.5, 3.0],
                "window_start": pa.array(hours, pa.timestamp("us", tz="UTC")),
                "note": ["a", None, "c", None],
            }
        ),
    )
    return {"archive": view_name("warehouse", stream), "weights": view_name(app, "weights")}


@pytest.mark.parametrize("query", SAME_ON_BOTH.values(), ids=SAME_ON_BOTH.keys())
def test_duckdb_answers_what_spark_answers(
    spark: SparkSession, workspace: Workspace, tables: dict[str, str], query: str
) -> None:
    text = query.format(**tables)

    local = run_local_query(workspace, text)
    on_spark = run_query(spark, workspace, text)

    assert (local.engine, on_spark.engine) == ("duckdb", "spark")
    assert local.columns == on_spark.columns
    assert local.rows == on_spark.rows
    assert local.rows, "each case reads rows"


def test_the_answers_equal_plain_python(workspace: Workspace, tables: dict[str, str]) -> None:
    answer = run_local_query(
        workspace, SAME_ON_BOTH["json fields, nulls first as Spark orders them"].format(**tables)
    )

    expected = {}
    for event in EVENTS:
        n, total = expected.get(event.get("page"), (0, 0))
        expected[event.get("page")] = (n + 1, total + event["n"])
    assert [(row["page"], row["n"], row["total"]) for row in answer.rows] == [
        (page, *expected[page]) for page in sorted(expected, key=lambda page: page or "")
    ]


def test_what_duckdb_cannot_translate_names_spark(
    spark: SparkSession, workspace: Workspace, tables: dict[str, str]
) -> None:
    text = "SELECT COUNT(*) AS n\nFROM {archive} WHERE from_json(value, 'n INT').n > 3".format(
        **tables
    )

    with pytest.raises(SqlError) as raised:
        run_local_query(workspace, text)

    first_line, pointer, mark = raised.value.message.splitlines()
    assert first_line == (
        "<query>:2:{}: function from_json has no translation for the local engine (DuckDB)"
    ).format(len(f"FROM {tables['archive']} WHERE ") + 1)
    assert mark.index("^") == pointer.index("from_json")
    assert raised.value.hint is not None and "millrace sql --spark" in raised.value.hint
    assert run_query(spark, workspace, text).rows == [{"n": 120 - 4}]


def test_bad_queries_say_what_and_where_and_what_to_do(
    workspace: Workspace, tables: dict[str, str]
) -> None:
    with pytest.raises(SqlError) as raised:
        run_local_query(workspace, "SELECT 1,\n  FROM nowhere x y z")
    assert raised.value.message.startswith("<query>:2:")
    assert raised.value.message.endswith("^")

    with pytest.raises(SqlError) as raised:
        run_local_query(workspace, "SELECT *\nFROM   warehouse__nothing_here")
    first_line, pointer, mark = raised.value.message.splitlines()
    assert first_line.startswith("<query>:2:8: Catalog Error: Table with name")
    assert (pointer, mark) == ("  FROM   warehouse__nothing_here", "         ^")
    assert raised.value.hint is not None
    assert raised.value.hint.startswith("the tables there are: ")
    assert tables["archive"] in raised.value.hint

    with pytest.raises(SqlError) as raised:
        run_local_query(workspace, f"SELECT pagee\nFROM {tables['weights']}")
    assert raised.value.message.splitlines()[0].startswith(
        '<query>:1:8: Binder Error: Referenced column "pagee" not found'
    )


@pytest.mark.parametrize(
    "statement",
    [
        "DROP TABLE anything",
        "INSERT INTO t VALUES (1)",
        "COPY (SELECT 1) TO '/tmp/out.csv'",
        "CREATE TABLE t AS SELECT 1",
    ],
)
def test_nothing_is_written(workspace: Workspace, statement: str) -> None:
    with pytest.raises(SqlError) as raised:
        run_local_query(workspace, statement)
    assert raised.value.message == "<query>:1:1: millrace sql runs queries only"


def test_a_query_reads_no_file_but_the_tables(workspace: Workspace) -> None:
    with pytest.raises(SqlError) as raised:
        run_local_query(workspace, "SELECT * FROM read_csv('/etc/hostname')")
    assert "file system operations are disabled" in raised.value.message


def test_limits_stop_a_query(workspace: Workspace, tables: dict[str, str]) -> None:
    cut = run_local_query(workspace, f"SELECT * FROM {tables['archive']}", limit=10)
    assert (len(cut.rows), cut.complete) == (10, False)
    whole = run_local_query(workspace, f"SELECT * FROM {tables['weights']}", limit=4)
    assert (len(whole.rows), whole.complete) == (4, True)

    # 120 ** 5 rows: minutes of DuckDB's time.
    crossed = ", ".join(f"{tables['archive']} t{n}" for n in range(5))
    with pytest.raises(QueryLimitError) as raised:
        run_local_query(
            workspace,
            f"SELECT COUNT(*) FROM {crossed}\n"
            "WHERE (t0.offset * 31 + t1.offset * 17 + t2.offset * 7 + t3.offset * 3 + t4.offset)"
            " % 1000003 = 5",
            time_limit_s=0.5,
        )
    assert raised.value.message == (
        "the query ran longer than its time limit of 0.5 s and was stopped"
    )


def test_tables_over_the_size_setting_are_left_to_spark(
    workspace: Workspace, tables: dict[str, str]
) -> None:
    small = replace(workspace, settings=replace(workspace.settings, sql_local_max_mb=0))
    text = f"SELECT COUNT(*) AS n FROM {tables['weights']}"

    assert run_local_query(workspace, text).rows == [{"n": 4}]
    with pytest.raises(QueryTooBigError) as raised:
        run_local_query(small, text)
    assert "more than sql.local_max_mb (0)" in raised.value.message
    assert raised.value.hint is not None and "--spark" in raised.value.hint


def test_show_tables_lists_what_a_query_can_read(
    workspace: Workspace, tables: dict[str, str]
) -> None:
    answer = run_local_query(workspace, "SHOW TABLES")
    listed = {row["tableName"]: row["description"] for row in answer.rows}
    assert listed[tables["weights"]].startswith("result table weights of app adhoc_")
    assert listed[tables["archive"]].startswith("archive of stream test.adhoc_")


def test_an_answer_with_two_columns_of_one_name_is_refused_by_both_engines(
    spark: SparkSession, workspace: Workspace
) -> None:
    text = "SELECT 1 AS n, 2 AS n"

    for run in (
        lambda: run_local_query(workspace, text),
        lambda: run_query(spark, workspace, text),
    ):
        with pytest.raises(SqlError) as raised:
            run()
        assert raised.value.message.splitlines()[0] == (
            "<query>:1:1: the answer has two columns named n"
        )
