"""The benchmark result file: one JSON file per (variant, backend, device) run.

Schema "sam3d-bench-result/1" (all times in milliseconds, sizes in bytes):

{
  "schema": "sam3d-bench-result/1",
  "variant": "release",                 # sam3d/variants.py name
  "status": "ok" | "failed",            # failed: "reason" says why, "rows" may be empty
  "reason": null | "build failed: ...",
  "machine": {"hostname": str, "cpu": str, "os": str, "glibc": str},
  "build": {"compile_flags": [str], "build_type": str, "sanitizer": str|null,
            "ggml_version": "0.20.2", "glslc": str|null},
  "git_commit": str,                    # of the checkout that built the driver
  "profile": {"path": str, "sha256": str, "version": int},
  "backend": "CPU" | "Vulkan",
  "device": str,                        # GGML device description, e.g. "NVIDIA H200"
  "caps": {"async": bool, "host_buffer": bool, "buffer_from_host_ptr": bool, "events": bool},
  "protocol": {"warmups": int, "images": int, "interleaved": true},
  "rows": [                             # one per batching mode, measured in the same process
    {
      "batching": "on" | "off",
      "samples": [                      # timed images only, in run order
        {"image": int, "wall_ms": float, "enqueue_ms": float, "synchronize_ms": float,
         "copy_ms": float, "sync_path_ms": float, "outputs_sha256": str}
      ],
      "counters": {                     # per image (the same every image), core counter names
        "async_uploads": int, "sync_uploads": int, "async_downloads": int, "sync_downloads": int,
        "bytes_uploaded": int, "bytes_downloaded": int, "pinned_batches": int,
        "fallbacks": {"no_async_caps": int, "foreign_host_buffer": int, "oversized": int,
                      "pinned_unavailable": int}
      }
    }
  ],
  "extra": {}                           # optional diagnostics: driver overhead, peak RSS, floor...
}
"""

from __future__ import annotations

SCHEMA = "sam3d-bench-result/1"
