"""Spark's private API, behind one adapter: every use millrace makes of what PySpark keeps private.

PySpark 4.2 offers no public way to do what these functions do; each says why it is needed,
so that an upgrade of PySpark is checked against this file alone. Nothing else in millrace
touches a private name of PySpark or Py4J.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Iterator, Sequence
from itertools import groupby, pairwise
from operator import itemgetter
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyspark
from py4j.java_gateway import JavaObject
from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import ensure_callback_server_started, launch_gateway
from pyspark.sql.conversion import ArrowBatchTransformer
from pyspark.sql.pandas.serializers import (
    ArrowStreamPandasSerializer,
    TransformWithStateInPandasSerializer,
)
from pyspark.sql.streaming.listener import (
    JStreamingQueryListener,
    QueryProgressEvent,
    StreamingQueryProgress,
)
from pyspark.sql.streaming.stateful_processor_util import TransformWithStateInPandasFuncMode

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.listener import StreamingQueryListener
    from pyspark.sql.streaming.query import StreamingQuery


def start_jvm(conf: SparkConf, *, stderr: int | None = None) -> None:
    """Start this process's Spark JVM with `conf`, before any SparkContext, once.

    PySpark starts the JVM (spark-submit with the conf) inside the first SparkContext, through
    `SparkContext._ensure_initialized`; calling it first lets millrace act on the JVM (make it
    deaf to SIGTERM) before Spark starts inside it, and give it `stderr` (a file descriptor)
    as its stderr. Under PySpark's lock, so that two threads starting it start one JVM.
    """
    with SparkContext._lock:
        if SparkContext._gateway is None:
            popen = {} if stderr is None else {"stderr": stderr}
            gateway = launch_gateway(conf, popen_kwargs=popen)  # type: ignore[no-untyped-call]
            SparkContext._ensure_initialized(gateway=gateway, conf=conf)


def jvm_started() -> bool:
    """Whether this process's Spark JVM runs (PySpark keeps it in `SparkContext._gateway`)."""
    return SparkContext._gateway is not None


def ignore_sigterm_in_jvm() -> None:
    """Make the running Spark JVM ignore SIGTERM (its shutdown hook would stop Spark).

    The JVM is reached through `SparkContext._jvm`, PySpark's private handle on it: no public
    API reaches `sun.misc.Signal`.
    """
    jvm = SparkContext._jvm
    if jvm is None:
        raise RuntimeError("the Spark JVM is not running: start it with start_jvm first")
    signals = jvm.sun.misc
    signals.Signal.handle(signals.Signal("TERM"), signals.SignalHandler.SIG_IGN)


def stop_jvm() -> None:
    """End this process's Spark JVM and wait for it to exit; the next session starts a new one.

    PySpark keeps the JVM's process in `SparkContext._gateway` for the life of the Python
    process, even after `SparkSession.stop()`; the JVM exits once the pipe on its stdin
    closes, and PySpark starts a new one only when `_gateway` and `_jvm` are unset.
    """
    gateway = SparkContext._gateway
    if gateway is None:
        return
    gateway.proc.stdin.close()
    gateway.proc.wait()
    SparkContext._gateway = None
    SparkContext._jvm = None


def jvm_exit_status(wait_s: float = 0.0) -> int | None:
    """The exit status of this process's Spark JVM once it has ended, within `wait_s`.

    None while it runs, or when none was started; negative, the signal that killed it. A
    JVM that ends under a running driver (out of memory, a fatal error in a task, killed)
    shows first as connection errors of PySpark's calls into it; its process, kept by
    PySpark's private `_gateway`, tells that it ended and how.
    """
    gateway = SparkContext._gateway
    if gateway is None:
        return None
    try:
        status: int = gateway.proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        return None
    return status


def driver_pid(spark: SparkSession) -> int:
    """The process id of the JVM of `spark`'s driver (PySpark's private `_gateway`)."""
    gateway = spark.sparkContext._gateway
    if gateway is None:
        raise RuntimeError("the SparkSession has no JVM gateway")
    return int(gateway.proc.pid)


def set_hadoop_option(spark: SparkSession, key: str, value: str) -> None:
    """Set `key` in the running driver's Hadoop configuration, which tasks are sent with.

    Set there rather than in the Spark configuration, a value (an S3 key) stays off the
    command line PySpark starts the JVM with; the Hadoop configuration is reached only
    through the private `_jsc`.
    """
    spark.sparkContext._jsc.hadoopConfiguration().set(key, value)


