"""How every Kafka client of millrace connects: the settings turned into client configuration.

This module is the only place that reads the Kafka connection settings (`kafka.bootstrap`,
`kafka.security_protocol`, `kafka.sasl_mechanism`, `kafka.user`, the password and the TLS
files): `kafka_client_config` for the Python clients (confluent-kafka's producers, consumers
and admin clients) and `spark_kafka_options` for Spark's Kafka source and sink, so every client
connects the same way. Neither puts the password anywhere but in the configuration it returns;
Spark keeps its Kafka options out of a query's checkpoint, so changing credentials never
invalidates one.

Example:
    >>> kafka_client_config(Settings(kafka_port=19092))
    {'bootstrap.servers': '127.0.0.1:19092', 'security.protocol': 'PLAINTEXT'}
    >>> spark_kafka_options(Settings(kafka_port=19092))["kafka.bootstrap.servers"]
    '127.0.0.1:19092'
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from millrace.config.settings import Settings
from millrace.errors import ConfigError

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def kafka_client_config(settings: Settings) -> dict[str, str]:
    """The confluent-kafka configuration that connects a client to the bus.

    Callers add their own client's options (`group.id`, `acks`, ...) to it. Raises
    `ConfigError` when SASL is on without a user or password, or a TLS file is missing.

    Example:
        >>> config = kafka_client_config(Settings(kafka_security_protocol="SASL_SSL",
        ...     kafka_user="app", kafka_password="s3cret"))
        >>> config["sasl.mechanism"], config["sasl.username"]
        ('SCRAM-SHA-512', 'app')
    """
    config = {
        "bootstrap.servers": settings.bootstrap_servers,
        "security.protocol": settings.kafka_security_protocol,
    }
    if settings.kafka_uses_sasl:
        user, password = _credentials(settings)
        config |= {
            "sasl.mechanism": settings.kafka_sasl_mechanism,
            "sasl.username": user,
            "sasl.password": password,
        }
    if settings.kafka_uses_tls:
        ca, certificate, key = _tls_files(settings)
        if ca:
            config["ssl.ca.location"] = ca
        if certificate:
            config |= {"ssl.certificate.location": certificate, "ssl.key.location": key}
    return config


def spark_kafka_options(settings: Settings) -> dict[str, str]:
    """Options of Spark's Kafka source and sink (`kafka.`-prefixed) that connect to the bus.

    A client certificate and its key travel inside the options (PEM text), so executors on
    other machines need no copy of those files; the CA file must be at the same path on them.
    Raises `ConfigError` as `kafka_client_config` does.

    Example:
        >>> ca_file = tmp_path / "ca.pem"
        >>> _ = ca_file.write_text("-----BEGIN CERTIFICATE-----")
        >>> options = spark_kafka_options(Settings(kafka_security_protocol="SASL_SSL",
        ...     kafka_user="app", kafka_password="s3cret", kafka_ssl_ca_file=str(ca_file)))
        >>> options["kafka.ssl.truststore.location"] == str(ca_file)
        True
    """
    options = {
        "kafka.bootstrap.servers": settings.bootstrap_servers,
        "kafka.security.protocol": settings.kafka_security_protocol,
    }
    if settings.kafka_uses_sasl:
        options |= {
            "kafka.sasl.mechanism": settings.kafka_sasl_mechanism,
            "kafka.sasl.jaas.config": kafka_jaas_config(settings),
        }
    if settings.kafka_uses_tls:
        ca, certificate, key = _tls_files(settings)
        if ca:
            options |= {"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": ca}
        if certificate:
            options |= {
                "kafka.ssl.keystore.type": "PEM",
                "kafka.ssl.keystore.certificate.chain": Path(certificate).read_text(),
                "kafka.ssl.keystore.key": Path(key).read_text(),
            }
    return options


def kafka_jaas_config(settings: Settings, extra: Mapping[str, str] | None = None) -> str:
    """The JAAS login of the settings' SASL user, as Kafka's Java clients and brokers take it.

    `extra` adds options to the login (a PLAIN listener's `user_<name>` entries).

    Example:
        >>> kafka_jaas_config(Settings(kafka_security_protocol="SASL_SSL",  # doctest: +ELLIPSIS
        ...     kafka_sasl_mechanism="PLAIN", kafka_user="app", kafka_password="s3cret"))
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="app" pass...'
    """
    user, password = _credentials(settings)
    options = {"username": user, "password": password, **(extra or {})}
    quoted = " ".join(f"{name}={_jaas_quoted(value)}" for name, value in options.items())
    return f"{_LOGIN_MODULES[settings.kafka_sasl_mechanism]} required {quoted};"


def _credentials(settings: Settings) -> tuple[str, str]:
    password = settings.kafka_sasl_password
    if not settings.kafka_user or not password:
        missing = "kafka.user" if not settings.kafka_user else "kafka.password"
        raise ConfigError(
            f"kafka.security_protocol is {settings.kafka_security_protocol}, which logs in "
            f"with a user and a password, but {missing} is not set",
            hint="set kafka.user, and the password with MILLRACE_KAFKA_PASSWORD or "
            "kafka.password_file (or kafka.password in millrace.toml)",
        )
    return settings.kafka_user, password


def _tls_files(settings: Settings) -> tuple[str, str, str]:
    certificate, key = settings.kafka_ssl_certificate_file, settings.kafka_ssl_key_file
    if bool(certificate) != bool(key):
        raise ConfigError(
            "a client certificate needs both kafka.ssl_certificate_file and kafka.ssl_key_file",
            hint="set both, or neither when the cluster does not ask clients for a certificate",
        )
    for key_name, path in (
        ("kafka.ssl_ca_file", settings.kafka_ssl_ca_file),
        ("kafka.ssl_certificate_file", certificate),
        ("kafka.ssl_key_file", key),
    ):
        if path and not Path(path).is_file():
            raise ConfigError(
                f"{key_name} names {path}, which is not a file",
                hint="point it at a PEM file readable by this user"
                + (
                    "; `millrace up` makes the local broker's CA there"
                    if key_name == "kafka.ssl_ca_file" and settings.uses_local_broker
                    else ""
                ),
            )
    return settings.kafka_ssl_ca_file, certificate, key


def _jaas_quoted(text: str) -> str:
    """`text` as a quoted value of a JAAS configuration, whose quotes take backslash escapes."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
