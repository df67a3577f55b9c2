// GGML_VK_PERF_LOGGER cases (rule 7), Vulkan only. They run as their own CTest processes with
// GGML_VK_PERF_LOGGER=1 (GGML reads it once, when the Vulkan instance starts) and are kept
// out of plain test discovery (the PerfLogger* prefix): without the variable they fail.
#ifdef SAM3D_VULKAN
#include "cases.h"
#include "probe.h"
#include "rig.h"

using rig::Kind;
using rig::Rig;

#define REQUIRE_PERF_LOGGER()                                                                          \
    ASSERT_NE(std::getenv("GGML_VK_PERF_LOGGER"), nullptr) << "run through CTest: needs GGML_VK_PERF_LOGGER"

// With the logger on, the staged path drains uploads before compute (read from the
// environment at session creation), GGML does not abort, and results match batching off.
TEST(PerfLogger, StagedPathDrainsAndStaysExact) {
    REQUIRE_PERF_LOGGER();
    probe::reset();
    Rig r(Kind::Vulkan);
    RIG_REQUIRE(r);
    probe::record_all(r.seam());  // perf_logger = -1: read GGML_VK_PERF_LOGGER
    const int64_t n = 4096;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * on = r.session(SAM3D_BATCHING_ON);
    sam3d_session * off = r.session(SAM3D_BATCHING_OFF);
    for (int call = 0; call < 4; ++call) {
        const std::vector<float> a = rig::ramp(n, static_cast<float>(call)), b = rig::ramp(n, 9.0f);
        std::vector<float> d_on(n, 0.0f), d_off(n, 1.0f);
        probe::reset();
        ASSERT_EQ(cases::run(on, w, a.data(), b.data(), d_on.data()), SAM3D_OK) << sam3d_last_error();
        const std::vector<std::string> want = {"set_async", "set_async", "synchronize", "compute_async", "get_async",
                                               "synchronize"};
        EXPECT_EQ(probe::names(), want);
        ASSERT_EQ(cases::run(off, w, a.data(), b.data(), d_off.data()), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(0, std::memcmp(d_on.data(), d_off.data(), n * 4));
        EXPECT_EQ(d_on, cases::expected(a, b));
    }
    EXPECT_EQ(r.counters(on).pinned_batches, 4u);
}

// The same on the queued and zero-copy paths: a queued copying call and a queued zero-copy call
// drain before compute (GGML would abort otherwise) and match batching off.
TEST(PerfLogger, QueuedAndZeroCopyCallsDrainAndStayExact) {
    REQUIRE_PERF_LOGGER();
    probe::reset();
    Rig r(Kind::Vulkan);
    RIG_REQUIRE(r);
    probe::record_all(r.seam());
    const int64_t n = 4096;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(n, 3.0f), b = rig::ramp(n, 4.0f), want = cases::expected(a, b);
    const std::vector<std::string> enqueued = {"set_async", "set_async", "synchronize", "compute_async", "get_async"};
    std::vector<float> dst(n, -1.0f);
    sam3d_upload u[] = {rig::up(w.a, a.data(), n * 4), rig::up(w.b, b.data(), n * 4)};
    sam3d_download d[] = {rig::down(w.out, dst.data(), n * 4)};
    sam3d_call c{u, 2, w.graph, d, 1, false};
    sam3d_ticket t = 0;
    probe::reset();
    ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(probe::names(), enqueued);
    ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(dst, want);
    sam3d_slot_request req[3] = {{n * 4}, {n * 4}, {n * 4}};
    void * p[3] = {nullptr, nullptr, nullptr};
    ASSERT_EQ(sam3d_session_reserve(s, req, 3, p), SAM3D_OK) << sam3d_last_error();
    std::memcpy(p[0], a.data(), n * 4);
    std::memcpy(p[1], b.data(), n * 4);
    sam3d_upload zu[] = {rig::up(w.a, p[0], n * 4), rig::up(w.b, p[1], n * 4)};
    sam3d_download zd[] = {rig::down(w.out, p[2], n * 4)};
    sam3d_call zc{zu, 2, w.graph, zd, 1, false};
    probe::reset();
    ASSERT_EQ(sam3d_session_submit(s, &zc, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK)
        << sam3d_last_error();
    EXPECT_EQ(probe::names(), enqueued);
    ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(0, std::memcmp(p[2], want.data(), n * 4));
    EXPECT_EQ(r.counters(s).pinned_batches, 2u);
}

// Without the drain (seam drain_before_compute = 0), async uploads are still open when graph
// compute starts and GGML aborts: GGML_ASSERT(ctx->compute_ctx.expired()).
TEST(PerfLoggerDeath, WithoutDrainGgmlAbortsOnOpenUploads) {
    REQUIRE_PERF_LOGGER();
#ifdef GTEST_FLAG_SET
    GTEST_FLAG_SET(death_test_style, "threadsafe");
#else
    testing::GTEST_FLAG(death_test_style) = "threadsafe";
#endif
    auto run_without_drain = [] {
        Rig r(Kind::Vulkan);
        if (!r.ok()) {
            std::exit(0);  // no device: the death expectation fails
        }
        r.seam().drain_before_compute = 0;
        cases::ScaleAdd w = cases::scale_add(r, 1024);
        r.alloc();
        sam3d_session * s = r.session(SAM3D_BATCHING_ON);
        const std::vector<float> a = rig::ramp(1024, 1.0f), b = rig::ramp(1024, 2.0f);
        std::vector<float> d(1024);
        cases::run(s, w, a.data(), b.data(), d.data());
        std::exit(0);  // reached only if GGML did not abort
    };
    EXPECT_DEATH(run_without_drain(), "compute_ctx.expired\\(\\)");
}
#endif
