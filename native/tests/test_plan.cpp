// The one execution plan (docs/contract.md rules 3, 4, 8 and A5): the bound is decided on
// aligned sizes on every path, slots that fell back never make a pinned batch, a call without
// transfers is never a fallback, sums that overflow are oversized, and views without a buffer
// of their own run wherever GGML's blocking calls take them.
#include "cases.h"
#include "probe.h"
#include "rig.h"

using cases::staged;
using rig::Kind;
using rig::Rig;

class PlanBound : public testing::TestWithParam<Kind> {
   protected:
    void SetUp() override { probe::reset(); }
};

// Raw bytes within the bound, aligned bytes over it (an upload of half + 1 bytes aligns to
// half + A, a download of half - A + 1 to half): run, a queued copying submit and a reservation
// all fall back as oversized; the results are exact.
TEST_P(PlanBound, RawBytesWithinTheBoundButAlignedOverItFallBackOnEveryPath) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const size_t half = SAM3D_STAGING_BOUND_BYTES / 2;
    ggml_tensor * in = r.bytes(static_cast<int64_t>(half + 1), "in");
    ggml_tensor * out = r.bytes(static_cast<int64_t>(half), "out");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const size_t al = sam3d_session_staging_alignment(s);
    ASSERT_GT(al, 1u) << "needs a host buffer type with an alignment above 1";
    const size_t up_bytes = half + 1, down_bytes = half - al + 1;
    ASSERT_LE(up_bytes + down_bytes, SAM3D_STAGING_BOUND_BYTES) << "raw bytes within the bound";
    ASSERT_GT(((up_bytes + al - 1) / al + (down_bytes + al - 1) / al) * al, SAM3D_STAGING_BOUND_BYTES);
    const std::vector<uint8_t> src = rig::pattern(up_bytes, 3), want = rig::pattern(half, 4);
    ggml_backend_tensor_set(out, want.data(), 0, half);
    std::vector<uint8_t> dst(down_bytes, 0);
    sam3d_upload u[] = {rig::up(in, src.data(), up_bytes)};
    sam3d_download d[] = {rig::down(out, dst.data(), down_bytes)};
    sam3d_call c{u, 1, nullptr, d, 1, false};

    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(0, std::memcmp(dst.data(), want.data(), down_bytes));
    cases::expect_fallbacks(r.counters(s), SAM3D_FALLBACK_OVERSIZED, 1);
    EXPECT_EQ(r.counters(s).pinned_batches, 0u) << "run";

    std::fill(dst.begin(), dst.end(), 0);
    sam3d_ticket t = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(0, std::memcmp(dst.data(), want.data(), down_bytes));
    cases::expect_fallbacks(r.counters(s), SAM3D_FALLBACK_OVERSIZED, 2);
    EXPECT_EQ(r.counters(s).pinned_batches, 0u) << "copying queued submit";

    sam3d_slot_request req[2] = {{up_bytes}, {down_bytes}};
    void * p[2] = {nullptr, nullptr};
    ASSERT_EQ(sam3d_session_reserve(s, req, 2, p), SAM3D_OK) << sam3d_last_error();
    EXPECT_FALSE(sam3d_session_reservation_pinned(s)) << "reserve";
    EXPECT_EQ(sam3d_session_staging_in_flight(s), 0u);
    std::memcpy(p[0], src.data(), up_bytes);
    sam3d_upload zu[] = {rig::up(in, p[0], up_bytes)};
    sam3d_download zd[] = {rig::down(out, p[1], down_bytes)};
    sam3d_call zc{zu, 1, nullptr, zd, 1, false};
    ASSERT_EQ(sam3d_session_submit(s, &zc, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(0, std::memcmp(p[1], want.data(), down_bytes));
    cases::expect_fallbacks(r.counters(s), SAM3D_FALLBACK_OVERSIZED, 3);
    EXPECT_EQ(r.counters(s).pinned_batches, 0u) << "zero-copy submit";
}

// A zero-copy call whose uploads come only from kept slots batches only if those slots are
// pinned ring memory (A5): kept slots that fell back (pinned_unavailable, or oversized) make
// the call fall back for the same reason, on the synchronous path, and it stays exact.
TEST_P(PlanBound, KeptSlotsThatFellBackDoNotMakeAPinnedBatch) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    if (r.kind() == Kind::CpuStaged) {
        r.seam().buft_alloc_buffer = probe::alloc_buffer;
    }
    const int64_t n = (17 << 20) / 4;  // two 17 MiB slots: one reservation over the bound
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    const size_t bytes = static_cast<size_t>(n) * 4;
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 2.0f);
    struct Case {
        const char * name;
        sam3d_fallback reason;
    };
    for (const Case & k : {Case{"oversized", SAM3D_FALLBACK_OVERSIZED}, Case{"pinned_unavailable", SAM3D_FALLBACK_PINNED_UNAVAILABLE}}) {
        if (k.reason == SAM3D_FALLBACK_PINNED_UNAVAILABLE && r.kind() != Kind::CpuStaged) {
            continue;  // the failing allocator is a seam entry of the CPU rig
        }
        SCOPED_TRACE(k.name);
        sam3d_session * s = r.session(SAM3D_BATCHING_ON);
        // Call 1 (kept): uploads a and b, downloads them back into its slots.
        std::vector<sam3d_slot_request> req = {{bytes}, {bytes}};
        if (k.reason == SAM3D_FALLBACK_PINNED_UNAVAILABLE) {
            req = {{bytes / 4}, {bytes / 4}};
            probe::get().alloc_mode = 1;
        }
        void * p[2] = {nullptr, nullptr};
        ASSERT_EQ(sam3d_session_reserve(s, req.data(), 2, p), SAM3D_OK) << sam3d_last_error();
        probe::get().alloc_mode = 0;
        ASSERT_FALSE(sam3d_session_reservation_pinned(s));
        const size_t part = req[0].size;
        std::memcpy(p[0], a.data(), part);
        sam3d_upload u1[] = {rig::up(w.a, p[0], part)};
        sam3d_download d1[] = {rig::down(w.a, p[1], part)};
        sam3d_call c1{u1, 1, nullptr, d1, 1, false};
        sam3d_ticket k1 = 0;
        ASSERT_EQ(sam3d_session_submit(s, &c1, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, &k1), SAM3D_OK)
            << sam3d_last_error();
        sam3d_session_reset_counters(s);
        // Call 2: uploads from the kept output slot only, then computes; the ring is free and
        // allocation works now, but the slot is heap memory.
        ggml_backend_tensor_set(w.b, b.data(), 0, bytes);
        sam3d_upload u2[] = {rig::up(w.b, p[1], part)};
        sam3d_call c2{u2, 1, nullptr, nullptr, 0, false};
        ASSERT_EQ(sam3d_session_submit(s, &c2, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK) << sam3d_last_error();
        const sam3d_counters kc = r.counters(s);
        EXPECT_EQ(kc.pinned_batches, 0u) << "a call reading heap slots counted as a pinned batch";
        cases::expect_fallbacks(kc, k.reason, 1);
        EXPECT_EQ(kc.sync_uploads, 1u);
        EXPECT_EQ(kc.async_uploads, 0u);
        std::vector<float> back(part / 4);
        ggml_backend_tensor_get(w.b, back.data(), 0, part);
        EXPECT_EQ(back, std::vector<float>(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(part / 4)));
        // The same call kept: it holds heap slots only, no ring region (A5), so a later small
        // run still stages through a staging buffer of its own and batches.
        sam3d_ticket k2 = 0;
        ASSERT_EQ(sam3d_session_submit(s, &c2, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, &k2), SAM3D_OK)
            << sam3d_last_error();
        EXPECT_EQ(sam3d_session_staging_in_flight(s), 0u);
        std::vector<float> small(64, -1.0f);
        sam3d_upload u3[] = {rig::up(w.a, a.data(), 256)};
        sam3d_download d3[] = {rig::down(w.a, small.data(), 256)};
        const sam3d_call c3{u3, 1, nullptr, d3, 1, false};
        ASSERT_EQ(sam3d_session_run(s, &c3), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(small, std::vector<float>(a.begin(), a.begin() + 64));
        EXPECT_EQ(r.counters(s).pinned_batches, 1u) << "the run fell back while a kept call held only heap slots";
        ASSERT_EQ(sam3d_session_release(s, k2), SAM3D_OK) << sam3d_last_error();
        ASSERT_EQ(sam3d_session_release(s, k1), SAM3D_OK) << sam3d_last_error();
    }
}

namespace {

// A kept zero-copy call (A4) uploading all of `src` into `t` from one slot of its size, reserved
// for it in the ring: the slot (its ticket in *k).
uint8_t * keep_one_slot(sam3d_session * s, ggml_tensor * t, const std::vector<uint8_t> & src, sam3d_ticket * k) {
    const sam3d_slot_request req = {src.size()};
    void * p = nullptr;
    EXPECT_EQ(sam3d_session_reserve(s, &req, 1, &p), SAM3D_OK) << sam3d_last_error();
    EXPECT_TRUE(sam3d_session_reservation_pinned(s));
    std::memcpy(p, src.data(), src.size());
    sam3d_upload u = rig::up(t, p, src.size());
    const sam3d_call c{&u, 1, nullptr, nullptr, 0, false};
    EXPECT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, k), SAM3D_OK)
        << sam3d_last_error();
    return static_cast<uint8_t *>(p);
}

}  // namespace

