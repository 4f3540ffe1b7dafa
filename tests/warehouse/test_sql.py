import pytest
from pyspark.sql import SparkSession

from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.errors import SqlError
from millrace.warehouse.adhoc_sql import run_query
from millrace.warehouse.archive import start_archive
from millrace.warehouse.layout import view_name

START_MS = 1_767_225_600_000


def test_a_query_reads_the_archive_with_its_value_as_json_text(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name)
    events = [{"time": START_MS + n * 1000, "page": f"p{n % 3}"} for n in range(30)]
    with Publisher(stream_name, settings=workspace.settings, time_field="time") as out:
        ids = [out.send(event) for event in events]
    start_archive(spark, workspace, stream_name, available_now=True).awaitTermination()

    result = run_query(
        spark,
        workspace,
        "SELECT get_json_object(value, '$.page') AS page, COUNT(*) AS n,\n"
        "  MIN(record_id) AS first_id, MIN(event_date) AS day\n"
        f"FROM {view_name('warehouse', stream_name)} GROUP BY 1 ORDER BY 1",
    )

    assert result.columns == ["page", "n", "first_id", "day"]
    pages = sorted({event["page"] for event in events})
    assert [(row["page"], row["n"]) for row in result.rows] == [
        (page, sum(1 for event in events if event["page"] == page)) for page in pages
    ]
    assert {row["first_id"] for row in result.rows} <= set(ids)
    assert {row["day"].isoformat() for row in result.rows} == {"2026-01-01"}


def test_bad_queries_say_what_and_where_and_what_to_do(
    spark: SparkSession, workspace: Workspace
) -> None:
    with pytest.raises(SqlError) as raised:
        run_query(spark, workspace, "SELECT 1,\n  FROM nowhere x y z")
    assert raised.value.message.startswith("<query>:2:")
    assert "[PARSE_SYNTAX_ERROR]" in raised.value.message
    assert raised.value.message.endswith("^")
    assert raised.value.hint.startswith("fix the SQL at the mark")

    with pytest.raises(SqlError) as raised:
        run_query(spark, workspace, "SELECT *\nFROM   warehouse__nothing_here")
    first_line, pointer, mark = raised.value.message.splitlines()
    assert first_line.startswith("<query>:2:8: [TABLE_OR_VIEW_NOT_FOUND]")
    assert (pointer, mark) == ("  FROM   warehouse__nothing_here", "         ^")
    assert raised.value.hint.startswith("the tables there are: ")

    with pytest.raises(SqlError) as raised:
        run_query(spark, workspace, "DROP TABLE anything")
    assert raised.value.message == "<query>:1:1: millrace sql runs queries only"
