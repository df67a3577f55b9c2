// Rule 10's coalesced copies (docs/contract.md): consecutive descriptors of one direction whose
// device ranges meet in one buffer go as one GGML copy on every batched path; inside a declared
// area a gap of at most SAM3D_COALESCE_GAP_BYTES is bridged; a zero-copy call joins only slots
// that mirror the device; the bound counts the laid-out bytes; the bytes are the same as one copy
// per descriptor, and no byte outside the descriptors (and the declared gaps) is written.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cases.h"
#include "deferred.h"
#include "rig.h"

using rig::Kind;
using rig::Rig;

namespace {

constexpr size_t kBytes = 4096;  // a multiple of every backend's buffer alignment here

class Coalescing : public testing::TestWithParam<Kind> {};

// Consecutive tensors of kBytes, allocated back to back in the rig's one buffer.
struct Adjacent {
    std::vector<ggml_tensor *> t;
    Adjacent(Rig & r, int n) {
        for (int i = 0; i < n; ++i) {
            t.push_back(r.bytes(static_cast<int64_t>(kBytes), ("t" + std::to_string(i)).c_str()));
        }
    }
    // The precondition of every case below: the tensors meet on the device.
    void check_adjacent() const {
        for (size_t i = 1; i < t.size(); ++i) {
            ASSERT_EQ(static_cast<uint8_t *>(t[i]->data), static_cast<uint8_t *>(t[i - 1]->data) + kBytes)
                << "the rig's allocation no longer places tensors back to back";
        }
    }
};

// A cpu_staged rig with n adjacent tensors whose bytes are all 0, and a batching session.
struct ZeroedAdjacent {
    Rig r{Kind::CpuStaged};
    Adjacent a;
    sam3d_session * s = nullptr;
    const std::vector<uint8_t> zero = std::vector<uint8_t>(kBytes, 0);
    explicit ZeroedAdjacent(int n) : a(r, n) {}
    // Allocates, checks the tensors meet, zeroes them, opens the session (after RIG_REQUIRE).
    void start() {
        r.alloc();
        a.check_adjacent();
        for (ggml_tensor * t : a.t) {
            ggml_backend_tensor_set(t, zero.data(), 0, kBytes);
        }
        s = r.session(SAM3D_BATCHING_ON);
    }
};

std::vector<uint8_t> device_bytes(const ggml_tensor * t) {
    std::vector<uint8_t> v(ggml_nbytes(t));
    ggml_backend_tensor_get(t, v.data(), 0, v.size());
    return v;
}

// Runs uploads then downloads (no graph) on `s` and returns the counters' difference.
sam3d_counters run_transfers(Rig & r, sam3d_session * s, const std::vector<sam3d_upload> & ups,
                             const std::vector<sam3d_download> & downs) {
    sam3d_session_reset_counters(s);
    sam3d_call c{};
    c.uploads = ups.data();
    c.n_uploads = ups.size();
    c.downloads = downs.data();
    c.n_downloads = downs.size();
    EXPECT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    return r.counters(s);
}

TEST_P(Coalescing, AdjacentDescriptorsInOrderAreOneCopyPerDirection) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    Adjacent a(r, 3);
    r.alloc();
    a.check_adjacent();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    std::vector<std::vector<uint8_t>> in, out(3, std::vector<uint8_t>(kBytes));
    std::vector<sam3d_upload> ups;
    std::vector<sam3d_download> downs;
    for (int i = 0; i < 3; ++i) {
        in.push_back(rig::pattern(kBytes, 10 + i));
    }
    for (int i = 0; i < 3; ++i) {
        ups.push_back(rig::up(a.t[i], in[i].data(), kBytes));
        downs.push_back(rig::down(a.t[i], out[i].data(), kBytes));
    }
    const sam3d_counters k = run_transfers(r, s, ups, downs);
    const bool staged = GetParam() != Kind::Cpu;
    EXPECT_EQ(k.upload_copies, staged ? 1u : 3u) << "one GGML copy for the run of three adjacent uploads";
    EXPECT_EQ(k.download_copies, staged ? 1u : 3u);
    EXPECT_EQ(k.async_uploads + k.sync_uploads, 3u) << "transfers still count per descriptor (rule 8)";
    EXPECT_EQ(k.bytes_uploaded, 3 * kBytes);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(device_bytes(a.t[i]), in[i]) << "t" << i;
        EXPECT_EQ(out[i], in[i]) << "downloads[" << i << "]";
    }
}

TEST_P(Coalescing, OutOfOrderOrSkippedDescriptorsAreSeparateCopies) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    Adjacent a(r, 3);
    r.alloc();
    a.check_adjacent();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<uint8_t> before = rig::pattern(kBytes, 7);
    ggml_backend_tensor_set(a.t[1], before.data(), 0, kBytes);
    const auto x = rig::pattern(kBytes, 1), y = rig::pattern(kBytes, 2), z = rig::pattern(kBytes, 3);
    // Descending addresses: each descriptor starts before the run's end, a copy of its own.
    sam3d_counters k = run_transfers(r, s, {rig::up(a.t[2], z.data(), kBytes), rig::up(a.t[1], y.data(), kBytes),
                                            rig::up(a.t[0], x.data(), kBytes)}, {});
    EXPECT_EQ(k.upload_copies, 3u);
    EXPECT_EQ(device_bytes(a.t[0]), x);
    EXPECT_EQ(device_bytes(a.t[2]), z);
    ggml_backend_tensor_set(a.t[1], before.data(), 0, kBytes);
    // t0 and t2 around an untouched t1: two copies, t1 unchanged.
    k = run_transfers(r, s, {rig::up(a.t[0], y.data(), kBytes), rig::up(a.t[2], x.data(), kBytes)}, {});
    EXPECT_EQ(k.upload_copies, 2u);
    EXPECT_EQ(device_bytes(a.t[1]), before) << "no byte between two runs is written";
    EXPECT_EQ(device_bytes(a.t[0]), y);
    EXPECT_EQ(device_bytes(a.t[2]), x);
}

