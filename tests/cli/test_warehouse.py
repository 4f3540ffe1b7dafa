import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from millrace.bus.publisher import Publisher
from millrace.config.workspace import Workspace
from millrace.warehouse.adhoc_query import QueryResult
from millrace.warehouse.layout import streams_marked_for_archive

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
EVENTS = [
    {"event_time": START_MS + n * 7_000, "category": ("movies", "news")[n % 2], "n": n}
    for n in range(100)
]
IN_RANGE = [event for event in EVENTS if event["event_time"] < START_MS + 600_000]
APP = (
    "CREATE APPLICATION {app};\n"
    "CREATE INPUT TABLE events (event_time, category, n INT)\n"
    "  FROM STREAM('{stream}') TIME event_time LATENESS '1 minute';\n"
    "CREATE TABLE per_minute AS\n"
    "SELECT category, COUNT(*) AS n FROM events [1 minute] GROUP BY category;\n"
)


@dataclass(frozen=True)
class Archived:
    stream: str
    app: str
    app_file: Path
    backfill_stdout: list[str]


@pytest.fixture(scope="module")
def archived(
    workspace: Workspace,
    tmp_path_factory: pytest.TempPathFactory,
    millrace: Callable[..., CompletedProcess[str]],
) -> Archived:
    """A stream created with --archive, published to, archived and backfilled from the CLI."""
    stream = f"test.cli_{uuid.uuid4().hex[:8]}"
    created = millrace("stream", "create", stream, "--buckets", "2", "--archive")
    assert created.returncode == 0, created.stderr
    assert f"run `millrace archive {stream}`" in created.stdout
    assert stream in streams_marked_for_archive(workspace)
    with Publisher(stream, settings=workspace.settings, time_field="event_time") as out:
        for event in EVENTS:
            out.send(event)
    done = millrace("archive", stream, "--available-now", "--time", "event_time")
    assert done.returncode == 0, done.stderr
    assert f"stream {stream}: {len(EVENTS)} records in " in done.stdout

    app = f"cli_backfill_{uuid.uuid4().hex[:8]}"
    app_file = tmp_path_factory.mktemp("apps") / "per_minute.sql"
    app_file.write_text(APP.format(app=app, stream=stream))
    backfilled = millrace(
        "backfill", str(app_file), "--from", "2026-01-01T00:00:00Z",
        "--to", "2026-01-01T00:10:00Z", "--into", "per_minute",
    )  # fmt: skip
    assert backfilled.returncode == 0, backfilled.stderr
    return Archived(stream, app, app_file, backfilled.stdout.splitlines())


