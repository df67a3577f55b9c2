// Round trips through the core on every backend: values, sizes, views, guards, staging reuse,
// counters and the staging bound.
#include "cases.h"
#include "rig.h"

using rig::Kind;
using rig::Rig;

namespace {

// Whether batching-on calls of this kind take the pinned staging path (the real CPU backend
// has no async caps and falls back).
bool staged(Kind k) { return k != Kind::Cpu; }

}  // namespace

class Transfers : public testing::TestWithParam<Kind> {};

// Rule 2 + identity: the same inputs give byte-identical outputs with batching on and off,
// and the graph really ran (out = 2 * a + b).
TEST_P(Transfers, ScaleAddIsByteIdenticalOnAndOff) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 1000;
    ggml_tensor * a = r.f32(n, "a");
    ggml_tensor * b = r.f32(n, "b");
    ggml_tensor * out = ggml_add(r.ctx(), ggml_scale(r.ctx(), a, 2.0f), b);
    ggml_set_name(out, "out");
    ggml_cgraph * g = ggml_new_graph(r.ctx());
    ggml_build_forward_expand(g, out);
    r.alloc();
    const std::vector<float> va = rig::ramp(n, 1.0f), vb = rig::ramp(n, 5.0f);
    std::vector<float> on(n, -1.0f), off(n, -1.0f);
    for (sam3d_batching mode : {SAM3D_BATCHING_ON, SAM3D_BATCHING_OFF}) {
        sam3d_session * s = r.session(mode);
        sam3d_upload ups[] = {rig::up(a, va.data(), n * 4), rig::up(b, vb.data(), n * 4)};
        std::vector<float> & dst = mode == SAM3D_BATCHING_ON ? on : off;
        sam3d_download downs[] = {rig::down(out, dst.data(), n * 4)};
        sam3d_call c{ups, 2, g, downs, 1, false};
        ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    }
    for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(off[i], 2.0f * va[i] + vb[i]) << "at " << i;
    }
    EXPECT_EQ(0, std::memcmp(on.data(), off.data(), n * 4));
}