TEST_P(Coalescing, PartialRangesJoinExactlyWhereTheyMeet) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    Adjacent a(r, 2);
    r.alloc();
    a.check_adjacent();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const bool staged = GetParam() != Kind::Cpu;
    const std::vector<uint8_t> before = rig::pattern(2 * kBytes, 9);
    ggml_backend_tensor_set(a.t[0], before.data(), 0, kBytes);
    ggml_backend_tensor_set(a.t[1], before.data() + kBytes, 0, kBytes);
    const auto in = rig::pattern(2 * kBytes, 4);
    // [0, 100) and [100, 4096) of t0 and then all of t1: they meet, one copy.
    sam3d_counters k = run_transfers(r, s, {rig::up(a.t[0], in.data(), 100), rig::up(a.t[0], in.data() + 100, kBytes - 100, 100),
                                            rig::up(a.t[1], in.data() + kBytes, kBytes)}, {});
    EXPECT_EQ(k.upload_copies, staged ? 1u : 3u);
    EXPECT_EQ(device_bytes(a.t[0]), std::vector<uint8_t>(in.begin(), in.begin() + kBytes));
    EXPECT_EQ(device_bytes(a.t[1]), std::vector<uint8_t>(in.begin() + kBytes, in.end()));
    // A one-byte gap between [0, 100) and [101, 4096) and one at t1's first byte: three copies
    // (no area declared), the gap bytes as they were.
    ggml_backend_tensor_set(a.t[0], before.data(), 0, kBytes);
    ggml_backend_tensor_set(a.t[1], before.data() + kBytes, 0, kBytes);
    k = run_transfers(r, s, {rig::up(a.t[0], in.data(), 100), rig::up(a.t[0], in.data() + 101, kBytes - 101, 101),
                             rig::up(a.t[1], in.data() + kBytes + 1, kBytes - 1, 1)}, {});
    EXPECT_EQ(k.upload_copies, 3u);
    const std::vector<uint8_t> t0 = device_bytes(a.t[0]), t1 = device_bytes(a.t[1]);
    EXPECT_EQ(t0[100], before[100]) << "the gap byte between two descriptors is not written";
    EXPECT_EQ(t1[0], before[kBytes]) << "the gap byte at t1's start is not written";
    EXPECT_EQ(t0[99], in[99]);
    EXPECT_EQ(t0[101], in[101]);
    EXPECT_EQ(t1[1], in[kBytes + 1]);
    // Downloads the same way: [0, 100) then [100, 4096): one copy, every byte where it belongs.
    std::vector<uint8_t> out(kBytes + 16, 0xEE);
    k = run_transfers(r, s, {}, {rig::down(a.t[0], out.data(), 100), rig::down(a.t[0], out.data() + 116, kBytes - 100, 100)});
    EXPECT_EQ(k.download_copies, staged ? 1u : 2u);
    EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + 100), std::vector<uint8_t>(t0.begin(), t0.begin() + 100));
    EXPECT_EQ(std::vector<uint8_t>(out.begin() + 100, out.begin() + 116), std::vector<uint8_t>(16, 0xEE))
        << "host bytes between two downloads' dst are not written";
    EXPECT_EQ(std::vector<uint8_t>(out.begin() + 116, out.end()), std::vector<uint8_t>(t0.begin() + 100, t0.end()));
}

// An area of `bytes` with two views: [0, n) and [n + gap, 2n + gap).
struct Area {
    ggml_tensor * area;
    ggml_tensor * first;
    ggml_tensor * second;
    Area(Rig & r, size_t n, size_t gap, size_t bytes) {
        area = r.bytes(static_cast<int64_t>(bytes), "area");
        first = ggml_view_1d(r.ctx(), area, static_cast<int64_t>(n), 0);
        second = ggml_view_1d(r.ctx(), area, static_cast<int64_t>(n), n + gap);
    }
};

TEST_P(Coalescing, AnAreaBridgesGapsUpToTheLimit) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    constexpr size_t n = 1000;
    constexpr size_t room = 2 * n + SAM3D_COALESCE_GAP_BYTES + 64;
    Area at_limit(r, n, SAM3D_COALESCE_GAP_BYTES, room);
    Area past_limit(r, n, SAM3D_COALESCE_GAP_BYTES + 1, room);
    Area small(r, n, 24, room);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const bool staged = GetParam() != Kind::Cpu;
    const auto x = rig::pattern(n, 1), y = rig::pattern(n, 2);
    const auto copies = [&](const Area & a, std::vector<uint8_t> * out) {
        std::vector<uint8_t> o(2 * n + 32, 0xEE);
        sam3d_counters k = run_transfers(r, s, {rig::up(a.first, x.data(), n), rig::up(a.second, y.data(), n)},
                                         {rig::down(a.first, o.data(), n), rig::down(a.second, o.data() + n + 32, n)});
        EXPECT_EQ(std::vector<uint8_t>(o.begin(), o.begin() + n), x);
        EXPECT_EQ(std::vector<uint8_t>(o.begin() + n, o.begin() + n + 32), std::vector<uint8_t>(32, 0xEE))
            << "host bytes between two downloads' dst are not written, area or not";
        EXPECT_EQ(std::vector<uint8_t>(o.begin() + n + 32, o.end()), y);
        if (out) *out = o;
        EXPECT_EQ(k.upload_copies, k.download_copies);
        return k.upload_copies;
    };
    // Undeclared: the gap is not the caller's, two copies, the gap bytes as they were.
    const std::vector<uint8_t> fill = rig::pattern(room, 5);
    ggml_backend_tensor_set(small.area, fill.data(), 0, room);
    EXPECT_EQ(copies(small, nullptr), 2u);
    const std::vector<uint8_t> after = device_bytes(small.area);
    EXPECT_EQ(std::vector<uint8_t>(after.begin() + n, after.begin() + n + 24),
              std::vector<uint8_t>(fill.begin() + n, fill.begin() + n + 24));
    // Declared: one copy per direction up to the limit, two past it.
    for (const Area * a : {&at_limit, &past_limit, &small}) {
        ASSERT_EQ(sam3d_session_add_area(s, a->area), SAM3D_OK) << sam3d_last_error();
    }
    EXPECT_EQ(sam3d_session_areas(s), 3u);
    EXPECT_EQ(copies(small, nullptr), staged ? 1u : 2u);
    EXPECT_EQ(copies(at_limit, nullptr), staged ? 1u : 2u) << "a gap of SAM3D_COALESCE_GAP_BYTES is bridged";
    EXPECT_EQ(copies(past_limit, nullptr), 2u) << "a gap past SAM3D_COALESCE_GAP_BYTES is not";
    // Withdrawn: two copies again.
    ASSERT_EQ(sam3d_session_remove_area(s, small.area), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(copies(small, nullptr), 2u);
    EXPECT_EQ(sam3d_session_areas(s), 2u);
}

TEST_P(Coalescing, ARunMustLieInOneArea) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    constexpr size_t n = 1000;
    ggml_tensor * whole = r.bytes(4 * n, "whole");
    ggml_tensor * left = ggml_view_1d(r.ctx(), whole, 2 * n, 0);
    ggml_tensor * right = ggml_view_1d(r.ctx(), whole, 2 * n, 2 * n);
    ggml_tensor * a = ggml_view_1d(r.ctx(), whole, n, 0);
    ggml_tensor * b = ggml_view_1d(r.ctx(), whole, n - 8, n + 8);        // in left, after a gap of 8
    ggml_tensor * c = ggml_view_1d(r.ctx(), whole, n - 8, 2 * n + 8);    // in right, after a gap of 16
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    ASSERT_EQ(sam3d_session_add_area(s, left), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(sam3d_session_add_area(s, right), SAM3D_OK) << sam3d_last_error();
    const auto in = rig::pattern(4 * n, 3);
    const bool staged = GetParam() != Kind::Cpu;
    const sam3d_counters k = run_transfers(
        r, s, {rig::up(a, in.data(), n), rig::up(b, in.data() + n + 8, n - 8), rig::up(c, in.data() + 2 * n + 8, n - 8)}, {});
    EXPECT_EQ(k.upload_copies, staged ? 2u : 3u) << "a and b join in the left area; c's gap straddles two areas";
    const std::vector<uint8_t> d = device_bytes(whole);
    EXPECT_EQ(std::vector<uint8_t>(d.begin(), d.begin() + n), std::vector<uint8_t>(in.begin(), in.begin() + n));
    EXPECT_EQ(std::vector<uint8_t>(d.begin() + 2 * n + 8, d.begin() + 3 * n),
              std::vector<uint8_t>(in.begin() + 2 * n + 8, in.begin() + 3 * n));
}

