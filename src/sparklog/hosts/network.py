"""Several hosts on one machine: a Linux network namespace per host, each with its own address on
a private switch, and the faults a real network has (a host cut off, a partition, lost packets).

:class:`HostNetwork` makes, as root, a namespace for the switch (a bridge) and one per host, joined
by veth pairs: host *i* is ``10.<subnet>.0.<i>`` on its interface ``eth0``; nothing is addressed
outside the namespaces it made, and :meth:`HostNetwork.close` deletes them (a namespace's deletion
takes its interfaces, and their peers, with it). A process runs on a host when started through
:meth:`HostNetwork.command` (``ip netns exec``); it sees only that host's interfaces, so a broker
bound to its host's address is reachable from the other hosts only over the switch.

Faults:

- :meth:`cut_off` / :meth:`reconnect`: the host's port on the switch goes down (as a pulled cable:
  its packets go nowhere, its connections time out rather than reset);
- :meth:`partition`: hosts of one side drop every packet from the other side (nftables rules in
  each host; :meth:`heal` removes them);
- :meth:`lose_packets`: a host drops a share of the packets it receives (``numgen random``: this
  kernel has no ``tc netem``).

nftables faults need the ``nft`` command (Debian package ``nftables``, installed by ``make``).

The harness's own process stays outside every host, and must not talk to a host from there: the
machine's own namespace has a default route, which would carry the packets off the machine.
:meth:`HostNetwork.inside` (:func:`sparklog.netns.inside`) moves the calling thread onto a host
for a moment, so that sockets it opens there (a readiness probe, a client of a server on that
host) belong to that host for their whole life, and threads it starts there live there too.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from typing import Any

from sparklog.errors import InvalidRequest, NetworkUnavailable
from sparklog.netns import inside

SWITCH = "br0"
HOST_INTERFACE = "eth0"
NFT_TABLE = "sparklog_faults"


def _run(argv: Sequence[str], what: str) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise NetworkUnavailable(f"{what} failed: {' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def namespaces_available() -> str | None:
    """None when this process can make network namespaces, else why not (a sentence)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"slprobe{secrets.token_hex(3)}"
    try:
        _run(["ip", "netns", "add", probe], "making a network namespace")
    except NetworkUnavailable as exc:
        return str(exc)
    _run(["ip", "netns", "del", probe], "removing a network namespace")
    return None


