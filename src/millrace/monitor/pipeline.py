"""The pipeline the apps form: who writes each stream, and how far each stage trails its sources.

An app that writes a stream publishes watermark markers to each bucket of it, naming itself
(`millrace.bus.markers`). `StreamWriters` looks at the markers at the end of every stream
(`millrace.bus.internal.latest_markers`: a bounded look, at what was appended since the last
one) and keeps the newest watermark each writer published to each stream. From them:

- an app's **output watermark** is the least, over the streams it writes, of the newest
  watermark it published there: nothing more it writes is dated at or before it;
- an app's **upstream** apps are the writers of its input streams, and its **sources** the
  apps reached by going upstream until an app whose inputs no millrace app writes; an app
  with no upstream app is a source itself;
- its **watermark behind source** is the least watermark of its sources minus its own, in
  seconds (0 for a source): how much later than its sources the stage closes its windows.
  A stage's watermark is the one its queries run with (`AppStatus.watermark_ms`); for a
  writer the monitor has no recent batch of, its output watermark stands in.

Example:
    >>> from millrace.monitor.status import InputWatermark
    >>> filter_ = AppStatus("filter", [], [], "idle", watermark_ms=60_001)
    >>> counter = AppStatus("counter", [], [], "idle", watermark_ms=50_001,
    ...                     watermarks=[InputWatermark("clean", {}, None, 0)])
    >>> chain = with_pipeline([filter_, counter], {"clean": {"filter": 60_000}})
    >>> [(s.name, s.sources, s.watermark_behind_source_seconds) for s in chain]
    [('filter', ['filter'], 0.0), ('counter', ['filter'], 10.0)]
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace

from millrace.bus.internal import latest_markers
from millrace.config.settings import Settings
from millrace.monitor.status import AppStatus


class StreamWriters:
    """The newest watermark each app published to each stream, kept up across looks."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._published: dict[str, dict[str, int]] = {}
        self._read_to: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def refresh(self) -> dict[str, dict[str, int]]:
        """Look at what was appended since the last look; `{stream: {writer: watermark_ms}}`."""
        with self._lock:
            found, self._read_to = latest_markers(self.settings, self._read_to)
            for stream, writers in found.items():
                # The newest look wins: an app started again from scratch promises less.
                self._published.setdefault(stream, {}).update(writers)
            return {stream: dict(writers) for stream, writers in self._published.items()}


def with_pipeline(
    statuses: list[AppStatus], published: Mapping[str, Mapping[str, int]]
) -> list[AppStatus]:
    """`statuses` with each app's output watermark, sources and watermark behind its sources.

    `published` is `{stream: {writer: watermark_ms}}`, as `StreamWriters.refresh` gives it.
    """
    outputs: dict[str, dict[str, int]] = {}
    writers: dict[str, set[str]] = {}
    for stream, by_writer in published.items():
        for app, published_ms in by_writer.items():
            outputs.setdefault(app, {})[stream] = published_ms
            writers.setdefault(stream, set()).add(app)
    known = {status.name: status for status in statuses}

    def upstream(app: str) -> set[str]:
        status = known.get(app)
        if status is None:
            return set()
        streams = {lag.stream for lag in status.inputs} | {w.stream for w in status.watermarks}
        return {writer for stream in streams for writer in writers.get(stream, ())} - {app}

    def watermark_ms(app: str) -> int | None:
        status = known.get(app)
        if status is not None and status.watermark_ms is not None:
            return status.watermark_ms
        return min(outputs[app].values()) if app in outputs else None

    result = []
    for status in statuses:
        sources = _sources(status.name, upstream)
        source_watermarks = [watermark_ms(source) for source in sources]
        own = watermark_ms(status.name)
        behind: float | None
        if sources == [status.name]:
            behind = 0.0
        elif not sources or own is None or None in source_watermarks:
            behind = None
        else:
            least = min(ms for ms in source_watermarks if ms is not None)
            behind = max(0.0, (least - own) / 1000)
        written = outputs.get(status.name)
        result.append(
            replace(
                status,
                output_watermark_ms=min(written.values()) if written else None,
                sources=sources,
                watermark_behind_source_seconds=behind,
            )
        )
    return result


def _sources(app: str, upstream: Callable[[str], set[str]]) -> list[str]:
    """The apps upstream of `app` (or `app` itself) that have no upstream app, sorted.

    Empty for an app whose upstream apps all feed each other in a cycle.
    """
    seen = {app}
    reach = [app]
    sources: set[str] = set()
    while reach:
        current = reach.pop()
        above = upstream(current)
        if not above:
            sources.add(current)
        for writer in above - seen:
            seen.add(writer)
            reach.append(writer)
    return sorted(sources)
