"""The local stack's servers: the base of each, S3 (moto) and ZooKeeper (Kafka: kafka.py).

Each service knows how to start itself on 127.0.0.1 (a free port unless one is
given), when it is ready, and how to check its health. The same code starts them
for ``memq dev up`` and for the pytest fixtures in :mod:`memq.testing`.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from memq.devstack import procs
from memq.errors import DevStackError

__all__ = [
    "DEV_ACCESS_KEY",
    "DEV_BUCKET",
    "DEV_REGION",
    "DEV_SECRET_KEY",
    "S3Service",
    "Service",
    "ServiceState",
    "ZooKeeperService",
    "aws_env",
    "find_java",
    "find_zookeeper_classpath",
    "port_taken",
    "s3_client",
    "zk_four_letter",
]

HOST = "127.0.0.1"
DEV_BUCKET = "memq-dev"
DEV_REGION = "us-east-1"
# Throwaway credentials the local moto server accepts; never used against real AWS.
DEV_ACCESS_KEY = "memq-dev"
DEV_SECRET_KEY = "memq-dev-secret"
START_ATTEMPTS = 5


class ServiceState(BaseModel):
    """What ``stack.json`` records about one running (or external) server."""

    model_config = ConfigDict(frozen=True)

    name: str
    endpoint: str
    pid: int | None = None
    start_time: int | None = None
    log: str | None = None
    external: bool = False
    details: dict[str, str] = {}

    @property
    def process(self) -> procs.ProcessRef | None:
        return None if self.pid is None else procs.ProcessRef(self.pid, self.start_time)

    @property
    def port(self) -> int:
        return int(self.endpoint.rsplit(":", 1)[1].rstrip("/"))


@dataclass
class Service:
    """Base: start on a port with retries on clashes, record the state, check health."""

    name: ClassVar[str]
    env_var: ClassVar[str]
    ready_timeout: float = 60.0
    details: dict[str, str] = field(default_factory=dict)

    def endpoint_for(self, port: int) -> str:
        return f"{HOST}:{port}"

    def argv(self, state_dir: Path, port: int) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def prepare(self, state_dir: Path, port: int, *, fresh: bool) -> None:
        """Write config files before the process starts."""

    def ready(self, endpoint: str, log: Path, log_offset: int) -> bool:
        raise NotImplementedError

    def _probe(self, endpoint: str, log: Path, offset: int) -> bool | None:
        return True if self.ready(endpoint, log, offset) else None

    def check(self, state: ServiceState, timeout: float = 3.0) -> str | None:
        """None when healthy, else a short description of the problem."""
        raise NotImplementedError

    def external(self) -> ServiceState | None:
        """The state of an external server named by the env var, if set."""
        value = os.environ.get(self.env_var)
        if not value:
            return None
        return ServiceState(name=self.name, endpoint=value, external=True, details=self.details)

    def start(
        self, state_dir: Path, port: int | None = None, *, fresh: bool = True
    ) -> ServiceState:
        state_dir = state_dir.absolute()
        svc_dir = state_dir / self.name
        svc_dir.mkdir(parents=True, exist_ok=True)
        log = svc_dir / f"{self.name}.log"
        attempts = 1 if port is not None else START_ATTEMPTS
        if port is not None and port_taken(port):  # (said at once, not after a JVM start)
            raise DevStackError(
                f"could not start {self.name}: port {port} is in use. Pick another port or "
                "free this one."
            )
        last = ""
        for _ in range(attempts):
            p = port if port is not None else procs.free_port(HOST)
            self.prepare(state_dir, p, fresh=fresh)
            offset = log.stat().st_size if log.exists() else 0
            proc, ref = procs.spawn(self.argv(state_dir, p), log, env=self.env(), cwd=svc_dir)
            endpoint = self.endpoint_for(p)

            try:
                procs.wait_for(
                    functools.partial(self._probe, endpoint, log, offset),
                    timeout=self.ready_timeout,
                    what=f"{self.name} on port {p}",
                    abort=functools.partial(_exit_reason, proc),
                )
            except DevStackError as e:
                procs.stop(ref, timeout=5)
                last = f"{e} (log: {log})"
                if proc.poll() is not None and port_taken(p):
                    last = f"port {p} is in use: {last}"
                continue
            (svc_dir / f"{self.name}.pid").write_text(f"{ref.pid}\n")
            return ServiceState(
                name=self.name,
                endpoint=endpoint,
                pid=ref.pid,
                start_time=ref.start_time,
                log=str(log),
                details=self.details,
            )
        hint = "" if port is None else " Pick another port or free this one."
        raise DevStackError(f"could not start {self.name}: {last}.{hint}")


def _exit_reason(proc: subprocess.Popen[bytes]) -> str | None:
    rc = proc.poll()
    return None if rc is None else f"exited with code {rc}"


def port_taken(port: int) -> bool:
    """Whether a local server already holds ``port`` on 127.0.0.1 (connections of a
    server just stopped, in TIME_WAIT, do not count: a restart takes its port again)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return True
    return False


def log_has(log: Path, offset: int, needle: bytes) -> bool:
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            return needle in f.read()
    except OSError:
        return False


# --- clients of the stack's S3 -----------------------------------------------------------


def aws_env(s3: ServiceState) -> dict[str, str]:
    """Environment for boto3 (and Spark workers) to reach the stack's S3.

    An external S3 keeps the standard credential chain: nothing is injected.
    """
    if s3.external:
        return {}
    return {
        "AWS_ACCESS_KEY_ID": DEV_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": DEV_SECRET_KEY,
        "AWS_DEFAULT_REGION": s3.details.get("region", DEV_REGION),
    }