TEST_P(Coalescing, AreaDeclarationsAreChecked) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    ggml_tensor * whole = r.bytes(8192, "whole");
    ggml_tensor * half = ggml_view_1d(r.ctx(), whole, 4096, 2048);
    ggml_tensor * other = r.bytes(64, "other");
    r.alloc();
    ggml_tensor * unallocated = r.bytes(64, "unallocated");
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    EXPECT_EQ(sam3d_session_add_area(nullptr, whole), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(sam3d_session_add_area(s, nullptr), SAM3D_ERR_NULL_TENSOR);
    EXPECT_EQ(sam3d_session_add_area(s, unallocated), SAM3D_ERR_UNALLOCATED_TENSOR);
    EXPECT_CONTAINS(sam3d_last_error(), "unallocated");
    ASSERT_EQ(sam3d_session_add_area(s, whole), SAM3D_OK) << sam3d_last_error();
    EXPECT_STREQ(sam3d_last_error(), "");
    EXPECT_EQ(sam3d_session_add_area(s, half), SAM3D_ERR_INVALID_ARGUMENT) << "overlaps the declared area";
    EXPECT_CONTAINS(sam3d_last_error(), "overlaps");
    EXPECT_EQ(sam3d_session_add_area(s, whole), SAM3D_ERR_INVALID_ARGUMENT) << "declared already";
    EXPECT_EQ(sam3d_session_add_area(s, other), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_areas(s), 2u);
    EXPECT_EQ(sam3d_session_remove_area(s, half), SAM3D_ERR_INVALID_ARGUMENT) << "not the declared bytes";
    EXPECT_CONTAINS(sam3d_last_error(), "not a declared area");
    EXPECT_EQ(sam3d_session_remove_area(s, whole), SAM3D_OK);
    EXPECT_EQ(sam3d_session_add_area(s, half), SAM3D_OK) << "the bytes are free again";
    EXPECT_EQ(sam3d_session_areas(s), 2u);
    ggml_tensor * none = ggml_view_1d(r.ctx(), whole, 0, 6144);
    ggml_backend_view_init(none);
    EXPECT_EQ(sam3d_session_add_area(s, none), SAM3D_ERR_EXTENT) << "an area of no bytes";
    EXPECT_EQ(sam3d_session_remove_area(s, nullptr), SAM3D_ERR_NULL_TENSOR);
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.rejected_calls, 0u) << "declarations are not calls";
}

// sam3d_session_remove_area withdraws only an area declared with the same bytes: a view over
// the first or the last part of a declared area is refused and leaves the area declared.
TEST_P(Coalescing, RemovingPartOfADeclaredAreaIsRefusedAndKeepsIt) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    ggml_tensor * whole = r.bytes(8192, "whole");
    ggml_tensor * first = ggml_view_1d(r.ctx(), whole, 4096, 0);
    ggml_tensor * last = ggml_view_1d(r.ctx(), whole, 4096, 4096);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    ASSERT_EQ(sam3d_session_add_area(s, whole), SAM3D_OK) << sam3d_last_error();
    for (ggml_tensor * part : {first, last}) {
        SCOPED_TRACE(part == first ? "first part" : "last part");
        EXPECT_EQ(sam3d_session_remove_area(s, part), SAM3D_ERR_INVALID_ARGUMENT) << "not the declared bytes";
        EXPECT_CONTAINS(sam3d_last_error(), "not a declared area");
        EXPECT_EQ(sam3d_session_areas(s), 1u) << "the declared area was withdrawn";
    }
    EXPECT_EQ(sam3d_session_remove_area(s, whole), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_areas(s), 0u);
}

// Areas that meet are not overlapping, to the byte: a one-byte area, then one starting at the
// next byte, then one ending right before it, all declared (the generated campaign's area
// order and overlap boundaries); one sharing one byte with the area before or after it is
// refused.
TEST_P(Coalescing, AreasThatMeetAreDeclaredAndOneSharedByteOverlaps) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    ggml_tensor * whole = r.bytes(256, "whole");
    ggml_tensor * one = ggml_view_1d(r.ctx(), whole, 1, 100);
    ggml_tensor * after = ggml_view_1d(r.ctx(), whole, 16, 101);
    ggml_tensor * before = ggml_view_1d(r.ctx(), whole, 16, 84);
    ggml_tensor * shares = ggml_view_1d(r.ctx(), whole, 2, 116);  // after's last byte, 116
    ggml_tensor * high = ggml_view_1d(r.ctx(), whole, 16, 200);
    ggml_tensor * reaches = ggml_view_1d(r.ctx(), whole, 11, 190);  // high's first byte, 200
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    ASSERT_EQ(sam3d_session_add_area(s, one), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_add_area(s, after), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_add_area(s, before), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_areas(s), 3u);
    EXPECT_EQ(sam3d_session_add_area(s, shares), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "overlaps an area already declared");
    ASSERT_EQ(sam3d_session_add_area(s, high), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_add_area(s, reaches), SAM3D_ERR_INVALID_ARGUMENT) << "its last byte is the next area's first";
    EXPECT_EQ(sam3d_session_areas(s), 4u);
}

TEST_P(Coalescing, ZeroCopyJoinsOnlySlotsThatMirrorTheDevice) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    Adjacent a(r, 2);
    r.alloc();
    a.check_adjacent();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const size_t al = sam3d_session_staging_alignment(s);
    if (GetParam() == Kind::Cpu || kBytes % (al > 0 ? al : 1) != 0) {
        GTEST_SKIP() << "slots " << kBytes << " bytes apart need a staging alignment dividing " << kBytes;
    }
    const auto submit = [&](bool mirrored) {
        sam3d_slot_request req[2] = {{kBytes}, {kBytes}};
        void * slot[2] = {nullptr, nullptr};
        EXPECT_EQ(sam3d_session_reserve(s, req, 2, slot), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(static_cast<uint8_t *>(slot[1]), static_cast<uint8_t *>(slot[0]) + kBytes);
        const auto x = rig::pattern(kBytes, mirrored ? 1 : 2), y = rig::pattern(kBytes, mirrored ? 3 : 4);
        std::memcpy(slot[0], x.data(), kBytes);
        std::memcpy(slot[1], y.data(), kBytes);
        // Mirrored: t0 from slot 0, t1 from slot 1; else crossed.
        sam3d_upload ups[2] = {rig::up(a.t[0], slot[mirrored ? 0 : 1], kBytes), rig::up(a.t[1], slot[mirrored ? 1 : 0], kBytes)};
        sam3d_call c{};
        c.uploads = ups;
        c.n_uploads = 2;
        sam3d_session_reset_counters(s);
        EXPECT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(device_bytes(a.t[0]), mirrored ? x : y);
        EXPECT_EQ(device_bytes(a.t[1]), mirrored ? y : x);
        return r.counters(s).upload_copies;
    };
    EXPECT_EQ(submit(true), 1u) << "slots as far apart as the tensors: one copy";
    EXPECT_EQ(submit(false), 2u) << "slots crossed: a copy each";
}

