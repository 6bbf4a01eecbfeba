"""A ZooKeeper + Kafka pair that fault tests may kill and restart at will.

Separate from the session's stack (which other tests share and must find running), on free
ports. One is shared by the fault suite's modules that need it (the ``own_stack`` fixture of
``faults/conftest.py``): starting and stopping a stack costs more than the tests that use it.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

from eos_dev.stack.processes import port_in_use
from eos_dev.stack.services import Stack, StackConfig, find_java, free_port


class OwnStack:
    """A ZooKeeper + Kafka pair on free ports, with crash-stop and (delayed) restart."""

    def __init__(self, state_dir: Path) -> None:
        self.config = StackConfig(
            state_dir=state_dir,
            zookeeper_port=free_port(),
            kafka_port=free_port(),
            controller_port=free_port(),
        )
        self.stack = Stack(self.config, say=lambda line: print(f"[own stack] {line}"))

    def stop(self, name: str) -> None:
        """SIGKILL the service: a crash, not a clean shutdown."""
        pid = self.stack._running_pid(name)
        assert pid is not None, f"{name} is not running"
        Stack._signal_group(pid, signal.SIGKILL)
        while self.stack._running_pid(name) is not None:
            time.sleep(0.05)
        # The kernel frees the ports when the last thread is gone: wait for that, so a restart
        # right after finds them free (a JVM killed under load takes a moment).
        ports = [self.config.zookeeper_port]
        if name != "zookeeper":
            ports = [self.config.kafka_port, self.config.controller_port]
        deadline = time.monotonic() + 30
        while any(port_in_use(self.config.host, p) for p in ports):
            assert time.monotonic() < deadline, f"{name} killed, its ports {ports} still taken"
            time.sleep(0.05)

    def start(self, name: str) -> None:
        java = find_java()
        if name == "zookeeper":
            self.stack._start_zookeeper(java)
        else:
            self.stack._start_kafka(java)

    def restart_later(self, name: str, delay: float) -> threading.Thread:
        thread = threading.Thread(target=lambda: (time.sleep(delay), self.start(name)))
        thread.start()
        return thread
