"""A local certificate authority and the certificate every secured service presents.

The secured stack (:mod:`eos_dev.stack.secure`) speaks TLS between brokers, between controllers
and to clients. Nothing here leaves the state directory: a fresh CA per stack, one server
certificate for ``127.0.0.1``/``localhost`` signed by it (the brokers share it; their mutual TLS
principal is its subject), a PKCS#12 keystore for the JVMs and the CA as PEM for every client
(librdkafka's ``ssl.ca.location``, the JVM's PEM truststore). Made with ``openssl``, which Debian
and the JDK images both carry.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from eos_dev.stack.config import StackError

#: The brokers' certificate subject, hence their principal on the mutual-TLS listeners
#: (``User:CN=eos-broker``), which the stack makes a super user.
BROKER_SUBJECT = "CN=eos-broker"


@dataclass(frozen=True)
class TlsFiles:
    """Where the stack's TLS material lives; the keystore password sits in its own 0600 file."""

    ca_pem: Path
    keystore: Path
    keystore_password_file: Path

    @property
    def keystore_password(self) -> str:
        return self.keystore_password_file.read_text().strip()


def _openssl(*args: str, cwd: Path) -> None:
    if shutil.which("openssl") is None:
        raise StackError(
            "openssl not found: the secured stack makes its own CA with it. Install it "
            "(`apt-get install openssl`)."
        )
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StackError(f"openssl {args[0]} failed: {done.stderr.strip()[-500:]}")


def write_secret(path: Path, value: str) -> None:
    """A secret file only its owner can read (created with that mode: never briefly wider)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(value)


def ensure_tls(folder: Path, days: int = 30) -> TlsFiles:
    """The CA and server keystore under ``folder``, made once and reused on later ``up``s."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    files = TlsFiles(folder / "ca.pem", folder / "broker.p12", folder / "keystore.password")
    if files.ca_pem.exists() and files.keystore.exists() and files.keystore_password_file.exists():
        return files
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", str(days), "-subj", "/CN=eos-local-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=folder,
    )  # fmt: skip
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
        "-subj", f"/{BROKER_SUBJECT}",
        cwd=folder,
    )  # fmt: skip
    (folder / "broker.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
    )
    _openssl(
        "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "broker.pem", "-days", str(days), "-extfile", "broker.ext",
        cwd=folder,
    )  # fmt: skip
    write_secret(files.keystore_password_file, secrets.token_urlsafe(18))
    _openssl(
        "pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key", "-certfile", "ca.pem",
        "-name", "broker", "-out", "broker.p12",
        "-passout", f"file:{files.keystore_password_file}",
        cwd=folder,
    )  # fmt: skip
    for private in ("ca.key", "broker.key", "broker.p12"):
        os.chmod(folder / private, 0o600)
    (folder / "broker.csr").unlink(missing_ok=True)
    return files
