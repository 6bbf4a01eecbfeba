"""Spark Connect with a bearer-token check: a TLS proxy (nginx) in front of a checking server.

Spark Connect 3.5 authenticates nobody, listens on every interface (no bind-address setting
before 4.0), and its Python client, once given a token, insists on TLS, which the server does not
speak. So two parts:

* the server loads :file:`java/BearerTokenInterceptor.java` (compiled here against the Connect
  jar's shaded gRPC) through ``spark.connect.grpc.interceptor.classes``: any call without
  ``authorization: Bearer <token>`` is refused with ``UNAUTHENTICATED`` and a message saying
  what to do, whoever reaches the port;
* Debian's ``nginx`` terminates TLS (the stack's local CA, :mod:`eos_dev.stack.certs`) and passes
  the calls on with ``grpc_pass``, headers included.

The token lives in a 0600 file; the interceptor reads it through ``EOS_SPARK_CONNECT_TOKEN_FILE``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from eos_dev.stack.config import StackError
from eos_pipeline.adapters.jvm_artifacts import default_cache_dir, ensure_bundle

INTERCEPTOR_CLASS = "eos.connect.BearerTokenInterceptor"
#: Serves only loopback peers: the stack's Connect server answers nobody but its own machine.
LOOPBACK_INTERCEPTOR_CLASS = "eos.connect.LoopbackOnlyInterceptor"
TOKEN_FILE_ENV = "EOS_SPARK_CONNECT_TOKEN_FILE"
_SOURCES = tuple(
    Path(__file__).parent / "java" / f"{name}.java"
    for name in ("BearerTokenInterceptor", "LoopbackOnlyInterceptor")
)
#: The jar's name starts with this (how the server's command finds it among its jars).
JAR_STEM = "eos-connect-auth-"


def interceptor_jar(cache_dir: Path | None = None) -> Path:
    """The interceptors compiled against the pinned Connect jar (cached by source digest)."""
    cache = cache_dir or default_cache_dir()
    [connect] = [j for j in ensure_bundle("spark-connect", cache) if "spark-connect" in j.name]
    source = "\0".join(path.read_text() for path in _SOURCES)
    digest = hashlib.sha256(f"{source}\0{connect.name}".encode()).hexdigest()[:16]
    target = cache / "eos-connect" / f"{JAR_STEM}{digest}.jar"
    if target.exists():
        return target
    javac = shutil.which("javac")
    if javac is None:
        raise StackError("javac not found: the Connect token check is compiled on first use")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        classes = Path(tmp, "classes")
        done = subprocess.run(
            [javac, "--release", "17", "-nowarn", "-cp", str(connect), "-d", str(classes),
             *map(str, _SOURCES)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise StackError(f"compiling the Connect interceptors failed:\n{done.stderr[-2000:]}")
        staged = Path(tmp, target.name)
        with zipfile.ZipFile(staged, "w") as jar:
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        staged.replace(target)
    return target


def nginx_conf(home: Path, host: str, port: int, upstream_port: int, cert: Path, key: Path) -> str:
    """An nginx serving TLS + HTTP/2 on ``port`` and passing gRPC to the Connect server."""
    for sub in ("client", "proxy", "fastcgi", "uwsgi", "scgi"):
        (home / "tmp" / sub).mkdir(parents=True, exist_ok=True)
    return f"""daemon off;
worker_processes 1;
pid {home}/nginx.pid;
error_log {home}/error.log warn;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {home}/tmp/client;
  proxy_temp_path {home}/tmp/proxy;
  fastcgi_temp_path {home}/tmp/fastcgi;
  uwsgi_temp_path {home}/tmp/uwsgi;
  scgi_temp_path {home}/tmp/scgi;
  client_max_body_size 0;
  server {{
    listen {host}:{port} ssl http2;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    location / {{
      grpc_pass grpc://{host}:{upstream_port};
      grpc_read_timeout 3600s;
      grpc_send_timeout 3600s;
    }}
  }}
}}
"""


def find_nginx() -> str:
    nginx = shutil.which("nginx") or (
        "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
    )
    if nginx is None:
        raise StackError("nginx not found: the Connect token check's TLS endpoint needs it "
                         "(`apt-get install nginx`)")  # fmt: skip
    return nginx
