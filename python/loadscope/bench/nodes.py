"""Several training nodes on one machine, with a real network between them: one Linux network
namespace per node, each joined to a bridge (in a hub namespace of its own) by a veth pair,
the link shaped to a bandwidth with tc's token bucket, and each node's ranks started inside its
namespace (gloo over TCP across the bridge). Made for one repetition and removed after it;
root only (network namespaces need CAP_SYS_ADMIN, veths and tc CAP_NET_ADMIN).

    with Nodes(nodes=2, link_mbit=100) as net:
        subprocess.Popen(net.command(node, cmd), env={**env, **net.environ(node)})

Note [emulated nodes]
- Addresses: 192.168.213.(node+1)/24 inside namespaces this process made; nothing is routed
  to or from the root namespace (the bridge lives in the hub namespace, not the host's), so no
  traffic can reach any other address. Two experiments at once each have their own namespaces:
  the same addresses in different namespaces do not meet.
- The link: each node's veth egress and the bridge port's egress towards the node are shaped
  with `tbf` to `link_mbit` (both directions, as a NIC's line rate is). netem (delay, loss) is
  absent on these kernels; bandwidth is what is emulated. Ranks of one node talk over their
  namespace's loopback route, unshaped, as ranks of a real node talk over NVLink or shared memory.
- gloo is told the node's interface (GLOO_SOCKET_IFNAME); MASTER_ADDR is node 0's address.
- Teardown kills whatever still runs in the namespaces and deletes them (their veths go with
  them); namespaces left by a process that died are removed by the next one (`reap`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Dict, List

from .._errors import ConfigError

PREFIX = "loadscope-"
SUBNET = "192.168.213"


def _run(args: List[str], check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(args, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def require() -> None:
    """What emulated nodes need, as a ConfigError naming the missing part."""
    missing = [t for t in ("ip", "tc") if shutil.which(t) is None]
    if missing:
        raise ConfigError(f"emulated nodes (nodes > 1) need {' and '.join(missing)} (Debian's iproute2 package)")
    if os.geteuid() != 0:
        raise ConfigError(f"emulated nodes (nodes > 1) need root: network namespaces need CAP_SYS_ADMIN, veth pairs "
                          f"and tc CAP_NET_ADMIN (running as uid {os.geteuid()}); run with nodes = 1 otherwise")


def ours() -> List[str]:
    """Network namespaces made by loadscope (live or left behind)."""
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def reap() -> List[str]:
    """Deletes the namespaces of loadscope processes that no longer run; returns their names."""
    gone = []
    for ns in ours():
        try:
            pid = int(ns[len(PREFIX):].split("-", 1)[0])
        except ValueError:
            continue
        if not os.path.exists(f"/proc/{pid}"):
            _delete(ns)
            gone.append(ns)
    return gone


def _delete(ns: str) -> None:
    for pid in _run(["ip", "netns", "pids", ns], check=False).stdout.split():
        try:
            os.kill(int(pid), 9)
        except (ProcessLookupError, ValueError):
            pass
    _run(["ip", "netns", "del", ns], check=False)


class Nodes:
    """`nodes` emulated nodes joined by links of `link_mbit` Mbit/s each (0: not shaped)."""

    def __init__(self, nodes: int, link_mbit: float = 0.0) -> None:
        if nodes < 2 or nodes > 250:
            raise ConfigError(f"nodes = {nodes}: emulated nodes are 2 to 250")
        self.nodes, self.link_mbit = nodes, link_mbit
        tag = f"{os.getpid()}-{id(self) & 0xffff:x}"
        self.hub = f"{PREFIX}{tag}-hub"
        self.names = [f"{PREFIX}{tag}-n{i}" for i in range(nodes)]
        short = f"{os.getpid() & 0xfffff:x}{id(self) & 0xff:x}"  # interface names: 15 characters at most
        self.ifnames = [f"l{short}n{i}" for i in range(nodes)]
        self.ports = [f"l{short}p{i}" for i in range(nodes)]
        self.made: List[str] = []

    def address(self, node: int) -> str:
        return f"{SUBNET}.{node + 1}"

    @property
    def master_addr(self) -> str:
        return self.address(0)

    def command(self, node: int, cmd: List[str]) -> List[str]:
        """`cmd` run inside node `node`'s namespace."""
        return ["ip", "netns", "exec", self.names[node], *cmd]

    def environ(self, node: int) -> Dict[str, str]:
        return {"GLOO_SOCKET_IFNAME": self.ifnames[node], "MASTER_ADDR": self.master_addr}

    def __enter__(self) -> "Nodes":
        require()
        reap()
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _make(self) -> None:
        for ns in [self.hub, *self.names]:
            _run(["ip", "netns", "add", ns])
            self.made.append(ns)
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        _run(["ip", "-n", self.hub, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", self.hub, "link", "set", "br0", "up"])
        for i, ns in enumerate(self.names):
            dev, port = self.ifnames[i], self.ports[i]
            # Made in the hub, one end moved to the node: nothing ever sits in the host's namespace.
            _run(["ip", "-n", self.hub, "link", "add", port, "type", "veth", "peer", "name", dev, "netns", ns])
            _run(["ip", "-n", self.hub, "link", "set", port, "master", "br0"])
            _run(["ip", "-n", self.hub, "link", "set", port, "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", dev])
            _run(["ip", "-n", ns, "link", "set", dev, "up"])
            if self.link_mbit:
                # A bucket of 10 ms at the rate (at least 256 KiB): large enough that the
                # kernel's timer granularity does not cap the rate below the one asked for.
                burst = max(256 * 1024, int(self.link_mbit * 1e6 / 8 * 0.01))
                for where, d in ((ns, dev), (self.hub, port)):
                    _run(["ip", "netns", "exec", where, "tc", "qdisc", "replace", "dev", d, "root", "tbf", "rate",
                          f"{self.link_mbit:g}mbit", "burst", str(burst), "latency", "100ms"])

    def close(self) -> None:
        for ns in reversed(self.made):
            _delete(ns)
        self.made = []

    def left(self) -> List[str]:
        """This topology's namespaces still present (empty after close)."""
        mine = {self.hub, *self.names}
        return [ns for ns in ours() if ns in mine]


def topology(config: Dict[str, Any]) -> Dict[str, Any]:
    """Where an arm's ranks run: world size, nodes, ranks per node and the link between nodes."""
    n, world = config.get("nodes", 1), config.get("world_size", 1)
    mbit = config.get("link_mbit") or 0.0
    link = ("one node: its ranks talk over loopback" if n == 1 else
            f"veth pairs to a bridge in network namespaces, tc tbf at {mbit:g} Mbit/s each way" if mbit else
            "veth pairs to a bridge in network namespaces, not shaped")
    return {"world_size": world, "nodes": n, "ranks_per_node": world // n, "link_mbit": mbit or None, "link": link}