// Alternating input values with batching alternating on/off: every call's outputs are its
// own inputs' results, never a previous call's.
TEST_P(Transfers, AlternatingInputsAndModesGiveEachCallItsOwnOutputs) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 777;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * on = r.session(SAM3D_BATCHING_ON);
    sam3d_session * off = r.session(SAM3D_BATCHING_OFF);
    std::vector<float> previous;
    for (int call = 0; call < 8; ++call) {
        const std::vector<float> va = rig::ramp(n, call % 2 ? 3.0f : 100.0f);
        const std::vector<float> vb = rig::ramp(n, static_cast<float>(call * 7));
        std::vector<float> dst(n, -1.0f);
        sam3d_session * s = (call / 2) % 2 ? off : on;  // on, on, off, off, ... with values alternating per call
        ASSERT_EQ(cases::run(s, w, va.data(), vb.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
        ASSERT_EQ(dst, cases::expected(va, vb)) << "call " << call;
        ASSERT_NE(dst, previous) << "call " << call << " returned the previous call's outputs";
        previous = dst;
    }
    EXPECT_EQ(r.counters(on).calls, 4u);
    EXPECT_EQ(r.counters(off).calls, 4u);
    EXPECT_EQ(r.counters(on).pinned_batches, staged(GetParam()) ? 4u : 0u);
}

// Odd sizes and odd tensor offsets round-trip exactly with batching on, several descriptors per
// call (so staging offsets follow odd sizes), and match batching off byte for byte.
TEST_P(Transfers, OddSizesRoundTripExactlyOnAndOff) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const std::vector<size_t> sizes = {1, 3, 4095, 4097, 7, 65537, 4096, 33};
    std::vector<ggml_tensor *> t;
    for (size_t i = 0; i < sizes.size(); ++i) {
        t.push_back(r.bytes(static_cast<int64_t>(sizes[i] + 11), ("t" + std::to_string(i)).c_str()));
    }
    r.alloc();
    std::vector<std::vector<uint8_t>> results;
    for (sam3d_batching mode : {SAM3D_BATCHING_ON, SAM3D_BATCHING_OFF}) {
        sam3d_session * s = r.session(mode);
        std::vector<std::vector<uint8_t>> src;
        std::vector<sam3d_upload> ups;
        for (size_t i = 0; i < sizes.size(); ++i) {
            src.push_back(rig::pattern(sizes[i], static_cast<uint32_t>(i + 1)));
        }
        for (size_t i = 0; i < sizes.size(); ++i) {
            ups.push_back(rig::up(t[i], src[i].data(), sizes[i], i % 3));
        }
        sam3d_call c1{ups.data(), ups.size(), nullptr, nullptr, 0, false};
        ASSERT_EQ(sam3d_session_run(s, &c1), SAM3D_OK) << sam3d_last_error();
        cases::Guarded g(sizes);
        std::vector<sam3d_download> downs;
        for (size_t i = 0; i < sizes.size(); ++i) {
            downs.push_back(rig::down(t[i], g.region(i), sizes[i], i % 3));
        }
        sam3d_call c2{nullptr, 0, nullptr, downs.data(), downs.size(), false};
        ASSERT_EQ(sam3d_session_run(s, &c2), SAM3D_OK) << sam3d_last_error();
        for (size_t i = 0; i < sizes.size(); ++i) {
            ASSERT_EQ(0, std::memcmp(g.region(i), src[i].data(), sizes[i])) << "size " << sizes[i];
        }
        EXPECT_EQ(g.guards_changed(), 0u);
        const sam3d_counters k = r.counters(s);
        const bool async = mode == SAM3D_BATCHING_ON && staged(GetParam());
        EXPECT_EQ(k.async_uploads, async ? sizes.size() : 0u);
        EXPECT_EQ(k.async_downloads, async ? sizes.size() : 0u);
        EXPECT_EQ(k.sync_uploads, async ? 0u : sizes.size());
        results.push_back(g.all());
    }
    EXPECT_EQ(results[0], results[1]);
}

// Contiguous views with offsets into a bigger tensor: uploads land at the view's bytes, the
// graph reads them, downloads with an extent offset read the right bytes, and the bytes of the
// big tensor outside the views keep their value.
TEST_P(Transfers, ViewsWithOffsetsReadAndWriteTheirOwnBytes) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t big_n = 4096, n = 1000;
    ggml_tensor * big = r.f32(big_n, "big");
    ggml_tensor * va_t = ggml_view_1d(r.ctx(), big, n, 1024 * sizeof(float));
    ggml_tensor * vb_t = ggml_view_1d(r.ctx(), big, n, 2048 * sizeof(float));
    ggml_set_name(va_t, "view_a");
    ggml_set_name(vb_t, "view_b");
    ggml_tensor * out = ggml_add(r.ctx(), ggml_scale(r.ctx(), va_t, 2.0f), vb_t);
    ggml_cgraph * g = ggml_new_graph(r.ctx());
    ggml_build_forward_expand(g, out);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> sentinel(big_n, -7.0f);
    sam3d_upload fill[] = {rig::up(big, sentinel.data(), big_n * 4)};
    sam3d_call c0{fill, 1, nullptr, nullptr, 0, false};
    ASSERT_EQ(sam3d_session_run(s, &c0), SAM3D_OK) << sam3d_last_error();

    const std::vector<float> a = rig::ramp(n, 10.0f), b = rig::ramp(n, 20.0f);
    std::vector<float> res(n, 0.0f), tail(n - 100, 0.0f);
    sam3d_upload ups[] = {rig::up(va_t, a.data(), n * 4), rig::up(vb_t, b.data(), n * 4)};
    sam3d_download downs[] = {rig::down(out, res.data(), n * 4),
                              rig::down(vb_t, tail.data(), (n - 100) * 4, 100 * 4)};
    sam3d_call c{ups, 2, g, downs, 2, false};
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(res, cases::expected(a, b));
    EXPECT_EQ(tail, std::vector<float>(b.begin() + 100, b.end()));

    std::vector<float> whole(big_n, 0.0f);
    sam3d_download all[] = {rig::down(big, whole.data(), big_n * 4)};
    sam3d_call c2{nullptr, 0, nullptr, all, 1, false};
    ASSERT_EQ(sam3d_session_run(s, &c2), SAM3D_OK) << sam3d_last_error();
    for (int64_t i = 0; i < big_n; ++i) {
        const float want = i >= 1024 && i < 1024 + n ? a[i - 1024] : i >= 2048 && i < 2048 + n ? b[i - 2048] : -7.0f;
        ASSERT_EQ(whole[i], want) << "big[" << i << "]";
    }
}

