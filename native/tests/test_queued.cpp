// Zero-copy staging and queued calls (docs/contract.md A1-A7): exactness and
// counters, no staging copies, slot lifetime, queued == synchronous, errors at the wait with
// outstanding work completed, the in-flight bound (zero-copy and copying), submissions from two
// threads, and slots of call n+1 written while call n's download is still in flight.
#include <algorithm>
#include <functional>

#include "cases.h"
#include "deferred.h"
#include "probe.h"
#include "rig.h"

using cases::reserve_scale_add;
using cases::Slots;
using cases::staged;
using cases::submit_scale_add;
using rig::Kind;
using rig::Rig;

namespace {

size_t align_up(size_t n, size_t a) { return a <= 1 ? n : (n + a - 1) / a * a; }

}  // namespace

class Queued : public testing::TestWithParam<Kind> {
   protected:
    void SetUp() override {
        probe::reset();
        deferred::reset();
    }
};

// Zero-copy: exact, byte-identical to sam3d_session_run, counted like it, and no staging copy.
TEST_P(Queued, ZeroCopyIsExactCountedAndCopiesNothing) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 1001;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 7.0f);
    for (sam3d_batching mode : {SAM3D_BATCHING_ON, SAM3D_BATCHING_OFF}) {
        SCOPED_TRACE(mode == SAM3D_BATCHING_ON ? "batching on" : "batching off");
        sam3d_session * ref = r.session(mode);
        std::vector<float> want(n);
        ASSERT_EQ(cases::run(ref, w, a.data(), b.data(), want.data()), SAM3D_OK) << sam3d_last_error();
        ASSERT_EQ(want, cases::expected(a, b));

        sam3d_session * s = r.session(mode);
        Slots sl = reserve_scale_add(s, w);
        ASSERT_NE(sl.a, nullptr);
        const bool pinned = sam3d_session_reservation_pinned(s);
        EXPECT_EQ(pinned, staged(s));
        for (float * p : {sl.a, sl.b, sl.out}) {
            EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % std::max<size_t>(sam3d_session_staging_alignment(s), 1), 0u);
        }
        std::memcpy(sl.a, a.data(), n * 4);
        std::memcpy(sl.b, b.data(), n * 4);
        ASSERT_EQ(submit_scale_add(s, w, sl, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(0, std::memcmp(sl.out, want.data(), n * 4));

        const sam3d_counters k = r.counters(s), kr = r.counters(ref);
        EXPECT_EQ(k.copy_ns, 0u) << "a zero-copy call copied through staging";
        EXPECT_EQ(k.calls, 1u);
        EXPECT_EQ(k.bytes_uploaded, kr.bytes_uploaded);
        EXPECT_EQ(k.bytes_downloaded, kr.bytes_downloaded);
        EXPECT_EQ(k.async_uploads, kr.async_uploads);
        EXPECT_EQ(k.async_downloads, kr.async_downloads);
        EXPECT_EQ(k.sync_uploads, kr.sync_uploads);
        EXPECT_EQ(k.sync_downloads, kr.sync_downloads);
        EXPECT_EQ(k.pinned_batches, kr.pinned_batches);
        for (int f = 0; f < SAM3D_FALLBACK_COUNT; ++f) {
            EXPECT_EQ(k.fallbacks[f], kr.fallbacks[f]) << sam3d_fallback_name(static_cast<sam3d_fallback>(f));
        }
        if (mode == SAM3D_BATCHING_ON && staged(s)) {
            EXPECT_EQ(k.pinned_batches, 1u);
            EXPECT_EQ(k.async_uploads, 2u);
            EXPECT_EQ(k.staging_bytes, SAM3D_STAGING_BOUND_BYTES);  // the ring, at the bound
        } else if (mode == SAM3D_BATCHING_ON) {
            EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_NO_ASYNC_CAPS], 1u);
            EXPECT_EQ(k.sync_uploads, 2u);
        } else {
            EXPECT_EQ(k.sync_uploads, 2u);
            EXPECT_EQ(k.pinned_batches, 0u);
        }
    }
}

// Descriptors that are not distinct slots of the current reservation are rejected; nothing runs.
TEST_P(Queued, ZeroCopyRejectsPointersThatAreNotSlots) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 64;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    std::vector<float> own(n, 1.0f);
    Slots sl = reserve_scale_add(s, w);
    Slots bad = sl;
    bad.b = own.data();
    EXPECT_EQ(submit_scale_add(s, w, bad, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "uploads[1].src is not a slot");
    bad = sl;
    bad.b = sl.a;
    EXPECT_EQ(submit_scale_add(s, w, bad, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "a second time");
    sam3d_call c{nullptr, 0, nullptr, nullptr, 0, false};
    EXPECT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, nullptr), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(sam3d_session_wait(s, 12345), SAM3D_ERR_INVALID_ARGUMENT);
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.rejected_calls, 2u);
    EXPECT_EQ(k.calls, 0u);
    // The reservation survives a rejected submit.
    std::memcpy(sl.a, rig::ramp(n, 1.0f).data(), n * 4);
    std::memcpy(sl.b, rig::ramp(n, 2.0f).data(), n * 4);
    ASSERT_EQ(submit_scale_add(s, w, sl, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK) << sam3d_last_error();
    std::vector<float> got(sl.out, sl.out + n);
    EXPECT_EQ(got, cases::expected(rig::ramp(n, 1.0f), rig::ramp(n, 2.0f)));
}

// A descriptor larger than its slot is rejected, naming the field and both sizes; nothing runs
// and nothing is written to the output slot.
TEST_P(Queued, ZeroCopyRejectsADescriptorLargerThanItsSlot) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 64;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const size_t bytes = n * 4;
    sam3d_slot_request req[3] = {{bytes}, {bytes / 2}, {bytes}};
    void * p[3] = {nullptr, nullptr, nullptr};
    ASSERT_EQ(sam3d_session_reserve(s, req, 3, p), SAM3D_OK) << sam3d_last_error();
    const Slots sl{static_cast<float *>(p[0]), static_cast<float *>(p[1]), static_cast<float *>(p[2])};
    std::fill(sl.out, sl.out + n, -1.0f);
    EXPECT_EQ(submit_scale_add(s, w, sl, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "uploads[1].size 256 exceeds the 128 bytes of slot 1");
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.rejected_calls, 1u);
    EXPECT_EQ(k.calls, 0u);
    EXPECT_EQ(std::vector<float>(sl.out, sl.out + n), std::vector<float>(n, -1.0f));
    // One byte over its slot is over it (the generated campaign's boundary): a slot of 255 bytes.
    sam3d_slot_request short_by_one[3] = {{bytes}, {bytes - 1}, {bytes}};
    ASSERT_EQ(sam3d_session_reserve(s, short_by_one, 3, p), SAM3D_OK) << sam3d_last_error();
    const Slots sl2{static_cast<float *>(p[0]), static_cast<float *>(p[1]), static_cast<float *>(p[2])};
    EXPECT_EQ(submit_scale_add(s, w, sl2, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "uploads[1].size 256 exceeds the 255 bytes of slot 1");
}

// Output slots stay valid across other calls until the next reservation, which releases them.
TEST_P(Queued, OutputSlotsStayValidUntilTheNextReservation) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 999;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(n, 3.0f), b = rig::ramp(n, 4.0f);
    Slots sl = reserve_scale_add(s, w);
    std::memcpy(sl.a, a.data(), n * 4);
    std::memcpy(sl.b, b.data(), n * 4);
    ASSERT_EQ(submit_scale_add(s, w, sl, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK) << sam3d_last_error();
    const std::vector<float> want = cases::expected(a, b);
    // Copying calls, synchronous and queued, in between: they stage elsewhere.
    for (int i = 0; i < 3; ++i) {
        const std::vector<float> a2 = rig::ramp(n, 50.0f + static_cast<float>(i)), b2 = rig::ramp(n, 60.0f);
        std::vector<float> out(n);
        ASSERT_EQ(cases::run(s, w, a2.data(), b2.data(), out.data()), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(out, cases::expected(a2, b2));
        const size_t bytes = n * 4;
        sam3d_upload ups[] = {rig::up(w.a, a2.data(), bytes), rig::up(w.b, b2.data(), bytes)};
        sam3d_download downs[] = {rig::down(w.out, out.data(), bytes)};
        sam3d_call c{ups, 2, w.graph, downs, 1, false};
        sam3d_ticket t = 0;
        ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK) << sam3d_last_error();
        ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(out, cases::expected(a2, b2));
        EXPECT_EQ(0, std::memcmp(sl.out, want.data(), n * 4)) << "output slot changed before the next reservation";
    }
    const size_t al = sam3d_session_staging_alignment(s);
    if (staged(s)) {
        EXPECT_EQ(sam3d_session_staging_in_flight(s), 3 * align_up(n * 4, al));
    }
    reserve_scale_add(s, w);  // releases the first call's slots
    if (staged(s)) {
        EXPECT_EQ(sam3d_session_staging_in_flight(s), 3 * align_up(n * 4, al));
    } else {
        EXPECT_EQ(sam3d_session_staging_in_flight(s), 0u);
    }
}

// A reservation no submit consumed is dropped by the next reserve (A2): the next one is placed
// at the front of the ring (A5, none held), so two of 20 MiB in a row both fit the 32 MiB bound,
// the second on pinned slots whose zero-copy call is a pinned batch.
TEST_P(Queued, AReservationNoSubmitConsumedIsDroppedByTheNextReserve) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const size_t half = 10u << 20;
    ggml_tensor * x = r.bytes(static_cast<int64_t>(half), "x");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<uint8_t> px = rig::pattern(half, 3);
    sam3d_slot_request req[2] = {{half}, {half}};
    void * p1[2] = {nullptr, nullptr};
    void * p2[2] = {nullptr, nullptr};
    ASSERT_EQ(sam3d_session_reserve(s, req, 2, p1), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(sam3d_session_reservation_pinned(s), staged(s));
    ASSERT_EQ(sam3d_session_reserve(s, req, 2, p2), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_reservation_pinned(s), staged(s)) << "the unconsumed reservation still held its region";
    if (staged(s)) {
        EXPECT_EQ(p2[0], p1[0]) << "not placed at the front";
        EXPECT_EQ(sam3d_session_staging_in_flight(s), 2 * half);
    }
    std::memcpy(p2[0], px.data(), half);
    sam3d_upload u[] = {rig::up(x, p2[0], half)};
    sam3d_download d[] = {rig::down(x, p2[1], half)};
    sam3d_call c{u, 1, nullptr, d, 1, false};
    ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(0, std::memcmp(p2[1], px.data(), half));
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.pinned_batches, staged(s) ? 1u : 0u);
    EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_OVERSIZED], 0u);
}

