import json
import uuid
from collections.abc import Callable
from subprocess import CompletedProcess

from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace


def test_table_create_feeds_a_stream_then_get_list_and_delete(
    workspace: Workspace,
    redis_url: str,
    stream_name: str,
    millrace: Callable[..., CompletedProcess[str]],
) -> None:
    settings = workspace.settings
    create_stream(settings, stream_name, buckets=2)
    updates = [
        {"dimension_id": f"d{n % 7}", "topic": f"topic-{n}", "score": n / 4} for n in range(50)
    ]
    with Publisher(stream_name, settings=settings) as publisher:
        for update in updates:
            publisher.send(update, key=update["dimension_id"])
    last = {update["dimension_id"]: update for update in updates}
    name = f"cls_{uuid.uuid4().hex[:8]}"
    created = millrace(
        "table", "create", name, "--from-stream", stream_name, "--key", "dimension_id",
        "--value", "topic", "--value", "score:double", "--ttl", "7d", "--available-now",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert "50 rows written, 0 records" in created.stdout
    listed = millrace("table", "list").stdout
    assert f"{name}: key dimension_id STRING; values topic STRING, score DOUBLE, ttl 604800 s" in (
        listed
    )
    got = millrace("table", "get", name, "d3")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == last["d3"]
    missing = millrace("table", "get", name, "d99")
    assert missing.returncode == 1 and "no row with key d99" in missing.stderr
    deleted = millrace("table", "delete", name)
    assert deleted.returncode == 0 and f"({len(last)} rows)" in deleted.stdout
    gone = millrace("table", "get", name, "d3")
    assert gone.returncode == 1
    assert f"error[table-not-found]: serving table {name!r} does not exist" in gone.stderr


def test_table_create_checks_its_columns_and_registers_a_table_for_apps(
    workspace: Workspace, redis_url: str, millrace: Callable[..., CompletedProcess[str]]
) -> None:
    bad = millrace("table", "create", "x", "--key", "k:TIMESTAMPZ")
    assert bad.returncode == 1 and "error[table-invalid]" in bad.stderr and "STRING" in bad.stderr
    name = f"apps_{uuid.uuid4().hex[:8]}"
    created = millrace("table", "create", name, "--key", "k:bigint", "--value", "v")
    assert created.returncode == 0, created.stderr
    assert "key k BIGINT; values v STRING; written by apps" in created.stdout
    assert millrace("table", "delete", name).returncode == 0
