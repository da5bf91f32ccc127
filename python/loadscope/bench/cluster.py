"""Where a repetition runs when it is more than the host: emulated nodes (bench/nodes.py) with
cores of their own, and a Ray cluster of CPU nodes making its batches (the `ray_workers` factor).
Made for one repetition and removed after it.

    with Cluster(config, env) as where:
        subprocess.Popen(where.command(node, cmd), env={**env, **where.environ(node)})

Note [cluster]
- Nodes: the training nodes (`nodes`, the ranks spread over them) come first, then `cpu_nodes`
  CPU-only nodes; one network namespace each, joined by links of `link_mbit` (nodes.Nodes).
- Cores: each node is a cgroup v1 `cpu` group whose bandwidth (cfs_quota_us over
  cfs_period_us) is its cores: `node_cores` for a training node, `cpu_node_cores` for a CPU
  node; 0 leaves a group unlimited, where it still names the node's processes. A process joins
  its group before it enters its namespace: `ip netns exec` mounts a /sys without the cgroup
  hierarchies, so a process inside cannot join one. Children inherit both.
- Ray (ray_workers = n, cpu_nodes >= 1): the head on training node 0, offering no CPUs (a trainer
  node decodes nothing), and a raylet on each CPU node offering the CPUs its share of the
  workers reserves; the ranks find the head by RAY_ADDRESS. Each node's Ray files (its session
  folder, logs, sockets) are under a folder of this repetition, removed after it.
- With ray_workers = n and no CPU node, the rank starts Ray itself (ls.ray.Workers' default),
  offering the pool's CPUs on its node, its files under this repetition's folder (RAY_TMPDIR).
- Teardown ends every process by pid: the ranks' (the runner's), then whatever runs in a
  node's cgroup or namespace; `ray stop` is not used
  (it ends every Ray process on the machine by name). Then the namespaces, the groups and the
  folder go. Nothing is left: tests/python/test_ray.py checks it."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

from .._errors import ConfigError
from . import nodes as nodes_mod

CGROUP_CPU = "/sys/fs/cgroup/cpu"
CGROUP_CPUACCT = "/sys/fs/cgroup/cpuacct"  # v1: a hierarchy of its own here; what a node's processes spent
PERIOD_US = 100_000
HEAD_PORT = 6390


def needs_root(config: Dict[str, Any]) -> bool:
    return (config.get("nodes", 1) + config.get("cpu_nodes", 0) > 1 or bool(config.get("node_cores"))
            or bool(config.get("cpu_node_cores")))


def needed(config: Dict[str, Any]) -> bool:
    """Whether an arm runs anywhere but on the host as it is."""
    return needs_root(config) or bool(config.get("ray_workers", 0))


def require(config: Dict[str, Any]) -> None:
    """What the arm's placement needs, as a ConfigError naming the missing part."""
    if needs_root(config):
        nodes_mod.require()
        if (config.get("node_cores") or config.get("cpu_node_cores")) and not os.path.isfile(
                os.path.join(CGROUP_CPU, "cpu.cfs_quota_us")):
            raise ConfigError(f"node_cores / cpu_node_cores: CPU quotas need the cgroup v1 cpu controller at {CGROUP_CPU} "
                              "(cpu.cfs_quota_us); this machine has none")
    if config.get("ray_workers", 0):
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError(f"ray_workers = {config['ray_workers']}: a pool of loadscope workers on Ray needs Ray: "
                              "pip install 'loadscope[ray]'") from None


