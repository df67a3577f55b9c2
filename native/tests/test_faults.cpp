// Rule 5: a call that fails after submission completes its outstanding work before returning,
// leaves the caller's outputs untouched, is counted, and the session recovers exactly.
#include <atomic>

#include "cases.h"
#include "probe.h"
#include "rig.h"

using rig::Kind;
using rig::Rig;

namespace {

std::atomic<bool> g_abort{false};
bool abort_when_asked(void *) { return g_abort.load(); }

// Makes graph compute fail on `r`: the CPU backend's abort callback on CPU kinds (real GGML
// failure path), the seam's compute entries on the GPU backends.
void arm_compute_failure(Rig & r) {
    if (rig::is_gpu(r.kind())) {
        probe::record_all(r.seam());
    } else {
        ggml_backend_cpu_set_abort_callback(r.backend(), abort_when_asked, nullptr);
    }
}
void fail_compute(Rig & r, bool fail) {
    if (rig::is_gpu(r.kind())) {
        probe::set_fail_compute(fail);
    } else {
        g_abort = fail;
    }
}

}  // namespace

class Faults : public testing::TestWithParam<Kind> {
   protected:
    void SetUp() override {
        probe::reset();
        g_abort = false;
    }
};

TEST_P(Faults, FailedComputeLeavesOutputsUntouchedAndNextCallIsExact) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    arm_compute_failure(r);
    const int64_t n = 999;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 6.0f);
    for (sam3d_batching mode : {SAM3D_BATCHING_ON, SAM3D_BATCHING_OFF}) {
        SCOPED_TRACE(mode == SAM3D_BATCHING_ON ? "batching on" : "batching off");
        sam3d_session * s = r.session(mode);
        cases::Guarded g({n * 4});
        const std::vector<uint8_t> before = g.all();
        sam3d_upload ups[] = {rig::up(w.a, a.data(), n * 4), rig::up(w.b, b.data(), n * 4)};
        sam3d_download downs[] = {rig::down(w.out, g.region(0), n * 4)};
        sam3d_call c{ups, 2, w.graph, downs, 1, false};
        fail_compute(r, true);
        EXPECT_EQ(sam3d_session_run(s, &c), SAM3D_ERR_COMPUTE);
        EXPECT_CONTAINS(sam3d_last_error(), "graph compute returned");
        EXPECT_EQ(g.all(), before) << "outputs written by a failed call";
        // Rule 8: a call failing after submission keeps its one per-call count (a pinned batch
        // on the staged path, its fallback on the synchronous one) and counts no transfer.
        const bool staged = mode == SAM3D_BATCHING_ON && GetParam() != Kind::Cpu;
        const bool fell_back = mode == SAM3D_BATCHING_ON && GetParam() == Kind::Cpu;
        sam3d_counters k = r.counters(s);
        EXPECT_EQ(k.calls, 1u);
        EXPECT_EQ(k.failed_calls, 1u);
        EXPECT_EQ(k.rejected_calls, 0u);
        EXPECT_EQ(k.pinned_batches, staged ? 1u : 0u);
        cases::expect_fallbacks(k, SAM3D_FALLBACK_NO_ASYNC_CAPS, fell_back ? 1u : 0u);
        EXPECT_EQ(k.async_uploads + k.sync_uploads + k.async_downloads + k.sync_downloads, 0u);
        EXPECT_EQ(k.bytes_uploaded, 0u);
        EXPECT_EQ(k.bytes_downloaded, 0u);

        fail_compute(r, false);
        ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
        std::vector<float> got(n);
        std::memcpy(got.data(), g.region(0), n * 4);
        EXPECT_EQ(got, cases::expected(a, b));
        EXPECT_EQ(g.guards_changed(), 0u);
        k = r.counters(s);
        EXPECT_EQ(k.calls, 2u);
        EXPECT_EQ(k.failed_calls, 1u);
        EXPECT_EQ(k.bytes_downloaded, n * 4u);
        EXPECT_EQ(k.pinned_batches, staged ? 2u : 0u);
        cases::expect_fallbacks(k, SAM3D_FALLBACK_NO_ASYNC_CAPS, fell_back ? 2u : 0u);
    }
}

