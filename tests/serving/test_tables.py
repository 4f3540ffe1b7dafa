import random
import time
import uuid

import pytest
from pyspark.sql import SparkSession

from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream, dead_letter_stream
from millrace.config.workspace import Workspace
from millrace.errors import TableNotFoundError, TableSpecError
from millrace.serving.feeds import create_stream_table, delete_stream_table, start_table_feed
from millrace.serving.sink import write_table
from millrace.serving.tables import (
    TableSpec,
    count_rows,
    create_table,
    describe_table,
    drop_table,
    get_row,
    get_rows,
    list_tables,
    lookup_rows,
    write_rows,
)


def _name() -> str:
    return f"t_{uuid.uuid4().hex[:10]}"


def test_a_table_fed_from_100000_updates_holds_the_last_value_per_key_and_a_rerun_changes_nothing(
    spark: SparkSession, workspace: Workspace, redis_url: str, stream_name: str
) -> None:
    settings = workspace.settings
    create_stream(settings, stream_name, buckets=4)
    generator = random.Random(5)
    updates = [
        {"dimension_id": f"d{generator.randrange(20_000)}", "topic": f"topic-{n}", "rank": n}
        for n in range(100_000)
    ]
    with Publisher(stream_name, settings=settings) as publisher:
        for update in updates:
            publisher.send(update, key=update["dimension_id"])
        # Bad input: not JSON, and a record without the key; neither may stop the feed. The
        # raw bytes bypass `send`, which waits for room in the queue: flush to make some.
        publisher.flush()
        publisher._producer.produce(stream_name, b"{not json", key=b"x")
        publisher.send({"topic": "no key"}, key="nokey")
    expected: dict[str, dict] = {}
    for update in updates:  # plain Python: the last update published per key wins
        expected[update["dimension_id"]] = update
    name = _name()
    spec = create_stream_table(
        workspace,
        name,
        stream_name,
        keys=[("dimension_id", "STRING")],
        values=[("topic", "STRING"), ("rank", "BIGINT")],
    )
    assert describe_table(settings, name) == spec
    feed = start_table_feed(spark, workspace, name, available_now=True)
    feed.await_termination()
    assert feed.rows_written == 100_000
    assert feed.dead_letters == 2
    keys = sorted(expected)
    rows = get_rows(settings, name, keys)
    assert rows == [expected[key] for key in keys]
    assert count_rows(settings, name) == len(expected)
    assert get_row(settings, name, "never-written") is None
    letters = tail(
        dead_letter_stream(stream_name), TailStart(from_beginning=True), settings=settings
    )
    reasons = sorted(letter.value["error"] for letter in letters)
    assert len(reasons) == 2 and any("missing or null" in reason for reason in reasons)

    # The same records written again as one batch, from Spark, leave the table as it was.
    again = spark.createDataFrame(updates, "dimension_id STRING, topic STRING, rank BIGINT")
    assert write_table(again.coalesce(1), spec, redis_url) == 100_000
    assert get_rows(settings, name, keys) == [expected[key] for key in keys]
    assert count_rows(settings, name) == len(expected)
    assert delete_stream_table(workspace, name) == len(expected)
    assert count_rows(settings, name) == 0


def test_rows_expire_after_the_tables_ttl(workspace: Workspace, redis_url: str) -> None:
    settings = workspace.settings
    spec = create_table(
        settings, TableSpec(_name(), (("k", "STRING"),), (("v", "BIGINT"),), ttl_ms=1_500)
    )
    assert write_rows(redis_url, spec, {"k": ["a", "b"], "v": [1, 2]}) == 2
    assert get_rows(settings, spec.name, ["a", "b"]) == [{"k": "a", "v": 1}, {"k": "b", "v": 2}]
    time.sleep(0.8)
    write_rows(redis_url, spec, {"k": ["b"], "v": [3]})  # a write starts the row's TTL again
    deadline = time.monotonic() + 10
    while get_row(settings, spec.name, "a") is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert get_row(settings, spec.name, "a") is None
    assert get_row(settings, spec.name, "b") == {"k": "b", "v": 3}
    time.sleep(1.6)
    assert get_row(settings, spec.name, "b") is None
    drop_table(settings, spec.name)


def test_specs_are_registered_listed_and_checked(workspace: Workspace, redis_url: str) -> None:
    settings = workspace.settings
    name = _name()
    spec = TableSpec(name, (("a", "BIGINT"), ("b", "STRING")), (("v", "DOUBLE"),))
    created = create_table(settings, spec)
    assert create_table(settings, spec) == created  # the same spec again is a no-op
    assert name in [listed.name for listed in list_tables(settings)]
    with pytest.raises(TableSpecError, match="exists with other columns"):
        create_table(settings, TableSpec(name, (("a", "BIGINT"),), ()))
    with pytest.raises(TableSpecError, match="no key column"):
        create_table(settings, TableSpec(_name(), (), (("v", "STRING"),)))
    with pytest.raises(TableSpecError, match="not valid"):
        create_table(settings, TableSpec("bad name", (("k", "STRING"),), ()))
    write_rows(redis_url, created, {"a": [1, 1], "b": ["x", "y"], "v": [0.5, 1.5]})
    assert get_row(settings, name, (1, "y")) == {"a": 1, "b": "y", "v": 1.5}
    assert get_row(settings, name, {"a": 1, "b": "x"}) == {"a": 1, "b": "x", "v": 0.5}
    with pytest.raises(TableSpecError, match="gives 1 value"):
        get_row(settings, name, 1)
    assert drop_table(settings, name) == 2
    with pytest.raises(TableNotFoundError, match="does not exist"):
        get_row(settings, name, (1, "x"))


def test_lookups_use_a_cache_of_bounded_age(workspace: Workspace, redis_url: str) -> None:
    settings = workspace.settings
    spec = create_table(settings, TableSpec(_name(), (("k", "BIGINT"),), (("v", "STRING"),)))
    write_rows(redis_url, spec, {"k": [1], "v": ["old"]})
    assert lookup_rows(redis_url, spec, [1, 2, None, 1], max_age_s=0.5) == [
        {"k": 1, "v": "old"},
        None,
        None,
        {"k": 1, "v": "old"},
    ]
    write_rows(redis_url, spec, {"k": [1, 2], "v": ["new", "two"]})
    # Within the cache's age the cached row and the cached miss are served...
    assert lookup_rows(redis_url, spec, [1, 2], max_age_s=0.5) == [{"k": 1, "v": "old"}, None]
    # ...without a cache, or once they are older, Redis is read again.
    assert lookup_rows(redis_url, spec, [1], max_age_s=0)[0] == {"k": 1, "v": "new"}
    time.sleep(0.6)
    assert lookup_rows(redis_url, spec, [2, 1], max_age_s=0.5) == [
        {"k": 2, "v": "two"},
        {"k": 1, "v": "new"},
    ]
    drop_table(settings, spec.name)
