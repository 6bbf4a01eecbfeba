"""Port picking: a stack service's port must stay its own while the service is down."""

from __future__ import annotations

import socket

import pytest

from eos_dev.stack import processes
from eos_dev.stack.processes import free_port, port_in_use


def test_free_ports_are_below_the_ephemeral_range_and_bindable() -> None:
    top = processes._ephemeral_start()
    ports = {free_port() for _ in range(50)}
    assert len(ports) > 40, ports  # random picks: parallel callers rarely meet
    for port in ports:
        assert 10_000 <= port < top
    port = ports.pop()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        assert port_in_use("127.0.0.1", port)


def test_a_port_taken_is_never_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        # The pick range starts at the taken port.
        monkeypatch.setattr(processes, "_LOWEST_PICK", taken)
        monkeypatch.setattr(processes, "_ephemeral_start", lambda: taken + 1_000)
        seen = {free_port() for _ in range(100)}
        assert taken not in seen
