"""The stack's ZooKeeper: its configuration, its readiness probe and how it is started.

ZooKeeper holds the keeper's per-partition state (see :mod:`eos_pipeline.adapters.keeper`); the
broker itself runs in KRaft mode and does not use it.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING

from eos_dev.stack.config import StackConfig, StackError
from eos_dev.stack.processes import wait_ready

if TYPE_CHECKING:
    from eos_dev.stack.services import Stack


def zookeeper_ready(host: str, port: int) -> bool:
    """True once ZooKeeper serves requests.

    ``ruok`` is not enough: it answers ``imok`` while the server is still (or never) coming up;
    ``srvr`` reports the server's version only once it is serving.
    """
    try:
        with socket.create_connection((host, port), timeout=1.0) as sock:
            sock.sendall(b"srvr")
            return sock.recv(256).startswith(b"Zookeeper version")
    except OSError:
        return False


def zoo_cfg(cfg: StackConfig, data: Path) -> str:
    """``zoo.cfg`` for a single standalone server keeping its data in ``data``."""
    return "\n".join(
        [
            "tickTime=2000",
            f"dataDir={data}",
            f"clientPort={cfg.zookeeper_port}",
            f"clientPortAddress={cfg.host}",
            "maxClientCnxns=200",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr",
            # Sessions as short as 2 s: lets tests expire a session quickly.
            "minSessionTimeout=2000",
            "maxSessionTimeout=60000",
            "",
        ]
    )


def start_zookeeper(stack: Stack, java: str) -> None:
    """Start ZooKeeper and wait until it serves; a running one is only checked."""
    cfg = stack.config
    if pid := stack._running_pid("zookeeper"):
        if not zookeeper_ready(cfg.host, cfg.zookeeper_port):
            raise StackError(
                f"zookeeper (pid {pid}) is running but does not answer on "
                f"{cfg.zookeeper_hosts}; see {stack.log_path('zookeeper')} or run `stack down`."
            )
        stack.say(f"zookeeper already running (pid {pid}) at {cfg.zookeeper_hosts}")
        return
    stack._check_ports("zookeeper", {"--zookeeper-port": cfg.zookeeper_port})
    home = stack._dir("zookeeper")
    (home / "data").mkdir(parents=True, exist_ok=True)
    conf = home / "zoo.cfg"
    conf.write_text(zoo_cfg(cfg, home / "data"))
    pid = stack._launch(
        "zookeeper",
        java,
        [
            "-Dzookeeper.admin.enableServer=false",
            "-cp",
            stack._classpath("zookeeper"),
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(conf),
        ],
        cfg.zookeeper_heap,
    )
    stack.say(f"starting zookeeper (pid {pid}) ...")
    wait_ready(
        "zookeeper",
        lambda: zookeeper_ready(cfg.host, cfg.zookeeper_port),
        pid,
        stack.log_path("zookeeper"),
    )
    stack.say(f"zookeeper ready at {cfg.zookeeper_hosts}")
