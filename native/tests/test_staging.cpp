// The staged path's layout and ordering, observed through recording seam entries: staging
// offsets aligned for odd sizes and reused across calls (rule 2), capabilities read once
// (rule 6), the drain before compute with the perf logger (rule 7), the time counters as
// disjoint intervals and each phase in its counter (rule 8), serialized calls (rule 9).
#include <algorithm>
#include <chrono>
#include <thread>

#include "cases.h"
#include "deferred.h"
#include "probe.h"
#include "rig.h"

using rig::Kind;
using rig::Rig;

namespace {

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

std::vector<const void *> pointers(const char * what) {
    std::vector<const void *> p;
    for (const probe::Event & e : probe::events()) {
        if (e.what == what) {
            p.push_back(e.data);
        }
    }
    return p;
}

}  // namespace

class Staging : public testing::TestWithParam<Kind> {
   protected:
    void SetUp() override { probe::reset(); }
};

// Every staging region starts at an aligned address, regions follow each other at aligned
// offsets (inputs first, then outputs), and odd sizes never shift a later region off alignment.
TEST_P(Staging, OffsetsAreAlignedAndDisjointForOddSizes) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    probe::record_all(r.seam());
    const std::vector<size_t> up_sizes = {1, 3, 4095, 4097, 5};
    const std::vector<size_t> down_sizes = {33, 1, 4099};
    std::vector<ggml_tensor *> in, out;
    for (size_t i = 0; i < up_sizes.size(); ++i) {
        in.push_back(r.bytes(static_cast<int64_t>(up_sizes[i]), ("in" + std::to_string(i)).c_str()));
    }
    for (size_t i = 0; i < down_sizes.size(); ++i) {
        out.push_back(r.bytes(static_cast<int64_t>(down_sizes[i]), ("out" + std::to_string(i)).c_str()));
    }
    r.alloc();
    std::vector<std::vector<uint8_t>> want;
    for (size_t i = 0; i < down_sizes.size(); ++i) {
        want.push_back(rig::pattern(down_sizes[i], static_cast<uint32_t>(100 + i)));
        ggml_backend_tensor_set(out[i], want[i].data(), 0, down_sizes[i]);
    }
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const size_t al = sam3d_session_staging_alignment(s);
    ASSERT_GT(al, 1u);
    std::vector<std::vector<uint8_t>> src;
    std::vector<sam3d_upload> ups;
    for (size_t i = 0; i < up_sizes.size(); ++i) {
        src.push_back(rig::pattern(up_sizes[i], static_cast<uint32_t>(i)));
    }
    for (size_t i = 0; i < up_sizes.size(); ++i) {
        ups.push_back(rig::up(in[i], src[i].data(), up_sizes[i]));
    }
    cases::Guarded g(down_sizes);
    std::vector<sam3d_download> downs;
    for (size_t i = 0; i < down_sizes.size(); ++i) {
        downs.push_back(rig::down(out[i], g.region(i), down_sizes[i]));
    }
    sam3d_call c{ups.data(), ups.size(), nullptr, downs.data(), downs.size(), false};
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();

    const std::vector<const void *> sets = pointers("set_async"), gets = pointers("get_async");
    ASSERT_EQ(sets.size(), up_sizes.size());
    ASSERT_EQ(gets.size(), down_sizes.size());
    const uintptr_t base = reinterpret_cast<uintptr_t>(sets[0]);
    size_t at = 0;
    for (size_t k = 0; k < up_sizes.size() + down_sizes.size(); ++k) {
        const bool is_up = k < up_sizes.size();
        const uintptr_t p = reinterpret_cast<uintptr_t>(is_up ? sets[k] : gets[k - up_sizes.size()]);
        EXPECT_EQ(p % al, 0u) << "region " << k << " is not aligned to " << al;
        EXPECT_EQ(p - base, at) << "region " << k;
        at += align_up(is_up ? up_sizes[k] : down_sizes[k - up_sizes.size()], al);
    }
    EXPECT_EQ(r.counters(s).staging_bytes, at);
    for (size_t i = 0; i < down_sizes.size(); ++i) {
        EXPECT_EQ(0, std::memcmp(g.region(i), want[i].data(), down_sizes[i])) << "output " << i;
    }
    EXPECT_EQ(g.guards_changed(), 0u);
    for (size_t i = 0; i < up_sizes.size(); ++i) {
        std::vector<uint8_t> back(up_sizes[i]);
        ggml_backend_tensor_get(in[i], back.data(), 0, up_sizes[i]);
        EXPECT_EQ(back, src[i]) << "input " << i;
    }
}

