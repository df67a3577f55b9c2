// Duplex (docs/contract.md, rule 11): a queued call's downloads on a second backend of the
// session's device. Which sessions have it; each ordering edge of the two queues, on the deferred
// seam's two queues (sam3d_deferred.h), in the order of the two that shows a dropped edge as
// wrong bytes; the counters; and the bytes on the real backends, duplex on and off.
#include <cstring>

#include "cases.h"
#include "deferred.h"
#include "probe.h"
#include "rig.h"

using rig::Kind;
using rig::Rig;

namespace {

constexpr int64_t kN = 513;
constexpr size_t kBytes = kN * sizeof(float);

// One scale-add call's operands (ramps from `a0` and `b0`) and its output, cleared to -1.
struct Operands {
    std::vector<float> a, b, out;
    Operands(float a0, float b0) : a(rig::ramp(kN, a0)), b(rig::ramp(kN, b0)), out(kN, -1.0f) {}
    std::vector<float> expected() const { return cases::expected(a, b); }
};

// A session on the deferred seam (events unless `events` is false), batching on.
struct DuplexCase {
    Rig r{Kind::CpuStaged};
    cases::ScaleAdd w;
    sam3d_session * s = nullptr;

    explicit DuplexCase(bool events = true) {
        probe::reset();
        deferred::reset();
        if (events) {
            deferred::install_with_events(r.seam());
        } else {
            deferred::install(r.seam());
        }
        w = cases::scale_add(r, kN);
    }
    ~DuplexCase() { deferred::reset(); }
    sam3d_session * open(sam3d_duplex duplex, sam3d_batching batching = SAM3D_BATCHING_ON) {
        sam3d_session_options o = sam3d_session_default_options();
        o.batching = batching;
        o.duplex = duplex;
        s = r.session(o);
        return s;
    }
    // Allocates the tensors and opens a duplex session on a backend of one in-order queue
    // (registry "CUDA"), where A6 adds no wait of its own: the waits seen are rule 11's.
    void start() {
        probe::get().reg_name_result = "CUDA";
        r.seam().reg_name = probe::reg_name_override;
        r.alloc();
        ASSERT_NE(open(SAM3D_DUPLEX_ON), nullptr);
        ASSERT_TRUE(sam3d_session_duplex(s));
    }
    sam3d_ticket queued(const std::vector<float> & a, const std::vector<float> & b, std::vector<float> & out) {
        sam3d_ticket t = 0;
        EXPECT_EQ(cases::submit(s, w, a.data(), b.data(), out.data(), SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK)
            << sam3d_last_error();
        return t;
    }
    sam3d_ticket queued(Operands & o) { return queued(o.a, o.b, o.out); }
    // A transfer-only queued call: `src` into bytes of `t`, then those bytes into `dst`.
    sam3d_ticket round_trip(ggml_tensor * t, const std::vector<float> & src, std::vector<float> & dst) {
        const sam3d_upload up = rig::up(t, src.data(), kBytes);
        const sam3d_download down = rig::down(t, dst.data(), kBytes);
        const sam3d_call c{&up, 1, nullptr, &down, 1, false};
        sam3d_ticket ticket = 0;
        EXPECT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &ticket), SAM3D_OK) << sam3d_last_error();
        return ticket;
    }
    void wait(sam3d_ticket t) { ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error(); }
    // Rule 8: the core's waits and events are the ones the seam saw made.
    void expect_counted() {
        const sam3d_counters k = r.counters(s);
        EXPECT_EQ(k.event_records, static_cast<uint64_t>(deferred::g_event_records));
        EXPECT_EQ(k.event_waits, static_cast<uint64_t>(deferred::g_event_waits));
        EXPECT_EQ(k.event_synchronizes, static_cast<uint64_t>(deferred::g_event_syncs));
        EXPECT_EQ(k.synchronizes, static_cast<uint64_t>(deferred::g_syncs));
        EXPECT_EQ(deferred::pending(), 0u);
    }
};

}  // namespace

