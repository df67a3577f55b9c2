"""Shared test helpers."""

from __future__ import annotations

import copy

import pytest

PROFILE_SHA = "a" * 64


def _result(variant="release", backend="CPU", device="Test CPU", host="host-a", status="ok",
            reason=None, on_ms=None, off_ms=None, outputs=None, on_outputs=None,
            profile_sha=PROFILE_SHA, fallbacks=None, bytes_up=33_193_136, bytes_down=32_403_596):
    """A synthetic sam3d-bench-result/1 dict. on_ms/off_ms: per-image wall ms (None: no such
    row); outputs: per-image outputs_sha256 of the off row (default "out<i>"); on_outputs: the
    on row's (default: the same as off)."""
    n = len(on_ms if on_ms is not None else off_ms or [])
    outputs = outputs or [f"out{i}" for i in range(n)]
    on_outputs = on_outputs or outputs
    rows = []
    for mode, times, outs in (("off", off_ms, outputs), ("on", on_ms, on_outputs)):
        if times is None:
            continue
        on = mode == "on"
        rows.append({
            "batching": mode,
            "samples": [{"image": i, "wall_ms": t, "enqueue_ms": 0.5, "synchronize_ms": 1.0,
                         "copy_ms": 0.25, "sync_path_ms": 0.0, "outputs_sha256": outs[i]}
                        for i, t in enumerate(times)],
            "counters": {"async_uploads": 199 if on else 0, "sync_uploads": 3 if on else 202,
                         "async_downloads": 232 if on else 0, "sync_downloads": 1 if on else 233,
                         "bytes_uploaded": bytes_up, "bytes_downloaded": bytes_down,
                         "pinned_batches": 82 if on else 0,
                         "fallbacks": dict({"no_async_caps": 0, "foreign_host_buffer": 0, "oversized": 0,
                                            "pinned_unavailable": 0}, **((fallbacks or {}) if on else {}))},
        })
    r = {
        "schema": "sam3d-bench-result/1", "variant": variant, "status": status, "reason": reason,
        "machine": {"hostname": host, "cpu": "Test CPU", "os": "Linux", "glibc": "2.36"},
        "build": {"compile_flags": ["-O2", "-DNDEBUG"], "build_type": "Release", "sanitizer": None,
                  "ggml_version": "0.20.2", "glslc": None},
        "git_commit": "0123456789abcdef0123456789abcdef01234567",
        "profile": {"path": "native/bench/profile.json", "sha256": profile_sha, "version": 1},
        "backend": backend, "device": device,
        "caps": {"async": False, "host_buffer": False, "buffer_from_host_ptr": True, "events": False},
        "protocol": {"warmups": 5, "images": n, "interleaved": True},
        "rows": rows, "extra": {},
    }
    return copy.deepcopy(r)


@pytest.fixture
def make_result():
    """Factory for synthetic result dicts (see _result's docstring)."""
    return _result
