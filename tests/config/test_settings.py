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