// Guard bytes before and after every output region stay untouched; each region gets exactly
// its extent (full, odd-offset, odd-size).
TEST_P(Transfers, GuardBytesAroundEachOutputStayUntouched) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 1024;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 2.0f);
    const std::vector<float> want = cases::expected(a, b);
    for (sam3d_batching mode : {SAM3D_BATCHING_ON, SAM3D_BATCHING_OFF}) {
        sam3d_session * s = r.session(mode);
        cases::Guarded g({n * 4, 1, 4093, 17});
        const size_t offs[] = {0, 5, 3, 4 * n - 17};
        sam3d_upload ups[] = {rig::up(w.a, a.data(), n * 4), rig::up(w.b, b.data(), n * 4)};
        sam3d_download downs[4];
        for (size_t i = 0; i < 4; ++i) {
            downs[i] = rig::down(w.out, g.region(i), g.size(i), offs[i]);
        }
        sam3d_call c{ups, 2, w.graph, downs, 4, false};
        ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(g.guards_changed(), 0u);
        const uint8_t * wb = reinterpret_cast<const uint8_t *>(want.data());
        for (size_t i = 0; i < 4; ++i) {
            EXPECT_EQ(0, std::memcmp(g.region(i), wb + offs[i], g.size(i))) << "region " << i;
        }
    }
}

// Back-to-back calls on one session reuse the staging allocation with new data each time.
TEST_P(Transfers, BackToBackCallsReuseStagingWithNewData) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 4097;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    for (int call = 0; call < 6; ++call) {
        const std::vector<float> a = rig::ramp(n, static_cast<float>(call * 11));
        const std::vector<float> b = rig::ramp(n, static_cast<float>(500 - call));
        std::vector<float> dst(n, 0.0f);
        ASSERT_EQ(cases::run(s, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
        ASSERT_EQ(dst, cases::expected(a, b)) << "call " << call;
    }
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.staging_allocations, staged(GetParam()) ? 1u : 0u);
    EXPECT_EQ(k.pinned_batches, staged(GetParam()) ? 6u : 0u);
}

