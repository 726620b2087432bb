"""The ports Weir's servers (and its tests' servers) are started on."""

from __future__ import annotations

import socket

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
