"""millrace's settings: one typed object read from `millrace.toml` and the environment.

Every setting has a key in the file (`kafka.port`), an environment variable
(`MILLRACE_KAFKA_PORT`) that wins over the file, a default and a description. The table
`SETTINGS` is the single source of them: the loader, the commented file that `millrace init`
writes and the error messages all read it.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from millrace.config.alerts import parse_alert_rules
from millrace.config.durations import parse_duration_ms
from millrace.errors import ConfigError


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
    def default(self) -> Any:
        """The value used when neither the file nor the environment sets it."""
        return getattr(Settings(), self.attribute)

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
        "kafka.start_timeout_s",
        "MILLRACE_KAFKA_START_TIMEOUT_S",
        "Seconds `millrace up` waits for the local broker to accept connections.",
    ),
    Setting(
        "redis.url",
        "MILLRACE_REDIS",
        "URL of an existing Redis for serving tables (redis://host:6379/0). When set, "
        "`millrace up` starts no Redis and every client connects there.",
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
    redis_url: str = ""
    redis_port: int = 6379
    redis_lookup_cache_s: float = 10.0
    spark_master: str = "local[*]"
    spark_shuffle_partitions: int = 0
    spark_driver_memory: str = "2g"
    spark_driver_java_options: str = ""
    events_time_field: str = "time"
    events_max_future: str = "5m"
    events_idle_timeout: str = "1m"
    jvm_jars_dir: str = ""
    monitor_webhook_url: str = ""
    monitor_interval_s: float = 10.0

    @property
    def uses_local_broker(self) -> bool:
        """True when millrace runs its own broker rather than using an existing cluster."""
        return not self.kafka_bootstrap

    @property
    def bootstrap_servers(self) -> str:
        """Where Kafka clients connect: the configured cluster or the local broker."""
        return self.kafka_bootstrap or f"127.0.0.1:{self.kafka_port}"

    @property
    def max_future_ms(self) -> int:
        """`events.max_future` in milliseconds."""
        return parse_duration_ms(self.events_max_future, what="events.max_future")

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
        """Where Redis clients connect: the configured URL or the local Redis."""
        return self.redis_url or f"redis://127.0.0.1:{self.redis_port}/0"


def load_settings(config_file: Path | None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read `config_file` (if it exists), then let `MILLRACE_*` variables override it.

    Raises `ConfigError` naming the file and the key (or the variable) for an unknown key,
    a value of the wrong type, or a file that is not valid TOML.

    Example:
        >>> load_settings(None, {"MILLRACE_KAFKA_PORT": "19092"}).kafka_port
        19092
    """
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    if config_file is not None and config_file.exists():
        values.update(_read_file(config_file))
    for setting in SETTINGS:
        raw = environ.get(setting.env)
        if raw is not None:
            source = f"environment variable {setting.env}"
            values[setting.attribute] = _convert(setting, raw, source)
    return Settings(**values)


def _read_file(config_file: Path) -> dict[str, Any]:
    raw = config_file.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise ConfigError(
            f"{config_file}:{line} is not valid UTF-8: byte {error.start} "
            f"(0x{raw[error.start]:02x}) {error.reason}",
            hint="save the file as UTF-8; `millrace init --force` writes a fresh commented file",
        ) from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(
            f"{config_file} is not valid TOML: {error}",
            hint="fix the line named above; `millrace init --force` writes a fresh commented file",
        ) from None
    by_key = {setting.key: setting for setting in SETTINGS}
    values: dict[str, Any] = {}
    if "alerts" in document:
        # Checked here, so a wrong rule is reported at once; the monitor reads them again.
        parse_alert_rules(document.pop("alerts"), config_file, text)
    for key, value in _flatten(document):
        setting = by_key.get(key)
        if setting is None:
            raise ConfigError(
                f"unknown key {key!r} in {_where(config_file, text, key)}",
                hint=_suggest(key, by_key),
            )
        values[setting.attribute] = _convert(setting, value, f"{_where(config_file, text, key)}")
    return values


def _flatten(document: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for name, value in document.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping):
            items.extend(_flatten(value, key + "."))
        else:
            items.append((key, value))
    return items


def _where(config_file: Path, text: str, key: str) -> str:
    """`file:line` of the line that sets `key`, or just the file when it cannot be found."""
    name = re.escape(key.rsplit(".", 1)[-1])
    for number, line in enumerate(text.splitlines(), start=1):
        if re.match(rf"\s*{name}\s*=", line):
            return f"{config_file}:{number}"
    return str(config_file)


def _suggest(key: str, by_key: Mapping[str, Setting]) -> str:
    close = difflib.get_close_matches(key, list(by_key), n=1)
    known = ", ".join(by_key)
    guess = f"did you mean {close[0]!r}? " if close else ""
    return f"{guess}known keys: {known}"


_DURATION_KEYS = ("events.max_future", "events.idle_timeout")


def _convert(setting: Setting, value: Any, where: str) -> Any:
    if setting.key in _DURATION_KEYS and isinstance(value, str):
        try:
            parse_duration_ms(value, what=setting.key)
        except ConfigError as error:
            raise ConfigError(f"{error.message} ({where})", hint=error.hint) from None
        return value
    if setting.kind is str and isinstance(value, str):
        return value
    converted = _number(setting.kind, value)
    if converted is None:
        raise ConfigError(
            f"{setting.key} must be {_KIND_NAMES[setting.kind]}, got {value!r} ({where})",
            hint=setting.doc,
        )
    wording, allowed = _RANGES.get(setting.key, ("", None))
    if allowed is not None and not allowed(converted):
        raise ConfigError(
            f"{setting.key} must be {wording}, got {value!r} ({where})", hint=setting.doc
        )
    return converted


def _number(kind: type, value: Any) -> int | float | None:
    """`value` as a finite `kind` (int or float), or None; a fraction is not an int."""
    if kind not in (int, float) or isinstance(value, bool):
        return None
    try:
        number = float(value) if kind is float or isinstance(value, float) else int(value)
    except (TypeError, ValueError):
        return None
    if isinstance(number, float) and not math.isfinite(number):
        return None
    if kind is int and isinstance(number, float):
        return int(number) if number.is_integer() else None
    return number


_KIND_NAMES = {str: "a string", int: "an integer", float: "a finite number"}

_PORT = ("a port from 1 to 65535", lambda value: 1 <= value <= 65_535)
_RANGES: dict[str, tuple[str, Callable[[float], bool]]] = {
    "kafka.port": _PORT,
    "kafka.controller_port": _PORT,
    "redis.port": _PORT,
    "kafka.start_timeout_s": ("more than 0 seconds", lambda value: value > 0),
    "redis.lookup_cache_s": ("0 seconds or more", lambda value: value >= 0),
    "spark.shuffle_partitions": ("0 (one per core) or more", lambda value: value >= 0),
    "monitor.interval_s": ("more than 0 seconds", lambda value: value > 0),
}
"""The values a numeric setting may take, and how to say so."""