// The staging allocation grows when a call needs more and is reused by smaller calls
// (counters staging_allocations and staging_bytes).
TEST_P(Transfers, StagingGrowsForLargerCallsAndIsReusedBySmallerOnes) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    ggml_tensor * small = r.bytes(1000, "small");
    ggml_tensor * large = r.bytes(3 << 20, "large");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const size_t al = std::max<size_t>(sam3d_session_staging_alignment(s), 1);
    auto roundtrip = [&](ggml_tensor * t, size_t size, uint32_t seed) {
        const std::vector<uint8_t> src = rig::pattern(size, seed);
        std::vector<uint8_t> dst(size, 0);
        sam3d_upload u[] = {rig::up(t, src.data(), size)};
        sam3d_call c1{u, 1, nullptr, nullptr, 0, false};
        ASSERT_EQ(sam3d_session_run(s, &c1), SAM3D_OK) << sam3d_last_error();
        sam3d_download d[] = {rig::down(t, dst.data(), size)};
        sam3d_call c2{nullptr, 0, nullptr, d, 1, false};
        ASSERT_EQ(sam3d_session_run(s, &c2), SAM3D_OK) << sam3d_last_error();
        ASSERT_EQ(dst, src);
    };
    roundtrip(small, 1000, 1);
    sam3d_counters k = r.counters(s);
    if (!staged(GetParam())) {
        roundtrip(large, 3 << 20, 2);
        k = r.counters(s);
        EXPECT_EQ(k.staging_allocations, 0u);
        EXPECT_EQ(k.staging_bytes, 0u);
        EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_NO_ASYNC_CAPS], 4u);
        return;
    }
    EXPECT_EQ(k.staging_allocations, 1u);
    EXPECT_EQ(k.staging_bytes, (1000 + al - 1) / al * al);
    roundtrip(small, 999, 3);
    EXPECT_EQ(r.counters(s).staging_allocations, 1u) << "a call that fits reuses the allocation";
    roundtrip(large, 3 << 20, 4);
    k = r.counters(s);
    EXPECT_EQ(k.staging_allocations, 2u);
    EXPECT_GE(k.staging_bytes, size_t{3} << 20);
    EXPECT_LE(k.staging_bytes, SAM3D_STAGING_BOUND_BYTES);
    const uint64_t held = k.staging_bytes;
    roundtrip(small, 1000, 5);
    roundtrip(large, (3 << 20) - 1, 6);
    k = r.counters(s);
    EXPECT_EQ(k.staging_allocations, 2u) << "smaller calls reuse the grown allocation";
    EXPECT_EQ(k.staging_bytes, held);
    EXPECT_EQ(k.pinned_batches, 10u);  // five round trips of two calls
}

// Rule 3: growth is geometric but stops at the bound: after 20 MiB, a 30 MiB call gets exactly
// 32 MiB (not the doubled 40 MiB).
TEST_P(Transfers, StagingGrowthStopsAtTheBound) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const size_t first = size_t{20} << 20, second = size_t{30} << 20;
    ggml_tensor * t = r.bytes(second, "big");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    for (size_t size : {first, second}) {
        const std::vector<uint8_t> src = rig::pattern(size, static_cast<uint32_t>(size >> 20));
        sam3d_upload u[] = {rig::up(t, src.data(), size)};
        sam3d_call c{u, 1, nullptr, nullptr, 0, false};
        ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
        std::vector<uint8_t> back(size, 0);
        ggml_backend_tensor_get(t, back.data(), 0, size);
        ASSERT_EQ(back, src);
    }
    const sam3d_counters k = r.counters(s);
    if (!staged(GetParam())) {
        EXPECT_EQ(k.staging_bytes, 0u);
        return;
    }
    EXPECT_EQ(k.staging_allocations, 2u);
    EXPECT_EQ(k.staging_bytes, SAM3D_STAGING_BOUND_BYTES);
    EXPECT_EQ(k.pinned_batches, 2u);
}