// A zero-copy download across a declared gap would write the slot bytes between two dst: here
// the first slot's tail, the caller's memory. Uploads may bridge it (they only read those
// bytes); downloads do not, unless the call says its slots' tails are scratch (below).
TEST_P(Coalescing, ZeroCopyDownloadsDoNotBridgeASlotsTail) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    constexpr size_t n = 1000, step = 1024;
    Area a(r, n, step - n, 2 * step);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const size_t al = sam3d_session_staging_alignment(s);
    if (GetParam() == Kind::Cpu || step % (al > 0 ? al : 1) != 0) {
        GTEST_SKIP() << "slots " << step << " bytes apart need a staging alignment dividing " << step;
    }
    ASSERT_EQ(sam3d_session_add_area(s, a.area), SAM3D_OK) << sam3d_last_error();
    const std::vector<uint8_t> device = rig::pattern(2 * step, 8);
    ggml_backend_tensor_set(a.area, device.data(), 0, 2 * step);
    sam3d_slot_request req[2] = {{step}, {step}};
    void * slot[2] = {nullptr, nullptr};
    ASSERT_EQ(sam3d_session_reserve(s, req, 2, slot), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(static_cast<uint8_t *>(slot[1]), static_cast<uint8_t *>(slot[0]) + step) << "the host mirrors the device";
    std::memset(slot[0], 0xC3, 2 * step);
    sam3d_download downs[2] = {rig::down(a.first, slot[0], n), rig::down(a.second, slot[1], n)};
    sam3d_call c{};
    c.downloads = downs;
    c.n_downloads = 2;
    sam3d_session_reset_counters(s);
    ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(r.counters(s).download_copies, 2u);
    const auto * got = static_cast<const uint8_t *>(slot[0]);
    EXPECT_EQ(std::vector<uint8_t>(got, got + n), std::vector<uint8_t>(device.begin(), device.begin() + n));
    EXPECT_EQ(std::vector<uint8_t>(got + n, got + step), std::vector<uint8_t>(step - n, 0xC3))
        << "the slot bytes between the two dst are the caller's: not written";
    EXPECT_EQ(std::vector<uint8_t>(got + step, got + step + n), std::vector<uint8_t>(device.begin() + step, device.begin() + step + n));
}

// Zero-copy downloads out of an area of four `step`-byte quarters, quarter k's first `n` bytes
// into slot k of a reservation, every slot byte first 0xC3. A slot's size at least `n`: its
// bytes past the descriptor are the caller's unless the call passes SAM3D_SUBMIT_SLOT_TAILS.
struct SlotDownloads {
    static constexpr size_t n = 1000, step = 1024;
    Rig r;
    ggml_tensor * area;
    ggml_tensor * input;  // an upload's tensor outside the area
    std::vector<ggml_tensor *> quarter;
    sam3d_session * s = nullptr;
    std::vector<uint8_t> device;
    std::vector<size_t> sizes;
    void * slot[4] = {nullptr, nullptr, nullptr, nullptr};
    explicit SlotDownloads(Kind k) : r(k) {
        area = r.bytes(static_cast<int64_t>(4 * step), "area");
        input = r.bytes(static_cast<int64_t>(n), "input");
        for (size_t i = 0; i < 4; ++i) {
            quarter.push_back(ggml_view_1d(r.ctx(), area, static_cast<int64_t>(n), i * step));
        }
    }
    // Whether the case can run: a batching session whose slots of `n` bytes lie `step` apart.
    bool ready() {
        r.alloc();
        s = r.session(SAM3D_BATCHING_ON);
        const size_t al = sam3d_session_staging_alignment(s);
        if (r.kind() == Kind::Cpu || al == 0 || (n + al - 1) / al * al != step) {
            return false;
        }
        EXPECT_EQ(sam3d_session_add_area(s, area), SAM3D_OK) << sam3d_last_error();
        device = rig::pattern(4 * step, 9);
        ggml_backend_tensor_set(area, device.data(), 0, 4 * step);
        return true;
    }
    // Reserves slots of `slot_sizes`, downloads quarter k into slot k for each k of `to` (and,
    // when `up_slot` names a slot, uploads `input` from it first), submits with ZERO_COPY and
    // `flags` (waiting when QUEUED); returns the GGML download copies. The downloaded bytes are
    // checked here; every other slot byte by untouched().
    uint64_t run(std::vector<size_t> slot_sizes, std::vector<size_t> to, unsigned flags, size_t up_slot = SIZE_MAX) {
        sizes = std::move(slot_sizes);
        std::vector<sam3d_slot_request> req;
        for (size_t z : sizes) {
            req.push_back({z});
        }
        EXPECT_EQ(sam3d_session_reserve(s, req.data(), req.size(), slot), SAM3D_OK) << sam3d_last_error();
        for (size_t i = 0; i < sizes.size(); ++i) {
            EXPECT_EQ(static_cast<uint8_t *>(slot[i]), static_cast<uint8_t *>(slot[0]) + i * step) << "the host mirrors the device";
            std::memset(slot[i], 0xC3, sizes[i]);
        }
        std::vector<sam3d_download> downs;
        for (size_t k : to) {
            downs.push_back(rig::down(quarter[k], slot[k], n));
        }
        std::vector<sam3d_upload> ups;
        if (up_slot < sizes.size()) {
            ups.push_back(rig::up(input, slot[up_slot], n));
        }
        sam3d_call c{};
        c.uploads = ups.data();
        c.n_uploads = ups.size();
        c.downloads = downs.data();
        c.n_downloads = downs.size();
        sam3d_session_reset_counters(s);
        sam3d_ticket t = 0;
        EXPECT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY | flags, &t), SAM3D_OK) << sam3d_last_error();
        if (flags & SAM3D_SUBMIT_QUEUED) {
            EXPECT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
        }
        for (size_t k : to) {
            const auto * got = static_cast<const uint8_t *>(slot[k]);
            EXPECT_EQ(std::vector<uint8_t>(got, got + n), std::vector<uint8_t>(device.begin() + k * step, device.begin() + k * step + n))
                << "quarter " << k;
        }
        return r.counters(s).download_copies;
    }
    // Whether slot k's bytes from `from` to its end are still 0xC3.
    bool untouched(size_t k, size_t from = 0) const {
        const auto * got = static_cast<const uint8_t *>(slot[k]);
        return std::vector<uint8_t>(got + from, got + sizes[k]) == std::vector<uint8_t>(sizes[k] - from, 0xC3);
    }
};

#define SLOT_DOWNLOADS(x)                                                                                           \
    SlotDownloads x(GetParam());                                                                                    \
    RIG_REQUIRE(x.r);                                                                                               \
    if (!x.ready()) GTEST_SKIP() << "needs a batching session whose slots of " << SlotDownloads::n << " bytes lie " \
                                 << SlotDownloads::step << " apart"

// With SAM3D_SUBMIT_SLOT_TAILS a slot's tail is scratch: one copy across it, queued or not, and
// no byte past the last descriptor's end is written. Without the flag the tail is the caller's.
TEST_P(Coalescing, ZeroCopyDownloadsBridgeSlotTailsTheCallMadeScratch) {
    SLOT_DOWNLOADS(x);
    const size_t n = SlotDownloads::n, step = SlotDownloads::step;
    for (unsigned queued : {0u, unsigned{SAM3D_SUBMIT_QUEUED}}) {
        SCOPED_TRACE(queued ? "queued" : "complete on return");
        EXPECT_EQ(x.run({step, step}, {0, 1}, SAM3D_SUBMIT_SLOT_TAILS | queued), 1u) << "the tail is scratch: one copy";
        EXPECT_TRUE(x.untouched(1, n)) << "the second slot's tail lies past the run";
        EXPECT_EQ(x.run({step, step}, {0, 1}, queued), 2u) << "without the flag the tail is the caller's";
        EXPECT_TRUE(x.untouched(0, n));
    }
}

// A slot its descriptor fills leaves only the padding up to the next slot, nobody's bytes: the
// downloads join without the flag, as far as every descriptor of the run fills its slot.
TEST_P(Coalescing, ZeroCopyDownloadsBridgeThePaddingBetweenSlots) {
    SLOT_DOWNLOADS(x);
    const size_t n = SlotDownloads::n;
    EXPECT_EQ(x.run({n, n}, {0, 1}, 0), 1u) << "slots of exactly the descriptors' bytes: one copy";
    EXPECT_EQ(x.run({n, n, n, n}, {0, 1, 2, 3}, 0), 1u) << "four filled slots: one copy";
    EXPECT_EQ(x.run({n + 1, n}, {0, 1}, 0), 2u) << "one byte of the first slot is the caller's";
    EXPECT_TRUE(x.untouched(0, n));
    EXPECT_EQ(x.run({n, n + 1, n}, {0, 1, 2}, 0), 2u) << "the second slot's last byte is the caller's";
    EXPECT_TRUE(x.untouched(1, n));
}

