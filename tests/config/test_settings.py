import re
from pathlib import Path

import pytest

from millrace.config.settings import SETTINGS, Settings
from millrace.config.settings_loader import load_settings
from millrace.config.workspace import commented_config
from millrace.errors import ConfigError


def test_defaults_apply_when_neither_file_nor_environment_sets_a_value(tmp_path: Path) -> None:
    settings = load_settings(tmp_path / "missing.toml", {})
    assert settings == Settings()
    assert settings.bootstrap_servers == "127.0.0.1:9092"
    assert settings.uses_local_broker


def test_file_values_are_read_and_the_environment_wins_over_them(tmp_path: Path) -> None:
    config = tmp_path / "millrace.toml"
    config.write_text('[kafka]\nport = 19092\n[spark]\nmaster = "local[1]"\n')
    settings = load_settings(config, {"MILLRACE_SPARK_MASTER": "spark://127.0.0.1:7077"})
    assert settings.kafka_port == 19092
    assert settings.spark_master == "spark://127.0.0.1:7077"


def test_millrace_kafka_points_every_client_at_an_existing_cluster() -> None:
    settings = load_settings(None, {"MILLRACE_KAFKA": "127.0.0.1:29092"})
    assert not settings.uses_local_broker
    assert settings.bootstrap_servers == "127.0.0.1:29092"