// A5's placement, ring order: a region goes where the region taken last ended when it fits
// there. Three kept 8 MiB reservations A, B, C with A released before C was reserved: C goes
// after B, not into A's free place at the front, and so a 16 MiB reservation then finds no
// room (8 MiB free at the front, 8 MiB after C) and falls back to heap slots. With no ring
// region held (a kept call of heap slots holds none), a region starts at the front.
TEST_P(PlanBound, RegionsAreTakenInRingOrder) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const size_t mib8 = size_t(8) << 20;
    ggml_tensor * t = r.bytes(static_cast<int64_t>(mib8), "t");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<uint8_t> src = rig::pattern(mib8, 4);
    const auto keep = [&](sam3d_ticket * k) { return keep_one_slot(s, t, src, k); };
    sam3d_ticket ka = 0, kb = 0, kc = 0;
    uint8_t * a = keep(&ka);
    uint8_t * b = keep(&kb);
    EXPECT_EQ(b, a + mib8);
    ASSERT_EQ(sam3d_session_release(s, ka), SAM3D_OK) << sam3d_last_error();
    uint8_t * c = keep(&kc);
    EXPECT_EQ(c, b + mib8) << "the region did not follow the one taken last";
    const sam3d_slot_request big = {2 * mib8};
    void * p = nullptr;
    ASSERT_EQ(sam3d_session_reserve(s, &big, 1, &p), SAM3D_OK) << sam3d_last_error();
    EXPECT_FALSE(sam3d_session_reservation_pinned(s)) << "16 MiB found room between 8 MiB free places";
    EXPECT_EQ(sam3d_session_staging_in_flight(s), 2 * mib8) << "only B and C are held";
    // Kept, those heap slots hold no ring region: with B and C released, nothing of the ring is
    // held, and the next region starts at the front again.
    std::memcpy(p, src.data(), mib8);
    sam3d_upload u = rig::up(t, p, mib8);
    const sam3d_call c_heap{&u, 1, nullptr, nullptr, 0, false};
    sam3d_ticket kh = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c_heap, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, &kh), SAM3D_OK)
        << sam3d_last_error();
    EXPECT_EQ(sam3d_session_release(s, kb), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_release(s, kc), SAM3D_OK) << sam3d_last_error();
    sam3d_ticket kd = 0;
    EXPECT_EQ(keep(&kd), a) << "with no ring region held, a region starts at the front";
    EXPECT_EQ(sam3d_session_release(s, kd), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_release(s, kh), SAM3D_OK) << sam3d_last_error();
}

