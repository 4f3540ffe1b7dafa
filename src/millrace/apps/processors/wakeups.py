"""Processing-time timers on Spark: waking a processor's bucket when the wall clock reaches them.

Spark's `transformWithState` takes one time mode per operator, and a processor's runs in event
time (`millrace.apps.processors.streaming`). Its processing-time timers are therefore
millrace's own: they live with the event-time ones in each key's stored state, indexed per bucket
(`millrace.apps.processors.bucket_store`), and fire when their bucket runs in a micro-batch whose
processing time (Spark's batch timestamp, kept in the checkpoint's offset log, so a micro-batch
run again after a crash has the same) has reached them. In event time Spark runs no
micro-batch while no record comes and the watermark stands still, so this module makes the
bucket run:

- every micro-batch that runs a bucket with processing-time timers (before or after it)
  reports the bucket's earliest one to the driver, in a `clock` row of the operator's output
  that the query's foreachBatch hands to `ProcessorClock.report`;
- `ProcessorClock`, a thread of the driver, waits until the wall clock reaches the earliest
  reported time, then publishes a wake-up for the bucket to the app's internal stream
  (`clock_stream`);
- the app reads that stream as one more Kafka source (`read_wakeups`): a wake-up goes to its
  bucket like a record, is not one, and makes Spark run a micro-batch, with the bucket in it.

A wake-up is sent once per reported time; a bucket that a wake-up ran reports again, so a
timer that was not yet due in that micro-batch (a batch timestamp taken before the wake-up
was published) gets another. The driver's table of reported times is not kept: a clock
starts by waking every bucket once, so the timers of a restarted app (kept in the
checkpoint with their keys' state) are reported again by its first micro-batches.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

from millrace.bus.internal import InternalWriter
from millrace.config.workspace import Workspace
from millrace.engine.low_watermark import read_control_stream

_RETRY_S = 1.0
_WAKEUP_RETENTION_MS = 86_400_000
_log = logging.getLogger(__name__)


def clock_stream(app: str) -> str:
    """The internal stream that wakes app `app`'s buckets for their processing-time timers.

    Example:
        >>> clock_stream("Sessions")
        '_millrace.clock.sessions'
    """
    return f"_millrace.clock.{app.lower()}"


def read_wakeups(spark: SparkSession, workspace: Workspace, app: str) -> DataFrame:
    """The wake-ups of app `app`'s buckets, as a streaming DataFrame of `bucket`, from now on."""
    raw = read_control_stream(
        spark, workspace, clock_stream(app), retention_ms=_WAKEUP_RETENTION_MS
    )
    bucket = F.from_json(F.col("value").cast("string"), "bucket INT").getField("bucket")
    return raw.select(bucket.alias("bucket")).where(F.col("bucket").isNotNull())


class ProcessorClock:
    """Wakes the buckets of app `app` when the wall clock reaches their reported timers.

    Runs on a thread of its own until `close`; it first wakes each of the `buckets` once.
    """

    def __init__(self, workspace: Workspace, app: str, *, buckets: int) -> None:
        self.workspace = workspace
        self.app = app
        self.woken = 0
        """Wake-ups published since the start."""
        # Until a bucket reports, it may hold a due timer from before a restart.
        self._due: dict[int, int] = dict.fromkeys(range(buckets), 0)
        self._sent: set[int] = set()
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._closed = threading.Event()
        self._writer: InternalWriter | None = None
        self._thread = threading.Thread(target=self._run, name=f"clock-{app}", daemon=True)
        self._thread.start()

    def report(self, earliest: Mapping[int, int | None]) -> None:
        """Take each bucket's earliest processing-time timer (None: it has none left)."""
        with self._lock:
            for bucket, time_ms in earliest.items():
                self._sent.discard(bucket)
                if time_ms is None:
                    self._due.pop(bucket, None)
                else:
                    self._due[bucket] = time_ms
        self._changed.set()

    def close(self) -> None:
        """Stop waking buckets."""
        self._closed.set()
        self._changed.set()
        self._thread.join(timeout=10)
        if self._writer is not None:
            self._writer.close()

    def _run(self) -> None:
        while not self._closed.is_set():
            self._changed.clear()
            try:
                wait_s = self._wake(_now_ms())
            except Exception:
                _log.exception("waking the buckets of %s failed", self.app)
                wait_s = _RETRY_S
            self._changed.wait(wait_s)

    def _wake(self, now_ms: int) -> float | None:
        """Publish the wake-ups due at `now_ms`; how long to wait for the next (None: none)."""
        with self._lock:
            waiting = {b: t for b, t in self._due.items() if b not in self._sent}
        due = sorted(bucket for bucket, time_ms in waiting.items() if time_ms <= now_ms)
        if due:
            if self._writer is None:
                self._writer = InternalWriter(self.workspace.settings, clock_stream(self.app))
            if self._writer.write([json.dumps({"bucket": b}).encode() for b in due]) is None:
                return _RETRY_S
            with self._lock:
                # A report that came meanwhile holds; it clears its bucket's mark again.
                self._sent.update(b for b in due if self._due.get(b) == waiting[b])
            self.woken += len(due)
        later = [time_ms for time_ms in waiting.values() if time_ms > now_ms]
        return (min(later) - now_ms) / 1000 if later else None


def _now_ms() -> int:
    return int(time.time() * 1000)