// Rule 8 with batching on: one count per descriptor, bytes per direction, one pinned batch (or
// one fallback) per call; enqueue and synchronize time recorded on the staged path.
TEST_P(Transfers, CountersMatchTransfersWithBatchingOn) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 300;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 2.0f);
    std::vector<float> dst(n);
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(cases::run(s, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
    }
    const sam3d_counters k = r.counters(s);
    const bool st = staged(GetParam());
    EXPECT_EQ(k.calls, 3u);
    EXPECT_EQ(k.rejected_calls, 0u);
    EXPECT_EQ(k.failed_calls, 0u);
    EXPECT_EQ(k.async_uploads, st ? 6u : 0u);
    EXPECT_EQ(k.async_downloads, st ? 3u : 0u);
    EXPECT_EQ(k.sync_uploads, st ? 0u : 6u);
    EXPECT_EQ(k.sync_downloads, st ? 0u : 3u);
    EXPECT_EQ(k.bytes_uploaded, 3u * 2 * n * 4);
    EXPECT_EQ(k.bytes_downloaded, 3u * n * 4);
    EXPECT_EQ(k.pinned_batches, st ? 3u : 0u);
    EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_NO_ASYNC_CAPS], st ? 0u : 3u);
    EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_FOREIGN_HOST_BUFFER], 0u);
    EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_OVERSIZED], 0u);
    EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_PINNED_UNAVAILABLE], 0u);
    if (st) {
        EXPECT_GT(k.enqueue_ns, 0u);
        EXPECT_GT(k.synchronize_ns, 0u);
        EXPECT_GT(k.copy_ns, 0u);
        EXPECT_EQ(k.sync_path_ns, 0u);
    } else {
        EXPECT_EQ(k.enqueue_ns, 0u);
        EXPECT_EQ(k.synchronize_ns, 0u);
        EXPECT_GT(k.sync_path_ns, 0u);
    }
    sam3d_session_reset_counters(s);
    const sam3d_counters z = r.counters(s);
    EXPECT_EQ(z.calls, 0u);
    EXPECT_EQ(z.async_uploads + z.sync_uploads + z.pinned_batches, 0u);
    EXPECT_EQ(z.staging_bytes, k.staging_bytes) << "reset keeps the held allocation's size";
}

// Rule 8 with batching off: every transfer is sync, none is a fallback or a pinned batch.
TEST_P(Transfers, CountersMatchTransfersWithBatchingOff) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 300;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_OFF);
    EXPECT_FALSE(sam3d_session_batching(s));
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 2.0f);
    std::vector<float> dst(n);
    for (int i = 0; i < 2; ++i) {
        ASSERT_EQ(cases::run(s, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
    }
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.calls, 2u);
    EXPECT_EQ(k.sync_uploads, 4u);
    EXPECT_EQ(k.sync_downloads, 2u);
    EXPECT_EQ(k.async_uploads + k.async_downloads, 0u);
    EXPECT_EQ(k.bytes_uploaded, 2u * 2 * n * 4);
    EXPECT_EQ(k.bytes_downloaded, 2u * n * 4);
    EXPECT_EQ(k.pinned_batches, 0u);
    cases::expect_fallbacks(k);
    EXPECT_EQ(k.staging_allocations, 0u);
    EXPECT_EQ(k.enqueue_ns, 0u);
}

// The per-call synchronous flag: sync transfers, not a fallback, not a pinned batch, and no
// staging allocation; the next call without the flag batches again.
TEST_P(Transfers, SynchronousFlagTakesSyncPathWithoutCountingAFallback) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 256;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(n, 4.0f), b = rig::ramp(n, 9.0f);
    std::vector<float> dst(n, 0.0f);
    ASSERT_EQ(cases::run(s, w, a.data(), b.data(), dst.data(), true), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(dst, cases::expected(a, b));
    sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.sync_uploads, 2u);
    EXPECT_EQ(k.sync_downloads, 1u);
    EXPECT_EQ(k.async_uploads, 0u);
    EXPECT_EQ(k.pinned_batches, 0u);
    cases::expect_fallbacks(k);
    EXPECT_EQ(k.staging_allocations, 0u);
    std::vector<float> dst2(n, 0.0f);
    ASSERT_EQ(cases::run(s, w, b.data(), a.data(), dst2.data(), false), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(dst2, cases::expected(b, a));
    k = r.counters(s);
    EXPECT_EQ(k.pinned_batches, staged(GetParam()) ? 1u : 0u);
    EXPECT_EQ(k.async_uploads, staged(GetParam()) ? 2u : 0u);
}