// Back-to-back calls with the same shapes use the same staging addresses with new data, and
// each call's outputs are its own.
TEST_P(Staging, BackToBackCallsReuseTheSameStagingOffsets) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    probe::record_all(r.seam());
    const int64_t n = 1001;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    std::vector<std::vector<const void *>> layouts;
    for (int call = 0; call < 3; ++call) {
        probe::reset();
        const std::vector<float> a = rig::ramp(n, static_cast<float>(call * 3)), b = rig::ramp(n, static_cast<float>(-call));
        std::vector<float> dst(n, 0.0f);
        ASSERT_EQ(cases::run(s, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
        ASSERT_EQ(dst, cases::expected(a, b)) << "call " << call;
        std::vector<const void *> layout = pointers("set_async");
        for (const void * p : pointers("get_async")) {
            layout.push_back(p);
        }
        ASSERT_EQ(layout.size(), 3u);
        layouts.push_back(layout);
    }
    EXPECT_EQ(layouts[0], layouts[1]);
    EXPECT_EQ(layouts[1], layouts[2]);
    EXPECT_EQ(r.counters(s).staging_allocations, 1u);
}

// Rule 7: with the perf logger on, uploads are drained (a synchronize) before the graph is
// enqueued; the call still ends with one final synchronize.
TEST_P(Staging, PerfLoggerDrainsUploadsBeforeCompute) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    probe::record_all(r.seam());
    r.seam().perf_logger = 1;
    cases::ScaleAdd w = cases::scale_add(r, 100);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(100, 1.0f), b = rig::ramp(100, 2.0f);
    std::vector<float> dst(100);
    ASSERT_EQ(cases::run(s, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(dst, cases::expected(a, b));
    const std::vector<std::string> want = {"set_async", "set_async", "synchronize", "compute_async", "get_async",
                                           "synchronize"};
    EXPECT_EQ(probe::names(), want);
}

// Rule 7 on the queued and zero-copy paths too: with the perf logger on, a synchronize comes
// between the uploads and compute_async of a queued copying call, a zero-copy call and a
// queued zero-copy call, and each stays exact.
TEST_P(Staging, PerfLoggerDrainsBeforeComputeOnQueuedAndZeroCopyCalls) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    probe::record_all(r.seam());
    r.seam().perf_logger = 1;
    const int64_t n = 100;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 2.0f), want = cases::expected(a, b);
    const std::vector<std::string> enqueued = {"set_async", "set_async", "synchronize", "compute_async", "get_async"};
    std::vector<std::string> completed = enqueued;
    completed.push_back("synchronize");

    std::vector<float> dst(n, -1.0f);
    sam3d_upload u[] = {rig::up(w.a, a.data(), n * 4), rig::up(w.b, b.data(), n * 4)};
    sam3d_download d[] = {rig::down(w.out, dst.data(), n * 4)};
    sam3d_call c{u, 2, w.graph, d, 1, false};
    sam3d_ticket t = 0;
    probe::reset();
    ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(probe::names(), enqueued) << "queued copying call";
    ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(dst, want);

    for (unsigned flags : {SAM3D_SUBMIT_ZERO_COPY, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED}) {
        SCOPED_TRACE(flags == SAM3D_SUBMIT_ZERO_COPY ? "zero-copy" : "queued zero-copy");
        sam3d_slot_request req[3] = {{n * 4}, {n * 4}, {n * 4}};
        void * p[3] = {nullptr, nullptr, nullptr};
        ASSERT_EQ(sam3d_session_reserve(s, req, 3, p), SAM3D_OK) << sam3d_last_error();
        std::memcpy(p[0], a.data(), n * 4);
        std::memcpy(p[1], b.data(), n * 4);
        sam3d_upload zu[] = {rig::up(w.a, p[0], n * 4), rig::up(w.b, p[1], n * 4)};
        sam3d_download zd[] = {rig::down(w.out, p[2], n * 4)};
        sam3d_call zc{zu, 2, w.graph, zd, 1, false};
        probe::reset();
        ASSERT_EQ(sam3d_session_submit(s, &zc, flags, &t), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(probe::names(), (flags & SAM3D_SUBMIT_QUEUED) ? enqueued : completed);
        if (flags & SAM3D_SUBMIT_QUEUED) {
            ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
        }
        EXPECT_EQ(0, std::memcmp(p[2], want.data(), n * 4));
    }
    EXPECT_EQ(r.counters(s).pinned_batches, 3u);
}

// Production (no perf logger): exactly one synchronize per call, after the downloads.
TEST_P(Staging, WithoutPerfLoggerEachCallSynchronizesOnce) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    probe::record_all(r.seam());
    r.seam().perf_logger = 0;
    cases::ScaleAdd w = cases::scale_add(r, 100);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(100, 1.0f), b = rig::ramp(100, 2.0f);
    std::vector<float> dst(100);
    for (int call = 0; call < 2; ++call) {
        ASSERT_EQ(cases::run(s, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
    }
    EXPECT_EQ(dst, cases::expected(a, b));
    const std::vector<std::string> one = {"set_async", "set_async", "compute_async", "get_async", "synchronize"};
    std::vector<std::string> want = one;
    want.insert(want.end(), one.begin(), one.end());
    EXPECT_EQ(probe::names(), want);
}

// The seam's drain_before_compute=0 (only for the death test) removes the drain even with the
// perf logger on.
TEST_P(Staging, DrainCanBeDisabledForTheDeathTestOnly) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    probe::record_all(r.seam());
    r.seam().perf_logger = 1;
    r.seam().drain_before_compute = 0;
    cases::ScaleAdd w = cases::scale_add(r, 100);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(100, 1.0f), b = rig::ramp(100, 2.0f);
    std::vector<float> dst(100);
    if (GetParam() == Kind::Vulkan && std::getenv("GGML_VK_PERF_LOGGER")) {
        GTEST_SKIP() << "GGML would abort (that is the PerfLoggerDeath test)";
    }
    ASSERT_EQ(cases::run(s, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
    const std::vector<std::string> want = {"set_async", "set_async", "compute_async", "get_async", "synchronize"};
    EXPECT_EQ(probe::names(), want);
}

// Rule 9: a call blocked inside the seam keeps a second thread's call out of the seam until it
// leaves; both calls' results are right.
TEST_P(Staging, ConcurrentCallsOnOneSessionAreSerialized) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    probe::record_all(r.seam());
    const int64_t n = 513;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a1 = rig::ramp(n, 1.0f), b1 = rig::ramp(n, 2.0f);
    const std::vector<float> a2 = rig::ramp(n, 300.0f), b2 = rig::ramp(n, 7.0f);
    std::vector<float> d1(n, 0.0f), d2(n, 0.0f);
    sam3d_status st1 = SAM3D_ERR_INTERNAL, st2 = SAM3D_ERR_INTERNAL;
    probe::race([&] { st1 = cases::run(s, w, a1.data(), b1.data(), d1.data()); },
                [&] { st2 = cases::run(s, w, a2.data(), b2.data(), d2.data()); }, 5);
    EXPECT_EQ(st1, SAM3D_OK);
    EXPECT_EQ(st2, SAM3D_OK);
    EXPECT_EQ(d1, cases::expected(a1, b1));
    EXPECT_EQ(d2, cases::expected(a2, b2));
    EXPECT_EQ(probe::events().size(), 10u) << "per call: 2 uploads, compute, 1 download, synchronize";
    EXPECT_EQ(r.counters(s).calls, 2u);
}

// Rule 8: enqueue_ns, synchronize_ns and copy_ns are disjoint intervals of one call, so their
// sum never exceeds the call's own span, read from the same clock (std::chrono::steady_clock)
// around it, whatever the speed. Each call copies 16 MiB of inputs into staging: an enqueue
// interval that also covered that copy would put the sum over the span by about the copy's
// time. The run path with one synchronization and with the perf-logger drain (which splits
// the enqueue interval), and a queued copying call (from its submit to the end of its wait).
TEST_P(Staging, TimeCountersAreDisjointIntervalsOfEachCall) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = int64_t(4) << 20;  // 16 MiB of F32
    const size_t down = 4096;
    ggml_tensor * in = r.f32(n, "in");
    ggml_tensor * out = ggml_scale(r.ctx(), in, 2.0f);
    ggml_cgraph * g = ggml_new_graph(r.ctx());
    ggml_build_forward_expand(g, out);
    r.alloc();
    const std::vector<float> src = rig::ramp(static_cast<size_t>(n), 3.0f);
    std::vector<float> dst(down / 4);
    sam3d_upload u[] = {rig::up(in, src.data(), static_cast<size_t>(n) * 4)};
    sam3d_download d[] = {rig::down(out, dst.data(), down)};
    const sam3d_call c{u, 1, g, d, 1, false};
    const auto now = [] {
        return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::steady_clock::now().time_since_epoch())
                                         .count());
    };
    const auto check = [&](sam3d_session * s, uint64_t span) {
        const sam3d_counters k = r.counters(s);
        EXPECT_EQ(k.pinned_batches, 1u);
        EXPECT_GT(k.copy_ns, 0u);
        EXPECT_GT(k.enqueue_ns, 0u);
        EXPECT_GT(k.synchronize_ns, 0u);
        EXPECT_LE(k.enqueue_ns + k.synchronize_ns + k.copy_ns, span)
            << "enqueue " << k.enqueue_ns << " + synchronize " << k.synchronize_ns << " + copy " << k.copy_ns;
        for (size_t i = 0; i < dst.size(); ++i) {
            ASSERT_EQ(dst[i], 2.0f * src[i]) << "at " << i;
        }
        std::fill(dst.begin(), dst.end(), -1.0f);
    };
    for (const int perf_logger : {0, 1}) {
        SCOPED_TRACE(perf_logger ? "run, perf-logger drain" : "run");
        r.seam().perf_logger = perf_logger;
        sam3d_session * s = r.session(SAM3D_BATCHING_ON);
        for (int call = 0; call < 3; ++call) {
            sam3d_session_reset_counters(s);
            const uint64_t t0 = now();
            ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
            check(s, now() - t0);
        }
    }
    SCOPED_TRACE("queued copying call");
    r.seam().perf_logger = 0;
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    for (int call = 0; call < 3; ++call) {
        sam3d_session_reset_counters(s);
        sam3d_ticket t = 0;
        const uint64_t t0 = now();
        ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK) << sam3d_last_error();
        ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
        check(s, now() - t0);
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, Staging, testing::ValuesIn(rig::staged_kinds()), rig::param_name);