def count_app_cpu(spark: SparkSession) -> None:
    """Count from now on the CPU of each scheduler pool's tasks in the JVM, once per JVM.

    millrace's own `dev.millrace.spark.AppCpu` (jvm/spark-extensions) listens to the
    SparkContext, which is reached through the private `_jvm` and `_jsc`.
    """
    spark.sparkContext._jvm.dev.millrace.spark.AppCpu.install(spark.sparkContext._jsc.sc())  # type: ignore[union-attr]


def app_cpu_s(spark: SparkSession, app: str) -> float:
    """The CPU seconds app `app` of a host used so far in its JVM (`AppCpu.cpuNanos`).

    Its scheduler pool's tasks, and its queries' micro-batch threads, through the private
    `_jvm`.
    """
    counted = spark.sparkContext._jvm.dev.millrace.spark.AppCpu  # type: ignore[union-attr]
    return int(counted.cpuNanos(app)) / 1e9


def attach_json_listener(spark: SparkSession, listener: StreamingQueryListener) -> None:
    """Attach `listener` so that it gets each progress event read from the event's JSON text.

    PySpark's own listener bridge copies the event field by field, a call into the JVM per
    field, state operator and metric: about 120 ms per event of a SQL app's query, measured
    on 2026-11-25, against 1 ms from the JSON. `addListener` registers whatever the listener's
    private `_jlistenerobj` holds, so this sets it to the JVM's own wrapper around a bridge
    that reads the JSON.
    """
    gateway = spark.sparkContext._gateway
    if gateway is None:
        raise RuntimeError("the SparkSession has no JVM gateway")
    # PySpark's java_gateway module has no annotations.
    ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
    streaming = gateway.jvm.org.apache.spark.sql.streaming
    listener._jlistenerobj = streaming.PythonStreamingQueryListenerWrapper(
        JsonProgressBridge(listener)
    )
    spark.streams.addListener(listener)


def add_idle_polling(spark: SparkSession, idle_delay_ms: int) -> None:
    """Attach millrace's JVM listener `IdlePolling` to `spark`'s streaming queries.

    It sets a running query's polling delay, which Spark reads once when the query starts:
    the listener is made in the JVM, through the private `_jvm`, with the session's query
    manager from the private `_jsparkSession`, which PySpark does not expose.
    """
    jvm = spark.sparkContext._jvm
    if jvm is None:
        raise RuntimeError("the Spark JVM is not running")
    queries = spark._jsparkSession.streams()
    queries.addListener(jvm.dev.millrace.spark.IdlePolling(queries, idle_delay_ms))


def polling_delay_ms(query: StreamingQuery) -> int:
    """The polling delay `query` runs with now (for tests and diagnostics).

    PySpark does not expose it; the JVM query behind the private `_jsq` holds it.
    """
    return int(query._jsq.streamingQuery().pollingDelayMs())


def session_uuid(spark: SparkSession) -> str:
    """The id of the JVM session behind `spark`, the same whichever Python object wraps it.

    PySpark's `getActiveSession` wraps the JVM's session in a new Python object at each call;
    the JVM session behind the private `_jsparkSession` has an id of its own.
    """
    return str(spark._jsparkSession.sessionUUID())


def checkpoint_root(query: StreamingQuery) -> str:
    """The checkpoint folder of `query`, as Spark resolved it (a URI or a path).

    PySpark does not expose it; the JVM query behind the private `_jsq` does.
    """
    return str(query._jsq.streamingQuery().resolvedCheckpointRoot())


def query_trigger(query: StreamingQuery) -> str:
    """The trigger `query` runs with, as the JVM describes it (for tests and diagnostics).

    PySpark does not expose a started query's trigger; the JVM query behind `_jsq` does.
    """
    return str(query._jsq.streamingQuery().trigger())


class JsonProgressBridge(JStreamingQueryListener):
    """Hands a Python listener Spark's events, each progress event read from its JSON."""

    def onQueryProgress(self, jevent: JavaObject) -> None:  # noqa: N802 - Spark's callback names
        """Hand the listener the event's progress, read from its JSON in one call."""
        progress = json.loads(jevent.progress().json())
        # Spark leaves a rate out of the JSON when it is NaN or infinite (no time measured),
        # and PySpark's reader of a source's progress requires it.
        for source in progress.get("sources", []):
            for rate in ("inputRowsPerSecond", "processedRowsPerSecond"):
                source.setdefault(rate, math.nan)
        self.pylistener.onQueryProgress(
            QueryProgressEvent(StreamingQueryProgress.fromJson(progress))
        )