// Ring order counts every region taken, not only reservations: while a kept 8 MiB region A
// holds the front, a run of 4 MiB stages through the region after it and a queued copying call
// of 4 MiB takes the next, each ending where the next region starts; so a reservation made after
// them starts 16 MiB in, though both of theirs are free again by then.
TEST_P(PlanBound, RunsAndQueuedCallsTakeTheirRegionsInRingOrderToo) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const size_t mib4 = size_t(4) << 20, mib8 = size_t(8) << 20;
    ggml_tensor * t = r.bytes(static_cast<int64_t>(mib8), "t");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<uint8_t> src = rig::pattern(mib8, 6);
    sam3d_ticket ka = 0;
    uint8_t * a = keep_one_slot(s, t, src, &ka);
    ASSERT_NE(ka, 0u);
    sam3d_upload u = rig::up(t, src.data(), mib4);
    const sam3d_call c{&u, 1, nullptr, nullptr, 0, false};
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    sam3d_ticket q = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &q), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(sam3d_session_wait(s, q), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(r.counters(s).pinned_batches, 3u);
    sam3d_ticket kb = 0;
    uint8_t * b = keep_one_slot(s, t, src, &kb);
    EXPECT_EQ(b - a, static_cast<std::ptrdiff_t>(2 * mib8))
        << "the reservation did not start where the queued call's region ended";
    EXPECT_EQ(sam3d_session_release(s, kb), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_release(s, ka), SAM3D_OK) << sam3d_last_error();
}

// A staging buffer that grew to exactly the bound is the ring (A5: the ring is the staging buffer
// at the bound; rule 3: it is reused): a queued call and a reservation after a run of the bound
// take regions of it, with no second allocation.
TEST_P(PlanBound, AStagingBufferGrownToTheBoundIsTheRingWithoutAnotherAllocation) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const size_t half = SAM3D_STAGING_BOUND_BYTES / 2;
    ggml_tensor * in = r.bytes(static_cast<int64_t>(half), "in");
    ggml_tensor * out = r.bytes(static_cast<int64_t>(half), "out");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    ASSERT_EQ(half % std::max<size_t>(sam3d_session_staging_alignment(s), 1), 0u);
    const std::vector<uint8_t> src = rig::pattern(half, 11), want = rig::pattern(half, 12);
    ggml_backend_tensor_set(out, want.data(), 0, half);
    std::vector<uint8_t> dst(half, 0);
    sam3d_upload u[] = {rig::up(in, src.data(), half)};
    sam3d_download d[] = {rig::down(out, dst.data(), half)};
    sam3d_call c{u, 1, nullptr, d, 1, false};
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(dst, want);
    ASSERT_EQ(r.counters(s).staging_bytes, SAM3D_STAGING_BOUND_BYTES);
    ASSERT_EQ(r.counters(s).staging_allocations, 1u);

    std::fill(dst.begin(), dst.end(), 0);
    sam3d_ticket t = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(dst, want);
    sam3d_slot_request req[1] = {{half}};
    void * p[1] = {nullptr};
    ASSERT_EQ(sam3d_session_reserve(s, req, 1, p), SAM3D_OK) << sam3d_last_error();
    EXPECT_TRUE(sam3d_session_reservation_pinned(s));
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.staging_allocations, 1u) << "a staging buffer at the bound was allocated again";
    EXPECT_EQ(k.staging_bytes, SAM3D_STAGING_BOUND_BYTES);
    EXPECT_EQ(k.pinned_batches, 2u);
}

// A ring with room does not fall back (A5): with kept regions [0, m), [m, 2m) and [2m, the bound)
// and the middle one released, a reservation of m bytes takes the free middle (neither the ring
// head nor the front has room) and is pinned.
TEST_P(PlanBound, AFreeRegionBetweenKeptOnesIsFound) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const size_t bound = SAM3D_STAGING_BOUND_BYTES, m = size_t(1) << 20;
    ggml_tensor * t = r.bytes(static_cast<int64_t>(bound), "t");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    ASSERT_EQ(m % std::max<size_t>(sam3d_session_staging_alignment(s), 1), 0u);
    sam3d_ticket k[3] = {0, 0, 0};
    uint8_t * slot[3] = {nullptr, nullptr, nullptr};
    const size_t sizes[3] = {m, m, bound - 2 * m};
    for (int i = 0; i < 3; ++i) {
        sam3d_slot_request req[1] = {{sizes[i]}};
        void * p[1] = {nullptr};
        ASSERT_EQ(sam3d_session_reserve(s, req, 1, p), SAM3D_OK) << sam3d_last_error();
        ASSERT_TRUE(sam3d_session_reservation_pinned(s)) << i;
        slot[i] = static_cast<uint8_t *>(p[0]);
        std::memset(slot[i], 0x50 + i, sizes[i]);
        sam3d_upload u[] = {rig::up(t, p[0], sizes[i])};
        sam3d_call c{u, 1, nullptr, nullptr, 0, false};
        ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, &k[i]), SAM3D_OK)
            << sam3d_last_error();
    }
    ASSERT_EQ(slot[1], slot[0] + m);
    ASSERT_EQ(slot[2], slot[0] + 2 * m);
    ASSERT_EQ(sam3d_session_release(s, k[1]), SAM3D_OK) << sam3d_last_error();
    sam3d_slot_request req[1] = {{m}};
    void * p[1] = {nullptr};
    ASSERT_EQ(sam3d_session_reserve(s, req, 1, p), SAM3D_OK) << sam3d_last_error();
    EXPECT_TRUE(sam3d_session_reservation_pinned(s)) << "the ring had room between two kept regions";
    EXPECT_EQ(static_cast<uint8_t *>(p[0]), slot[1]);
    EXPECT_EQ(r.counters(s).staging_allocations, 1u);
    cases::expect_fallbacks(r.counters(s));
    EXPECT_EQ(slot[0][m - 1], 0x50);
    EXPECT_EQ(slot[2][0], 0x52);
    ASSERT_EQ(sam3d_session_release(s, k[0]), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(sam3d_session_release(s, k[2]), SAM3D_OK) << sam3d_last_error();
}

INSTANTIATE_TEST_SUITE_P(Backends, PlanBound, testing::ValuesIn(rig::staged_kinds()), rig::param_name);

class PlanCounting : public testing::TestWithParam<Kind> {
   protected:
    void SetUp() override { probe::reset(); }
};

// A call without transfers stages nothing: never a fallback and never a pinned batch, on a
// session with a static fallback as on one without, batching on or off (rule 8).
TEST_P(PlanCounting, GraphOnlyCallIsNeverAFallback) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 256;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 2.0f);
    ggml_backend_tensor_set(w.a, a.data(), 0, n * 4);
    ggml_backend_tensor_set(w.b, b.data(), 0, n * 4);
    for (sam3d_batching mode : {SAM3D_BATCHING_ON, SAM3D_BATCHING_OFF}) {
        sam3d_session * s = r.session(mode);
        sam3d_call c{nullptr, 0, w.graph, nullptr, 0, false};
        ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
        sam3d_ticket t = 0;
        ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK) << sam3d_last_error();
        ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
        const sam3d_counters k = r.counters(s);
        EXPECT_EQ(k.calls, 2u);
        cases::expect_fallbacks(k);
        EXPECT_EQ(k.pinned_batches, 0u);
        std::vector<float> out(n);
        ggml_backend_tensor_get(w.out, out.data(), 0, n * 4);
        EXPECT_EQ(out, cases::expected(a, b));
    }
}

