import json
import os
import subprocess
import sys
from pathlib import Path

from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace


def millrace(
    *arguments: str, stdin: str | None = None, environment: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "millrace.cli.main", *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(environment or {})},
    )


def test_init_writes_a_commented_config_and_keeps_it_on_a_second_run(tmp_path: Path) -> None:
    environment = {"MILLRACE_HOME": str(tmp_path / "ws")}
    first = millrace("init", environment=environment)
    assert first.returncode == 0 and "created workspace" in first.stdout
    assert (tmp_path / "ws" / "millrace.toml").read_text().startswith("# millrace workspace")
    second = millrace("init", environment=environment)
    assert second.returncode == 0 and "exists; kept" in second.stdout


def test_a_config_error_is_printed_with_where_and_what_to_do_and_no_traceback(
    tmp_path: Path,
) -> None:
    home = tmp_path / "ws"
    home.mkdir()
    (home / "millrace.toml").write_text("[spark]\nmastr = 'local[2]'\n")
    result = millrace("status", environment={"MILLRACE_HOME": str(home)})
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"error[config]: unknown key 'spark.mastr' in {home / 'millrace.toml'}:2"
    )
    assert "did you mean 'spark.master'?" in result.stderr
    assert "Traceback" not in result.stderr


def test_commands_that_need_a_workspace_say_how_to_create_one(tmp_path: Path) -> None:
    result = millrace("stream", "list", environment={"MILLRACE_HOME": str(tmp_path / "none")})
    assert result.returncode == 1
    assert "error[config]: no workspace at" in result.stderr
    assert "millrace init" in result.stderr


def test_streams_are_managed_from_the_command_line(workspace: Workspace, stream_name: str) -> None:
    created = millrace("stream", "create", stream_name, "--buckets", "3", "--retention", "12h")
    assert created.returncode == 0, created.stderr
    assert stream_name in millrace("stream", "list").stdout.split()

    millrace("publish", stream_name, "-", stdin='{"a": 1}\n{"a": 2}\n')
    described = millrace("stream", "describe", stream_name).stdout
    assert "buckets:   3" in described
    assert "records:   2" in described
    assert "retention: 12h" in described

    again = millrace("stream", "create", stream_name)
    assert again.returncode == 1 and "error[stream-exists]" in again.stderr
    invalid = millrace("stream", "create", "bad name!")
    assert invalid.returncode == 1 and "error[stream-invalid]" in invalid.stderr

    deleted = millrace("stream", "delete", stream_name, "--yes")
    assert deleted.returncode == 0
    assert stream_name not in millrace("stream", "list").stdout.split()


def test_publish_reports_each_bad_line_by_number_and_still_sends_the_rest(
    workspace: Workspace,
    stream_name: str,
) -> None:
    create_stream(workspace.settings, stream_name)
    lines = [
        '{"n": 1}',
        "not json",
        '{"n": 2}',
        "[1, 2]",
        "",
        '{"n": 3, "time": "never"}',
        '{"n": 4}',
    ]
    result = millrace("publish", stream_name, "-", stdin="\n".join(lines))
    assert result.returncode == 1
    assert "line 2: not valid JSON" in result.stderr
    assert "line 4: not a JSON object but list; not sent" in result.stderr
    assert "line 6: event time field 'time' holds 'never'" in result.stderr
    assert "published 3 events" in result.stdout and "3 lines failed" in result.stdout

    tailed = millrace("tail", stream_name, "--from-beginning")
    values = [json.loads(line)["value"]["n"] for line in tailed.stdout.splitlines()]
    assert values == [1, 2, 4]


def test_tail_shows_the_last_records_of_each_bucket_with_their_metadata(
    workspace: Workspace,
    stream_name: str,
) -> None:
    create_stream(workspace.settings, stream_name)
    millrace(
        "publish",
        stream_name,
        "-",
        stdin="\n".join(json.dumps({"n": n, "time": 1_767_225_600_000 + n}) for n in range(30)),
    )
    lines = millrace("tail", stream_name, "-n", "3").stdout.splitlines()
    shown = [json.loads(line) for line in lines]
    assert [record["value"]["n"] for record in shown] == [27, 28, 29]
    assert shown[0]["bucket"] == 0 and shown[0]["offset"] == 27
    assert shown[0]["time_ms"] == 1_767_225_600_027 and len(shown[0]["id"]) == 32

    since = millrace("tail", stream_name, "--since", "10m").stdout.splitlines()
    assert len(since) == 30  # all arrived a moment ago
    both = millrace("tail", stream_name, "--since", "10m", "--from-beginning")
    assert both.returncode == 2 and "not both" in both.stderr


