"""The SAM3D transfer profile: the benchmark's workload, one versioned JSON file per version.

The profile describes one full inference of one image as the SAM3D native runtime performs it
(the spec's measured transfer profile): per compute
graph, in execution order, the sizes of its uploads and downloads (bytes, F32 tensors), the
replay op the benchmark computes, whether it is the synchronous image-encoder graph, and which
earlier graphs' downloads feed which of its uploads. The measured totals it must reproduce:

    83 graphs, 202 uploads = 33,193,136 bytes, 233 downloads = 32,403,596 bytes;
    the image encoder (synchronous): 3 uploads, 1 download;
    the 82 batched graphs: 199 uploads, 232 downloads.

How the split was chosen (also in the file's "notes"). The spec records totals, not per-graph
sizes, so the per-graph split is a model-free reconstruction with SAM 3D Body's shapes:
a 512x512 RGB input, a ViT image encoder with 16-pixel patches (32x32 = 1024 tokens of 1280
channels), a 512-channel promptable decoder over 72 query tokens (70 keypoint tokens, a pose
token and a camera token) run as 4 refinement iterations of 6 layer graphs, each iteration
followed by 3 pose-head, 1 camera-head, 3 feedback and 6 MHR projection graphs (MHR: 18,439
vertices, 127 joints, 70 keypoints, 204 pose, 45 shape and 72 expression parameters); the
feedback graphs sample the fused image context average-pooled to 23x23 tokens.
Graphs that consume an earlier graph's output upload that download's exact bytes (the runtime
round-trips them through the host), which is where most of the volume comes from.
Two tensors absorb what the named shapes leave over so that the totals are exact: the
upload ``mhr.3.5`` ``vertex_residual`` and the download ``mhr.3.5`` ``vertex_residual_out``
(generate() computes them: 59,576 and 31,804 bytes; both are positive multiples of 4).

``generate()`` is deterministic and produces native/bench/profiles/sam3d-transfer-v1.json
byte for byte (``python -m sam3d.core.profile --write`` rewrites it; tests check it). ``load()``
reads and validates a profile; ``sha256()`` is the hash recorded in every result file.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from . import paths
from .errors import Sam3dError

VERSION = 1
NAME = "sam3d-transfer-v1"
RELATIVE_PATH = Path("native") / "bench" / "profiles" / f"{NAME}.json"

# Totals measured on the real model (spec/batched-transfers.md, "Measurements").
GRAPHS = 83
UPLOADS = 202
UPLOAD_BYTES = 33_193_136
DOWNLOADS = 233
DOWNLOAD_BYTES = 32_403_596
SYNC_GRAPHS = 1  # the image encoder
SYNC_UPLOADS = 3
SYNC_DOWNLOADS = 1
ASYNC_UPLOADS = UPLOADS - SYNC_UPLOADS  # 199
ASYNC_DOWNLOADS = DOWNLOADS - SYNC_DOWNLOADS  # 232
BATCHED_GRAPHS = GRAPHS - SYNC_GRAPHS  # 82
# A batched call must fit the staging bound: sum of align_up(size, alignment) <= 32 MiB.
STAGING_BOUND_BYTES = 33_554_432
# Alignment assumed when checking the bound; Vulkan host buffers align to
# minMemoryMapAlignment (64 on most drivers, at most 4096 seen), the CPU buffer type to 64.
CHECK_ALIGNMENT = 4096

GROUPS = (
    "image_encoder",
    "prompts",
    "conditioning",
    "decoder",
    "pose_head",
    "camera_head",
    "feedback",
    "mhr_projection",
)
OPS = ("scale_add", "add")
ELEMENT_BYTES = 4  # F32

# Shapes (elements).
IMG = 512
ENC_TOKENS = 32 * 32
ENC_DIM = 1280
DIM = 512
QUERIES = 72
KEYPOINTS = 70
VERTICES = 18_439
JOINTS = 127
POSE = 204
SHAPE = 45
EXPR = 72
ITERATIONS = 4
POOLED = 23  # feedback samples the fused context average-pooled to 23x23 (from 32x32)
DECODER_LAYERS = 6


class ProfileError(Sam3dError, ValueError):
    """A profile file that is malformed or does not match the measured totals."""


def path() -> Path:
    """The committed profile file in this checkout."""
    return paths.root() / RELATIVE_PATH


def _f32(*shape: int) -> int:
    return math.prod(shape) * ELEMENT_BYTES


@dataclass
class _Graph:
    name: str
    group: str
    op: str
    uploads: list[tuple[str, int]]
    downloads: list[tuple[str, int]]
    synchronous: bool = False
    # upload index -> (graph name, download index)
    feeds: dict[int, tuple[str, int]] | None = None


def _graphs() -> list[_Graph]:
    """The graphs in execution order, before the two residual tensors are sized (they are 4 bytes)."""
    g: list[_Graph] = []
    g.append(
        _Graph(
            "image_encoder",
            "image_encoder",
            "scale_add",
            [("image", _f32(3, IMG, IMG)), ("valid_mask", _f32(IMG, IMG)), ("intrinsics", _f32(3, 3))],
            [("image_embedding", _f32(ENC_TOKENS, ENC_DIM))],
            synchronous=True,
        )
    )
    g.append(
        _Graph(
            "prompts.keypoints",
            "prompts",
            "add",
            [("keypoint_prompts", _f32(KEYPOINTS, 3)), ("keypoint_labels", _f32(KEYPOINTS)), ("box", _f32(4))],
            [("sparse_tokens", _f32(QUERIES, DIM)), ("sparse_pos", _f32(QUERIES, DIM))],
        )
    )
    g.append(
        _Graph(
            "prompts.mask",
            "prompts",
            "add",
            [("mask_prompt", _f32(256, 256)), ("mask_valid", _f32(1))],
            [("dense_embedding", _f32(DIM, 32, 32)), ("dense_pos", _f32(DIM, 32, 32))],
        )
    )
    g.append(
        _Graph(
            "conditioning.image_proj",
            "conditioning",
            "scale_add",
            [
                ("image_embedding", _f32(ENC_TOKENS, ENC_DIM)),
                ("ray_map", _f32(ENC_TOKENS, 6)),
                ("intrinsics", _f32(3, 3)),
            ],
            [
                ("image_tokens", _f32(ENC_TOKENS, DIM)),
                ("image_pos", _f32(ENC_TOKENS, DIM)),
                ("image_norm", _f32(ENC_TOKENS, 2)),
            ],
            feeds={0: ("image_encoder", 0)},
        )
    )
    g.append(
        _Graph(
            "conditioning.dense_fuse",
            "conditioning",
            "add",
            [("image_tokens", _f32(ENC_TOKENS, DIM)), ("dense_embedding", _f32(DIM, 32, 32))],
            [
                ("context", _f32(ENC_TOKENS, DIM)),
                ("context_pos", _f32(ENC_TOKENS, DIM)),
                ("context_pooled", _f32(POOLED, POOLED, DIM)),
            ],
            feeds={0: ("conditioning.image_proj", 0), 1: ("prompts.mask", 0)},
        )
    )
    g.append(
        _Graph(
            "conditioning.query_init",
            "conditioning",
            "scale_add",
            [("sparse_tokens", _f32(QUERIES, DIM)), ("init_pose", _f32(POSE))],
            [("queries", _f32(QUERIES, DIM)), ("query_pos", _f32(QUERIES, DIM)), ("init_params", _f32(POSE))],
            feeds={0: ("prompts.keypoints", 0)},
        )
    )
    g.append(
        _Graph(
            "conditioning.camera",
            "conditioning",
            "add",
            [("intrinsics", _f32(3, 3)), ("image_size", _f32(2))],
            [("camera_token", _f32(DIM)), ("camera_rays", _f32(ENC_TOKENS, 3))],
        )
    )
    prev_tokens = ("conditioning.query_init", 0)
    for k in range(ITERATIONS):
        for layer in range(DECODER_LAYERS):
            name = f"decoder.{k}.{layer}"
            g.append(
                _Graph(
                    name,
                    "decoder",
                    "scale_add",
                    [
                        ("tokens", _f32(QUERIES, DIM)),
                        ("token_pos", _f32(QUERIES, DIM)),
                        ("attn_bias", _f32(QUERIES, QUERIES)),
                    ],
                    [
                        ("tokens_out", _f32(QUERIES, DIM)),
                        ("pose_token", _f32(DIM)),
                        ("keypoint_logits", _f32(KEYPOINTS, 3)),
                    ],
                    feeds={0: prev_tokens},
                )
            )
            prev_tokens = (name, 0)
        last = f"decoder.{k}.{DECODER_LAYERS - 1}"
        g.append(
            _Graph(
                f"pose_head.{k}.body",
                "pose_head",
                "scale_add",
                [("pose_token", _f32(DIM)), ("prev_pose", _f32(POSE))],
                [("pose_params", _f32(POSE)), ("pose_rot6d", _f32(JOINTS, 6)), ("pose_delta", _f32(POSE))],
                feeds={0: (last, 1)},
            )
        )
        g.append(
            _Graph(
                f"pose_head.{k}.shape",
                "pose_head",
                "scale_add",
                [("pose_token", _f32(DIM)), ("prev_shape", _f32(SHAPE))],
                [("shape_params", _f32(SHAPE)), ("expr_params", _f32(EXPR)), ("scale", _f32(1))],
                feeds={0: (last, 1)},
            )
        )
        g.append(
            _Graph(
                f"pose_head.{k}.keypoints",
                "pose_head",
                "add",
                [("tokens", _f32(QUERIES, DIM)), ("keypoint_logits", _f32(KEYPOINTS, 3))],
                [
                    ("keypoints_2d", _f32(KEYPOINTS, 2)),
                    ("keypoints_3d", _f32(KEYPOINTS, 3)),
                    ("keypoint_conf", _f32(KEYPOINTS)),
                ],
                feeds={0: (last, 0), 1: (last, 2)},
            )
        )
        g.append(
            _Graph(
                f"camera_head.{k}",
                "camera_head",
                "scale_add",
                [("camera_token", _f32(DIM))],
                [("camera_translation", _f32(3)), ("camera_delta", _f32(3))],
                feeds={0: ("conditioning.camera", 0)},
            )
        )
        g.append(
            _Graph(
                f"feedback.{k}.keypoints",
                "feedback",
                "add",
                [("keypoints_2d", _f32(KEYPOINTS, 2)), ("context_pooled", _f32(POOLED, POOLED, DIM))],
                [("sampled_features", _f32(KEYPOINTS, DIM)), ("keypoint_embed", _f32(KEYPOINTS, DIM))],
                feeds={0: (f"pose_head.{k}.keypoints", 0), 1: ("conditioning.dense_fuse", 2)},
            )
        )
        g.append(
            _Graph(
                f"feedback.{k}.pose",
                "feedback",
                "scale_add",
                [("pose_params", _f32(POSE)), ("shape_params", _f32(SHAPE))],
                [("pose_embed", _f32(DIM)), ("shape_embed", _f32(DIM))],
                feeds={0: (f"pose_head.{k}.body", 0), 1: (f"pose_head.{k}.shape", 0)},
            )
        )
        g.append(
            _Graph(
                f"feedback.{k}.tokens",
                "feedback",
                "add",
                [("tokens", _f32(QUERIES, DIM)), ("sampled_features", _f32(KEYPOINTS, DIM))],
                [("tokens_out", _f32(QUERIES, DIM)), ("token_pos", _f32(QUERIES, DIM))],
                feeds={0: (last, 0), 1: (f"feedback.{k}.keypoints", 0)},
            )
        )
        prev_tokens = (f"feedback.{k}.tokens", 0)
        # MHR: skinning + projection of the predicted body (6 graphs per iteration).
        body = f"pose_head.{k}.body"
        g.append(
            _Graph(
                f"mhr.{k}.0",
                "mhr_projection",
                "scale_add",
                [("pose_params", _f32(POSE)), ("shape_params", _f32(SHAPE)), ("expr_params", _f32(EXPR))],
                [
                    ("joint_transforms", _f32(JOINTS, 4, 4)),
                    ("joint_positions", _f32(JOINTS, 3)),
                    ("rest_offsets", _f32(VERTICES, 3)),
                    ("pose_correctives", _f32(VERTICES, 3)),
                ],
                feeds={0: (body, 0), 1: (f"pose_head.{k}.shape", 0), 2: (f"pose_head.{k}.shape", 1)},
            )
        )
        g.append(
            _Graph(
                f"mhr.{k}.1",
                "mhr_projection",
                "add",
                [("rest_offsets", _f32(VERTICES, 3)), ("pose_correctives", _f32(VERTICES, 3))],
                [("vertices", _f32(VERTICES, 3)), ("normals", _f32(VERTICES, 3)), ("bounds", _f32(2, 3))],
                feeds={0: (f"mhr.{k}.0", 2), 1: (f"mhr.{k}.0", 3)},
            )
        )
        g.append(
            _Graph(
                f"mhr.{k}.2",
                "mhr_projection",
                "scale_add",
                [
                    ("vertices", _f32(VERTICES, 3)),
                    ("joint_transforms", _f32(JOINTS, 4, 4)),
                    ("skin_weights_sel", _f32(VERTICES, 4)),
                ],
                [
                    ("skinned_vertices", _f32(VERTICES, 3)),
                    ("skinned_joints", _f32(JOINTS, 3)),
                    ("vertex_depth", _f32(VERTICES)),
                ],
                feeds={0: (f"mhr.{k}.1", 0), 1: (f"mhr.{k}.0", 0)},
            )
        )
        g.append(
            _Graph(
                f"mhr.{k}.3",
                "mhr_projection",
                "add",
                [("skinned_vertices", _f32(VERTICES, 3)), ("camera_translation", _f32(3))],
                [
                    ("vertices_2d", _f32(VERTICES, 2)),
                    ("vertex_visibility", _f32(VERTICES)),
                    ("vertices_cam", _f32(VERTICES, 3)),
                ],
                feeds={0: (f"mhr.{k}.2", 0), 1: (f"camera_head.{k}", 0)},
            )
        )
        g.append(
            _Graph(
                f"mhr.{k}.4",
                "mhr_projection",
                "scale_add",
                [
                    ("skinned_joints", _f32(JOINTS, 3)),
                    ("camera_translation", _f32(3)),
                    ("keypoint_regressor_sel", _f32(KEYPOINTS, 8)),
                ],
                [
                    ("keypoints_3d", _f32(KEYPOINTS, 3)),
                    ("keypoints_2d", _f32(KEYPOINTS, 2)),
                    ("keypoint_depth", _f32(KEYPOINTS)),
                ],
                feeds={0: (f"mhr.{k}.2", 1), 1: (f"camera_head.{k}", 0)},
            )
        )
        residual = k == ITERATIONS - 1
        ups = [("vertices_2d", _f32(VERTICES, 2)), ("keypoints_2d", _f32(KEYPOINTS, 2))]
        if residual:
            ups.append(("vertex_residual", ELEMENT_BYTES))
        g.append(
            _Graph(
                f"mhr.{k}.5",
                "mhr_projection",
                "add",
                ups,
                [("mesh_mask", _f32(128, 128)), ("keypoint_error", _f32(KEYPOINTS)), ("silhouette", _f32(64, 64))]
                + ([("vertex_residual_out", ELEMENT_BYTES)] if residual else []),
                feeds={0: (f"mhr.{k}.3", 0), 1: (f"mhr.{k}.4", 1)},
            )
        )
    return g


def generate() -> dict:
    """The profile as a JSON-ready dict (deterministic; the residual tensors make totals exact)."""
    gs = _graphs()
    up = sum(s for gr in gs for _, s in gr.uploads)
    down = sum(s for gr in gs for _, s in gr.downloads)
    last = gs[-1]
    assert last.uploads[-1][0] == "vertex_residual" and last.downloads[-1][0] == "vertex_residual_out"
    up_res = UPLOAD_BYTES - (up - ELEMENT_BYTES)
    down_res = DOWNLOAD_BYTES - (down - ELEMENT_BYTES)
    assert up_res > 0 and down_res > 0 and up_res % ELEMENT_BYTES == 0 and down_res % ELEMENT_BYTES == 0, (
        up_res,
        down_res,
    )
    last.uploads[-1] = ("vertex_residual", up_res)
    last.downloads[-1] = ("vertex_residual_out", down_res)
    index = {gr.name: i for i, gr in enumerate(gs)}
    graphs = []
    for gr in gs:
        deps = []
        for u, (src, d) in sorted((gr.feeds or {}).items()):
            deps.append({"upload": u, "graph": src, "download": d})
        graphs.append(
            {
                "name": gr.name,
                "group": gr.group,
                "op": gr.op,
                "synchronous": gr.synchronous,
                "uploads": [s for _, s in gr.uploads],
                "upload_names": [n for n, _ in gr.uploads],
                "downloads": [s for _, s in gr.downloads],
                "download_names": [n for n, _ in gr.downloads],
                "depends_on_downloads": deps,
            }
        )
        assert all(index[d["graph"]] < index[gr.name] for d in deps)
    return {
        "format": "sam3d-transfer-profile/1",
        "name": NAME,
        "version": VERSION,
        "dtype": "f32",
        "units": "bytes",
        "staging_bound_bytes": STAGING_BOUND_BYTES,
        "totals": {
            "graphs": GRAPHS,
            "uploads": UPLOADS,
            "upload_bytes": UPLOAD_BYTES,
            "downloads": DOWNLOADS,
            "download_bytes": DOWNLOAD_BYTES,
            "synchronous": {"graphs": SYNC_GRAPHS, "uploads": SYNC_UPLOADS, "downloads": SYNC_DOWNLOADS},
            "batched": {"graphs": BATCHED_GRAPHS, "uploads": ASYNC_UPLOADS, "downloads": ASYNC_DOWNLOADS},
        },
        "ops": {
            "scale_add": "out[j] = 0.5 * fit(in[j mod n], |out[j]|) + sum over i != j mod n of fit(in[i], |out[j]|)",
            "add": "out[j] = sum over i of fit(in[i], |out[j]|)",
            "fit": "the first |out| elements of the input, tiled (ggml_repeat_4d) when the input is shorter",
        },
        "notes": [
            "Model-free replay of one full SAM3D inference (spec/batched-transfers.md): totals are the measured "
            "ones (83 graphs, 202 uploads = 33,193,136 bytes, 233 downloads = 32,403,596 bytes; the image encoder "
            "keeps its synchronous path with 3 uploads and 1 download).",
            "The spec records totals only; the per-graph split is reconstructed from SAM 3D Body's shapes: 512x512 "
            "RGB input, ViT encoder with 32x32 tokens of 1280 channels, 512-channel decoder over 72 query tokens in "
            "4 refinement iterations of 6 layer graphs, each followed by 3 pose-head, 1 camera-head, 3 feedback and "
            "6 MHR projection graphs (18,439 vertices, 127 joints, 70 keypoints; 204 pose, 45 shape, 72 expression "
            "parameters); feedback samples the fused context average-pooled to 23x23 tokens. All tensors are F32; "
            "sizes are bytes.",
            "An upload listed in depends_on_downloads receives that earlier graph's download bytes unchanged (same "
            "size), as the runtime round-trips them through host memory.",
            "mhr.3.5's vertex_residual (upload) and vertex_residual_out (download) absorb what the named shapes "
            "leave over so that the totals are exact (59,576 and 31,804 bytes).",
            "Generated by sam3d/core/profile.py generate(); regenerate with `python -m sam3d.core.profile --write`. "
            "Results from different profile SHA-256s are never compared.",
        ],
        "graphs": graphs,
    }


def _emit(value, indent: int) -> str:
    one = json.dumps(value, ensure_ascii=True)
    if not isinstance(value, (dict, list)) or (len(one) + indent <= 110 and "\n" not in one):
        return one
    pad = " " * (indent + 1)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k)}: {_emit(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + _emit(v, indent + 1) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def dumps(profile: dict) -> str:
    """The canonical file text: JSON indented by one space per level, any list or object that fits
    in 110 columns on one line (so the graphs read as a table), and a trailing newline."""
    return _emit(profile, 0) + "\n"


def sha256(p: Path | None = None) -> str:
    """SHA-256 (hex) of the profile file's bytes."""
    return hashlib.sha256(Path(p or path()).read_bytes()).hexdigest()


