"""The pipeline the apps form, read from the bus: each app's output watermark is the newest
watermark its markers published, each stage's watermark is measured against its sources',
and the `watermark_behind_source_seconds` rule fires for the stage too far behind."""

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from millrace.config.alerts import parse_alert_rules
from millrace.config.workspace import Workspace
from millrace.monitor.alerts import AlertEvaluator
from millrace.monitor.service import Monitor
from tests.monitor.chain import WATERMARK_MS, publish_chain


def test_each_stage_of_a_chain_shows_its_output_watermark_and_how_far_it_trails_the_source(
    workspace: Workspace,
) -> None:
    chain = publish_chain(workspace.settings)
    monitor = Monitor(workspace)

    statuses = {status.name: status for status in monitor.statuses(fresh=True)}
    a, b, c = (statuses[chain.apps[letter]] for letter in "abc")

    # A reads a stream no app writes: it is its own source, 0 s behind.
    assert (a.sources, a.watermark_behind_source_seconds) == ([a.name], 0.0)
    # B and C follow their inputs' writers up to A, whose watermark is 10 and 40 s ahead.
    assert (b.sources, b.watermark_behind_source_seconds) == ([a.name], 10.0)
    assert (c.sources, c.watermark_behind_source_seconds) == ([a.name], 40.0)
    # Each app's output watermark is the one its markers promised.
    assert [s.output_watermark_ms for s in (a, b, c)] == [
        WATERMARK_MS[letter] - 1 for letter in "abc"
    ]
    gauges = {
        (family.name, sample.labels.get("app")): sample.value
        for family in text_string_to_metric_families(monitor.exposition().decode())
        for sample in family.samples
    }
    assert gauges["millrace_app_watermark_behind_source_seconds", c.name] == 40.0
    assert gauges["millrace_app_output_watermark_seconds", b.name] == (WATERMARK_MS["b"] - 1) / 1000


def test_the_behind_source_rule_fires_for_the_stage_past_its_threshold(
    workspace: Workspace,
) -> None:
    chain = publish_chain(workspace.settings)
    rules = parse_alert_rules(
        [{"kind": "watermark_behind_source_seconds", "above": 30, "for": "0s"}],
        Path("millrace.toml"),
        "",
    )
    monitor = Monitor(workspace)
    evaluator = AlertEvaluator(rules)

    fired = evaluator.evaluate(monitor.statuses(fresh=True), monitor.metrics)

    [alert] = [alert for alert in fired if alert.app in chain.apps.values()]
    assert (alert.app, alert.state, alert.value) == (chain.apps["c"], "firing", 40.0)
    assert alert.message == (
        "any app watermark_behind_source_seconds: watermark 40.0 s behind its sources "
        f"({chain.apps['a']})"
    )
