"""An app's output watermark, published to the streams it writes as watermark markers.

MillWheel's low watermark is a property of the whole pipeline (section 5.4 of its paper): a
computation's watermark is the least of its own oldest pending work and the watermarks of the
computations that feed it. A millrace app writing a stream therefore tells the stream's
readers how far it has come: `OutputWatermark` follows the app's queries from the driver and,
after a micro-batch that moved the app's watermark, publishes to each bucket of each stream
the app writes a marker (`millrace.bus.markers`) promising that nothing more it writes there
is dated at or before W:

    W = min(watermark of the queries writing the stream, the app's held-back time) - 1 ms

A query's watermark is the one its last micro-batch ran with (Spark's progress): what that
micro-batch and every later one writes is later than it. A SQL insert writes records that
came after the watermark; a result table emits windows that the watermark had not closed,
dated their last millisecond, which is not before the watermark; a processor's productions
are held back by its pending event-time timers, since a timer fires when the watermark
passes it and produces at the timer's time.

A reader of the stream takes the markers as the bucket's progress instead of the records'
own times (`millrace.engine.low_watermark.low_watermarked`), so it needs no lateness for
the order in which one of the writer's micro-batches leaves its records. When the source of a
chain goes quiet, its idle ticks move the first app's watermark on; its markers move the next
app's, and so on down the chain.

Markers are published once the micro-batch they follow is committed, so they come after every
record of that micro-batch in each bucket; a micro-batch run again after a crash writes the
same records, all later than the markers before it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping
from datetime import datetime

from pyspark.sql.streaming.listener import StreamingQueryProgress
from pyspark.sql.streaming.query import StreamingQuery

from millrace.bus.markers import MarkerWriter
from millrace.bus.streams import require_stream
from millrace.config.workspace import Workspace
from millrace.engine.low_watermark import TICK_EVERY_S
from millrace.engine.progress import last_progress

_log = logging.getLogger(__name__)


class OutputWatermark:
    """Publishes app `app`'s output watermark to the streams its queries write (see the module).

    `outputs` maps each of the app's queries to the streams it writes; the caller may add
    streams to a query's collection while the app runs. `held_back` gives the time the app's
    output is held back to (epoch ms), such as its earliest pending event-time timer, or None.
    Runs on a thread of its own until `close`, which publishes once more, for the last
    micro-batches of queries that have stopped. The queries' session must be watched
    (`millrace.engine.progress.watch`) from before they started.
    """

    def __init__(
        self,
        workspace: Workspace,
        app: str,
        outputs: Mapping[StreamingQuery, Collection[str]],
        *,
        held_back: Callable[[], int | None] = lambda: None,
        every_s: float = TICK_EVERY_S,
    ) -> None:
        self.workspace = workspace
        self.app = app
        self.outputs = outputs
        self.published: dict[str, int] = {}
        """The last watermark published to each stream (epoch ms)."""
        self._held_back = held_back
        self._every_s = every_s
        self._buckets: dict[str, int] = {}
        self._writer = MarkerWriter(workspace.settings, app)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"markers-{app}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Publish what the queries' last micro-batches promise, then stop publishing."""
        self._closed.set()
        self._thread.join(timeout=10)
        try:
            self.publish()
        except Exception:
            _log.exception("publishing the output watermark of %s failed", self.app)
        finally:
            self._writer.close()

    def _run(self) -> None:
        while not self._closed.wait(self._every_s):
            try:
                self.publish()
            except Exception:
                # The next round publishes again; a late marker only delays the readers.
                _log.exception("publishing the output watermark of %s failed", self.app)

    def publish(self) -> dict[str, int]:
        """Publish the markers due now; the watermark published, by stream."""
        promised = self._promised()
        published = {}
        for stream, watermark_ms in sorted(promised.items()):
            if watermark_ms <= self.published.get(stream, 0):
                continue
            if stream not in self._buckets:
                self._buckets[stream] = require_stream(self.workspace.settings, stream)
            if self._writer.write(stream, self._buckets[stream], watermark_ms):
                self.published[stream] = published[stream] = watermark_ms
        return published

    def _promised(self) -> dict[str, int]:
        """What the app can promise each stream now.

        A stream one of whose queries has no watermark yet is left out.
        """
        least: dict[str, int | None] = {}
        for query, streams in list(self.outputs.items()):
            watermark_ms = _watermark_ms(last_progress(query))
            for stream in list(streams):
                known = least.get(stream, watermark_ms)
                least[stream] = (
                    None if known is None or watermark_ms is None else min(known, watermark_ms)
                )
        held_back = self._held_back()
        return {
            stream: (watermark_ms if held_back is None else min(watermark_ms, held_back)) - 1
            for stream, watermark_ms in least.items()
            if watermark_ms is not None
        }


def _watermark_ms(progress: StreamingQueryProgress | None) -> int | None:
    """The watermark a query's progress reports (epoch ms); None before it has one."""
    if progress is None:
        return None
    text = (progress.eventTime or {}).get("watermark")
    if not text:
        return None
    watermark_ms = int(datetime.fromisoformat(text).timestamp() * 1000)
    return watermark_ms if watermark_ms > 0 else None
