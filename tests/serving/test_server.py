import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import redis

from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.settings import Settings
from millrace.config.workspace import Workspace
from millrace.errors import ServingError
from millrace.serving.tables import TableSpec, create_table, get_row, write_rows
from tests.ports import free_port
from tests.secured_workspace import SecuredWorkspace


def test_a_table_is_fed_and_read_through_a_local_redis_that_wants_an_acl_users_password(
    secured_redis: SecuredWorkspace, workspace: Workspace, stream_name: str
) -> None:
    port = secured_redis.workspace.settings.redis_port
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port).ping()  # no login: the default user is off
    create_stream(workspace.settings, stream_name, buckets=2)
    with Publisher(stream_name, settings=workspace.settings) as publisher:
        for n in range(20):
            publisher.send({"user": f"u{n % 4}", "visits": n}, key=f"u{n % 4}")
    table = f"visits_{uuid.uuid4().hex[:8]}"

    fed = secured_redis.millrace(
        "table", "create", table, "--from-stream", stream_name, "--key", "user",
        "--value", "visits:BIGINT", "--available-now",
    )  # fmt: skip
    assert fed.returncode == 0, fed.stderr
    assert "20 rows written" in fed.stdout
    got = secured_redis.millrace("table", "get", table, "u3")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == {"user": "u3", "visits": 19}

    wrong = secured_redis.workspace.root / "wrong-password"
    wrong.write_text("not-the-password\n")
    refused = secured_redis.millrace(
        "table", "get", table, "u3", environment={"MILLRACE_REDIS_PASSWORD_FILE": str(wrong)}
    )
    assert refused.returncode == 1
    assert refused.stderr.startswith(
        f"error[serving]: Redis at redis://127.0.0.1:{port}/0 refused the login of user 'feeder'"
    ), refused.stderr
    assert "Traceback" not in refused.stderr
    # The password is in no output, log or status line: only in Redis's own configuration,
    # which only its user may read.
    status = secured_redis.millrace("status")
    assert f"redis://127.0.0.1:{port}/0" in status.stdout
    assert not [text for text in secured_redis.printed if secured_redis.password in text]
    [config] = secured_redis.files_holding_password()
    assert config == secured_redis.workspace.redis_dir / "redis.conf"
    assert config.stat().st_mode & 0o777 == 0o600


def test_a_rediss_url_reaches_a_tls_redis_trusting_the_ca_file_and_logging_in(
    tmp_path: Path,
) -> None:
    ca, server_key, server_certificate = _certificates(tmp_path)
    port = free_port()
    config = tmp_path / "redis.conf"
    config.write_text(
        f'port 0\ntls-port {port}\nbind 127.0.0.1\nsave ""\ndir {tmp_path}\n'
        f"tls-cert-file {server_certificate}\ntls-key-file {server_key}\n"
        f"tls-ca-cert-file {ca}\ntls-auth-clients no\n"
        'user default off\nuser reader on ">tls pass" ~* &* +@all\n'
    )
    server = subprocess.Popen(
        ["redis-server", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    try:
        settings = Settings(
            redis_url=f"rediss://127.0.0.1:{port}/0",
            redis_user="reader",
            redis_password="tls pass",
            redis_ssl_ca_file=str(ca),
        )
        spec = TableSpec("tls_table", (("k", "STRING"),), (("v", "BIGINT"),))
        _wait_for_ping(settings)
        create_table(settings, spec)
        assert write_rows(settings.redis, spec, {"k": ["a"], "v": [7]}) == 1
        assert get_row(settings, "tls_table", "a") == {"k": "a", "v": 7}
        untrusted = Settings(
            redis_url=settings.redis_url, redis_user="reader", redis_password="tls pass"
        )
        with pytest.raises(ServingError, match="certificate verify failed"):
            get_row(untrusted, "tls_table", "a")
    finally:
        server.terminate()
        server.wait()


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server key and certificate for 127.0.0.1 that it signed, made by openssl."""
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    key, request, certificate = folder / "server.key", folder / "server.csr", folder / "server.pem"
    for step in (
        ["req", "-x509", "-newkey", "rsa:2048", "-noenc", "-keyout", ca_key, "-out", ca,
         "-days", "1", "-subj", "/CN=test CA"],
        ["req", "-newkey", "rsa:2048", "-noenc", "-keyout", key, "-out", request,
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        ["x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-out", certificate, "-days", "1", "-copy_extensions", "copy"],
    ):  # fmt: skip
        subprocess.run(["openssl", *map(str, step)], capture_output=True, check=True)
    return ca, key, certificate


def _wait_for_ping(settings: Settings) -> None:
    client = redis.Redis.from_url(settings.redis)
    for _ in range(100):
        try:
            client.ping()
            return
        except redis.ConnectionError:
            time.sleep(0.05)
    client.ping()
