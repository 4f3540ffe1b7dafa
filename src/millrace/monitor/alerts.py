"""Evaluating the alert rules of `millrace.toml` against the apps' status.

A rule's condition must hold for the rule's `for` before the rule fires (a `stopped` rule's
`for` is the time without a batch, so it fires as soon as that is true). A firing alert is
logged and, when `monitor.webhook_url` is set, POSTed to it as JSON; once its condition no
longer holds it resolves, which is logged and posted too. An alert fires once per episode.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import asdict, dataclass

from millrace.config.alerts import AlertRule
from millrace.monitor.metrics_log import MetricsLog
from millrace.monitor.status import AppStatus

_log = logging.getLogger(__name__)
_WEBHOOK_TIMEOUT_S = 5.0
RECENT_ALERTS = 100
"""How many of the latest alerts that fired or resolved an evaluator keeps."""


@dataclass(frozen=True)
class Alert:
    """An alert that fired or resolved: what the webhook receives, as JSON."""

    rule: str
    kind: str
    app: str
    state: str
    """`firing` or `resolved`."""
    value: float
    threshold: float
    since_ms: int
    time_ms: int
    message: str


class AlertEvaluator:
    """Keeps the state of every rule and app between evaluations.

    Example:
        >>> from pathlib import Path
        >>> from millrace.config.alerts import parse_alert_rules
        >>> from millrace.config.settings import Settings
        >>> from millrace.monitor.status import InputLag
        >>> rules = parse_alert_rules(
        ...     [{"kind": "stopped", "app": "top_events", "for": "5m"}], Path("millrace.toml"), ""
        ... )
        >>> waiting = [InputLag("clicks", {0: 1300}, {0: 100}, lag_records=1200, lag_seconds=40.0)]
        >>> stuck = AppStatus("top_events", [], waiting, "stalled", last_batch_ms=0)
        >>> evaluator = AlertEvaluator(rules)
        >>> fired = evaluator.evaluate([stuck], MetricsLog(Settings()), now_ms=312_000)
        >>> [alert.message for alert in fired]
        ['top_events stopped: no batch for 312 s while 1200 records wait']
    """

    def __init__(self, rules: tuple[AlertRule, ...], *, webhook_url: str = "") -> None:
        self.rules = rules
        self.webhook_url = webhook_url
        self.webhook_failures = 0
        self._since: dict[tuple[str, str], int] = {}
        self._firing: dict[tuple[str, str], Alert] = {}
        self._recent: deque[Alert] = deque(maxlen=RECENT_ALERTS)
        self._lock = threading.Lock()

    @property
    def firing(self) -> list[Alert]:
        """The alerts firing now."""
        with self._lock:
            return list(self._firing.values())

    @property
    def recent(self) -> list[Alert]:
        """The latest alerts that fired or resolved (at most `RECENT_ALERTS`), newest first."""
        with self._lock:
            return list(reversed(self._recent))

    def evaluate(
        self, statuses: list[AppStatus], metrics: MetricsLog, *, now_ms: int | None = None
    ) -> list[Alert]:
        """Check every rule against every app; the alerts that fired or resolved now."""
        now_ms = now_ms or int(time.time() * 1000)
        changed: list[Alert] = []
        with self._lock:
            for rule in self.rules:
                for status in statuses:
                    if rule.watches(status.name):
                        alert = self._check(rule, status, metrics, now_ms)
                        if alert is not None:
                            changed.append(alert)
            self._recent.extend(changed)
        for alert in changed:
            log = _log.warning if alert.state == "firing" else _log.info
            log("alert %s: %s", alert.state, alert.message)
            self._post(alert)
        return changed

    def _check(
        self, rule: AlertRule, status: AppStatus, metrics: MetricsLog, now_ms: int
    ) -> Alert | None:
        key = (rule.name, status.name)
        value, holds, text = _condition(rule, status, metrics, now_ms)
        if not holds:
            self._since.pop(key, None)
            fired = self._firing.pop(key, None)
            if fired is None:
                return None
            return Alert(
                rule.name,
                rule.kind,
                status.name,
                "resolved",
                value,
                rule.above,
                fired.since_ms,
                now_ms,
                f"{rule.name}: resolved ({text})",
            )
        since = self._since.setdefault(key, now_ms)
        hold_ms = 0 if rule.kind == "stopped" else rule.for_ms
        if key in self._firing or now_ms - since < hold_ms:
            return None
        alert = Alert(
            rule.name,
            rule.kind,
            status.name,
            "firing",
            value,
            rule.above,
            since,
            now_ms,
            f"{rule.name}: {text}",
        )
        self._firing[key] = alert
        return alert

    def _post(self, alert: Alert) -> None:
        if not self.webhook_url:
            return
        request = urllib.request.Request(
            self.webhook_url,
            data=json.dumps(asdict(alert)).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=_WEBHOOK_TIMEOUT_S) as response:
                response.read()
        except (urllib.error.URLError, OSError) as error:
            # An unreachable webhook must not stop the monitor; the alert is in the log.
            self.webhook_failures += 1
            _log.warning("alert %s not posted to %s: %s", alert.rule, self.webhook_url, error)


def _condition(
    rule: AlertRule, status: AppStatus, metrics: MetricsLog, now_ms: int
) -> tuple[float, bool, str]:
    """The rule's measured value, whether its condition holds, and a sentence saying so."""
    if rule.kind == "lag_records":
        value = float(status.lag_records)
        return value, value > rule.above, f"{status.lag_records} records behind"
    if rule.kind == "lag_seconds":
        value = status.lag_seconds
        return value, value > rule.above, f"{value:.1f} s behind the newest record"
    if rule.kind == "watermark_lag_seconds":
        lag = status.watermark_lag_seconds
        value = lag if lag is not None else 0.0
        return value, value > rule.above, f"watermark {value:.1f} s behind the newest event"
    if rule.kind == "watermark_behind_source_seconds":
        behind = status.watermark_behind_source_seconds
        value = behind if behind is not None else 0.0
        sources = ", ".join(status.sources)
        return value, value > rule.above, f"watermark {value:.1f} s behind its sources ({sources})"
    if rule.kind == "stopped":
        if status.last_batch_ms is None:
            waiting = status.lag_records > 0
            return 0.0, waiting, f"no batch yet while {status.lag_records} records wait"
        idle_s = (now_ms - status.last_batch_ms) / 1000
        holds = idle_s * 1000 > rule.for_ms and status.lag_records > 0
        return (
            idle_s,
            holds,
            f"no batch for {idle_s:.0f} s while {status.lag_records} records wait",
        )
    batches = metrics.batches(status.name, since_ms=now_ms - rule.window_ms)
    if rule.kind == "late_rate":
        value = status.late_ratio(batches)
        return value, value > rule.above, f"{value:.2%} of input rows dropped as late"
    value = status.dead_letter_ratio(batches)
    return value, value > rule.above, f"{value:.2%} of input rows dead-lettered"