// Between two download slots lies another slot of the call (an input's, or one no descriptor
// names): the caller's, so the downloads stay two copies even with SLOT_TAILS, though host and
// device mirror; an upload's slot before them does not change which slots are the downloads'.
TEST_P(Coalescing, ZeroCopyDownloadsNeverBridgeAnotherSlot) {
    SLOT_DOWNLOADS(x);
    const size_t step = SlotDownloads::step;
    EXPECT_EQ(x.run({step, step, step}, {0, 2}, SAM3D_SUBMIT_SLOT_TAILS), 2u);
    EXPECT_TRUE(x.untouched(1)) << "slot 1 is not the call's to write";
    EXPECT_EQ(x.run({step, step, step, step}, {1, 3}, SAM3D_SUBMIT_SLOT_TAILS, 0), 2u);
    EXPECT_TRUE(x.untouched(2)) << "slot 2 is not the call's to write";
    EXPECT_EQ(x.run({step, step, step}, {1, 2}, SAM3D_SUBMIT_SLOT_TAILS, 0), 1u) << "slots 1 and 2 are consecutive";
}

// Which slots are consecutive is each call's own: a call whose slots 0 and 1 joined does not
// make the next call's slots 0 and 2 consecutive.
TEST_P(Coalescing, ZeroCopyDownloadSlotsAreEachCallsOwn) {
    SLOT_DOWNLOADS(x);
    const size_t n = SlotDownloads::n, step = SlotDownloads::step;
    EXPECT_EQ(x.run({n, n}, {0, 1}, 0), 1u);
    EXPECT_EQ(x.run({step, step, step}, {0, 2}, SAM3D_SUBMIT_SLOT_TAILS), 2u);
    EXPECT_TRUE(x.untouched(1));
}

// Zero-copy uploads bridge a declared gap (they only read the staging bytes between their
// slots): quarters 0 and 1 from two mirrored slots, one copy, each descriptor's bytes exact.
TEST_P(Coalescing, ZeroCopyUploadsBridgeADeclaredGap) {
    SLOT_DOWNLOADS(x);
    const size_t n = SlotDownloads::n, step = SlotDownloads::step;
    sam3d_slot_request req[2] = {{step}, {step}};
    ASSERT_EQ(sam3d_session_reserve(x.s, req, 2, x.slot), SAM3D_OK) << sam3d_last_error();
    const auto a = rig::pattern(n, 1), b = rig::pattern(n, 2);
    std::memcpy(x.slot[0], a.data(), n);
    std::memcpy(x.slot[1], b.data(), n);
    sam3d_upload ups[2] = {rig::up(x.quarter[0], x.slot[0], n), rig::up(x.quarter[1], x.slot[1], n)};
    sam3d_call c{};
    c.uploads = ups;
    c.n_uploads = 2;
    sam3d_session_reset_counters(x.s);
    ASSERT_EQ(sam3d_session_submit(x.s, &c, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(x.r.counters(x.s).upload_copies, 1u) << "the gap is the caller's own: one copy";
    EXPECT_EQ(device_bytes(x.quarter[0]), a);
    EXPECT_EQ(device_bytes(x.quarter[1]), b);
}

// The bound (rule 3) counts a run's span, bridged slot tails included: with them a call can
// pass the bound that it stays under without them (and take the synchronous path).
TEST_P(Coalescing, TheBoundCountsBridgedSlotTails) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    constexpr size_t big = 16 * 1024 * 1024 - 8 * 1024, tail = 32 * 1024, d = 64;
    ggml_tensor * t1 = r.bytes(static_cast<int64_t>(big), "t1");
    ggml_tensor * t2 = r.bytes(static_cast<int64_t>(big), "t2");
    ggml_tensor * area = r.bytes(static_cast<int64_t>(tail + d), "area");
    ggml_tensor * a0 = ggml_view_1d(r.ctx(), area, static_cast<int64_t>(d), 0);
    ggml_tensor * a1 = ggml_view_1d(r.ctx(), area, static_cast<int64_t>(d), tail);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const size_t al = sam3d_session_staging_alignment(s);
    if (GetParam() == Kind::Cpu || al == 0 || tail % al != 0 || d % al != 0) {
        GTEST_SKIP() << "needs a batching session whose staging alignment divides " << d;
    }
    ASSERT_EQ(sam3d_session_add_area(s, area), SAM3D_OK) << sam3d_last_error();
    // A kept slot that two uploads read (aliased reads are allowed): 2 x big of laid-out bytes.
    sam3d_slot_request kreq = {big};
    void * kslot = nullptr;
    ASSERT_EQ(sam3d_session_reserve(s, &kreq, 1, &kslot), SAM3D_OK) << sam3d_last_error();
    ASSERT_TRUE(sam3d_session_reservation_pinned(s));
    std::memset(kslot, 0x5A, big);
    sam3d_upload ku = rig::up(t1, kslot, big);
    sam3d_call kc{};
    kc.uploads = &ku;
    kc.n_uploads = 1;
    sam3d_ticket kt = 0;
    ASSERT_EQ(sam3d_session_submit(s, &kc, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, &kt), SAM3D_OK) << sam3d_last_error();
    for (unsigned flags : {0u, unsigned{SAM3D_SUBMIT_SLOT_TAILS}}) {
        SCOPED_TRACE(flags ? "SLOT_TAILS" : "no flag");
        sam3d_slot_request req[2] = {{tail}, {d}};
        void * slot[2] = {nullptr, nullptr};
        ASSERT_EQ(sam3d_session_reserve(s, req, 2, slot), SAM3D_OK) << sam3d_last_error();
        ASSERT_TRUE(sam3d_session_reservation_pinned(s));
        sam3d_upload ups[2] = {rig::up(t1, kslot, big), rig::up(t2, kslot, big)};
        sam3d_download downs[2] = {rig::down(a0, slot[0], d), rig::down(a1, slot[1], d)};
        sam3d_call c{};
        c.uploads = ups;
        c.n_uploads = 2;
        c.downloads = downs;
        c.n_downloads = 2;
        sam3d_session_reset_counters(s);
        ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY | flags, nullptr), SAM3D_OK) << sam3d_last_error();
        const sam3d_counters k = r.counters(s);
        // 2 x big + 2 x d fits in 32 MiB; 2 x big + tail + d does not.
        EXPECT_EQ(k.pinned_batches, flags ? 0u : 1u);
        EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_OVERSIZED], flags ? 1u : 0u);
    }
    EXPECT_EQ(sam3d_session_release(s, kt), SAM3D_OK) << sam3d_last_error();
}