// Queued calls (copying and zero-copy) give the bytes of synchronous calls; submitted back to
// back they share one synchronization on devices without events.
TEST_P(Queued, QueuedCallsAreByteIdenticalToSynchronousOnes) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    probe::record_all(r.seam());
    const int64_t n = 1003;
    const int calls = 4;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    std::vector<std::vector<float>> as, bs, want(calls, std::vector<float>(n));
    sam3d_session * off = r.session(SAM3D_BATCHING_OFF);
    for (int i = 0; i < calls; ++i) {
        as.push_back(rig::ramp(n, 1.0f + 10.0f * static_cast<float>(i)));
        bs.push_back(rig::ramp(n, 2.0f + 3.0f * static_cast<float>(i)));
        ASSERT_EQ(cases::run(off, w, as[i].data(), bs[i].data(), want[i].data()), SAM3D_OK);
    }
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);

    // Copying: inputs may be reused once submit returns; outputs appear at the wait.
    std::vector<std::vector<float>> src_a = as, src_b = bs, got(calls, std::vector<float>(n, -1.0f));
    std::vector<sam3d_ticket> t(calls);
    probe::reset();
    for (int i = 0; i < calls; ++i) {
        sam3d_upload ups[] = {rig::up(w.a, src_a[i].data(), n * 4), rig::up(w.b, src_b[i].data(), n * 4)};
        sam3d_download downs[] = {rig::down(w.out, got[i].data(), n * 4)};
        sam3d_call c{ups, 2, w.graph, downs, 1, false};
        ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &t[i]), SAM3D_OK) << sam3d_last_error();
        std::fill(src_a[i].begin(), src_a[i].end(), 9999.0f);
    }
    EXPECT_EQ(sam3d_session_outstanding(s), size_t(calls));
    if (staged(s)) {
        const std::vector<std::string> early = probe::names();
        EXPECT_EQ(std::count(early.begin(), early.end(), "synchronize"), 0) << "a queued submit synchronized";
    }
    for (int i = 0; i < calls; ++i) {
        ASSERT_EQ(sam3d_session_wait(s, t[i]), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(got[i], want[i]) << "call " << i;
    }
    std::vector<std::string> names = probe::names();
    const size_t syncs = static_cast<size_t>(std::count(names.begin(), names.end(), "synchronize"));
    if (staged(s)) {
        // With events the older calls wait on theirs and the newest on one synchronize (GGML
        // spins there); without, the first wait's synchronize completes them all.
        EXPECT_EQ(syncs, 1u) << "back-to-back queued calls share one synchronization";
        EXPECT_EQ(r.counters(s).pinned_batches, size_t(calls));
    }
    EXPECT_EQ(sam3d_session_outstanding(s), 0u);
    EXPECT_EQ(sam3d_session_staging_in_flight(s), 0u) << "copying calls release their region at the wait";

    // Zero-copy and queued.
    const sam3d_counters before = r.counters(s);
    std::vector<Slots> sl;
    for (int i = 0; i < calls; ++i) {
        sl.push_back(reserve_scale_add(s, w));
        std::memcpy(sl[i].a, as[i].data(), n * 4);
        std::memcpy(sl[i].b, bs[i].data(), n * 4);
        ASSERT_EQ(submit_scale_add(s, w, sl[i], SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &t[i]), SAM3D_OK)
            << sam3d_last_error();
    }
    for (int i = 0; i < calls; ++i) {
        ASSERT_EQ(sam3d_session_wait(s, t[i]), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(0, std::memcmp(sl[i].out, want[i].data(), n * 4)) << "zero-copy call " << i;
    }
    EXPECT_EQ(r.counters(s).copy_ns, before.copy_ns) << "zero-copy queued calls copied through staging";
    EXPECT_EQ(sam3d_session_wait(s, t[0]), SAM3D_ERR_INVALID_ARGUMENT) << "a ticket is waited once";
}

// A3 and the tickets' rules: a wait takes a ticket of a queued call of its own session that was
// not waited yet, and nothing else: not 0, not the next number, not a ticket waited already
// (a kept call's included, before and after its release), not a non-queued kept call's (its
// completion was reported at its return). Tickets count from 1 in each session: two sessions'
// first calls both get 1, and each session's wait of 1 completes its own call only. A refused
// wait changes no counter and copies no output.
TEST_P(Queued, AWaitTakesOnlyATicketOfItsOwnSessionsQueuedCallsNotWaitedYet) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 256;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * sa = r.session(SAM3D_BATCHING_ON);
    sam3d_session * sb = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a1 = rig::ramp(n, 1.0f), b1 = rig::ramp(n, 2.0f);
    const std::vector<float> a2 = rig::ramp(n, 30.0f), b2 = rig::ramp(n, 5.0f);
    std::vector<float> out_a(n, -1.0f), out_b(n, -1.0f);
    const std::vector<float> untouched(n, -1.0f);
    const auto refused = [&](sam3d_session * s, sam3d_ticket t, const char * why) {
        const sam3d_counters before = r.counters(s);
        EXPECT_EQ(sam3d_session_wait(s, t), SAM3D_ERR_INVALID_ARGUMENT) << why;
        EXPECT_CONTAINS(sam3d_last_error(), "ticket " + std::to_string(t) + " is unknown or already waited");
        const sam3d_counters after = r.counters(s);
        EXPECT_EQ(after.rejected_calls, before.rejected_calls) << "a wait is not a call";
        EXPECT_EQ(after.calls, before.calls);
    };
    sam3d_ticket ta = 0, tb = 0;
    ASSERT_EQ(cases::submit(sb, w, a2.data(), b2.data(), out_b.data(), SAM3D_SUBMIT_QUEUED, &tb), SAM3D_OK)
        << sam3d_last_error();
    ASSERT_EQ(cases::submit(sa, w, a1.data(), b1.data(), out_a.data(), SAM3D_SUBMIT_QUEUED, &ta), SAM3D_OK)
        << sam3d_last_error();
    EXPECT_EQ(ta, 1u) << "tickets count from 1 in each session";
    EXPECT_EQ(tb, 1u) << "tickets count from 1 in each session";
    refused(sa, 0, "0 is no ticket");
    refused(sa, ta + 1, "a number not issued yet");
    if (staged(sa)) {  // the synchronous path writes a queued copying call's outputs at submission
        EXPECT_EQ(out_a, untouched) << "a refused wait copied the outputs";
    }
    EXPECT_EQ(sam3d_session_outstanding(sa), 1u);
    ASSERT_EQ(sam3d_session_wait(sb, tb), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(out_b, cases::expected(a2, b2));
    if (staged(sa)) {
        EXPECT_EQ(out_a, untouched) << "session b's wait of ticket 1 completed session a's call 1";
    }
    EXPECT_EQ(sam3d_session_outstanding(sa), 1u);
    refused(sb, tb, "waited once");
    ASSERT_EQ(sam3d_session_wait(sa, ta), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(out_a, cases::expected(a1, b1));
    refused(sa, ta, "waited once");

    // A queued kept call: its wait reports it once; release does not make it waitable.
    Slots kept = reserve_scale_add(sa, w);
    std::memcpy(kept.a, a1.data(), n * 4);
    std::memcpy(kept.b, b1.data(), n * 4);
    sam3d_ticket k = 0;
    ASSERT_EQ(submit_scale_add(sa, w, kept, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED | SAM3D_SUBMIT_KEEP_SLOTS, &k),
              SAM3D_OK)
        << sam3d_last_error();
    EXPECT_EQ(k, ta + 1) << "the session's next number";
    ASSERT_EQ(sam3d_session_wait(sa, k), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(std::vector<float>(kept.out, kept.out + n), cases::expected(a1, b1));
    refused(sa, k, "a kept call waited once");
    ASSERT_EQ(sam3d_session_release(sa, k), SAM3D_OK) << sam3d_last_error();
    refused(sa, k, "a released kept call");

    // A non-queued kept call: its ticket is for release only.
    Slots now = reserve_scale_add(sa, w);
    std::memcpy(now.a, a2.data(), n * 4);
    std::memcpy(now.b, b2.data(), n * 4);
    sam3d_ticket kn = 0;
    ASSERT_EQ(submit_scale_add(sa, w, now, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, &kn), SAM3D_OK)
        << sam3d_last_error();
    EXPECT_EQ(kn, k + 1);
    refused(sa, kn, "a call completed on return");
    EXPECT_EQ(std::vector<float>(now.out, now.out + n), cases::expected(a2, b2));
    EXPECT_EQ(sam3d_session_release(sa, kn), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_outstanding(sa), 0u);
    EXPECT_EQ(sam3d_session_outstanding(sb), 0u);
}

// A graph that fails after submission is reported at its wait; the session's outstanding work
// is complete when submit returns (so neither wait synchronizes); no output is written; earlier
// calls are exact.
TEST_P(Queued, ErrorIsReportedAtTheWaitWithOutstandingWorkCompleted) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    probe::record_all(r.seam());
    const int64_t n = 777;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 5.0f);
    std::vector<float> out1(n, -1.0f);
    cases::Guarded g({n * 4});
    const std::vector<uint8_t> untouched = g.all();
    sam3d_upload ups[] = {rig::up(w.a, a.data(), n * 4), rig::up(w.b, b.data(), n * 4)};
    sam3d_download d1[] = {rig::down(w.out, out1.data(), n * 4)};
    sam3d_download d2[] = {rig::down(w.out, g.region(0), n * 4)};
    sam3d_call c1{ups, 2, w.graph, d1, 1, false};
    sam3d_call c2{ups, 2, w.graph, d2, 1, false};
    sam3d_ticket t1 = 0, t2 = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c1, SAM3D_SUBMIT_QUEUED, &t1), SAM3D_OK) << sam3d_last_error();
    probe::set_fail_compute(true);
    ASSERT_EQ(sam3d_session_submit(s, &c2, SAM3D_SUBMIT_QUEUED, &t2), SAM3D_OK) << "errors come at the wait";
    probe::set_fail_compute(false);
    const std::vector<std::string> names = probe::names();
    if (staged(s)) {
        ASSERT_FALSE(names.empty());
        EXPECT_EQ(names.back(), "synchronize") << "outstanding work must be completed after a failed submission";
    }
    const uint64_t synchronizes = r.counters(s).synchronizes;
    EXPECT_EQ(sam3d_session_wait(s, t2), SAM3D_ERR_COMPUTE);
    EXPECT_CONTAINS(sam3d_last_error(), "graph compute returned");
    EXPECT_EQ(g.all(), untouched) << "a failed call wrote its outputs";
    ASSERT_EQ(sam3d_session_wait(s, t1), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(out1, cases::expected(a, b));
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.synchronizes, synchronizes) << "both calls were complete when submit returned: their waits synchronized";
    EXPECT_EQ(k.calls, 2u);
    EXPECT_EQ(k.failed_calls, 1u);
    EXPECT_EQ(k.pinned_batches, staged(s) ? 2u : 0u) << "a call failing after submission keeps its pinned batch (rule 8)";
    EXPECT_EQ(k.bytes_downloaded, static_cast<uint64_t>(n) * 4) << "only the call that succeeded counts its bytes";
    EXPECT_EQ(sam3d_session_outstanding(s), 0u);
    // The session recovers exactly.
    sam3d_ticket t3 = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c2, SAM3D_SUBMIT_QUEUED, &t3), SAM3D_OK);
    ASSERT_EQ(sam3d_session_wait(s, t3), SAM3D_OK) << sam3d_last_error();
    std::vector<float> got(n);
    std::memcpy(got.data(), g.region(0), n * 4);
    EXPECT_EQ(got, cases::expected(a, b));
}

