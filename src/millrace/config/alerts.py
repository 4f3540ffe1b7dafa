"""Alert rules: the `[[alerts]]` entries of `millrace.toml`.

Each rule names a kind of trouble, the apps it watches, a threshold and how long the trouble
must last before the rule fires. The monitor (`millrace.monitor.alerts`) evaluates them.

Example:
    >>> rules = parse_alert_rules(
    ...     [{"kind": "stopped", "app": "top_events", "for": "5m"}], Path("millrace.toml"), ""
    ... )
    >>> rules[0].name, rules[0].for_ms
    ('top_events stopped', 300000)
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from millrace.config.durations import parse_duration_ms
from millrace.errors import ConfigError

ALERT_KINDS: dict[str, str] = {
    "lag_records": "records the app has yet to read from its inputs, above `above`",
    "lag_seconds": "seconds the app is behind the newest record of an input, above `above`",
    "watermark_lag_seconds": "seconds the watermark is behind the newest event time, above `above`",
    "watermark_behind_source_seconds": (
        "seconds the app's watermark trails the least watermark of its pipeline's sources, "
        "above `above`"
    ),
    "stopped": "no micro-batch for `for` while records wait in the app's inputs",
    "dead_letter_rate": "dead-lettered rows per input row over the last `window`, above `above`",
    "late_rate": "rows dropped as late per input row over the last `window`, above `above`",
}
"""Every kind of rule, and what makes it fire."""

_KEYS = {"name", "kind", "app", "above", "for", "window"}


@dataclass(frozen=True)
class AlertRule:
    """One alert rule; `app` is `*` for every app."""

    name: str
    kind: str
    app: str = "*"
    above: float = 0.0
    for_ms: int = 0
    window_ms: int = 300_000

    def watches(self, app: str) -> bool:
        """True when this rule applies to app `app`."""
        return self.app in ("*", app)


def parse_alert_rules(entries: object, config_file: Path, text: str) -> tuple[AlertRule, ...]:
    """The rules of the `[[alerts]]` entries read from `config_file` (whose text is `text`).

    Raises `ConfigError` naming the file and the line of the entry that is wrong.
    """
    if not isinstance(entries, list):
        raise ConfigError(
            f"'alerts' in {config_file} must be a list of tables, written [[alerts]]",
            hint="write each rule as its own [[alerts]] table; see docs/monitoring.md",
        )
    rules = []
    for index, entry in enumerate(entries):
        where = _where(config_file, text, index)
        if not isinstance(entry, Mapping):
            raise ConfigError(f"an [[alerts]] entry must be a table ({where})", hint=_HINT)
        unknown = sorted(set(entry) - _KEYS)
        if unknown:
            raise ConfigError(
                f"unknown key {unknown[0]!r} in an [[alerts]] entry ({where})",
                hint=f"known keys: {', '.join(sorted(_KEYS))}",
            )
        kind = entry.get("kind")
        if kind not in ALERT_KINDS:
            raise ConfigError(
                f"alert kind {kind!r} is not known ({where})",
                hint=f"choose one of: {', '.join(ALERT_KINDS)}",
            )
        above = entry.get("above", 0.0)
        if isinstance(above, bool) or not isinstance(above, int | float) or above < 0:
            raise ConfigError(f"alerts.above must be a number >= 0 ({where})", hint=_HINT)
        if kind != "stopped" and "above" not in entry:
            raise ConfigError(
                f"an alert of kind {kind!r} needs a threshold 'above' ({where})",
                hint=f"it fires on {ALERT_KINDS[kind]}",
            )
        app = entry.get("app", "*")
        if not isinstance(app, str) or not app:
            raise ConfigError(f"alerts.app must be an app name or '*' ({where})", hint=_HINT)
        name = entry.get("name") or f"{app if app != '*' else 'any app'} {kind}"
        rules.append(
            AlertRule(
                name=str(name),
                kind=kind,
                app=app,
                above=float(above),
                for_ms=_duration(entry.get("for", "0s"), "for", where),
                window_ms=_duration(entry.get("window", "5m"), "window", where),
            )
        )
    return tuple(rules)


def load_alert_rules(config_file: Path) -> tuple[AlertRule, ...]:
    """The rules of `config_file`'s `[[alerts]]` entries; none when the file does not exist.

    The settings loader has checked the file already, so errors here are rare.
    """
    if not config_file.exists():
        return ()
    text = config_file.read_text(encoding="utf-8")
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{config_file} is not valid TOML: {error}", hint=_HINT) from None
    return parse_alert_rules(document.get("alerts", []), config_file, text)


_HINT = "see the alert rules in docs/monitoring.md"


def _duration(value: object, key: str, where: str) -> int:
    if not isinstance(value, str):
        raise ConfigError(
            f"alerts.{key} must be a duration such as '30s' or '5m', got {value!r} ({where})",
            hint=_HINT,
        )
    try:
        return parse_duration_ms(value, what=f"alerts.{key}")
    except ConfigError as error:
        raise ConfigError(f"{error.message} ({where})", hint=error.hint) from None


def _where(config_file: Path, text: str, index: int) -> str:
    """`file:line` of the `index`-th `[[alerts]]` header, or just the file."""
    headers = [
        number
        for number, line in enumerate(text.splitlines(), start=1)
        if re.match(r"\s*\[\[\s*alerts\s*\]\]", line)
    ]
    return f"{config_file}:{headers[index]}" if index < len(headers) else str(config_file)
