from pathlib import Path

import pytest

from millrace.config.settings import SETTINGS, Settings, load_settings
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
