#!/usr/bin/env bash
# Usage: ci/bootstrap.sh [COMMAND ARGS...]
# Makes (or refreshes) the virtual environment .venv from requirements.lock (hashed), installs
# the sam3d package into it and the duplicate-code checker jscpd from ci/jscpd/package-lock.json
# (npm ci), then runs COMMAND inside it, e.g. `ci/bootstrap.sh nox -s build`.
# Works where the system Python refuses global installs (PEP 668). Needs python3 >= 3.11 with
# venv (Debian: python3-venv), which it installs with apt-get when run as root.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
py=${PYTHON:-python3}

if ! "$py" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "bootstrap: installing python3 and python3-venv with apt-get"
        # One line unless it fails; then the tail of apt-get's output.
        aptlog=$(mktemp)
        if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3 python3-venv; } \
                > "$aptlog" 2>&1; then
            tail -n 20 "$aptlog" >&2
            echo "bootstrap: apt-get failed (above)" >&2
            exit 2
        fi
        rm -f "$aptlog"
    else
        echo "bootstrap: need Python >= 3.11 with venv; install the Debian packages python3 python3-venv" >&2
        exit 2
    fi
fi

stamp="$venv/.requirements.sha256"
want=$(cat "$root/requirements.lock" "$root/pyproject.toml" | sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    # An existing environment is updated in place, never deleted: another command of this
    # checkout may be running its cmake or ninja right now.
    if [ -x "$venv/bin/python" ]; then
        echo "bootstrap: updating $venv from requirements.lock"
    else
        echo "bootstrap: creating $venv from requirements.lock"
        "$py" -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --require-hashes --only-binary=:all: \
        -r "$root/requirements.lock"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e "$root"
    echo "$want" > "$stamp"
fi

# jscpd (tests/test_duplicates.py), pinned with its integrity hashes in ci/jscpd/package-lock.json.
jscpd="$root/ci/jscpd"
jstamp="$jscpd/node_modules/.package-lock.sha256"
jwant=$(sha256sum < "$jscpd/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$jstamp" 2>/dev/null)" != "$jwant" ]; then
    if ! command -v npm >/dev/null; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            echo "bootstrap: installing nodejs and npm with apt-get (for jscpd)"
            apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm >/dev/null
        else
            echo "bootstrap: need npm for the duplicate-code check; install the Debian packages nodejs npm" >&2
            exit 2
        fi
    fi
    echo "bootstrap: installing jscpd from ci/jscpd/package-lock.json"
    npm ci --prefix "$jscpd" --no-audit --no-fund --loglevel=error >/dev/null
    echo "$jwant" > "$jstamp"
fi

export PATH="$venv/bin:$PATH" VIRTUAL_ENV="$venv"
cd "$root"
[ $# -eq 0 ] || exec "$@"