// At most SAM3D_STAGING_BOUND_BYTES in flight: with 18 MiB held by an unwaited call, a second
// 18 MiB reservation does not wait: it falls back (heap slots, synchronous path, "oversized").
TEST_P(Queued, FullRingFallsBackInsteadOfWaiting) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const size_t half = 9u << 20;
    ggml_tensor * x = r.bytes(static_cast<int64_t>(half), "x");
    ggml_tensor * y = r.bytes(static_cast<int64_t>(half), "y");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<uint8_t> px = rig::pattern(half, 1), py = rig::pattern(half, 2);
    sam3d_slot_request req[2] = {{half}, {half}};
    void * p1[2] = {nullptr, nullptr};
    void * p2[2] = {nullptr, nullptr};
    ASSERT_EQ(sam3d_session_reserve(s, req, 2, p1), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_reservation_pinned(s), staged(s));
    std::memcpy(p1[0], px.data(), half);
    sam3d_upload u1[] = {rig::up(x, p1[0], half)};
    sam3d_download d1[] = {rig::down(x, p1[1], half)};
    sam3d_call c1{u1, 1, nullptr, d1, 1, false};
    sam3d_ticket t1 = 0, t2 = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c1, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &t1), SAM3D_OK)
        << sam3d_last_error();

    ASSERT_EQ(sam3d_session_reserve(s, req, 2, p2), SAM3D_OK) << sam3d_last_error();
    EXPECT_FALSE(sam3d_session_reservation_pinned(s)) << "the ring has no room: the reservation falls back";
    EXPECT_LE(sam3d_session_staging_in_flight(s), SAM3D_STAGING_BOUND_BYTES);
    std::memcpy(p2[0], py.data(), half);
    sam3d_upload u2[] = {rig::up(y, p2[0], half)};
    sam3d_download d2[] = {rig::down(y, p2[1], half)};
    sam3d_call c2{u2, 1, nullptr, d2, 1, false};
    ASSERT_EQ(sam3d_session_submit(s, &c2, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &t2), SAM3D_OK)
        << sam3d_last_error();
    ASSERT_EQ(sam3d_session_wait(s, t1), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(sam3d_session_wait(s, t2), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(0, std::memcmp(p1[1], px.data(), half));
    EXPECT_EQ(0, std::memcmp(p2[1], py.data(), half));
    const sam3d_counters k = r.counters(s);
    if (staged(s)) {
        EXPECT_EQ(k.pinned_batches, 1u);
        EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_OVERSIZED], 1u);
        EXPECT_EQ(k.sync_uploads, 1u);
        EXPECT_EQ(k.async_uploads, 1u);
    } else {
        EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_NO_ASYNC_CAPS], 2u);
    }
    EXPECT_EQ(k.copy_ns, 0u);
}

// The copying path under the same bound: a queued copying call holds its ring region until its
// wait, so a second 18 MiB queued call finds no room and takes the synchronous path
// ("oversized") after completing the first; both are exact at their waits.
TEST_P(Queued, FullRingFallsBackForCopyingQueuedCalls) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const size_t half = 9u << 20;
    ggml_tensor * x = r.bytes(static_cast<int64_t>(half), "x");
    ggml_tensor * y = r.bytes(static_cast<int64_t>(half), "y");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<uint8_t> px = rig::pattern(half, 3), py = rig::pattern(half, 4);
    std::vector<uint8_t> ox(half, 0), oy(half, 0);
    sam3d_upload u1[] = {rig::up(x, px.data(), half)};
    sam3d_download d1[] = {rig::down(x, ox.data(), half)};
    sam3d_upload u2[] = {rig::up(y, py.data(), half)};
    sam3d_download d2[] = {rig::down(y, oy.data(), half)};
    sam3d_call c1{u1, 1, nullptr, d1, 1, false};
    sam3d_call c2{u2, 1, nullptr, d2, 1, false};
    sam3d_ticket t1 = 0, t2 = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c1, SAM3D_SUBMIT_QUEUED, &t1), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_staging_in_flight(s), staged(s) ? 2 * half : 0u);
    ASSERT_EQ(sam3d_session_submit(s, &c2, SAM3D_SUBMIT_QUEUED, &t2), SAM3D_OK) << sam3d_last_error();
    EXPECT_LE(sam3d_session_staging_in_flight(s), SAM3D_STAGING_BOUND_BYTES);
    EXPECT_EQ(sam3d_session_outstanding(s), 2u);
    ASSERT_EQ(sam3d_session_wait(s, t2), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(oy, py);
    ASSERT_EQ(sam3d_session_wait(s, t1), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(ox, px);
    EXPECT_EQ(sam3d_session_staging_in_flight(s), 0u) << "waited copying calls release their regions";
    const sam3d_counters k = r.counters(s);
    if (staged(s)) {
        EXPECT_EQ(k.pinned_batches, 1u);
        EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_OVERSIZED], 1u);
        EXPECT_EQ(k.async_uploads, 1u);
        EXPECT_EQ(k.sync_uploads, 1u);
        EXPECT_EQ(k.sync_downloads, 1u);
    } else {
        EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_NO_ASYNC_CAPS], 2u);
    }
}

