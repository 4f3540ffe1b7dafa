"""The examples of docs/warehouse.md run as the page says."""

import re
import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.errors import SqlError
from millrace.warehouse.adhoc_sql import run_query
from millrace.warehouse.local_sql import run_local_query
from millrace.warehouse.result_tables import read_result_rows

ROOT = Path(__file__).parents[2]
PAGE = ROOT / "docs" / "warehouse.md"
DAY_START_MS = 1_767_225_600_000


def test_the_python_example_archives_backfills_and_queries(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    [block] = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    # Names of its own, so that other tests' top_events and events_stream are left alone.
    suffix = uuid.uuid4().hex[:8]
    stream, app = f"events_{suffix}", f"top_events_{suffix}"
    app_file = tmp_path / "top_events.sql"
    app_file.write_text(
        (ROOT / "examples" / "top_events.sql")
        .read_text()
        .replace("CREATE APPLICATION top_events;", f"CREATE APPLICATION {app};")
        .replace("'events_stream'", f"'{stream}'")
    )
    create_stream(workspace.settings, stream)
    create_stream(workspace.settings, "superbowl_posts", exist_ok=True)
    events = [
        {"event_time": DAY_START_MS + n * 90_000, "event": f"e{n % 5}", "category": "news"}
        for n in range(40)
    ]
    with Publisher(stream, settings=workspace.settings, time_field="event_time") as out:
        for event in events:
            out.send({**event, "score": 1.0})
    code = block.replace('"events_stream"', f'"{stream}"').replace(
        '"examples/top_events.sql"', repr(str(app_file))
    )
    code = code.replace("warehouse__events_stream", f"warehouse__{stream}")
    namespace = {"spark": spark, "workspace": workspace, "day_start": DAY_START_MS}

    exec(compile(code, str(PAGE), "exec"), namespace)

    assert namespace["rows"] == [{"n": len(events)}]
    rows = read_result_rows(workspace, app, "top_events_5min")
    expected: dict[int, int] = {}
    for event in events:
        window = event["event_time"] // 300_000
        expected[window] = expected.get(window, 0) + 1
    assert {int(row["window_start"].timestamp()) // 300: row["n"] for row in rows} == expected
    assert namespace["run"].tables == {"top_events_5min": len(expected)}


def test_the_error_examples_are_what_millrace_sql_prints_on_each_engine(
    spark: SparkSession, workspace: Workspace
) -> None:
    examples = re.findall(
        r'\$ millrace sql (--spark )?"(SELECT COUNT\(\*\)\n.*?)"\n(error\[sql\].*?)(?=\n\$|\n```)',
        PAGE.read_text(),
        flags=re.DOTALL,
    )
    assert [on_spark for on_spark, _, _ in examples] == ["", "--spark "]
    for on_spark, query, printed in examples:
        with pytest.raises(SqlError) as raised:
            if on_spark:
                run_query(spark, workspace, query)
            else:
                run_local_query(workspace, query)
        assert raised.value.render() == printed
