"""The alert configuration and webhook payload of docs/monitoring.md are as the page shows."""

import json
import re
from dataclasses import asdict
from pathlib import Path

from millrace.config.alerts import load_alert_rules
from millrace.config.settings_loader import load_settings
from millrace.monitor.alerts import Alert

PAGE = Path(__file__).parents[2] / "docs" / "monitoring.md"


def test_the_documented_config_loads(tmp_path: Path) -> None:
    [block] = re.findall(r"```toml\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    config = tmp_path / "millrace.toml"
    config.write_text(block)
    settings = load_settings(config, {})
    assert settings.monitor_webhook_url == "http://127.0.0.1:9000/alerts"
    rules = load_alert_rules(config)
    assert [rule.kind for rule in rules] == [
        "lag_records",
        "lag_seconds",
        "watermark_behind_source_seconds",
        "stopped",
        "dead_letter_rate",
        "late_rate",
    ]
    assert rules[0].app == "top_events" and rules[0].for_ms == 120_000
    assert rules[2].above == 120.0 and rules[2].for_ms == 300_000
    assert rules[4].window_ms == 600_000


def test_the_documented_webhook_payload_is_an_alert_as_posted() -> None:
    [block] = re.findall(r"```json\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    payload = json.loads(block)
    assert json.loads(json.dumps(asdict(Alert(**payload)))) == payload
    assert payload["state"] in ("firing", "resolved")
