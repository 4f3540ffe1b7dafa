import dataclasses
import uuid
from collections import Counter, defaultdict

import pytest
from pyspark.sql import SparkSession

from millrace.apps.sql.explain import explain_sql_app
from millrace.apps.sql.running import start_sql_app
from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.errors import SqlError
from millrace.serving.tables import TableSpec, create_table, drop_table, get_rows, write_rows
from millrace.sql.parser import parse_app

APP = """
CREATE APPLICATION {app};
CREATE INPUT TABLE events (dimension_id, n BIGINT) FROM STREAM('{source}') TIME time;

INSERT INTO STREAM('{output}')
SELECT e.dimension_id, e.n, c.topic, c.weight
FROM events e JOIN LOOKUP {lookup} c ON c.dimension_id = e.dimension_id;

CREATE TABLE topic_totals WITH (mode = 'updates', serve = '{served}') AS
SELECT c.topic AS topic, COUNT(*) AS events, SUM(e.n * c.weight) AS total
FROM events e JOIN LOOKUP {lookup} c ON c.dimension_id = e.dimension_id
GROUP BY c.topic;
"""


def _suffix() -> str:
    return uuid.uuid4().hex[:8]


def test_a_sql_app_with_lookup_joins_matches_plain_python_on_a_live_stream(
    spark: SparkSession, workspace: Workspace, redis_url: str
) -> None:
    settings = workspace.settings
    suffix = _suffix()
    source, output = f"test.events.{suffix}", f"test.enriched.{suffix}"
    create_stream(settings, source, buckets=2)
    create_stream(settings, output)
    lookup = create_table(
        settings,
        TableSpec(
            f"cls_{suffix}",
            (("dimension_id", "STRING"),),
            (("topic", "STRING"), ("weight", "BIGINT")),
        ),
    )
    # d0..d29 are classified; d30..d39 are not, so their lookups give NULL.
    classified = {f"d{n}": (f"topic{n % 4}", n % 3 + 1) for n in range(30)}
    write_rows(
        redis_url,
        lookup,
        {
            "dimension_id": list(classified),
            "topic": [topic for topic, _ in classified.values()],
            "weight": [weight for _, weight in classified.values()],
        },
    )
    served = f"totals_{suffix}"
    app = parse_app(
        APP.format(app=f"lookups_{suffix}", source=source, output=output, lookup=lookup.name,
                   served=served)
    )  # fmt: skip
    # No cache, so rows changed while the app runs are seen by its next micro-batch.
    uncached = dataclasses.replace(
        workspace, settings=dataclasses.replace(settings, redis_lookup_cache_s=0.0)
    )
    running = start_sql_app(spark, uncached, app)
    events: list[dict] = []
    try:
        for round_ in range(2):
            batch = [
                {"time": 1_767_225_600_000 + n, "dimension_id": f"d{(n * 7 + round_) % 40}",
                 "n": n}
                for n in range(300)
            ]  # fmt: skip
            with Publisher(source, settings=settings) as publisher:
                for event in batch:
                    publisher.send(event, key=event["dimension_id"])
            events.extend(batch)
            running.process_all_available()
            if round_ == 0:
                # Reclassify d1 between the rounds: later events see the new row.
                classified["d1"] = ("topic-new", 10)
                write_rows(redis_url, lookup, {"dimension_id": ["d1"], "topic": ["topic-new"],
                                               "weight": [10]})  # fmt: skip
                first_round = list(events)
        assert running.dead_letters() == {"events": 0}
    finally:
        running.stop()

    def classification(event: dict, round_: int) -> tuple[str | None, int | None]:
        if event["dimension_id"] == "d1" and round_ == 0:
            return ("topic1", 2)
        return classified.get(event["dimension_id"], (None, None))

    expected = Counter()
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for index, event in enumerate(events):
        topic, weight = classification(event, 0 if index < len(first_round) else 1)
        expected[(event["dimension_id"], event["n"], topic, weight)] += 1
        if topic is not None:
            totals[topic][0] += 1
            totals[topic][1] += event["n"] * weight
    records = tail(output, TailStart(from_beginning=True), settings=settings)
    produced = Counter(
        (r.value["dimension_id"], r.value["n"], r.value.get("topic"), r.value.get("weight"))
        for r in records
    )
    assert produced == expected
    assert any(topic is None for _, _, topic, _ in produced)  # missing keys gave NULL
    topics = sorted(totals)
    assert get_rows(settings, served, topics) == [
        {"topic": topic, "events": totals[topic][0], "total": totals[topic][1]} for topic in topics
    ]
    drop_table(settings, lookup.name)
    drop_table(settings, served)


def test_a_lookup_join_on_an_unknown_serving_table_is_a_clear_error(
    spark: SparkSession, workspace: Workspace, redis_url: str, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name)
    app = parse_app(
        "CREATE APPLICATION nolookup;\n"
        f"CREATE INPUT TABLE events (dimension_id) FROM STREAM('{stream_name}') TIME time;\n"
        f"INSERT INTO STREAM('{stream_name}') SELECT e.dimension_id, c.topic FROM events e\n"
        "  JOIN LOOKUP no_such_table c ON c.dimension_id = e.dimension_id;\n",
        "app.sql",
    )
    with pytest.raises(SqlError, match=r"app\.sql:4:3: JOIN LOOKUP: serving table "
                       r"'no_such_table' does not exist"):  # fmt: skip
        explain_sql_app(spark, workspace, app)


def test_lookup_join_conditions_are_checked_when_parsing() -> None:
    head = "CREATE APPLICATION a;\nCREATE INPUT TABLE e (k) FROM STREAM('s') TIME time;\n"
    with pytest.raises(SqlError, match=r"<string>:3:\d+: JOIN LOOKUP t c: the condition must be"):
        parse_app(head + "INSERT INTO STREAM('o') SELECT * FROM e JOIN LOOKUP t c ON c.k > e.k;")
    parsed = parse_app(
        head + "INSERT INTO STREAM('o') SELECT e.k, c.v FROM e JOIN LOOKUP t AS c "
        "ON (c.a = lower(e.k) AND e.k = c.b) WHERE e.k IS NOT NULL;"
    )
    (lookup,) = parsed.inserts[0].query.lookups
    assert (lookup.table, lookup.alias, lookup.left) == ("t", "c", "e")
    assert lookup.keys == (("a", "LOWER(e.k)"), ("b", "e.k"))
    assert "LOOKUP" not in parsed.inserts[0].query.text
    with pytest.raises(SqlError, match="ttl without serve"):
        parse_app(head + "CREATE TABLE x WITH (mode = 'updates', ttl = '1h') AS "
                  "SELECT k, COUNT(*) AS n FROM e GROUP BY k;")  # fmt: skip
