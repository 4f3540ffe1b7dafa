import json
from pathlib import Path

from millrace.bus.publisher import Publisher
from millrace.config.workspace import Workspace
from millrace.warehouse.layout import streams_marked_for_archive
from tests.cli.test_cli import millrace

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def test_a_stream_is_archived_backfilled_and_queried_from_the_command_line(
    workspace: Workspace, stream_name: str, tmp_path: Path
) -> None:
    created = millrace("stream", "create", stream_name, "--buckets", "2", "--archive")
    assert created.returncode == 0, created.stderr
    assert f"run `millrace archive {stream_name}`" in created.stdout
    assert stream_name in streams_marked_for_archive(workspace)
    events = [
        {"event_time": START_MS + n * 7_000, "category": ("movies", "news")[n % 2], "n": n}
        for n in range(100)
    ]
    with Publisher(stream_name, settings=workspace.settings, time_field="event_time") as out:
        for event in events:
            out.send(event)

    archived = millrace("archive", stream_name, "--available-now", "--time", "event_time")
    assert archived.returncode == 0, archived.stderr
    assert f"stream {stream_name}: 100 records in " in archived.stdout

    app = tmp_path / "per_minute.sql"
    app.write_text(
        "CREATE APPLICATION cli_backfill;\n"
        "CREATE INPUT TABLE events (event_time, category, n INT)\n"
        f"  FROM STREAM('{stream_name}') TIME event_time LATENESS '1 minute';\n"
        "CREATE TABLE per_minute AS\n"
        "SELECT category, COUNT(*) AS n FROM events [1 minute] GROUP BY category;\n"
    )
    backfilled = millrace(
        "backfill", str(app), "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:10:00Z",
        "--into", "per_minute",
    )  # fmt: skip
    assert backfilled.returncode == 0, backfilled.stderr
    in_range = [event for event in events if event["event_time"] < START_MS + 600_000]
    windows = {(event["event_time"] // 60_000, event["category"]) for event in in_range}
    assert backfilled.stdout.splitlines() == [
        "app 'cli_backfill' backfilled over 2026-01-01T00:00:00Z to 2026-01-01T00:10:00Z "
        "from the warehouse",
        f"table per_minute: {len(windows)} rows merged",
    ]

    view = "warehouse__" + stream_name.replace(".", "_")
    queried = millrace(
        "sql",
        "--json",
        "--app",
        str(app),
        f"SELECT (SELECT COUNT(*) FROM {view}) AS archived,\n"
        f"  (SELECT SUM(CAST(get_json_object(value, '$.n') AS INT)) FROM {view}) AS n_total,\n"
        "  (SELECT SUM(n) FROM cli_backfill__per_minute) AS counted,\n"
        "  (SELECT COUNT(*) FROM cli_backfill__events WHERE category = 'news') AS news,\n"
        f"  (SELECT COUNT(DISTINCT event_date) FROM {view}) AS days",
    )
    assert queried.returncode == 0, queried.stderr
    [row] = [json.loads(line) for line in queried.stdout.splitlines()]
    assert row == {
        "archived": 100,
        "n_total": sum(event["n"] for event in events),
        "counted": len(in_range),
        "news": sum(1 for event in events if event["category"] == "news"),
        "days": len({event["event_time"] // 86_400_000 for event in events}),
    }

    shown = millrace(
        "sql",
        "SELECT category, SUM(n) AS events FROM cli_backfill__per_minute "
        "GROUP BY category ORDER BY category",
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    for category in ("movies", "news"):
        count = sum(1 for event in in_range if event["category"] == category)
        assert any(line.split() == ["│", category, "│", str(count), "│"] for line in lines), (
            shown.stdout
        )
    assert lines[-1] == "2 rows"
