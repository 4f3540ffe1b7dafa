"""Routing a streaming read's bad records to `<stream>.dlq`, without reading the stream twice.

The queries that use a streaming read decode each record once. They pass the good records
on and count the bad ones of every micro-batch in an observed metric. The read's
`DeadLetterRouter` follows the progress of those queries. After a micro-batch that counted
bad records, it reads that batch's offsets again, in batch, and writes their bad records to
the dead-letter stream. A micro-batch with none costs nothing more.

The router keeps, per bucket, the offset below which every record has been looked at, in
`<app checkpoint>/dead-letters.<stream>/routed.json`. Each micro-batch moves it forward. A
range that the router did not see counted (the app stopped between a micro-batch and its
routing, or a progress event was lost) is scanned in full: when a later micro-batch starts
past the offset, and when `wait` compares the offset with what the queries' checkpoints
have committed. A letter may so be written twice, never lost; its id names the record's
place in the stream, so readers drop the second copy.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)
from pyspark.sql.streaming.query import StreamingQuery

from millrace.bus.dead_letters import DEAD_LETTER_RETENTION
from millrace.bus.streams import create_stream, dead_letter_stream, describe_stream
from millrace.config.storage import storage_path, write_whole
from millrace.config.workspace import Workspace
from millrace.engine import kafka, spark_internals
from millrace.engine.checkpoint_log import Offsets, last_committed, stream_offsets
from millrace.engine.kafka import StartingOffsets
from millrace.engine.low_watermark import input_metrics_name
from millrace.engine.session import add_listener, remove_listener
from millrace.records import ID_HEADER

_log = logging.getLogger(__name__)
# Spark hands events to listeners on a queue of its own, after the query has moved on; a
# stopped query's last events are waited for this long before its checkpoint is trusted.
_LAST_EVENT_WAIT_S = 10.0


class DeadLetterRouter:
    """Routes the bad records counted by the queries reading `stream` in app `app`.

    `letters_of` turns Kafka records, as Spark's Kafka source reads them, into the dead
    letters to write. `starting_offsets` is where the reading queries start when they have no
    checkpoint yet (`earliest` or `latest`).
    """

    def __init__(
        self,
        spark: SparkSession,
        workspace: Workspace,
        app: str,
        stream: str,
        letters_of: Callable[[DataFrame], DataFrame],
        *,
        starting_offsets: StartingOffsets,
    ) -> None:
        self.spark = spark
        self.workspace = workspace
        self.stream = stream
        self.app = app
        self._letters_of = letters_of
        # Made at once, so that readers of the dead letters find the stream, empty or not.
        self._target = create_dead_letter_stream(workspace, stream)
        self._state = workspace.dead_letter_marks(app, stream)
        self._looked_at = self._load(starting_offsets)
        self._routed = 0
        self._lock = threading.Lock()
        # Micro-batches to look at, and None once closed.
        self._batches: queue.Queue[tuple[bool, Offsets | None, Offsets] | None] = queue.Queue()
        self._ended_runs: set[str] = set()
        self._ended = threading.Condition()
        self._listener = _ProgressListener(self)
        add_listener(spark, self._listener)
        threading.Thread(target=self._work, name=f"dead-letters-{stream}", daemon=True).start()

    @property
    def observation(self) -> str:
        """The name of the observed metrics, with a `bad` field, of the input's records."""
        return input_metrics_name(self.app, self.stream)

    @property
    def routed(self) -> int:
        """The dead letters this router has written so far."""
        with self._lock:
            return self._routed

    def wait(self, *queries: StreamingQuery) -> int:
        """Route the bad records of everything `queries` have committed; the total routed.

        Call it once the queries have stopped, or after `processAllAvailable`, before looking
        at the dead-letter stream. A query that is still running goes on being followed.
        """
        with self._ended:
            self._ended.wait_for(
                lambda: all(
                    query.isActive or str(query.runId) in self._ended_runs for query in queries
                ),
                timeout=_LAST_EVENT_WAIT_S,
            )
        self._batches.join()
        for query in queries:
            committed = _committed_offsets(query, self.stream, self.workspace)
            if committed is not None:
                with self._lock:
                    self._look_at(True, None, committed)
        return self.routed

    def close(self) -> None:
        """Stop following the queries; what they commit later is routed by the next router."""
        remove_listener(self.spark, self._listener)
        self._batches.put(None)

    def _work(self) -> None:
        while True:
            batch = self._batches.get()
            try:
                if batch is None:
                    return
                with self._lock:
                    self._look_at(*batch)
            except Exception:
                # The offsets stay where they were, so the next micro-batch or `wait` scans
                # this range again.
                _log.exception("routing the dead letters of %s failed", self.stream)
            finally:
                self._batches.task_done()

    def _look_at(self, counted_bad: bool, starts: Offsets | None, ends: Offsets) -> None:
        """Account for the records before `ends`, scanning what is new when it may hold any."""
        new = {
            bucket: (self._looked_at.get(bucket, 0), end)
            for bucket, end in ends.items()
            if end > self._looked_at.get(bucket, 0)
        }
        if not new:
            return
        # A micro-batch that starts past the offset follows a range nobody counted.
        unseen = starts is not None and any(
            start > self._looked_at.get(bucket, 0) for bucket, start in starts.items()
        )
        if counted_bad or unseen:
            self._routed += self._route(new)
        self._looked_at.update({bucket: end for bucket, (_, end) in new.items()})
        self._save()

    def _route(self, ranges: dict[int, tuple[int, int]]) -> int:
        raw = kafka.read_range(
            self.spark,
            self.workspace.settings,
            self.stream,
            starts={bucket: low for bucket, (low, _) in ranges.items()},
            ends={bucket: high for bucket, (_, high) in ranges.items()},
            # Records that the stream's retention removed are gone for every reader.
            fail_on_data_loss=False,
        )
        return write_dead_letters(self.workspace, self.stream, self._letters_of(raw))

    def _load(self, starting_offsets: StartingOffsets) -> Offsets:
        if self._state.exists():
            return {int(b): offset for b, offset in json.loads(self._state.read_text()).items()}
        buckets = describe_stream(self.workspace.settings, self.stream).buckets
        if starting_offsets == "latest":
            return {bucket.bucket: bucket.end_offset for bucket in buckets}
        return {bucket.bucket: bucket.start_offset for bucket in buckets}

    def _save(self) -> None:
        write_whole(
            self._state, json.dumps({str(b): offset for b, offset in self._looked_at.items()})
        )


