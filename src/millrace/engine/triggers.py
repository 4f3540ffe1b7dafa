"""When a streaming query runs its micro-batches: the trigger an app is started with.

Four triggers, written as `--trigger` takes them:

- `micro-batch` (the default): the next micro-batch starts as soon as the last one ended, if
  there is new input.
- `interval:10s`: a micro-batch starts every interval (a batch that takes longer delays the
  next one), which bounds the cost per record for a trickle of input.
- `available-now`: process what the inputs hold at the start, in as many micro-batches as
  the caps allow, then stop: the Structured Streaming paper's run-once mode, for an app
  started from cron that keeps its state and offsets between runs.
- `real-time` or `real-time:5m`: Spark's real-time mode, where long-running tasks process
  each record as it comes and the duration sets how often it checkpoints. Spark runs it for
  stateless queries writing straight to Kafka, in update mode; a query that writes through
  `foreachBatch` (result tables, processors) cannot use it.

Between micro-batches, a query whose inputs had nothing new asks them again after
`spark.poll_delay`; `millrace.engine.session.poll_less_when_idle` makes a query that has been
quiet for 10 s and holds no state ask after `spark.idle_poll_delay` instead, until its next
micro-batch. `records_cap` bounds what one micro-batch reads, so that a burst or a backlog is
read in micro-batches of bounded time and memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from millrace.config.durations import parse_duration_ms
from millrace.config.settings import Settings
from millrace.errors import ConfigError, EngineError

if TYPE_CHECKING:
    from pyspark.sql.streaming.readwriter import DataStreamWriter

TriggerKind = Literal["micro-batch", "interval", "available-now", "real-time"]
_DEFAULT_REAL_TIME = "5m"


@dataclass(frozen=True)
class Trigger:
    """A query trigger: its kind, and for `interval` and `real-time` a duration text.

    Example:
        >>> Trigger.parse("interval:10s")
        Trigger(kind='interval', duration='10s')
        >>> str(Trigger.parse("available-now"))
        'available-now'
    """

    kind: TriggerKind = "micro-batch"
    duration: str | None = None

    @classmethod
    def parse(cls, text: str) -> Trigger:
        """The trigger `text` names; `ConfigError` for one that is not known."""
        kind, _, duration = text.strip().lower().partition(":")
        if kind in ("micro-batch", "continuous", "default") and not duration:
            return cls()
        if kind == "available-now" and not duration:
            return cls("available-now")
        if kind == "interval" and duration:
            parse_duration_ms(duration, what="trigger interval")
            return cls("interval", duration)
        if kind == "real-time":
            duration = duration or _DEFAULT_REAL_TIME
            parse_duration_ms(duration, what="real-time checkpoint interval")
            return cls("real-time", duration)
        raise ConfigError(
            f"unknown trigger {text!r}",
            hint="use micro-batch (the default), interval:10s, available-now, or real-time[:5m]",
        )

    def __str__(self) -> str:
        return self.kind if self.duration is None else f"{self.kind}:{self.duration}"

    def check(self, query: str, *, foreach_batch: bool) -> None:
        """Raise `EngineError` when query `query` cannot run with this trigger.

        `foreach_batch` says whether the query writes through `foreachBatch`, which Spark's
        real-time mode does not run.
        """
        if self.kind == "real-time" and foreach_batch:
            raise EngineError(
                f"query {query!r} cannot run in Spark's real-time mode: it writes each "
                "micro-batch through foreachBatch (a result table or a processor's outputs), "
                "which real-time mode does not support",
                hint="run it with --trigger micro-batch or interval:DURATION; real-time mode "
                "runs stateless INSERT INTO STREAM apps",
            )

    def apply(
        self, writer: DataStreamWriter, query: str, *, foreach_batch: bool
    ) -> DataStreamWriter:
        """`writer` set to run with this trigger; `query` names it in errors (see `check`)."""
        self.check(query, foreach_batch=foreach_batch)
        if self.kind == "micro-batch":
            return writer
        if self.kind == "available-now":
            return writer.trigger(availableNow=True)
        milliseconds = f"{parse_duration_ms(self.duration or '0s')} milliseconds"
        if self.kind == "interval":
            return writer.trigger(processingTime=milliseconds)
        # Real-time mode runs in update mode only; a stateless query's rows are the same in it.
        # PySpark 4.2's overloads of trigger() leave out realTime, which its implementation takes.
        real_time: DataStreamWriter = writer.outputMode("update").trigger(realTime=milliseconds)  # type: ignore[call-overload]
        return real_time


def records_cap(settings: Settings, own: int | None, trigger: Trigger | None) -> int | None:
    """The records one micro-batch reads at most from one input; None for no limit.

    `own` is the app's own cap, when it sets one; otherwise the `spark.max_records_per_batch`
    setting (0 for no limit), except in real-time mode, whose long-running tasks read each
    record as it comes and which Spark refuses to run with a cap.

    Example:
        >>> settings = Settings(spark_max_records_per_batch=500_000)
        >>> records_cap(settings, None, None), records_cap(settings, 1_000, None)
        (500000, 1000)
        >>> records_cap(settings, None, Trigger.parse("real-time")) is None
        True
    """
    if own is not None:
        return own
    if trigger is not None and trigger.kind == "real-time":
        return None
    return settings.spark_max_records_per_batch or None