TEST_P(Coalescing, TheBoundCountsTheLaidOutBytes) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    if (GetParam() == Kind::Cpu) {
        GTEST_SKIP() << "the CPU backend never batches";
    }
    // Two halves of the bound with a 4 KiB gap: their aligned sizes reach the bound exactly (a
    // batch), but laid out as one run across the declared gap they are 4 KiB over it.
    constexpr size_t half = SAM3D_STAGING_BOUND_BYTES / 2;
    Area a(r, half, 4096, 2 * half + 4096);
    r.alloc();
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = SAM3D_BATCHING_ON;
    o.staging_piece_bytes = SIZE_MAX;  // one piece: the run is not stopped at a piece (rule 10)
    sam3d_session * s = r.session(o);
    std::vector<uint8_t> in(half, 0x5A);
    std::vector<sam3d_upload> ups = {rig::up(a.first, in.data(), half), rig::up(a.second, in.data(), half)};
    sam3d_counters k = run_transfers(r, s, ups, {});
    EXPECT_EQ(k.pinned_batches, 1u) << "two separate runs: exactly the bound";
    EXPECT_EQ(k.upload_copies, 2u);
    ASSERT_EQ(sam3d_session_add_area(s, a.area), SAM3D_OK) << sam3d_last_error();
    k = run_transfers(r, s, ups, {});
    EXPECT_EQ(k.pinned_batches, 0u) << "one run of the bound + 4 KiB: over the bound";
    EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_OVERSIZED], 1u);
    EXPECT_EQ(k.upload_copies, 2u) << "the synchronous path copies per descriptor";
}

// The I/O-area recipe (docs/benchmark.md, "Coalesced copies and I/O areas") on a real graph:
// the inputs placed in an input area and the output node in an output area with
// ggml_backend_tensor_alloc before the rest of the context is allocated (which skips tensors
// that have data, so the kernel writes its result straight into the area), both declared. The
// result is 2a + b exactly, as in the scattered layout, in one GGML copy per direction.
TEST_P(Coalescing, AGraphWithItsInputsAndOutputInAreasComputesTheSameBytes) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    constexpr int64_t n = 1000;  // 4000 bytes: not a multiple of any backend's alignment here
    const size_t al = ggml_backend_get_alignment(r.backend());
    const size_t step = (n * sizeof(float) + al - 1) / al * al;
    ggml_init_params ip = {ggml_tensor_overhead() * 2, nullptr, true};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> actx(ggml_init(ip), ggml_free);
    ggml_tensor * in_area = ggml_new_tensor_1d(actx.get(), GGML_TYPE_I8, static_cast<int64_t>(2 * step));
    ggml_tensor * out_area = ggml_new_tensor_1d(actx.get(), GGML_TYPE_I8, static_cast<int64_t>(step));
    std::unique_ptr<ggml_backend_buffer, decltype(&ggml_backend_buffer_free)> abuf(
        ggml_backend_alloc_ctx_tensors(actx.get(), r.backend()), ggml_backend_buffer_free);
    ASSERT_NE(abuf, nullptr);
    cases::ScaleAdd w = cases::scale_add(r, n);
    uint8_t * in = static_cast<uint8_t *>(in_area->data);
    ASSERT_EQ(ggml_backend_tensor_alloc(abuf.get(), w.a, in), GGML_STATUS_SUCCESS);
    ASSERT_EQ(ggml_backend_tensor_alloc(abuf.get(), w.b, in + step), GGML_STATUS_SUCCESS);
    ASSERT_EQ(ggml_backend_tensor_alloc(abuf.get(), w.out, out_area->data), GGML_STATUS_SUCCESS);
    r.alloc();  // the intermediate (2a) only
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    ASSERT_EQ(sam3d_session_add_area(s, in_area), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(sam3d_session_add_area(s, out_area), SAM3D_OK) << sam3d_last_error();
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 3.0f);
    std::vector<float> out(n, -1.0f);
    sam3d_upload ups[2] = {rig::up(w.a, a.data(), n * sizeof(float)), rig::up(w.b, b.data(), n * sizeof(float))};
    sam3d_download downs[1] = {rig::down(w.out, out.data(), n * sizeof(float))};
    sam3d_call c{ups, 2, w.graph, downs, 1, false};
    sam3d_session_reset_counters(s);
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(out, cases::expected(a, b)) << "the output node computed in its area";
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.upload_copies, GetParam() == Kind::Cpu ? 2u : 1u) << "the two inputs across their alignment gap";
    EXPECT_EQ(k.download_copies, 1u);
}

// An area must hold the run and the joining descriptor whole (rule 10): a descriptor after a gap
// that ends one byte past the area starts a run of its own; one ending at the area's end joins.
TEST_P(Coalescing, ADescriptorEndingOneBytePastItsAreaStartsARun) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    constexpr size_t n = 1000;
    ggml_tensor * whole = r.bytes(4 * n, "whole");
    ggml_tensor * left = ggml_view_1d(r.ctx(), whole, 2 * n, 0);
    ggml_tensor * a = ggml_view_1d(r.ctx(), whole, n, 0);
    ggml_tensor * inside = ggml_view_1d(r.ctx(), whole, n - 8, n + 8);  // [n + 8, 2n): the area's end
    ggml_tensor * past = ggml_view_1d(r.ctx(), whole, n - 7, n + 8);    // [n + 8, 2n + 1): one byte past
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    ASSERT_EQ(sam3d_session_add_area(s, left), SAM3D_OK) << sam3d_last_error();
    const auto in = rig::pattern(4 * n, 21);
    const bool staged = GetParam() != Kind::Cpu;
    sam3d_counters k = run_transfers(r, s, {rig::up(a, in.data(), n), rig::up(inside, in.data() + n + 8, n - 8)}, {});
    EXPECT_EQ(k.upload_copies, staged ? 1u : 2u) << "a descriptor ending at the area's end joins";
    k = run_transfers(r, s, {rig::up(a, in.data(), n), rig::up(past, in.data() + n + 8, n - 7)}, {});
    EXPECT_EQ(k.upload_copies, 2u) << "a descriptor ending one byte past the area joined its run";
    const std::vector<uint8_t> d = device_bytes(whole);
    EXPECT_EQ(std::vector<uint8_t>(d.begin(), d.begin() + n), std::vector<uint8_t>(in.begin(), in.begin() + n));
    EXPECT_EQ(std::vector<uint8_t>(d.begin() + n + 8, d.begin() + 2 * n + 1),
              std::vector<uint8_t>(in.begin() + n + 8, in.begin() + 2 * n + 1));
}

// A copying call's run grows while its bytes are below a piece (rule 10): with pieces of two
// tensors, a run one byte short of a piece still takes the next adjacent descriptor.
TEST_P(Coalescing, ARunOneByteShortOfAPieceStillGrows) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    Adjacent a(r, 2);
    r.alloc();
    a.check_adjacent();
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = SAM3D_BATCHING_ON;
    o.staging_piece_bytes = 2 * kBytes;
    sam3d_session * s = r.session(o);
    const auto in = rig::pattern(2 * kBytes, 22);
    const sam3d_counters k = run_transfers(
        r, s, {rig::up(a.t[0], in.data(), kBytes), rig::up(a.t[1], in.data() + kBytes, kBytes - 1),
               rig::up(a.t[1], in.data() + 2 * kBytes - 1, 1, kBytes - 1)}, {});
    EXPECT_EQ(k.upload_copies, GetParam() != Kind::Cpu ? 1u : 3u) << "a run of a piece less one byte stopped growing";
    EXPECT_EQ(device_bytes(a.t[0]), std::vector<uint8_t>(in.begin(), in.begin() + kBytes));
    EXPECT_EQ(device_bytes(a.t[1]), std::vector<uint8_t>(in.begin() + kBytes, in.end()));
}

