"""Reading `Settings`: the workspace's `millrace.toml`, then `MILLRACE_*` variables.

`load_settings` owns the checks every value passes on its way in (its type, its range, one
of its choices, a duration that parses) and the errors that name the file and line, or the
variable, of a value that does not.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from millrace.config.alerts import parse_alert_rules
from millrace.config.durations import parse_duration_ms
from millrace.config.settings import SETTINGS, Setting, Settings, SettingValue
from millrace.config.uris import check_root_uri
from millrace.errors import ConfigError

_AttributeValues = dict[str, Any]  # Any: each value has its attribute's type, by `_convert`
"""Values of `Settings` by attribute name, to make one with `Settings(**values)`."""


def load_settings(config_file: Path | None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read `config_file` (if it exists), then let `MILLRACE_*` variables override it.

    Raises `ConfigError` naming the file and the key (or the variable) for an unknown key,
    a value of the wrong type, or a file that is not valid TOML.

    Example:
        >>> load_settings(None, {"MILLRACE_KAFKA_PORT": "19092"}).kafka_port
        19092
    """
    environ = os.environ if environ is None else environ
    values: _AttributeValues = {}
    if config_file is not None and config_file.exists():
        values.update(_read_file(config_file))
    for setting in SETTINGS:
        raw = environ.get(setting.env)
        if raw is not None:
            source = f"environment variable {setting.env}"
            values[setting.attribute] = _convert(setting, raw, source)
    settings = Settings(**values)
    if config_file is None:
        return settings
    workspace = config_file.parent
    files: _AttributeValues = {
        attribute: str(workspace / getattr(settings, attribute))
        for attribute in _FILE_ATTRIBUTES
        if getattr(settings, attribute)
    }
    if settings.uses_local_broker and settings.kafka_uses_tls and not settings.kafka_ssl_ca_file:
        # `millrace up` makes this CA when it starts the local broker with a TLS listener.
        files["kafka_ssl_ca_file"] = str(workspace / LOCAL_BROKER_CA)
    return replace(settings, **files)


LOCAL_BROKER_CA = Path("kafka") / "tls" / "ca.pem"
"""Where, relative to the workspace, the local broker's certificate authority is kept."""

_FILE_ATTRIBUTES = (
    "kafka_password_file",
    "kafka_ssl_ca_file",
    "kafka_ssl_certificate_file",
    "kafka_ssl_key_file",
    "redis_password_file",
    "redis_ssl_ca_file",
    "storage_s3_secret_key_file",
)
"""Settings that name a file, which a relative path places in the workspace."""


def _read_file(config_file: Path) -> _AttributeValues:
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
    values: _AttributeValues = {}
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


def _flatten(document: Mapping[str, object], prefix: str = "") -> list[tuple[str, object]]:
    items: list[tuple[str, object]] = []
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


_DURATION_KEYS = (
    "spark.poll_delay",
    "spark.idle_poll_delay",
    "events.max_future",
    "events.idle_timeout",
    "tables.keep_removed",
)


_CHOICES = {
    "kafka.security_protocol": ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
    "kafka.sasl_mechanism": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
}
"""The values a setting that names one of a few things may take, in Kafka's spelling."""


def _convert(setting: Setting, value: object, where: str) -> SettingValue:
    choices = _CHOICES.get(setting.key)
    if choices is not None:
        if not isinstance(value, str) or value.strip().upper() not in choices:
            raise ConfigError(
                f"{setting.key} must be one of {', '.join(choices)}, got {value!r} ({where})",
                hint=setting.doc,
            )
        return value.strip().upper()
    if setting.key == "storage.root" and isinstance(value, str):
        try:
            return check_root_uri(value)
        except ConfigError as error:
            raise ConfigError(f"{error.message} ({where})", hint=error.hint) from None
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


def _number(kind: type, value: object) -> int | float | None:
    """`value` as a finite `kind` (int or float), or None; a fraction is not an int."""
    if (
        kind not in (int, float)
        or isinstance(value, bool)
        or not isinstance(value, str | int | float)
    ):
        return None
    try:
        number = float(value) if kind is float or isinstance(value, float) else int(value)
    except ValueError:
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
    "spark.cluster_port": _PORT,
    "spark.worker_cores": ("1 or more", lambda value: value >= 1),
    "spark.batches_kept": ("1 or more", lambda value: value >= 1),
    "kafka.replication": ("0 (as many as the brokers, up to 3) or more", lambda v: v >= 0),
    "kafka.brokers": ("1 or 3", lambda value: value in (1, 3)),
    "kafka.controller_port": _PORT,
    "redis.port": _PORT,
    "kafka.start_timeout_s": ("more than 0 seconds", lambda value: value > 0),
    "redis.lookup_cache_s": ("0 seconds or more", lambda value: value >= 0),
    "spark.shuffle_partitions": ("0 (one per core) or more", lambda value: value >= 0),
    "spark.codegen_cache": ("1 or more", lambda value: value >= 1),
    "spark.max_records_per_batch": ("0 (no limit) or more", lambda value: value >= 0),
    "monitor.interval_s": ("more than 0 seconds", lambda value: value > 0),
    "sql.local_max_mb": ("0 or more", lambda value: value >= 0),
    "sql.time_limit_s": ("more than 0 seconds", lambda value: value > 0),
    "logs.max_mb": ("more than 0", lambda value: value > 0),
    "logs.keep": ("0 or more", lambda value: value >= 0),
}
"""The values a numeric setting may take, and how to say so."""