def test_backfill_says_what_it_wrote(archived: Archived) -> None:
    windows = {(event["event_time"] // 60_000, event["category"]) for event in IN_RANGE}
    assert archived.backfill_stdout == [
        f"app '{archived.app}' backfilled over 2026-01-01T00:00:00Z to "
        "2026-01-01T00:10:00Z from the warehouse",
        f"table per_minute: {len(windows)} rows merged",
        f"input events: 0 bad records routed to {archived.stream}.dlq",
    ]


def test_sql_reads_the_archive_the_decoded_inputs_and_the_result_tables(
    archived: Archived, millrace: Callable[..., CompletedProcess[str]]
) -> None:
    view, app = "warehouse__" + archived.stream.replace(".", "_"), archived.app
    queried = millrace(
        "sql",
        "--json",
        "--app",
        str(archived.app_file),
        f"SELECT (SELECT COUNT(*) FROM {view}) AS archived,\n"
        f"  (SELECT SUM(CAST(get_json_object(value, '$.n') AS INT)) FROM {view}) AS n_total,\n"
        f"  (SELECT SUM(n) FROM {app}__per_minute) AS counted,\n"
        f"  (SELECT COUNT(*) FROM {app}__events WHERE category = 'news') AS news,\n"
        f"  (SELECT COUNT(DISTINCT event_date) FROM {view}) AS days,\n"
        f"  (SELECT MIN(window_start) FROM {app}__per_minute) AS first_window",
    )
    assert queried.returncode == 0, queried.stderr
    [row] = [json.loads(line) for line in queried.stdout.splitlines()]
    assert row == {
        "archived": len(EVENTS),
        "n_total": sum(event["n"] for event in EVENTS),
        "counted": len(IN_RANGE),
        "news": sum(1 for event in EVENTS if event["category"] == "news"),
        "days": len({event["event_time"] // 86_400_000 for event in EVENTS}),
        "first_window": "2026-01-01T00:00:00.000Z",
    }


def test_sql_answers_small_questions_in_its_own_process_as_spark_does(
    archived: Archived, millrace: Callable[..., CompletedProcess[str]]
) -> None:
    view = "warehouse__" + archived.stream.replace(".", "_")
    query = (
        "SELECT get_json_object(value, '$.category') AS category, COUNT(*) AS n,\n"
        f"  SUM(CAST(get_json_object(value, '$.n') AS INT)) AS total FROM {view}\n"
        "GROUP BY 1 ORDER BY 1"
    )

    local = millrace("sql", "--json", query)
    on_spark = millrace("sql", "--json", "--spark", query)
    too_big = millrace("sql", "--json", query, environment={"MILLRACE_SQL_LOCAL_MAX_MB": "0"})
    shown = millrace("sql", query)

    assert local.returncode == on_spark.returncode == too_big.returncode == 0, local.stderr
    assert shown.returncode == 0, shown.stderr
    categories = sorted({event["category"] for event in EVENTS})
    assert [json.loads(line) for line in local.stdout.splitlines()] == [
        {
            "category": category,
            "n": sum(1 for event in EVENTS if event["category"] == category),
            "total": sum(event["n"] for event in EVENTS if event["category"] == category),
        }
        for category in categories
    ]
    assert local.stdout == on_spark.stdout == too_big.stdout
    assert local.stderr.splitlines()[-1].startswith("2 rows, answered by duckdb in ")
    assert on_spark.stderr.splitlines()[-1].startswith("2 rows, answered by spark in ")
    assert too_big.stderr.splitlines()[-1].startswith("2 rows, answered by spark in ")
    assert shown.stdout.splitlines()[-1].startswith("2 rows, answered by duckdb in ")


def test_sql_prints_a_table_of_the_rows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from millrace.cli.warehouse import print_table

    at = datetime(2026, 1, 1, 12, 0, 5, 250_000, tzinfo=UTC)
    rows = [
        {"category": "movies", "n": 43, "day": date(2026, 1, 1), "top": [{"item": "a"}], "at": at},
        {"category": "news", "n": None, "day": date(2026, 1, 2), "top": [], "at": None},
    ]
    print_table(QueryResult(["category", "n", "day", "top", "at"], rows, {}))
    lines = capsys.readouterr().out.splitlines()
    cells = [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines if "│" in line]
    assert cells == [
        ["movies", "43", "2026-01-01", '[{"item": "a"}]', "2026-01-01T12:00:05.250Z"],
        ["news", "NULL", "2026-01-02", "[]", "NULL"],
    ]


PROCESSOR = """
from millrace import Input, Processor


class Categories(Processor):
    name = "{name}"
    inputs = [Input("{stream}", key="category", time="event_time")]

    def on_record(self, key, record, ctx):
        ctx.produce("{stream}.categories", {{"category": key}})
"""


def test_sql_reads_a_processors_archived_inputs_with_the_event_time_it_reads(
    archived: Archived, tmp_path: Path, millrace: Callable[..., CompletedProcess[str]]
) -> None:
    name = f"cli_categories_{uuid.uuid4().hex[:8]}"
    source = tmp_path / "categories.py"
    source.write_text(PROCESSOR.format(name=name, stream=archived.stream))
    view = f"{name}__" + archived.stream.replace(".", "_")

    queried = millrace(
        "sql",
        "--json",
        "--app",
        f"{source}:Categories",
        f"SELECT COUNT(*) AS records, MIN(event_time) AS first, MAX(event_time) AS last\n"
        f"FROM {view}",
    )

    assert queried.returncode == 0, queried.stderr
    [row] = [json.loads(line) for line in queried.stdout.splitlines()]
    assert row == {
        "records": len(EVENTS),
        "first": "2026-01-01T00:00:00.000Z",
        "last": datetime.fromtimestamp(EVENTS[-1]["event_time"] / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z"),
    }