// Which sessions make a second backend: duplex ON where the session batches with events; AUTO
// where the backend moves both directions at once (Backend facts: CUDA, not Vulkan); never OFF.
// One that cannot be made (dev_init returns NULL) is no error. The second backend is freed with
// the session.
TEST(Duplex, ASessionHasItsSecondBackendWhereAskedAndPossible) {
    struct Row {
        sam3d_duplex duplex;
        const char * reg;
        bool events;
        sam3d_batching batching;
        bool fail_init;
        bool expect;
    };
    const Row rows[] = {
        {SAM3D_DUPLEX_ON, nullptr, true, SAM3D_BATCHING_ON, false, true},
        {SAM3D_DUPLEX_OFF, "CUDA", true, SAM3D_BATCHING_ON, false, false},
        {SAM3D_DUPLEX_AUTO, "CUDA", true, SAM3D_BATCHING_ON, false, true},
        {SAM3D_DUPLEX_AUTO, "Vulkan", true, SAM3D_BATCHING_ON, false, false},
        {SAM3D_DUPLEX_AUTO, nullptr, true, SAM3D_BATCHING_ON, false, false},
        {SAM3D_DUPLEX_ON, nullptr, false, SAM3D_BATCHING_ON, false, false},
        {SAM3D_DUPLEX_ON, nullptr, true, SAM3D_BATCHING_OFF, false, false},
        {SAM3D_DUPLEX_ON, nullptr, true, SAM3D_BATCHING_ON, true, false},
    };
    for (const Row & row : rows) {
        SCOPED_TRACE(std::string("duplex ") + std::to_string(row.duplex) + ", " + (row.reg ? row.reg : "CPU") +
                     (row.events ? ", events" : ", no events") +
                     (row.batching == SAM3D_BATCHING_ON ? ", batching" : ", batching off") +
                     (row.fail_init ? ", dev_init fails" : ""));
        {
            DuplexCase c(row.events);
            if (row.reg != nullptr) {
                probe::get().reg_name_result = row.reg;
                c.r.seam().reg_name = probe::reg_name_override;
            }
            deferred::g_fail_dev_init = row.fail_init;
            c.r.alloc();
            ASSERT_NE(c.open(row.duplex, row.batching), nullptr);
            EXPECT_EQ(sam3d_session_duplex(c.s), row.expect);
            std::vector<float> a = rig::ramp(kN, 1.0f), b = rig::ramp(kN, 3.0f), out(kN, -1.0f);
            c.wait(c.queued(a, b, out));
            EXPECT_EQ(out, cases::expected(a, b)) << "a session without its second backend works on one queue";
            EXPECT_EQ(c.r.counters(c.s).duplex_calls, row.expect ? 1u : 0u);
            EXPECT_EQ(deferred::g_dev_inits, row.expect ? 1 : 0);
            c.r.free_sessions();
            EXPECT_EQ(deferred::g_backend_frees, deferred::g_dev_inits) << "the session frees what it made";
        }
    }
    EXPECT_FALSE(sam3d_session_duplex(nullptr));
}

