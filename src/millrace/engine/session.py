"""The SparkSession: the one place that knows Spark's configuration.

`spark_session` builds (once per process) a session with the master from the settings, the
Kafka connector and Delta jars on the classpath, RocksDB state with changelog checkpoints,
UTC time, quiet logs (a query stopped mid-batch prints no Java errors), a shuffle-partition
count that fits the machine, and the class-data archive setup built (`class_archive`).
`command_session` is the session of one command, stopped when the command ends unless it was
there before. `state_store` starts a query on another state store than the session's;
`checkpoint_state_store` says which store a query's checkpoint began on.
`add_listener` attaches millrace's query listeners, which read progress events as JSON.
A host (`millrace.ops.host`) starts its session with `pools`, FAIR scheduling, and gives each
app a session of its own in a scheduler pool of its own (`app_session`, `end_app_session`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark
from pyspark import SparkConf
from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import StreamingQueryListener

from millrace.config.jvm import jars
from millrace.config.settings import Settings
from millrace.config.storage import StoragePath
from millrace.engine import class_archive, spark_internals
from millrace.engine.checkpoint_log import UnreadableLogError, newest_metadata
from millrace.engine.jvm_stderr import relayed_stderr
from millrace.errors import CheckpointCorruptError, EngineError

_ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_MEMORY_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
STATE_STORES = {"memory": _MEMORY_PROVIDER, "rocksdb": _ROCKSDB_PROVIDER}
"""The state stores a query can keep its state in, by the name apps give them."""
_PROVIDER_CLASS = "spark.sql.streaming.stateStore.providerClass"
_MILLRACE_EXTENSIONS = "dev.millrace.spark.MillraceExtensions"
_STATE_STORE_SWITCH = threading.Lock()
_ROCKSDB_CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
_DELTA_DEFAULTS = "spark.databricks.delta.properties.defaults"
_V1_SOURCES = "spark.sql.sources.useV1SourceList"
"""Where Spark takes the table properties of a Delta table it creates."""
_LISTENERS: dict[int, list[StreamingQueryListener]] = {}
_LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
_THREAD_STACK = "-Xss16m"
# The JVM samples its performance counters (what jstat and jcmd read) every 50 ms by default,
# a tenth of what a quiet app's driver kept using (benchmarks/idle_app.py); once a second.
_COUNTER_SAMPLING = "-XX:PerfDataSamplingInterval=1000"
_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+)-(?P<version>\d+\.\d+[\w.\-]*)\.jar$")


def spark_session(
    settings: Settings, app_name: str = "millrace", *, pools: bool = False
) -> SparkSession:
    """The process's SparkSession, built from `settings` on first use.

    Spark reads its classpath only when the JVM starts, so a session that already runs is
    returned as it is, whatever `settings` say. With `pools`, jobs are scheduled FAIR between
    the scheduler pools that `app_session` names, so that one app's long micro-batch does not
    hold another's back.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    conf = _session_conf(settings, app_name, pools=pools)
    try:
        _start_jvm(conf)
        spark = SparkSession.builder.config(conf=conf).getOrCreate()
    except Exception as error:
        raise EngineError(
            f"could not start Spark with master {settings.spark_master!r}: {error}",
            hint="check spark.master (MILLRACE_SPARK_MASTER) and that Java 17+ is installed",
        ) from error
    if settings.storage_s3_access_key:
        # Set in the running JVM, the keys stay off the command line PySpark started it with
        # (what `ps` shows); Spark sends the driver's Hadoop configuration with each task.
        spark_internals.set_hadoop_option(
            spark, "fs.s3a.access.key", settings.storage_s3_access_key
        )
        spark_internals.set_hadoop_option(spark, "fs.s3a.secret.key", settings.s3_secret)
    return spark


def start_jvm_early(settings: Settings) -> None:
    """Start Spark's JVM for `settings` in the background, for the session built later.

    A command that will need Spark calls it as soon as it knows its settings, so that the
    JVM's start (a second or two) overlaps what the command does first: its imports, loading
    the app, checking its checkpoint. `spark_session` then finds the JVM started, or waits for
    it. Nothing starts when a JVM runs; a start that fails here fails again, with its error,
    in `spark_session`; a JVM started for a command that ends without Spark ends with it.

    Example, as `millrace run` calls it before it loads the app (it starts a JVM, so it is
    not run as a doctest):

        start_jvm_early(options.on_master(workspace).settings)
    """
    if spark_internals.jvm_started():
        return
    conf = _session_conf(settings, "millrace", pools=False)
    threading.Thread(
        target=_start_jvm_quietly, args=(conf,), name="millrace-jvm-start", daemon=True
    ).start()


def _start_jvm_quietly(conf: SparkConf) -> None:
    # `spark_session` starts it again and raises what stopped it.
    with contextlib.suppress(Exception):
        _start_jvm(conf)


