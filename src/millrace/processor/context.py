"""What a callback gets as `ctx`: the record's metadata and times, timers, and productions.

A `Context` lives for one callback on one key. Everything it changes (timers, productions) is
pending until the callback returns: when the callback raises, the engine throws it away.

Every production gets a deterministic id from what it was computed from: the processor's name,
the key, the callback's cause (the input record's id, a timer's domain, tag and time, or the ids
of the records a monoid aggregate folded) and the production's index within the callback. A
micro-batch that is run again produces the same ids, so readers that drop ids they have seen
make the output exactly-once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from millrace.errors import ProcessorError
from millrace.processor.keys import Key
from millrace.processor.lookups import TABLE_PREFIX, LookupSource, lookup
from millrace.processor.timers import KeyTimers, TimeDomain, Timer
from millrace.records import JsonObject, Record


@dataclass(frozen=True)
class Production:
    """A record produced by a processor: its stream, value, routing key, event time and id.

    Example:
        >>> Production("window_counts", {"count": 3}, "cats", 1000, "5f0c...").value["count"]
        3
    """

    stream: str
    value: JsonObject
    key: object
    time_ms: int | None
    id: str


class Context:
    """The callback's view of the engine, for one key (`ctx` in `on_record` and `on_timer`).

    `stream`, `record` and `event_time_ms` describe the record being processed (`record` holds
    its id, bucket and offset); in `on_timer` the stream and record are None and the event
    time is the timer's time; in `on_aggregate` the stream and record are None and the event
    time is the latest of the folded records. `watermark_ms` (None before any record was seen)
    and `processing_time_ms` are the micro-batch's.

    Example:
        >>> from millrace.processor.lookups import MemoryTables
        >>> users = MemoryTables({"users": {"u7": {"plan": "pro"}}})
        >>> ctx = Context(processor="sessions", key="u7", cause=["record", "clicks/0/41"],
        ...               timers=KeyTimers(None), watermark_ms=None, processing_time_ms=0,
        ...               event_time_ms=1500, lookups=users)
        >>> ctx.set_timer("idle", processing_time_ms=30_000)
        >>> ctx.timer("idle").time_ms
        30000
        >>> ctx.delete_timer("idle")
        >>> ctx.timer("idle") is None
        True
        >>> ctx.lookup("users", "u7")
        {'plan': 'pro'}
        >>> ctx.produce("pages", {"user": "u7", "page": "/"}).time_ms
        1500
        >>> ctx.produce_to_table("user_totals", {"user": "u7", "total": 7}).stream
        'table:user_totals'
    """

    def __init__(
        self,
        *,
        processor: str,
        key: Key,
        cause: Sequence[str | int],
        timers: KeyTimers,
        watermark_ms: int | None,
        processing_time_ms: int,
        event_time_ms: int | None,
        record: Record | None = None,
        lookups: LookupSource | None = None,
    ) -> None:
        self.key = key
        self.record = record
        self.stream = record.stream if record is not None else None
        self.event_time_ms = event_time_ms
        self.watermark_ms = watermark_ms
        self.processing_time_ms = processing_time_ms
        self.productions: list[Production] = []
        self._processor = processor
        self._cause = cause
        self._timers = timers
        self._lookups = lookups

    def set_timer(
        self,
        tag: str,
        *,
        event_time_ms: int | None = None,
        processing_time_ms: int | None = None,
    ) -> None:
        """Set the key's timer `tag`, replacing any timer of that tag.

        Give exactly one of `event_time_ms` and `processing_time_ms`. An event-time timer
        fires once the watermark reaches its time, a processing-time timer once the clock does;
        a timer that is already due fires in the same micro-batch.
        """
        if not isinstance(tag, str) or not tag:
            raise ProcessorError(
                f"timer tag {tag!r} is not a non-empty string",
                hint="name each timer of a key with a string tag, such as f'close-{bucket}'",
            )
        if (event_time_ms is None) == (processing_time_ms is None):
            raise ProcessorError(
                f"set_timer({tag!r}) needs exactly one of event_time_ms and processing_time_ms",
                hint="use event_time_ms to wait for the watermark, processing_time_ms for the "
                "clock",
            )
        time_ms = event_time_ms if event_time_ms is not None else processing_time_ms
        if not isinstance(time_ms, int) or isinstance(time_ms, bool):
            raise ProcessorError(
                f"set_timer({tag!r}) got time {time_ms!r}, which is not epoch milliseconds",
                hint="give the time as an int of epoch milliseconds",
            )
        domain: TimeDomain = "event_time" if event_time_ms is not None else "processing_time"
        self._timers.set(Timer(tag, time_ms, domain))

    def delete_timer(self, tag: str) -> None:
        """Delete the key's timer `tag`; nothing happens when there is none."""
        self._timers.delete(tag)

    def timer(self, tag: str) -> Timer | None:
        """The key's pending timer `tag`, or None."""
        return self._timers.get(tag)

    def produce(
        self,
        stream: str,
        value: Mapping[str, object],
        *,
        key: object = None,
        time_ms: int | None = None,
    ) -> Production:
        """Produce `value` (a dict) to `stream`, routed by `key`, at event time `time_ms`.

        `time_ms` defaults to the callback's event time. The production's id is deterministic
        (see the module's notes).
        """
        if not isinstance(stream, str) or not stream:
            raise ProcessorError(
                f"produce() got stream {stream!r}, which is not a stream name",
                hint="give the output stream's name as a string",
            )
        if not isinstance(value, Mapping):
            raise ProcessorError(
                f"produce({stream!r}) got a {type(value).__name__}, not a dict",
                hint="a stream's record is a JSON object: produce a dict",
            )
        if time_ms is not None and (not isinstance(time_ms, int) or isinstance(time_ms, bool)):
            raise ProcessorError(
                f"produce({stream!r}) got time_ms {time_ms!r}, which is not epoch milliseconds",
                hint="give time_ms as an int of epoch milliseconds, or leave it out",
            )
        production = Production(
            stream,
            dict(value),
            key,
            self.event_time_ms if time_ms is None else time_ms,
            production_id(self._processor, self.key, self._cause, len(self.productions)),
        )
        self.productions.append(production)
        return production

    def lookup(self, table: str, key: object) -> JsonObject | None:
        """The row of serving table `table` with key `key` (a dict of its columns), or None.

        A missing key gives None, never an error. On Spark the row may be up to the
        `redis.lookup_cache_s` setting old (the executor's cache); see
        `millrace.processor.lookups` for fetching a micro-batch's keys in one round trip.
        """
        return lookup(self._lookups, table, key)

    def produce_to_table(self, table: str, row: Mapping[str, object]) -> Production:
        """Upsert `row` (its key and value columns) into serving table `table`.

        The runtime writes it with the micro-batch's other productions; the production's
        stream is `table:<table>`.
        """
        if not isinstance(table, str) or not table:
            raise ProcessorError(
                f"produce_to_table() got table {table!r}, which is not a table name",
                hint="give the serving table's name as a string",
            )
        return self.produce(f"{TABLE_PREFIX}{table}", row)


def production_id(processor: str, key: Key, cause: Sequence[str | int], index: int) -> str:
    """The deterministic id of a production: 32 hex digits of a hash of what made it.

    Example:
        >>> production_id("counter", "cats", ["record", "queries/0/41"], 0) == production_id(
        ...     "counter", "cats", ["record", "queries/0/41"], 0)
        True
    """
    text = json.dumps([processor, key, cause, index], separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]
