"""millrace's settings: one typed object read from `millrace.toml` and the environment.

Every setting has a key in the file (`kafka.port`), an environment variable
(`MILLRACE_KAFKA_PORT`) that wins over the file, a default and a description. The table
`SETTINGS` is the single source of them: the loader, the commented file that `millrace init`
writes and the error messages all read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from millrace.config.durations import parse_duration_ms
from millrace.config.uris import without_password
from millrace.errors import ConfigError

SettingValue = str | int | float
"""The value of one setting, of its type: str, int or float."""


@dataclass(frozen=True)
class Setting:
    """One setting: where it is read from, its type, its default and what it is for."""

    key: str
    env: str
    doc: str

    @property
    def attribute(self) -> str:
        """The attribute of `Settings` that holds this setting."""
        return self.key.replace(".", "_")

    @property
    def default(self) -> SettingValue:
        """The value used when neither the file nor the environment sets it."""
        value: SettingValue = getattr(Settings(), self.attribute)
        return value

    @property
    def kind(self) -> type:
        """The Python type of the value: str, int or float."""
        return type(self.default)


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "kafka.bootstrap",
        "MILLRACE_KAFKA",
        "Bootstrap servers of an existing Kafka cluster (host:port,...). When set, "
        "`millrace up` starts no broker and every client connects there.",
    ),
    Setting(
        "kafka.port",
        "MILLRACE_KAFKA_PORT",
        "Port on 127.0.0.1 where the local broker that `millrace up` starts listens.",
    ),
    Setting(
        "kafka.controller_port",
        "MILLRACE_KAFKA_CONTROLLER_PORT",
        "Port on 127.0.0.1 of the local broker's KRaft controller.",
    ),
    Setting(
        "kafka.heap",
        "MILLRACE_KAFKA_HEAP",
        "Java heap of the local broker (-Xmx).",
    ),
    Setting(
        "kafka.brokers",
        "MILLRACE_KAFKA_BROKERS",
        "Nodes of the local bus `millrace up` starts: 1, or 3 for a cluster that survives "
        "the loss of one: node N on kafka.port + 2(N - 1), its controller on "
        "kafka.controller_port + 2(N - 1).",
    ),
    Setting(
        "kafka.replication",
        "MILLRACE_KAFKA_REPLICATION",
        "Copies of each bucket of the streams millrace creates (its own too); 0 keeps as many "
        "as the bus has brokers, up to 3. With 3 or more, a write waits for 2 of them.",
    ),
    Setting(
        "kafka.start_timeout_s",
        "MILLRACE_KAFKA_START_TIMEOUT_S",
        "Seconds `millrace up` waits for the local broker to accept connections.",
    ),
    Setting(
        "kafka.security_protocol",
        "MILLRACE_KAFKA_SECURITY_PROTOCOL",
        "How clients talk to Kafka: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT (a user and password "
        "without TLS) or SASL_SSL (both). With the local broker, `millrace up` starts it "
        "with a listener of this protocol.",
    ),
    Setting(
        "kafka.sasl_mechanism",
        "MILLRACE_KAFKA_SASL_MECHANISM",
        "How a SASL user proves who it is: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.",
    ),
    Setting(
        "kafka.user",
        "MILLRACE_KAFKA_USER",
        "SASL user name of every Kafka client (with SASL_PLAINTEXT or SASL_SSL).",
    ),
    Setting(
        "kafka.password",
        "MILLRACE_KAFKA_PASSWORD",
        "SASL password of kafka.user. Better kept out of this file: set the environment "
        "variable, or name a file with kafka.password_file.",
    ),
    Setting(
        "kafka.password_file",
        "MILLRACE_KAFKA_PASSWORD_FILE",
        "File whose first line is the SASL password, instead of kafka.password; a relative "
        "path is relative to the workspace.",
    ),
    Setting(
        "kafka.ssl_ca_file",
        "MILLRACE_KAFKA_SSL_CA_FILE",
        "PEM file of the certificate authorities that clients trust (with SSL or SASL_SSL); "
        "empty trusts the system's, or the local broker's own CA when it runs.",
    ),
    Setting(
        "kafka.ssl_certificate_file",
        "MILLRACE_KAFKA_SSL_CERTIFICATE_FILE",
        "PEM file of the client's certificate, for a cluster that asks clients for one.",
    ),
    Setting(
        "kafka.ssl_key_file",
        "MILLRACE_KAFKA_SSL_KEY_FILE",
        "PEM file of the client certificate's private key (PKCS#8, not encrypted).",
    ),
    Setting(
        "redis.url",
        "MILLRACE_REDIS",
        "URL of an existing Redis for serving tables (redis://host:6379/0). When set, "
        "`millrace up` starts no Redis and every client connects there.",
    ),
    Setting(
        "redis.user",
        "MILLRACE_REDIS_USER",
        "Redis ACL user of every Redis client; empty logs in as Redis's default user. With the "
        "local Redis and a password, `millrace up` creates this user (and turns the default "
        "user off).",
    ),
    Setting(
        "redis.password",
        "MILLRACE_REDIS_PASSWORD",
        "Password of redis.user (or of the default user). Better kept out of this file: set "
        "the environment variable, or name a file with redis.password_file. With the local "
        "Redis, `millrace up` starts it requiring this password.",
    ),
    Setting(
        "redis.password_file",
        "MILLRACE_REDIS_PASSWORD_FILE",
        "File whose first line is the Redis password, instead of redis.password; a relative "
        "path is relative to the workspace.",
    ),
    Setting(
        "redis.ssl_ca_file",
        "MILLRACE_REDIS_SSL_CA_FILE",
        "PEM file of the certificate authorities trusted for a rediss:// (TLS) redis.url; "
        "empty trusts the system's.",
    ),
    Setting(
        "redis.port",
        "MILLRACE_REDIS_PORT",
        "Port on 127.0.0.1 where the local Redis that `millrace up` starts listens.",
    ),
    Setting(
        "redis.lookup_cache_s",
        "MILLRACE_LOOKUP_CACHE_S",
        "Seconds a lookup join's per-executor cache keeps a looked-up row; 0 turns it off.",
    ),
    Setting(
        "spark.master",
        "MILLRACE_SPARK_MASTER",
        "Spark master URL: local[*] runs in this process; spark://host:7077 runs on a cluster.",
    ),
    Setting(
        "spark.shuffle_partitions",
        "MILLRACE_SPARK_SHUFFLE_PARTITIONS",
        "Partitions of Spark's shuffles and of streaming state; 0 chooses one per core.",
    ),
    Setting(
        "spark.driver_memory",
        "MILLRACE_SPARK_DRIVER_MEMORY",
        "Memory of the Spark driver, which with local[*] also runs the executors.",
    ),
    Setting(
        "spark.driver_java_options",
        "MILLRACE_SPARK_DRIVER_JAVA_OPTIONS",
        "Extra JVM options of the Spark driver (with local[*], of the executors too), such as "
        "-XX:TieredStopAtLevel=1: a faster start, at some cost in peak throughput.",
    ),
    Setting(
        "spark.poll_delay",
        "MILLRACE_SPARK_POLL_DELAY",
        "How long a streaming query whose inputs had nothing new waits before it asks them "
        "again (a duration such as 500ms): what a quiet app costs, against how soon it sees "
        "the first record after a quiet spell.",
    ),
    Setting(
        "spark.idle_poll_delay",
        "MILLRACE_SPARK_IDLE_POLL_DELAY",
        "The same wait once a query has had nothing new for 10 s and holds no state (no "
        "window open, no id to forget): nothing is due, so it asks less often.",
    ),
    Setting(
        "spark.codegen_cache",
        "MILLRACE_SPARK_CODEGEN_CACHE",
        "Operator classes Spark generates that a driver keeps compiled (Spark's "
        "spark.sql.codegen.cache.maxEntries, 100 there): a host of many apps needs many.",
    ),
    Setting(
        "spark.max_records_per_batch",
        "MILLRACE_SPARK_MAX_RECORDS_PER_BATCH",
        "Most records one micro-batch reads from one input of an app that sets no "
        "max_records_per_batch of its own: a burst or a backlog is read in several micro-"
        "batches of bounded time and memory. 0 reads all there is in one.",
    ),
    Setting(
        "spark.batches_kept",
        "MILLRACE_SPARK_BATCHES_KEPT",
        "Micro-batches of each query whose offsets, commits and state versions its checkpoint "
        "keeps (Spark's spark.sql.streaming.minBatchesToRetain): how far back rollback reaches.",
    ),
    Setting(
        "spark.cluster_port",
        "MILLRACE_SPARK_CLUSTER_PORT",
        "Port of the local Spark standalone master that `millrace up --spark-workers N` "
        "starts on 127.0.0.1; apps run on it with --master spark://127.0.0.1:PORT.",
    ),
    Setting(
        "spark.worker_cores",
        "MILLRACE_SPARK_WORKER_CORES",
        "Cores each worker of the local Spark cluster offers to apps.",
    ),
    Setting(
        "spark.worker_memory",
        "MILLRACE_SPARK_WORKER_MEMORY",
        "Memory each worker of the local Spark cluster offers to apps, as Spark writes it (1g).",
    ),
    Setting(
        "deploy.isolated",
        "MILLRACE_DEPLOY_ISOLATED",
        "Apps (names, comma-separated) that `deploy` runs each in a Spark application of "
        "its own, not in the workspace's host, as `deploy --isolated` does for one deploy.",
    ),
    Setting(
        "events.time_field",
        "MILLRACE_TIME_FIELD",
        "Field of a published event that holds its event time (ISO-8601, or epoch ms or s). "
        "The Kafka timestamp stays the arrival time.",
    ),
    Setting(
        "events.max_future",
        "MILLRACE_MAX_FUTURE",
        "How far an event's time may be ahead of its arrival time (a duration such as 5m). "
        "A record dated further ahead is a dead letter and never moves a watermark; "
        "publishers refuse such events against the wall clock. Inputs can override it.",
    ),
    Setting(
        "events.idle_timeout",
        "MILLRACE_IDLE_TIMEOUT",
        "How long a bucket of an input that an app has read to its end may go without a new "
        "record before it stops holding the input's watermark back; then its progress "
        "follows the wall clock at the bucket's last arrival delay. Inputs can override it.",
    ),
    Setting(
        "monitor.webhook_url",
        "MILLRACE_MONITOR_WEBHOOK_URL",
        "URL that alerts are POSTed to as JSON when they fire and resolve; empty logs only.",
    ),
    Setting(
        "monitor.interval_s",
        "MILLRACE_MONITOR_INTERVAL_S",
        "Seconds between two evaluations of the alert rules by `millrace serve` and `monitor`.",
    ),
    Setting(
        "sql.local_max_mb",
        "MILLRACE_SQL_LOCAL_MAX_MB",
        "Most MiB of Delta files a query's tables may hold for `millrace sql` to answer it in "
        "its own process (DuckDB); above it, Spark answers, and `POST /sql` refuses.",
    ),
    Setting(
        "sql.time_limit_s",
        "MILLRACE_SQL_TIME_LIMIT_S",
        "Seconds a query of `POST /sql` or the dashboard's query page may run before it stops.",
    ),
    Setting(
        "logs.max_mb",
        "MILLRACE_LOGS_MAX_MB",
        "MiB an app's log or the host's may reach before it is rotated: app.log moves to "
        "app.log.1 (the older ones up by one) and a new app.log begins.",
    ),
    Setting(
        "logs.keep",
        "MILLRACE_LOGS_KEEP",
        "Rotated logs kept of each (app.log.1 to app.log.N); 0 keeps none.",
    ),
    Setting(
        "tables.keep_removed",
        "MILLRACE_TABLES_KEEP_REMOVED",
        "How long a result table keeps the files that newer versions replaced, for readers "
        "of an older version, before its writer deletes them (Delta's VACUUM).",
    ),
    Setting(
        "storage.root",
        "MILLRACE_STORAGE_ROOT",
        "Where checkpoints, result tables, the warehouse and at-most-once marks are kept, "
        "for executors on other machines to reach: a Hadoop filesystem URI, "
        "s3a://bucket/prefix, hdfs://namenode:port/prefix or file:///shared/folder. "
        "Empty keeps them in the workspace.",
    ),
    Setting(
        "storage.s3_endpoint",
        "MILLRACE_S3_ENDPOINT",
        "URL of an S3-compatible store for an s3a:// root (http://host:port); empty is "
        "AWS's own S3. A set endpoint is reached with path-style requests (host/bucket/key).",
    ),
    Setting(
        "storage.s3_region",
        "MILLRACE_S3_REGION",
        "AWS region of the s3a:// root's bucket.",
    ),
    Setting(
        "storage.s3_access_key",
        "MILLRACE_S3_ACCESS_KEY",
        "Access key id for the s3a:// root; empty takes the keys from AWS's usual chain "
        "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, an instance's role).",
    ),
    Setting(
        "storage.s3_secret_key",
        "MILLRACE_S3_SECRET_KEY",
        "Secret key of storage.s3_access_key. Better kept out of this file: set the "
        "environment variable, or name a file with storage.s3_secret_key_file.",
    ),
    Setting(
        "storage.s3_secret_key_file",
        "MILLRACE_S3_SECRET_KEY_FILE",
        "File whose first line is the S3 secret key, instead of storage.s3_secret_key; a "
        "relative path is relative to the workspace.",
    ),
    Setting(
        "jvm.jars_dir",
        "MILLRACE_JARS_DIR",
        "Folder of the JVM artifacts resolved by scripts/setup.sh; empty means "
        "<virtualenv>/share/millrace/jars.",
    ),
)


@dataclass(frozen=True)
class Settings:
    """The effective settings of one workspace.

    Example:
        >>> Settings().kafka_port
        9092
    """

    kafka_bootstrap: str = ""
    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    kafka_heap: str = "1g"
    kafka_start_timeout_s: float = 90.0
    kafka_replication: int = 0
    kafka_brokers: int = 1
    kafka_security_protocol: str = "PLAINTEXT"
    kafka_sasl_mechanism: str = "SCRAM-SHA-512"
    kafka_user: str = ""
    kafka_password: str = field(default="", repr=False)
    kafka_password_file: str = ""
    kafka_ssl_ca_file: str = ""
    kafka_ssl_certificate_file: str = ""
    kafka_ssl_key_file: str = ""
    redis_url: str = ""
    redis_user: str = ""
    redis_password: str = field(default="", repr=False)
    redis_password_file: str = ""
    redis_ssl_ca_file: str = ""
    redis_port: int = 6379
    redis_lookup_cache_s: float = 10.0
    spark_master: str = "local[*]"
    spark_shuffle_partitions: int = 0
    spark_driver_memory: str = "2g"
    spark_driver_java_options: str = ""
    spark_poll_delay: str = "1s"
    spark_idle_poll_delay: str = "10s"
    spark_codegen_cache: int = 2000
    spark_max_records_per_batch: int = 500_000
    spark_batches_kept: int = 100
    spark_cluster_port: int = 7077
    spark_worker_cores: int = 1
    spark_worker_memory: str = "1g"
    deploy_isolated: str = ""
    events_time_field: str = "time"
    events_max_future: str = "5m"
    events_idle_timeout: str = "1m"
    storage_root: str = ""
    storage_s3_endpoint: str = ""
    storage_s3_region: str = "us-east-1"
    storage_s3_access_key: str = ""
    storage_s3_secret_key: str = field(default="", repr=False)
    storage_s3_secret_key_file: str = ""
    jvm_jars_dir: str = ""
    monitor_webhook_url: str = ""
    monitor_interval_s: float = 10.0
    sql_local_max_mb: int = 1024
    sql_time_limit_s: float = 30.0
    logs_max_mb: float = 10.0
    logs_keep: int = 3
    tables_keep_removed: str = "1h"

    @property
    def uses_local_broker(self) -> bool:
        """True when millrace runs its own broker rather than using an existing cluster."""
        return not self.kafka_bootstrap

    @property
    def bootstrap_servers(self) -> str:
        """Where Kafka clients connect: the configured cluster or the local broker."""
        ports = range(self.kafka_port, self.kafka_port + 2 * self.kafka_brokers, 2)
        return self.kafka_bootstrap or ",".join(f"127.0.0.1:{port}" for port in ports)

    @property
    def kafka_uses_sasl(self) -> bool:
        """True when Kafka clients log in with a user and password (SASL_PLAINTEXT, SASL_SSL)."""
        return self.kafka_security_protocol.startswith("SASL_")

    @property
    def kafka_uses_tls(self) -> bool:
        """True when Kafka clients talk TLS (SSL, SASL_SSL)."""
        return self.kafka_security_protocol.endswith("SSL")

    @property
    def kafka_sasl_password(self) -> str:
        """`kafka.password`, or the first line of `kafka.password_file` read now.

        Raises `ConfigError` when both are set or the file cannot be read; the message never
        holds the password.

        Example:
            >>> Settings(kafka_password="s3cret").kafka_sasl_password
            's3cret'
        """
        return _secret("kafka.password", self.kafka_password, self.kafka_password_file)

    @property
    def s3_secret(self) -> str:
        """`storage.s3_secret_key`, or the first line of `storage.s3_secret_key_file` read now."""
        return _secret(
            "storage.s3_secret_key", self.storage_s3_secret_key, self.storage_s3_secret_key_file
        )

    @property
    def max_future_ms(self) -> int:
        """`events.max_future` in milliseconds."""
        return parse_duration_ms(self.events_max_future, what="events.max_future")

    @property
    def keep_removed_ms(self) -> int:
        """`tables.keep_removed` in milliseconds."""
        return parse_duration_ms(self.tables_keep_removed, what="tables.keep_removed")

    @property
    def poll_delay_ms(self) -> int:
        """`spark.poll_delay` in milliseconds."""
        return parse_duration_ms(self.spark_poll_delay, what="spark.poll_delay")

    @property
    def idle_poll_delay_ms(self) -> int:
        """`spark.idle_poll_delay` in milliseconds."""
        return parse_duration_ms(self.spark_idle_poll_delay, what="spark.idle_poll_delay")

    @property
    def idle_timeout_ms(self) -> int:
        """`events.idle_timeout` in milliseconds."""
        return parse_duration_ms(self.events_idle_timeout, what="events.idle_timeout")

    @property
    def uses_local_redis(self) -> bool:
        """True when millrace runs its own Redis rather than using an existing one."""
        return not self.redis_url

    @property
    def redis(self) -> str:
        """Where Redis clients connect, as a URL with the login and CA file the settings give.

        It holds the password: messages show `redis_address` instead.

        Example:
            >>> Settings(redis_user="app", redis_password="s3cret").redis
            'redis://app:s3cret@127.0.0.1:6379/0'
        """
        url = urlsplit(self.redis_url or f"redis://127.0.0.1:{self.redis_port}/0")
        password = self.redis_auth_password
        if password or self.redis_user:
            login = quote(self.redis_user, safe="")
            if password:
                login += f":{quote(password, safe='')}"
            url = url._replace(netloc=f"{login}@{url.netloc.rpartition('@')[2]}")
        if self.redis_ssl_ca_file:
            ca = f"ssl_ca_certs={quote(self.redis_ssl_ca_file, safe='')}"
            url = url._replace(query=f"{url.query}&{ca}" if url.query else ca)
        return urlunsplit(url)

    @property
    def redis_address(self) -> str:
        """The configured Redis URL or the local Redis's, without a password: what to show.

        Example:
            >>> Settings(redis_url="rediss://:s3cret@cache.example.com:6380/0").redis_address
            'rediss://cache.example.com:6380/0'
        """
        return without_password(self.redis_url or f"redis://127.0.0.1:{self.redis_port}/0")

    @property
    def redis_auth_password(self) -> str:
        """`redis.password`, or the first line of `redis.password_file` read now."""
        return _secret("redis.password", self.redis_password, self.redis_password_file)


def _secret(key: str, value: str, file: str) -> str:
    if value and file:
        raise ConfigError(
            f"both {key} and {key}_file are set",
            hint=f"keep one: {key}_file (a file holding the password) or {key}",
        )
    if not file:
        return value
    try:
        lines = Path(file).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(
            f"cannot read {key}_file {file}: {getattr(error, 'strerror', None) or error}",
            hint=f"write the password on the first line of {file}, readable by this user",
        ) from None
    return lines[0] if lines else ""
