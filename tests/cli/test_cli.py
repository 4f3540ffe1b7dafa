import json
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace

SET = AlterConfigOpType.SET


def test_init_writes_a_commented_config_and_keeps_it_on_a_second_run(
    tmp_path: Path, millrace: Callable[..., CompletedProcess[str]]
) -> None:
    environment = {"MILLRACE_HOME": str(tmp_path / "ws")}
    first = millrace("init", environment=environment)
    assert first.returncode == 0 and "created workspace" in first.stdout
    assert (tmp_path / "ws" / "millrace.toml").read_text().startswith("# millrace workspace")
    second = millrace("init", environment=environment)
    assert second.returncode == 0 and "exists; kept" in second.stdout


def test_a_config_error_is_printed_with_where_and_what_to_do_and_no_traceback(
    tmp_path: Path,
    millrace: Callable[..., CompletedProcess[str]],
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


def test_commands_that_need_a_workspace_say_how_to_create_one(
    tmp_path: Path, millrace: Callable[..., CompletedProcess[str]]
) -> None:
    result = millrace("stream", "list", environment={"MILLRACE_HOME": str(tmp_path / "none")})
    assert result.returncode == 1
    assert "error[config]: no workspace at" in result.stderr
    assert "millrace init" in result.stderr


def test_streams_are_managed_from_the_command_line(
    workspace: Workspace, stream_name: str, millrace: Callable[..., CompletedProcess[str]]
) -> None:
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
    millrace: Callable[..., CompletedProcess[str]],
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
    millrace: Callable[..., CompletedProcess[str]],
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
    millrace: Callable[..., CompletedProcess[str]],
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


def test_up_down_and_status_describe_the_local_broker(
    fresh_workspace: Workspace, millrace: Callable[..., CompletedProcess[str]]
) -> None:
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
    millrace: Callable[..., CompletedProcess[str]],
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


def test_publish_reports_lines_nested_too_deeply_dated_ahead_or_before_1970_and_sends_the_rest(
    workspace: Workspace, stream_name: str, millrace: Callable[..., CompletedProcess[str]]
) -> None:
    create_stream(workspace.settings, stream_name)
    lines = [
        '{"n": 1}',
        '{"a": ' * 10_000 + "1" + "}" * 10_000,
        '{"n": 2}',
        '{"n": 9, "time": "2100-01-01T00:00:00Z"}',
        '{"big": ' + "9" * 5000 + "}",
        '{"n": 3}',
        '{"n": 8, "time": "1969-07-20T20:17:40Z"}',
    ]
    result = millrace("publish", stream_name, "-", stdin="\n".join(lines))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "line 2: not read: JSON nested too deeply; not sent" in result.stderr
    assert "line 4: event time 2100-01-01T00:00:00.000Z is " in result.stderr
    assert "more than max_future (300000 ms)" in result.stderr
    assert "line 5: not read: " in result.stderr
    assert "line 7: event time 1969-07-20T20:17:40.000Z is before 1970-01-01" in result.stderr
    assert "published 3 events" in result.stdout and "4 lines failed" in result.stdout
    # Without --failed-lines, the numbers go to a file in the workspace's logs folder.
    written = Path(result.stderr.split("their numbers are in ")[1].split()[0])
    assert written.parent == workspace.logs_dir and stream_name in written.name
    assert written.read_text() == "2\n4\n5\n7\n"

    tailed = millrace("tail", stream_name, "--from-beginning")
    values = [json.loads(line)["value"]["n"] for line in tailed.stdout.splitlines()]
    assert values == [1, 2, 3]


def test_lines_the_bus_did_not_store_are_named_and_sent_again_with_the_same_ids(
    workspace: Workspace,
    stream_name: str,
    tmp_path: Path,
    millrace: Callable[..., CompletedProcess[str]],
) -> None:
    # One bucket's records are too large for the stream, the other's are stored: the stored
    # lines are not a prefix of the file, as after a broker failure.
    create_stream(workspace.settings, stream_name, buckets=2)
    bucket_of = _buckets_of_keys(workspace, ["a", "b", "c", "d", "e", "f"], millrace)
    stored_key = next(key for key, bucket in bucket_of.items() if bucket == 0)
    refused_key = next(key for key, bucket in bucket_of.items() if bucket == 1)
    admin = AdminClient({"bootstrap.servers": workspace.settings.bootstrap_servers})

    def limit_records_to(size: int) -> None:
        entry = ConfigEntry("max.message.bytes", str(size), incremental_operation=SET)
        limit = ConfigResource(ResourceType.TOPIC, stream_name, incremental_configs=[entry])
        admin.incremental_alter_configs([limit])[limit].result(timeout=10)

    source = tmp_path / "events.jsonl"
    source.write_text(
        "".join(
            json.dumps(
                {"n": n, "k": refused_key, "pad": os.urandom(6000).hex()}  # incompressible
                if n % 2
                else {"n": n, "k": stored_key, "pad": ""}
            )
            + "\n"
            for n in range(1, 151)
        )
    )
    limit_records_to(10_000)
    failed = tmp_path / "failed.txt"
    cut = millrace("publish", stream_name, str(source), "--key", "k", "--failed-lines", str(failed))
    assert cut.returncode == 1, cut.stderr
    assert "Traceback" not in cut.stderr
    assert "published 75 events" in cut.stdout and "75 lines failed" in cut.stdout
    assert failed.read_text().split() == [str(n) for n in range(1, 151, 2)]
    assert "lines not stored: 1, 3, 5, 7, 9, 11, 13, 15, 17, 19 and 65 more ranges" in cut.stderr
    assert f"their numbers are in {failed}" in cut.stderr
    assert f"millrace publish {stream_name} {source} --lines {failed}" in cut.stderr

    def stored() -> list[tuple[str, int]]:
        tailed = millrace("tail", stream_name, "--from-beginning").stdout.splitlines()
        return [(record["id"], record["value"]["n"]) for record in map(json.loads, tailed)]

    assert sorted(n for _, n in stored()) == list(range(2, 151, 2))

    limit_records_to(1_048_588)
    again = millrace("publish", stream_name, str(source), "--key", "k", "--lines", str(failed))
    assert again.returncode == 0, again.stderr
    assert "published 75 events" in again.stdout
    complete = stored()
    assert sorted(n for _, n in complete) == list(range(1, 151))

    # The whole file sent once more: every line keeps its id, so readers drop the copies.
    assert millrace("publish", stream_name, str(source), "--key", "k").returncode == 0
    twice = stored()
    assert len(twice) == 300
    assert set(twice) == set(complete) and len(set(twice)) == 150


def _buckets_of_keys(
    workspace: Workspace, keys: list[str], millrace: Callable[..., CompletedProcess[str]]
) -> dict[str, int]:
    """The bucket of a 2-bucket stream that each key goes to (the same in every stream)."""
    probe = f"test.probe.{uuid.uuid4().hex[:8]}"
    create_stream(workspace.settings, probe, buckets=2)
    lines = "".join(json.dumps({"k": key}) + "\n" for key in keys)
    millrace("publish", probe, "-", "--key", "k", stdin=lines)
    tailed = millrace("tail", probe, "--from-beginning").stdout.splitlines()
    return {record["key"]: record["bucket"] for record in map(json.loads, tailed)}
