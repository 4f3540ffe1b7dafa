"""The per-key counter of benchmarks/processors.py in Quix Streams, run from benchmarks/.venv-quix.

`benchmarks/.venv-quix/bin/python benchmarks/peers/quix_counter.py SETTINGS_JSON` reads the
input topic from its start with `processing_guarantee="exactly-once"` (Kafka transactions),
and counts each key's records with a per-record Python reducer in a tumbling window whose state
lives in RocksDB. Quix Streams has no timers, so each key's count is emitted once by the
window's `final()`: one window spans all the records, and the closing record an hour later
closes it for every key of its partition (`closing_strategy="partition"`). The closing records
fall into the next window, which never closes, so the closing key itself is not emitted. It
stops after the last key's count and prints one JSON line: the seconds from its first record
to its stop (joining the consumer group is not counted) and the settings it ran with.
"""

import json
import sys
import time

from quix_app import application, settings

WINDOW_MS = 2 * 3_600_000
SHIFT_MS = 3_600_000
"""Event times are shifted so that every record but the closing ones falls into the window
[0, 2 h): tumbling windows are aligned to multiples of their length."""


def main() -> None:
    run = json.loads(sys.argv[1])
    app = application(run)
    start_ms = run["start_ms"]
    records = app.topic(
        run["input"],
        key_deserializer="str",
        value_deserializer="json",
        timestamp_extractor=lambda value, headers, timestamp, kind: (
            value["time"] - start_ms + SHIFT_MS
        ),
    )
    counts = app.topic(run["output"], value_serializer="json", key_serializer="str")
    first_record: list[float] = []

    def first(value: int) -> int:
        if not first_record:
            first_record.append(time.perf_counter())
        return 1

    sdf = app.dataframe(records)
    sdf = (
        sdf.tumbling_window(WINDOW_MS, grace_ms=run["lateness_ms"])
        .reduce(reducer=lambda count, _: count + 1, initializer=first)
        .final(closing_strategy="partition")
    )
    sdf = sdf.apply(
        lambda window, key, timestamp, headers: {"key": key, "count": window["value"]},
        metadata=True,
    )
    sdf.to_topic(counts)
    app.run(count=run["keys"], timeout=run["idle_timeout_s"])
    stopped = time.perf_counter()
    print(
        json.dumps(
            {
                "processing_s": stopped - first_record[0],
                "settings": settings(
                    counting="tumbling window, reduce, final(closing_strategy=partition)"
                ),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