def _session_conf(settings: Settings, app_name: str, *, pools: bool) -> SparkConf:
    """The conf of the session `spark_session` builds, and the environment its JVM needs."""
    # Python workers must run this interpreter, or they miss the virtualenv's packages.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Spark's own servers (driver, block manager) listen on loopback unless told otherwise.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return SparkConf().setAll(
        [
            ("spark.master", settings.spark_master),
            ("spark.app.name", app_name),
            ("spark.scheduler.mode", "FAIR" if pools else "FIFO"),
            *spark_config(settings).items(),
        ]
    )


def _start_jvm(conf: SparkConf) -> None:
    """Start Spark's JVM for this process (once), deaf to SIGTERM: the driver decides the stop.

    A SIGTERM sent to a foreground run's process group (a service manager, `kill -- -PGID`)
    reaches the JVM too, whose shutdown hook would stop the SparkContext under the running
    queries. Ignored there, the signal reaches only the Python driver, which stops its
    queries gracefully as on Ctrl-C (the JVM ignores SIGINT from PySpark's start); the JVM
    still ends with the driver, when the pipe on its stdin closes. Its stderr is relayed
    (`jvm_stderr`), without the lines PySpark's TransformWithStateInPandas worker prints.
    """
    if not spark_internals.jvm_started():
        with relayed_stderr() as stderr:
            spark_internals.start_jvm(conf, stderr=stderr)
    spark_internals.ignore_sigterm_in_jvm()


def stop_spark_session() -> None:
    """Stop every streaming query, detach millrace's listeners, and stop the SparkSession."""
    spark = SparkSession.getActiveSession()
    if spark is None:
        return
    for query in spark.streams.active:
        query.stop()
    # A listener left attached would be called after this process stops answering Spark.
    for listener in _LISTENERS.pop(id(spark), []):
        spark.streams.removeListener(listener)
    spark.stop()


@contextmanager
def command_session(
    settings: Settings, app_name: str, *, pools: bool = False
) -> Iterator[SparkSession]:
    """The SparkSession for one command (`run`, `check`, `archive`...), stopped at its end.

    A session this starts (`spark_session`) is stopped with `stop_spark_session`. A session
    that already ran in the process, a notebook's or a test's, is the caller's: it is left
    running, and only the streaming queries started inside the block are stopped. So
    `with command_session(settings, "top_events") as spark: ...` runs a command as well in a
    process of its own as in one that goes on using Spark.
    """
    borrowed = SparkSession.getActiveSession() is not None
    spark = spark_session(settings, app_name, pools=pools)
    running_before = {query.id for query in spark.streams.active}
    try:
        yield spark
    finally:
        if borrowed:
            for query in spark.streams.active:
                if query.id not in running_before:
                    query.stop()
        else:
            stop_spark_session()


def app_session(host: SparkSession, pool: str) -> SparkSession:
    """A session of its own for one app of a host, its jobs in the FAIR scheduler pool `pool`.

    The session shares the host's SparkContext (its JVM, executors and Python workers) and
    has its own SQL configuration, temporary views, functions and streaming queries, whose
    listeners see that app's queries only. The pool is a property of the calling thread,
    which Spark gives the queries it starts: call this on the thread that starts the app.
    A pool that the host's configuration does not name is made with Spark's defaults (FIFO
    inside it, weight 1), so every app has an equal share.
    """
    host.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
    return host.newSession()


def end_app_session(session: SparkSession) -> None:
    """Detach the listeners of an app session whose queries have all stopped."""
    for listener in _LISTENERS.pop(id(session), []):
        session.streams.removeListener(listener)


def add_listener(spark: SparkSession, listener: StreamingQueryListener) -> None:
    """Attach `listener` to `spark`'s streaming queries until `stop_spark_session`.

    The listener gets each progress event read from the event's JSON text in one call into
    the JVM (`spark_internals.attach_json_listener` says why): on 2 cores, PySpark's own
    copy of every event field by field competes with the micro-batches.
    """
    spark_internals.attach_json_listener(spark, listener)
    _LISTENERS.setdefault(id(spark), []).append(listener)


def remove_listener(spark: SparkSession, listener: StreamingQueryListener) -> None:
    """Detach a listener that `add_listener` attached."""
    spark.streams.removeListener(listener)
    attached = _LISTENERS.get(id(spark), [])
    if listener in attached:
        attached.remove(listener)


_polling_less: set[str] = set()