def test_pipe_feeds_a_command_and_reports_its_failure(
    workspace: Workspace,
    stream_name: str,
    tmp_path: Path,
) -> None:
    create_stream(workspace.settings, stream_name)
    millrace("publish", stream_name, "-", stdin='{"n": 1}\n{"n": 2}\n')
    output = tmp_path / "out"
    piped = millrace(
        "pipe",
        stream_name,
        "--",
        sys.executable,
        "-c",
        f"import sys; open({str(output)!r}, 'w').write(sys.stdin.read())",
    )
    assert piped.returncode == 0, piped.stderr
    assert output.read_text() == '{"n": 1}\n{"n": 2}\n'
    assert "piped 2 records" in piped.stderr

    millrace("publish", stream_name, "-", stdin='{"n": 3}\n')
    failed = millrace("pipe", stream_name, "--", sys.executable, "-c", "import sys; sys.exit(4)")
    assert failed.returncode == 4
    assert "will be piped again" in failed.stderr


def test_up_down_and_status_describe_the_local_broker(fresh_workspace: Workspace) -> None:
    environment = {
        "MILLRACE_HOME": str(fresh_workspace.root),
        "MILLRACE_KAFKA_PORT": str(fresh_workspace.settings.kafka_port),
        "MILLRACE_KAFKA_CONTROLLER_PORT": str(fresh_workspace.settings.kafka_controller_port),
        "MILLRACE_REDIS_PORT": str(fresh_workspace.settings.redis_port),
    }
    address = f"127.0.0.1:{fresh_workspace.settings.kafka_port}"
    redis_address = f"redis://127.0.0.1:{fresh_workspace.settings.redis_port}/0"
    assert "not running" in millrace("status", environment=environment).stdout
    try:
        started = millrace("up", environment=environment)
        assert started.returncode == 0, started.stderr
        assert f"Kafka broker started, listening on {address}" in started.stdout
        assert f"Redis started, listening on {redis_address}" in started.stdout
        assert "already running" in millrace("up", environment=environment).stdout
        shown = millrace("status", environment=environment).stdout
        assert f"running on {address}" in shown
        assert f"local Redis running on {redis_address}" in shown and "0 tables" in shown
    finally:
        stopped = millrace("down", environment=environment)
    assert "Kafka broker stopped" in stopped.stdout
    assert "Redis stopped" in stopped.stdout
    again = millrace("down", environment=environment).stdout
    assert "no local broker was running" in again and "no local Redis was running" in again
    assert (fresh_workspace.redis_dir / "redis.conf").read_text().count("bind 127.0.0.1") == 1


def test_an_unterminated_sql_string_and_a_config_file_not_in_utf8_are_errors_not_tracebacks(
    tmp_path: Path,
) -> None:
    app = tmp_path / "app.sql"
    app.write_text(
        "CREATE APPLICATION a;\n"
        "CREATE INPUT TABLE e (event_time, c) FROM STREAM('e') TIME event_time;\n"
        "INSERT INTO STREAM('x') SELECT c FROM e WHERE c = 'abc;\n"
    )
    checked = millrace("check", str(app), environment={"MILLRACE_HOME": str(tmp_path)})
    assert checked.returncode == 1
    assert checked.stderr.startswith(f"error[sql]: {app}:3:51: the string that starts here")
    assert "Traceback" not in checked.stderr

    home = tmp_path / "ws"
    home.mkdir()
    (home / "millrace.toml").write_bytes(b"# caf\xe9 settings\n")
    status = millrace("status", environment={"MILLRACE_HOME": str(home)})
    assert status.returncode == 1
    assert status.stderr.startswith(
        f"error[config]: {home / 'millrace.toml'}:1 is not valid UTF-8: byte 5 (0xe9)"
    )
    assert "Traceback" not in status.stderr
