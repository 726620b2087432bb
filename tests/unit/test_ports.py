"""The ports Weir's servers (and its tests' servers) are started on."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from spark_jobs import ports


def test_ports_are_distinct_free_and_below_the_range_outgoing_connections_take() -> None:
    low, _ = ports.ephemeral_range()
    drawn = ports.free_ports(9)
    assert len(set(drawn)) == 9
    assert all(ports.LOWEST <= port < low for port in drawn)
    held = []
    try:
        for port in drawn:  # each can be bound and listened on now
            sock = socket.socket()
            sock.bind((ports.HOST, port))
            sock.listen()
            held.append(sock)
    finally:
        for sock in held:
            sock.close()


def test_a_port_in_use_is_never_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as busy:
        busy.bind((ports.HOST, 0))
        busy.listen()
        taken = busy.getsockname()[1]
        # A range of two ports, one of them taken: the other is the only answer.
        monkeypatch.setattr(ports, "LOWEST", taken - 1 if taken % 2 else taken)
        monkeypatch.setattr(ports, "ephemeral_range", lambda: (ports.LOWEST + 2, 60999))
        for _ in range(20):
            assert taken not in ports.free_ports(1)


def test_a_held_port_is_not_bindable_and_its_holder_is_named() -> None:
    comm = Path("/proc/self/comm").read_text().strip()
    with socket.socket() as busy:
        busy.bind((ports.HOST, 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert not ports.bindable(port)
        assert ports.holder(port) == f"pid {os.getpid()} ({comm})"
    assert ports.bindable(port)


def test_a_closed_servers_connections_closing_do_not_hold_its_port() -> None:
    """The server side closed first, so its accepted connection waits in TIME_WAIT on the port:
    a restarted server binds it anyway (both with SO_REUSEADDR, as the JVM's servers set it), so
    the port counts as free."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((ports.HOST, 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection((ports.HOST, port))
        accepted, _ = server.accept()
        accepted.close()
    client.close()
    assert ports.bindable(port)
