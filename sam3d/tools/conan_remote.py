"""The remotes of the project's Conan home: the recipe index of the checkout, and the optional
binary remote; configuration and Conan's answers.

The home's first remote is always INDEX_NAME ("sam3d-recipes"), a local-recipes-index over the
checkout's conan/ folder (conan/recipes/<name>/config.yml and all/, conan-center-index's layout):
the GGML recipe comes from there, as it does for anyone who runs `conan remote add sam3d-recipes
conan --type=local-recipes-index` (docs/sharing.md). It is a folder, not a server.

A binary remote is used only when SAM3D_CONAN_REMOTE=<url> is set (a conan_server or an
Artifactory Conan repository); it is then the home's second remote, named "sam3d", so Conan's own
credential variables CONAN_LOGIN_USERNAME_SAM3D and CONAN_PASSWORD_SAM3D log in to it. Without it
nothing waits on a server.

Binaries that travel between machines must not be taken where they cannot run: with a remote,
the host profile also sets os.glibc (conan/settings_user.yml) to this machine's glibc, so the
package_id carries it next to compiler.version. Without a remote the setting stays unset and
every package_id is the one it always was.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..core import paths

INDEX_NAME = "sam3d-recipes"
# The local-recipes-index of the checkout: the folder holding recipes/<name>/.
INDEX = Path("conan")
REMOTE_ENV = "SAM3D_CONAN_REMOTE"
NAME = "sam3d"
USER_ENV = f"CONAN_LOGIN_USERNAME_{NAME.upper()}"
PASSWORD_ENV = f"CONAN_PASSWORD_{NAME.upper()}"

# Conan's network settings, in the home's global.conf: a remote that does not answer fails in
# seconds (connect timeout 10 s, one retry), not after requests' defaults.
NET_CONF = {
    "core.net.http:timeout": "(10, 60)",
    "core.net.http:max_retries": "1",
    "core.download:retry": "1",
    "core.download:retry_wait": "1",
    "core.upload:retry": "1",
    "core.upload:retry_wait": "1",
}

# Conan's messages when a remote refuses the user (wrong password, no credentials while
# non-interactive, a user without the permission).
_CREDENTIALS = re.compile(
    r"Wrong user or password|Authentication error in remote|interactive mode disabled"
    r"|Permission denied for user|ForbiddenException|AuthenticationException"
)
_REMOTE = re.compile(rf"\[Remote: {NAME}\]|Unable to connect to remote {NAME}\b")


def url() -> str | None:
    """The remote's URL from SAM3D_CONAN_REMOTE, or None (no remote: today's behaviour)."""
    text = os.environ.get(REMOTE_ENV, "").strip()
    return text or None


def index_folder() -> Path:
    """The checkout's local-recipes-index: the URL of the INDEX_NAME remote."""
    return paths.root() / INDEX


def remotes_json() -> str:
    """The home's remotes.json: this checkout's recipe index, then the binary remote when configured."""
    u = url()
    remotes = [
        {"name": INDEX_NAME, "url": str(index_folder()), "verify_ssl": True, "remote_type": "local-recipes-index"}
    ]
    remotes += [{"name": NAME, "url": u, "verify_ssl": True}] if u else []
    return json.dumps({"remotes": remotes}, indent=1) + "\n"


def glibc_version() -> str:
    """This machine's glibc ("2.36"), the os.glibc setting of remote builds."""
    return os.confstr("CS_GNU_LIBC_VERSION").split()[-1]


def glibc_setting() -> str | None:
    """The os.glibc setting of this machine's binaries: its glibc with a remote, unset without."""
    return glibc_version() if url() else None


def host_settings() -> list[str]:
    """Extra host settings for Conan's command line: os.glibc with a remote, none without."""
    glibc = glibc_setting()
    return ["-s:h", f"os.glibc={glibc}"] if glibc else []


def credentials_message() -> str:
    return (
        f"the Conan remote {NAME} ({url()}) refused the credentials: set {USER_ENV} and "
        f"{PASSWORD_ENV} to a user of that remote (with write permission to publish)"
    )


@dataclass(frozen=True)
class Failure:
    """What went wrong with the remote, from Conan's output: credentials or the remote itself."""

    credentials: bool
    reason: str


def failure(output: str) -> Failure | None:
    """The remote's failure in Conan's output (a log or a JSON answer), or None when the output
    shows no problem with the remote (e.g. a compile error)."""
    creds = _CREDENTIALS.search(output)
    if creds:
        return Failure(True, creds.group(0))
    if not _REMOTE.search(output):
        return None
    errors = [line.strip() for line in output.splitlines() if "ERROR" in line or "error" in line]
    reason = errors[0] if errors else "no answer"
    return Failure(False, reason[:200])