def group_rows_by_slices() -> None:
    """Make this Python worker hand `transformWithStateInPandas` each group as slices of frames.

    PySpark 4.2's `TransformWithStateInPandasSerializer.load_stream` converts each Arrow batch
    to pandas, then walks it row by row (`itertuples`) to find where each grouping key's rows
    start, and builds each group's frame again from those row tuples (`pd.DataFrame(rows)`):
    two Python passes per row, a fifth of a processor's Python worker CPU in
    `benchmarks/processors.py` (2026-12-07). This replaces the method, on the class, with
    `_load_stream_by_slices`, which finds the boundaries with numpy and yields slices of the
    converted frame: the same groups, rows, columns and types in the same order, in chunks no
    larger; a group that goes on in the next Arrow batch comes as one chunk more. Called in
    the worker when it unpickles a processor's operator, before it reads a row. Only for the
    PySpark whose method it was written against: another keeps PySpark's own.
    """
    if pyspark.__version__ == _WRITTEN_AGAINST:
        TransformWithStateInPandasSerializer.load_stream = _load_stream_by_slices  # type: ignore[method-assign]


def pyspark_load_stream() -> Any:  # Any: PySpark's own method, unannotated
    """PySpark's own `TransformWithStateInPandasSerializer.load_stream` (for the tests)."""
    return _PYSPARK_LOAD_STREAM


_PYSPARK_LOAD_STREAM = TransformWithStateInPandasSerializer.load_stream
# The method's code as of PySpark 4.2.0, whose items _load_stream_by_slices gives.
_WRITTEN_AGAINST = "4.2.0"


def _load_stream_by_slices(
    self: TransformWithStateInPandasSerializer, stream: IO[bytes]
) -> Iterator[tuple[Any, Any, Any]]:  # Any: PySpark's modes, keys and chunk iterators
    batches = super(ArrowStreamPandasSerializer, self).load_stream(stream)

    def chunks() -> Iterator[tuple[tuple[object, ...], pd.DataFrame]]:
        for batch in batches:
            self._update_batch_size_stats(batch)  # type: ignore[no-untyped-call]
            frame = pd.concat(
                ArrowBatchTransformer.to_pandas(
                    batch,
                    timezone=self._timezone,
                    schema=self._input_type,
                    struct_in_pandas=self._struct_in_pandas,
                    ndarray_as_list=self._ndarray_as_list,
                    prefer_int_ext_dtype=self._prefer_int_ext_dtype,
                    df_for_struct=self._df_for_struct,
                ),
                axis=1,
            )
            # The worker sets the grouping key's offsets before it reads the stream.
            yield from _group_slices(frame, self.key_offsets or [], _chunk_rows(self))

    for key, group in groupby(chunks(), key=itemgetter(0)):
        yield (TransformWithStateInPandasFuncMode.PROCESS_DATA, key, group)
    yield (TransformWithStateInPandasFuncMode.PROCESS_TIMER, None, None)
    yield (TransformWithStateInPandasFuncMode.COMPLETE, None, None)


def _chunk_rows(serializer: TransformWithStateInPandasSerializer) -> int:
    """The rows of a chunk: PySpark cuts a group at its record cap or its byte cap."""
    rows = serializer.arrow_max_records_per_batch
    if serializer.average_arrow_row_size > 0:
        by_bytes = math.ceil(
            serializer.arrow_max_bytes_per_batch / serializer.average_arrow_row_size
        )
        rows = min(rows, max(1, by_bytes))
    return int(rows)


def _group_slices(
    frame: pd.DataFrame, key_offsets: Sequence[int], chunk_rows: int
) -> Iterator[tuple[tuple[object, ...], pd.DataFrame]]:
    """Each run of equal grouping keys of `frame`, as (key, slice), cut every `chunk_rows`."""
    if frame.empty:
        return
    key_columns = [frame.iloc[:, offset].to_numpy() for offset in key_offsets]
    changes = np.zeros(len(frame) - 1, dtype=bool)
    for column in key_columns:
        changes |= column[1:] != column[:-1]
    starts = [0, *(np.flatnonzero(changes) + 1).tolist(), len(frame)]
    for start, end in pairwise(starts):
        key = tuple(_python_value(column[start]) for column in key_columns)
        for chunk_start in range(start, end, chunk_rows):
            yield key, frame.iloc[chunk_start : min(end, chunk_start + chunk_rows)]


def _python_value(value: object) -> object:
    # itertuples, which PySpark's method reads keys with, gives Python's ints, not numpy's.
    return value.item() if isinstance(value, np.generic) else value
