import json
from pathlib import Path

from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from tests.cli.test_cli import millrace

EXAMPLE = Path(__file__).parents[2] / "examples" / "top_events.sql"


def test_an_app_is_checked_run_and_its_results_queried_from_the_command_line(
    workspace: Workspace,
) -> None:
    for stream in ("events_stream", "superbowl_posts"):
        create_stream(workspace.settings, stream, exist_ok=True)
    events = [
        {"event_time": "2026-01-01T00:00:10Z", "event": "a", "category": "movies", "score": 1},
        {"event_time": "2026-01-01T00:00:20Z", "event": "b", "category": "movies", "score": 2},
        {"event_time": "2026-01-01T00:01:00Z", "event": "c #superbowl", "category": "sports"},
        # Far enough ahead for the watermark to close the first window.
        {"event_time": "2026-01-01T01:00:00Z", "event": "d", "category": "news", "score": 0},
    ]
    millrace("publish", "events_stream", "-", stdin="\n".join(json.dumps(e) for e in events))

    checked = millrace("check", str(EXAMPLE))
    assert checked.returncode == 0, checked.stderr
    assert "== table top_events_5min ==" in checked.stdout
    assert "app 'top_events' is valid" in checked.stdout

    ran = millrace("run", str(EXAMPLE), "--available-now")
    assert ran.returncode == 0, ran.stderr

    queried = millrace("query", "top_events.top_events_5min", "--where", "category=movies")
    assert queried.returncode == 0, queried.stderr
    [row] = [json.loads(line) for line in queried.stdout.splitlines()]
    assert (row["category"], row["n"], row["total_score"]) == ("movies", 2, 3.0)
    assert row["window_start"].startswith("2026-01-01 00:00:00")

    unknown = millrace("query", "top_events.top_events_5min", "--where", "colour=red")
    assert unknown.returncode == 1
    assert "has no column 'colour'" in unknown.stderr


def test_check_reports_an_input_stream_that_does_not_exist(
    workspace: Workspace, tmp_path: Path
) -> None:
    app = tmp_path / "app.sql"
    app.write_text(
        "CREATE APPLICATION lonely;\n"
        "CREATE INPUT TABLE t (x) FROM STREAM('no.such.stream') TIME ts;\n"
        "INSERT INTO STREAM('no.such.stream') SELECT x FROM t;\n"
    )
    checked = millrace("check", str(app))
    assert checked.returncode == 1
    assert f"{app}:3:1: output stream 'no.such.stream' does not exist" in checked.stderr
