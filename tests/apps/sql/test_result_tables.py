"""A result table written every micro-batch keeps a bounded number of files."""

import uuid
from collections import Counter
from dataclasses import replace

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from millrace.apps.sql.running import start_sql_app
from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.sql.parser import parse_app
from millrace.warehouse.result_tables import read_result_rows

START_MS = 1_767_225_600_000


def test_the_files_merges_replaced_are_deleted_once_tables_keep_removed_has_passed(
    spark: SparkSession, workspace: Workspace
) -> None:
    run = uuid.uuid4().hex[:8]
    stream = f"test.replaced.{run}"
    create_stream(workspace.settings, stream)
    app = parse_app(
        f"CREATE APPLICATION replaced_{run};\n"
        f"CREATE INPUT TABLE events (time, category) FROM STREAM('{stream}') TIME time;\n"
        "CREATE TABLE per_category WITH (mode = 'updates') AS\n"
        "SELECT category, COUNT(*) AS n FROM events GROUP BY category;\n"
    )
    keeping_none = replace(
        workspace, settings=replace(workspace.settings, tables_keep_removed="0s")
    )
    sent: list[str] = []
    running = start_sql_app(spark, keeping_none, app)
    try:
        for round_ in range(4):
            categories = [f"c{(round_ + n) % 3}" for n in range(5)]
            with Publisher(stream, settings=workspace.settings) as out:
                for category in categories:
                    out.send({"time": START_MS + len(sent), "category": category})
                    sent.append(category)
            running.process_all_available()
    finally:
        running.stop()

    rows = read_result_rows(workspace, app.name, "per_category")
    assert {row["category"]: row["n"] for row in rows} == Counter(sent)
    location = workspace.result_table(app.name, "per_category")
    table = DeltaTable(str(location))
    # Every merge rewrote the table's files; only the current version's are left.
    on_disk = {path.name for path in location.glob("*.parquet")}
    assert on_disk == {uri.rsplit("/", 1)[-1] for uri in table.file_uris()}
    assert table.version() >= 4
    assert table.metadata().configuration["delta.autoOptimize.autoCompact"] == "true"
