"""The local development stack: start, inspect and stop real servers under a state dir.

State lives in ``<state dir>/stack.json`` (default ``.memq/``): one entry per server
with its endpoint, pid, process start time and log file. ``down`` stops exactly the
processes recorded there, and nothing else.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from memq.client.profile import (
    DEFAULT_STATE_DIR,
    StackProfile,
    default_state_dir,
    write_profile,
)
from memq.devstack import procs
from memq.devstack.auditor import auditor_health, remove_auditor_db, start_auditor
from memq.devstack.brokers import (
    DEV_CHROOT,
    DEV_CLUSTER,
    broker_health,
    dev_broker_config,
    dev_tls,
    start_broker,
)
from memq.devstack.kafka import KafkaService
from memq.devstack.services import (
    S3Service,
    Service,
    ServiceState,
    ZooKeeperService,
    aws_env,
    port_taken,
    s3_client,
)
from memq.errors import DevStackError

__all__ = [
    "DEFAULT_STATE_DIR",
    "DevStack",
    "KafkaService",
    "S3Service",
    "ServiceHealth",
    "StackState",
    "ZooKeeperService",
    "default_state_dir",
]


class StackState(BaseModel):
    """Everything a client needs to reach the local stack (``stack.json``)."""

    model_config = ConfigDict(frozen=True)

    state_dir: str
    services: dict[str, ServiceState]
    extra: dict[str, Any] = {}

    @property
    def s3(self) -> ServiceState:
        return self.services["s3"]

    @property
    def kafka(self) -> ServiceState:
        return self.services["kafka"]

    @property
    def zookeeper(self) -> ServiceState:
        return self.services["zookeeper"]

    @property
    def s3_endpoint(self) -> str:
        return self.s3.endpoint

    @property
    def bucket(self) -> str:
        return self.s3.details["bucket"]

    @property
    def kafka_bootstrap(self) -> str:
        return self.kafka.endpoint

    @property
    def zk_connect(self) -> str:
        return self.zookeeper.endpoint

    def s3_client(self, **kw: Any) -> Any:
        return s3_client(self.s3, **kw)

    def aws_env(self) -> dict[str, str]:
        return aws_env(self.s3)


@dataclass(frozen=True)
class ServiceHealth:
    name: str
    endpoint: str
    pid: int | None
    external: bool
    running: bool
    problem: str | None

    @property
    def healthy(self) -> bool:
        return self.running and self.problem is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "pid": self.pid,
            "external": self.external,
            "healthy": self.healthy,
            "problem": self.problem,
        }


SERVICES: tuple[type[Service], ...] = (S3Service, KafkaService, ZooKeeperService)
_BY_NAME: dict[str, type[Service]] = {s.name: s for s in SERVICES}


class DevStack:
    """Start/inspect/stop the local stack recorded under ``state_dir``."""

    def __init__(self, state_dir: Path | str | None = None) -> None:
        self.state_dir = (
            Path(state_dir) if state_dir is not None else default_state_dir()
        ).absolute()

    @property
    def state_file(self) -> Path:
        return self.state_dir / "stack.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / ".lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def load(self) -> StackState | None:
        try:
            return StackState.model_validate_json(self.state_file.read_text())
        except FileNotFoundError:
            return None
        except ValueError as e:
            raise DevStackError(
                f"{self.state_file} is unreadable ({e}): stop any leftover servers by hand "
                "and delete the file"
            ) from e

    def require(self) -> StackState:
        """The running stack's state, or a clear error telling how to start one."""
        state = self.load()
        if state is None:
            raise DevStackError(
                f"no local stack under {self.state_dir}: run `memq dev up` first "
                "(or pass explicit endpoints)"
            )
        return state

    def _save(self, state: StackState) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state.model_dump(), indent=2) + "\n")
        tmp.replace(self.state_file)
        write_profile(self.state_dir, client_profile(state))

    def up(
        self,
        ports: dict[str, int | None] | None = None,
        progress: Callable[[str], None] | None = None,
        brokers: int | None = None,
        auditor: bool = True,
        tls: bool = False,
    ) -> StackState:
        """Start every server not already running (or taken from env overrides), then
        ``brokers`` MemQ brokers (default 1; always clustered through the ZooKeeper, so
        topic admin works with one) and, with ``auditor``, the audit service
        (``ports["auditor"]`` fixes its port). ``ports["kafka_listener"]``: the Kafka
        port of the first broker, where Kafka producers write (the next brokers take
        the ports after it); ``ports["kafka"]`` is the notification Kafka's.

        A running stack is returned as it is, unless ``brokers`` (when given) or ``tls``
        ask for another shape: that is an error saying how to get it. A stack that starts
        its own Kafka (in memory, so empty) starts its auditor on a new database: the old
        one's figures and Kafka offsets belong to the Kafka that is gone.
        """
        ports = ports or {}
        say = progress or (lambda _msg: None)
        with self._locked():
            existing = self.load()
            if existing is not None:
                dead = [h.name for h in self._health(existing, check=False) if not h.running]
                dead += [c["name"] for c, health in _components(existing) if not health(c)[0]]
                if not dead:
                    other = _other_shape(existing, brokers, tls, ports.get("kafka_listener"))
                    if other:
                        raise DevStackError(
                            f"the local stack under {self.state_dir} is already running "
                            f"{other}: stop it first (`memq dev down`), then start it with "
                            "the options you want"
                        )
                    say("local stack already running")
                    return existing
                raise DevStackError(
                    f"the stack under {self.state_dir} is partly down ({', '.join(dead)}): "
                    "run `memq dev down` first"
                )
            listener_ports = _kafka_listener_ports(ports.get("kafka_listener"), brokers)
            services: dict[str, ServiceState] = {}
            to_start: list[Service] = []
            for cls in SERVICES:
                svc = cls()
                ext = svc.external()
                if ext is not None:
                    say(f"{svc.name}: using external {ext.endpoint} ({svc.env_var})")
                    services[svc.name] = ext
                else:
                    to_start.append(svc)
            started: dict[str, ServiceState] = {}
            errors: list[str] = []

            def start(svc: Service) -> None:
                try:
                    started[svc.name] = svc.start(self.state_dir, ports.get(svc.name))
                    what = " (internal notifications)" if svc.name == "kafka" else ""
                    say(f"{svc.name}{what}: ready at {started[svc.name].endpoint}")
                except DevStackError as e:
                    errors.append(str(e))

            with ThreadPoolExecutor(max_workers=max(1, len(to_start))) as pool:
                list(pool.map(start, to_start))
            if errors:
                for st in started.values():
                    if st.process is not None:
                        procs.stop(st.process)
                raise DevStackError("; ".join(errors))
            services.update(started)
            state = StackState(
                state_dir=str(self.state_dir.resolve()),
                services={n: services[n] for n in _BY_NAME},
            )
            started_brokers: list[dict[str, Any]] = []
            extra: dict[str, Any] = {"brokers": started_brokers}
            tls_files = dev_tls(self.state_dir) if tls else None
            if tls_files is not None:
                extra["tls"] = {k: v for k, v in tls_files.items() if k != "secret_file"}
            chroot = self._chroot(state)
            try:
                self._prepare_bucket(state)
                # Topics kept in a shared ZooKeeper name the stopped stack's in-memory
                # Kafka and S3: the new ones start without them.
                fresh = bool({"kafka", "s3"} & set(started))
                if state.zookeeper.external and fresh and _clear_chroot(state.zk_connect, chroot):
                    say(f"zookeeper: cleared {chroot} (topics of the stopped stack)")
                for i in range(1, (1 if brokers is None else brokers) + 1):
                    name = f"broker-{i}"
                    cfg = dev_broker_config(
                        name, state.s3, state.kafka, state.zookeeper, tls=tls_files,
                        chroot=chroot, kafka_listener_port=listener_ports[i - 1],
                    )  # fmt: skip
                    started_brokers.append(start_broker(self.state_dir, name, cfg, state.aws_env()))
                    b = started_brokers[-1]
                    kafka = b.get("kafka_listener")
                    port = f"; Kafka producers: {kafka}" if kafka else ""
                    say(f"{name}: ready at {b['endpoint']} (MemQ clients{port})")
                if auditor:
                    if "kafka" in started and remove_auditor_db(self.state_dir):
                        say("auditor: new Kafka, so a new audit database (the old one's "
                            "figures and offsets belonged to the stopped stack's Kafka)")  # fmt: skip
                    a = start_auditor(
                        self.state_dir,
                        state.kafka,
                        state.aws_env(),
                        ports.get("auditor"),
                        brokers=[b["endpoint"] for b in started_brokers],
                        client=_lag_client(tls_files),
                    )
                    extra["auditor"] = a
                    say(f"auditor: dashboard at {a['url']}")
            except DevStackError:
                for b in started_brokers:
                    procs.stop(procs.ProcessRef(b["pid"], b.get("start_time")))
                for st in started.values():
                    if st.process is not None:
                        procs.stop(st.process)
                raise
            state = state.model_copy(update={"extra": extra})
            self._save(state)
            return state

    def _chroot(self, state: StackState) -> str:
        """The brokers' ZooKeeper chroot: the stack's own ZooKeeper is theirs alone; an
        external one (shared, e.g. by test stacks) gets a chroot per state dir."""
        if not state.zookeeper.external:
            return DEV_CHROOT
        digest = hashlib.sha1(str(self.state_dir.resolve()).encode()).hexdigest()[:10]
        return f"{DEV_CHROOT}-{digest}"

    def _prepare_bucket(self, state: StackState) -> None:
        client = state.s3_client(timeout=10, retries=2)
        try:
            client.head_bucket(Bucket=state.bucket)
        except Exception:
            try:
                client.create_bucket(Bucket=state.bucket)
            except Exception as e:
                raise DevStackError(
                    f"cannot create bucket {state.bucket!r} at {state.s3_endpoint}: {e}"
                ) from e

    def restart(self, name: str, timeout: float = 10.0) -> StackState:
        """Stop and start one managed server on the same port, keeping its data."""
        with self._locked():
            state = self.require()
            old = state.services[name]
            if old.external or old.process is None:
                raise DevStackError(f"{name} is external: restart it where it runs")
            procs.stop(old.process, timeout=timeout)
            new = _BY_NAME[name]().start(self.state_dir, old.port, fresh=False)
            new = new.model_copy(update={"details": old.details})
            state = state.model_copy(update={"services": {**state.services, name: new}})
            self._save(state)
            return state

    def update_extra(self, **extra: Any) -> StackState:
        """Record extra components (e.g. brokers) in ``stack.json``."""
        with self._locked():
            state = self.require()
            state = state.model_copy(update={"extra": {**state.extra, **extra}})
            self._save(state)
            return state

    @staticmethod
    def _one_health(name: str, st: ServiceState, *, check: bool = True) -> ServiceHealth:
        running = True if st.process is None else procs.is_alive(st.process)
        problem = None
        if not running:
            problem = "process is not running"
        elif check:
            problem = _BY_NAME[name]().check(st)
        return ServiceHealth(name, st.endpoint, st.pid, st.external, running, problem)

    def _health(self, state: StackState, *, check: bool = True) -> list[ServiceHealth]:
        return [self._one_health(n, st, check=check) for n, st in state.services.items()]

    def status(self) -> list[ServiceHealth]:
        """Live health of every server and broker of the recorded stack (empty when none)."""
        state = self.load()
        if state is None:
            return []
        comps = _components(state)
        with ThreadPoolExecutor(max_workers=len(state.services) + len(comps)) as pool:
            servers = list(pool.map(lambda item: self._one_health(*item), state.services.items()))
            checks = list(pool.map(lambda ch: ch[1](ch[0]), comps))
        return servers + [
            ServiceHealth(c["name"], c["endpoint"], c["pid"], False, running, problem)
            for (c, _), (running, problem) in zip(comps, checks, strict=True)
        ]

    def down(
        self, timeout: float = 10.0, progress: Callable[[str], None] | None = None
    ) -> list[str]:
        """Stop every process this stack started (SIGTERM, SIGKILL after ``timeout``)."""
        say = progress or (lambda _msg: None)
        with self._locked():
            state = self.load()
            if state is None:
                return []
            stopped = []
            refs = [
                (name, st.process)
                for name, st in state.services.items()
                if st.process is not None and not st.external
            ]
            refs += [
                (c["name"], procs.ProcessRef(c["pid"], c.get("start_time")))
                for c, _ in _components(state)
                if c.get("pid")
            ]
            # The auditor and brokers first (brokers flush to the servers), then the servers.
            for name, ref in reversed(refs):
                killed = procs.stop(ref, timeout=timeout)
                stopped.append(name)
                say(f"{name}: stopped" + (" (SIGKILL)" if killed else ""))
            self.state_file.unlink(missing_ok=True)
            write_profile(self.state_dir, None)
            return stopped

    def left_logs(self) -> dict[str, Path]:
        """The logs a stopped stack left in its state dir (``<name>/<name>.log``), by name."""
        found = self.state_dir.glob("*/*.log") if self.state_dir.is_dir() else []
        return {p.stem: p for p in sorted(found) if p.stem == p.parent.name}

    def log_names(self) -> list[str]:
        """Components with a log: the running stack's, else those a stopped one left."""
        state = self.load()
        if state is None:
            if not (left := self.left_logs()):
                self.require()  # (the error that says how to start one)
            return list(left)
        return [*state.services, *(c["name"] for c, _ in _components(state))]

    def log_path(self, name: str) -> Path:
        state = self.load()
        if state is None:  # stopped: its logs stay until the next `up` of that component
            left = self.left_logs()
            if name in left:
                return left[name]
            self.require()
            raise AssertionError("unreachable")
        if name in state.services and state.services[name].log:
            return Path(str(state.services[name].log))
        for c, _ in _components(state):
            if c["name"] == name and c.get("log"):
                return Path(c["log"])
        known = [*state.services, *(c["name"] for c, _ in _components(state))]
        raise DevStackError(f"no log for {name!r}: known components are {', '.join(known)}")


