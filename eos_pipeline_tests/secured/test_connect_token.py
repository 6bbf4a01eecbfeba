"""Spark Connect checks the bearer token the Spark resource sends (issue 28).

A Connect server with the stack's token interceptor behind an nginx TLS endpoint
(:mod:`eos_dev.stack.connect_auth`). Clients run in child processes: a token-carrying 3.5 client
speaks TLS and takes its trusted CA from gRPC's ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``, read once
per process; and a Connect session switches the whole process into Connect mode.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from eos_dev.stack.certs import ensure_tls, write_secret
from eos_dev.stack.config import StackConfig
from eos_dev.stack.connect_auth import (
    INTERCEPTOR_CLASS,
    TOKEN_FILE_ENV,
    find_nginx,
    interceptor_jar,
    nginx_conf,
)
from eos_dev.stack.processes import free_port, pid_alive, port_in_use
from eos_dev.stack.services import Stack
from eos_dev.stack.spark_cluster import launch, spark_env
from eos_dev.stack.spark_connect import CONNECT, connect_command, server_jars

pytestmark = [
    pytest.mark.integration,
    pytest.mark.spark,
    pytest.mark.skipif(
        shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists(),
        reason="nginx is not installed (tools/setup_system.sh installs it)",
    ),
]

_CLIENT = """
import json, os, sys
os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = sys.argv[3]
from eos_pipeline.adapters.spark_remote import connect
try:
    spark = connect(sys.argv[1], sys.argv[2] or None, retry_for=5)
    print(json.dumps({"ok": int(spark.range(5).count())}))
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__ + ": " + str(exc)}))
"""


def _plain_call(port: int) -> str | None:
    """One call without a token straight to the server's port: None while nothing listens,
    "served" if answered, else the refusal's text."""
    from pyspark.sql.connect.client import SparkConnectClient

    if not port_in_use("127.0.0.1", port):
        return None
    client = SparkConnectClient(f"sc://127.0.0.1:{port}", retry_policy={"max_retries": 0})
    try:
        client._analyze(method="spark_version")
        return "served"
    except Exception as exc:
        return str(exc)
    finally:
        client.close()


class TokenServer:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.config = StackConfig(
            state_dir=home, spark=True, spark_connect_port=free_port(), spark_memory="1g"
        )
        self.stack = Stack(self.config, say=lambda line: print(f"[connect-token] {line}"))
        self.proxy_port = free_port()
        self.token = secrets.token_urlsafe(24)
        self.tls = ensure_tls(home / "tls")
        self.pids: list[int] = []

    def up(self) -> None:
        token_file = self.home / "token"
        write_secret(token_file, self.token)
        jars = [*server_jars(self.config.cache_dir), interceptor_jar(self.config.cache_dir)]
        command = connect_command(
            self.config, jars, self.stack._dir(CONNECT), interceptors=[INTERCEPTOR_CLASS]
        )
        env = {**spark_env(self.config), TOKEN_FILE_ENV: str(token_file)}
        self.pids.append(launch(self.stack, CONNECT, command, env))
        proxy = self.home / "proxy"
        proxy.mkdir()
        conf = proxy / "nginx.conf"
        conf.write_text(
            nginx_conf(
                proxy,
                "127.0.0.1",
                self.proxy_port,
                self.config.spark_connect_port,
                self.tls.ca_pem.parent / "broker.pem",
                self.tls.ca_pem.parent / "broker.key",
            )
        )
        nginx = subprocess.Popen(
            [find_nginx(), "-c", str(conf), "-p", str(proxy)],
            stdout=(proxy / "out.log").open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pids.append(nginx.pid)
        # Ready once the server answers, and refuses, a plain call without a token.
        deadline = time.monotonic() + 240
        answer = None
        while time.monotonic() < deadline:
            answer = _plain_call(self.config.spark_connect_port)
            if answer is not None and "bearer token" in answer:
                break
            assert answer != "served", "the Connect server answered a client without a token"
            assert pid_alive(self.pids[0]), "the Connect server exited; see its log"
            time.sleep(1)
        else:
            raise AssertionError(f"Connect server not up: {answer}")
        assert port_in_use("127.0.0.1", self.proxy_port), "nginx does not listen"

    @property
    def direct_url(self) -> str:
        return f"sc://127.0.0.1:{self.config.spark_connect_port}"

    @property
    def proxy_url(self) -> str:
        return f"sc://127.0.0.1:{self.proxy_port}"

    def client(self, url: str, token: str | None) -> dict[str, object]:
        done = subprocess.run(
            [sys.executable, "-c", _CLIENT, url, token or "", str(self.tls.ca_pem)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
        assert lines, done.stderr[-2000:]
        return json.loads(lines[-1])

    def down(self) -> None:
        self.stack.down()
        for pid in self.pids[1:]:
            Stack._signal_group(pid, 15)
        deadline = time.monotonic() + 20
        while any(pid_alive(p) for p in self.pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in self.pids if pid_alive(p)]


@pytest.fixture(scope="module")
def token_server(
    tmp_path_factory: pytest.TempPathFactory, spark: SparkSession
) -> Iterator[TokenServer]:
    # ``spark`` first: the in-process JVM is forked before this test process opens a channel.
    server = TokenServer(tmp_path_factory.mktemp("connect-token"))
    started = time.monotonic()
    try:
        server.up()
        print(f"[timing] token-checked Connect server up in {time.monotonic() - started:.1f}s")
        yield server
    finally:
        server.down()


def test_the_right_token_through_tls_is_served(token_server: TokenServer) -> None:
    assert token_server.client(token_server.proxy_url, token_server.token) == {"ok": 5}


def test_a_wrong_token_is_refused_with_what_to_fix(token_server: TokenServer) -> None:
    answer = token_server.client(token_server.proxy_url, "not-the-token")
    assert "ok" not in answer
    assert "bearer token was refused" in str(answer["error"]), answer
    assert token_server.token not in str(answer)


def test_a_client_without_a_token_is_refused_even_on_the_server_port(
    token_server: TokenServer,
) -> None:
    answer = token_server.client(token_server.direct_url, None)
    assert "ok" not in answer
    assert "needs a bearer token" in str(answer["error"]), answer