namespace {

// cpu_staged's async transfers (GGML's own: a copy at once), each taking kSlowMs first: a slow
// driver call, so that each enqueue is seen in enqueue_ns.
constexpr int kSlowMs = 10;
// A lower bound of a 1 MiB memcpy's time: 5 us is 200 GB/s, more than a host's memory bandwidth,
// and far more than an empty copy's clock reads; so a copy_ns at least this holds the copy.
constexpr uint64_t kMiBCopyNs = 5000;
void slow_set_async(ggml_backend_t b, ggml_tensor * t, const void * d, size_t o, size_t n) {
    std::this_thread::sleep_for(std::chrono::milliseconds(kSlowMs));
    ggml_backend_tensor_set_async(b, t, d, o, n);
}
void slow_get_async(ggml_backend_t b, const ggml_tensor * t, void * d, size_t o, size_t n) {
    std::this_thread::sleep_for(std::chrono::milliseconds(kSlowMs));
    ggml_backend_tensor_get_async(b, t, d, o, n);
}
// The deferred queue's event wait (deferred.h), taking kSlowMs first.
void slow_event_synchronize(ggml_backend_event_t e) {
    std::this_thread::sleep_for(std::chrono::milliseconds(kSlowMs));
    deferred::event_synchronize(e);
}

}  // namespace