// The caller frees its host inputs and outputs, the tensors' buffer and context right after a
// failed call (rule 5 allows it); ASan reports any later access, and the session goes on with
// new tensors.
TEST_P(Faults, CallerMayFreeEverythingRightAfterAFailedCall) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    arm_compute_failure(r);
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const int64_t n = 4099;
    for (int round = 0; round < 2; ++round) {
        ggml_init_params p = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true};
        ggml_context * ctx = ggml_init(p);
        const cases::ScaleAdd w = cases::scale_add(ctx, n);
        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, r.backend());
        ASSERT_NE(buf, nullptr);
        auto * in_a = new float[n];
        auto * in_b = new float[n];
        auto * dst = new float[n];
        for (int64_t i = 0; i < n; ++i) {
            in_a[i] = static_cast<float>(i % 100);
            in_b[i] = static_cast<float>(round);
            dst[i] = -1.0f;
        }
        sam3d_upload ups[] = {rig::up(w.a, in_a, n * 4), rig::up(w.b, in_b, n * 4)};
        sam3d_download downs[] = {rig::down(w.out, dst, n * 4)};
        sam3d_call c{ups, 2, w.graph, downs, 1, false};
        const bool fail = round == 0;
        fail_compute(r, fail);
        const sam3d_status st = sam3d_session_run(s, &c);
        EXPECT_EQ(st, fail ? SAM3D_ERR_COMPUTE : SAM3D_OK) << sam3d_last_error();
        if (!fail) {
            for (int64_t i = 0; i < n; ++i) {
                ASSERT_EQ(dst[i], 2.0f * static_cast<float>(i % 100) + static_cast<float>(round)) << i;
            }
        } else {
            EXPECT_EQ(dst[0], -1.0f);
            EXPECT_EQ(dst[n - 1], -1.0f);
        }
        delete[] in_a;
        delete[] in_b;
        delete[] dst;
        ggml_backend_buffer_free(buf);
        ggml_free(ctx);
    }
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.failed_calls, 1u);
    EXPECT_EQ(k.calls, 2u);
}

INSTANTIATE_TEST_SUITE_P(Backends, Faults, testing::ValuesIn(rig::kinds()), rig::param_name);

// On the staged path, uploads already enqueued are drained (a synchronize after the failed
// graph_compute_async) before the call returns, and no download is enqueued.
TEST(FaultsStaged, FailedComputeDrainsUploadsBeforeReturning) {
    probe::reset();
    Rig r(Kind::CpuStaged);
    probe::record_all(r.seam());
    r.seam().perf_logger = 0;
    cases::ScaleAdd w = cases::scale_add(r, 256);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(256, 1.0f), b = rig::ramp(256, 2.0f);
    std::vector<float> dst(256, -3.0f);
    probe::set_fail_compute(true);
    EXPECT_EQ(cases::run(s, w, a.data(), b.data(), dst.data()), SAM3D_ERR_COMPUTE);
    EXPECT_CONTAINS(sam3d_last_error(), "uploads were completed before returning");
    const std::vector<std::string> want = {"set_async", "set_async", "compute_async", "synchronize"};
    EXPECT_EQ(probe::names(), want);
    EXPECT_EQ(dst, std::vector<float>(256, -3.0f));
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.failed_calls, 1u);
    EXPECT_EQ(k.async_uploads, 0u) << "a failed call's transfers are not counted as done";
    EXPECT_GT(k.synchronize_ns, 0u);
}

// With the perf-logger drain on, a failed compute still ends with a synchronize after it.
TEST(FaultsStaged, FailedComputeAfterPerfLoggerDrainStillSynchronizes) {
    probe::reset();
    Rig r(Kind::CpuStaged);
    probe::record_all(r.seam());
    r.seam().perf_logger = 1;
    cases::ScaleAdd w = cases::scale_add(r, 64);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(64, 1.0f), b = rig::ramp(64, 2.0f);
    std::vector<float> dst(64, -3.0f);
    probe::set_fail_compute(true);
    EXPECT_EQ(cases::run(s, w, a.data(), b.data(), dst.data()), SAM3D_ERR_COMPUTE);
    const std::vector<std::string> want = {"set_async", "set_async", "synchronize", "compute_async", "synchronize"};
    EXPECT_EQ(probe::names(), want);
    EXPECT_EQ(dst, std::vector<float>(64, -3.0f));
}

// The synchronous path (batching off) reports a failed graph_compute through the seam and
// downloads nothing.
TEST(FaultsSync, FailedComputeOnTheSynchronousPathDownloadsNothing) {
    probe::reset();
    Rig r(Kind::Cpu);
    probe::record_all(r.seam());
    cases::ScaleAdd w = cases::scale_add(r, 64);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_OFF);
    const std::vector<float> a = rig::ramp(64, 1.0f), b = rig::ramp(64, 2.0f);
    std::vector<float> dst(64, -3.0f);
    probe::set_fail_compute(true);
    EXPECT_EQ(cases::run(s, w, a.data(), b.data(), dst.data()), SAM3D_ERR_COMPUTE);
    const std::vector<std::string> want = {"set", "set", "compute"};
    EXPECT_EQ(probe::names(), want);
    EXPECT_EQ(dst, std::vector<float>(64, -3.0f));
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.failed_calls, 1u);
    EXPECT_EQ(k.sync_uploads, 0u);
    probe::set_fail_compute(false);
    ASSERT_EQ(cases::run(s, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(dst, cases::expected(a, b));
}