// Calls are serialized per session at submission: a queued submit blocked inside the seam
// keeps a second thread's submit out of the seam until it returns; tickets follow submission
// order and both calls are exact at their waits.
TEST_P(Queued, SubmissionsFromTwoThreadsAreSerialized) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    probe::record_all(r.seam());
    const int64_t n = 1031;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    if (!staged(s)) {
        GTEST_SKIP() << "no staged path on this backend: submissions never reach graph_compute_async";
    }
    const std::vector<float> a1 = rig::ramp(n, 1.0f), b1 = rig::ramp(n, 2.0f);
    const std::vector<float> a2 = rig::ramp(n, 90.0f), b2 = rig::ramp(n, 3.0f);
    std::vector<float> o1(n, 0.0f), o2(n, 0.0f);
    sam3d_upload u1[] = {rig::up(w.a, a1.data(), n * 4), rig::up(w.b, b1.data(), n * 4)};
    sam3d_upload u2[] = {rig::up(w.a, a2.data(), n * 4), rig::up(w.b, b2.data(), n * 4)};
    sam3d_download d1[] = {rig::down(w.out, o1.data(), n * 4)};
    sam3d_download d2[] = {rig::down(w.out, o2.data(), n * 4)};
    sam3d_call c1{u1, 2, w.graph, d1, 1, false};
    sam3d_call c2{u2, 2, w.graph, d2, 1, false};
    sam3d_ticket k1 = 0, k2 = 0;
    sam3d_status st1 = SAM3D_ERR_INTERNAL, st2 = SAM3D_ERR_INTERNAL;
    probe::race([&] { st1 = sam3d_session_submit(s, &c1, SAM3D_SUBMIT_QUEUED, &k1); },
                [&] { st2 = sam3d_session_submit(s, &c2, SAM3D_SUBMIT_QUEUED, &k2); }, 4);
    ASSERT_EQ(st1, SAM3D_OK);
    ASSERT_EQ(st2, SAM3D_OK);
    EXPECT_LT(k1, k2) << "tickets follow submission order";
    EXPECT_EQ(probe::events().size(), 8u) << "per call: 2 uploads, compute, 1 download";
    ASSERT_EQ(sam3d_session_wait(s, k2), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(sam3d_session_wait(s, k1), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(o1, cases::expected(a1, b1));
    EXPECT_EQ(o2, cases::expected(a2, b2));
}

// A slot of call n+1 is written while call n's download into its own slot is still in flight
// (cpu_staged: deferred in-order queue, so the download happens at the wait; vulkan: real
// asynchronous transfers): call n's outputs are not corrupted and both calls are exact.
TEST_P(Queued, SlotsOfTheNextCallAreWrittenWhileADownloadIsInFlight) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    if (r.kind() == Kind::CpuStaged) {
        deferred::install(r.seam());
    }
    const int64_t n = 4099;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a1 = rig::ramp(n, 1.0f), b1 = rig::ramp(n, 2.0f);
    const std::vector<float> a2 = rig::ramp(n, 300.0f), b2 = rig::ramp(n, 17.0f);
    Slots s1 = reserve_scale_add(s, w);
    std::memcpy(s1.a, a1.data(), n * 4);
    std::memcpy(s1.b, b1.data(), n * 4);
    std::fill(s1.out, s1.out + n, -5.0f);
    sam3d_ticket t1 = 0, t2 = 0;
    ASSERT_EQ(submit_scale_add(s, w, s1, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &t1), SAM3D_OK)
        << sam3d_last_error();
    if (r.kind() == Kind::CpuStaged) {
        EXPECT_GT(deferred::pending(), 0u) << "call n's download must still be in flight";
        EXPECT_EQ(s1.out[0], -5.0f) << "outputs are readable only after the wait";
    }
    Slots s2 = reserve_scale_add(s, w);
    // Call n+1's slots never overlap call n's region while n is not released.
    const uintptr_t lo1 = reinterpret_cast<uintptr_t>(std::min({s1.a, s1.b, s1.out}));
    const uintptr_t hi1 = reinterpret_cast<uintptr_t>(std::max({s1.a, s1.b, s1.out})) + n * 4;
    for (float * p : {s2.a, s2.b, s2.out}) {
        const uintptr_t q = reinterpret_cast<uintptr_t>(p);
        EXPECT_TRUE(q + n * 4 <= lo1 || q >= hi1) << "slot of call n+1 overlaps call n's staging";
    }
    std::memcpy(s2.a, a2.data(), n * 4);
    std::memcpy(s2.b, b2.data(), n * 4);
    std::fill(s2.out, s2.out + n, 123.0f);
    ASSERT_EQ(submit_scale_add(s, w, s2, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &t2), SAM3D_OK)
        << sam3d_last_error();
    ASSERT_EQ(sam3d_session_wait(s, t1), SAM3D_OK) << sam3d_last_error();
    std::vector<float> got1(s1.out, s1.out + n);
    EXPECT_EQ(got1, cases::expected(a1, b1)) << "call n's outputs were corrupted";
    ASSERT_EQ(sam3d_session_wait(s, t2), SAM3D_OK) << sam3d_last_error();
    std::vector<float> got2(s2.out, s2.out + n);
    EXPECT_EQ(got2, cases::expected(a2, b2));
    got1.assign(s1.out, s1.out + n);
    EXPECT_EQ(got1, cases::expected(a1, b1)) << "call n's outputs changed before the next reservation";
    if (r.kind() == Kind::CpuStaged) {
        EXPECT_EQ(deferred::g_syncs, 1) << "both calls completed by one synchronization";
        EXPECT_EQ(deferred::pending(), 0u);
    }
    EXPECT_EQ(r.counters(s).copy_ns, 0u);
}

// Kept slots: a later call uploads straight from an earlier call's kept output slot (no host
// copy); later reservations do not touch kept slots; release gives them back once.
TEST_P(Queued, KeptSlotsFeedALaterUploadWithoutACopy) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 2053;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a1 = rig::ramp(n, 1.0f), b1 = rig::ramp(n, 2.0f), b2 = rig::ramp(n, 11.0f);
    const std::vector<float> want1 = cases::expected(a1, b1);
    Slots s1 = reserve_scale_add(s, w);
    std::memcpy(s1.a, a1.data(), n * 4);
    std::memcpy(s1.b, b1.data(), n * 4);
    sam3d_ticket k1 = 0;
    ASSERT_EQ(submit_scale_add(s, w, s1, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, &k1), SAM3D_OK)
        << sam3d_last_error();
    EXPECT_NE(k1, 0u) << "a kept call returns the ticket to release";
    const size_t held = sam3d_session_staging_in_flight(s);
    Slots s2 = reserve_scale_add(s, w);
    EXPECT_EQ(sam3d_session_staging_in_flight(s), staged(s) ? 2 * held : 0u) << "the kept call's region is still held";
    for (const float * p : {s2.a, s2.b, s2.out}) {
        for (const float * q : {s1.a, s1.b, s1.out}) {
            EXPECT_TRUE(p + n <= q || q + n <= p) << "a slot of the next reservation overlaps a kept slot";
        }
    }
    EXPECT_EQ(std::vector<float>(s1.out, s1.out + n), want1) << "kept output slot changed by the next reservation";
    std::memcpy(s2.b, b2.data(), n * 4);
    const sam3d_counters before = r.counters(s);
    sam3d_upload ups[] = {rig::up(w.a, s1.out, n * 4), rig::up(w.b, s2.b, n * 4)};
    sam3d_download downs[] = {rig::down(w.out, s2.out, n * 4)};
    sam3d_call c{ups, 2, w.graph, downs, 1, false};
    sam3d_ticket k2 = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &k2), SAM3D_OK)
        << sam3d_last_error();
    ASSERT_EQ(sam3d_session_wait(s, k2), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(std::vector<float>(s2.out, s2.out + n), cases::expected(want1, b2));
    EXPECT_EQ(r.counters(s).copy_ns, before.copy_ns) << "an upload from a kept slot was copied";
    ASSERT_EQ(sam3d_session_release(s, k1), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_release(s, k1), SAM3D_ERR_INVALID_ARGUMENT) << "released twice";
    EXPECT_EQ(sam3d_session_release(s, k2), SAM3D_ERR_INVALID_ARGUMENT) << "k2 was not kept";
    sam3d_slot_request one = {64};
    void * p = nullptr;
    ASSERT_EQ(sam3d_session_reserve(s, &one, 1, &p), SAM3D_OK);
    EXPECT_EQ(sam3d_session_staging_in_flight(s), staged(s) ? align_up(64, sam3d_session_staging_alignment(s)) : 0u)
        << "released and reported calls give their regions back at the next reservation";
}

// An upload reads a kept slot only from inside it (rule 1's slots, A4): one byte from a kept
// output slot's last byte is accepted and arrives; two bytes starting one byte before the slot,
// or at its last byte, lie outside every slot and are refused, nothing enqueued (the generated
// campaign's boundaries of kept_slot_owner).
TEST_P(Queued, AnUploadFromAKeptSlotLiesWhollyInsideIt) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 64;
    cases::ScaleAdd w = cases::scale_add(r, n);
    ggml_tensor * one = r.bytes(2, "one");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 2.0f);
    // Reserves the workload's slots, fills its inputs and submits it with `flags`.
    const auto submitted = [&](unsigned flags, sam3d_ticket * t) {
        cases::Slots sl = cases::reserve_scale_add(s, w);
        std::memcpy(sl.a, a.data(), n * 4);
        std::memcpy(sl.b, b.data(), n * 4);
        EXPECT_EQ(cases::submit_scale_add(s, w, sl, SAM3D_SUBMIT_ZERO_COPY | flags, t), SAM3D_OK) << sam3d_last_error();
        return sl;
    };
    sam3d_ticket k = 0;
    const cases::Slots kept = submitted(SAM3D_SUBMIT_KEEP_SLOTS, &k);
    ASSERT_NE(k, 0u);
    const auto * out = reinterpret_cast<const uint8_t *>(kept.out);
    const uint8_t zero[2] = {0, 0};
    ggml_backend_tensor_set(one, zero, 0, 2);

    sam3d_upload last[] = {rig::up(one, out + n * 4 - 1, 1)};
    sam3d_call c1{last, 1, nullptr, nullptr, 0, false};
    ASSERT_EQ(sam3d_session_submit(s, &c1, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK) << sam3d_last_error();
    uint8_t got[2] = {0xFF, 0xFF};
    ggml_backend_tensor_get(one, got, 0, 2);
    EXPECT_EQ(got[0], out[n * 4 - 1]) << "the kept slot's last byte";
    EXPECT_EQ(got[1], 0) << "one byte only";

    const sam3d_counters k0 = r.counters(s);
    for (const uint8_t * outside : {out - 1, out + n * 4 - 1}) {  // from a byte before it, to a byte past it
        sam3d_upload straddling[] = {rig::up(one, outside, 2)};
        sam3d_call c2{straddling, 1, nullptr, nullptr, 0, false};
        EXPECT_EQ(sam3d_session_submit(s, &c2, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_ERR_INVALID_ARGUMENT);
        EXPECT_CONTAINS(sam3d_last_error(),
                        "uploads[0].src is not a slot of the current reservation nor inside a kept slot");
    }
    EXPECT_EQ(r.counters(s).calls, k0.calls) << "a refused call counts as no call";
    ASSERT_EQ(sam3d_session_release(s, k), SAM3D_OK) << sam3d_last_error();

    // A queued call that is not kept: after the next reservation its output slot is no slot to
    // read, even while the call is in flight (only kept calls' slots are, A4).
    sam3d_ticket q = 0;
    const cases::Slots queued = submitted(SAM3D_SUBMIT_QUEUED, &q);
    ASSERT_NE(q, 0u);
    cases::Slots next = cases::reserve_scale_add(s, w);
    (void)next;
    sam3d_upload from_queued[] = {rig::up(one, queued.out, 1)};
    sam3d_call c3{from_queued, 1, nullptr, nullptr, 0, false};
    EXPECT_EQ(sam3d_session_submit(s, &c3, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "uploads[0].src is not a slot of the current reservation nor inside a kept slot");
    ASSERT_EQ(sam3d_session_wait(s, q), SAM3D_OK) << sam3d_last_error();
}

// Kept slots are checked (flags, unreported calls, downloads into them) and a released kept
// region is not reused while a call that reads from it is still in flight.
TEST_P(Queued, KeptRegionOutlivesItsReadersAfterRelease) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    if (r.kind() == Kind::CpuStaged) {
        deferred::install(r.seam());
    }
    const int64_t n = (5 << 20) / 4;  // 5 MiB tensors: two calls of three slots hold 30 of the 32 MiB
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a1 = rig::ramp(n, 1.0f), b1 = rig::ramp(n, 3.0f), b2 = rig::ramp(n, 7.0f);
    Slots s1 = reserve_scale_add(s, w);
    std::memcpy(s1.a, a1.data(), n * 4);
    std::memcpy(s1.b, b1.data(), n * 4);
    sam3d_ticket k1 = 0, k2 = 0;
    EXPECT_EQ(submit_scale_add(s, w, s1, SAM3D_SUBMIT_KEEP_SLOTS, &k1), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "needs SAM3D_SUBMIT_ZERO_COPY");
    EXPECT_EQ(submit_scale_add(s, w, s1, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, nullptr),
              SAM3D_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(submit_scale_add(s, w, s1, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS | SAM3D_SUBMIT_QUEUED, &k1),
              SAM3D_OK)
        << sam3d_last_error();
    EXPECT_EQ(sam3d_session_release(s, k1), SAM3D_ERR_INVALID_ARGUMENT) << "released before its wait";
    EXPECT_CONTAINS(sam3d_last_error(), "was not waited");
    Slots s2 = reserve_scale_add(s, w);
    std::memcpy(s2.b, b2.data(), n * 4);
    sam3d_upload ups[] = {rig::up(w.a, s1.out, n * 4), rig::up(w.b, s2.b, n * 4)};
    sam3d_download downs[] = {rig::down(w.out, s2.out, n * 4)};
    sam3d_call c{ups, 2, w.graph, downs, 1, false};
    EXPECT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &k2),
              SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "uploads[0].src reads a kept slot of ticket");
    sam3d_download into_kept[] = {rig::down(w.out, s1.b, n * 4)};
    sam3d_call bad{ups + 1, 1, w.graph, into_kept, 1, false};
    EXPECT_EQ(sam3d_session_submit(s, &bad, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "downloads[0].dst is not a slot of the current reservation");

    ASSERT_EQ(sam3d_session_wait(s, k1), SAM3D_OK) << sam3d_last_error();
    const std::vector<float> want1 = cases::expected(a1, b1);
    ASSERT_EQ(std::vector<float>(s1.out, s1.out + n), want1);
    ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &k2), SAM3D_OK)
        << sam3d_last_error();
    ASSERT_EQ(sam3d_session_release(s, k1), SAM3D_OK) << sam3d_last_error();
    // k2 still reads s1.out (cpu_staged: its upload is deferred until a synchronize). A
    // reservation of call 1's size fits only where call 1's region was: it must not get it yet.
    sam3d_slot_request big = {15u << 20};
    void * p = nullptr;
    ASSERT_EQ(sam3d_session_reserve(s, &big, 1, &p), SAM3D_OK) << sam3d_last_error();
    EXPECT_FALSE(sam3d_session_reservation_pinned(s)) << "a released kept region was reused while a reader is in flight";
    std::memset(p, 0xff, 15u << 20);
    ASSERT_EQ(sam3d_session_wait(s, k2), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(std::vector<float>(s2.out, s2.out + n), cases::expected(want1, b2)) << "the reader saw overwritten input";
    ASSERT_EQ(sam3d_session_reserve(s, &big, 1, &p), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_reservation_pinned(s), staged(s)) << "the region comes back once its reader completed";
}