// Views created after their source was allocated have data and a view source but no buffer of
// their own: GGML's blocking set/get take them, so batching off (and every synchronous path)
// accepts them; the batched path uses GGML's async set/get, which need tensor->buffer, and
// refuses them naming the fix; after ggml_backend_view_init they batch.
TEST_P(PlanCounting, ViewsWithoutTheirOwnBufferRunWhereGgmlsBlockingCallsTakeThem) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    probe::record_all(r.seam());
    const int64_t n = 1000;
    ggml_tensor * big = r.f32(4 * n, "big");
    r.alloc();
    ggml_tensor * v = ggml_view_1d(r.ctx(), big, n, 1024 * sizeof(float));  // after the allocation
    ggml_set_name(v, "late_view");
    ASSERT_EQ(v->buffer, nullptr);
    ASSERT_NE(v->data, nullptr);
    const std::vector<float> a = rig::ramp(n, 5.0f);
    auto roundtrip = [&](sam3d_session * s, bool synchronous) {
        std::vector<float> back(n, -1.0f);
        sam3d_upload u[] = {rig::up(v, a.data(), n * 4)};
        sam3d_download d[] = {rig::down(v, back.data(), n * 4)};
        sam3d_call c{u, 1, nullptr, d, 1, synchronous};
        const sam3d_status st = sam3d_session_run(s, &c);
        if (st == SAM3D_OK) {
            EXPECT_EQ(back, a);
        } else {
            EXPECT_EQ(back, std::vector<float>(n, -1.0f)) << "a refused call wrote its dst";
        }
        return st;
    };
    sam3d_session * off = r.session(SAM3D_BATCHING_OFF);
    EXPECT_EQ(roundtrip(off, false), SAM3D_OK) << sam3d_last_error();
    std::vector<float> whole(4 * n);
    ggml_backend_tensor_get(big, whole.data(), 0, 4 * n * 4);
    EXPECT_EQ(std::vector<float>(whole.begin() + 1024, whole.begin() + 1024 + n), a) << "the view's bytes of its source";
    sam3d_session * on = r.session(SAM3D_BATCHING_ON);
    EXPECT_EQ(roundtrip(on, true), SAM3D_OK) << "synchronous call: " << sam3d_last_error();
    probe::reset();
    const sam3d_status st = roundtrip(on, false);
    if (staged(on)) {
        EXPECT_EQ(st, SAM3D_ERR_UNALLOCATED_TENSOR);
        EXPECT_CONTAINS(sam3d_last_error(), "uploads[0].tensor ('late_view') is a view without a buffer of its own");
        EXPECT_CONTAINS(sam3d_last_error(), "ggml_backend_view_init");
        EXPECT_TRUE(probe::events().empty()) << "a refused call reached the seam";
        EXPECT_EQ(r.counters(on).rejected_calls, 1u);
        EXPECT_EQ(r.counters(on).calls, 1u);
        ASSERT_EQ(ggml_backend_view_init(v), GGML_STATUS_SUCCESS);
        EXPECT_EQ(roundtrip(on, false), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(r.counters(on).pinned_batches, 1u);
        // The refusal does not depend on what the ring holds: with a reservation filling it, a
        // call of allocated tensors takes the synchronous path (oversized, no room), and one
        // naming a view without its own buffer is still refused.
        sam3d_slot_request whole_ring[] = {{SAM3D_STAGING_BOUND_BYTES}};
        void * slot[] = {nullptr};
        ASSERT_EQ(sam3d_session_reserve(on, whole_ring, 1, slot), SAM3D_OK) << sam3d_last_error();
        ASSERT_TRUE(sam3d_session_reservation_pinned(on));
        EXPECT_EQ(roundtrip(on, false), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(r.counters(on).fallbacks[SAM3D_FALLBACK_OVERSIZED], 1u) << "the ring has no room";
        v = ggml_view_1d(r.ctx(), big, n, 2048 * sizeof(float));
        ggml_set_name(v, "late_view_2");
        EXPECT_EQ(roundtrip(on, false), SAM3D_ERR_UNALLOCATED_TENSOR) << "a ring without room refused nothing";
        EXPECT_CONTAINS(sam3d_last_error(), "uploads[0].tensor ('late_view_2') is a view without a buffer of its own");
        EXPECT_EQ(r.counters(on).rejected_calls, 2u);
    } else {
        EXPECT_EQ(st, SAM3D_OK) << "the synchronous path takes the view: " << sam3d_last_error();
    }
}

// Rule 1's one path-dependent refusal, for every call that would batch: a download naming a view
// without its own buffer is refused like an upload, by sam3d_session_run, a queued copying
// submit and zero-copy submits on ring slots (queued or not), naming the descriptor and the
// fix, writing no dst and no slot, zeroing the ticket. A call over the bound takes such a view
// (the synchronous path, oversized), and so does a zero-copy call on the heap slots a
// reservation got from a ring without room (its path is its slots'), as the static fallbacks
// do (the cpu kind: every call is taken).
TEST_P(PlanCounting, EveryCallThatWouldBatchRefusesAViewWithoutItsOwnBufferAndOneOverTheBoundTakesIt) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const size_t over = SAM3D_STAGING_BOUND_BYTES + 4096;  // over the bound at every alignment
    ggml_tensor * big = r.bytes(static_cast<int64_t>(over + 4096), "big");
    ggml_tensor * other = r.bytes(4096, "other");
    r.alloc();
    ggml_tensor * small = ggml_view_1d(r.ctx(), big, 4096, 8192);  // after the allocation
    ggml_set_name(small, "late_small");
    ggml_tensor * whole = ggml_view_1d(r.ctx(), big, static_cast<int64_t>(over), 0);
    ggml_set_name(whole, "late_whole");
    ASSERT_EQ(small->buffer, nullptr);
    ASSERT_EQ(whole->buffer, nullptr);
    const std::vector<uint8_t> in = rig::pattern(4096, 11), view_bytes = rig::pattern(4096, 12);
    ggml_backend_tensor_set(other, in.data(), 0, 4096);
    ggml_backend_tensor_set(big, view_bytes.data(), 8192, 4096);
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const bool refuses = staged(s);
    const char * const named = "downloads[1].tensor ('late_small') is a view without a buffer of its own";
    uint64_t refused = 0;
    // The status of `c` through `submit` (nullptr: sam3d_session_run), with what a refusal or an
    // acceptance shows: downloads[0] from `other`, downloads[1] from the view, into `dst0`/`dst1`.
    const auto check = [&](const char * what, const sam3d_call & c, unsigned flags, bool submit, uint8_t * dst0,
                            uint8_t * dst1) {
        SCOPED_TRACE(what);
        std::fill(dst0, dst0 + 4096, uint8_t{0xEE});
        std::fill(dst1, dst1 + 4096, uint8_t{0xEE});
        sam3d_ticket t = 12345;
        const sam3d_status st = submit ? sam3d_session_submit(s, &c, flags, &t) : sam3d_session_run(s, &c);
        if (refuses) {
            refused += 1;
            EXPECT_EQ(st, SAM3D_ERR_UNALLOCATED_TENSOR);
            EXPECT_CONTAINS(sam3d_last_error(), named);
            EXPECT_CONTAINS(sam3d_last_error(), "call ggml_backend_view_init on it, or set call.synchronous");
            EXPECT_EQ(std::vector<uint8_t>(dst0, dst0 + 4096), std::vector<uint8_t>(4096, 0xEE)) << "a refused call wrote";
            EXPECT_EQ(std::vector<uint8_t>(dst1, dst1 + 4096), std::vector<uint8_t>(4096, 0xEE)) << "a refused call wrote";
            if (submit) {
                EXPECT_EQ(t, 0u) << "a refused submit leaves no ticket";
            }
            EXPECT_EQ(sam3d_session_outstanding(s), 0u);
        } else {
            ASSERT_EQ(st, SAM3D_OK) << sam3d_last_error();
            if (submit && (flags & SAM3D_SUBMIT_QUEUED)) {
                ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
            }
            EXPECT_EQ(std::vector<uint8_t>(dst0, dst0 + 4096), in);
            EXPECT_EQ(std::vector<uint8_t>(dst1, dst1 + 4096), view_bytes) << "the view's bytes of its source";
        }
        EXPECT_EQ(r.counters(s).rejected_calls, refused);
    };
    std::vector<uint8_t> host0(4096), host1(4096);
    sam3d_download d[] = {rig::down(other, host0.data(), 4096), rig::down(small, host1.data(), 4096)};
    const sam3d_call copying{nullptr, 0, nullptr, d, 2, false};
    check("run", copying, 0, false, host0.data(), host1.data());
    check("queued copying submit", copying, SAM3D_SUBMIT_QUEUED, true, host0.data(), host1.data());
    for (const unsigned flags : {0u, SAM3D_SUBMIT_QUEUED}) {
        sam3d_slot_request req[2] = {{4096}, {4096}};
        void * p[2] = {nullptr, nullptr};
        ASSERT_EQ(sam3d_session_reserve(s, req, 2, p), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(sam3d_session_reservation_pinned(s), refuses);
        auto * slot0 = static_cast<uint8_t *>(p[0]);
        auto * slot1 = static_cast<uint8_t *>(p[1]);
        sam3d_download z[] = {rig::down(other, slot0, 4096), rig::down(small, slot1, 4096)};
        const sam3d_call zero_copy{nullptr, 0, nullptr, z, 2, false};
        check(flags ? "queued zero-copy submit" : "zero-copy submit", zero_copy, SAM3D_SUBMIT_ZERO_COPY | flags, true,
              slot0, slot1);
    }
    // Heap slots where the ring has no room: a queued zero-copy call holds all of it.
    sam3d_slot_request ring[] = {{SAM3D_STAGING_BOUND_BYTES}};
    void * held = nullptr;
    ASSERT_EQ(sam3d_session_reserve(s, ring, 1, &held), SAM3D_OK) << sam3d_last_error();
    sam3d_download into_held[] = {rig::down(other, held, 4096)};
    const sam3d_call holder{nullptr, 0, nullptr, into_held, 1, false};
    sam3d_ticket h = 0;
    ASSERT_EQ(sam3d_session_submit(s, &holder, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &h), SAM3D_OK)
        << sam3d_last_error();
    sam3d_slot_request req[2] = {{4096}, {4096}};
    void * p[2] = {nullptr, nullptr};
    ASSERT_EQ(sam3d_session_reserve(s, req, 2, p), SAM3D_OK) << sam3d_last_error();
    EXPECT_FALSE(sam3d_session_reservation_pinned(s)) << "the ring has no room";
    auto * heap0 = static_cast<uint8_t *>(p[0]);
    auto * heap1 = static_cast<uint8_t *>(p[1]);
    sam3d_download hz[] = {rig::down(other, heap0, 4096), rig::down(small, heap1, 4096)};
    const sam3d_call heap_call{nullptr, 0, nullptr, hz, 2, false};
    EXPECT_EQ(sam3d_session_outstanding(s), 1u);
    std::fill(heap0, heap0 + 4096, uint8_t{0xEE});
    std::fill(heap1, heap1 + 4096, uint8_t{0xEE});
    const sam3d_counters heap_before = r.counters(s);
    ASSERT_EQ(sam3d_session_submit(s, &heap_call, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK)
        << "a zero-copy call on heap slots takes the view: " << sam3d_last_error();
    EXPECT_EQ(std::vector<uint8_t>(heap0, heap0 + 4096), in);
    EXPECT_EQ(std::vector<uint8_t>(heap1, heap1 + 4096), view_bytes) << "the view's bytes of its source";
    const sam3d_counters heap_after = r.counters(s);
    EXPECT_EQ(heap_after.rejected_calls, refused);
    EXPECT_EQ(heap_after.sync_downloads - heap_before.sync_downloads, 2u) << "the synchronous path";
    ASSERT_EQ(sam3d_session_wait(s, h), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(0, std::memcmp(held, in.data(), 4096));

    // Over the bound: the synchronous path takes the view, on every kind.
    const std::vector<uint8_t> large = rig::pattern(over, 13);
    sam3d_upload u[] = {rig::up(whole, large.data(), over)};
    const sam3d_call over_bound{u, 1, nullptr, nullptr, 0, false};
    const sam3d_counters before = r.counters(s);
    ASSERT_EQ(sam3d_session_run(s, &over_bound), SAM3D_OK) << "a call over the bound takes the view: " << sam3d_last_error();
    std::vector<uint8_t> back(over);
    ggml_backend_tensor_get(big, back.data(), 0, over);
    EXPECT_TRUE(back == large) << "the view's bytes of its source";
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.rejected_calls, refused);
    EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_OVERSIZED] - before.fallbacks[SAM3D_FALLBACK_OVERSIZED], refuses ? 1u : 0u);
    EXPECT_EQ(k.sync_uploads - before.sync_uploads, 1u);
}

