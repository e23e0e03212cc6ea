"""Hosts on one machine: Linux network namespaces joined by veth pairs to a bridge.

:class:`Network` makes one namespace per host (:data:`HOSTS`), each with its own loopback
and one interface ``eth0`` whose peer is a port of a bridge in the root namespace. The bridge
has the subnet's first address: the test process (the recorder, the proxies, the clients)
reaches every host there, and every host reaches it. Each host's process sees its own
hostname (a UTS namespace per process, named after the host), so ``worker_id`` says which
host wrote.

Neighbours are static (``nud permanent``) everywhere, so taking a host's link down
(:meth:`Host.down`: the bridge-side end of its veth) is a partition in which packets vanish:
no ARP failure turns into ``EHOSTUNREACH``, nothing is reset; TCP retransmits until the link
comes back (:meth:`Host.up`) or a timeout gives up.

Every name carries the owner's pid (``awc<pid>-<host>`` for links, ``awc-<pid>-<host>`` for
namespaces), so :func:`remove_stale` can delete the leftovers of a killed run — and only
those: names of a live owner are left alone. Needs root and iproute2 (``ip``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass

HOSTS = ("db", "web", "w1", "w2", "ops", "ops2", "pg1", "pg2", "etcd", "r1", "r2", "r3")
_LINK_PREFIX = "awc"
_NETNS_PREFIX = "awc-"
# Subnets tried in turn; one not on any interface of this machine is taken.
_SUBNETS = [ipaddress.ip_network(f"10.213.{i}.0/24") for i in range(1, 250)]


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def netns_name(owner: int, host: str) -> str:
    return f"{_NETNS_PREFIX}{owner}-{host}"


def link_name(owner: int, host: str) -> str:
    name = f"{_LINK_PREFIX}{owner}-{host}"
    assert len(name) <= 15, f"interface name {name!r} is too long"
    return name


def supported() -> str | None:
    """Why hosts cannot be made here (not root, no ``ip``, no namespaces), or None."""
    if os.geteuid() != 0:
        return "the cluster suite needs root (network namespaces)"
    try:
        ip("netns", "list")
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"iproute2 cannot list network namespaces: {exc}"
    return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (an owner of names and directories of a run)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_netns_processes(netns: str) -> int:
    """SIGKILL every process inside ``netns`` (all started by this suite); how many."""
    found = ip("netns", "pids", netns, check=False).stdout.split()
    for pid in found:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    return len(found)


def remove_stale() -> list[str]:
    """Delete the namespaces and links of earlier runs whose owner process is gone (and kill
    what still runs inside them); returns their names."""
    removed = []
    for line in ip("netns", "list").stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = re.fullmatch(rf"{re.escape(_NETNS_PREFIX)}(\d+)-\w+", name)
        if match and not alive(int(match.group(1))):
            kill_netns_processes(name)
            ip("netns", "delete", name, check=False)
            removed.append(name)
    for line in ip("-o", "link", "show").stdout.splitlines():
        match = re.match(rf"\d+: ({re.escape(_LINK_PREFIX)}(\d+)-\w+)[@:]", line)
        if match and not alive(int(match.group(2))):
            ip("link", "delete", match.group(1), check=False)
            removed.append(match.group(1))
    return removed


def _free_subnet() -> ipaddress.IPv4Network:
    used = ip("-o", "-4", "addr", "show").stdout
    for subnet in _SUBNETS:
        prefix = str(subnet.network_address).rsplit(".", 1)[0] + "."
        if f" {prefix}" not in used:
            return subnet
    raise RuntimeError("no free 10.213.x.0/24 subnet for the cluster's bridge")


@dataclass
class Host:
    """One host: its namespace, address, and the bridge-side end of its link."""

    name: str
    netns: str
    address: str
    link: str  # the bridge-side end of the veth pair (its down is the partition)
    mac: str = ""
    is_down: bool = False

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` run on this host: in its network namespace, with its hostname. The
        process is ``argv``'s program itself (``ip netns exec``, ``unshare`` and ``sh`` each
        exec the next), so its pid and process group are the Popen's."""
        return [
            "ip",
            "netns",
            "exec",
            self.netns,
            "unshare",
            "--uts",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            self.name,
            *argv,
        ]

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.netns, *argv], check=check, capture_output=True, text=True
        )

    def down(self) -> None:
        """Partition: this host's link goes down; its packets vanish both ways."""
        ip("link", "set", self.link, "down")
        self.is_down = True

    def up(self) -> None:
        ip("link", "set", self.link, "up")
        self.is_down = False


class Network:
    """The bridge and the hosts of one run; :meth:`create`, :meth:`destroy`."""

    def __init__(self, hosts: tuple[str, ...] = HOSTS, owner: int | None = None) -> None:
        self.owner = owner if owner is not None else os.getpid()
        self.names = hosts
        self.bridge = link_name(self.owner, "br")
        self.subnet: ipaddress.IPv4Network | None = None
        self.bridge_address = ""
        self.hosts: dict[str, Host] = {}

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def create(self) -> Network:
        remove_stale()
        self.subnet = _free_subnet()
        addresses = self.subnet.hosts()
        self.bridge_address = str(next(addresses))
        prefix = self.subnet.prefixlen
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.bridge_address}/{prefix}", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for name in self.names:
            host = Host(
                name,
                netns_name(self.owner, name),
                str(next(addresses)),
                link_name(self.owner, name),
            )
            self.hosts[name] = host
            ip("netns", "add", host.netns)
            ip(
                "link",
                "add",
                host.link,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                host.netns,
            )
            ip("link", "set", host.link, "master", self.bridge)
            ip("link", "set", host.link, "up")
            ip("-n", host.netns, "addr", "add", f"{host.address}/{prefix}", "dev", "eth0")
            ip("-n", host.netns, "link", "set", "eth0", "up")
            ip("-n", host.netns, "link", "set", "lo", "up")
            host.mac = _mac(ip("-n", host.netns, "-o", "link", "show", "eth0").stdout)
        self._static_neighbours()
        return self

    def _static_neighbours(self) -> None:
        bridge_mac = _mac(ip("-o", "link", "show", self.bridge).stdout)
        everyone = [(self.bridge_address, bridge_mac)] + [
            (h.address, h.mac) for h in self.hosts.values()
        ]
        for host in self.hosts.values():
            for address, mac in everyone:
                if address != host.address:
                    ip(
                        "-n", host.netns, "neigh", "replace", address,
                        "lladdr", mac, "dev", "eth0", "nud", "permanent",
                    )  # fmt: skip
        for host in self.hosts.values():
            ip(
                "neigh", "replace", host.address,
                "lladdr", host.mac, "dev", self.bridge, "nud", "permanent",
            )  # fmt: skip

    def destroy(self) -> None:
        """Kill every process in the hosts, delete the namespaces (their veths go with
        them) and the bridge. Safe to call twice, and after a partial :meth:`create`."""
        for host in self.hosts.values():
            kill_netns_processes(host.netns)
        deadline = time.monotonic() + 5
        for host in self.hosts.values():
            while ip("netns", "pids", host.netns, check=False).stdout.strip():
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            ip("netns", "delete", host.netns, check=False)
            ip("link", "delete", host.link, check=False)
        ip("link", "delete", self.bridge, check=False)
        self.hosts.clear()


def _mac(link_line: str) -> str:
    match = re.search(r"link/ether ([0-9a-f:]{17})", link_line)
    if match is None:
        raise RuntimeError(f"no MAC address in {link_line!r}")
    return match.group(1)