def dead_letter_records(
    rows: DataFrame, stream: str, *, error: Column, original: Column, original_base64: Column
) -> DataFrame:
    """`rows` of `stream` as dead letters: key, value and headers for Kafka's sink.

    `rows` carry the record's `record_key`, `record_bucket` and `record_offset`. The id names
    the record's place in the stream (`dlq:<stream>:<bucket>:<offset>`), so that routing a
    record twice, by a streaming and a batch read or by a re-run, gives the same id.
    """
    return rows.select(
        F.col("record_key").alias("key"),
        F.to_json(
            F.struct(
                error.alias("error"),
                F.lit(stream).alias("stream"),
                F.col("record_bucket").alias("bucket"),
                F.col("record_offset").alias("offset"),
                original.alias("original"),
                original_base64.alias("original_base64"),
            )
        ).alias("value"),
        F.array(
            F.struct(
                F.lit(ID_HEADER).alias("key"),
                F.concat_ws(
                    ":", F.lit("dlq"), F.lit(stream), F.col("record_bucket"), F.col("record_offset")
                )
                .cast("binary")
                .alias("value"),
            )
        ).alias("headers"),
    )


def write_dead_letters(workspace: Workspace, stream: str, letters: DataFrame) -> int:
    """Write `letters` (key, value and headers for Kafka) to `<stream>.dlq`; their number."""
    letters = letters.persist()
    try:
        count = letters.count()
        if count:
            kafka.write(
                letters, workspace.settings, topic=create_dead_letter_stream(workspace, stream)
            )
        return count
    finally:
        letters.unpersist()


def create_dead_letter_stream(workspace: Workspace, stream: str) -> str:
    """Create `<stream>.dlq` unless it exists; its name."""
    target = dead_letter_stream(stream)
    create_stream(
        workspace.settings, target, buckets=1, retention=DEAD_LETTER_RETENTION, exist_ok=True
    )
    return target


class _ProgressListener(StreamingQueryListener):
    """Hands the router each micro-batch that reported its observed metric."""

    def __init__(self, router: DeadLetterRouter) -> None:
        self.router = router

    def onQueryStarted(self, event: QueryStartedEvent) -> None:  # noqa: N802 - Spark's callback names
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:  # noqa: N802
        progress = event.progress
        for source in progress.sources:
            ends = stream_offsets(source.endOffset, self.router.stream)
            if ends is None:
                continue
            observed = progress.observedMetrics
            if self.router.observation not in observed:
                continue
            starts = stream_offsets(source.startOffset, self.router.stream)
            bad = observed[self.router.observation]["bad"] > 0
            self.router._batches.put((bad, starts, ends))

    def onQueryIdle(self, event: QueryIdleEvent) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:  # noqa: N802
        with self.router._ended:
            self.router._ended_runs.add(str(event.runId))
            self.router._ended.notify_all()


def _committed_offsets(query: StreamingQuery, stream: str, workspace: Workspace) -> Offsets | None:
    """The end offsets of `stream` in the last micro-batch that `query` has committed."""
    checkpoint = storage_path(spark_internals.checkpoint_root(query), workspace.settings)
    committed = last_committed(checkpoint)
    return None if committed is None else committed[1].get(stream) or None