INSTANTIATE_TEST_SUITE_P(Backends, PlanCounting, testing::ValuesIn(rig::kinds()), rig::param_name);

namespace {
void set_nothing(ggml_tensor *, const void * data, size_t, size_t) { probe::Enter e("set", data); }
void get_nothing(const ggml_tensor *, void * data, size_t, size_t) { probe::Enter e("get", data); }
}  // namespace

// Aligned sizes whose sum does not fit in size_t are oversized (rule 3), not a small sum: a
// tensor that claims 2^63 bytes (only its metadata; the seam's blocking set/get do nothing) with
// two uploads and two downloads of 2^62 bytes each; then two uploads of 2^63 bytes into two such
// tensors (the uploads alone overflow).
TEST(PlanOverflow, DescriptorSizesThatOverflowAreOversized) {
    probe::reset();
    Rig r(Kind::CpuStaged);
    probe::record_all(r.seam());
    r.seam().tensor_set = set_nothing;
    r.seam().tensor_get = get_nothing;
    r.bytes(64, "real");
    r.alloc();
    ggml_init_params ip = {ggml_tensor_overhead() * 3, nullptr, true};
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * huge = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, int64_t(1) << 61);
    ggml_set_name(huge, "huge");
    ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 64);
    huge->buffer = buf;
    huge->data = ggml_backend_buffer_get_base(buf);
    ASSERT_EQ(ggml_nbytes(huge), size_t(1) << 63);
    const size_t q = size_t(1) << 62;
    // Host addresses only (never dereferenced: the seam's set/get do nothing), as integers so no
    // pointer arithmetic leaves an object.
    static uint8_t host[64];
    const uintptr_t at = reinterpret_cast<uintptr_t>(host);
    void * base = host;
    void * base_q = reinterpret_cast<void *>(at + q);
    sam3d_upload u[] = {rig::up(huge, base, q, 0), rig::up(huge, base, q, q)};
    sam3d_download d[] = {rig::down(huge, base, q, 0), rig::down(huge, base_q, q, q)};
    sam3d_call c{u, 2, nullptr, d, 2, false};
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    const sam3d_counters k = r.counters(s);
    cases::expect_fallbacks(k, SAM3D_FALLBACK_OVERSIZED, 1);
    EXPECT_EQ(k.pinned_batches, 0u);
    EXPECT_EQ(k.sync_uploads, 2u);
    EXPECT_EQ(k.staging_allocations, 0u);
    const std::vector<std::string> want = {"set", "set", "get", "get"};
    EXPECT_EQ(probe::names(), want);
    // Uploads alone that overflow: two tensors of 2^63 bytes in two buffers, one upload each.
    ggml_tensor * huge2 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, int64_t(1) << 61);
    ggml_set_name(huge2, "huge2");
    ggml_backend_buffer_t buf2 = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 64);
    huge2->buffer = buf2;
    huge2->data = ggml_backend_buffer_get_base(buf2);
    sam3d_upload u2[] = {rig::up(huge, base, 2 * q), rig::up(huge2, base, 2 * q)};
    sam3d_call c2{u2, 2, nullptr, nullptr, 0, false};
    ASSERT_EQ(sam3d_session_run(s, &c2), SAM3D_OK) << sam3d_last_error();
    cases::expect_fallbacks(r.counters(s), SAM3D_FALLBACK_OVERSIZED, 2);
    EXPECT_EQ(r.counters(s).pinned_batches, 0u);
    ggml_backend_buffer_free(buf2);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
}