// ... and must hold the run's first byte: an area starting one byte after the run bridges nothing.
TEST_P(Coalescing, AnAreaStartingOneByteAfterTheRunBridgesNothing) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    constexpr size_t n = 1000;
    ggml_tensor * whole = r.bytes(4 * n, "whole");
    ggml_tensor * area = ggml_view_1d(r.ctx(), whole, 2 * n - 1, 1);  // [1, 2n)
    ggml_tensor * a = ggml_view_1d(r.ctx(), whole, n, 0);
    ggml_tensor * b = ggml_view_1d(r.ctx(), whole, n - 8, n + 8);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    ASSERT_EQ(sam3d_session_add_area(s, area), SAM3D_OK) << sam3d_last_error();
    const auto in = rig::pattern(4 * n, 23);
    const sam3d_counters k = run_transfers(r, s, {rig::up(a, in.data(), n), rig::up(b, in.data() + n + 8, n - 8)}, {});
    EXPECT_EQ(k.upload_copies, 2u) << "a run starting one byte before the area bridged a gap in it";
    const std::vector<uint8_t> d = device_bytes(whole);
    EXPECT_EQ(std::vector<uint8_t>(d.begin(), d.begin() + n), std::vector<uint8_t>(in.begin(), in.begin() + n));
    EXPECT_EQ(std::vector<uint8_t>(d.begin() + n + 8, d.begin() + 2 * n), std::vector<uint8_t>(in.begin() + n + 8, in.begin() + 2 * n));
}

// Declaring an area allocates through the core's one counted point, so its allocation failure is
// SAM3D_ERR_OUT_OF_MEMORY with nothing declared (docs/contract.md, "Errors"), and it works again.
TEST_P(Coalescing, AnAreaDeclarationsAllocationFailureDeclaresNothing) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    ggml_tensor * t = r.bytes(kBytes, "t");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    sam3d_testing_fail_allocation(s, 1);
    EXPECT_EQ(sam3d_session_add_area(s, t), SAM3D_ERR_OUT_OF_MEMORY) << "the declaration allocated past the counted point";
    sam3d_testing_fail_allocation(s, 0);
    EXPECT_EQ(sam3d_session_areas(s), 0u);
    ASSERT_EQ(sam3d_session_add_area(s, t), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_areas(s), 1u);
}

INSTANTIATE_TEST_SUITE_P(Backends, Coalescing, testing::ValuesIn(rig::kinds()), rig::param_name);

// Two buffers over the two halves of one allocation meet in memory; a run stays in one buffer.
TEST(CoalescingBuffers, BytesThatMeetAcrossTwoBuffersAreTwoCopies) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    ggml_tensor * t0 = r.bytes(static_cast<int64_t>(kBytes), "t0");
    ggml_tensor * t1 = r.bytes(static_cast<int64_t>(kBytes), "t1");
    alignas(64) static uint8_t memory[2 * kBytes];
    ggml_backend_buffer_t b0 = ggml_backend_cpu_buffer_from_ptr(memory, kBytes);
    ggml_backend_buffer_t b1 = ggml_backend_cpu_buffer_from_ptr(memory + kBytes, kBytes);
    ASSERT_EQ(ggml_backend_tensor_alloc(b0, t0, memory), GGML_STATUS_SUCCESS);
    ASSERT_EQ(ggml_backend_tensor_alloc(b1, t1, memory + kBytes), GGML_STATUS_SUCCESS);
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const auto in = rig::pattern(2 * kBytes, 6);
    std::vector<uint8_t> out(2 * kBytes);
    const sam3d_counters k = run_transfers(r, s, {rig::up(t0, in.data(), kBytes), rig::up(t1, in.data() + kBytes, kBytes)},
                                           {rig::down(t0, out.data(), kBytes), rig::down(t1, out.data() + kBytes, kBytes)});
    EXPECT_EQ(k.upload_copies, 2u) << "adjacent bytes of two buffers are two runs";
    EXPECT_EQ(k.download_copies, 2u);
    EXPECT_EQ(out, in);
    ggml_backend_buffer_free(b0);
    ggml_backend_buffer_free(b1);
}

// Downloads may read overlapping device bytes (only their dst must not overlap): [0, 100) and
// then [50, 80) of one tensor. The second starts inside the run: a copy of its own.
TEST(CoalescingExact, OverlappingDownloadsAreSeparateRuns) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    ggml_tensor * t = r.bytes(static_cast<int64_t>(kBytes), "t");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const auto p = rig::pattern(kBytes, 3);
    ggml_backend_tensor_set(t, p.data(), 0, kBytes);
    std::vector<uint8_t> a(100), b(30);
    const sam3d_counters k = run_transfers(r, s, {}, {rig::down(t, a.data(), 100), rig::down(t, b.data(), 30, 50)});
    EXPECT_EQ(k.download_copies, 2u);
    EXPECT_EQ(a, std::vector<uint8_t>(p.begin(), p.begin() + 100));
    EXPECT_EQ(b, std::vector<uint8_t>(p.begin() + 50, p.begin() + 80));
}

// Zero-copy downloads of two adjacent tensors whose slots do not mirror them: t0's second half
// into slot 0, all of t1 into slot 1 (slot 0 + 2048 is not slot 1): two copies, each in place.
TEST(CoalescingExact, ZeroCopyDownloadsIntoSlotsThatDoNotMirrorAreSeparateCopies) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    Adjacent a(r, 2);
    r.alloc();
    a.check_adjacent();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const auto p = rig::pattern(2 * kBytes, 4);
    ggml_backend_tensor_set(a.t[0], p.data(), 0, kBytes);
    ggml_backend_tensor_set(a.t[1], p.data() + kBytes, 0, kBytes);
    sam3d_slot_request req[2] = {{kBytes}, {kBytes}};
    void * slot[2] = {nullptr, nullptr};
    ASSERT_EQ(sam3d_session_reserve(s, req, 2, slot), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(static_cast<uint8_t *>(slot[1]), static_cast<uint8_t *>(slot[0]) + kBytes);
    sam3d_download d[2] = {rig::down(a.t[0], slot[0], kBytes / 2, kBytes / 2), rig::down(a.t[1], slot[1], kBytes)};
    sam3d_call c{};
    c.downloads = d;
    c.n_downloads = 2;
    sam3d_session_reset_counters(s);
    ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(r.counters(s).download_copies, 2u);
    EXPECT_EQ(0, std::memcmp(slot[0], p.data() + kBytes / 2, kBytes / 2));
    EXPECT_EQ(0, std::memcmp(slot[1], p.data() + kBytes, kBytes)) << "t1's bytes landed in the wrong place";
}

// A run of several whose first descriptor starts inside its tensor: the span starts there.
TEST(CoalescingExact, ARunStartingInsideATensorWritesFromThere) {
    ZeroedAdjacent x(2);
    RIG_REQUIRE(x.r);
    x.start();
    const Adjacent & a = x.a;
    const auto in = rig::pattern(kBytes + 1000, 5);
    const sam3d_counters k = run_transfers(
        x.r, x.s, {rig::up(a.t[0], in.data(), 1000, kBytes - 1000), rig::up(a.t[1], in.data() + 1000, kBytes)}, {});
    EXPECT_EQ(k.upload_copies, 1u);
    const std::vector<uint8_t> d0 = device_bytes(a.t[0]), d1 = device_bytes(a.t[1]);
    EXPECT_EQ(std::vector<uint8_t>(d0.begin(), d0.begin() + (kBytes - 1000)), std::vector<uint8_t>(kBytes - 1000, 0))
        << "bytes before the run written";
    EXPECT_EQ(std::vector<uint8_t>(d0.begin() + (kBytes - 1000), d0.end()), std::vector<uint8_t>(in.begin(), in.begin() + 1000));
    EXPECT_EQ(d1, std::vector<uint8_t>(in.begin() + 1000, in.end()));
}

