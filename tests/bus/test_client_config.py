import json
import os
import re
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from millrace.bus.client_config import kafka_client_config, spark_kafka_options
from millrace.bus.streams import admin_client
from millrace.config.settings import Settings
from millrace.config.settings_loader import load_settings
from millrace.config.workspace import Workspace
from millrace.errors import ConfigError
from millrace.ops.checkpoints import app_checkpoints
from tests.secured_workspace import SecuredWorkspace


def test_a_plaintext_bus_needs_nothing_but_its_address() -> None:
    settings = Settings(kafka_bootstrap="kafka.example.com:9092")
    assert kafka_client_config(settings) == {
        "bootstrap.servers": "kafka.example.com:9092",
        "security.protocol": "PLAINTEXT",
    }
    assert spark_kafka_options(settings) == {
        "kafka.bootstrap.servers": "kafka.example.com:9092",
        "kafka.security.protocol": "PLAINTEXT",
    }


def test_python_and_spark_clients_log_in_with_the_same_user_and_trust_the_same_ca(
    tmp_path: Path,
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    settings = Settings(
        kafka_bootstrap="kafka.example.com:9093",
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-256",
        kafka_user="millrace",
        kafka_password='quote " and \\ backslash',
        kafka_ssl_ca_file=str(ca),
    )
    assert kafka_client_config(settings) == {
        "bootstrap.servers": "kafka.example.com:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "millrace",
        "sasl.password": 'quote " and \\ backslash',
        "ssl.ca.location": str(ca),
    }
    assert spark_kafka_options(settings) == {
        "kafka.bootstrap.servers": "kafka.example.com:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="millrace" password="quote \\" and \\\\ backslash";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(ca),
    }
    plain = Settings(
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_mechanism="PLAIN",
        kafka_user="u",
        kafka_password="p",
    )
    assert spark_kafka_options(plain)["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
        'password="p";'
    )


def test_a_client_certificate_goes_to_python_clients_as_files_and_to_spark_as_pem_text(
    tmp_path: Path,
) -> None:
    certificate, key = tmp_path / "client.pem", tmp_path / "client.key"
    certificate.write_text("-----BEGIN CERTIFICATE-----\nabc\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\ndef\n")
    settings = Settings(
        kafka_security_protocol="SSL",
        kafka_ssl_certificate_file=str(certificate),
        kafka_ssl_key_file=str(key),
    )
    config = kafka_client_config(settings)
    assert (config["ssl.certificate.location"], config["ssl.key.location"]) == (
        str(certificate),
        str(key),
    )
    options = spark_kafka_options(settings)
    assert options["kafka.ssl.keystore.type"] == "PEM"
    assert options["kafka.ssl.keystore.certificate.chain"] == certificate.read_text()
    assert options["kafka.ssl.keystore.key"] == key.read_text()


def test_missing_credentials_or_files_are_named_before_any_client_connects(
    tmp_path: Path,
) -> None:
    no_password = Settings(kafka_security_protocol="SASL_SSL", kafka_user="millrace")
    with pytest.raises(ConfigError, match=r"kafka\.password is not set") as raised:
        kafka_client_config(no_password)
    assert "MILLRACE_KAFKA_PASSWORD" in (raised.value.hint or "")
    with pytest.raises(ConfigError, match=r"kafka\.user is not set"):
        spark_kafka_options(Settings(kafka_security_protocol="SASL_PLAINTEXT"))
    no_ca = Settings(kafka_security_protocol="SSL", kafka_ssl_ca_file=str(tmp_path / "ca.pem"))
    with pytest.raises(ConfigError, match=re.escape(f"kafka.ssl_ca_file names {tmp_path}/ca.pem")):
        kafka_client_config(no_ca)
    half = Settings(kafka_security_protocol="SSL", kafka_ssl_key_file=str(tmp_path / "k"))
    with pytest.raises(ConfigError, match=r"needs both kafka\.ssl_certificate_file"):
        spark_kafka_options(half)


def test_publish_tail_a_sql_app_and_a_processor_all_log_in_to_a_sasl_ssl_broker(
    secured_bus: SecuredWorkspace, tmp_path: Path
) -> None:
    bus = secured_bus
    for stream in ("secure.clicks", "secure.big", "secure.doubled"):
        created = bus.millrace("stream", "create", stream, "--buckets", "2")
        assert created.returncode == 0, created.stderr
    events = [{"ts": f"2026-01-01T00:00:{n:02d}Z", "user": f"u{n % 3}", "n": n} for n in range(10)]
    published = bus.millrace(
        "publish", "secure.clicks", "-", "--key", "user", stdin="\n".join(map(json.dumps, events))
    )
    assert published.returncode == 0, published.stderr
    app = tmp_path / "secure_filter.sql"
    app.write_text(
        "CREATE APPLICATION secure_filter;\n"
        "CREATE INPUT TABLE clicks (ts TIMESTAMP, user STRING, n INT) "
        "FROM STREAM('secure.clicks') TIME ts;\n"
        "INSERT INTO STREAM('secure.big') SELECT user, n FROM clicks WHERE n >= 5;\n"
    )
    processor = tmp_path / "doubler.py"
    processor.write_text(
        "from millrace import Input, Processor\n"
        "class Doubler(Processor):\n"
        "    name = 'secure_doubler'\n"
        "    inputs = [Input('secure.big', key='user')]\n"
        "    def on_record(self, key, record, ctx):\n"
        "        ctx.produce('secure.doubled', {'user': key, 'n2': record['n'] * 2}, key=key)\n"
    )

    with _watching_command_lines(bus) as seen:
        checked = bus.millrace("check", str(app))
        filtered = bus.millrace("run", str(app), "--available-now")
        doubled = bus.millrace("run", f"{processor}:Doubler", "--available-now")

    assert checked.returncode == 0, checked.stderr
    assert filtered.returncode == 0, filtered.stderr
    assert doubled.returncode == 0, doubled.stderr
    tailed = bus.millrace("tail", "secure.doubled", "--from-beginning")
    assert tailed.returncode == 0, tailed.stderr
    values = [json.loads(line)["value"] for line in tailed.stdout.splitlines()]
    assert sorted((value["user"], value["n2"]) for value in values) == sorted(
        (event["user"], event["n"] * 2) for event in events if event["n"] >= 5
    )
    # The password is in no output, log, checkpoint, recorded config or command line: only in
    # the local broker's own configuration, which only its user may read.
    assert not [text for text in bus.printed if bus.password in text]
    assert not seen
    [config] = bus.files_holding_password()
    assert config == bus.workspace.kafka_dir / "server.properties"
    assert config.stat().st_mode & 0o777 == 0o600


def test_a_wrong_password_is_named_as_the_refusal_it_is_and_an_app_run_stops_before_spark(
    secured_bus: SecuredWorkspace, tmp_path: Path
) -> None:
    """Each command says the login was refused, not that the bus timed out; an app run says so
    from its look at the bus, before Spark starts a query whose Kafka source would wait."""
    wrong = secured_bus.workspace.root / "wrong-password"
    wrong.write_text("not-the-password\n")
    app = tmp_path / "refused.sql"
    app.write_text(
        "CREATE APPLICATION refused;\n"
        "CREATE INPUT TABLE t (ts TIMESTAMP, n INT) FROM STREAM('secure.any') TIME ts;\n"
        "INSERT INTO STREAM('secure.other') SELECT n FROM t;\n"
    )
    for command in (
        ["stream", "list"],
        ["publish", "secure.any", "-"],
        ["tail", "secure.any"],
        ["run", str(app), "--available-now"],
    ):
        refused = secured_bus.millrace(
            *command, stdin="{}", environment={"MILLRACE_KAFKA_PASSWORD_FILE": str(wrong)}
        )
        assert refused.returncode == 1, refused.stdout
        [error] = [line for line in refused.stderr.splitlines() if line.startswith("error[")]
        assert error.startswith("error[bus]: ") and "Authentication failed" in error
        assert "user 'millrace' (SCRAM-SHA-512)" in refused.stderr
        assert "Traceback" not in refused.stderr
        assert "not-the-password" not in refused.stderr
    assert app_checkpoints(secured_bus.workspace, "refused") == []


def test_a_changed_password_keeps_the_apps_checkpoint(
    secured_bus: SecuredWorkspace, tmp_path: Path
) -> None:
    """The bus's password is rotated between two runs of an app: run with the new one, it
    reads on from its checkpoint, and each event reaches its output once."""
    bus = secured_bus
    for stream in ("rotate.in", "rotate.out"):
        created = bus.millrace("stream", "create", stream, "--buckets", "2")
        assert created.returncode == 0, created.stderr
    app = tmp_path / "rotated.sql"
    app.write_text(
        "CREATE APPLICATION rotated;\n"
        "CREATE INPUT TABLE t (ts TIMESTAMP, n INT) FROM STREAM('rotate.in') TIME ts;\n"
        "INSERT INTO STREAM('rotate.out') SELECT n FROM t;\n"
    )

    def publish(numbers: range, environment: dict[str, str]) -> None:
        lines = [json.dumps({"ts": f"2026-01-01T00:00:{n:02d}Z", "n": n}) for n in numbers]
        published = bus.millrace(
            "publish", "rotate.in", "-", stdin="\n".join(lines), environment=environment
        )
        assert published.returncode == 0, published.stderr

    old_login = {"MILLRACE_KAFKA_PASSWORD_FILE": bus.environment["MILLRACE_KAFKA_PASSWORD_FILE"]}
    publish(range(5), old_login)
    first = bus.millrace("run", str(app), "--available-now")
    assert first.returncode == 0, first.stderr

    new_password = f"pw-{uuid.uuid4().hex}"
    new_password_file = tmp_path / "new-password"
    new_password_file.write_text(new_password + "\n")
    new_login = {"MILLRACE_KAFKA_PASSWORD_FILE": str(new_password_file)}
    _change_password(bus, old_login, new_login, new_password)
    try:
        refused = bus.millrace("stream", "list", environment=old_login)
        publish(range(5, 10), new_login)
        second = bus.millrace("run", str(app), "--available-now", environment=new_login)
        tailed = bus.millrace("tail", "rotate.out", "--from-beginning", environment=new_login)
    finally:
        _change_password(bus, new_login, old_login, bus.password)

    assert refused.returncode == 1 and "Authentication failed" in refused.stderr
    assert second.returncode == 0, second.stderr
    assert tailed.returncode == 0, tailed.stderr
    assert sorted(json.loads(line)["value"]["n"] for line in tailed.stdout.splitlines()) == list(
        range(10)
    )


def _change_password(
    bus: SecuredWorkspace, login: dict[str, str], new_login: dict[str, str], password: str
) -> None:
    """Give the bus's user `password`, logged in with `login`; return once `new_login`
    (whose password file holds it) logs in."""
    settings = Workspace.locate({**os.environ, **bus.environment, **login}).settings
    upsert = UserScramCredentialUpsertion(
        settings.kafka_user,
        ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
        password.encode(),
    )
    for future in admin_client(settings).alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    # The controller has taken the change; the broker applies it a moment later.
    new_settings = Workspace.locate({**os.environ, **bus.environment, **new_login}).settings
    deadline = time.monotonic() + 30
    while True:
        try:
            AdminClient(kafka_client_config(new_settings)).list_topics(timeout=5)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise


class _watching_command_lines:  # noqa: N801 - used as a `with` block
    """Within the block, the command lines that hold the secured bus's password, as `ps`
    would show them, looked at every 0.2 s."""

    def __init__(self, bus: SecuredWorkspace) -> None:
        self._bus = bus
        self._seen: list[str] = []
        self._done = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> list[str]:
        self._watcher.start()
        return self._seen

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._watcher.join()

    def _watch(self) -> None:
        while not self._done.wait(0.2):
            self._seen += self._bus.command_lines_holding_password()


def test_the_production_settings_of_the_operations_page_log_in_as_it_says(
    tmp_path: Path,
) -> None:
    page = Path(__file__).parents[2] / "docs" / "operations.md"
    config = tmp_path / "millrace.toml"
    config.write_text("\n".join(re.findall(r"```toml\n(.*?)```", page.read_text(), re.DOTALL)))
    settings = load_settings(config, {})
    assert settings.bootstrap_servers == "kafka-1.example.com:9093,kafka-2.example.com:9093"
    assert (settings.kafka_security_protocol, settings.kafka_user) == ("SASL_SSL", "millrace")
    assert settings.kafka_password_file == "/etc/millrace/kafka-password"
    assert settings.redis_address == "rediss://cache.example.com:6380/0"
    assert settings.redis_password_file == "/etc/millrace/redis-password"
