"""The lines an app's run prints: one per micro-batch of each query, and totals when it stops.

`millrace run` prints them to the terminal, a deployed app's process to its log (where `ps`
reads its input rate), an archive job to its terminal.

Each query's micro-batches are read from its recent progress as the session's listener
(`millrace.engine.progress.watch`, which the session must run) got it, the last 100, not only
its last, so that a look every few seconds prints every batch finished since the one before.
A line accounts for the records the batch read: those written (by a query that writes a
stream), dead-lettered, dropped as late and dropped as copies of records already processed;
it shows the watermark, for an input of several buckets the bucket holding its watermark back
(`engine.metrics.InputProgress`, as `millrace ps --json` shows it), and the records the batch
left waiting, when it read less than there was (a capped batch, while the app catches up).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql.streaming.query import StreamingQuery

from millrace.bus.internal import is_internal_stream
from millrace.bus.streams import dead_letter_stream
from millrace.engine.checkpoint_log import records_waiting
from millrace.engine.metrics import InputProgress, InputRecord, MetricsRecord, metrics_record
from millrace.engine.progress import recent_progress


def count(number: int, noun: str) -> str:
    """`number` and `noun`, plural but for 1.

    Example:
        >>> count(2, "micro-batch"), count(1, "record")
        ('2 micro-batches', '1 record')
    """
    plural = noun + ("es" if noun.endswith("ch") else "s")
    return f"{number} {noun if number == 1 else plural}"


@dataclass(frozen=True)
class RoutedInput:
    """The bad records of one input of a SQL app, routed to its stream's dead-letter stream."""

    input: str
    stream: str
    records: int

    def line(self) -> str:
        """What a run prints of it.

        Example:
            >>> RoutedInput("events", "clicks", 2).line()
            'input events: 2 bad records routed to clicks.dlq'
        """
        return (
            f"input {self.input}: {count(self.records, 'bad record')} "
            f"routed to {dead_letter_stream(self.stream)}"
        )


@dataclass
class QueryTotals:
    """What one query's micro-batches of this run read and did with it, added up."""

    batches: int = 0
    read: int = 0
    written: int | None = None
    """Records written to the query's stream; None for a query whose sink does not count."""
    dead_lettered: int = 0
    late: int = 0
    duplicates: int = 0

    def summary(self, query: str) -> str:
        """The line `millrace run` prints for the query when it stops.

        Example:
            >>> QueryTotals(2, 10, 7, 1, 1, 1).summary("a.insert.out")[:48]
            'a.insert.out: 2 micro-batches read 10 records: 7'
        """
        return (
            f"{query}: {count(self.batches, 'micro-batch')} read {count(self.read, 'record')}: "
            + (_fates(self.written, self.dead_lettered, self.late, self.duplicates))
        )


class ProgressLines:
    """Turns the micro-batches of an app's queries into lines, each batch once, in order."""

    def __init__(self, app: str) -> None:
        self.app = app
        self.totals: dict[str, QueryTotals] = {}
        """Each query's totals over the batches printed, by query name."""
        self._printed: dict[str, int] = {}
        self._inputs = InputProgress()

    def new_batches(self, query: StreamingQuery, *, stopped: bool = False) -> list[str]:
        """The lines of `query`'s micro-batches finished since the last call, oldest first.

        With `stopped`, said of a query that has stopped, they are all it ran.
        """
        lines = []
        for progress in recent_progress(query, stopped=stopped):
            name = progress.name or ""
            if progress.batchId <= self._printed.get(name, -1):
                continue
            record = metrics_record(progress, {self.app})
            if record is None:
                continue
            self._printed[name] = progress.batchId
            self._inputs.follow(record)
            lines.append(self._line(record, progress.sink.numOutputRows))
        return lines

    def say_new(
        self,
        queries: Iterable[StreamingQuery],
        say: Callable[[str], None],
        *,
        stopped: bool = False,
    ) -> bool:
        """Say the line of each micro-batch the queries finished since the last look.

        Returns whether any had. With `stopped`, said once the queries have stopped, it says
        all that they ran.
        """
        said = False
        for query in queries:
            for line in self.new_batches(query, stopped=stopped):
                say(line)
                said = True
        return said

    def _line(self, record: MetricsRecord, written: int) -> str:
        totals = self.totals.setdefault(record["query"], QueryTotals())
        read = sum(
            source["input_rows"]
            for source in record["sources"]
            if not any(is_internal_stream(stream) for stream in source["end_offsets"])
        )
        known_written = written if written >= 0 else None
        totals.batches += 1
        totals.read += read
        if known_written is not None:
            totals.written = (totals.written or 0) + known_written
        totals.dead_lettered += record["dead_letter_rows"]
        totals.late += record["late_rows"]
        totals.duplicates += record["duplicate_rows"]
        line = (
            f"{record['query']}: batch {record['batch_id']}, {count(read, 'record')} read "
            f"({record['processed_rows_per_second']:.0f}/s): "
            + _fates(
                known_written,
                record["dead_letter_rows"],
                record["late_rows"],
                record["duplicate_rows"],
            )
            + f"; watermark {record['watermark'] or '-'}"
        )
        ahead = sum(read["future_dated"] for read in record["inputs"].values())
        if ahead:
            line += f"; {count(ahead, 'record')} dated ahead (dead-lettered)"
        # A batch capped at max_records_per_batch leaves records for the next ones.
        waiting = records_waiting(record["sources"])
        if waiting:
            line += f"; catching up: {count(waiting, 'record')} waiting"
        return line + "".join(
            f"; {held}"
            for stream, read in record["inputs"].items()
            if (held := _held(stream, read, record))
        )


def _held(stream: str, read: InputRecord, record: MetricsRecord) -> str | None:
    """`clicks held back by bucket 3 at 12:00:05`, for an input read from several buckets."""
    buckets = {
        bucket
        for source in record["sources"]
        for bucket in (source["end_offsets"] or {}).get(stream, {})
    } | set(read["progress_ms"])
    holder = read["held_back_by"]
    if holder is None or len(buckets) < 2:
        return None
    time_ms = read["progress_ms"].get(holder)
    if time_ms is None:
        return f"{stream} held back by bucket {holder}, not read yet"
    moment = datetime.fromtimestamp(time_ms / 1000, UTC).strftime("%H:%M:%S")
    return f"{stream} held back by bucket {holder} at {moment}"


def _fates(written: int | None, dead_lettered: int, late: int, duplicates: int) -> str:
    parts = [] if written is None else [f"{written} written"]
    parts += [
        f"{dead_lettered} dead-lettered",
        f"{late} late",
        f"{count(duplicates, 'duplicate')} dropped",
    ]
    return ", ".join(parts)
