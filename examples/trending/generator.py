"""The trending pipeline's input: a realistic event stream, and its streams and dimensions.

`generate(seed, count, start_ms, rate)` gives the records a generator publishes, in order:
events `{event_time, event_type, dimension_id, text}` at `rate` per second of event time,
most dimensions popular at a steady level and one "hot" dimension per topic that changes every
30 seconds; about 10% of events are out of order (event time up to 4 s behind, within the
apps' 5 s lateness), about 1% late (20 to 40 s behind; neither ever before the first event),
and one record in 500 malformed (not JSON, a JSON array, or an unreadable time), which the
Filterer routes to `trending.events.dlq`. Some events name dimensions the dimensions file
does not know; the Joiner drops them.

`publish(settings, records)` sends them; `run(settings, rate, seconds, stop)` publishes live,
paced by the clock. `setup(settings)` creates the streams and the serving table
`trending_dimensions`, loaded from `dimensions.csv` next to this file.

Example:
    >>> records = generate(seed=7, count=1000, start_ms=1_767_225_600_000, rate=200)
    >>> sum(1 for record in records if isinstance(record, bytes))
    2
"""

from __future__ import annotations

import csv
import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from millrace.bus.client_config import kafka_client_config
from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream, list_streams
from millrace.config.settings import Settings
from millrace.serving.tables import TableSpec, create_table, write_rows

HERE = Path(__file__).resolve().parent
DIMENSIONS_FILE = HERE / "dimensions.csv"
DIMENSIONS_TABLE = "trending_dimensions"
EVENTS = "trending.events"
STREAMS = ("trending.events", "trending.filtered", "trending.enriched", "trending.scores")
"""The pipeline's streams, in order: input, Filterer's, Joiner's, Scorer's output."""
APPS = ("filterer.sql", "joiner.sql", "scorer.py:Scorer", "ranker.sql")
"""The apps' sources, relative to this folder, in pipeline order."""
EVENT_TYPES = {"post": 35, "comment": 25, "share": 10, "like": 20, "view": 10}
"""Event types and their weights; the Filterer keeps post, comment and share."""
UNKNOWN_DIMENSIONS = ("d90", "d91", "d92")
HOT_PERIOD_MS = 30_000
MALFORMED_EVERY = 500
_MALFORMED = (
    b"{not json",
    b'["post", "d01"]',
    b'{"event_time": "yesterday", "event_type": "post", "dimension_id": "d01"}',
)
_WORDS = ("great", "wow", "live", "now", "watch", "news", "update", "amazing", "again", "see")


def dimensions(path: Path = DIMENSIONS_FILE) -> dict[str, dict[str, str]]:
    """The dimensions file's rows by dimension id: `{"d01": {"name": ..., "topic": ...}}`.

    Example:
        >>> dimensions()["d01"]
        {'name': '#superbowl', 'topic': 'sports'}
    """
    with path.open(newline="") as file:
        return {
            row["dimension_id"]: {"name": row["name"], "topic": row["topic"]}
            for row in csv.DictReader(file)
        }


def setup(settings: Settings, *, buckets: int = 2) -> None:
    """Create the streams that are missing, and the dimensions table, loaded from the file.

    Example:
        >>> setup(workspace.settings)  # doctest: +SKIP
    """
    existing = set(list_streams(settings))
    for stream in STREAMS:
        if stream not in existing:
            create_stream(settings, stream, buckets=buckets, retention="1d")
    spec = create_table(
        settings,
        TableSpec(
            DIMENSIONS_TABLE,
            (("dimension_id", "STRING"),),
            (("name", "STRING"), ("topic", "STRING")),
        ),
    )
    rows = dimensions()
    write_rows(
        settings.redis,
        spec,
        {
            "dimension_id": list(rows),
            "name": [row["name"] for row in rows.values()],
            "topic": [row["topic"] for row in rows.values()],
        },
    )


def generate(*, seed: int, count: int, start_ms: int, rate: float) -> list[dict[str, Any] | bytes]:
    """`count` records from `start_ms` on at `rate` per second: events, and malformed bytes.

    Example:
        >>> generate(seed=1, count=1, start_ms=0, rate=10)[0]["event_time"]
        '1970-01-01T00:00:00+00:00'
    """
    return list(_records(random.Random(seed), start_ms, rate, count))