// Rule 3: a 36 MiB call (two 12 MiB inputs, one 12 MiB output) exceeds the 32 MiB bound and
// takes the synchronous path, counted as oversized (or the session's static reason, which
// wins), with exact results and no staging held beyond the bound.
TEST_P(Transfers, ThirtySixMiBCallTakesTheBoundedFallback) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = (12 << 20) / 4;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 3.0f);
    std::vector<float> dst(n, 0.0f);
    ASSERT_EQ(cases::run(s, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(dst, cases::expected(a, b));
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.bytes_uploaded + k.bytes_downloaded, 36u << 20);
    EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_OVERSIZED], staged(GetParam()) ? 1u : 0u);
    EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_NO_ASYNC_CAPS], staged(GetParam()) ? 0u : 1u);
    EXPECT_EQ(k.pinned_batches, 0u);
    EXPECT_EQ(k.sync_uploads, 2u);
    EXPECT_EQ(k.sync_downloads, 1u);
    EXPECT_EQ(k.staging_bytes, 0u) << "an oversized call allocates no staging";
}

// The exact bound: aligned sizes summing to SAM3D_STAGING_BOUND_BYTES batch (even when the raw
// sizes are smaller); one aligned unit over it falls back as oversized.
TEST_P(Transfers, ExactBoundBatchesAndOneAlignedUnitOverFallsBack) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const size_t half = SAM3D_STAGING_BOUND_BYTES / 2;
    ggml_tensor * in = r.bytes(static_cast<int64_t>(half + 4096), "in");
    ggml_tensor * out = r.bytes(static_cast<int64_t>(half), "out");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const size_t al = std::max<size_t>(sam3d_session_staging_alignment(s), 1);
    const std::vector<uint8_t> src = rig::pattern(half + 1, 7);
    const std::vector<uint8_t> out_bytes = rig::pattern(half, 8);
    ggml_backend_tensor_set(out, out_bytes.data(), 0, half);

    // Upload half - al + 1 bytes (aligned: half) + download half = exactly the bound.
    std::vector<uint8_t> dst(half, 0);
    const size_t exact_up = half - al + 1;
    sam3d_upload u1[] = {rig::up(in, src.data(), exact_up)};
    sam3d_download d1[] = {rig::down(out, dst.data(), half)};
    sam3d_call c1{u1, 1, nullptr, d1, 1, false};
    ASSERT_EQ(sam3d_session_run(s, &c1), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(dst, out_bytes);
    sam3d_counters k = r.counters(s);
    if (staged(GetParam())) {
        EXPECT_EQ(k.pinned_batches, 1u) << "alignment " << al;
        EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_OVERSIZED], 0u);
        EXPECT_EQ(k.staging_bytes, SAM3D_STAGING_BOUND_BYTES);
    } else {
        EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_NO_ASYNC_CAPS], 1u);
    }

    // Upload half + 1 bytes (aligned: half + al) + download half = one aligned unit over.
    std::fill(dst.begin(), dst.end(), 0);
    sam3d_upload u2[] = {rig::up(in, src.data(), half + 1)};
    sam3d_call c2{u2, 1, nullptr, d1, 1, false};
    ASSERT_EQ(sam3d_session_run(s, &c2), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(dst, out_bytes);
    k = r.counters(s);
    EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_OVERSIZED], staged(GetParam()) ? 1u : 0u);
    EXPECT_EQ(k.pinned_batches, staged(GetParam()) ? 1u : 0u);
    EXPECT_LE(k.staging_bytes, SAM3D_STAGING_BOUND_BYTES);

    std::vector<uint8_t> check(half + 1, 0);
    ggml_backend_tensor_get(in, check.data(), 0, half + 1);
    EXPECT_EQ(check, src);
}

INSTANTIATE_TEST_SUITE_P(Backends, Transfers, testing::ValuesIn(rig::kinds()), rig::param_name);