// A copying call's run stops growing once it reaches a piece (rule 10), so that adjacent
// inputs still go in pieces and overlap their copies with the DMA (rule 2): eight adjacent
// 256 KiB uploads with 256 KiB pieces are eight runs and seven piece events, not one.
TEST(CoalescingExact, RunsStopAtAPieceSoThePiecesStillOverlap) {
    deferred::reset();
    {
        constexpr size_t piece = 256 * 1024;
        Rig r(Kind::CpuStaged);
        RIG_REQUIRE(r);
        std::vector<ggml_tensor *> t;
        for (int i = 0; i < 8; ++i) t.push_back(r.bytes(static_cast<int64_t>(piece), ("t" + std::to_string(i)).c_str()));
        r.alloc();
        for (int i = 1; i < 8; ++i) ASSERT_EQ(static_cast<uint8_t *>(t[i]->data), static_cast<uint8_t *>(t[i - 1]->data) + piece);
        deferred::install_with_events(r.seam());
        sam3d_session_options o = sam3d_session_default_options();
        o.batching = SAM3D_BATCHING_ON;
        o.staging_piece_bytes = piece;
        sam3d_session * s = r.session(o);
        const auto in = rig::pattern(8 * piece, 6);
        std::vector<sam3d_upload> ups;
        for (int i = 0; i < 8; ++i) ups.push_back(rig::up(t[i], in.data() + i * piece, piece));
        const sam3d_counters k = run_transfers(r, s, ups, {});
        EXPECT_EQ(k.upload_copies, 8u) << "a run holds at most one piece";
        EXPECT_EQ(deferred::g_event_records, 7) << "an event after every input piece but the last";
        for (int i = 0; i < 8; ++i) {
            EXPECT_EQ(device_bytes(t[i]), std::vector<uint8_t>(in.begin() + i * piece, in.begin() + (i + 1) * piece)) << i;
        }
    }
    deferred::reset();
}

// Pieces (rule 2) count the runs' laid-out bytes, not their raw sizes: three separate uploads of
// A + 1 bytes with pieces of 2A are three pieces (each lays out 2A), two events between them.
TEST(CoalescingExact, PiecesCountTheRunsLaidOutBytes) {
    deferred::reset();
    {
        Rig r(Kind::CpuStaged);
        RIG_REQUIRE(r);
        deferred::install_with_events(r.seam());
        sam3d_session * probe = r.session(SAM3D_BATCHING_ON);
        const size_t al = sam3d_session_staging_alignment(probe);
        ASSERT_GE(al, 2u);
        std::vector<ggml_tensor *> t;
        for (int i = 0; i < 3; ++i) {
            t.push_back(r.bytes(static_cast<int64_t>(al + 1), ("t" + std::to_string(i)).c_str()));
            r.bytes(64, "apart");  // separate runs
        }
        r.alloc();
        sam3d_session_options o = sam3d_session_default_options();
        o.batching = SAM3D_BATCHING_ON;
        o.staging_piece_bytes = 2 * al;
        sam3d_session * s = r.session(o);
        const auto in = rig::pattern(3 * (al + 1), 7);
        std::vector<sam3d_upload> ups;
        for (size_t i = 0; i < 3; ++i) ups.push_back(rig::up(t[i], in.data() + i * (al + 1), al + 1));
        deferred::g_event_records = 0;
        const sam3d_counters k = run_transfers(r, s, ups, {});
        EXPECT_EQ(k.upload_copies, 3u);
        EXPECT_EQ(deferred::g_event_records, 2) << "one piece per upload: each lays out 2A bytes";
        for (size_t i = 0; i < 3; ++i) {
            EXPECT_EQ(device_bytes(t[i]), std::vector<uint8_t>(in.begin() + i * (al + 1), in.begin() + (i + 1) * (al + 1)));
        }
    }
    deferred::reset();
}

// A queued call's span tensors are its own until it completed: a later call's runs do not
// overwrite what the device has not read yet (the deferred queue reads tensors at synchronize,
// as a device may).
TEST(CoalescingQueued, SpanTensorsOutliveLaterCalls) {
    deferred::reset();
    {
        Rig r(Kind::CpuStaged);
        RIG_REQUIRE(r);
        Adjacent a(r, 4);
        r.alloc();
        a.check_adjacent();
        deferred::install_with_events(r.seam());
        sam3d_session * s = r.session(SAM3D_BATCHING_ON);
        const auto first = rig::pattern(2 * kBytes, 1), second = rig::pattern(2 * kBytes, 2);
        sam3d_upload u1[2] = {rig::up(a.t[0], first.data(), kBytes), rig::up(a.t[1], first.data() + kBytes, kBytes)};
        sam3d_upload u2[2] = {rig::up(a.t[2], second.data(), kBytes), rig::up(a.t[3], second.data() + kBytes, kBytes)};
        sam3d_call c1{}, c2{};
        c1.uploads = u1;
        c1.n_uploads = 2;
        c2.uploads = u2;
        c2.n_uploads = 2;
        sam3d_ticket t1 = 0, t2 = 0;
        ASSERT_EQ(sam3d_session_submit(s, &c1, SAM3D_SUBMIT_QUEUED, &t1), SAM3D_OK) << sam3d_last_error();
        ASSERT_EQ(sam3d_session_submit(s, &c2, SAM3D_SUBMIT_QUEUED, &t2), SAM3D_OK) << sam3d_last_error();
        EXPECT_GT(deferred::pending(), 0u) << "neither call's copy ran yet";
        ASSERT_EQ(sam3d_session_wait(s, t2), SAM3D_OK) << sam3d_last_error();
        ASSERT_EQ(sam3d_session_wait(s, t1), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(r.counters(s).upload_copies, 2u);
        EXPECT_EQ(device_bytes(a.t[0]), std::vector<uint8_t>(first.begin(), first.begin() + kBytes));
        EXPECT_EQ(device_bytes(a.t[1]), std::vector<uint8_t>(first.begin() + kBytes, first.end()));
        EXPECT_EQ(device_bytes(a.t[2]), std::vector<uint8_t>(second.begin(), second.begin() + kBytes));
        EXPECT_EQ(device_bytes(a.t[3]), std::vector<uint8_t>(second.begin() + kBytes, second.end()));
    }
    deferred::reset();
}

}  // namespace

// Two runs of several descriptors in one call (t0+t1 and t3+t4, t2 between them left out): each
// goes to GGML with a span tensor of its own, so each pair lands on its own bytes.
TEST(CoalescingExact, EachRunOfSeveralHasItsOwnSpan) {
    ZeroedAdjacent x(5);
    RIG_REQUIRE(x.r);
    x.start();
    const Adjacent & a = x.a;
    const auto in = rig::pattern(4 * kBytes, 5);
    const sam3d_counters k = run_transfers(x.r, x.s,
                                           {rig::up(a.t[0], in.data(), kBytes), rig::up(a.t[1], in.data() + kBytes, kBytes),
                                            rig::up(a.t[3], in.data() + 2 * kBytes, kBytes),
                                            rig::up(a.t[4], in.data() + 3 * kBytes, kBytes)},
                                           {});
    EXPECT_EQ(k.upload_copies, 2u) << "two runs of two";
    for (int i : {0, 1, 3, 4}) {
        const size_t at = static_cast<size_t>(i < 2 ? i : i - 1) * kBytes;
        EXPECT_EQ(device_bytes(a.t[i]), std::vector<uint8_t>(in.begin() + at, in.begin() + at + kBytes)) << "t" << i;
    }
    EXPECT_EQ(device_bytes(a.t[2]), x.zero) << "t2 was not uploaded";
}
