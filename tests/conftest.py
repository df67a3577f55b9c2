"""Shared test helpers."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

PROFILE_SHA = "a" * 64


def pytest_collection_modifyitems(config, items):
    """Under mutmut (`sam3d mutants --python`, which sets MUTANT_UNDER_TEST to the mutant's
    name and runs from mutants/), the fastest tests first: pytest stops at the first failure
    (-x), so a killed mutant costs its fastest killer, not the tests that happen to come
    before it. The durations are mutmut's own (mutants/mutmut-stats.json)."""
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        return
    try:
        duration = json.loads(Path("mutmut-stats.json").read_text())["duration_by_test"]
    except (OSError, ValueError, KeyError):
        return
    items.sort(key=lambda item: duration.get(item.nodeid, 0.0))


def _result(
    variant="release",
    backend="CPU",
    device="Test CPU",
    host="host-a",
    status="ok",
    reason=None,
    on_ms=None,
    off_ms=None,
    outputs=None,
    on_outputs=None,
    profile_sha=PROFILE_SHA,
    fallbacks=None,
    bytes_up=33_193_136,
    bytes_down=32_403_596,
    **configuration,
):
    """A synthetic result document of the version written (sam3d-bench-result/5). on_ms/off_ms:
    per-image wall ms (None: no such row); outputs: per-image outputs_sha256 of the off row
    (default "out<i>"); on_outputs: the on row's (default: the same as off); ``configuration``:
    the record's configuration fields (layout, order, transfer_only, transfer_queue)."""
    n = len(on_ms if on_ms is not None else off_ms or [])
    outputs = outputs or [f"out{i}" for i in range(n)]
    on_outputs = on_outputs or outputs
    rows = []
    for mode, times, outs in (("off", off_ms, outputs), ("on", on_ms, on_outputs)):
        if times is None:
            continue
        on = mode == "on"
        rows.append(
            {
                "batching": mode,
                "samples": [
                    {
                        "image": i,
                        "wall_ms": t,
                        "enqueue_ms": 0.5,
                        "synchronize_ms": 1.0,
                        "copy_ms": 0.25,
                        "sync_path_ms": 0.0,
                        "outputs_sha256": outs[i],
                    }
                    for i, t in enumerate(times)
                ],
                "counters": {
                    "async_uploads": 199 if on else 0,
                    "sync_uploads": 3 if on else 202,
                    "async_downloads": 232 if on else 0,
                    "sync_downloads": 1 if on else 233,
                    "bytes_uploaded": bytes_up,
                    "bytes_downloaded": bytes_down,
                    "pinned_batches": 82 if on else 0,
                    "fallbacks": dict(
                        {"no_async_caps": 0, "foreign_host_buffer": 0, "oversized": 0, "pinned_unavailable": 0},
                        **((fallbacks or {}) if on else {}),
                    ),
                },
            }
        )
    r = {
        "schema": "sam3d-bench-result/5",
        "variant": variant,
        "status": status,
        "reason": reason,
        "machine": {"hostname": host, "cpu": "Test CPU", "os": "Linux", "glibc": "2.36"},
        "build": {
            "compile_flags": ["-O2", "-DNDEBUG"],
            "build_type": "Release",
            "sanitizer": None,
            "ggml_version": "0.20.2",
            "glslc": None,
        },
        "git_commit": "0123456789abcdef0123456789abcdef01234567",
        "profile": {"path": "native/bench/profile.json", "sha256": profile_sha, "version": 1},
        "backend": backend,
        "device": device,
        **configuration,
        "caps": {"async": False, "host_buffer": False, "buffer_from_host_ptr": True, "events": False},
        "protocol": {"warmups": 5, "images": n, "interleaved": True},
        "rows": rows,
        "extra": {},
    }
    return copy.deepcopy(r)


def _series(ms: float) -> dict:
    return {"best_median_ms": ms, "block_medians_ms": [ms], "median_ms": ms, "n": 1, "samples_ms": [ms]}


def limits_extra(
    floor=1.5,
    upload=0.8,
    download=0.75,
    rt_download=0.03,
    rt_graph=0.04,
    memcpy=4.0,
    calls=83,
    dependency=50,
    ring=0,
    end=1,
    alignment=64,
    probe=None,
    writes=None,
    reads=None,
) -> dict:
    """A driver's extra of schema 3 with the limit probes (native/bench/probes.cpp): the floor
    (both directions ``floor`` ms, each alone ``upload``/``download``), the round trips, the
    staging memcpy, the calls per image of every batched mode and the queued wait counts;
    ``probe``: sam3d_floor_probe's median ms (None: no probe); ``writes``/``reads``: the
    zerocopy and queued rows' excluded ms per image."""
    up_b, down_b = 33_193_136, 32_403_596
    modes = {m: {"calls_per_image": calls, "staging_alignment": alignment} for m in ("on", "zerocopy", "queued")}
    modes["queued"].update(
        dependency_wait_points_per_image=dependency, ring_wait_points_per_image=ring, end_wait_points_per_image=end
    )
    if writes is not None:
        for m in ("zerocopy", "queued"):
            modes[m]["excluded_ms"] = {"slot_writes": writes, "slot_reads": reads}
    return {
        "transfer_floor": {
            "median_ms": floor,
            "how": "async",
            "upload_bytes": up_b,
            "download_bytes": down_b,
            "alignment": alignment,
            "both": _series(floor),
            "upload": _series(upload),
            "download": _series(download),
            "gb_per_s": {
                "upload": up_b / upload / 1e6,
                "download": down_b / download / 1e6,
                "both": (up_b + down_b) / floor / 1e6,
            },
        },
        "round_trips": {"download": _series(rt_download), "graph": _series(rt_graph)},
        "staging_memcpy": {
            "median_ms": memcpy,
            "upload_bytes": 28_998_796,
            "download_bytes": 27_160_716,
            "gb_per_s": 56_159_512 / memcpy / 1e6,
        },
        "floor_probe": None if probe is None else {"schema": "sam3d-floor-probe/1", "median_ms": probe},
        "modes": modes,
    }


def records(*docs: dict) -> list:
    """The records of result documents, read as a result file is (results/record.py parse())."""
    from sam3d.results.record import parse

    return [parse(copy.deepcopy(d), f"result #{i}") for i, d in enumerate(docs, 1)]


@pytest.fixture
def make_result():
    """Factory for synthetic result documents (see _result's docstring)."""
    return _result


@pytest.fixture
def make_record():
    """Factory for synthetic result records: _result's document, parsed."""
    return lambda **kw: records(_result(**kw))[0]
