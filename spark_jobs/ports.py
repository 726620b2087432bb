"""Free TCP ports on 127.0.0.1 for the servers Weir starts (YARN, Kafka, Spark standalone) and the
ones its tests start.

A port is looked up, released, and only then bound by the server: in between, anything may take
it. Two things did, and one mechanism answers both:

- separate look-ups can return the same port twice, so a server's second port collides with its
  first. The sockets of one look-up are held open together, so its ports are distinct;
- a port the kernel hands out for `bind(0)` comes from its ephemeral range, the same range every
  outgoing connection's local port comes from. A client connecting anywhere (a Spark driver, an
  Airflow worker, the other test worker) can take it before the server binds it, and the server
  then dies with `BindException: Address already in use`. The ports here are drawn *below* the
  ephemeral range, where the kernel never places an outgoing connection, so only another
  explicit picker could take one.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

HOST = "127.0.0.1"
LOWEST = 10_000  # above the well-known and most registered services' ports
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux's default when unknown)."""
    try:
        low, high = EPHEMERAL_RANGE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_ports(count: int) -> tuple[int, ...]:
    """`count` distinct ports free on 127.0.0.1 now, below the ephemeral range (or, when that range
    leaves no room below it, whatever the kernel hands out)."""
    low, _ = ephemeral_range()
    candidates = range(LOWEST, low)
    held: list[socket.socket] = []
    try:
        for port in random.sample(candidates, min(len(candidates), 50 * count)):
            if len(held) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((HOST, port))
            except OSError:
                sock.close()
                continue
            held.append(sock)
        while len(held) < count:  # no room below the range, or none of it free: the kernel chooses
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((HOST, 0))
            held.append(sock)
        return tuple(int(sock.getsockname()[1]) for sock in held)
    finally:
        for sock in held:
            sock.close()
