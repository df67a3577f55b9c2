"""`python -m sam3d publish`: upload each variant's GGML and core packages to the Conan remote."""

from __future__ import annotations

import time

from ..core import paths
from ..core.variants import Variant
from . import conan, conan_remote
from .build import prepare


def publish_variants(vs: list[Variant]) -> None:
    """Checks the remote's credentials (one-line ConanError), then per variant creates the core
    package (GGML from the cache or the remote, built when missing) and uploads the recipe
    revisions and binaries it used, printing "[i/n] variant: ..." progress."""
    user = conan.check_publish_credentials()
    prepare(vs)
    for i, v in enumerate(vs, 1):
        log = paths.logs_dir() / f"publish-{v.name}.log"
        log.unlink(missing_ok=True)
        t0 = time.monotonic()
        print(
            f"[{i}/{len(vs)}] {v.name}: creating the core package and uploading it with GGML to "
            f"{conan_remote.url()} as {user} ... (log: {log})",
            flush=True,
        )
        conan.publish(v, log)
        print(f"[{i}/{len(vs)}] {v.name}: published in {time.monotonic() - t0:.1f} s", flush=True)
