import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from subprocess import CompletedProcess

from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from tests.plain_producer import plain_producer


def test_run_prints_a_line_per_micro_batch_that_accounts_for_every_record_read(
    workspace: Workspace,
    stream_name: str,
    tmp_path: Path,
    millrace: Callable[..., CompletedProcess[str]],
) -> None:
    output = f"{stream_name}.kept"
    create_stream(workspace.settings, stream_name, buckets=2)
    create_stream(workspace.settings, output)
    start = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    bucket_0 = [
        ({"n": n, "t": (start + timedelta(seconds=n)).isoformat()}, f"a{n}") for n in range(12)
    ]
    bucket_0 += [
        ({"n": 2, "t": (start + timedelta(seconds=2)).isoformat()}, "a2"),  # a copy
        ({"n": -1, "t": (start - timedelta(minutes=10)).isoformat()}, "late"),
        ("not json", "bad"),
    ]
    # Bucket 1 is read behind bucket 0 in event time: it holds the input's watermark back.
    bucket_1 = [
        ({"n": n, "t": (start - timedelta(seconds=30 - n)).isoformat()}, f"b{n}") for n in range(6)
    ]
    producer = plain_producer(workspace.settings)
    for bucket, records in enumerate((bucket_0, bucket_1)):
        for value, record_id in records:
            text = value if isinstance(value, str) else json.dumps(value)
            producer.produce(
                stream_name, text.encode(), partition=bucket, headers=[("id", record_id.encode())]
            )
    producer.flush()
    app = tmp_path / "app.sql"
    app.write_text(
        "CREATE APPLICATION cli_progress WITH (max_records_per_batch = '4');\n"
        f"CREATE INPUT TABLE events (n INT) FROM STREAM('{stream_name}')\n"
        "  TIME t LATENESS '1 minute';\n"
        f"INSERT INTO STREAM('{output}') SELECT n FROM events;\n"
    )

    ran = millrace("run", str(app), "--available-now")

    assert ran.returncode == 0, ran.stderr
    query = f"cli_progress.insert.{output}"
    batches = [line for line in ran.stdout.splitlines() if line.startswith(f"{query}: batch ")]
    commits = workspace.checkpoint("cli_progress", f"insert.{output}") / "commits"
    committed = sorted(int(entry.name) for entry in commits.iterdir() if entry.name.isdigit())
    assert [int(line.split()[2].rstrip(",")) for line in batches] == committed, ran.stdout
    assert len(committed) >= 6  # 21 records, at most 4 a micro-batch
    assert batches[0].endswith(f"; {stream_name} held back by bucket 1 at 00:09:30"), ran.stdout
    assert batches[-1].endswith(f"; {stream_name} held back by bucket 1 at 00:09:35"), ran.stdout
    assert (
        f"{query}: {len(committed)} micro-batches read 21 records: 18 written, "
        "1 dead-lettered, 1 late, 1 duplicate dropped"
    ) in ran.stdout.splitlines(), ran.stdout
    assert f"input events: 1 bad record routed to {stream_name}.dlq" in ran.stdout
