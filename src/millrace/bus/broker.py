"""The local Kafka bus: KRaft nodes started from the resolved jars, data in the workspace.

`millrace up` calls `start_broker`, `millrace down` calls `stop_broker`, `millrace status`
calls `broker_status`. Each node runs as a detached background process, so it outlives the
command that started it; the first node's pid, configuration, data and logs live in
`<workspace>/kafka/`. With `kafka.brokers` at 3, a cluster of three nodes runs instead, each
a broker and a controller of one KRaft quorum, node N on `kafka.port` + 2(N - 1) and its
controller on `kafka.controller_port` + 2(N - 1) (with the default ports: 9092 and 9093,
9094 and 9095, 9096 and 9097), nodes 2 and 3 in `<workspace>/kafka/node-N/`: a cluster that
survives the loss of one node, for trying what a replicated bus does.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from confluent_kafka.admin import AdminClient

from millrace.bus.client_config import kafka_client_config, kafka_jaas_config
from millrace.config.jvm import jars, java_executable
from millrace.config.local_processes import live_command_line, loopback_port_is_free, stop_processes
from millrace.config.settings import Settings
from millrace.config.workspace import Workspace
from millrace.errors import BrokerError

_STOP_GRACE_S = 30.0
_SCRAM_ITERATIONS = 8192
_CERTIFICATE_DAYS = 3650
_LOG_EXCERPT_LINES = 25


@dataclass(frozen=True)
class BrokerStatus:
    """What `millrace status` shows about the bus."""

    bootstrap_servers: str
    running: bool
    external: bool
    pid: int | None = None
    started_now: bool = False
    node_pids: tuple[int | None, ...] = ()


def start_broker(workspace: Workspace) -> BrokerStatus:
    """Start the workspace's broker and wait until it accepts clients.

    Starts nothing when `kafka.bootstrap` points at an existing cluster, or when the broker
    already runs. Raises `BrokerError`, with an excerpt of the broker's log, when a port is
    taken or the broker dies or does not become ready in `kafka.start_timeout_s`.
    """
    settings = workspace.settings
    current = broker_status(workspace)
    if current.external or current.running:
        return current
    nodes = _nodes(workspace)
    for paths in nodes:
        if paths.running_pid() is None:
            for port in (paths.port, paths.controller_port):
                _require_free_port(port)
    classpath = os.pathsep.join(str(jar) for jar in jars(settings, "kafka"))
    if settings.kafka_uses_tls:
        _make_certificates(nodes[0].tls, workspace.local_broker_ca)
    # The nodes of one cluster are formatted with its one id.
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    started = []
    for paths in nodes:
        paths.write_config(settings, nodes[0].tls)
        if not (paths.data / "meta.properties").exists():
            _format_storage(paths, classpath, settings, cluster_id)
        _require_same_login(paths, settings)
        if paths.running_pid() is None:
            started.append((_start_node(paths, classpath, settings), paths))
    _wait_until_ready(started, settings, len(nodes))
    return replace(broker_status(workspace), started_now=True)


def _start_node(paths: _BrokerPaths, classpath: str, settings: Settings) -> subprocess.Popen[bytes]:
    """Start one node of the bus, detached, its pid in its pid file."""
    paths.logs.mkdir(parents=True, exist_ok=True)
    with open(paths.console_log, "ab") as console:
        process = subprocess.Popen(
            [
                java_executable(),
                f"-Xmx{settings.kafka_heap}",
                f"-Xms{settings.kafka_heap}",
                "-XX:+UseG1GC",
                "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={paths.log_config}",
                f"-Dkafka.logs.dir={paths.logs}",
                "-cp",
                classpath,
                "kafka.Kafka",
                str(paths.config),
            ],
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    paths.pid_file.write_text(str(process.pid))
    return process


def stop_broker(workspace: Workspace) -> BrokerStatus:
    """Stop the workspace's brokers cleanly (SIGTERM, then SIGKILL after 30 s); safe to repeat."""
    status = broker_status(workspace)
    if not status.external:
        nodes = _nodes(workspace)
        running = [pid for pid in (paths.running_pid() for paths in nodes) if pid is not None]
        stop_processes(running, _STOP_GRACE_S)
        for paths in nodes:
            paths.pid_file.unlink(missing_ok=True)
    return BrokerStatus(status.bootstrap_servers, False, status.external)