// Slot sizes whose aligned sum does not fit in size_t are refused, naming the request; nothing
// is reserved.
TEST_P(Queued, ReserveRejectsSizesThatOverflow) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    r.bytes(64, "x");  // the rig allocates one buffer for its tensors
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    sam3d_slot_request huge = {SIZE_MAX - 10};
    void * p = nullptr;
    EXPECT_EQ(sam3d_session_reserve(s, &huge, 1, &p), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "requests[0].size is " + std::to_string(SIZE_MAX - 10));
    sam3d_slot_request halves[2] = {{size_t(1) << 63}, {size_t(1) << 63}};
    void * q[2] = {nullptr, nullptr};
    EXPECT_EQ(sam3d_session_reserve(s, halves, 2, q), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "requests[1].size");
    EXPECT_EQ(q[0], nullptr);
    EXPECT_FALSE(sam3d_session_reservation_pinned(s));
    EXPECT_EQ(sam3d_session_staging_in_flight(s), 0u);
}

// A slot of 0 bytes is refused naming the request; nothing is reserved, slots stay unwritten.
TEST_P(Queued, ReserveRejectsAZeroSize) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    r.bytes(64, "x");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    sam3d_slot_request req[2] = {{64}, {0}};
    void * q[2] = {nullptr, nullptr};
    EXPECT_EQ(sam3d_session_reserve(s, req, 2, q), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "requests[1].size is 0");
    EXPECT_EQ(q[0], nullptr);
    EXPECT_EQ(q[1], nullptr);
    EXPECT_EQ(sam3d_session_staging_in_flight(s), 0u);
    // No slots, and NULL arrays, each named (the generated campaign's message choice).
    EXPECT_EQ(sam3d_session_reserve(s, req, 0, q), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "n is 0");
    EXPECT_EQ(sam3d_session_reserve(s, nullptr, 1, q), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "requests or slots is NULL");
}

// A zero-copy call that names no slot of the current reservation (uploads from kept slots
// only) needs no reservation and leaves the current one to the next submit; the chain is exact.
TEST_P(Queued, KeptOnlyCallsLeaveTheCurrentReservation) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 777;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 4.0f);
    // Call 1 (kept): uploads a and b into their tensors and downloads them back into its slots.
    sam3d_slot_request req[4] = {{n * 4}, {n * 4}, {n * 4}, {n * 4}};
    void * p[4] = {nullptr, nullptr, nullptr, nullptr};
    ASSERT_EQ(sam3d_session_reserve(s, req, 4, p), SAM3D_OK) << sam3d_last_error();
    std::memcpy(p[0], a.data(), n * 4);
    std::memcpy(p[1], b.data(), n * 4);
    sam3d_upload u1[] = {rig::up(w.a, p[0], n * 4), rig::up(w.b, p[1], n * 4)};
    sam3d_download d1[] = {rig::down(w.a, p[2], n * 4), rig::down(w.b, p[3], n * 4)};
    sam3d_call c1{u1, 2, nullptr, d1, 2, false};
    sam3d_ticket k1 = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c1, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, &k1), SAM3D_OK)
        << sam3d_last_error();
    // Call 2 has no reservation at all: uploads from the kept output slots, computes.
    sam3d_upload u2[] = {rig::up(w.a, p[2], n * 4), rig::up(w.b, p[3], n * 4)};
    sam3d_call c2{u2, 2, w.graph, nullptr, 0, false};
    ASSERT_EQ(sam3d_session_submit(s, &c2, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK) << sam3d_last_error();
    // Call 3 repeats it while a reservation for call 4 is current; call 4 still gets it.
    sam3d_slot_request one = {n * 4};
    void * out = nullptr;
    ASSERT_EQ(sam3d_session_reserve(s, &one, 1, &out), SAM3D_OK) << sam3d_last_error();
    sam3d_ticket k3 = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c2, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &k3), SAM3D_OK)
        << sam3d_last_error();
    ASSERT_EQ(sam3d_session_wait(s, k3), SAM3D_OK) << sam3d_last_error();
    sam3d_download d4[] = {rig::down(w.out, out, n * 4)};
    sam3d_call c4{nullptr, 0, nullptr, d4, 1, false};
    ASSERT_EQ(sam3d_session_submit(s, &c4, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK)
        << "the reservation was taken by a call that used none of its slots: " << sam3d_last_error();
    const float * o = static_cast<const float *>(out);
    EXPECT_EQ(std::vector<float>(o, o + n), cases::expected(a, b));
    EXPECT_EQ(sam3d_session_release(s, k1), SAM3D_OK) << sam3d_last_error();
}

// A kept zero-copy call whose uploads come only from earlier kept slots names no slot of its
// own, and its ticket is still a kept call's (A4): release accepts it once, then refuses it.
TEST_P(Queued, AKeptCallOfOnlyKeptSlotsIsReleasedByItsTicket) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 129;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 4.0f);
    sam3d_slot_request req[2] = {{n * 4}, {n * 4}};
    void * p[2] = {nullptr, nullptr};
    ASSERT_EQ(sam3d_session_reserve(s, req, 2, p), SAM3D_OK) << sam3d_last_error();
    std::memcpy(p[0], a.data(), n * 4);
    std::memcpy(p[1], b.data(), n * 4);
    sam3d_upload u[] = {rig::up(w.a, p[0], n * 4), rig::up(w.b, p[1], n * 4)};
    sam3d_call c1{u, 2, nullptr, nullptr, 0, false};
    sam3d_ticket k1 = 0, k2 = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c1, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, &k1), SAM3D_OK)
        << sam3d_last_error();
    sam3d_call c2{u, 2, w.graph, nullptr, 0, false};  // the same kept slots, no slot of its own
    ASSERT_EQ(sam3d_session_submit(s, &c2, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, &k2), SAM3D_OK)
        << sam3d_last_error();
    ASSERT_NE(k2, 0u) << "a kept call that succeeded has a ticket";
    EXPECT_NE(k2, k1);
    EXPECT_EQ(sam3d_session_release(s, k2), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_release(s, k2), SAM3D_ERR_INVALID_ARGUMENT) << "a kept ticket is released once";
    EXPECT_EQ(sam3d_session_release(s, k1), SAM3D_OK) << sam3d_last_error();
    std::vector<float> got(n, -1.0f);
    sam3d_download d[] = {rig::down(w.out, got.data(), n * 4)};
    sam3d_call c3{nullptr, 0, nullptr, d, 1, false};
    ASSERT_EQ(sam3d_session_run(s, &c3), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(got, cases::expected(a, b));
}