// Rule 8's time counters hold each phase of a staged call: every upload's and download's
// enqueue in enqueue_ns (a run of two uploads and one download, each enqueue 10 ms: at least
// 30 ms; the same queued and zero-copy), and each copy in copy_ns: the inputs' into staging (a
// call of uploads only) and the outputs' out of it (a call of downloads only, run and queued).
TEST(StagingTimes, EveryEnqueueAndEveryCopyAreCounted) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    r.seam().tensor_set_async = slow_set_async;
    r.seam().tensor_get_async = slow_get_async;
    const int64_t n = int64_t(1) << 18;  // 1 MiB of F32 per tensor
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(static_cast<size_t>(n), 1.0f), b = rig::ramp(static_cast<size_t>(n), 2.0f);
    std::vector<float> out(static_cast<size_t>(n), -1.0f);
    ASSERT_EQ(cases::run(s, w, a.data(), b.data(), out.data()), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(out, cases::expected(a, b));
    sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.pinned_batches, 1u);
    EXPECT_GE(k.enqueue_ns, uint64_t{3} * kSlowMs * 1000 * 1000) << "an upload's or the download's enqueue was not counted";
    sam3d_session_reset_counters(s);
    sam3d_upload u[] = {rig::up(w.a, a.data(), static_cast<size_t>(n) * 4)};
    const sam3d_call c{u, 1, nullptr, nullptr, 0, false};
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    k = r.counters(s);
    EXPECT_EQ(k.pinned_batches, 1u);
    EXPECT_GE(k.copy_ns, kMiBCopyNs) << "the copy of 1 MiB of inputs into staging was not counted";
    EXPECT_GE(k.enqueue_ns, uint64_t{kSlowMs} * 1000 * 1000);
    sam3d_session_reset_counters(s);
    std::vector<float> back(static_cast<size_t>(n), -1.0f);
    sam3d_download d[] = {rig::down(w.a, back.data(), static_cast<size_t>(n) * 4)};
    const sam3d_call c2{nullptr, 0, nullptr, d, 1, false};
    ASSERT_EQ(sam3d_session_run(s, &c2), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(back, a);
    EXPECT_GE(r.counters(s).copy_ns, kMiBCopyNs) << "the copy of 1 MiB of outputs out of staging was not counted";
    // Queued: the uploads' enqueue, then the graph's and the download's with the completion
    // event, all in enqueue_ns.
    sam3d_session_reset_counters(s);
    std::fill(out.begin(), out.end(), -1.0f);
    sam3d_ticket t = 0;
    ASSERT_EQ(cases::submit(s, w, a.data(), b.data(), out.data(), SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK)
        << sam3d_last_error();
    ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(out, cases::expected(a, b));
    EXPECT_GE(r.counters(s).enqueue_ns, uint64_t{3} * kSlowMs * 1000 * 1000)
        << "a queued call's upload or download enqueue was not counted";
    // Zero-copy, complete on return: its uploads' enqueue, then the graph's and the download's.
    sam3d_session_reset_counters(s);
    cases::Slots sl = cases::reserve_scale_add(s, w);
    std::memcpy(sl.a, a.data(), static_cast<size_t>(n) * 4);
    std::memcpy(sl.b, b.data(), static_cast<size_t>(n) * 4);
    ASSERT_EQ(cases::submit_scale_add(s, w, sl, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(std::vector<float>(sl.out, sl.out + n), cases::expected(a, b));
    EXPECT_GE(r.counters(s).enqueue_ns, uint64_t{3} * kSlowMs * 1000 * 1000)
        << "a zero-copy call's upload or download enqueue was not counted";
    // Queued, downloads only: the output copy at the wait is in copy_ns.
    sam3d_session_reset_counters(s);
    std::fill(back.begin(), back.end(), -1.0f);
    ASSERT_EQ(sam3d_session_submit(s, &c2, SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(back, a);
    EXPECT_GE(r.counters(s).copy_ns, kMiBCopyNs) << "the copy of a queued call's 1 MiB of outputs at its wait was not counted";
}

namespace {

ggml_status slow_failing_compute(ggml_backend_t, ggml_cgraph *) {
    std::this_thread::sleep_for(std::chrono::milliseconds(kSlowMs));
    return GGML_STATUS_FAILED;
}

}  // namespace

// A graph that fails after 10 ms in its enqueue (graph_compute_async returns
// GGML_STATUS_FAILED): the failed call keeps that enqueue time in enqueue_ns (rule 8).
TEST(StagingTimes, AFailedGraphsEnqueueIsCounted) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    r.seam().graph_compute_async = slow_failing_compute;
    const int64_t n = 64;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 2.0f);
    std::vector<float> out(n, -1.0f);
    ASSERT_EQ(cases::run(s, w, a.data(), b.data(), out.data()), SAM3D_ERR_COMPUTE);
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.failed_calls, 1u);
    EXPECT_GE(k.enqueue_ns, uint64_t{kSlowMs} * 1000 * 1000) << "the failed graph's enqueue was not counted";
}

// The same for a run's output pieces (rule 2): the wait for a piece's event is in
// synchronize_ns (one wait of 10 ms) and the copy-out of that piece in copy_ns. Downloads only,
// a first piece of 1 MiB and a last of 64 bytes: the first piece's copy (tens of microseconds)
// is most of copy_ns, the rest is the 64 bytes after the synchronize.
TEST(StagingTimes, APiecesWaitAndCopyOutAreCounted) {
    deferred::reset();
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    deferred::install_with_events(r.seam());
    r.seam().event_synchronize = slow_event_synchronize;
    const size_t big = size_t(1) << 20, small = 64;
    ggml_tensor * tb = r.bytes(static_cast<int64_t>(big), "big");
    r.bytes(64, "apart");
    ggml_tensor * ts = r.bytes(static_cast<int64_t>(small), "small");
    r.alloc();
    const std::vector<uint8_t> want_b = rig::pattern(big, 1), want_s = rig::pattern(small, 2);
    ggml_backend_tensor_set(tb, want_b.data(), 0, big);
    ggml_backend_tensor_set(ts, want_s.data(), 0, small);
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = SAM3D_BATCHING_ON;
    o.staging_piece_bytes = big;
    sam3d_session * s = r.session(o);
    std::vector<uint8_t> got_b(big), got_s(small);
    sam3d_download d[] = {rig::down(tb, got_b.data(), big), rig::down(ts, got_s.data(), small)};
    const sam3d_call c{nullptr, 0, nullptr, d, 2, false};
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(got_b, want_b);
    EXPECT_EQ(got_s, want_s);
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.event_synchronizes, 1u) << "one event, after the first of two pieces";
    EXPECT_GE(k.synchronize_ns, uint64_t{kSlowMs} * 1000 * 1000) << "the piece's event wait was not counted";
    EXPECT_GE(k.copy_ns, kMiBCopyNs) << "the copy-out of the 1 MiB piece was not counted";
    deferred::reset();
}

// Rule 6: device props and the host buffer type are read once per session, not per call.
TEST(Capabilities, AreReadOncePerSessionNotPerCall) {
    probe::reset();
    Rig r(Kind::CpuStaged);
    r.seam().dev_get_props = probe::props_counting;
    r.seam().dev_host_buffer_type = probe::host_buft_counting;
    cases::ScaleAdd w = cases::scale_add(r, 64);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    EXPECT_EQ(probe::get().props_calls, 1);
    EXPECT_EQ(probe::get().host_buft_calls, 1);
    const std::vector<float> a = rig::ramp(64, 1.0f), b = rig::ramp(64, 2.0f);
    std::vector<float> dst(64);
    for (int call = 0; call < 20; ++call) {
        ASSERT_EQ(cases::run(s, w, a.data(), b.data(), dst.data(), call % 5 == 0), SAM3D_OK) << sam3d_last_error();
    }
    EXPECT_EQ(r.counters(s).pinned_batches, 16u);
    EXPECT_EQ(probe::get().props_calls, 1);
    EXPECT_EQ(probe::get().host_buft_calls, 1);
    sam3d_session * s2 = r.session(SAM3D_BATCHING_ON);
    ASSERT_EQ(cases::run(s2, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(probe::get().props_calls, 2) << "a second session reads them once more";
    EXPECT_EQ(probe::get().host_buft_calls, 2);
}

// Rule 7's variable is read at session creation when the seam's perf_logger flag is -1 (GGML's
// behaviour); a flag at 0 (a zeroed seam) means "unset" whatever the environment says.
TEST(SeamPerfLoggerFlag, VariableIsReadAtSessionCreationWhenTheFlagIsNegative) {
    const char * old = std::getenv("GGML_VK_PERF_LOGGER");
    const std::string saved = old ? old : "";
    Rig r(Kind::CpuStaged);
    probe::record_all(r.seam());
    cases::ScaleAdd w = cases::scale_add(r, 64);
    r.alloc();
    setenv("GGML_VK_PERF_LOGGER", "1", 1);
    r.seam().perf_logger = -1;
    sam3d_session * from_env = r.session(SAM3D_BATCHING_ON);
    r.seam().perf_logger = 0;
    sam3d_session * zero_flag = r.session(SAM3D_BATCHING_ON);
    unsetenv("GGML_VK_PERF_LOGGER");
    r.seam().perf_logger = -1;
    sam3d_session * unset = r.session(SAM3D_BATCHING_ON);
    if (old) {
        setenv("GGML_VK_PERF_LOGGER", saved.c_str(), 1);
    }
    const std::vector<float> a = rig::ramp(64, 1.0f), b = rig::ramp(64, 2.0f);
    std::vector<float> dst(64);
    const std::vector<std::string> drained = {"set_async", "set_async", "synchronize", "compute_async", "get_async",
                                              "synchronize"};
    const std::vector<std::string> once = {"set_async", "set_async", "compute_async", "get_async", "synchronize"};
    probe::reset();
    ASSERT_EQ(cases::run(from_env, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(probe::names(), drained) << "variable set at creation, read although unset since";
    probe::reset();
    ASSERT_EQ(cases::run(zero_flag, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(probe::names(), once);
    probe::reset();
    ASSERT_EQ(cases::run(unset, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(probe::names(), once);
    EXPECT_EQ(dst, cases::expected(a, b));
}
