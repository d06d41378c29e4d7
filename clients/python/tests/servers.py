"""Real servers for the tests: a redis-server on a free port (with the module, or without),
a 6-node cluster (cluster/cluster.sh of the repo), and processes serving the test apps.
Every wait polls with a deadline; everything started is stopped and removed afterwards."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Optional

import redis

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent
ROOT = PACKAGE.parent.parent
MODULE = os.environ.get("MODULE") or str(ROOT / "target" / "release" / "libredis_ratelimit.so")


def wait_until(what: str, ready: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def _taken(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int, bus: bool = False) -> List[int]:
    """``n`` distinct free ports below 32768 (where Linux picks the local ports of outgoing
    connections); with ``bus``, each port + 10000 is free too (a cluster's bus ports)."""
    ports: List[int] = []
    while len(ports) < n:
        p = random.randrange(10000, 22000)
        candidates = [p, p + 10000] if bus else [p]
        if p in ports or any(_taken(c) or not _bindable(c) for c in candidates):
            continue
        ports.append(p)
    return ports


class Server:
    """A redis-server of our own, on a free port, in a temporary directory."""

    def __init__(self, module: bool = True, args: Optional[List[str]] = None) -> None:
        self.port = free_ports(1)[0]
        self.dir = tempfile.mkdtemp(prefix="rl-py-server.")
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
               "--save", "", "--appendonly", "no", "--logfile", "redis.log"]
        if module:
            if not os.path.isfile(MODULE):
                raise FileNotFoundError(f"module not found: {MODULE} (cargo build --release)")
            # now-max-ahead-ms -1: tests drive time with NOW, ahead of the server clock.
            cmd += ["--loadmodule", MODULE, "now-max-ahead-ms", "-1"]
        self.proc = subprocess.Popen(cmd + (args or []), stdout=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}"
        try:
            wait_until(f"redis-server on port {self.port}", self._up, 20)
        except Exception:
            self.stop()
            raise

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            log = Path(self.dir, "redis.log")
            raise RuntimeError(f"redis-server exited: {log.read_text() if log.exists() else ''}")
        try:
            return redis.Redis(port=self.port, socket_timeout=1).ping()
        except redis.ConnectionError:
            return False

    def client(self, **kw) -> redis.Redis:
        return redis.Redis(port=self.port, **kw)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """3 primaries and 3 replicas with the module, started by the repo's cluster/cluster.sh
    on free ports (CLUSTER_PORTS) in a temporary directory (CLUSTER_DIR)."""

    def __init__(self) -> None:
        self.ports = free_ports(6, bus=True)
        self.dir = tempfile.mkdtemp(prefix="rl-py-cluster.")
        self.env = dict(
            os.environ,
            MODULE=MODULE,
            CLUSTER_PORTS=" ".join(map(str, self.ports)),
            CLUSTER_DIR=os.path.join(self.dir, "nodes"),
            CLUSTER_TIMEOUT="60",
        )
        out = subprocess.run([str(ROOT / "cluster" / "cluster.sh"), "start"], env=self.env,
                             capture_output=True, text=True)
        if out.returncode != 0:
            self.stop()
            raise RuntimeError(f"cluster.sh start failed:\n{out.stdout}\n{out.stderr}")
        try:
            self._warm_replicas()
        except Exception:
            self.stop()
            raise

    def nodes(self) -> List[redis.Redis]:
        return [redis.Redis(port=p) for p in self.ports]

    def _warm_replicas(self) -> None:
        # A fresh cluster leaves each replica out of CLUSTER SLOTS until it has replicated a
        # write (CLUSTER SHARDS: "health loading"): write once in each primary's slots.
        from redis.cluster import ClusterNode, RedisCluster

        rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", self.ports[0])])
        for key in ("a", "b", "c"):
            rc.set(key, "warm")
            rc.delete(key)
        rc.close()

        def listed() -> bool:
            return all(b"loading" not in _flatten(n.execute_command("CLUSTER", "SHARDS"))
                       for n in self.nodes())

        wait_until("the replicas to show in CLUSTER SHARDS", listed, 30)

    def stop(self) -> None:
        subprocess.run([str(ROOT / "cluster" / "cluster.sh"), "stop"], env=self.env,
                       capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def _flatten(value) -> List[bytes]:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    if isinstance(value, dict):
        return [x for kv in value.items() for v in kv for x in _flatten(v)]
    return [value] if isinstance(value, bytes) else []


class App:
    """A test app (tests/apps/<name>.py) served over HTTP by a process of its own."""

    def __init__(self, name: str, storage_uri: str, *extra: str) -> None:
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix=f"rl-py-{name}.", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "apps" / f"{name}.py"), str(self.port), storage_uri, *extra],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=str(HERE / "apps"),
        )
        try:
            wait_until(f"{name} on port {self.port}", self._up, 30)
        except Exception:
            self.stop()
            raise

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the app exited:\n{self.output()}")
        return _taken(self.port)

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)