def poll_less_when_idle(spark: SparkSession, idle_delay_ms: int) -> None:
    """Make `spark`'s quiet queries that hold no state ask their inputs every `idle_delay_ms`.

    Such a query has nothing due (no window to close, no id to forget): it waits for a record,
    and each ask is a request to every source, which a quiet app would pay for every
    `spark.poll_delay`. millrace's Spark extension (`IdlePolling`) lengthens a query's wait
    when Spark reports it idle (10 s without a micro-batch) and puts it back after the query's
    next micro-batch; the first record after a quiet spell is read up to `idle_delay_ms` after
    it comes. Calling it again for the same session changes nothing.
    """
    session = spark_internals.session_uuid(spark)
    if session not in _polling_less:
        spark_internals.add_idle_polling(spark, idle_delay_ms)
        _polling_less.add(session)


@contextmanager
def state_store(spark: SparkSession, name: str) -> Iterator[None]:
    """Queries started inside keep their state in store `name` (a key of `STATE_STORES`).

    Spark reads the store from the session when a query starts on a new checkpoint, and
    from the checkpoint's log when it restarts, so a query keeps the store it began with.
    Starts inside are serialised, so that a query started from another thread at the same
    time does not pick up this store.
    """
    with _STATE_STORE_SWITCH:
        before = spark.conf.get(_PROVIDER_CLASS)
        spark.conf.set(_PROVIDER_CLASS, STATE_STORES[name])
        try:
            yield
        finally:
            if before is None:
                spark.conf.unset(_PROVIDER_CLASS)
            else:
                spark.conf.set(_PROVIDER_CLASS, before)


def checkpoint_state_store(checkpoint: StoragePath) -> str | None:
    r"""The store (a key of `STATE_STORES`) a query's checkpoint keeps state in; None if new.

    Spark records the session's store in each micro-batch's entry of the offset log, and a
    restarted query goes on with the recorded one, whatever the session says now. Raises
    `CheckpointCorruptError` when the latest entry has no readable metadata.

    Example:
        >>> (tmp_path / "table.t" / "offsets").mkdir(parents=True)
        >>> conf = {"spark.sql.streaming.stateStore.providerClass": STATE_STORES["rocksdb"]}
        >>> import json
        >>> entry = "\n".join(["v1", json.dumps({"conf": conf}), "{}"])
        >>> _ = (tmp_path / "table.t" / "offsets" / "0").write_text(entry)
        >>> checkpoint_state_store(tmp_path / "table.t")
        'rocksdb'
    """
    try:
        metadata = newest_metadata(checkpoint)
    except UnreadableLogError as error:
        raise CheckpointCorruptError(
            f"checkpoint file {error.path} cannot be read: {error.reason}",
            hint="`millrace history APP` lists the batches that can be read; `millrace "
            "rollback APP --to-batch N` moves the app back to the last of them",
        ) from None
    if metadata is None:
        return None
    conf = metadata.get("conf")
    provider = conf.get(_PROVIDER_CLASS) if isinstance(conf, dict) else None
    if not isinstance(provider, str):
        return None
    names = {provider_class: name for name, provider_class in STATE_STORES.items()}
    return names.get(provider, provider)


def kafka_on_datasource_v1(spark: SparkSession) -> bool:
    """Whether `spark` reads and writes Kafka in batch through DataSource V1.

    The sessions `spark_config` makes do not: a processor's observed metrics never arrive
    from a V1 write.
    """
    v1_sources = spark.conf.get(_V1_SOURCES) or ""
    return "kafka" in v1_sources.lower().replace(" ", "").split(",")


