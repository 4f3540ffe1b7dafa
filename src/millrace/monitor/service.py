"""The monitor as one object: apps' statuses, refreshed on demand, and their alerts.

`millrace serve`, `millrace top` and `millrace monitor` each hold one `Monitor`. Apps are
those with a checkpoint in the workspace and those that published batches lately.
"""

from __future__ import annotations

import logging
import threading
import time

from millrace.config.alerts import load_alert_rules
from millrace.config.workspace import Workspace
from millrace.errors import MillraceError
from millrace.monitor.alerts import Alert, AlertEvaluator
from millrace.monitor.metrics_log import MetricsLog
from millrace.monitor.pipeline import StreamWriters, with_pipeline
from millrace.monitor.prometheus import exposition
from millrace.monitor.status import AppStatus, app_status
from millrace.ops.checkpoints import app_names

_log = logging.getLogger(__name__)


class Monitor:
    """Statuses and alerts of a workspace's apps."""

    def __init__(self, workspace: Workspace, *, max_age_s: float = 1.0) -> None:
        self.workspace = workspace
        self.metrics = MetricsLog(workspace.settings)
        self.writers = StreamWriters(workspace.settings)
        self.alerts = AlertEvaluator(
            load_alert_rules(workspace.config_file),
            webhook_url=workspace.settings.monitor_webhook_url,
        )
        self.max_age_s = max_age_s
        self._statuses: list[AppStatus] = []
        self._at = 0.0
        self._lock = threading.Lock()

    def app_names(self) -> list[str]:
        """The apps known from checkpoints or from recent batches, sorted."""
        return sorted(set(app_names(self.workspace)) | set(self.metrics.apps()))

    def statuses(self, *, fresh: bool = False) -> list[AppStatus]:
        """Every app's status, at most `max_age_s` old (new when `fresh`)."""
        with self._lock:
            if fresh or time.monotonic() - self._at > self.max_age_s:
                now_ms = int(time.time() * 1000)
                self.metrics.refresh(now_ms)
                statuses = [
                    app_status(self.workspace, app, self.metrics, now_ms=now_ms)
                    for app in self.app_names()
                ]
                self._statuses = with_pipeline(statuses, self.writers.refresh())
                self._at = time.monotonic()
            return list(self._statuses)

    def status(self, app: str) -> AppStatus | None:
        """The status of `app`, or None when the monitor knows no such app."""
        return next((status for status in self.statuses() if status.name == app), None)

    def evaluate_alerts(self) -> list[Alert]:
        """Check the alert rules now; the alerts that fired or resolved."""
        return self.alerts.evaluate(self.statuses(fresh=True), self.metrics)

    def exposition(self) -> bytes:
        """The Prometheus text of every app's figures and the firing alerts."""
        statuses = self.statuses()
        return exposition(statuses, self.alerts.firing, int(time.time() * 1000))

    def run_alerts(self, stop: threading.Event, interval_s: float | None = None) -> None:
        """Evaluate the alert rules every `interval_s` until `stop` is set."""
        interval_s = interval_s or self.workspace.settings.monitor_interval_s
        while not stop.is_set():
            try:
                self.evaluate_alerts()
            except MillraceError as error:
                _log.warning("alert evaluation failed: %s", error.render())
            except Exception:
                # The evaluation loop outlives a bad round; the next one tries again.
                _log.exception("alert evaluation failed")
            stop.wait(interval_s)