// A queued call with only a graph is enqueued like the others: uploads, graph and download
// submitted as three queued calls complete at one synchronization, exactly.
TEST_P(Queued, QueuedGraphOnlyCallIsEnqueued) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    probe::record_all(r.seam());
    const int64_t n = 1024;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 2.0f);
    std::vector<float> o(n, -1.0f);
    sam3d_upload u[] = {rig::up(w.a, a.data(), n * 4), rig::up(w.b, b.data(), n * 4)};
    sam3d_download d[] = {rig::down(w.out, o.data(), n * 4)};
    sam3d_call c1{u, 2, nullptr, nullptr, 0, false};
    sam3d_call c2{nullptr, 0, w.graph, nullptr, 0, false};
    sam3d_call c3{nullptr, 0, nullptr, d, 1, false};
    sam3d_ticket t[3] = {0, 0, 0};
    probe::reset();
    ASSERT_EQ(sam3d_session_submit(s, &c1, SAM3D_SUBMIT_QUEUED, &t[0]), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(sam3d_session_submit(s, &c2, SAM3D_SUBMIT_QUEUED, &t[1]), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(sam3d_session_submit(s, &c3, SAM3D_SUBMIT_QUEUED, &t[2]), SAM3D_OK) << sam3d_last_error();
    if (staged(s)) {
        const std::vector<std::string> want = {"set_async", "set_async", "compute_async", "get_async"};
        EXPECT_EQ(probe::names(), want) << "a queued call waited or ran synchronously at submission";
    }
    for (sam3d_ticket k : {t[2], t[1], t[0]}) {
        ASSERT_EQ(sam3d_session_wait(s, k), SAM3D_OK) << sam3d_last_error();
    }
    EXPECT_EQ(o, cases::expected(a, b));
    if (staged(s)) {
        EXPECT_EQ(r.counters(s).pinned_batches, 2u) << "the graph-only call stages nothing";
    }
}

// A graph-only queued call has nothing to stage (docs/contract.md, "Fallback reasons"; A6): as
// a session's first call it allocates no staging, holds no region of the ring, and is exact.
TEST_P(Queued, QueuedGraphOnlyCallAllocatesNoStaging) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 256;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(n, 3.0f), b = rig::ramp(n, 4.0f);
    ggml_backend_tensor_set(w.a, a.data(), 0, n * 4);
    ggml_backend_tensor_set(w.b, b.data(), 0, n * 4);
    sam3d_call c{nullptr, 0, w.graph, nullptr, 0, false};
    sam3d_ticket t = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_staging_in_flight(s), 0u);
    sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.staging_allocations, 0u) << "a graph-only call allocated staging";
    EXPECT_EQ(k.staging_bytes, 0u);
    ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
    std::vector<float> o(n, -1.0f);
    ggml_backend_tensor_get(w.out, o.data(), 0, n * 4);
    EXPECT_EQ(o, cases::expected(a, b));
    k = r.counters(s);
    EXPECT_EQ(k.staging_allocations, 0u);
    EXPECT_EQ(k.pinned_batches, 0u);
    cases::expect_fallbacks(k);
}

// A non-queued kept call that fails is not kept: no ticket, and its slots go back at the next
// reservation.
TEST_P(Queued, FailedKeptCallIsNotKept) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    probe::record_all(r.seam());
    const int64_t n = 256;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    Slots sl = reserve_scale_add(s, w);
    sam3d_ticket k = 777;
    probe::set_fail_compute(true);
    EXPECT_EQ(submit_scale_add(s, w, sl, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, &k), SAM3D_ERR_COMPUTE);
    probe::set_fail_compute(false);
    EXPECT_EQ(k, 0u);
    sam3d_slot_request one = {64};
    void * p = nullptr;
    ASSERT_EQ(sam3d_session_reserve(s, &one, 1, &p), SAM3D_OK);
    EXPECT_EQ(sam3d_session_staging_in_flight(s), staged(s) ? align_up(64, sam3d_session_staging_alignment(s)) : 0u);
}

