"""Free TCP ports on 127.0.0.1 for the servers Weir starts (YARN, Kafka, Spark standalone) and the
ones its tests start; whether a port a server keeps across restarts is still free (`bindable`), and
who holds it when not (`holder`).

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

import os
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


def bindable(port: int) -> bool:
    """Whether a server could bind `port` on 127.0.0.1 now. As servers do, with `SO_REUSEADDR`: a
    connection of an earlier server still closing (`TIME_WAIT`) does not hold the port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def holder(port: int) -> str:
    """Who holds `port` for a server, for a message: "pid 123 (java)", read from /proc (the socket
    bound to the port and not connected anywhere, then the process with that socket open), or
    "another process" when /proc does not tell (another user's process, another OS)."""
    sockets: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if int(local.rsplit(":", 1)[1], 16) == port and int(remote.rsplit(":", 1)[1], 16) == 0:
                sockets.add(f"socket:[{inode}]")
    for process in Path("/proc").iterdir() if sockets else ():
        if not process.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in sockets for fd in (process / "fd").iterdir()):
                return f"pid {process.name} ({(process / 'comm').read_text().strip()})"
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return "another process"
