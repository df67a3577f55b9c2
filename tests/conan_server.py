"""A real conan_server on 127.0.0.1 for the remote tests: its own environment, a temporary home.

conan-server ships its own copy of the conan package, so it lives in its own virtual
environment, made once from ci/conan-server.lock (hashed) in the shared cache and reused.
"""

from __future__ import annotations

import fcntl
import hashlib
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sam3d.core import paths

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "ci" / "conan-server.lock"
USER = "sam3d-ci"

# conan_server's own launcher listens on 0.0.0.0; this one listens on loopback only.
LAUNCH = (
    "import sys; from conans.server.launcher import ServerLauncher; "
    "ServerLauncher(server_dir=sys.argv[1]).server.run(host='127.0.0.1', port=int(sys.argv[2]))"
)


def server_python() -> Path:
    """The environment's python, made from ci/conan-server.lock when missing (once per lock)."""
    digest = hashlib.sha256(LOCK.read_bytes()).hexdigest()[:16]
    venv = paths.cache_dir() / "conan-server" / digest
    python = venv / "bin" / "python"
    done = venv / ".installed"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            subprocess.run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    "--require-hashes",
                    "-r",
                    str(LOCK),
                ],
                check=True,
            )
            done.write_text(digest + "\n")
    return python


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVER_CONF = """[server]
jwt_secret: {jwt}
jwt_expire_minutes: 120
ssl_enabled: False
port: {port}
public_port:
host_name: 127.0.0.1
authorize_timeout: 1800
disk_storage_path: ./data
disk_authorize_timeout: 1800
updown_secret: {updown}

[write_permissions]
*/*@*/*: {user}

[read_permissions]
*/*@*/*: *

[users]
{user}: {password}
"""


@dataclass
class Server:
    home: Path
    port: int
    password: str
    process: subprocess.Popen

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def data(self) -> Path:
        return self.home / "data"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start(home: Path) -> Server:
    """Starts conan_server in `home` on a free loopback port with one user (USER, random password)
    and waits until it accepts connections."""
    python = server_python()
    home.mkdir(parents=True)
    port, password = _free_port(), secrets.token_hex(8)
    (home / "server.conf").write_text(
        SERVER_CONF.format(
            port=port, user=USER, password=password, jwt=secrets.token_hex(16), updown=secrets.token_hex(16)
        )
    )
    log = open(home / "server.log", "w")
    proc = subprocess.Popen([str(python), "-c", LAUNCH, str(home), str(port)], stdout=log, stderr=subprocess.STDOUT)
    server = Server(home, port, password, proc)
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return server
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"conan_server did not start: {(home / 'server.log').read_text()}") from None
            time.sleep(0.1)
