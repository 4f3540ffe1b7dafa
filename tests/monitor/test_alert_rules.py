from pathlib import Path

import pytest

from millrace.config.alerts import AlertRule, load_alert_rules
from millrace.config.settings_loader import load_settings
from millrace.errors import ConfigError


def test_rules_are_read_with_their_defaults(tmp_path: Path) -> None:
    config = tmp_path / "millrace.toml"
    config.write_text(
        '[monitor]\nwebhook_url = "http://127.0.0.1:9/hook"\n\n'
        '[[alerts]]\nkind = "lag_seconds"\nabove = 30\nfor = "2m"\n\n'
        '[[alerts]]\nname = "dlq"\nkind = "dead_letter_rate"\napp = "top_events"\n'
        'above = 0.01\nwindow = "10m"\n'
    )
    assert load_settings(config, {}).monitor_webhook_url == "http://127.0.0.1:9/hook"
    assert load_alert_rules(config) == (
        AlertRule("any app lag_seconds", "lag_seconds", "*", 30.0, 120_000, 300_000),
        AlertRule("dlq", "dead_letter_rate", "top_events", 0.01, 0, 600_000),
    )


def test_a_wrong_rule_is_reported_at_its_line(tmp_path: Path) -> None:
    config = tmp_path / "millrace.toml"
    config.write_text(
        '[[alerts]]\nkind = "stopped"\nfor = "1m"\n\n[[alerts]]\nkind = "lag_recrods"\nabove = 3\n'
    )
    with pytest.raises(ConfigError) as raised:
        load_settings(config, {})
    assert raised.value.message == f"alert kind 'lag_recrods' is not known ({config}:5)"
    assert "lag_records" in (raised.value.hint or "")