def test_an_unknown_key_names_the_key_the_file_and_the_line(tmp_path: Path) -> None:
    config = tmp_path / "millrace.toml"
    config.write_text("[kafka]\nport = 9092\nprot = 9093\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(config, {})
    assert "unknown key 'kafka.prot'" in raised.value.message
    assert f"{config}:3" in raised.value.message
    assert "kafka.port" in raised.value.hint


def test_a_value_of_the_wrong_type_names_the_setting_and_its_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(None, {"MILLRACE_KAFKA_PORT": "ninety"})
    assert "kafka.port must be an integer" in raised.value.message
    assert "MILLRACE_KAFKA_PORT" in raised.value.message

    config = tmp_path / "millrace.toml"
    config.write_text("[spark]\nmaster = 7\n")
    with pytest.raises(ConfigError, match=r"spark\.master must be a string"):
        load_settings(config, {})


def test_a_file_that_is_not_toml_is_reported_with_its_path(tmp_path: Path) -> None:
    config = tmp_path / "millrace.toml"
    config.write_text("[kafka\nport = 1\n")
    with pytest.raises(ConfigError, match="is not valid TOML") as raised:
        load_settings(config, {})
    assert str(config) in raised.value.message


def test_every_settings_field_has_a_documented_key_and_variable() -> None:
    assert {setting.attribute for setting in SETTINGS} == set(Settings.__dataclass_fields__)
    assert all(setting.env.startswith("MILLRACE_") and setting.doc for setting in SETTINGS)


def test_the_commented_file_lists_every_setting_and_uncommented_gives_the_defaults(
    tmp_path: Path,
) -> None:
    text = commented_config()
    for setting in SETTINGS:
        assert setting.env in text
    config = tmp_path / "millrace.toml"
    config.write_text(
        "\n".join(line.removeprefix("# ") if " = " in line else line for line in text.splitlines())
    )
    assert load_settings(config, {}) == Settings()


@pytest.mark.parametrize(
    ("variable", "raw", "complaint"),
    [
        ("MILLRACE_SPARK_SHUFFLE_PARTITIONS", "2.5", "spark.shuffle_partitions must be an integer"),
        ("MILLRACE_SPARK_SHUFFLE_PARTITIONS", "-1", "spark.shuffle_partitions must be 0"),
        ("MILLRACE_KAFKA_PORT", "99999", "kafka.port must be a port from 1 to 65535"),
        ("MILLRACE_KAFKA_CONTROLLER_PORT", "0", "kafka.controller_port must be a port"),
        ("MILLRACE_REDIS_PORT", "-6379", "redis.port must be a port"),
        ("MILLRACE_KAFKA_START_TIMEOUT_S", "-5", "kafka.start_timeout_s must be more than 0"),
        ("MILLRACE_LOOKUP_CACHE_S", "-1", "redis.lookup_cache_s must be 0 seconds or more"),
        ("MILLRACE_MONITOR_INTERVAL_S", "0", "monitor.interval_s must be more than 0"),
        ("MILLRACE_MONITOR_INTERVAL_S", "nan", "monitor.interval_s must be a finite number"),
    ],
)
def test_an_out_of_range_or_fractional_number_from_the_environment_is_refused(
    variable: str, raw: str, complaint: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(None, {variable: raw})
    assert complaint in raised.value.message
    assert f"got {raw!r} (environment variable {variable})" in raised.value.message


@pytest.mark.parametrize(
    ("line", "complaint"),
    [
        (
            "[spark]\nshuffle_partitions = 2.5",
            "spark.shuffle_partitions must be an integer, got 2.5",
        ),
        ("[spark]\nshuffle_partitions = -2", "spark.shuffle_partitions must be 0"),
        ("[kafka]\nport = 99999", "kafka.port must be a port from 1 to 65535, got 99999"),
        ("[monitor]\ninterval_s = -1.5", "monitor.interval_s must be more than 0 seconds"),
    ],
)
def test_an_out_of_range_or_fractional_number_in_the_file_names_its_line(
    tmp_path: Path, line: str, complaint: str
) -> None:
    config = tmp_path / "millrace.toml"
    config.write_text(f"# settings\n{line}\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(config, {})
    assert complaint in raised.value.message
    assert f"({config}:3)" in raised.value.message


def test_whole_numbers_keep_working_in_either_form(tmp_path: Path) -> None:
    config = tmp_path / "millrace.toml"
    config.write_text("[spark]\nshuffle_partitions = 4.0\n[redis]\nlookup_cache_s = 0\n")
    settings = load_settings(config, {"MILLRACE_KAFKA_PORT": "19092"})
    assert (settings.spark_shuffle_partitions, settings.kafka_port) == (4, 19092)
    assert settings.redis_lookup_cache_s == 0.0


def test_a_file_that_is_not_utf8_names_the_file_line_and_byte(tmp_path: Path) -> None:
    config = tmp_path / "millrace.toml"
    config.write_bytes(b'[kafka]\nheap = "1\xffg"\n')
    with pytest.raises(ConfigError) as raised:
        load_settings(config, {})
    assert f"{config}:2 is not valid UTF-8: byte 17 (0xff)" in raised.value.message
    assert "UTF-8" in (raised.value.hint or "")


def test_kafka_security_is_read_from_the_file_in_kafkas_spelling_with_files_in_the_workspace(
    tmp_path: Path,
) -> None:
    config = tmp_path / "millrace.toml"
    config.write_text(
        '[kafka]\nbootstrap = "kafka.example.com:9093"\nsecurity_protocol = "sasl_ssl"\n'
        'sasl_mechanism = "scram-sha-256"\nuser = "millrace"\npassword_file = "secrets/kafka"\n'
        'ssl_ca_file = "/etc/ssl/company-ca.pem"\n'
    )
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "kafka").write_text("pass word\n")
    settings = load_settings(config, {})
    assert (settings.kafka_security_protocol, settings.kafka_sasl_mechanism) == (
        "SASL_SSL",
        "SCRAM-SHA-256",
    )
    assert settings.kafka_password_file == str(tmp_path / "secrets" / "kafka")
    assert settings.kafka_ssl_ca_file == "/etc/ssl/company-ca.pem"
    assert settings.kafka_sasl_password == "pass word"


def test_the_kafka_password_comes_from_the_environment_and_never_shows_in_the_settings() -> None:
    settings = load_settings(None, {"MILLRACE_KAFKA_PASSWORD": "hunter2-secret"})
    assert settings.kafka_sasl_password == "hunter2-secret"
    assert "hunter2-secret" not in repr(settings)


def test_the_local_brokers_clients_trust_the_ca_that_millrace_up_makes(tmp_path: Path) -> None:
    settings = load_settings(
        tmp_path / "millrace.toml", {"MILLRACE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}
    )
    assert settings.kafka_ssl_ca_file == str(tmp_path / "kafka" / "tls" / "ca.pem")
    external = load_settings(
        tmp_path / "millrace.toml",
        {"MILLRACE_KAFKA_SECURITY_PROTOCOL": "SSL", "MILLRACE_KAFKA": "kafka.example.com:9093"},
    )
    assert external.kafka_ssl_ca_file == ""


def test_an_unknown_protocol_or_mechanism_names_the_choices_and_the_line(tmp_path: Path) -> None:
    config = tmp_path / "millrace.toml"
    config.write_text('[kafka]\nsecurity_protocol = "TLS"\n')
    with pytest.raises(ConfigError) as raised:
        load_settings(config, {})
    assert (
        "kafka.security_protocol must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, "
        f"got 'TLS' ({config}:2)"
    ) in raised.value.message
    with pytest.raises(ConfigError, match="MILLRACE_KAFKA_SASL_MECHANISM"):
        load_settings(None, {"MILLRACE_KAFKA_SASL_MECHANISM": "GSSAPI"})


def test_a_password_set_twice_or_in_an_unreadable_file_is_refused_without_showing_it(
    tmp_path: Path,
) -> None:
    twice = load_settings(
        None, {"MILLRACE_KAFKA_PASSWORD": "hunter2-secret", "MILLRACE_KAFKA_PASSWORD_FILE": "x"}
    )
    both = r"both kafka\.password and kafka\.password_file"
    with pytest.raises(ConfigError, match=both) as raised:
        _ = twice.kafka_sasl_password
    assert "hunter2-secret" not in str(raised.value)
    missing = load_settings(tmp_path / "millrace.toml", {"MILLRACE_KAFKA_PASSWORD_FILE": "nope"})
    with pytest.raises(ConfigError, match=re.escape(f"cannot read kafka.password_file {tmp_path}")):
        _ = missing.kafka_sasl_password


def test_the_redis_login_and_ca_go_into_the_url_clients_use_never_into_the_one_shown(
    tmp_path: Path,
) -> None:
    settings = load_settings(
        tmp_path / "millrace.toml",
        {
            "MILLRACE_REDIS": "rediss://cache.example.com:6380/0",
            "MILLRACE_REDIS_USER": "app",
            "MILLRACE_REDIS_PASSWORD": "p@ss/word",
            "MILLRACE_REDIS_SSL_CA_FILE": "ca.pem",
        },
    )
    ca = str(tmp_path / "ca.pem").replace("/", "%2F")
    assert settings.redis == (
        f"rediss://app:p%40ss%2Fword@cache.example.com:6380/0?ssl_ca_certs={ca}"
    )
    assert settings.redis_address == "rediss://cache.example.com:6380/0"
    assert "p@ss/word" not in repr(settings)
    in_the_url = load_settings(None, {"MILLRACE_REDIS": "redis://:s3cret@10.0.0.7:6379/1"})
    assert in_the_url.redis == "redis://:s3cret@10.0.0.7:6379/1"
    assert in_the_url.redis_address == "redis://10.0.0.7:6379/1"