def client_profile(state: StackState) -> StackProfile | None:
    """How clients reach this stack (``client.json``; see :mod:`memq.client.profile`);
    None while it runs no broker."""
    brokers = [b["endpoint"] for b in state.extra.get("brokers", []) if b.get("endpoint")]
    if not brokers:
        return None
    creds = state.aws_env()
    storage: dict[str, Any] = {
        "endpoint_url": state.s3_endpoint,
        "region": state.s3.details.get("region"),
    }
    if creds:  # the local S3 server's throwaway keys (an external S3 keeps the usual chain)
        storage["access_key_id"] = creds["AWS_ACCESS_KEY_ID"]
        storage["secret_access_key"] = creds["AWS_SECRET_ACCESS_KEY"]
    tls = state.extra.get("tls") or {}
    auditor = state.extra.get("auditor") or {}
    return StackProfile(
        bootstrap_servers=brokers,
        cluster=DEV_CLUSTER,
        bucket=state.bucket,
        storage={k: v for k, v in storage.items() if v is not None},
        kafka_bootstrap=state.kafka_bootstrap,
        auditor_url=auditor.get("url"),
        auditor_db=auditor.get("db_path"),
        ssl_ca_location=tls.get("ca_file"),
        auth_token_file=tls.get("token_file"),
    )


