"""Alerts over time: what fired and what resolved is kept, newest first, for the dashboard's
alerts page, besides the alerts firing now."""

from millrace.config.alerts import AlertRule
from millrace.config.settings import Settings
from millrace.monitor.alerts import RECENT_ALERTS, AlertEvaluator
from millrace.monitor.metrics_log import MetricsLog
from millrace.monitor.status import AppStatus, InputLag

RULE = AlertRule("behind", "lag_records", "*", 100.0, 0, 300_000)


def lagging(records: int) -> AppStatus:
    lag = InputLag("clicks", {0: records}, {0: 0}, records, 1.0)
    return AppStatus("counter", ["counts"], [lag], "processing")


def test_alerts_that_fired_and_resolved_are_kept_newest_first(settings: Settings) -> None:
    evaluator = AlertEvaluator((RULE,))
    metrics = MetricsLog(settings)

    evaluator.evaluate([lagging(500)], metrics, now_ms=1_000)
    evaluator.evaluate([lagging(600)], metrics, now_ms=2_000)
    assert [alert.state for alert in evaluator.recent] == ["firing"]
    evaluator.evaluate([lagging(0)], metrics, now_ms=3_000)

    assert [(alert.state, alert.time_ms) for alert in evaluator.recent] == [
        ("resolved", 3_000),
        ("firing", 1_000),
    ]
    assert evaluator.firing == []


def test_only_the_latest_alerts_are_kept(settings: Settings) -> None:
    evaluator = AlertEvaluator((RULE,))
    metrics = MetricsLog(settings)
    for n in range(RECENT_ALERTS):
        evaluator.evaluate([lagging(500)], metrics, now_ms=n * 2_000 + 1)
        evaluator.evaluate([lagging(0)], metrics, now_ms=n * 2_000 + 2)

    assert len(evaluator.recent) == RECENT_ALERTS
    assert evaluator.recent[0].time_ms == (RECENT_ALERTS - 1) * 2_000 + 2