class HostNetwork:
    """``hosts`` hosts on a private switch (see the module's docstring); a context manager."""

    def __init__(self, hosts: int, name: str | None = None) -> None:
        if not 1 <= hosts <= 200:
            raise InvalidRequest(f"a host network has 1 to 200 hosts, got {hosts}")
        self.hosts = hosts
        self.tag = name or f"sl{secrets.token_hex(3)}"  # short: interface and namespace names stay small
        self.subnet = ipaddress.ip_network(f"10.{secrets.randbelow(200) + 20}.0.0/24")
        self._made: list[str] = []
        self._nft: set[int] = set()  # hosts with a fault table

    # ----------------------------------------------------------------- names and addresses
    @property
    def switch(self) -> str:
        return f"{self.tag}-sw"

    def namespace(self, host: int) -> str:
        self._check(host)
        return f"{self.tag}-h{host}"

    def address(self, host: int) -> str:
        self._check(host)
        return str(self.subnet.network_address + host)

    def _check(self, host: int) -> None:
        if not 1 <= host <= self.hosts:
            raise InvalidRequest(f"host {host} is not one of 1..{self.hosts}")

    def _port(self, host: int) -> str:
        return f"p{host}"  # the host's port on the switch (in the switch's namespace)

    # ----------------------------------------------------------------- life cycle
    def start(self) -> HostNetwork:
        reason = namespaces_available()
        if reason is not None:
            raise NetworkUnavailable(reason)
        try:
            self._add_namespace(self.switch)
            sw = ["ip", "-n", self.switch]
            _run([*sw, "link", "add", SWITCH, "type", "bridge"], "making the switch")
            _run([*sw, "link", "set", SWITCH, "up"], "starting the switch")
            for host in range(1, self.hosts + 1):
                self._add_host(host)
        except BaseException:
            self.close()
            raise
        return self

    def _add_namespace(self, name: str) -> None:
        _run(["ip", "netns", "add", name], f"making namespace {name}")
        self._made.append(name)
        _run(["ip", "-n", name, "link", "set", "lo", "up"], f"starting {name}'s loopback")

    def _add_host(self, host: int) -> None:
        ns, port = self.namespace(host), self._port(host)
        self._add_namespace(ns)
        _run(
            [
                "ip",
                "link",
                "add",
                HOST_INTERFACE,
                "netns",
                ns,
                "type",
                "veth",
                "peer",
                "name",
                port,
                "netns",
                self.switch,
            ],
            f"wiring host {host}",
        )
        prefix = self.subnet.prefixlen
        _run(["ip", "-n", ns, "addr", "add", f"{self.address(host)}/{prefix}", "dev", HOST_INTERFACE], "addressing")
        _run(["ip", "-n", ns, "link", "set", HOST_INTERFACE, "up"], f"starting host {host}'s interface")
        _run(["ip", "-n", self.switch, "link", "set", port, "master", SWITCH], f"plugging host {host} in")
        _run(["ip", "-n", self.switch, "link", "set", port, "up"], f"starting host {host}'s port")

    def close(self) -> None:
        """Delete every namespace this network made (their interfaces go with them)."""
        for name in reversed(self._made):
            with contextlib.suppress(NetworkUnavailable, subprocess.TimeoutExpired):
                _run(["ip", "netns", "del", name], f"removing namespace {name}")
        self._made.clear()
        self._nft.clear()

    def __enter__(self) -> HostNetwork:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- processes on a host
    def inside(self, host: int) -> contextlib.AbstractContextManager[None]:
        """The calling thread on ``host`` for a block (:func:`inside`)."""
        return inside(self.namespace(host))

    def command(self, host: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run on ``host`` (in its namespace)."""
        return ["ip", "netns", "exec", self.namespace(host), *argv]

    def popen(self, host: int, argv: Sequence[str], **options: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(self.command(host, argv), **options)

    def run(self, host: int, argv: Sequence[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(host, argv), capture_output=True, text=True, timeout=timeout)

    # ----------------------------------------------------------------- faults
    def cut_off(self, host: int) -> None:
        """Pull the host's cable: its port on the switch goes down."""
        _run(["ip", "-n", self.switch, "link", "set", self._port(host), "down"], f"cutting host {host} off")

    def reconnect(self, host: int) -> None:
        _run(["ip", "-n", self.switch, "link", "set", self._port(host), "up"], f"reconnecting host {host}")

    def partition(self, side: Iterable[int], other: Iterable[int]) -> None:
        """No packet between the two sides (each host drops what comes from the other side)."""
        side, other = list(side), list(other)
        for hosts, far in ((side, other), (other, side)):
            for host in hosts:
                for source in far:
                    self._nft_rule(host, f"ip saddr {self.address(source)} drop")

    def lose_packets(self, host: int, percent: int, sources: Iterable[int] | None = None) -> None:
        """The host drops ``percent`` % of the packets it receives, at random (only of those from
        the hosts ``sources``, if given)."""
        if not 0 < percent < 100:
            raise InvalidRequest(f"percent must be between 0 and 100, got {percent}")
        if sources is None:
            self._nft_rule(host, f"numgen random mod 100 < {percent} drop")
            return
        for source in sources:
            self._nft_rule(host, f"ip saddr {self.address(source)} numgen random mod 100 < {percent} drop")

    def heal(self) -> None:
        """Every nftables fault removed, every host reconnected."""
        for host in sorted(self._nft):
            _run(["ip", "netns", "exec", self.namespace(host), "nft", "delete", "table", "inet", NFT_TABLE], "healing")
        self._nft.clear()
        for host in range(1, self.hosts + 1):
            self.reconnect(host)

    def _nft_rule(self, host: int, rule: str) -> None:
        if shutil.which("nft") is None:
            raise NetworkUnavailable("packet faults need the nft command (Debian package nftables; `make` installs it)")
        nft = ["ip", "netns", "exec", self.namespace(host), "nft"]
        if host not in self._nft:
            _run([*nft, "add", "table", "inet", NFT_TABLE], "making a fault table")
            chain = "{ type filter hook input priority 0; }"
            _run([*nft, "add", "chain", "inet", NFT_TABLE, "input", chain], "making a fault chain")
            self._nft.add(host)
        _run([*nft, "add", "rule", "inet", NFT_TABLE, "input", *rule.split()], f"adding fault '{rule}'")
