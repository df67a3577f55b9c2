// Rule 11 (docs/contract.md, "Duplex") on the deferred seam's two queues, cases the rule's text
// names that a call sequence of one or two calls does not reach: the write-after-read edge of a
// later call's uploads over every outstanding duplex call's download runs (not only the newest
// call's, not only a first run, at the bytes' own offsets, down to one byte of overlap), a graph
// without uploads, the wait of an older duplex call, the session's free with duplex calls
// outstanding, the second backend's events given back, a failed call's count, and where no second
// backend is made.
// The session's device is named CUDA (probe::reg_name_override): one in-order queue per backend
// (A6 enqueues no wait before uploads) and AUTO makes the second backend, so only rule 11's own
// edges order the two queues. The second queue runs only when a synchronize, an event or a wait
// needs it (deferred::g_second_first false), so a download an edge does not order before a write
// reads the written bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "deferred.h"
#include "probe.h"
#include "rig.h"

using rig::Kind;
using rig::Rig;

namespace {

struct DuplexEdges : ::testing::Test {
    void SetUp() override {
        deferred::reset();
        probe::reset();
        probe::get().reg_name_result = "CUDA";
    }
    void TearDown() override {
        deferred::reset();
        probe::reset();
    }

    // A duplex session on r (its seam: the deferred queues with events, the registry named CUDA).
    static sam3d_session * duplex_session(Rig & r) {
        deferred::install_with_events(r.seam());
        r.seam().reg_name = probe::reg_name_override;
        sam3d_session_options o = sam3d_session_default_options();
        o.batching = SAM3D_BATCHING_ON;
        o.duplex = SAM3D_DUPLEX_AUTO;  // the registry is CUDA's: AUTO makes it
        sam3d_session * s = r.session(o);
        EXPECT_TRUE(s != nullptr && sam3d_session_duplex(s)) << "the case needs a second backend";
        return s;
    }

    // x = 2a, 64 floats each, allocated on r: a graph that writes x.
    struct ScaleInto {
        ggml_tensor * a, * x;
        ggml_cgraph * g;
    };
    static ScaleInto scale_into(Rig & r) {
        ScaleInto k{r.f32(64, "a"), r.f32(64, "x"), ggml_new_graph(r.ctx())};
        ggml_build_forward_expand(k.g, ggml_cpy(r.ctx(), ggml_scale(r.ctx(), k.a, 2.0f), k.x));
        r.alloc();
        return k;
    }

    static sam3d_ticket queued(sam3d_session * s, const std::vector<sam3d_upload> & ups, ggml_cgraph * graph,
                               const std::vector<sam3d_download> & downs) {
        sam3d_call c{ups.data(), ups.size(), graph, downs.data(), downs.size(), false};
        sam3d_ticket t = 0;
        EXPECT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK) << sam3d_last_error();
        return t;
    }
};

std::vector<uint8_t> slice(const std::vector<uint8_t> & v, size_t begin, size_t n) {
    return std::vector<uint8_t>(v.begin() + static_cast<std::ptrdiff_t>(begin),
                                v.begin() + static_cast<std::ptrdiff_t>(begin + n));
}

// "the call's uploads wait for the newest duplex call not known complete when an upload run ...
// writes device bytes that such a call's download runs read": such a call is any outstanding
// duplex call, here the middle one of three; the bytes it reads are its second download run, at
// an offset; the upload that overwrites them is the call's second upload run, at an offset. The
// downloads read the bytes from before the upload.
TEST_F(DuplexEdges, UploadsWaitForTheDownloadsOfEveryOutstandingDuplexCallThatReadTheirBytes) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    ggml_tensor * p = r.bytes(1024, "p");
    ggml_tensor * x = r.bytes(1024, "x");
    ggml_tensor * y = r.bytes(1024, "y");
    ggml_tensor * z = r.bytes(1024, "z");
    r.alloc();
    const std::vector<uint8_t> before = rig::pattern(1024, 1), after = rig::pattern(1024, 2);
    for (ggml_tensor * t : {p, x, y, z}) {
        ggml_backend_tensor_set(t, before.data(), 0, before.size());
    }
    sam3d_session * s = duplex_session(r);
    ASSERT_NE(s, nullptr);
    std::vector<uint8_t> a_y(256), b_p(256), b_x(256), d_z(256);
    const sam3d_ticket a = queued(s, {}, nullptr, {rig::down(y, a_y.data(), 256)});
    const sam3d_ticket b = queued(s, {}, nullptr, {rig::down(p, b_p.data(), 256), rig::down(x, b_x.data(), 256, 512)});
    const sam3d_ticket d = queued(s, {}, nullptr, {rig::down(z, d_z.data(), 256)});
    // y's bytes 900.. are nobody's read; x's 600..700 are b's second download run's.
    const sam3d_ticket c = queued(s, {rig::up(y, after.data() + 900, 100, 900), rig::up(x, after.data() + 600, 100, 600)},
                                  nullptr, {});
    for (sam3d_ticket t : {c, a, b, d}) {  // the upload's call first: its wait runs the session's backend first
        EXPECT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
    }
    EXPECT_EQ(b_x, slice(before, 512, 256)) << "a later call's upload overwrote bytes before an earlier duplex call's download read them";
    EXPECT_EQ(b_p, slice(before, 0, 256));
    std::vector<uint8_t> x_now(100);
    ggml_backend_tensor_get(x, x_now.data(), 600, 100);
    EXPECT_EQ(x_now, slice(after, 600, 100)) << "the upload itself";
}

