"""Dead letters of a streaming read: routed from the reading query's own micro-batches, once
each, and still routed when the app stopped before it could route them."""

import uuid

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream, dead_letter_stream
from millrace.config.workspace import Workspace
from millrace.engine.streams import StreamInput, read_stream

SCHEMA = "event STRING, score DOUBLE"
START_MS = 1_767_225_600_000


def _publish(workspace: Workspace, stream: str, events: list[dict]) -> None:
    with Publisher(stream, settings=workspace.settings) as publisher:
        for event in events:
            publisher.send({"time": START_MS, **event})


def _run(source: StreamInput, workspace: Workspace, app: str) -> StreamingQuery:
    """Read the good records to the end of the stream, from where the app last stopped."""
    query = (
        source.records.writeStream.format("noop")
        .option("checkpointLocation", str(workspace.checkpoint(app, "noop")))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return query


def _letters(workspace: Workspace, stream: str) -> list:
    return list(
        tail(
            dead_letter_stream(stream),
            TailStart(from_beginning=True),
            settings=workspace.settings,
        )
    )


def test_bad_records_in_any_micro_batch_are_routed_once_each(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name, buckets=1)
    events = [{"event": f"e{n}", "score": n} for n in range(30)]
    for n in (3, 17, 29):
        events[n] = {"event": f"bad{n}", "score": "high"}
    _publish(workspace, stream_name, events)

    source = read_stream(
        spark, workspace, "routing", stream_name, SCHEMA, time="time", max_records_per_batch=10
    )
    query = _run(source, workspace, "routing")

    assert source.wait_for_dead_letters(query) == 3
    assert len(query.recentProgress) == 3
    letters = _letters(workspace, stream_name)
    assert sorted(letter.value["offset"] for letter in letters) == [3, 17, 29]
    assert {letter.id for letter in letters} == {f"dlq:{stream_name}:0:{n}" for n in (3, 17, 29)}


def test_bad_records_of_micro_batches_committed_while_no_router_followed_are_routed_later(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name, buckets=1)
    app = f"crash-{uuid.uuid4().hex[:6]}"
    _publish(workspace, stream_name, [{"event": "e0", "score": 0}, {"event": "bad", "score": "x"}])
    # The app stops after its micro-batch is committed and before the router sees it, as
    # when the driver is killed in between.
    unfollowed = read_stream(spark, workspace, app, stream_name, SCHEMA, time="time")
    unfollowed.dead_letters.close()
    _run(unfollowed, workspace, app)
    assert _letters(workspace, stream_name) == []

    # Restarted on more records, the app's next micro-batch starts past what was routed.
    _publish(workspace, stream_name, [{"event": "e2", "score": 2}])
    restarted = read_stream(spark, workspace, app, stream_name, SCHEMA, time="time")
    query = _run(restarted, workspace, app)

    assert restarted.wait_for_dead_letters(query) == 1
    [letter] = _letters(workspace, stream_name)
    assert letter.value["offset"] == 1
    assert letter.value["error"].startswith("value does not fit the schema")


def test_a_restart_with_nothing_new_to_read_routes_what_its_checkpoint_committed(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name, buckets=1)
    app = f"idle-{uuid.uuid4().hex[:6]}"
    _publish(workspace, stream_name, [{"event": "bad", "score": "x"}])
    unfollowed = read_stream(spark, workspace, app, stream_name, SCHEMA, time="time")
    unfollowed.dead_letters.close()
    _run(unfollowed, workspace, app)

    restarted = read_stream(spark, workspace, app, stream_name, SCHEMA, time="time")
    query = _run(restarted, workspace, app)

    assert query.recentProgress == [] or query.lastProgress["numInputRows"] == 0
    assert restarted.wait_for_dead_letters(query) == 1
    assert len(_letters(workspace, stream_name)) == 1
