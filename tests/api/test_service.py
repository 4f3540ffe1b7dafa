"""The HTTP service: lag gauges at /metrics, streams and apps as JSON, errors with the CLI's
codes, the bearer token, and an OpenAPI document that a schema-driven fuzzer finds true."""

import hypothesis
import pytest
import schemathesis
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from schemathesis import checks

from millrace.api.app import create_app, serve
from millrace.bus.internal import end_offsets
from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.errors import ConfigError
from tests.monitor.chain import publish_chain


@pytest.fixture(scope="module")
def lagging_app(paused_app: str) -> str:
    return paused_app


@pytest.fixture(scope="module")
def client(workspace: Workspace, lagging_app: str) -> TestClient:
    return TestClient(create_app(workspace))


def test_metrics_expose_the_lag_gauges(client: TestClient, lagging_app: str) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }
    stream = lagging_app.replace("paused_", "paused.in.")
    app_label = (("app", lagging_app),)
    input_labels = (("app", lagging_app), ("stream", stream))
    assert samples[("millrace_app_lag_records", app_label)] == 5
    assert samples[("millrace_input_lag_records", input_labels)] == 5
    assert samples[("millrace_input_lag_seconds", input_labels)] >= 0
    assert samples[("millrace_app_last_batch_id", app_label)] >= 0
    # Its input was published once, with no copies to drop.
    assert samples[("millrace_app_recent_duplicate_rows", app_label)] == 0
    ends = end_offsets(client.app.state.workspace.settings, stream)
    for bucket, end in ends.items():
        labels = (("app", lagging_app), ("bucket", str(bucket)), ("stream", stream))
        assert samples[("millrace_input_end_offset", labels)] == end


def test_apps_and_streams_as_json(
    client: TestClient, workspace: Workspace, lagging_app: str
) -> None:
    app = client.get(f"/apps/{lagging_app}").json()
    stream = lagging_app.replace("paused_", "paused.in.")
    assert app["lag_records"] == 5
    assert [lag["stream"] for lag in app["inputs"]] == [stream]
    assert lagging_app in [listed["name"] for listed in client.get("/apps").json()]

    described = client.get(f"/streams/{stream}").json()
    ends = end_offsets(workspace.settings, stream)
    assert {b["bucket"]: b["end_offset"] for b in described["buckets"]} == ends
    assert described["records"] == 15
    assert stream in [listed["name"] for listed in client.get("/streams").json()]


def test_a_streams_buckets_give_the_records_appended_per_second_over_the_last_minute(
    workspace: Workspace, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name, buckets=2)
    with Publisher(stream_name, settings=workspace.settings) as publisher:
        for n in range(30):
            publisher.send({"n": n}, bucket=0)

    described = TestClient(create_app(workspace)).get(f"/streams/{stream_name}").json()

    rates = {bucket["bucket"]: bucket["records_per_second"] for bucket in described["buckets"]}
    assert rates == {0: 0.5, 1: 0.0}


def test_an_apps_history_details_and_input_records_as_json(
    client: TestClient, lagging_app: str
) -> None:
    stream = lagging_app.replace("paused_", "paused.in.")
    history = client.get(f"/apps/{lagging_app}/history", params={"span_s": 3600}).json()
    figures = {figure["name"]: figure["lines"] for figure in history["figures"]}
    assert history["batches"] >= 1
    [line] = figures["input_rows_per_second"]
    assert line["query"] == f"{lagging_app}.reader" and line["points"]

    details = client.get(f"/apps/{lagging_app}/details").json()
    assert details["deployment"] is None  # run in the foreground, not deployed
    assert {batch["query"] for batch in details["batches"]} == {"reader"}

    records = client.get(f"/streams/{stream}/records", params={"count": 3}).json()
    assert len(records) == 3 and all(0 <= record["value"]["n"] < 15 for record in records)
    arrivals = [record["arrived"] for record in records]
    assert arrivals == sorted(arrivals, reverse=True)
    assert client.get(f"/streams/{stream}/dead-letters").json() == []
    assert client.get(f"/apps/{lagging_app}/tables").json() == []
    assert client.get("/apps/no_such_app/history").status_code == 404


def test_an_app_shows_its_output_watermark_and_how_far_it_trails_its_source(
    workspace: Workspace,
) -> None:
    chain = publish_chain(workspace.settings)
    service = TestClient(create_app(workspace))

    last = service.get(f"/apps/{chain.apps['c']}").json()

    assert last["output_watermark"] == "2026-01-01T00:00:19.999Z"
    assert (last["sources"], last["watermark_behind_source_seconds"]) == ([chain.apps["a"]], 40.0)


def test_errors_carry_the_cli_code_and_hint(client: TestClient) -> None:
    missing = client.get("/streams/no.such.stream")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "stream-not-found"
    assert "millrace stream create" in missing.json()["error"]["hint"]

    bad_name = client.get("/streams/%20bad%20name")
    assert bad_name.status_code == 400
    assert bad_name.json()["error"]["code"] == "bad-request"
    assert "name" in bad_name.json()["error"]["message"]

    no_app = client.get("/apps/no_such_app")
    assert no_app.status_code == 404
    assert no_app.json()["error"] == {
        "code": "app-not-found",
        "message": no_app.json()["error"]["message"],
        "hint": "GET /apps lists the apps; an app appears once it has run a batch",
    }
    assert "no_such_app" in no_app.json()["error"]["message"]


def test_a_token_is_required_when_given(workspace: Workspace, lagging_app: str) -> None:
    guarded = TestClient(create_app(workspace, token="s3cret"))
    refused = guarded.get("/apps")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthorized"
    assert guarded.get("/apps", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert guarded.get("/apps", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_binding_beyond_loopback_without_a_token_is_refused(workspace: Workspace) -> None:
    with pytest.raises(ConfigError) as raised:
        serve(workspace, host="0.0.0.0", port=0, token=None)
    assert "0.0.0.0" in raised.value.message
    assert "--token" in (raised.value.hint or "")


@pytest.mark.parametrize("token", [None, "s3cret"])
def test_the_openapi_document_matches_the_implementation(
    workspace: Workspace, lagging_app: str, redis_url: str, token: str | None
) -> None:
    # Schemathesis's pytest plugin does not run under pytest 9 yet: each operation's cases
    # are drawn with Hypothesis directly, and every check of schemathesis runs on each.
    app = create_app(workspace, token=token)
    headers = {"Authorization": f"Bearer {token}"} if token else None
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers=headers or {})
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {operation.path for operation in operations} >= {
        "/metrics",
        "/streams",
        "/streams/{name}",
        "/apps",
        "/apps/{app}",
        "/alerts",
        "/apps/{app}/tables/{table}",
        "/tables/{table}/{key}",
        "/pipeline",
        "/apps/{app}/history",
        "/apps/{app}/details",
        "/apps/{app}/tables",
        "/streams/{name}/records",
        "/streams/{name}/dead-letters",
        "/alerts/recent",
        "/sql",
    }
    for operation in operations:

        @hypothesis.given(case=operation.as_strategy())
        @hypothesis.settings(
            max_examples=10, deadline=None, suppress_health_check=list(hypothesis.HealthCheck)
        )
        def check(case) -> None:
            # Any text is a schema-valid query, and only SQL's parser tells the good ones: a
            # 400 for `{"query": "0"}` is the right answer, which that check calls a rejection.
            sql = case.operation.path == "/sql"
            excluded = [checks.positive_data_acceptance] if sql else []
            case.call_and_validate(headers=headers, excluded_checks=excluded)

        check()