// The same edge where the upload meets the download's bytes in one byte: its last byte, then its
// first.
TEST_F(DuplexEdges, AnUploadOverlappingADownloadInOneByteWaitsForIt) {
    struct Case {
        size_t offset, size;  // the upload's bytes of x; the download reads x's bytes 512..768
    };
    for (const Case k : {Case{767, 1}, Case{500, 13}}) {
        SCOPED_TRACE("upload at " + std::to_string(k.offset) + " of " + std::to_string(k.size) + " bytes");
        deferred::reset();
        Rig r(Kind::CpuStaged);
        RIG_REQUIRE(r);
        ggml_tensor * x = r.bytes(1024, "x");
        r.alloc();
        const std::vector<uint8_t> before = rig::pattern(1024, 3), after = rig::pattern(1024, 4);
        ggml_backend_tensor_set(x, before.data(), 0, before.size());
        sam3d_session * s = duplex_session(r);
        ASSERT_NE(s, nullptr);
        std::vector<uint8_t> got(256);
        const sam3d_ticket a = queued(s, {}, nullptr, {rig::down(x, got.data(), 256, 512)});
        const sam3d_ticket c = queued(s, {rig::up(x, after.data() + k.offset, k.size, k.offset)}, nullptr, {});
        EXPECT_EQ(sam3d_session_wait(s, c), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(sam3d_session_wait(s, a), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(got, slice(before, 512, 256));
    }
}

// "the call's graph waits for the newest duplex call not known complete": also a graph with no
// uploads before it.
TEST_F(DuplexEdges, AGraphWithoutUploadsWaitsForEarlierDownloadsOfWhatItWrites) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    const auto [a, x, g] = scale_into(r);
    const std::vector<float> av = rig::ramp(64, 1.0f), xv = rig::ramp(64, 500.0f);
    ggml_backend_tensor_set(a, av.data(), 0, 256);
    ggml_backend_tensor_set(x, xv.data(), 0, 256);
    sam3d_session * s = duplex_session(r);
    ASSERT_NE(s, nullptr);
    std::vector<float> got(64, -1.0f);
    const sam3d_ticket t1 = queued(s, {}, nullptr, {rig::down(x, got.data(), 256)});
    const sam3d_ticket t2 = queued(s, {}, g, {});
    EXPECT_EQ(sam3d_session_wait(s, t2), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_wait(s, t1), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(got, xv) << "the graph overwrote x before the earlier call's download read it";
}

// "calls still complete in submission order (an older call's event reports every call before it
// complete)": the wait of an older duplex call, while a later one is outstanding, finds its own
// downloads done.
TEST_F(DuplexEdges, TheWaitOfAnOlderDuplexCallFindsItsDownloadsDone) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    ggml_tensor * x = r.f32(64, "x");
    ggml_tensor * y = r.f32(64, "y");
    r.alloc();
    const std::vector<float> xv = rig::ramp(64, 7.0f), yv = rig::ramp(64, 9.0f);
    sam3d_session * s = duplex_session(r);
    ASSERT_NE(s, nullptr);
    std::vector<float> got(64, -1.0f), other(64, -1.0f);
    const sam3d_ticket t1 = queued(s, {rig::up(x, xv.data(), 256)}, nullptr, {rig::down(x, got.data(), 256)});
    const sam3d_ticket t2 = queued(s, {rig::up(y, yv.data(), 256)}, nullptr, {rig::down(y, other.data(), 256)});
    EXPECT_EQ(sam3d_session_wait(s, t1), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(got, xv);
    EXPECT_EQ(sam3d_session_wait(s, t2), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(other, yv);
}

// "A wait of the newest call, a drain (rules 5, 7) and the session's free synchronize both
// backends", A7: a session freed with duplex calls outstanding leaves no work of either backend
// behind (its staging and the second backend are freed after), and frees the second backend once.
TEST_F(DuplexEdges, FreeWithDuplexCallsOutstandingCompletesBothBackends) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    ggml_tensor * x = r.f32(64, "x");
    r.alloc();
    const std::vector<float> xv = rig::ramp(64, 7.0f);
    sam3d_session * s = duplex_session(r);
    ASSERT_NE(s, nullptr);
    std::vector<float> got(64, -1.0f);
    queued(s, {rig::up(x, xv.data(), 256)}, nullptr, {rig::down(x, got.data(), 256)});
    queued(s, {}, nullptr, {rig::down(x, got.data(), 256)});
    r.free_sessions();
    EXPECT_EQ(deferred::pending(), 0u) << "work of the session was still queued when it was freed";
    EXPECT_EQ(deferred::g_dev_inits, 1);
    EXPECT_EQ(deferred::g_backend_frees, 1);
}

// The session's events, both of a duplex call's (its completion and its handoff), are freed with
// it: after calls waited (their events back in the pool), calls never waited, and a call whose
// event record threw (rule 5: the error after submission).
TEST_F(DuplexEdges, EveryEventOfADuplexSessionIsFreedWithIt) {
    enum What { Waited, Outstanding, Threw };
    for (const What what : {Waited, Outstanding, Threw}) {
        SCOPED_TRACE(what == Waited ? "waited" : what == Outstanding ? "outstanding" : "threw");
        deferred::reset();
        Rig r(Kind::CpuStaged);
        RIG_REQUIRE(r);
        ggml_tensor * x = r.f32(64, "x");
        r.alloc();
        const std::vector<float> xv = rig::ramp(64, 7.0f);
        sam3d_session * s = duplex_session(r);
        ASSERT_NE(s, nullptr);
        std::vector<float> got(64, -1.0f);
        sam3d_upload u = rig::up(x, xv.data(), 256);
        sam3d_download d = rig::down(x, got.data(), 256);
        sam3d_call c{&u, 1, nullptr, &d, 1, false};
        for (int i = 0; i < 3; ++i) {
            sam3d_ticket t = 0;
            deferred::g_throw_event_record = what == Threw;
            const sam3d_status st = sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &t);
            deferred::g_throw_event_record = false;
            if (what == Threw) {
                EXPECT_EQ(st, SAM3D_ERR_INTERNAL);
                continue;
            }
            ASSERT_EQ(st, SAM3D_OK) << sam3d_last_error();
            if (what == Waited) {
                EXPECT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
            }
        }
        r.free_sessions();
        EXPECT_GT(deferred::g_events_new, 0);
        EXPECT_EQ(deferred::g_events_free, deferred::g_events_new);
    }
}

// duplex_calls counts "queued calls whose downloads ran on the session's second backend"
// (transfer.h): a queued call whose compute failed ran none (rule 8: it counts calls and
// failed_calls, and none of its transfers).
TEST_F(DuplexEdges, AQueuedCallWhoseComputeFailedCountsNoDuplexCall) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    const auto [a, x, g] = scale_into(r);
    sam3d_session * s = duplex_session(r);
    ASSERT_NE(s, nullptr);
    const std::vector<float> av = rig::ramp(64, 1.0f);
    std::vector<float> got(64, -1.0f);
    probe::get().fail_compute = true;
    const sam3d_ticket t = queued(s, {rig::up(a, av.data(), 256)}, g, {rig::down(x, got.data(), 256)});
    probe::get().fail_compute = false;
    EXPECT_EQ(sam3d_session_wait(s, t), SAM3D_ERR_COMPUTE);
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.calls, 1u);
    EXPECT_EQ(k.failed_calls, 1u);
    EXPECT_EQ(k.async_downloads, 0u);
    EXPECT_EQ(k.duplex_calls, 0u) << "a call whose downloads never ran counted as a duplex call";
}

void props_events_without_host_buffer(ggml_backend_dev_t dev, ggml_backend_dev_props * props) {
    deferred::props_with_events(dev, props);
    props->caps.host_buffer = false;
}

// "it is made only where a queued call can batch (batching on, no fallback decided at creation)":
// ON on a device with events whose calls fall back (no_async_caps) makes no second backend.
TEST_F(DuplexEdges, OnMakesNoSecondBackendWhereEveryCallFallsBack) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    deferred::install_with_events(r.seam());
    r.seam().dev_get_props = props_events_without_host_buffer;
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = SAM3D_BATCHING_ON;
    o.duplex = SAM3D_DUPLEX_ON;
    sam3d_session * s = r.session(o);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(sam3d_session_static_fallback(s), SAM3D_FALLBACK_NO_ASYNC_CAPS);
    EXPECT_FALSE(sam3d_session_duplex(s));
    EXPECT_EQ(deferred::g_dev_inits, 0);
}

}  // namespace
