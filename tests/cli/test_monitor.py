"""`millrace top --once` and `millrace monitor --once` on a paused app: the lag shows, and
the `stopped` rule whose threshold the pause passed fires to a webhook on loopback."""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from millrace.config.workspace import Workspace
from tests.monitor.chain import publish_chain
from tests.ports import free_port


@pytest.fixture(scope="module")
def paused(paused_app: str) -> str:
    return paused_app


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict]]]:
    """A webhook receiver on 127.0.0.1: its URL, and the JSON bodies POSTed to it."""
    received: list[dict] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            received.append(json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    server.shutdown()
    server.server_close()
    thread.join()


def watching_home(workspace: Workspace, tmp_path: Path, config: str) -> dict[str, str]:
    """A workspace of its own config, seeing the test workspace's apps; its environment."""
    home = tmp_path / "watching"
    home.mkdir()
    (home / "checkpoints").symlink_to(workspace.checkpoints_dir)
    (home / "millrace.toml").write_text(config)
    return {"MILLRACE_HOME": str(home), "MILLRACE_KAFKA_PORT": os.environ["MILLRACE_KAFKA_PORT"]}


def test_top_once_shows_the_paused_app_with_its_lag(
    workspace: Workspace,
    paused: str,
    tmp_path: Path,
    millrace: Callable[..., CompletedProcess[str]],
) -> None:
    environment = watching_home(workspace, tmp_path, "")
    result = millrace("top", "--once", environment={**environment, "COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    [row] = [line for line in result.stdout.splitlines() if paused in line]
    cells = [cell.strip() for cell in row.strip("│┃ ").split("│")]
    assert cells[0] == paused
    assert cells[5] == "5"  # lag records: published after the app stopped


def test_a_paused_app_fires_the_stopped_alert_to_the_webhook(
    workspace: Workspace,
    paused: str,
    tmp_path: Path,
    webhook: tuple[str, list[dict]],
    millrace_subprocess: Callable[..., CompletedProcess[str]],
) -> None:
    url, received = webhook
    config = (
        f'[monitor]\nwebhook_url = "{url}"\n\n'
        f'[[alerts]]\nname = "paused too long"\nkind = "stopped"\napp = "{paused}"\n'
        'for = "1s"\n\n'
        f'[[alerts]]\nname = "paused for hours"\nkind = "stopped"\napp = "{paused}"\n'
        'for = "1h"\n\n'
        f'[[alerts]]\nname = "far behind"\nkind = "lag_records"\napp = "{paused}"\n'
        "above = 100\n"
    )
    environment = watching_home(workspace, tmp_path, config)
    result = millrace_subprocess("monitor", "--once", environment=environment)
    assert result.returncode == 0, result.stderr
    assert [(alert["rule"], alert["app"], alert["state"]) for alert in received] == [
        ("paused too long", paused, "firing")
    ]
    [alert] = received
    assert alert["kind"] == "stopped" and alert["value"] > 1
    assert "5 records wait" in alert["message"]
    assert "firing: paused too long: no batch for" in result.stdout


def test_serve_answers_on_loopback_and_refuses_other_addresses_without_a_token(
    workspace: Workspace,
    paused: str,
    tmp_path: Path,
    millrace: Callable[..., CompletedProcess[str]],
) -> None:
    environment = watching_home(workspace, tmp_path, "")
    refused = millrace("serve", "--host", "0.0.0.0", environment=environment)
    assert refused.returncode == 1
    assert refused.stderr.startswith("error[config]: millrace serve binds to 0.0.0.0")
    assert "Traceback" not in refused.stderr

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "millrace.cli.main", "serve", "--port", str(port)],
        env={**os.environ, **environment},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        apps = None
        while apps is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/apps", timeout=30) as answer:
                    apps = json.loads(answer.read())
            except OSError:
                time.sleep(0.5)
        assert apps is not None, "millrace serve did not answer"
        [app] = [app for app in apps if app["name"] == paused]
        assert app["lag_records"] == 5
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_top_once_shows_each_apps_output_watermark_and_how_far_it_trails_its_source(
    workspace: Workspace, tmp_path: Path, millrace: Callable[..., CompletedProcess[str]]
) -> None:
    chain = publish_chain(workspace.settings)
    environment = watching_home(workspace, tmp_path, "")

    result = millrace("top", "--once", environment={**environment, "COLUMNS": "300"})

    assert result.returncode == 0, result.stderr
    [header] = [line for line in result.stdout.splitlines() if "out watermark" in line]
    columns = [cell.strip() for cell in header.strip("│┃ ").split("┃")]
    rows = {
        cells[0]: dict(zip(columns, cells, strict=True))
        for line in result.stdout.splitlines()
        if "chain_" in line
        for cells in [[cell.strip() for cell in line.strip("│┃ ").split("│")]]
    }
    source, middle = rows[chain.apps["a"]], rows[chain.apps["b"]]
    assert (source["out watermark"], source["behind source s"]) == ("00:00:59.999", "0.0")
    assert (middle["out watermark"], middle["behind source s"]) == ("00:00:49.999", "10.0")