def spark_config(settings: Settings) -> dict[str, str]:
    """The Spark configuration millrace sets, as key-value pairs."""
    # Every stateful operator commits each of its partitions at the end of every micro-batch,
    # a fixed cost per partition: partitions beyond the cores add commits, not parallelism
    # (benchmarks/batch_costs.py).
    partitions = settings.spark_shuffle_partitions or os.cpu_count() or 1
    keep_s = settings.keep_removed_ms // 1000
    quiet_logs = f"-Dlog4j2.configurationFile={_LOG_CONFIG.as_uri()}"
    # A query stopped during a foreachBatch call fails with Py4J's message, which Spark
    # matches against a regex that recurses once per character (`(.|\n)*`, in
    # StreamExecution.isInterruptionException): on Java's default 1 MB stack its thread died
    # with a StackOverflowError. Unused stack is only reserved, not taken from memory.
    connectors = connector_jars(settings)
    driver_options = " ".join(
        option
        for option in (
            quiet_logs,
            _THREAD_STACK,
            _COUNTER_SAMPLING,
            class_archive.driver_options(settings, connectors),
            settings.spark_driver_java_options,
        )
        if option
    )
    return {
        "spark.driver.extraJavaOptions": driver_options,
        "spark.executor.extraJavaOptions": quiet_logs,
        "spark.jars": ",".join(str(jar) for jar in connectors),
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.sql.shuffle.partitions": str(partitions),
        # Delta rebuilds a table's state from its log in this many tasks (50 by default):
        # result tables are small, and 50 tasks cost seconds on every write.
        "spark.databricks.delta.snapshotPartitions": str(partitions),
        # New tables (result tables, archives) compact their small files as they are written
        # (one or more per micro-batch otherwise), and keep their log and the files newer
        # versions replaced for `tables.keep_removed`, not Delta's 30 days and 7: a table
        # written every second would keep millions of each (Delta rounds the log's to days).
        f"{_DELTA_DEFAULTS}.autoOptimize.autoCompact": "true",
        f"{_DELTA_DEFAULTS}.logRetentionDuration": f"interval {keep_s} seconds",
        f"{_DELTA_DEFAULTS}.deletedFileRetentionDuration": f"interval {keep_s} seconds",
        "spark.sql.session.timeZone": "UTC",
        # Spark's 100 compiled operators were too few for the demo's four apps in one host:
        # every micro-batch compiled its classes again (Janino, then the JIT), 25 to 45
        # classes a second loaded and as many unloaded, against one or two with more; 13 %
        # less CPU per micro-batch with 2000 (benchmarks/demo_cost.py).
        "spark.sql.codegen.cache.maxEntries": str(settings.spark_codegen_cache),
        # What a checkpoint keeps, so that it stays bounded however long the query runs.
        "spark.sql.streaming.minBatchesToRetain": str(settings.spark_batches_kept),
        # A query whose sources had nothing new asks them all again after this long: at
        # Spark's 10 ms a quiet app kept a third of a core busy asking (benchmarks/idle_app.py).
        "spark.sql.streaming.pollingDelay": f"{settings.poll_delay_ms}ms",
        _PROVIDER_CLASS: _ROCKSDB_PROVIDER,
        # A commit then writes the batch's changes to a changelog file, instead of flushing
        # RocksDB and copying a snapshot of its files every batch; snapshots are made in the
        # background. It halved the commit of each state store in benchmarks/batch_costs.py.
        _ROCKSDB_CHANGELOG: "true",
        # millrace's own (jvm/spark-extensions/.../LocalFiles.scala): local checkpoint files
        # written and renamed without a `chmod` or `readlink` process each, which Hadoop
        # otherwise starts for every one, 60 a micro-batch of a windowed count.
        "spark.sql.streaming.checkpointFileManagerClass": (
            "dev.millrace.spark.LocalCheckpointFileManager"
        ),
        # millrace's own (jvm/spark-extensions): an input's low watermark over its buckets.
        "spark.sql.extensions": f"io.delta.sql.DeltaSparkSessionExtension,{_MILLRACE_EXTENSIONS}",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "false",
        # Kafka's batch reads and writes go through Spark's DataSource V2 API, not V1 (Spark's
        # list, less kafka): a V1 write runs its query apart from the write command, where the
        # metrics that a processor's writer observes as it writes (`observe`) never arrive.
        _V1_SOURCES: "avro,csv,json,orc,parquet,text",
        **_s3a_config(settings),
    }


def _s3a_config(settings: Settings) -> dict[str, str]:
    """Hadoop's S3A settings for a storage root under s3a://, but not its keys.

    A custom endpoint (MinIO, Ceph, a stand-in) is reached with path-style requests
    (`host/bucket/key`), as such stores expect, and a local file is uploaded as Spark's
    other files are, through S3A's output stream, not the AWS SDK's transfer manager:
    RocksDB's state files go that way, and the transfer manager's asynchronous client
    misreads the `100 Continue` some S3-compatible stores answer (with moto's server,
    every upload of a processor's state failed with "Status Code: 100").
    """
    if not settings.storage_root.startswith("s3a://"):
        return {}
    config = {"spark.hadoop.fs.s3a.endpoint.region": settings.storage_s3_region}
    if settings.storage_s3_endpoint:
        config["spark.hadoop.fs.s3a.endpoint"] = settings.storage_s3_endpoint
        config["spark.hadoop.fs.s3a.path.style.access"] = "true"
        config["spark.hadoop.fs.s3a.optimized.copy.from.local.enabled"] = "false"
        secure = not settings.storage_s3_endpoint.startswith("http:")
        config["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(secure).lower()
    return config


def connector_jars(settings: Settings) -> list[Path]:
    """The resolved Spark jars that PySpark does not ship itself.

    Maven brings the connectors' dependencies too, some of which PySpark already has in
    another version (Jackson, Hadoop, Scala...). Two versions of a class on one classpath
    fail in odd ways, so PySpark's own copy always wins.
    """
    pyspark_jars = (Path(pyspark.__file__).parent / "jars").glob("*.jar")
    bundled = {_artifact(jar.name) for jar in pyspark_jars}
    return [jar for jar in jars(settings, "spark") if _artifact(jar.name) not in bundled]


def _artifact(jar_name: str) -> str:
    match = _VERSIONED_JAR.match(jar_name)
    return match.group("artifact") if match else jar_name