def s3_client(s3: ServiceState, *, timeout: float = 10.0, retries: int = 0) -> Any:
    """A boto3 S3 client for the stack's S3 endpoint."""
    import boto3
    from botocore.config import Config

    creds = aws_env(s3)
    return boto3.session.Session().client(
        "s3",
        endpoint_url=s3.endpoint,
        region_name=s3.details.get("region", DEV_REGION),
        aws_access_key_id=creds.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=creds.get("AWS_SECRET_ACCESS_KEY"),
        config=Config(
            connect_timeout=timeout,
            read_timeout=timeout,
            retries={"max_attempts": retries, "mode": "standard"},
            s3={"addressing_style": "path"},
        ),
    )


# --- S3: moto server -----------------------------------------------------------------


@dataclass
class S3Service(Service):
    name: ClassVar[str] = "s3"
    env_var: ClassVar[str] = "MEMQ_S3_ENDPOINT"
    details: dict[str, str] = field(
        default_factory=lambda: {
            "bucket": os.environ.get("MEMQ_S3_BUCKET", DEV_BUCKET),
            "region": DEV_REGION,
        }
    )

    def endpoint_for(self, port: int) -> str:
        return f"http://{HOST}:{port}"

    def argv(self, state_dir: Path, port: int) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("MOTO_PORT", None)
        return env

    def ready(self, endpoint: str, log: Path, log_offset: int) -> bool:
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def check(self, state: ServiceState, timeout: float = 3.0) -> str | None:
        try:
            s3_client(state, timeout=timeout).head_bucket(Bucket=state.details["bucket"])
        except Exception as e:
            return f"bucket {state.details.get('bucket')!r} not reachable: {e}"
        return None


# --- ZooKeeper ------------------------------------------------------------------------


def find_zookeeper_classpath() -> str:
    """Jars for ZooKeeperServerMain: the pyspark wheel's, else Debian's zookeeper package."""
    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.origin:
        jars = Path(spec.origin).parent / "jars"
        if any(jars.glob("zookeeper-*.jar")):
            return f"{jars}/*"
    debian = Path("/usr/share/java/zookeeper.jar")
    if debian.is_file():
        return f"{debian}:/usr/share/java/*"
    raise DevStackError(
        "no ZooKeeper jars found: pip install 'memq-py[dev]' (the pyspark wheel ships them), "
        "or apt-get install zookeeper, or set MEMQ_ZK_CONNECT to use your ZooKeeper"
    )


@functools.cache
def find_java(min_version: int = 17) -> str:
    """The ``java`` on PATH, checked to be at least ``min_version`` (Kafka 4 needs 17)."""
    java = shutil.which("java")
    if java is None:
        raise DevStackError(
            f"java was not found on PATH: the local Kafka and ZooKeeper need Java {min_version}+ "
            "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless; macOS: brew install "
            "openjdk@17), or set MEMQ_KAFKA_BOOTSTRAP and MEMQ_ZK_CONNECT to use running servers"
        )
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DevStackError(f"{java} -version failed ({e}): check the Java installation") from e
    version = java_major(out)
    if version is None or version < min_version:
        raise DevStackError(
            f"{java} is Java {version or 'of unknown version'}; the local Kafka and ZooKeeper "
            f"need Java {min_version}+: install openjdk-17 and put it first on PATH"
        )
    return java


def java_major(version_output: str) -> int | None:
    """The major version in ``java -version``'s output (``1.8.0_x`` is 8)."""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if m is None:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def zk_four_letter(endpoint: str, command: str = "srvr", timeout: float = 2.0) -> str:
    host, port = endpoint.split(",", maxsplit=1)[0].split("/", maxsplit=1)[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(command.encode())
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


_LOG4J2 = """status = warn
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
"""


@dataclass
class ZooKeeperService(Service):
    name: ClassVar[str] = "zookeeper"
    env_var: ClassVar[str] = "MEMQ_ZK_CONNECT"

    def prepare(self, state_dir: Path, port: int, *, fresh: bool) -> None:
        d = state_dir / self.name
        data = d / "data"
        if fresh and data.exists():
            shutil.rmtree(data)
        data.mkdir(parents=True, exist_ok=True)
        (d / "zoo.cfg").write_text(
            "\n".join(
                [
                    "tickTime=500",
                    f"dataDir={data}",
                    f"clientPort={port}",
                    f"clientPortAddress={HOST}",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=srvr,ruok,mntr",
                    "maxClientCnxns=0",
                    "maxSessionTimeout=60000",
                    "",
                ]
            )
        )
        (d / "log4j2.properties").write_text(_LOG4J2)

    def argv(self, state_dir: Path, port: int) -> list[str]:
        d = state_dir / self.name
        return [
            find_java(),
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.jmx.log4j.disable=true",
            f"-Dlog4j2.configurationFile={d / 'log4j2.properties'}",
            "-cp",
            find_zookeeper_classpath(),
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(d / "zoo.cfg"),
        ]

    def ready(self, endpoint: str, log: Path, log_offset: int) -> bool:
        # `ruok` answers imok from a half-started server; `srvr` only from a serving one.
        try:
            return "Zookeeper version" in zk_four_letter(endpoint, "srvr", timeout=1)
        except OSError:
            return False

    def check(self, state: ServiceState, timeout: float = 3.0) -> str | None:
        try:
            out = zk_four_letter(state.endpoint, "srvr", timeout=timeout)
        except OSError as e:
            return f"no answer from {state.endpoint}: {e}"
        if "Zookeeper version" not in out:
            return f"srvr answered {out.strip()[:80]!r}"
        return None