class CpuQuota:
    """A cgroup v1 `cpu` group of `cores` cores (0: unlimited); the processes started through
    `wrap` and their children run in it (Note [cluster])."""

    def __init__(self, name: str, cores: float) -> None:
        self.path = os.path.join(CGROUP_CPU, name)
        self.cores = cores
        self.acct: Optional[str] = None
        os.mkdir(self.path)
        try:
            if os.path.isfile(os.path.join(self.path, "cpuacct.usage")):  # cpu,cpuacct mounted together
                self.acct = self.path
            elif os.path.isdir(CGROUP_CPUACCT):
                self.acct = os.path.join(CGROUP_CPUACCT, name)
                os.mkdir(self.acct)
            if cores:
                # The period first: the kernel checks the quota against it.
                _write(os.path.join(self.path, "cpu.cfs_period_us"), PERIOD_US)
                _write(os.path.join(self.path, "cpu.cfs_quota_us"), max(1000, int(round(cores * PERIOD_US))))
        except BaseException:
            self.close()
            raise

    @classmethod
    def left_behind(cls, name: str) -> "CpuQuota":
        """The group `name` as a process that died left it, to be closed."""
        q = cls.__new__(cls)
        q.path, q.cores = os.path.join(CGROUP_CPU, name), 0.0
        acct = os.path.join(CGROUP_CPUACCT, name)
        q.acct = acct if os.path.isdir(acct) else None
        return q

    def wrap(self, cmd: List[str]) -> List[str]:
        if self.acct and self.acct != self.path:
            return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && echo $$ > "$1/cgroup.procs" && shift && exec "$@"',
                    self.path, self.acct, *cmd]
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', self.path, *cmd]

    def cpu_seconds(self) -> Optional[float]:
        """CPU time of every process that ran in the node (cpuacct.usage)."""
        if not self.acct:
            return None
        try:
            with open(os.path.join(self.acct or "", "cpuacct.usage")) as f:
                return int(f.read()) * 1e-9
        except (OSError, ValueError):
            return None

    def pids(self) -> List[int]:
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    def throttled(self) -> Dict[str, float]:
        """cpu.stat: how often, and how long, the quota held the group back."""
        try:
            with open(os.path.join(self.path, "cpu.stat")) as f:
                st = dict(line.split() for line in f if line.strip())
            return {"periods": int(st.get("nr_periods", 0)), "throttled": int(st.get("nr_throttled", 0)),
                    "throttled_seconds": int(st.get("throttled_time", 0)) * 1e-9}
        except (OSError, ValueError):
            return {}

    def close(self, wait: float = 10.0) -> None:
        deadline = time.monotonic() + wait
        while True:
            left = self.pids()
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                for path in dict.fromkeys((self.acct, self.path)):  # EBUSY until its last process is gone
                    if path and os.path.isdir(path):
                        os.rmdir(path)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cgroup {self.path} still holds processes {left} after {wait:g} s") from None
                time.sleep(0.05)


def _write(path: str, value: int) -> None:
    # One write(2) of the whole value, as echo does (a buffered text write may split it).
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, f"{value}\n".encode())
    finally:
        os.close(fd)


def ours() -> List[str]:
    """cgroups made by loadscope (live or left behind)."""
    try:
        return sorted(n for n in os.listdir(CGROUP_CPU) if n.startswith(nodes_mod.PREFIX))
    except OSError:
        return []


