"""The committed SAM3D transfer profile: measured totals, the split, reproducibility, validation."""

import copy
import json

import pytest

from sam3d.core import profile


@pytest.fixture(scope="module")
def committed():
    return json.loads(profile.path().read_text())


def test_totals_are_the_measured_ones(committed):
    gs = committed["graphs"]
    assert len(gs) == 83
    assert sum(len(g["uploads"]) for g in gs) == 202
    assert sum(sum(g["uploads"]) for g in gs) == 33_193_136
    assert sum(len(g["downloads"]) for g in gs) == 233
    assert sum(sum(g["downloads"]) for g in gs) == 32_403_596


def test_image_encoder_is_the_only_synchronous_graph(committed):
    sync = [g for g in committed["graphs"] if g["synchronous"]]
    assert [g["name"] for g in sync] == ["image_encoder"]
    assert (len(sync[0]["uploads"]), len(sync[0]["downloads"])) == (3, 1)
    # An image-encoder input of a few MB: 3x512x512 F32.
    assert sync[0]["uploads"][0] == 3 * 512 * 512 * 4
    batched = [g for g in committed["graphs"] if not g["synchronous"]]
    assert len(batched) == 82
    assert sum(len(g["uploads"]) for g in batched) == 199
    assert sum(len(g["downloads"]) for g in batched) == 232


def test_groups_of_the_batched_graphs(committed):
    groups = {}
    for g in committed["graphs"]:
        groups[g["group"]] = groups.get(g["group"], 0) + 1
    assert groups == {
        "image_encoder": 1,
        "prompts": 2,
        "conditioning": 4,
        "decoder": 24,
        "pose_head": 12,
        "camera_head": 4,
        "feedback": 12,
        "mhr_projection": 24,
    }


def test_every_batched_graph_fits_the_staging_bound_and_sizes_are_f32(committed):
    for g in committed["graphs"]:
        sizes = g["uploads"] + g["downloads"]
        assert all(s > 0 and s % 4 == 0 for s in sizes), g["name"]
        if not g["synchronous"]:
            assert sum(-(-s // 4096) * 4096 for s in sizes) <= 32 * 1024 * 1024, g["name"]


def test_dependencies_point_back_at_same_sized_downloads(committed):
    by_name = {}
    fed = 0
    for g in committed["graphs"]:
        for d in g["depends_on_downloads"]:
            src = by_name[d["graph"]]  # earlier graphs only
            assert src["downloads"][d["download"]] == g["uploads"][d["upload"]]
            fed += 1
        by_name[g["name"]] = g
    assert fed > 80  # most graphs consume earlier outputs
    assert by_name["conditioning.image_proj"]["depends_on_downloads"] == [
        {"upload": 0, "graph": "image_encoder", "download": 0}
    ]


def test_generator_reproduces_the_committed_file_byte_for_byte():
    assert profile.dumps(profile.generate()) == profile.path().read_text()
    assert profile.dumps(profile.generate()) == profile.dumps(profile.generate())


def test_load_validates_and_sha256_is_of_the_file_bytes():
    import hashlib

    p = profile.load()
    assert p["version"] == profile.VERSION
    assert profile.sha256() == hashlib.sha256(profile.path().read_bytes()).hexdigest()
    assert profile.totals(p)["async_uploads"] == 199


def _broken(committed, change):
    p = copy.deepcopy(committed)
    change(p)
    return p


def test_wrong_total_is_named_with_the_measured_value(committed):
    p = _broken(committed, lambda p: p["graphs"][5]["uploads"].__setitem__(1, p["graphs"][5]["uploads"][1] + 4))
    with pytest.raises(profile.ProfileError, match=r"upload_bytes = 33,193,140 \(measured: 33,193,136\)"):
        profile.validate(p)


def test_size_not_f32_is_named(committed):
    p = _broken(committed, lambda p: p["graphs"][1]["downloads"].__setitem__(1, 6))
    with pytest.raises(profile.ProfileError, match=r"graphs\[1\] \(prompts.keypoints\): downloads\[1\] = 6 bytes"):
        profile.validate(p)


def test_dependency_on_a_later_graph_is_refused(committed):
    def change(p):
        p["graphs"][3]["depends_on_downloads"][0]["graph"] = "decoder.0.0"

    with pytest.raises(profile.ProfileError, match="'decoder.0.0' is not an earlier graph"):
        profile.validate(_broken(committed, change))


def test_dependency_size_mismatch_is_refused(committed):
    def change(p):
        p["graphs"][3]["depends_on_downloads"][0]["download"] = 0
        p["graphs"][3]["depends_on_downloads"][0]["graph"] = "prompts.keypoints"

    with pytest.raises(profile.ProfileError, match="5242880 bytes but prompts.keypoints download 0 is 147456"):
        profile.validate(_broken(committed, change))


def test_oversized_batched_graph_is_refused(committed):
    def change(p):
        p["graphs"][1]["uploads"][0] = 40 * 1024 * 1024

    with pytest.raises(profile.ProfileError, match="exceed the 33554432-byte staging bound"):
        profile.validate(_broken(committed, change))


def test_missing_file_and_bad_json_are_named(tmp_path):
    with pytest.raises(profile.ProfileError, match="no such profile file"):
        profile.load(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(profile.ProfileError, match="not valid JSON"):
        profile.load(bad)


def test_unknown_op_is_named(committed):
    p = _broken(committed, lambda p: p["graphs"][0].__setitem__("op", "matmul"))
    with pytest.raises(profile.ProfileError, match="op 'matmul' is not one of scale_add, add"):
        profile.validate(p)