Health = Callable[[dict[str, Any]], tuple[bool, str | None]]


def _clear_chroot(zk_connect: str, chroot: str) -> bool:
    """Delete ``chroot`` and everything under it; True when it existed."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    zk: Any = KazooClient(hosts=zk_connect)
    try:
        zk.start(timeout=15)
        zk.delete(chroot, recursive=True)
        return True
    except NoNodeError:
        return False
    except Exception as e:
        raise DevStackError(f"cannot clear {chroot} in ZooKeeper {zk_connect}: {e}") from e
    finally:
        zk.stop()
        zk.close()


def _other_shape(
    state: StackState, brokers: int | None, tls: bool, kafka_listener_port: int | None = None
) -> str | None:
    """How a running stack differs from the one asked for (None: it is that one)."""
    running = len(state.extra.get("brokers", []))
    if brokers is not None and brokers != running:
        return f"with {running} broker{'s' if running != 1 else ''} (asked for --brokers {brokers})"
    if tls and not state.extra.get("tls"):
        return "without TLS (asked for --tls)"
    b1: dict[str, Any] = next(iter(state.extra.get("brokers", [])), {})
    first = b1.get("kafka_listener") or b1.get("kafka")
    if kafka_listener_port is not None and first != f"127.0.0.1:{kafka_listener_port}":
        return (
            f"with its Kafka port at {first or 'none'} "
            f"(asked for --kafka-listener-port {kafka_listener_port})"
        )
    return None


def _kafka_listener_ports(first: int | None, brokers: int | None) -> list[int]:
    """The Kafka port of each broker: ``first``, ``first + 1``, ... (all 0, any free
    port, when ``first`` is None); a clear error when one is out of range or taken."""
    count = 1 if brokers is None else brokers
    if first is None:
        return [0] * count
    wanted = [first + i for i in range(count)]
    if wanted and wanted[-1] > 65535:
        raise DevStackError(
            f"--kafka-listener-port {first} with {count} brokers needs ports up to "
            f"{wanted[-1]}, past 65535: pick a lower port"
        )
    for i, port in enumerate(wanted, 1):
        if port_taken(port):
            raise DevStackError(
                f"port {port} (broker-{i}'s Kafka port, from --kafka-listener-port {first}) "
                "is in use: pick another port, or leave the option out for free ones"
            )
    return wanted


def _components(state: StackState) -> list[tuple[dict[str, Any], Health]]:
    """The stack's MemQ processes (brokers, then the auditor) with their health checks."""
    out: list[tuple[dict[str, Any], Health]] = [
        (b, broker_health) for b in state.extra.get("brokers", [])
    ]
    if state.extra.get("auditor"):
        out.append((state.extra["auditor"], auditor_health))
    return out


def _lag_client(tls_files: dict[str, str] | None) -> dict[str, str]:
    """Client settings of the dev auditor's lag measurements for the dev brokers."""
    if tls_files is None:
        return {}
    return {
        "security.protocol": "ssl",
        "ssl.ca.location": tls_files["ca_file"],
        "auth.token": Path(tls_files["token_file"]).read_text().strip(),
    }
