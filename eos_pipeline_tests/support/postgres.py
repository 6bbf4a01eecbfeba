"""A throwaway PostgreSQL server for tests: Debian's binaries, a temp data dir, a free port.

PostgreSQL refuses to run as root, so as root the server runs as the ``postgres`` user that
Debian's package creates; its data dir lives under ``/tmp`` (pytest's temp dirs are private to
root). The server listens on 127.0.0.1 only, with ``trust`` auth for its one user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from eos_dev.stack.services import free_port

USER = "eos"
DATABASE = "dagster"


def postgres_bin() -> Path | None:
    """Directory of ``initdb``/``pg_ctl`` (Debian keeps them off PATH), or None."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent  # /usr/local/bin may hold only some links
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(versions[-1]).parent if versions else None


def missing_reason() -> str | None:
    """Why no server can be started here, or None."""
    if postgres_bin() is None:
        return "PostgreSQL's server binaries are not installed (`make test` installs postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server as"
    return None


def _run(command: list[str], owner: str | None) -> None:
    if owner is not None:
        command = ["runuser", "-u", owner, "--", *command]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Start a server, create the database, yield its URL; stop and delete it afterwards."""
    bin_dir = postgres_bin()
    assert bin_dir is not None, missing_reason()
    owner = "postgres" if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="eos-pg-", dir="/tmp"))
    if owner is not None:
        shutil.chown(root, user=owner)
    data, port = root / "data", free_port()
    _run(
        [str(bin_dir / "initdb"), "-D", str(data), "-U", USER, "--auth=trust", "-E", "UTF8"], owner
    )
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    pg_ctl = str(bin_dir / "pg_ctl")
    _run([pg_ctl, "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"], owner)
    try:
        _run(
            [str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", USER, DATABASE],
            owner,
        )
        # SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3; dagster-postgres ships psycopg2
        yield f"postgresql+psycopg2://{USER}@127.0.0.1:{port}/{DATABASE}"
    finally:
        with contextlib.suppress(RuntimeError):
            _run([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"], owner)
        shutil.rmtree(root, ignore_errors=True)
