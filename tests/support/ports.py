"""Free TCP ports on 127.0.0.1 for the servers a test starts."""

from __future__ import annotations

import socket


def free_ports(count: int) -> tuple[int, ...]:
    """`count` distinct free ports: the sockets are held open together, so the kernel cannot hand
    out one port twice (separate look-ups can, and an API server then collides with a log server)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return tuple(int(sock.getsockname()[1]) for sock in sockets)
    finally:
        for sock in sockets:
            sock.close()