def _fail(where: str, what: str) -> ProfileError:
    return ProfileError(f"{where}: {what}")


def validate(profile: dict, source: str = "profile") -> dict:
    """Checks structure, sizes and the measured totals; raises ProfileError naming the problem."""
    if not isinstance(profile, dict):
        raise _fail(source, "top level is not a JSON object")
    for key in ("name", "version", "graphs"):
        if key not in profile:
            raise _fail(source, f"missing key {key!r}")
    if not isinstance(profile["version"], int) or profile["version"] < 1:
        raise _fail(source, f"version {profile['version']!r} is not a positive integer")
    graphs = profile["graphs"]
    if not isinstance(graphs, list) or not graphs:
        raise _fail(source, "'graphs' is not a non-empty list")
    seen: dict[str, int] = {}
    bound = int(profile.get("staging_bound_bytes", STAGING_BOUND_BYTES))
    for i, g in enumerate(graphs):
        where = f"{source}: graphs[{i}]"
        for key in ("name", "op", "synchronous", "uploads", "downloads", "depends_on_downloads"):
            if key not in g:
                raise ProfileError(f"{where}: missing key {key!r}")
        name = g["name"]
        where = f"{source}: graphs[{i}] ({name})"
        if name in seen:
            raise ProfileError(f"{where}: duplicate graph name (also graphs[{seen[name]}])")
        if g["op"] not in OPS:
            raise ProfileError(f"{where}: op {g['op']!r} is not one of {', '.join(OPS)}")
        if not isinstance(g["synchronous"], bool):
            raise ProfileError(f"{where}: synchronous must be true or false")
        for kind in ("uploads", "downloads"):
            sizes = g[kind]
            if not isinstance(sizes, list) or not sizes:
                raise ProfileError(f"{where}: {kind} must be a non-empty list of sizes in bytes")
            for j, s in enumerate(sizes):
                if not isinstance(s, int) or isinstance(s, bool) or s <= 0 or s % ELEMENT_BYTES:
                    raise ProfileError(
                        f"{where}: {kind}[{j}] = {s!r} bytes is not a positive multiple of {ELEMENT_BYTES} (F32)"
                    )
            names = g.get(kind[:-1] + "_names")
            if names is not None and (not isinstance(names, list) or len(names) != len(sizes)):
                raise ProfileError(f"{where}: {kind[:-1]}_names must list one name per entry of {kind}")
        aligned = sum(-(-s // CHECK_ALIGNMENT) * CHECK_ALIGNMENT for s in g["uploads"] + g["downloads"])
        if not g["synchronous"] and aligned > bound:
            raise ProfileError(
                f"{where}: {aligned} aligned bytes exceed the {bound}-byte staging bound; "
                "a batched graph must fit (split it or mark it synchronous)"
            )
        fed = set()
        for j, d in enumerate(g["depends_on_downloads"]):
            dw = f"{where}: depends_on_downloads[{j}]"
            if not isinstance(d, dict) or set(d) != {"upload", "graph", "download"}:
                raise ProfileError(f"{dw}: must be {{\"upload\": int, \"graph\": name, \"download\": int}}")
            if d["graph"] not in seen:
                raise ProfileError(f"{dw}: graph {d['graph']!r} is not an earlier graph")
            src = graphs[seen[d["graph"]]]
            if not (isinstance(d["upload"], int) and 0 <= d["upload"] < len(g["uploads"])):
                raise ProfileError(f"{dw}: upload {d['upload']!r} is not an upload index of this graph")
            if d["upload"] in fed:
                raise ProfileError(f"{dw}: upload {d['upload']} is fed twice")
            fed.add(d["upload"])
            if not (isinstance(d["download"], int) and 0 <= d["download"] < len(src["downloads"])):
                raise ProfileError(f"{dw}: download {d['download']!r} is not a download index of {d['graph']}")
            if src["downloads"][d["download"]] != g["uploads"][d["upload"]]:
                raise ProfileError(
                    f"{dw}: upload {d['upload']} is {g['uploads'][d['upload']]} bytes but "
                    f"{d['graph']} download {d['download']} is {src['downloads'][d['download']]}"
                )
        seen[name] = i
    t = totals(profile)
    expected = {
        "graphs": GRAPHS,
        "uploads": UPLOADS,
        "upload_bytes": UPLOAD_BYTES,
        "downloads": DOWNLOADS,
        "download_bytes": DOWNLOAD_BYTES,
        "sync_graphs": SYNC_GRAPHS,
        "sync_uploads": SYNC_UPLOADS,
        "sync_downloads": SYNC_DOWNLOADS,
        "async_uploads": ASYNC_UPLOADS,
        "async_downloads": ASYNC_DOWNLOADS,
    }
    wrong = [f"{k} = {t[k]:,} (measured: {v:,})" for k, v in expected.items() if t[k] != v]
    if wrong:
        raise _fail(source, "totals do not match the measured SAM3D profile: " + "; ".join(wrong))
    declared = profile.get("totals")
    if declared is not None:
        flat = {
            "graphs": declared.get("graphs"),
            "uploads": declared.get("uploads"),
            "upload_bytes": declared.get("upload_bytes"),
            "downloads": declared.get("downloads"),
            "download_bytes": declared.get("download_bytes"),
        }
        bad = [k for k, v in flat.items() if v != t[k]]
        if bad:
            raise _fail(source, f"declared totals disagree with the graphs for: {', '.join(bad)}")
    return profile


def totals(profile: dict) -> dict[str, int]:
    """Counts and bytes of a profile, overall and split synchronous / batched."""
    gs = profile["graphs"]
    sync = [g for g in gs if g["synchronous"]]
    batched = [g for g in gs if not g["synchronous"]]
    return {
        "graphs": len(gs),
        "uploads": sum(len(g["uploads"]) for g in gs),
        "upload_bytes": sum(sum(g["uploads"]) for g in gs),
        "downloads": sum(len(g["downloads"]) for g in gs),
        "download_bytes": sum(sum(g["downloads"]) for g in gs),
        "sync_graphs": len(sync),
        "sync_uploads": sum(len(g["uploads"]) for g in sync),
        "sync_downloads": sum(len(g["downloads"]) for g in sync),
        "async_uploads": sum(len(g["uploads"]) for g in batched),
        "async_downloads": sum(len(g["downloads"]) for g in batched),
    }


def level_order(profile: dict) -> list[int]:
    """The graphs of ``profile`` in dependency-level order (position -> graph index), the order
    ``sam3d_bench --order levels`` issues them in (native/bench/profile.cpp, level_order): a
    graph's level is one more than its feeders' highest (1 without feeders); before, between and
    after the synchronous graphs, which keep their places, the graphs go by level, then by
    profile order. Every feeder stays before its readers."""
    graphs = profile["graphs"]
    index = {g["name"]: i for i, g in enumerate(graphs)}
    level: list[int] = []
    for g in graphs:
        level.append(max((level[index[d["graph"]]] + 1 for d in g["depends_on_downloads"]), default=1))
    order: list[int] = []
    run: list[int] = []
    for i, g in enumerate(graphs):
        if g["synchronous"]:
            order += sorted(run, key=lambda j: level[j]) + [i]
            run = []
        else:
            run.append(i)
    return order + sorted(run, key=lambda j: level[j])


def load(p: Path | str | None = None) -> dict:
    """Reads and validates a profile file (default: the committed one)."""
    p = Path(p) if p is not None else path()
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise ProfileError(f"{p}: no such profile file (the committed one is {RELATIVE_PATH})") from None
    except json.JSONDecodeError as e:
        raise ProfileError(f"{p}: not valid JSON: {e}") from None
    return validate(data, source=str(p))


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m sam3d.core.profile", description="the SAM3D transfer profile")
    ap.add_argument("--write", action="store_true", help=f"regenerate {RELATIVE_PATH}")
    ap.add_argument("--check", action="store_true", help="fail unless the committed file is what generate() gives")
    args = ap.parse_args(argv)
    text = dumps(validate(generate(), "generate()"))
    if args.write:
        path().parent.mkdir(parents=True, exist_ok=True)
        path().write_text(text)
        print(f"wrote {path()} (sha256 {sha256()})")
    elif args.check:
        if not path().is_file() or path().read_text() != text:
            print(f"{path()} differs from generate(): run `python -m sam3d.core.profile --write`", file=sys.stderr)
            return 1
        print(f"{path()} is up to date (sha256 {sha256()})")
    else:
        t = totals(load())
        print(json.dumps(t, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