TEST(Duplex, AnUnknownModeIsRefused) {
    DuplexCase c;
    c.r.alloc();
    sam3d_session_options o = sam3d_session_default_options();
    o.duplex = static_cast<sam3d_duplex>(3);
    sam3d_session * s = nullptr;
    EXPECT_EQ(sam3d_testing_session_create(c.r.backend(), &o, &c.r.seam(), &s), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(s, nullptr);
    EXPECT_CONTAINS(sam3d_last_error(), "options.duplex is 3");
}

// Edge 1: a call's downloads wait for its graph (and uploads). The second queue runs first
// wherever nothing orders it, so a download that does not wait reads the output before the graph
// wrote it. Counted: one duplex call, one record and one wait on the second backend.
TEST(Duplex, ACallsDownloadsWaitForItsGraph) {
    DuplexCase c;
    c.start();
    deferred::g_second_first = true;
    std::vector<float> a = rig::ramp(kN, 1.0f), b = rig::ramp(kN, 7.0f), out(kN, -1.0f);
    const sam3d_ticket t = c.queued(a, b, out);
    EXPECT_GT(deferred::pending(), 0u) << "submitted, not run";
    c.wait(t);
    EXPECT_EQ(out, cases::expected(a, b));
    const sam3d_counters k = c.r.counters(c.s);
    EXPECT_EQ(k.duplex_calls, 1u);
    EXPECT_EQ(k.duplex_event_records, 1u) << "the call's completion, after its downloads";
    EXPECT_EQ(k.duplex_event_waits, 1u) << "the downloads after the call's graph";
    EXPECT_EQ(k.event_records, 2u) << "and the handoff on the session's backend";
    c.expect_counted();
}

// Edge 2: a later call's graph waits for the earlier calls' downloads (it may write what they
// read: here the same output tensor). The session's backend runs ahead of the second queue, so a
// graph that does not wait overwrites call 1's output before its download.
TEST(Duplex, AGraphWaitsForTheEarlierCallsDownloads) {
    DuplexCase c;
    c.start();
    Operands o1(1.0f, 2.0f);
    Operands o2(50.0f, 9.0f);
    const sam3d_ticket t1 = c.queued(o1);
    const sam3d_ticket t2 = c.queued(o2);
    c.wait(t2);  // the newest: one synchronize, of the second backend
    c.wait(t1);
    EXPECT_EQ(o1.out, o1.expected());
    EXPECT_EQ(o2.out, o2.expected());
    const sam3d_counters k = c.r.counters(c.s);
    EXPECT_EQ(k.event_waits - k.duplex_event_waits, 1u) << "call 2's graph waited for call 1's completion";
    c.expect_counted();
}

// Edge 3: a later call's uploads wait for the earlier calls' downloads that read the bytes they
// write; uploads to other bytes do not wait, and move while those downloads are still queued.
TEST(Duplex, UploadsWaitForEarlierDownloadsOnlyOfTheBytesTheyWrite) {
    for (const bool same : {true, false}) {
        SCOPED_TRACE(same ? "call 2 writes what call 1 reads" : "call 2 writes other bytes");
        DuplexCase c;
        c.start();
        std::vector<float> x1 = rig::ramp(kN, 1.0f), x2 = rig::ramp(kN, 600.0f);
        std::vector<float> out1(kN, -1.0f), out2(kN, -1.0f);
        const sam3d_ticket t1 = c.round_trip(c.w.a, x1, out1);
        const sam3d_ticket t2 = c.round_trip(same ? c.w.a : c.w.b, x2, out2);
        const sam3d_counters k = c.r.counters(c.s);
        EXPECT_EQ(k.event_waits - k.duplex_event_waits, same ? 1u : 0u)
            << "the session's backend waits before call 2's uploads only where they overwrite call 1's reads";
        c.wait(t2);
        c.wait(t1);
        EXPECT_EQ(out1, x1);
        EXPECT_EQ(out2, x2);
        c.expect_counted();
    }
}

// Calls complete in submission order across both backends: an older call's event covers every
// call before it, whichever backend their last work ran on. Call 2 downloads nothing; waiting for
// it reports call 1 complete, whose download ran on the second backend.
TEST(Duplex, ACallsEventCoversEveryEarlierCallOnBothBackends) {
    DuplexCase c;
    c.start();
    Operands o1(1.0f, 2.0f);
    std::vector<float> a2 = rig::ramp(kN, 5.0f), out3(kN, -1.0f);
    const sam3d_ticket t1 = c.queued(o1);
    const sam3d_upload up = rig::up(c.w.b, a2.data(), kBytes);
    const sam3d_call only_upload{&up, 1, nullptr, nullptr, 0, false};
    sam3d_ticket t2 = 0;
    ASSERT_EQ(sam3d_session_submit(c.s, &only_upload, SAM3D_SUBMIT_QUEUED, &t2), SAM3D_OK) << sam3d_last_error();
    const sam3d_ticket t3 = c.round_trip(c.w.out, o1.a, out3);  // keeps call 2 from being the newest
    c.wait(t2);
    const int syncs = deferred::g_syncs;
    c.wait(t1);
    EXPECT_EQ(deferred::g_syncs, syncs) << "call 1 was complete: its wait synchronizes nothing";
    EXPECT_EQ(o1.out, o1.expected());
    c.wait(t3);
    EXPECT_EQ(out3, o1.a);
    c.expect_counted();
}

// A call completed on return (a staged run) after a duplex call completes both backends first:
// its graph writes the output the queued call's download reads.
TEST(Duplex, ACallCompletedOnReturnCompletesBothBackendsFirst) {
    DuplexCase c;
    c.start();
    Operands o1(1.0f, 2.0f);
    Operands o2(30.0f, 4.0f);
    const sam3d_ticket t1 = c.queued(o1);
    ASSERT_EQ(cases::run(c.s, c.w, o2.a.data(), o2.b.data(), o2.out.data()), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(o2.out, o2.expected());
    c.wait(t1);
    EXPECT_EQ(o1.out, o1.expected());
    c.expect_counted();
}

// A queued call that gets no events runs on the session's backend alone, after the duplex calls
// before it completed; the session keeps working and counts only the duplex calls.
TEST(Duplex, ACallWithoutEventsRunsOnOneQueueAfterTheDuplexCallsComplete) {
    DuplexCase c;
    c.start();
    Operands o1(1.0f, 2.0f);
    Operands o2(30.0f, 4.0f);
    const sam3d_ticket t1 = c.queued(o1);
    deferred::g_fail_event_new = true;  // the pool is empty: call 2 gets none
    const sam3d_ticket t2 = c.queued(o2);
    c.wait(t2);  // the session's backend first: call 2's graph, had it not waited, before call 1's download
    c.wait(t1);
    EXPECT_EQ(o1.out, o1.expected());
    EXPECT_EQ(o2.out, o2.expected());
    EXPECT_EQ(c.r.counters(c.s).duplex_calls, 1u);
    c.expect_counted();
}

// The bytes on the real backends (lavapipe here, CUDA and Vulkan on a GPU machine): a chain of
// queued calls, copying and zero-copy, with duplex asked and without, gives the same outputs.
class DuplexBytes : public testing::TestWithParam<Kind> {};

TEST_P(DuplexBytes, QueuedCallsGiveTheSameBytesWithAndWithoutDuplex) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    cases::ScaleAdd w = cases::scale_add(r, kN);
    r.alloc();
    std::vector<std::vector<float>> results;
    bool had = false;
    for (const sam3d_duplex d : {SAM3D_DUPLEX_OFF, SAM3D_DUPLEX_ON}) {
        sam3d_session_options o = sam3d_session_default_options();
        o.batching = SAM3D_BATCHING_ON;
        o.duplex = d;
        sam3d_session * s = r.session(o);
        ASSERT_NE(s, nullptr);
        had = had || sam3d_session_duplex(s);
        std::vector<float> all;
        for (const unsigned flags : {0u, SAM3D_SUBMIT_ZERO_COPY}) {
            constexpr int kCalls = 4;
            std::vector<std::vector<float>> outs(kCalls, std::vector<float>(kN, -1.0f));
            std::vector<sam3d_ticket> t(kCalls, 0);
            for (int i = 0; i < kCalls; ++i) {
                const std::vector<float> a = rig::ramp(kN, 10.0f * static_cast<float>(i)), b = rig::ramp(kN, 3.0f + static_cast<float>(i));
                if (flags == 0) {
                    ASSERT_EQ(cases::submit(s, w, a.data(), b.data(), outs[i].data(), SAM3D_SUBMIT_QUEUED, &t[i]),
                              SAM3D_OK)
                        << sam3d_last_error();
                    continue;
                }
                // Zero-copy: one call per reservation, each waited before the next reserve.
                const cases::Slots sl = cases::reserve_scale_add(s, w);
                std::memcpy(sl.a, a.data(), kBytes);
                std::memcpy(sl.b, b.data(), kBytes);
                ASSERT_EQ(cases::submit_scale_add(s, w, sl, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &t[i]),
                          SAM3D_OK)
                    << sam3d_last_error();
                ASSERT_EQ(sam3d_session_wait(s, t[i]), SAM3D_OK) << sam3d_last_error();
                std::memcpy(outs[i].data(), sl.out, kBytes);
                t[i] = 0;
            }
            for (int i = kCalls - 1; i >= 0; --i) {
                if (t[i] != 0) {
                    ASSERT_EQ(sam3d_session_wait(s, t[i]), SAM3D_OK) << sam3d_last_error();
                }
            }
            for (int i = 0; i < kCalls; ++i) {
                EXPECT_EQ(outs[i], cases::expected(rig::ramp(kN, 10.0f * static_cast<float>(i)), rig::ramp(kN, 3.0f + static_cast<float>(i)))) << "call " << i;
                all.insert(all.end(), outs[i].begin(), outs[i].end());
            }
        }
        const sam3d_counters k = r.counters(s);
        EXPECT_EQ(k.duplex_calls, sam3d_session_duplex(s) ? 8u : 0u);
        results.push_back(all);
    }
    EXPECT_EQ(results[0], results[1]);
    if (!had) {
        GTEST_SKIP() << rig::kind_name(GetParam()) << ": no session got a second backend (no events, or no async "
                     << "copies): the bytes above are one queue's";
    }
}

INSTANTIATE_TEST_SUITE_P(GpuBackends, DuplexBytes, testing::ValuesIn(rig::gpu_kinds()), rig::param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DuplexBytes);  // a variant built without GPU backends
