import socket
from dataclasses import replace
from pathlib import Path

import pytest

from millrace.bus.broker import broker_status, start_broker, stop_broker
from millrace.bus.streams import list_streams
from millrace.config.settings_loader import LOCAL_BROKER_CA
from millrace.config.workspace import Workspace
from millrace.errors import BrokerError, SetupError


def test_up_and_down_are_safe_to_repeat(fresh_workspace: Workspace) -> None:
    first = start_broker(fresh_workspace)
    try:
        assert first.started_now and first.running
        assert list_streams(fresh_workspace.settings) == []
        again = start_broker(fresh_workspace)
        assert again.running and not again.started_now and again.pid == first.pid
        assert broker_status(fresh_workspace).running
    finally:
        stop_broker(fresh_workspace)
    assert not broker_status(fresh_workspace).running
    assert not stop_broker(fresh_workspace).running


def test_a_taken_port_is_reported_with_the_settings_that_move_it(
    fresh_workspace: Workspace,
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", fresh_workspace.settings.kafka_port))
        squatter.listen()
        with pytest.raises(BrokerError) as raised:
            start_broker(fresh_workspace)
    assert f"port {fresh_workspace.settings.kafka_port} on 127.0.0.1 is in use" in str(raised.value)
    assert "MILLRACE_KAFKA_PORT" in raised.value.hint
    assert not broker_status(fresh_workspace).running


def test_a_broker_that_cannot_start_is_reported_with_its_log(
    fresh_workspace: Workspace,
) -> None:
    broken = _with_settings(fresh_workspace, kafka_heap="lots")
    with pytest.raises(BrokerError, match="exited with status") as raised:
        start_broker(broken)
    assert "Invalid maximum heap size" in str(raised.value)


def test_missing_jars_point_at_the_setup_step(fresh_workspace: Workspace, tmp_path: Path) -> None:
    no_jars = _with_settings(fresh_workspace, jvm_jars_dir=str(tmp_path / "empty"))
    with pytest.raises(SetupError, match="no kafka jars") as raised:
        start_broker(no_jars)
    assert "scripts/setup.sh" in raised.value.hint


def test_with_an_existing_cluster_up_starts_no_broker(workspace: Workspace) -> None:
    external = _with_settings(workspace, kafka_bootstrap=workspace.settings.bootstrap_servers)
    status = start_broker(external)
    assert status.external and not status.started_now and status.pid is None
    assert status.bootstrap_servers == workspace.settings.bootstrap_servers


def _with_settings(workspace: Workspace, **changes: object) -> Workspace:
    return Workspace(workspace.root, replace(workspace.settings, **changes))


def test_a_sasl_listener_is_refused_on_data_made_without_its_scram_user(
    fresh_workspace: Workspace,
) -> None:
    start_broker(fresh_workspace)
    stop_broker(fresh_workspace)
    secured = _with_settings(
        fresh_workspace,
        kafka_security_protocol="SASL_SSL",
        kafka_user="millrace",
        kafka_password="s3cret",
        kafka_ssl_ca_file=str(fresh_workspace.root / LOCAL_BROKER_CA),
    )
    with pytest.raises(BrokerError) as raised:
        start_broker(secured)
    assert (
        f"the local broker's data in {fresh_workspace.kafka_dir / 'data'} holds no SCRAM user, "
        "not the user 'millrace' (SCRAM-SHA-512) that the settings name"
    ) in raised.value.message
    assert "move" in raised.value.hint and "s3cret" not in str(raised.value)
    assert not broker_status(secured).running