def broker_status(workspace: Workspace) -> BrokerStatus:
    """Whether the workspace's brokers all run, judged by their pid files and processes.

    `pid` is the first node's; `node_pids` has each node's, None for one that is down.
    """
    settings = workspace.settings
    if not settings.uses_local_broker:
        return BrokerStatus(settings.bootstrap_servers, True, True)
    pids = tuple(paths.running_pid() for paths in _nodes(workspace))
    running = all(pid is not None for pid in pids)
    return BrokerStatus(settings.bootstrap_servers, running, False, pids[0], node_pids=pids)


def _nodes(workspace: Workspace) -> list[_BrokerPaths]:
    """The files and ports of each node of the workspace's local bus, the first one first."""
    settings = workspace.settings
    return [
        _BrokerPaths(
            workspace.kafka_node_dir(node),
            node,
            settings.kafka_port + 2 * (node - 1),
            settings.kafka_controller_port + 2 * (node - 1),
        )
        for node in range(1, settings.kafka_brokers + 1)
    ]


class _BrokerPaths:
    """The files and ports of one node of the local bus, under `<workspace>/kafka/`."""

    def __init__(self, root: Path, node: int, port: int, controller_port: int) -> None:
        self.root = root
        self.node = node
        self.port = port
        self.controller_port = controller_port
        self.data = root / "data"
        self.logs = root / "logs"
        self.config = root / "server.properties"
        self.log_config = root / "log4j2.properties"
        self.pid_file = root / "broker.pid"
        self.server_log = self.logs / "server.log"
        self.console_log = self.logs / "console.log"
        self.tls = root / "tls"
        self.keystore = self.tls / "broker.pem"
        self.login = self.data / "millrace-login"

    def write_config(self, settings: Settings, tls: Path) -> None:
        """Write the node's configuration, readable by this user only: it may hold a password.

        `tls` is the folder of the certificates the nodes share.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        protocol = settings.kafka_security_protocol
        nodes = settings.kafka_brokers
        voters = ",".join(
            f"{node}@127.0.0.1:{settings.kafka_controller_port + 2 * (node - 1)}"
            for node in range(1, nodes + 1)
        )
        text = _SERVER_PROPERTIES.format(
            node=self.node,
            voters=voters,
            protocol=protocol,
            port=self.port,
            controller_port=self.controller_port,
            data=self.data,
            copies=min(3, nodes),
            min_copies=max(1, min(2, nodes - 1)),
        )
        if settings.kafka_uses_tls:
            text += _TLS_PROPERTIES.format(keystore=tls / "broker.pem", ca=tls / "ca.pem")
        if settings.kafka_uses_sasl:
            text += _sasl_properties(settings)
        self.config.touch(mode=0o600)
        self.config.chmod(0o600)
        self.config.write_text(text)
        self.log_config.write_text(_LOG4J2_PROPERTIES.format(server_log=self.server_log))

    def running_pid(self) -> int | None:
        """The broker's pid if its process is alive and is this workspace's broker."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        command_line = live_command_line(pid) or b""
        if b"kafka.Kafka" in command_line and str(self.config).encode() in command_line:
            return pid
        return None

    def log_excerpt(self) -> str:
        """The end of the JVM's console output, then the errors of the broker's own log."""
        console = _read_lines(self.console_log)[-_LOG_EXCERPT_LINES:]
        server = _read_lines(self.server_log)
        errors = [line for line in server if " ERROR " in line or " FATAL " in line]
        lines = console + (errors or server)[-_LOG_EXCERPT_LINES:]
        return "\n".join(lines) or "(the broker wrote no log)"


def _read_lines(log: Path) -> list[str]:
    return log.read_text(errors="replace").splitlines() if log.exists() else []


def _require_free_port(port: int) -> None:
    if not loopback_port_is_free(port):
        raise BrokerError(
            f"port {port} on 127.0.0.1 is in use by another process, so the local Kafka "
            "broker cannot listen there",
            hint="stop that process, or choose free ports with kafka.port and "
            "kafka.controller_port in millrace.toml (or MILLRACE_KAFKA_PORT and "
            "MILLRACE_KAFKA_CONTROLLER_PORT)",
        )