// sam3d_session_run after a queued call on the same tensors completes it first (A6), on the
// staged path and on the synchronous path (`synchronous` set), and is exact; the queued call's
// outputs appear at its wait.
TEST_P(Queued, RunAfterQueuedCallsCompletesThemFirst) {
    for (const bool synchronous : {false, true}) {
        SCOPED_TRACE(synchronous ? "synchronous run" : "staged run");
        Rig r(GetParam());
        RIG_REQUIRE(r);
        const int64_t n = 513;
        cases::ScaleAdd w = cases::scale_add(r, n);
        r.alloc();
        sam3d_session * s = r.session(SAM3D_BATCHING_ON);
        const std::vector<float> a1 = rig::ramp(n, 1.0f), b1 = rig::ramp(n, 2.0f);
        const std::vector<float> a2 = rig::ramp(n, 40.0f), b2 = rig::ramp(n, 9.0f);
        std::vector<float> out1(n, -1.0f), out2(n, -1.0f);
        sam3d_upload ups1[] = {rig::up(w.a, a1.data(), n * 4), rig::up(w.b, b1.data(), n * 4)};
        sam3d_download downs1[] = {rig::down(w.out, out1.data(), n * 4)};
        sam3d_call c1{ups1, 2, w.graph, downs1, 1, false};
        sam3d_upload ups2[] = {rig::up(w.a, a2.data(), n * 4), rig::up(w.b, b2.data(), n * 4)};
        sam3d_download downs2[] = {rig::down(w.out, out2.data(), n * 4)};
        sam3d_call c2{ups2, 2, w.graph, downs2, 1, synchronous};
        sam3d_ticket t = 0;
        ASSERT_EQ(sam3d_session_submit(s, &c1, SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK) << sam3d_last_error();
        ASSERT_EQ(sam3d_session_run(s, &c2), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(out2, cases::expected(a2, b2));
        EXPECT_EQ(sam3d_session_outstanding(s), 1u) << "the queued call is still the caller's to wait";
        ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(out1, cases::expected(a1, b1)) << "the run overtook the queued call";
        const sam3d_counters k = r.counters(s);
        EXPECT_EQ(k.calls, 2u);
        if (staged(s)) {
            EXPECT_EQ(k.pinned_batches, synchronous ? 1u : 2u);
            EXPECT_EQ(k.sync_uploads, synchronous ? 2u : 0u);
            EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_OVERSIZED], 0u);
        } else {
            EXPECT_EQ(k.sync_uploads, 4u);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, Queued, testing::ValuesIn(rig::kinds()), rig::param_name);

// The setup both transfer-queue tests share: cpu_staged over the deferred seam's transfer
// queue (deferred.h; with its events when asked), one scale_add and two calls' inputs and
// outputs. The base resets the probe and the deferred queue before the rig exists.
struct TransferQueueReset {
    TransferQueueReset() {
        probe::reset();
        deferred::reset();
        deferred::g_transfer_queue = true;
    }
};
struct TransferQueueCase : TransferQueueReset {
    static constexpr int64_t n = 513;
    Rig r{Kind::CpuStaged};
    cases::ScaleAdd w;
    sam3d_session * s = nullptr;
    const std::vector<float> a1 = rig::ramp(n, 1.0f), b1 = rig::ramp(n, 2.0f);
    const std::vector<float> a2 = rig::ramp(n, 40.0f), b2 = rig::ramp(n, 9.0f);
    std::vector<float> out1 = std::vector<float>(n, -1.0f), out2 = std::vector<float>(n, -1.0f);

    // `reg_name`: the backend registry name the session sees (NULL: the CPU backend's own).
    explicit TransferQueueCase(bool events, const char * reg_name = nullptr) {
        if (events) {
            deferred::install_with_events(r.seam());
        } else {
            deferred::install(r.seam());
        }
        if (reg_name != nullptr) {
            probe::get().reg_name_result = reg_name;
            r.seam().reg_name = probe::reg_name_override;
        }
        w = cases::scale_add(r, n);
        r.alloc();
        sam3d_session_options o = sam3d_session_default_options();
        o.batching = SAM3D_BATCHING_ON;
        o.duplex = SAM3D_DUPLEX_OFF;  // one queue: A6 as such (test_duplex.cpp has two)
        s = r.session(o);
    }
};

// A6 where GGML lets an upload overtake a graph: on a Vulkan device with a dedicated transfer
// queue (GGML_VK_ASYNC_USE_TRANSFER_QUEUE; AMD dGPUs by default) nothing orders an upload after
// an earlier graph, so a staged run, a non-queued zero-copy submit or a synchronous run (GGML's
// blocking set, at once on host-visible memory) after a queued call on the same tensors
// completes that call before its own uploads, or they overwrite the queued graph's inputs. On
// cpu_staged with the deferred seam's transfer queue (deferred.h), deterministically. The same
// on a backend of one in-order queue (registry "CUDA"): GGML's blocking copies run on another
// stream there (cudaStreamPerThread), so the synchronous path still completes queued work first.
TEST(QueuedTransferQueue, StagedCallAfterAQueuedCallCompletesItBeforeItsOwnUploads) {
    enum class Mode { Run, ZeroCopy, SynchronousRun };
    for (const char * reg : {static_cast<const char *>(nullptr), "CUDA"})
    for (const Mode mode : {Mode::Run, Mode::ZeroCopy, Mode::SynchronousRun}) {
        SCOPED_TRACE(mode == Mode::Run ? "run" : mode == Mode::ZeroCopy ? "zero-copy submit" : "synchronous run");
        SCOPED_TRACE(reg != nullptr ? reg : "the CPU backend's registry");
        TransferQueueCase c(false, reg);
        sam3d_ticket t = 0;
        ASSERT_EQ(cases::submit(c.s, c.w, c.a1.data(), c.b1.data(), c.out1.data(), SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK)
            << sam3d_last_error();
        if (mode == Mode::ZeroCopy) {
            Slots sl = reserve_scale_add(c.s, c.w);
            std::memcpy(sl.a, c.a2.data(), c.n * 4);
            std::memcpy(sl.b, c.b2.data(), c.n * 4);
            ASSERT_EQ(submit_scale_add(c.s, c.w, sl, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK) << sam3d_last_error();
            std::memcpy(c.out2.data(), sl.out, c.n * 4);
        } else if (mode == Mode::Run) {
            ASSERT_EQ(cases::run(c.s, c.w, c.a2.data(), c.b2.data(), c.out2.data()), SAM3D_OK) << sam3d_last_error();
        } else {
            // The synchronous path: GGML's blocking set, compute and get (the image encoder's path).
            sam3d_upload ups[] = {rig::up(c.w.a, c.a2.data(), c.n * 4), rig::up(c.w.b, c.b2.data(), c.n * 4)};
            sam3d_download downs[] = {rig::down(c.w.out, c.out2.data(), c.n * 4)};
            const sam3d_call call{ups, 2, c.w.graph, downs, 1, true};
            ASSERT_EQ(sam3d_session_run(c.s, &call), SAM3D_OK) << sam3d_last_error();
        }
        EXPECT_EQ(c.out2, cases::expected(c.a2, c.b2));
        ASSERT_EQ(sam3d_session_wait(c.s, t), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(c.out1, cases::expected(c.a1, c.b1)) << "the second call's uploads overtook the queued graph";
        EXPECT_EQ(c.r.counters(c.s).pinned_batches, mode == Mode::SynchronousRun ? 1u : 2u);
        if (mode != Mode::SynchronousRun) {
            EXPECT_EQ(deferred::g_syncs, 2) << "the queued call completed first, then the second call";
        }
    }
    deferred::reset();
}

// A6 for queued calls where GGML lets an upload overtake a graph (the device above): a queued
// call's uploads after an outstanding queued call on the same tensors wait for that call's event
// (ggml_backend_event_wait; GGML's Vulkan backend makes its transfer queue wait for it), so they
// do not overwrite the outstanding graph's inputs before it ran, and neither call is completed at
// submission; a call without an event (event_new failed) is completed instead. Copying and
// zero-copy calls (the pattern of Queued.SlotsOfTheNextCallAreWrittenWhileADownloadIsInFlight).
TEST(QueuedTransferQueue, QueuedCallAfterAnOutstandingQueuedCallWaitsForItsEventBeforeItsUploads) {
    enum class Mode { Copying, ZeroCopy, NoEvent };
    for (const Mode mode : {Mode::Copying, Mode::ZeroCopy, Mode::NoEvent}) {
        SCOPED_TRACE(mode == Mode::Copying ? "copying" : mode == Mode::ZeroCopy ? "zero-copy" : "no event");
        TransferQueueCase c(true);
        deferred::g_fail_event_new = mode == Mode::NoEvent;
        sam3d_ticket t1 = 0, t2 = 0;
        Slots s1{}, s2{};
        if (mode == Mode::ZeroCopy) {
            s1 = reserve_scale_add(c.s, c.w);
            std::memcpy(s1.a, c.a1.data(), c.n * 4);
            std::memcpy(s1.b, c.b1.data(), c.n * 4);
            ASSERT_EQ(submit_scale_add(c.s, c.w, s1, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &t1), SAM3D_OK)
                << sam3d_last_error();
            s2 = reserve_scale_add(c.s, c.w);
            std::memcpy(s2.a, c.a2.data(), c.n * 4);
            std::memcpy(s2.b, c.b2.data(), c.n * 4);
            ASSERT_EQ(submit_scale_add(c.s, c.w, s2, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &t2), SAM3D_OK)
                << sam3d_last_error();
        } else {
            ASSERT_EQ(cases::submit(c.s, c.w, c.a1.data(), c.b1.data(), c.out1.data(), SAM3D_SUBMIT_QUEUED, &t1), SAM3D_OK)
                << sam3d_last_error();
            ASSERT_EQ(cases::submit(c.s, c.w, c.a2.data(), c.b2.data(), c.out2.data(), SAM3D_SUBMIT_QUEUED, &t2), SAM3D_OK)
                << sam3d_last_error();
        }
        if (mode == Mode::NoEvent) {
            EXPECT_EQ(deferred::g_syncs, 1) << "the first call, without an event, completed before the second's uploads";
            EXPECT_EQ(deferred::g_event_waits, 0);
        } else {
            EXPECT_EQ(deferred::g_event_waits, 1) << "the second call's uploads wait for the first call's event";
            EXPECT_EQ(deferred::g_syncs, 0) << "neither call completed at submission";
            EXPECT_GT(deferred::pending(), 0u);
        }
        ASSERT_EQ(sam3d_session_wait(c.s, t1), SAM3D_OK) << sam3d_last_error();
        if (mode == Mode::ZeroCopy) {
            c.out1.assign(s1.out, s1.out + c.n);
        }
        EXPECT_EQ(c.out1, cases::expected(c.a1, c.b1)) << "the second call's uploads overtook the first call's graph";
        ASSERT_EQ(sam3d_session_wait(c.s, t2), SAM3D_OK) << sam3d_last_error();
        if (mode == Mode::ZeroCopy) {
            c.out2.assign(s2.out, s2.out + c.n);
        }
        EXPECT_EQ(c.out2, cases::expected(c.a2, c.b2));
        EXPECT_EQ(deferred::pending(), 0u);
    }
    deferred::reset();
}

// A6: a queued call's uploads wait for the newest outstanding call, not the oldest nor a call
// already complete: on the transfer-queue device (the deferred seam's, with events) three
// queued calls on the same tensors, each after the others' graphs read their inputs. Waiting
// for an older call's event would let the third call's uploads overwrite the second call's
// inputs before its graph ran. When the newest outstanding call has no event (event_new
// failed), the next call completes it (one synchronize) rather than waiting for an older
// call's event. A kept call already waited is no outstanding call: the first queued call after
// it waits for nothing.
TEST(QueuedTransferQueue, AQueuedCallsUploadsWaitForTheNewestOutstandingCall) {
    for (const bool newest_has_event : {true, false}) {
        SCOPED_TRACE(newest_has_event ? "the newest outstanding call has an event" : "it has none");
        TransferQueueCase c(true);
        Slots kept = reserve_scale_add(c.s, c.w);
        std::memcpy(kept.a, c.a1.data(), c.n * 4);
        std::memcpy(kept.b, c.b1.data(), c.n * 4);
        sam3d_ticket k = 0;
        ASSERT_EQ(submit_scale_add(c.s, c.w, kept, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED | SAM3D_SUBMIT_KEEP_SLOTS, &k),
                  SAM3D_OK)
            << sam3d_last_error();
        ASSERT_EQ(sam3d_session_wait(c.s, k), SAM3D_OK) << sam3d_last_error();
        const int syncs = deferred::g_syncs;
        const std::vector<float> a3 = rig::ramp(c.n, 300.0f), b3 = rig::ramp(c.n, 17.0f);
        std::vector<float> out3(c.n, -1.0f);
        sam3d_ticket t[3] = {0, 0, 0};
        ASSERT_EQ(cases::submit(c.s, c.w, c.a1.data(), c.b1.data(), c.out1.data(), SAM3D_SUBMIT_QUEUED, &t[0]), SAM3D_OK)
            << sam3d_last_error();
        EXPECT_EQ(deferred::g_event_waits, 0) << "the first call after a waited one waits for nothing";
        deferred::g_fail_event_new = !newest_has_event;
        ASSERT_EQ(cases::submit(c.s, c.w, c.a2.data(), c.b2.data(), c.out2.data(), SAM3D_SUBMIT_QUEUED, &t[1]), SAM3D_OK)
            << sam3d_last_error();
        deferred::g_fail_event_new = false;
        EXPECT_EQ(deferred::g_event_waits, 1) << "the second call's uploads wait for the first call's event";
        ASSERT_EQ(cases::submit(c.s, c.w, a3.data(), b3.data(), out3.data(), SAM3D_SUBMIT_QUEUED, &t[2]), SAM3D_OK)
            << sam3d_last_error();
        if (newest_has_event) {
            EXPECT_EQ(deferred::g_event_waits, 2) << "the third call's uploads wait for the second call's event";
            EXPECT_EQ(deferred::g_syncs, syncs) << "no call completed at submission";
        } else {
            EXPECT_EQ(deferred::g_event_waits, 1) << "no older call's event stands in for the newest call's";
            EXPECT_EQ(deferred::g_syncs, syncs + 1) << "the newest call, without an event, completed first";
        }
        for (int i = 0; i < 3; ++i) {
            ASSERT_EQ(sam3d_session_wait(c.s, t[i]), SAM3D_OK) << sam3d_last_error();
        }
        EXPECT_EQ(c.out1, cases::expected(c.a1, c.b1));
        EXPECT_EQ(c.out2, cases::expected(c.a2, c.b2)) << "the third call's uploads overtook the second call's graph";
        EXPECT_EQ(out3, cases::expected(a3, b3));
        EXPECT_EQ(deferred::pending(), 0u);
        ASSERT_EQ(sam3d_session_release(c.s, k), SAM3D_OK) << sam3d_last_error();
    }
    deferred::reset();
}

// A6 on a backend of one in-order queue (docs/contract.md, Backend facts: CUDA): the queue
// orders a queued call's uploads after the outstanding call's work, so they enqueue no event
// wait; a backend not known to be in order (Vulkan, whose transfer queue reorders, or one not
// listed) keeps the wait. The registry name is the one fact that differs between the two
// sessions (the deferred seam's transfer queue keeps running uploads early either way).
TEST(QueuedTransferQueue, AnInOrderBackendEnqueuesNoEventWaitBeforeUploads) {
    for (const char * name : {"CUDA", "Vulkan", "SomeOtherBackend"}) {
        SCOPED_TRACE(name);
        TransferQueueCase c(true, name);
        sam3d_ticket t1 = 0, t2 = 0;
        ASSERT_EQ(cases::submit(c.s, c.w, c.a1.data(), c.b1.data(), c.out1.data(), SAM3D_SUBMIT_QUEUED, &t1), SAM3D_OK)
            << sam3d_last_error();
        ASSERT_EQ(cases::submit(c.s, c.w, c.a2.data(), c.b2.data(), c.out2.data(), SAM3D_SUBMIT_QUEUED, &t2), SAM3D_OK)
            << sam3d_last_error();
        const bool in_order = std::string(name) == "CUDA";
        EXPECT_EQ(deferred::g_event_waits, in_order ? 0 : 1);
        EXPECT_EQ(deferred::g_syncs, 0) << "neither call completed at submission";
        EXPECT_EQ(deferred::g_event_records, 2) << "each queued call still records its completion event";
        ASSERT_EQ(sam3d_session_wait(c.s, t1), SAM3D_OK) << sam3d_last_error();
        ASSERT_EQ(sam3d_session_wait(c.s, t2), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(c.out2, cases::expected(c.a2, c.b2));
        EXPECT_EQ(deferred::pending(), 0u);
        // Rule 8: the core's own waits and events, each as the seam saw it made.
        const sam3d_counters k = c.r.counters(c.s);
        EXPECT_EQ(k.event_waits, static_cast<uint64_t>(deferred::g_event_waits));
        EXPECT_EQ(k.event_records, static_cast<uint64_t>(deferred::g_event_records));
        EXPECT_EQ(k.synchronizes, static_cast<uint64_t>(deferred::g_syncs));
        EXPECT_EQ(k.event_synchronizes, static_cast<uint64_t>(deferred::g_event_syncs));
        EXPECT_EQ(k.synchronizes, 1u) << "only the newest call's wait synchronizes the backend";
        EXPECT_GE(k.event_synchronizes, 1u) << "the older call's wait, with the newer in flight, is its event's";
    }
    deferred::reset();
}

// Rule 8: the event wait that orders a queued call's uploads after the outstanding call (A6) is
// host time enqueuing: a slow one (the seam's event_wait sleeps 50 ms) shows in the second
// call's enqueue_ns, not outside every counter.
TEST(QueuedTransferQueue, TheEventWaitBeforeUploadsCountsAsEnqueueTime) {
    TransferQueueCase c(true);
    sam3d_ticket t1 = 0, t2 = 0;
    ASSERT_EQ(cases::submit(c.s, c.w, c.a1.data(), c.b1.data(), c.out1.data(), SAM3D_SUBMIT_QUEUED, &t1), SAM3D_OK)
        << sam3d_last_error();
    const uint64_t before = c.r.counters(c.s).enqueue_ns;
    deferred::g_event_wait_sleep_ms = 50;
    ASSERT_EQ(cases::submit(c.s, c.w, c.a2.data(), c.b2.data(), c.out2.data(), SAM3D_SUBMIT_QUEUED, &t2), SAM3D_OK)
        << sam3d_last_error();
    deferred::g_event_wait_sleep_ms = 0;
    EXPECT_EQ(deferred::g_event_waits, 1);
    EXPECT_GE(c.r.counters(c.s).enqueue_ns - before, uint64_t(50) * 1000 * 1000);
    ASSERT_EQ(sam3d_session_wait(c.s, t1), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(sam3d_session_wait(c.s, t2), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(c.out2, cases::expected(c.a2, c.b2));
}

namespace {

// One queued copying call of a single upload of `src` into `t`, on the deferred queue: its
// ticket, the upload still pending (0 if the submit failed).
sam3d_ticket submit_one_upload(sam3d_session * s, ggml_tensor * t, const std::vector<uint8_t> & src) {
    sam3d_upload u = rig::up(t, src.data(), src.size());
    sam3d_call c{};
    c.uploads = &u;
    c.n_uploads = 1;
    sam3d_ticket ticket = 0;
    EXPECT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &ticket), SAM3D_OK) << sam3d_last_error();
    EXPECT_GT(deferred::pending(), 0u) << "the queued upload has not run yet";
    return ticket;
}

}  // namespace

// A7: sam3d_session_free completes the outstanding work before it frees anything. A queued
// call's uploads wait in the deferred queue (nothing runs before a synchronize); after the free
// none is pending and the tensor holds the uploaded bytes, read from staging still alive.
TEST(QueuedFree, FreeCompletesAQueuedCallFirst) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    deferred::install(r.seam());
    ggml_tensor * t = r.bytes(4096, "t");
    r.alloc();
    const std::vector<uint8_t> zero(4096, 0);
    ggml_backend_tensor_set(t, zero.data(), 0, zero.size());
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = SAM3D_BATCHING_ON;
    sam3d_session * s = nullptr;
    ASSERT_EQ(sam3d_testing_session_create(r.backend(), &o, &r.seam(), &s), SAM3D_OK) << sam3d_last_error();
    const auto in = rig::pattern(4096, 3);
    ASSERT_NE(submit_one_upload(s, t, in), 0u);
    sam3d_session_free(s);
    EXPECT_EQ(deferred::pending(), 0u) << "the free left the queued upload pending";
    deferred::reset();
    std::vector<uint8_t> got(4096);
    ggml_backend_tensor_get(t, got.data(), 0, got.size());
    EXPECT_EQ(got, in);
}

// A3: a copying queued call's inputs are copied at submission, so its sources may be reused
// when submit returns; with one upload and nothing else too (the deferred queue reads the
// upload's memory only at the wait's synchronize).
TEST(QueuedDeferred, AOneUploadCopyingCallMayReuseItsSourceAtOnce) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    deferred::reset();
    deferred::install(r.seam());
    ggml_tensor * t = r.bytes(4096, "t");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const auto in = rig::pattern(4096, 5);
    std::vector<uint8_t> src = in;
    const sam3d_ticket ticket = submit_one_upload(s, t, src);
    ASSERT_NE(ticket, 0u);
    std::fill(src.begin(), src.end(), uint8_t{0});
    ASSERT_EQ(sam3d_session_wait(s, ticket), SAM3D_OK) << sam3d_last_error();
    std::vector<uint8_t> got(4096);
    ggml_backend_tensor_get(t, got.data(), 0, got.size());
    EXPECT_EQ(got, in) << "the upload read its source after submit returned";
    EXPECT_EQ(r.counters(s).pinned_batches, 1u);
    deferred::reset();
}

// A4: a released kept region is reused only once every call that read it has completed, not
// only the first nor the oldest. Two queued calls read a kept output slot (the newer one through
// its last upload); the kept call is released and the older reader waited (its event: the newer
// one's work is still pending in the deferred queue). A reservation that fits only where the
// kept region was does not get it while the newer reader is in flight, and that reader sees the
// kept bytes; once it completed, the region comes back.
TEST(QueuedDeferred, AReleasedKeptRegionWaitsForEveryCallThatReadIt) {
    probe::reset();
    deferred::reset();
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    deferred::install_with_events(r.seam());
    const int64_t n = (4 << 20) / 4;  // 4 MiB tensors: the kept call's 12 MiB and two readers' 8 each
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 3.0f);
    const std::vector<float> b1 = rig::ramp(n, 7.0f), b2 = rig::ramp(n, 20.0f);
    const std::vector<float> kept_out = cases::expected(a, b);
    Slots k = reserve_scale_add(s, w);
    ASSERT_TRUE(sam3d_session_reservation_pinned(s));
    std::memcpy(k.a, a.data(), n * 4);
    std::memcpy(k.b, b.data(), n * 4);
    sam3d_ticket kt = 0;
    ASSERT_EQ(submit_scale_add(s, w, k, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, &kt), SAM3D_OK)
        << sam3d_last_error();
    ASSERT_EQ(std::vector<float>(k.out, k.out + n), kept_out);
    // Reader `i` (0 older, 1 newer): a from the kept output slot, b and out in its own slots.
    const std::vector<float> * bs[2] = {&b1, &b2};
    void * rs[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};
    sam3d_ticket t[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
        sam3d_slot_request req[2] = {{static_cast<size_t>(n) * 4}, {static_cast<size_t>(n) * 4}};
        ASSERT_EQ(sam3d_session_reserve(s, req, 2, rs[i]), SAM3D_OK) << sam3d_last_error();
        ASSERT_TRUE(sam3d_session_reservation_pinned(s));
        std::memcpy(rs[i][0], bs[i]->data(), n * 4);
        const sam3d_upload from_kept = rig::up(w.a, k.out, n * 4), own = rig::up(w.b, rs[i][0], n * 4);
        sam3d_upload ups[2] = {from_kept, own};
        if (i == 1) {
            ups[0] = own;
            ups[1] = from_kept;
        }
        sam3d_download downs[] = {rig::down(w.out, rs[i][1], n * 4)};
        sam3d_call c{ups, 2, w.graph, downs, 1, false};
        ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &t[i]), SAM3D_OK)
            << sam3d_last_error();
    }
    ASSERT_EQ(sam3d_session_release(s, kt), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(sam3d_session_wait(s, t[0]), SAM3D_OK) << sam3d_last_error();
    const float * out0 = static_cast<const float *>(rs[0][1]);
    EXPECT_EQ(std::vector<float>(out0, out0 + n), cases::expected(kept_out, b1));
    ASSERT_GT(deferred::pending(), 0u) << "the newer reader is still in flight";

    const size_t kept_bytes = 3 * static_cast<size_t>(n) * 4;
    sam3d_slot_request big = {kept_bytes};
    void * p = nullptr;
    ASSERT_EQ(sam3d_session_reserve(s, &big, 1, &p), SAM3D_OK) << sam3d_last_error();
    EXPECT_FALSE(sam3d_session_reservation_pinned(s)) << "the released kept region was reused while its newer reader is in flight";
    std::memset(p, 0xff, kept_bytes);
    ASSERT_EQ(sam3d_session_wait(s, t[1]), SAM3D_OK) << sam3d_last_error();
    const float * out1 = static_cast<const float *>(rs[1][1]);
    EXPECT_EQ(std::vector<float>(out1, out1 + n), cases::expected(kept_out, b2)) << "the newer reader saw overwritten input";
    ASSERT_EQ(sam3d_session_reserve(s, &big, 1, &p), SAM3D_OK) << sam3d_last_error();
    EXPECT_TRUE(sam3d_session_reservation_pinned(s)) << "the region comes back once every reader completed";
    deferred::reset();
}