def _records(
    rng: random.Random, start_ms: int, rate: float, count: int | None
) -> Iterator[dict[str, Any] | bytes]:
    known = dimensions()
    by_topic: dict[str, list[str]] = {}
    for dimension, row in known.items():
        by_topic.setdefault(row["topic"], []).append(dimension)
    types, weights = list(EVENT_TYPES), list(EVENT_TYPES.values())
    number = 0
    while count is None or number < count:
        number += 1
        if number % MALFORMED_EVERY == 0:
            yield _MALFORMED[(number // MALFORMED_EVERY) % len(_MALFORMED)]
            continue
        nominal = start_ms + int((number - 1) * 1000 / rate)
        draw = rng.random()
        if draw < 0.03:
            dimension = rng.choice(UNKNOWN_DIMENSIONS)
        else:
            topic = rng.choice(sorted(by_topic))
            members = by_topic[topic]
            # One dimension per topic is hot for each 30-second period; the others follow a
            # steady, skewed popularity.
            hot = members[(nominal // HOT_PERIOD_MS + len(topic)) % len(members)]
            dimension = (
                hot
                if rng.random() < 0.4
                else members[min(int(rng.expovariate(0.5)), len(members) - 1)]
            )
        shift = 0
        disorder = rng.random()
        if disorder < 0.01:
            shift = rng.randint(20_000, 40_000)  # late: beyond the 5 s lateness
        elif disorder < 0.11:
            shift = rng.randint(1, 4_000)  # out of order, on time
        # Never before the first event, which nothing could be behind: such a record would
        # open a window of its own ahead of the run's first.
        shift = min(shift, nominal - start_ms)
        name = known.get(dimension, {}).get("name", dimension)
        yield {
            "event_time": datetime.fromtimestamp((nominal - shift) / 1000, UTC).isoformat(),
            "event_type": rng.choices(types, weights)[0],
            "dimension_id": dimension,
            "text": f"{name} {rng.choice(_WORDS)} {rng.choice(_WORDS)}",
        }


def publish(settings: Settings, records: list[dict[str, Any] | bytes]) -> None:
    """Publish `records` to `trending.events` in order (events keyed by dimension id).

    Example:
        >>> publish(settings, generate(seed=7, count=100, start_ms=0, rate=10))  # doctest: +SKIP
    """
    producer = Producer(kafka_client_config(settings))
    with Publisher(EVENTS, settings=settings, time_field="event_time") as publisher:
        for record in records:
            if isinstance(record, bytes):
                publisher.flush()
                # Bytes no millrace publisher would send, to show dead-letter routing.
                producer.produce(EVENTS, record)
                producer.flush()
            else:
                publisher.send(record, key=record["dimension_id"])


def run(
    settings: Settings,
    *,
    rate: float,
    stop: threading.Event,
    seed: int | None = None,
    on_sent: Callable[[int, int], None] | None = None,
) -> None:
    """Publish live at `rate` records per second, event times from now, until `stop` is set.

    `on_sent(events, malformed)` is called about once a second with the totals so far, and
    once more with the final totals when `stop` ends the run.

    Example:
        >>> run(settings, rate=200, stop=threading.Event())  # doctest: +SKIP
    """
    rng = random.Random(seed)
    start_ms = int(time.time() * 1000)
    started = time.monotonic()
    producer = Producer(kafka_client_config(settings))
    events = malformed = 0
    reported = started
    with Publisher(EVENTS, settings=settings, time_field="event_time") as publisher:
        for number, record in enumerate(_records(rng, start_ms, rate, None), start=1):
            if stop.is_set():
                break
            if isinstance(record, bytes):
                producer.produce(EVENTS, record)
                producer.poll(0)
                malformed += 1
            else:
                publisher.send(record, key=record["dimension_id"])
                events += 1
            ahead = number / rate - (time.monotonic() - started)
            if ahead > 0:
                publisher.flush()
                stop.wait(ahead)
            if on_sent is not None and time.monotonic() - reported >= 1.0:
                reported = time.monotonic()
                on_sent(events, malformed)
    producer.flush()
    if on_sent is not None:
        on_sent(events, malformed)