namespace {
size_t alignment_1(ggml_backend_buffer_type_t) { return 1; }
size_t alignment_2(ggml_backend_buffer_type_t) { return 2; }

// A batching session whose host buffer type aligns to `alignment` (through the seam), with an
// upload tensor `in` and a download tensor `out` of the given bytes.
struct BoundRig {
    Rig r{Kind::CpuStaged};
    ggml_tensor * in = nullptr;
    ggml_tensor * out = nullptr;
    sam3d_session * s = nullptr;
    BoundRig(size_t (*alignment)(ggml_backend_buffer_type_t), size_t in_bytes, size_t out_bytes) {
        probe::reset();
        r.seam().buft_get_alignment = alignment;
        in = r.bytes(static_cast<int64_t>(in_bytes), "in");
        out = r.bytes(static_cast<int64_t>(out_bytes), "out");
        r.alloc();
        s = r.session(SAM3D_BATCHING_ON);
    }
    // Whether a reservation of two slots of `a` and `b` bytes is pinned staging.
    bool reservation_pinned(size_t a, size_t b) {
        const sam3d_slot_request req[2] = {{a}, {b}};
        void * p[2] = {nullptr, nullptr};
        EXPECT_EQ(sam3d_session_reserve(s, req, 2, p), SAM3D_OK) << sam3d_last_error();
        return sam3d_session_reservation_pinned(s);
    }
};
}  // namespace

