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
  them); namespaces left by a process that died are removed by the next one (`reap`).
- Object storage: a server listening on the host's loopback (the tests' radosgw) is reached
  through a forwarder: a listening socket made inside the hub namespace, on the bridge's own
  address (SUBNET.254), whose connections are relayed to the server's loopback address from the
  host's namespace (a socket keeps the namespace it was made in; the thread that makes the
  listener enters the hub's and comes back). The nodes' traffic to the store crosses their
  links, shaped like their all-reduce, as a node's NIC carries both. Only a loopback endpoint
  is forwarded: nothing leaves the machine."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from typing import Any, Dict, List, Optional, Tuple

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


def orphaned(names: List[str]) -> List[str]:
    """Of loadscope's names (PREFIX + the maker's pid + ...: namespaces, cgroups), those whose
    maker no longer runs."""
    out = []
    for name in names:
        try:
            pid = int(name[len(PREFIX):].split("-", 1)[0])
        except ValueError:
            continue
        if not os.path.exists(f"/proc/{pid}"):
            out.append(name)
    return out


def reap() -> List[str]:
    """Deletes the namespaces of loadscope processes that no longer run; returns their names."""
    gone = orphaned(ours())
    for ns in gone:
        _delete(ns)
    return gone


def _delete(ns: str) -> None:
    for pid in _run(["ip", "netns", "pids", ns], check=False).stdout.split():
        try:
            os.kill(int(pid), 9)
        except (ProcessLookupError, ValueError):
            pass
    _run(["ip", "netns", "del", ns], check=False)


def _setns(path: str) -> None:
    """Moves the calling thread into the network namespace at `path` (setns(2); Python 3.11
    has no os.setns)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            e = ctypes.get_errno()
            raise OSError(e, f"setns({path}): {os.strerror(e)}")
    finally:
        os.close(fd)


class Forwarder:
    """Relays TCP connections made to `listen` inside the network namespace `ns` to `target` in
    the caller's namespace (Note [emulated nodes], object storage)."""

    def __init__(self, ns: str, listen: Tuple[str, int], target: Tuple[str, int]) -> None:
        self.target = target
        self._closing = False
        made: Dict[str, Any] = {}

        def make() -> None:  # in a thread of its own: setns changes the calling thread only
            try:
                _setns(f"/var/run/netns/{ns}")
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(listen)
                sock.listen(64)
                made["sock"] = sock
            except OSError as e:
                made["error"] = e

        t = threading.Thread(target=make, name="loadscope-forwarder-setup")
        t.start()
        t.join()  # the thread ends in the hub's namespace and is gone; the socket stays there
        if "error" in made:
            raise RuntimeError(f"the forwarder to {target[0]}:{target[1]} could not listen in {ns}: {made['error']}")
        self.sock: socket.socket = made["sock"]
        self._thread = threading.Thread(target=self._accept, name="loadscope-forwarder", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.target, timeout=30)
            except OSError:
                conn.close()
                continue
            up.settimeout(None)
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True, name="loadscope-forwarder-pump").start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        buf = bytearray(1 << 18)
        try:
            while True:
                n = src.recv_into(buf)
                if n == 0:
                    break
                dst.sendall(memoryview(buf)[:n])
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            src.close()

    def close(self) -> None:
        self._closing = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def loopback_endpoint(url: str) -> Tuple[str, int]:
    """(host, port) of an http:// endpoint on this machine's loopback; a ConfigError otherwise
    (emulated nodes forward nothing off the machine)."""
    from urllib.parse import urlsplit

    u = urlsplit(url)
    host = u.hostname or ""
    if u.scheme != "http" or not (host == "localhost" or host.startswith("127.")):
        raise ConfigError(f"emulated nodes reach object storage on this machine's loopback only (an http://127.0.0.1:PORT "
                          f"endpoint, AWS_ENDPOINT_URL); the endpoint is {url!r}")
    return host, u.port or 80


class Nodes:
    """`nodes` emulated nodes joined by links of `link_mbit` Mbit/s each (0: not shaped); with
    `endpoint` (an http://127.0.0.1:PORT object store), a forwarder that lets the nodes reach it
    at `store_url`."""

    STORE = f"{SUBNET}.254"

    def __init__(self, nodes: int, link_mbit: float = 0.0, endpoint: Optional[str] = None) -> None:
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
        self.endpoint = loopback_endpoint(endpoint) if endpoint else None
        self.forwarder: Optional[Forwarder] = None

    def address(self, node: int) -> str:
        return f"{SUBNET}.{node + 1}"

    @property
    def master_addr(self) -> str:
        return self.address(0)

    def command(self, node: int, cmd: List[str]) -> List[str]:
        """`cmd` run inside node `node`'s namespace."""
        return ["ip", "netns", "exec", self.names[node], *cmd]

    def environ(self, node: int) -> Dict[str, str]:
        env = {"GLOO_SOCKET_IFNAME": self.ifnames[node], "MASTER_ADDR": self.master_addr}
        if self.endpoint:  # the store, through the forwarder (both variables the client reads)
            env["AWS_ENDPOINT_URL"] = env["AWS_ENDPOINT_URL_S3"] = f"http://{self.STORE}:{self.endpoint[1]}"
        return env

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
        if self.endpoint:
            _run(["ip", "-n", self.hub, "addr", "add", f"{self.STORE}/24", "dev", "br0"])
            self.forwarder = Forwarder(self.hub, (self.STORE, self.endpoint[1]), self.endpoint)
        for i, ns in enumerate(self.names):
            dev, port = self.ifnames[i], self.ports[i]
            # Made in the hub, one end moved to the node: nothing ever sits in the host's namespace.
            _run(["ip", "-n", self.hub, "link", "add", port, "type", "veth", "peer", "name", dev, "netns", ns])
            _run(["ip", "-n", self.hub, "link", "set", port, "master", "br0"])
            _run(["ip", "-n", self.hub, "link", "set", port, "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", dev])
            _run(["ip", "-n", ns, "link", "set", dev, "up"])
            if self.link_mbit:
                burst = bucket_bytes(self.link_mbit)
                for where, d in ((ns, dev), (self.hub, port)):
                    _run(["ip", "netns", "exec", where, "tc", "qdisc", "replace", "dev", d, "root", "tbf", "rate",
                          f"{self.link_mbit:g}mbit", "burst", str(burst), "latency", "100ms"])

    def close(self) -> None:
        if self.forwarder:
            self.forwarder.close()
            self.forwarder = None
        for ns in reversed(self.made):
            _delete(ns)
        self.made = []



def bucket_bytes(link_mbit: float) -> int:
    """The token bucket under a shaped link: 10 ms at the rate, at least 256 KiB, large enough
    that the kernel's timer granularity does not cap the rate below the one asked for. A link
    that sat idle passes this many bytes at once, so B bytes take at least (B - bucket) / rate."""
    return max(256 * 1024, int(link_mbit * 1e6 / 8 * 0.01))


def topology(config: Dict[str, Any]) -> Dict[str, Any]:
    """Where an arm's ranks run: world size, nodes, ranks per node and the link between nodes."""
    n, world = config.get("nodes", 1), config.get("world_size", 1)
    mbit = config.get("link_mbit") or 0.0
    link = ("one node: its ranks talk over loopback" if n == 1 else
            f"veth pairs to a bridge in network namespaces, tc tbf at {mbit:g} Mbit/s each way" if mbit else
            "veth pairs to a bridge in network namespaces, not shaped")
    return {"world_size": world, "nodes": n, "ranks_per_node": world // n, "link_mbit": mbit or None, "link": link}