class Cluster:
    """One repetition's nodes, cores and Ray cluster, from its arm's config (Note [cluster]).
    `env` is the environment the Ray processes get (the ranks' own: PYTHONPATH included)."""

    def __init__(self, config: Dict[str, Any], env: Dict[str, str], endpoint: Optional[str] = None) -> None:
        c = config
        self.nodes = c.get("nodes", 1)                   # training nodes: the ranks spread over them
        self.cpu_nodes = c.get("cpu_nodes", 0)
        self.workers = c.get("ray_workers", 0)
        self.worker_cpus = float(c.get("ray_worker_cpus", 1.0))
        self.cores = [float(c.get("node_cores") or 0.0)] * self.nodes + [float(c.get("cpu_node_cores") or 0.0)] * self.cpu_nodes
        total = self.nodes + self.cpu_nodes
        self.net = nodes_mod.Nodes(total, c.get("link_mbit") or 0.0, endpoint) if total > 1 else None
        # No token authentication (`ray start --head` turns it on since Ray 2.5x): the cluster
        # listens only inside namespaces this process made, which nothing else can reach.
        self.env = dict(env, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
        self.quotas: List[CpuQuota] = []
        self.folder = ""
        self.head_address: Optional[str] = None
        self._root = needs_root(c)

    # --- where the ranks run ------------------------------------------------------------------

    def command(self, node: int, cmd: List[str]) -> List[str]:
        if self.net:
            cmd = self.net.command(node, cmd)
        return self.quotas[node].wrap(cmd) if self.quotas else cmd

    def environ(self, node: int) -> Dict[str, str]:
        env = self.net.environ(node) if self.net else {}
        if self.workers:
            if self.head_address:
                env.update(RAY_ADDRESS=self.head_address, RAY_AUTH_MODE="disabled")
            else:  # the rank starts Ray itself: its files in this repetition's folder
                env["RAY_TMPDIR"] = self.folder
                env["RAY_ADDRESS"] = ""
        return env

    # --- made and removed ---------------------------------------------------------------------

    def __enter__(self) -> "Cluster":
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _make(self) -> None:
        # Short: Ray's sockets live under it, and a socket's path is 107 bytes at most.
        self.folder = tempfile.mkdtemp(prefix=f"loadscope-ray-{os.getpid()}-", dir="/tmp")
        if self._root:
            nodes_mod.require()
            reap()
            if self.net:
                self.net.__enter__()
            # A group per node where cgroup v1's cpu controller is (require() refuses quotas
            # elsewhere): its quota, and the node's processes named for the accounting and teardown.
            if os.path.isdir(CGROUP_CPU):
                tag = f"{os.getpid()}-{id(self) & 0xffff:x}"
                for i, cores in enumerate(self.cores):
                    self.quotas.append(CpuQuota(f"{nodes_mod.PREFIX}{tag}-n{i}", cores))
        if self.workers and self.cpu_nodes:
            self._start_ray()

    def _start_ray(self) -> None:
        """The head on training node 0, offering no CPUs; a raylet on each CPU node offering
        the CPUs of its share of the pool."""
        ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
        if not os.path.exists(ray_cli):
            ray_cli = shutil.which("ray") or ray_cli
        assert self.net is not None
        head_ip = self.net.address(0)
        self.head_address = f"{head_ip}:{HEAD_PORT}"
        per_node = math.ceil(self.workers / self.cpu_nodes) * self.worker_cpus
        for node in [0] + list(range(self.nodes, self.nodes + self.cpu_nodes)):
            head = node == 0
            args = [ray_cli, "start", f"--node-ip-address={self.net.address(node)}",
                    f"--temp-dir={os.path.join(self.folder, f'n{node}')}", "--disable-usage-stats",
                    "--object-store-memory", str(1 << 30)]
            if head:
                args += ["--head", f"--port={HEAD_PORT}", "--num-cpus=0", "--include-dashboard=false",
                         "--resources", json.dumps({"trainer": 1})]
            else:
                args += [f"--address={self.head_address}", f"--num-cpus={per_node:g}",
                         "--resources", json.dumps({"cpunode": 1})]
            log = os.path.join(self.folder, f"ray-start-n{node}.log")
            with open(log, "w") as f:
                # The node's own environment too: its workers reach object storage as its ranks do.
                r = subprocess.run(self.command(node, args), stdout=f, stderr=subprocess.STDOUT,
                                   env={**self.env, **self.net.environ(node)}, timeout=120)
            if r.returncode != 0:
                with open(log, errors="replace") as f:
                    tail = f.read()[-2000:]
                raise RuntimeError(f"ray start on emulated node {node} failed (exit {r.returncode}):\n{tail}")

    def quota_stats(self) -> List[Dict[str, Any]]:
        """Each node's cores and how often its quota held it back."""
        return [{"node": i, "role": "training" if i < self.nodes else "cpu", "cores": q.cores or None,
                 "cpu_seconds": q.cpu_seconds(), **q.throttled()} for i, q in enumerate(self.quotas)]

    def close(self) -> None:
        """Every part removed, whichever fails; the first failure raised after the rest."""
        parts: List[Any] = ([self.net.close] if self.net else []) + [q.close for q in self.quotas]
        if self.folder:
            parts.append(lambda folder=self.folder: shutil.rmtree(folder, ignore_errors=True))
        self.quotas, self.folder = [], ""
        error: Optional[BaseException] = None
        for close in parts:  # the namespaces first: that kills what runs in them
            try:
                close()
            except BaseException as e:  # noqa: B036 - every part is tried before any is raised
                error = error or e
        if error is not None:
            raise error


def reap() -> List[str]:
    """Removes the cgroups of loadscope processes that no longer run (their namespaces go with
    nodes.reap); returns their names."""
    gone = nodes_mod.orphaned(ours())
    for name in gone:
        CpuQuota.left_behind(name).close()
    return gone


def topology(config: Dict[str, Any]) -> Dict[str, Any]:
    """An arm's nodes, cores, link and workers, for env.json (only the ranks' placement where
    it has no CPU node, quota or pool)."""
    if not any(config.get(k) for k in ("cpu_nodes", "ray_workers", "node_cores", "cpu_node_cores")):
        return nodes_mod.topology(config)
    t = nodes_mod.topology(dict(config, nodes=config.get("nodes", 1) + config.get("cpu_nodes", 0)))
    t.update(nodes=config.get("nodes", 1), ranks_per_node=config.get("world_size", 1) // config.get("nodes", 1))
    workers = config.get("ray_workers", 0)
    t.update(cpu_nodes=config.get("cpu_nodes", 0), node_cores=config.get("node_cores") or None,
             cpu_node_cores=config.get("cpu_node_cores") or None, ray_workers=workers,
             ray_worker_cpus=config.get("ray_worker_cpus", 1.0) if workers else None,
             ray=("none: the trainer makes its batches" if not workers else
                  "head on training node 0 (no CPUs), a raylet per CPU node" if config.get("cpu_nodes") else
                  "started by the rank on its own node"))
    return t