// A host buffer type may align to one byte (GGML asks no more of one): the bound is then exact
// to the byte (rule 3: a call batches only if its laid-out bytes are at most the bound). Exactly
// the bound batches, one byte more falls back as oversized, on a run and a reservation alike.
TEST(PlanBoundByte, WithAnAlignmentOfOneByteOneByteOverTheBoundFallsBack) {
    const size_t half = SAM3D_STAGING_BOUND_BYTES / 2;
    BoundRig b(alignment_1, half + 1, half);
    ASSERT_EQ(sam3d_session_staging_alignment(b.s), 1u);
    const std::vector<uint8_t> src = rig::pattern(half + 1, 5), want = rig::pattern(half, 6);
    ggml_backend_tensor_set(b.out, want.data(), 0, half);
    std::vector<uint8_t> dst(half, 0);
    sam3d_download d[] = {rig::down(b.out, dst.data(), half)};

    sam3d_upload exact[] = {rig::up(b.in, src.data(), half)};  // half + half: the bound
    sam3d_call c1{exact, 1, nullptr, d, 1, false};
    ASSERT_EQ(sam3d_session_run(b.s, &c1), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(dst, want);
    EXPECT_EQ(b.r.counters(b.s).pinned_batches, 1u) << "exactly the bound batches";
    cases::expect_fallbacks(b.r.counters(b.s));

    std::fill(dst.begin(), dst.end(), 0);
    sam3d_upload over[] = {rig::up(b.in, src.data(), half + 1)};  // one byte over
    sam3d_call c2{over, 1, nullptr, d, 1, false};
    ASSERT_EQ(sam3d_session_run(b.s, &c2), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(dst, want);
    EXPECT_EQ(b.r.counters(b.s).pinned_batches, 1u) << "one byte over the bound batched";
    cases::expect_fallbacks(b.r.counters(b.s), SAM3D_FALLBACK_OVERSIZED, 1);
    std::vector<uint8_t> back(half + 1, 0);
    ggml_backend_tensor_get(b.in, back.data(), 0, half + 1);
    EXPECT_EQ(back, src);

    EXPECT_TRUE(b.reservation_pinned(half, half)) << "a reservation of exactly the bound";
    EXPECT_FALSE(b.reservation_pinned(half + 1, half)) << "a reservation one byte over the bound";
}

// With a two-byte alignment every descriptor's laid-out bytes round up to an even count (rule 3
// counts the aligned bytes): an odd upload and an odd download whose raw bytes are exactly the
// bound lay out 2 bytes over it and fall back as oversized, on a run and a reservation alike;
// even ones of the same total batch.
TEST(PlanBoundByte, WithAnAlignmentOfTwoBytesOddDescriptorsRoundUpPastTheBound) {
    const size_t half = SAM3D_STAGING_BOUND_BYTES / 2;
    BoundRig b(alignment_2, half, half + 1);
    ASSERT_EQ(sam3d_session_staging_alignment(b.s), 2u);
    const std::vector<uint8_t> src = rig::pattern(half, 7);
    std::vector<uint8_t> dst(half + 1, 0);

    sam3d_upload even_up[] = {rig::up(b.in, src.data(), half)};
    sam3d_download even_down[] = {rig::down(b.out, dst.data(), half)};
    sam3d_call even{even_up, 1, nullptr, even_down, 1, false};
    ASSERT_EQ(sam3d_session_run(b.s, &even), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(b.r.counters(b.s).pinned_batches, 1u) << "half + half, even: exactly the bound";
    cases::expect_fallbacks(b.r.counters(b.s));

    sam3d_upload odd_up[] = {rig::up(b.in, src.data(), half - 1)};
    sam3d_download odd_down[] = {rig::down(b.out, dst.data(), half + 1)};
    sam3d_call odd{odd_up, 1, nullptr, odd_down, 1, false};
    ASSERT_EQ(sam3d_session_run(b.s, &odd), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(b.r.counters(b.s).pinned_batches, 1u) << "(half - 1) + (half + 1) lays out as half + half + 2";
    cases::expect_fallbacks(b.r.counters(b.s), SAM3D_FALLBACK_OVERSIZED, 1);

    EXPECT_TRUE(b.reservation_pinned(half, half)) << "two even slots of exactly the bound";
    EXPECT_FALSE(b.reservation_pinned(half - 1, half + 1)) << "two odd slots of the same raw bytes, 2 over once aligned";
}

// With a one-byte alignment a call one byte larger than the staging buffer must grow it (rule
// 3: the staging holds what the call lays out, what the session holds is what it asked of GGML):
// a run of n bytes, then one of n + 1 bytes, each exact, the second with a larger allocation.
TEST(PlanBoundByte, AStagingBufferOneByteShortGrows) {
    probe::reset();
    Rig r(Kind::CpuStaged);
    r.seam().buft_get_alignment = alignment_1;
    const size_t n = 4097;
    ggml_tensor * t = r.bytes(static_cast<int64_t>(n + 1), "t");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<uint8_t> src = rig::pattern(n + 1, 9);
    for (size_t bytes : {n, n + 1}) {
        SCOPED_TRACE(bytes);
        std::vector<uint8_t> dst(bytes, 0);
        sam3d_upload u[] = {rig::up(t, src.data(), bytes)};
        sam3d_call up_call{u, 1, nullptr, nullptr, 0, false};
        ASSERT_EQ(sam3d_session_run(s, &up_call), SAM3D_OK) << sam3d_last_error();
        sam3d_download d[] = {rig::down(t, dst.data(), bytes)};
        sam3d_call down_call{nullptr, 0, nullptr, d, 1, false};
        ASSERT_EQ(sam3d_session_run(s, &down_call), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(0, std::memcmp(dst.data(), src.data(), bytes));
        const sam3d_counters k = r.counters(s);
        EXPECT_GE(k.staging_bytes, bytes) << "a call staged through a buffer smaller than its bytes";
        EXPECT_EQ(k.pinned_batches, bytes == n ? 2u : 4u);
    }
    EXPECT_EQ(r.counters(s).staging_allocations, 2u) << "the first call's buffer, then one grown for one byte more";
}

// A staging buffer one byte short of the bound (a run of the bound less one byte, alignment 1)
// is not the ring: a reservation of the bound reallocates it at the bound (A5) and is pinned.
TEST(PlanBoundByte, AStagingBufferOneByteShortOfTheBoundIsReallocatedAsTheRing) {
    probe::reset();
    Rig r(Kind::CpuStaged);
    r.seam().buft_get_alignment = alignment_1;
    const size_t half = SAM3D_STAGING_BOUND_BYTES / 2;
    ggml_tensor * in = r.bytes(static_cast<int64_t>(half), "in");
    ggml_tensor * out = r.bytes(static_cast<int64_t>(half), "out");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<uint8_t> src = rig::pattern(half, 13), want = rig::pattern(half, 14);
    ggml_backend_tensor_set(out, want.data(), 0, half);
    std::vector<uint8_t> dst(half - 1, 0);
    sam3d_upload u[] = {rig::up(in, src.data(), half)};
    sam3d_download d[] = {rig::down(out, dst.data(), half - 1)};
    sam3d_call c{u, 1, nullptr, d, 1, false};
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(0, std::memcmp(dst.data(), want.data(), half - 1));
    ASSERT_EQ(r.counters(s).staging_bytes, SAM3D_STAGING_BOUND_BYTES - 1);

    sam3d_slot_request req[2] = {{half}, {half}};
    void * p[2] = {nullptr, nullptr};
    ASSERT_EQ(sam3d_session_reserve(s, req, 2, p), SAM3D_OK) << sam3d_last_error();
    EXPECT_TRUE(sam3d_session_reservation_pinned(s)) << "a reservation of the bound fell back";
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.staging_bytes, SAM3D_STAGING_BOUND_BYTES);
    EXPECT_EQ(k.staging_allocations, 2u);
    cases::expect_fallbacks(k);
}

// With a one-byte alignment, regions of the ring may meet but never overlap, not by one byte
// (A5: a region is handed out again only once released): a kept region [0, 1) and a new one
// fitted after it; a kept region [5, the bound) leaves no room for 6 bytes (heap slots).
TEST(PlanBoundByte, RingRegionsNeverOverlapAKeptRegionByOneByte) {
    probe::reset();
    Rig r(Kind::CpuStaged);
    r.seam().buft_get_alignment = alignment_1;
    const size_t bound = SAM3D_STAGING_BOUND_BYTES;
    ggml_tensor * t = r.bytes(static_cast<int64_t>(bound), "t");
    r.alloc();
    // A kept zero-copy call reading a reservation of `size` bytes, each `fill`: its slot.
    const auto keep = [&](sam3d_session * s, size_t size, uint8_t fill, sam3d_ticket * ticket) {
        sam3d_slot_request req[1] = {{size}};
        void * p[1] = {nullptr};
        EXPECT_EQ(sam3d_session_reserve(s, req, 1, p), SAM3D_OK) << sam3d_last_error();
        EXPECT_TRUE(sam3d_session_reservation_pinned(s)) << size;
        std::memset(p[0], fill, size);
        sam3d_upload u[] = {rig::up(t, p[0], size)};
        sam3d_call c{u, 1, nullptr, nullptr, 0, false};
        EXPECT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, ticket), SAM3D_OK)
            << sam3d_last_error();
        return static_cast<uint8_t *>(p[0]);
    };
    {
        sam3d_session * s = r.session(SAM3D_BATCHING_ON);
        sam3d_ticket front = 0, rest = 0;
        const uint8_t * one = keep(s, 1, 0x11, &front);
        keep(s, bound - 1, 0x22, &rest);
        ASSERT_EQ(sam3d_session_release(s, rest), SAM3D_OK) << sam3d_last_error();
        sam3d_slot_request req[1] = {{8}};
        void * p[1] = {nullptr};
        ASSERT_EQ(sam3d_session_reserve(s, req, 1, p), SAM3D_OK) << sam3d_last_error();
        EXPECT_TRUE(sam3d_session_reservation_pinned(s)) << "there is room after the kept byte";
        EXPECT_EQ(static_cast<uint8_t *>(p[0]), one + 1) << "the new region starts where the kept one ends";
        std::memset(p[0], 0xee, 8);
        EXPECT_EQ(one[0], 0x11) << "a new region overlaps the kept one";
        ASSERT_EQ(sam3d_session_release(s, front), SAM3D_OK) << sam3d_last_error();
    }
    {
        sam3d_session * s = r.session(SAM3D_BATCHING_ON);
        sam3d_ticket front = 0, rest = 0;
        keep(s, 5, 0x33, &front);
        const uint8_t * tail = keep(s, bound - 5, 0x44, &rest);
        ASSERT_EQ(sam3d_session_release(s, front), SAM3D_OK) << sam3d_last_error();
        sam3d_slot_request req[1] = {{6}};
        void * p[1] = {nullptr};
        ASSERT_EQ(sam3d_session_reserve(s, req, 1, p), SAM3D_OK) << sam3d_last_error();
        EXPECT_FALSE(sam3d_session_reservation_pinned(s)) << "6 bytes fitted before a kept region 5 bytes in";
        std::memset(p[0], 0xee, 6);
        EXPECT_EQ(tail[0], 0x44) << "a new region overlaps the kept one";
        EXPECT_EQ(r.counters(s).staging_allocations, 1u);
        ASSERT_EQ(sam3d_session_release(s, rest), SAM3D_OK) << sam3d_last_error();
    }
}

// With a one-byte alignment a region never passes the ring's end, not by one byte (A5: regions
// of the staging buffer): a kept region [0, the bound - 5) leaves 5 bytes at the head, so a
// reservation of 6 bytes has no room and gets heap slots.
TEST(PlanBoundByte, ARegionNeverPassesTheEndOfTheRingByOneByte) {
    probe::reset();
    Rig r(Kind::CpuStaged);
    r.seam().buft_get_alignment = alignment_1;
    const size_t bound = SAM3D_STAGING_BOUND_BYTES;
    ggml_tensor * t = r.bytes(static_cast<int64_t>(bound), "t");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    sam3d_slot_request big[1] = {{bound - 5}};
    void * p[1] = {nullptr};
    ASSERT_EQ(sam3d_session_reserve(s, big, 1, p), SAM3D_OK) << sam3d_last_error();
    ASSERT_TRUE(sam3d_session_reservation_pinned(s));
    std::memset(p[0], 0x66, bound - 5);
    sam3d_upload u[] = {rig::up(t, p[0], bound - 5)};
    sam3d_call c{u, 1, nullptr, nullptr, 0, false};
    sam3d_ticket kept = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, &kept), SAM3D_OK)
        << sam3d_last_error();
    for (size_t n : {size_t(5), size_t(6)}) {
        sam3d_slot_request req[1] = {{n}};
        ASSERT_EQ(sam3d_session_reserve(s, req, 1, p), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(sam3d_session_reservation_pinned(s), n == 5) << n << " bytes at the ring's last 5";
    }
    ASSERT_EQ(sam3d_session_release(s, kept), SAM3D_OK) << sam3d_last_error();
}