def _format_storage(
    paths: _BrokerPaths, classpath: str, settings: Settings, cluster_id: str
) -> None:
    arguments = [
        "-cp",
        classpath,
        "kafka.tools.StorageTool",
        "format",
        # One argument with '=': an id may start with '-', which would read as an option.
        f"--cluster-id={cluster_id}",
        "--config",
        str(paths.config),
        "--ignore-formatted",
    ]
    scram = settings.kafka_uses_sasl and settings.kafka_sasl_mechanism.startswith("SCRAM-")
    if scram:
        arguments += ["--add-scram", _scram_credential(settings)]
    # The arguments go through a file only this user reads (java's @argfile), so that the
    # SCRAM credential never shows in the process list.
    argfile = paths.root / "format.args"
    argfile.touch(mode=0o600)
    argfile.chmod(0o600)
    argfile.write_text("\n".join(_argfile_quoted(argument) for argument in arguments) + "\n")
    try:
        result = subprocess.run(
            [java_executable(), f"-Dlog4j2.configurationFile={paths.log_config}", f"@{argfile}"],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        argfile.unlink(missing_ok=True)
    if result.returncode != 0:
        raise BrokerError(
            f"could not format the broker's storage in {paths.data}:\n"
            f"{(result.stdout + result.stderr).strip()[-3000:]}",
            hint=f"if the folder holds data of another Kafka version, move {paths.root} away",
        )
    if scram:
        paths.login.write_text(_login_of(settings))


def _require_same_login(paths: _BrokerPaths, settings: Settings) -> None:
    """Refuse to start a SCRAM listener whose user the broker's data was not made with."""
    if not (settings.kafka_uses_sasl and settings.kafka_sasl_mechanism.startswith("SCRAM-")):
        return
    made = paths.login.read_text().strip() if paths.login.exists() else "no SCRAM user"
    if made != _login_of(settings):
        raise BrokerError(
            f"the local broker's data in {paths.data} holds {made}, not the "
            f"{_login_of(settings)} that the settings name: SCRAM users are made only when "
            "the broker's storage is first formatted",
            hint=f"to start afresh with this user (its streams are lost), stop the broker and "
            f"move {paths.data} away; or set kafka.user and kafka.sasl_mechanism back",
        )


def _login_of(settings: Settings) -> str:
    return f"user {settings.kafka_user!r} ({settings.kafka_sasl_mechanism})"


def _scram_credential(settings: Settings) -> str:
    """The `--add-scram` value of the settings' user: a salted password, as SCRAM keeps it."""
    if not settings.kafka_user or not settings.kafka_sasl_password:
        raise BrokerError(
            f"the local broker's {settings.kafka_security_protocol} listener needs a user and "
            "a password to create",
            hint="set kafka.user, and the password with MILLRACE_KAFKA_PASSWORD or "
            "kafka.password_file",
        )
    algorithm = settings.kafka_sasl_mechanism.removeprefix("SCRAM-").replace("-", "").lower()
    salt = os.urandom(24)
    salted = hashlib.pbkdf2_hmac(
        algorithm, settings.kafka_sasl_password.encode(), salt, _SCRAM_ITERATIONS
    )
    return (
        f"{settings.kafka_sasl_mechanism}=[name={settings.kafka_user},"
        f'iterations={_SCRAM_ITERATIONS},salt="{base64.b64encode(salt).decode()}",'
        f'saltedpassword="{base64.b64encode(salted).decode()}"]'
    )


def _argfile_quoted(argument: str) -> str:
    """One argument of a java @argfile: quoted, with its backslashes and quotes escaped."""
    return '"' + argument.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _sasl_properties(settings: Settings) -> str:
    """The SASL part of the broker's configuration: its mechanism and its own login."""
    mechanism = settings.kafka_sasl_mechanism
    # A PLAIN listener checks passwords against the users its own login lists.
    users = {f"user_{settings.kafka_user}": settings.kafka_sasl_password}
    login = kafka_jaas_config(settings, users if mechanism == "PLAIN" else None)
    listener = f"listener.name.{settings.kafka_security_protocol.lower()}.{mechanism.lower()}"
    return (
        f"sasl.enabled.mechanisms={mechanism}\n"
        f"sasl.mechanism.inter.broker.protocol={mechanism}\n"
        f"{listener}.sasl.jaas.config={_properties_text(login)}\n"
    )


def _properties_text(text: str) -> str:
    """`text` as the value of a Java properties file, whose backslashes are escapes."""
    return text.replace("\\", "\\\\")


def _make_certificates(folder: Path, ca: Path) -> None:
    """A certificate authority and the broker's key and certificate, signed by it, for 127.0.0.1.

    Made once with openssl and kept; the CA's key is thrown away once it has signed.
    """
    keystore = folder / "broker.pem"
    if keystore.exists() and ca.exists():
        return
    if shutil.which("openssl") is None:
        raise BrokerError(
            "openssl is not installed, so the local broker's TLS certificates cannot be made",
            hint="run scripts/setup.sh (Debian: apt-get install openssl)",
        )
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    ca_key, key, request, certificate = (
        folder / name for name in ("ca.key", "broker.key", "broker.csr", "broker.crt")
    )
    days = str(_CERTIFICATE_DAYS)
    steps = [
        ["req", "-x509", "-newkey", "rsa:2048", "-noenc", "-keyout", ca_key, "-out", ca,
         "-days", days, "-subj", "/CN=millrace local broker CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ["req", "-newkey", "rsa:2048", "-noenc", "-keyout", key, "-out", request,
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        ["x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-out", certificate, "-days", days, "-copy_extensions", "copy"],
    ]  # fmt: skip
    for step in steps:
        result = subprocess.run(
            ["openssl", *map(str, step)], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise BrokerError(
                f"openssl could not make the local broker's certificates in {folder}:\n"
                f"{(result.stdout + result.stderr).strip()[-2000:]}",
                hint=f"move {folder} away and run `millrace up` again",
            )
    keystore.touch(mode=0o600)
    keystore.write_text(key.read_text() + certificate.read_text() + ca.read_text())
    for leftover in (ca_key, key, request, certificate, folder / "ca.srl"):
        leftover.unlink(missing_ok=True)


def _wait_until_ready(
    started: list[tuple[subprocess.Popen[bytes], _BrokerPaths]], settings: Settings, nodes: int
) -> None:
    """Wait until the bus's `nodes` nodes have registered; stop those `started` if one fails."""
    paths = started[0][1]
    bootstrap, timeout_s = settings.bootstrap_servers, settings.kafka_start_timeout_s
    deadline = time.monotonic() + timeout_s
    admin = AdminClient(
        {
            **kafka_client_config(settings),
            "log_level": 0,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
        }
    )
    while time.monotonic() < deadline:
        for process, node in started:
            if process.poll() is not None:
                _kill(started)
                raise BrokerError(
                    f"the Kafka broker exited with status {process.returncode} while starting; "
                    f"the end of its log ({node.logs}):\n{node.log_excerpt()}",
                    hint="fix what the log names, then run `millrace up` again",
                )
        try:
            if len(admin.list_topics(timeout=1.0).brokers) == nodes:
                return
        except Exception:
            pass
        time.sleep(0.2)
    _kill(started)
    raise BrokerError(
        f"the Kafka broker did not accept connections on {bootstrap} within {timeout_s:.0f} s; "
        f"the end of its log ({paths.logs}):\n{paths.log_excerpt()}",
        hint="raise kafka.start_timeout_s if the machine is busy, or fix what the log names",
    )


def _kill(started: list[tuple[subprocess.Popen[bytes], _BrokerPaths]]) -> None:
    for process, node in started:
        process.kill()
        node.pid_file.unlink(missing_ok=True)


_SERVER_PROPERTIES = """\
# Written by `millrace up`; rewritten at every start from millrace.toml.
process.roles=broker,controller
node.id={node}
controller.quorum.voters={voters}
listeners={protocol}://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners={protocol}://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name={protocol}
listener.security.protocol.map=CONTROLLER:PLAINTEXT,{protocol}:{protocol}
log.dirs={data}
num.partitions=1
# Streams are created explicitly (`millrace stream create`), so a typo never makes a new one.
auto.create.topics.enable=false
offsets.topic.replication.factor={copies}
offsets.topic.num.partitions=4
transaction.state.log.replication.factor={copies}
transaction.state.log.min.isr={min_copies}
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor={copies}
share.coordinator.state.topic.min.isr={min_copies}
group.initial.rebalance.delay.ms=0
# With one node of three killed, the other two nodes' quorum threads were seen here to stall
# for about 5 s at a time; at Kafka's 2 s the leader then resigned every 5 s, for 40 s or more,
# and no bucket could move. At 8 s the quorum holds: see benchmarks/broker_loss.py.
controller.quorum.fetch.timeout.ms=8000
"""

_TLS_PROPERTIES = """\
ssl.keystore.type=PEM
ssl.keystore.location={keystore}
ssl.truststore.type=PEM
ssl.truststore.location={ca}
"""

_LOG4J2_PROPERTIES = """\
# Written by `millrace up`: the broker logs to one file in the workspace.
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {server_log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
"""
