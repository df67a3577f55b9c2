// Rule 5 at every failure point after submission, and no exception across the C API
// (docs/contract.md rules 5, 9, A3-A5, "Caller memory on failure"): every allocation of every
// path failed in turn (the seam's counted allocation point), events (markers over the CPU
// backend's synchronize, so this runs under cpu-asan), exceptions from GGML entry points,
// creation, a failed kept queued call, and the lock of sam3d_session_reservation_pinned.
#include <atomic>
#include <stdexcept>

#include "cases.h"
#include "deferred.h"
#include "probe.h"
#include "rig.h"

using rig::Kind;
using rig::Rig;

namespace {

std::atomic<bool> g_throw_compute{false};
std::atomic<int> g_throw_kind{0};  // 1: int (not a std::exception), 2: std::runtime_error

ggml_status throwing_compute_async(ggml_backend_t b, ggml_cgraph * g) {
    if (g_throw_compute.load()) {
        if (g_throw_kind.load() == 1) {
            throw 42;
        }
        throw std::runtime_error("compute_async failed (test)");
    }
    return deferred::compute_async(b, g);
}

std::atomic<bool> g_throw_event_wait{false};

void throwing_event_wait(ggml_backend_t b, ggml_backend_event_t e) {
    if (g_throw_event_wait.load()) {
        throw std::runtime_error("event_wait failed (test)");
    }
    deferred::event_wait(b, e);
}

void throwing_props(ggml_backend_dev_t, ggml_backend_dev_props *) { throw 42; }

// A cpu_staged seam with the deferred queue and events.
sam3d_ggml_seam event_seam() {
    sam3d_ggml_seam seam = fake_async::seam();
    deferred::install_with_events(seam);
    return seam;
}

sam3d_session * create(Rig & r, const sam3d_ggml_seam & seam) {
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = SAM3D_BATCHING_ON;
    sam3d_session * s = nullptr;
    EXPECT_EQ(sam3d_testing_session_create(r.backend(), &o, &seam, &s), SAM3D_OK) << sam3d_last_error();
    return s;
}

// One path of the core driven from a fresh session: `prepare` runs unarmed, `step` is the
// entry point under test (armed), `finish` completes it after a success and checks the result.
struct Path {
    const char * name;
    bool allocates;  // whether the entry point allocates at all (a warm run does not)
    std::function<void(sam3d_session *)> prepare;
    std::function<sam3d_status(sam3d_session *)> step;
    std::function<void(sam3d_session *)> finish;
};

}  // namespace

class Failures : public testing::Test {
   protected:
    void SetUp() override {
        probe::reset();
        deferred::reset();
        g_throw_compute = false;
        g_throw_kind = 0;
        g_throw_event_wait = false;
    }
};

// Every allocation of every path fails in turn (n = 1, 2, ... until the call succeeds): each
// failure returns SAM3D_ERR_OUT_OF_MEMORY with nothing of the session left in flight, no caller
// buffer written, no ring region held for the failed call, and the session exact afterwards
// (a follow-up zero-copy call whose slot would be overwritten by a stale download or whose
// region would be handed out twice). The core makes every allocation of a call before its
// first GGML call, so a failed one reached no transfer or compute entry at all.
TEST_F(Failures, EveryAllocationOfEveryPathFailsCleanly) {
    Rig r(Kind::CpuStaged);
    const int64_t n = 768;  // 3,072 bytes per tensor
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    const sam3d_ggml_seam seam = event_seam();
    const size_t bytes = n * 4;
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 3.0f), want = cases::expected(a, b);
    cases::Guarded g({bytes});
    const std::vector<uint8_t> untouched = g.all();
    sam3d_upload ups[] = {rig::up(w.a, a.data(), bytes), rig::up(w.b, b.data(), bytes)};
    sam3d_download downs[] = {rig::down(w.out, g.region(0), bytes)};
    const sam3d_call copying{ups, 2, w.graph, downs, 1, false};
    sam3d_ticket ticket = 0;
    void * slot[3] = {nullptr, nullptr, nullptr};
    const sam3d_slot_request req[3] = {{bytes}, {bytes}, {bytes}};
    auto reserve = [&](sam3d_session * s) {
        ASSERT_EQ(sam3d_session_reserve(s, req, 3, slot), SAM3D_OK) << sam3d_last_error();
        std::memcpy(slot[0], a.data(), bytes);
        std::memcpy(slot[1], b.data(), bytes);
    };
    auto zero_copy = [&](sam3d_session * s, unsigned flags) {
        sam3d_upload u[] = {rig::up(w.a, slot[0], bytes), rig::up(w.b, slot[1], bytes)};
        sam3d_download d[] = {rig::down(w.out, slot[2], bytes)};
        sam3d_call c{u, 2, w.graph, d, 1, false};
        return sam3d_session_submit(s, &c, flags, &ticket);
    };
    auto out_exact = [&] {
        std::vector<float> got(n);
        std::memcpy(got.data(), g.region(0), bytes);
        EXPECT_EQ(got, want);
    };
    auto slot_exact = [&] { EXPECT_EQ(0, std::memcmp(slot[2], want.data(), bytes)); };
    const std::vector<Path> paths = {
        {"run", false, [](sam3d_session *) {}, [&](sam3d_session * s) { return sam3d_session_run(s, &copying); },
         [&](sam3d_session *) { out_exact(); }},
        {"copying queued submit", true, [](sam3d_session *) {},
         [&](sam3d_session * s) { return sam3d_session_submit(s, &copying, SAM3D_SUBMIT_QUEUED, &ticket); },
         [&](sam3d_session * s) {
             ASSERT_EQ(sam3d_session_wait(s, ticket), SAM3D_OK) << sam3d_last_error();
             out_exact();
         }},
        {"reserve", true, [](sam3d_session *) {},
         [&](sam3d_session * s) { return sam3d_session_reserve(s, req, 3, slot); },
         [&](sam3d_session * s) {
             std::memcpy(slot[0], a.data(), bytes);
             std::memcpy(slot[1], b.data(), bytes);
             ASSERT_EQ(zero_copy(s, SAM3D_SUBMIT_ZERO_COPY), SAM3D_OK) << sam3d_last_error();
             slot_exact();
         }},
        {"zero-copy submit", true, reserve, [&](sam3d_session * s) { return zero_copy(s, SAM3D_SUBMIT_ZERO_COPY); },
         [&](sam3d_session *) { slot_exact(); }},
        {"queued zero-copy submit", true, reserve,
         [&](sam3d_session * s) { return zero_copy(s, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED); },
         [&](sam3d_session * s) {
             ASSERT_EQ(sam3d_session_wait(s, ticket), SAM3D_OK) << sam3d_last_error();
             slot_exact();
         }},
        {"kept queued submit", true, reserve,
         [&](sam3d_session * s) {
             return zero_copy(s, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED | SAM3D_SUBMIT_KEEP_SLOTS);
         },
         [&](sam3d_session * s) {
             ASSERT_EQ(sam3d_session_wait(s, ticket), SAM3D_OK) << sam3d_last_error();
             slot_exact();
             ASSERT_EQ(sam3d_session_release(s, ticket), SAM3D_OK) << sam3d_last_error();
         }},
    };
    for (const Path & path : paths) {
        SCOPED_TRACE(path.name);
        uint64_t failures = 0;
        for (uint64_t k = 1;; ++k) {
            ASSERT_LT(k, 100u) << "the call never succeeded";
            SCOPED_TRACE("allocation " + std::to_string(k));
            deferred::reset();
            std::copy(untouched.begin(), untouched.end(), const_cast<uint8_t *>(g.all().data()));
            sam3d_session * s = create(r, seam);
            ASSERT_NE(s, nullptr);
            path.prepare(s);
            const size_t held_before = sam3d_session_staging_in_flight(s);
            const uint64_t before = sam3d_testing_allocations(s);
            probe::reset();
            sam3d_testing_fail_allocation(s, k);
            const sam3d_status st = path.step(s);
            sam3d_testing_fail_allocation(s, 0);
            const std::vector<std::string> entered = probe::names();
            if (st == SAM3D_OK) {
                EXPECT_EQ(failures, sam3d_testing_allocations(s) - before)
                    << "every allocation of the successful call was failed once before";
                path.finish(s);
                sam3d_session_free(s);
                break;
            }
            ASSERT_EQ(st, SAM3D_ERR_OUT_OF_MEMORY) << sam3d_last_error();
            EXPECT_STARTS_WITH(sam3d_last_error(), "out_of_memory:");
            failures += 1;
            EXPECT_TRUE(entered.empty()) << "every allocation precedes submission, yet the failed call reached "
                                         << entered.front();
            EXPECT_EQ(deferred::pending(), 0u) << "work of the failed call is still in flight";
            EXPECT_EQ(g.all(), untouched) << "a failed call wrote its dst";
            EXPECT_EQ(sam3d_session_outstanding(s), 0u) << "a failed submit left a ticket";
            if (std::string(path.name) != "reserve") {
                EXPECT_LE(sam3d_session_staging_in_flight(s), held_before);
            }
            // The session goes on exactly: the next reservation and call (its download lands in
            // a slot a stale download of the failed call would overwrite).
            reserve(s);
            ASSERT_EQ(zero_copy(s, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED), SAM3D_OK) << sam3d_last_error();
            ASSERT_EQ(sam3d_session_wait(s, ticket), SAM3D_OK) << sam3d_last_error();
            slot_exact();
            sam3d_session_free(s);
        }
        if (path.allocates) {
            EXPECT_GT(failures, 0u) << "the path made no allocation to fail";
        } else {
            EXPECT_EQ(failures, 0u) << "the path allocates: its allocations are failed above";
        }
    }
}

// The counted allocation point counts allocations (testing.h): a call whose bookkeeping already
// has the capacity makes none. A run of 40 descriptors grows the session's vectors once; the
// same run again, at exactly the capacity it left, allocates nothing.
TEST_F(Failures, ARunAtTheCapacityItLeftAllocatesNothing) {
    Rig r(Kind::CpuStaged);
    constexpr int n = 40;
    std::vector<ggml_tensor *> t;
    for (int i = 0; i < n; ++i) t.push_back(r.bytes(64, ("t" + std::to_string(i)).c_str()));
    r.alloc();
    sam3d_session * s = create(r, event_seam());
    ASSERT_NE(s, nullptr);
    const std::vector<uint8_t> src = rig::pattern(64 * n, 3);
    std::vector<sam3d_upload> ups;
    for (int i = 0; i < n; ++i) ups.push_back(rig::up(t[i], src.data() + 64 * i, 64));
    const sam3d_call c{ups.data(), ups.size(), nullptr, nullptr, 0, false};
    const uint64_t created = sam3d_testing_allocations(s);
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    const uint64_t first = sam3d_testing_allocations(s);
    EXPECT_GT(first, created) << "40 descriptors are more than the session reserved at creation";
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_testing_allocations(s), first) << "the same run again found its capacity";
    sam3d_ticket ticket = 7;
    ASSERT_EQ(sam3d_session_submit(s, &c, 0, &ticket), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(ticket, 0u);
    EXPECT_EQ(sam3d_testing_allocations(s), first) << "a submit without flags is that run: it allocated";
    sam3d_session_free(s);
}

// Queued calls on a device with events: older calls wait on their events (which run the queue
// only up to them: later calls' regions stay held), a call whose completion a later call's event
// covered waits on nothing, the newest on one synchronize; events are recycled through the pool
// and freed with the session.
TEST_F(Failures, QueuedCallsWaitOnTheirEventsAndRecycleThem) {
    Rig r(Kind::CpuStaged);
    probe::record_all(r.seam());
    deferred::install_with_events(r.seam());
    const int64_t n = 1000;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = create(r, r.seam());
    const size_t bytes = n * 4;
    for (int round = 0; round < 2; ++round) {
        std::vector<std::vector<float>> as, bs, outs(3, std::vector<float>(n, -1.0f));
        sam3d_ticket t[3] = {0, 0, 0};
        for (int i = 0; i < 3; ++i) {
            as.push_back(rig::ramp(n, static_cast<float>(10 * i + round)));
            bs.push_back(rig::ramp(n, static_cast<float>(i)));
            sam3d_upload u[] = {rig::up(w.a, as[i].data(), bytes), rig::up(w.b, bs[i].data(), bytes)};
            sam3d_download d[] = {rig::down(w.out, outs[i].data(), bytes)};
            sam3d_call c{u, 2, w.graph, d, 1, false};
            ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &t[i]), SAM3D_OK) << sam3d_last_error();
        }
        const size_t region = 3 * bytes;  // 3 descriptors, 32-byte aligned sizes
        EXPECT_EQ(sam3d_session_staging_in_flight(s), 3 * region);
        // Round 0 waits call 0 first, round 1 call 1 (whose event covers call 0 too, A6).
        const int first = round;
        probe::reset();
        ASSERT_EQ(sam3d_session_wait(s, t[first]), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(outs[first], cases::expected(as[first], bs[first]));
        // The wait, then the free of the copying call's region (which lets GGML recycle the event).
        const std::vector<std::string> event_waits = {"event_synchronize", "event_synchronize"};
        EXPECT_EQ(probe::names(), event_waits) << "an older call waits on its event";
        EXPECT_GT(deferred::pending(), 0u) << "the event ran the queue only up to call " << first;
        EXPECT_EQ(sam3d_session_staging_in_flight(s), 2 * region) << "regions of calls not waited yet stay held";
        if (round == 1) {
            probe::reset();
            ASSERT_EQ(sam3d_session_wait(s, t[0]), SAM3D_OK) << sam3d_last_error();
            EXPECT_EQ(probe::names(), std::vector<std::string>{"event_synchronize"})
                << "call 0 was complete when call 1's event was: its wait only gives its event back";
        }
        ASSERT_EQ(sam3d_session_wait(s, t[2]), SAM3D_OK) << sam3d_last_error();
        if (round == 0) {
            ASSERT_EQ(sam3d_session_wait(s, t[1]), SAM3D_OK) << sam3d_last_error();
        }
        for (int i = 0; i < 3; ++i) {
            EXPECT_EQ(outs[i], cases::expected(as[i], bs[i])) << "call " << i;
        }
        EXPECT_EQ(sam3d_session_staging_in_flight(s), 0u);
    }
    EXPECT_EQ(deferred::g_event_records, 6);
    EXPECT_EQ(deferred::g_events_new, 3) << "the second round reuses the first round's events";
    sam3d_session_free(s);
    EXPECT_EQ(deferred::g_events_free, 3);
}

// An event that cannot be created leaves the call without one: its wait synchronizes. (The
// second call has no uploads: a queued call's uploads after one without an event complete it at
// submission, A6.)
TEST_F(Failures, CallWithoutAnEventIsWaitedWithASynchronize) {
    Rig r(Kind::CpuStaged);
    probe::record_all(r.seam());
    deferred::install_with_events(r.seam());
    cases::ScaleAdd w = cases::scale_add(r, 64);
    r.alloc();
    sam3d_session * s = create(r, r.seam());
    deferred::g_fail_event_new = true;
    const std::vector<float> a = rig::ramp(64, 1.0f), b = rig::ramp(64, 2.0f);
    std::vector<float> o1(64), o2(64);
    sam3d_upload u[] = {rig::up(w.a, a.data(), 256), rig::up(w.b, b.data(), 256)};
    sam3d_download d1[] = {rig::down(w.out, o1.data(), 256)};
    sam3d_download d2[] = {rig::down(w.out, o2.data(), 256)};
    sam3d_call c1{u, 2, w.graph, d1, 1, false}, c2{nullptr, 0, w.graph, d2, 1, false};
    sam3d_ticket t1 = 0, t2 = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c1, SAM3D_SUBMIT_QUEUED, &t1), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(sam3d_session_submit(s, &c2, SAM3D_SUBMIT_QUEUED, &t2), SAM3D_OK) << sam3d_last_error();
    probe::reset();
    ASSERT_EQ(sam3d_session_wait(s, t1), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(probe::names(), std::vector<std::string>{"synchronize"});
    ASSERT_EQ(sam3d_session_wait(s, t2), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(o1, cases::expected(a, b));
    EXPECT_EQ(o2, cases::expected(a, b));
    EXPECT_EQ(deferred::g_events_new, 0);
    sam3d_session_free(s);
}

// cpu_staged over the deferred queue with events (the graph's compute_async replaced when
// given), one scale_add of n floats, its inputs and a session batching on.
struct EventCase {
    static constexpr int64_t n = 256;
    Rig r{Kind::CpuStaged};
    cases::ScaleAdd w;
    sam3d_session * s = nullptr;
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 2.0f);
    explicit EventCase(ggml_status (*compute_async)(ggml_backend_t, ggml_cgraph *) = nullptr) {
        deferred::install_with_events(r.seam());
        if (compute_async != nullptr) {
            r.seam().graph_compute_async = compute_async;
        }
        w = cases::scale_add(r, n);
        r.alloc();
        s = create(r, r.seam());
    }
    ~EventCase() { sam3d_session_free(s); }
    EventCase(const EventCase &) = delete;
    EventCase & operator=(const EventCase &) = delete;
    // A queued call of the workload into `out`: its status, its ticket in *t.
    sam3d_status submit(std::vector<float> & out, sam3d_ticket * t) {
        cases::Call c(w, a.data(), b.data(), out.data());
        return sam3d_session_submit(s, &c.call, SAM3D_SUBMIT_QUEUED, t);
    }
};

// Of two queued calls in flight, the older is waited on its own event (A5: each call's
// completion is tracked by its event; only the newest gets the full synchronize): its wait
// leaves the newer call's work pending, and the newer one's wait synchronizes.
TEST_F(Failures, TheOlderOfTwoQueuedCallsWaitsOnItsOwnEvent) {
    EventCase e;
    std::vector<float> o1(e.n, -1.0f), o2(e.n, -1.0f);
    sam3d_ticket t1 = 0, t2 = 0;
    ASSERT_EQ(e.submit(o1, &t1), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(e.submit(o2, &t2), SAM3D_OK) << sam3d_last_error();
    const sam3d_counters k0 = e.r.counters(e.s);
    ASSERT_EQ(sam3d_session_wait(e.s, t1), SAM3D_OK) << sam3d_last_error();
    const sam3d_counters k1 = e.r.counters(e.s);
    EXPECT_EQ(o1, cases::expected(e.a, e.b));
    EXPECT_EQ(k1.synchronizes - k0.synchronizes, 0u) << "the older call's wait synchronized the backend";
    EXPECT_GE(k1.event_synchronizes - k0.event_synchronizes, 1u);
    EXPECT_GT(deferred::pending(), 0u) << "waiting the older call completed the newer one too";
    ASSERT_EQ(sam3d_session_wait(e.s, t2), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(e.r.counters(e.s).synchronizes - k1.synchronizes, 1u) << "the newest call is waited with a synchronize";
    EXPECT_EQ(o2, cases::expected(e.a, e.b));
}

// A queued submit that throws after submission while its event could not be created gives no
// event back (it had none): the next queued call gets an event of its own, recorded after its
// work, and is waited on it.
TEST_F(Failures, AQueuedCallThatThrewWithoutAnEventLeavesNoneBehind) {
    {
        EventCase e(throwing_compute_async);
        std::vector<float> o1(e.n, -1.0f), o2(e.n, -1.0f), o3(e.n, -1.0f);
        sam3d_ticket t1 = 0, t2 = 0, t3 = 0;
        deferred::g_fail_event_new = true;
        g_throw_kind = 2;
        g_throw_compute = true;
        EXPECT_EQ(e.submit(o1, &t1), SAM3D_ERR_INTERNAL);
        g_throw_compute = false;
        deferred::g_fail_event_new = false;
        ASSERT_EQ(e.submit(o2, &t2), SAM3D_OK) << sam3d_last_error();
        ASSERT_EQ(e.submit(o3, &t3), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(deferred::g_events_new, 2) << "a queued call took an event slot without an event";
        EXPECT_EQ(e.r.counters(e.s).event_records, 2u);
        const sam3d_counters k0 = e.r.counters(e.s);
        ASSERT_EQ(sam3d_session_wait(e.s, t2), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(e.r.counters(e.s).synchronizes, k0.synchronizes) << "the older call had no event to wait on";
        ASSERT_EQ(sam3d_session_wait(e.s, t3), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(o2, cases::expected(e.a, e.b));
        EXPECT_EQ(o3, cases::expected(e.a, e.b));
        EXPECT_EQ(o1, std::vector<float>(e.n, -1.0f)) << "the failed call wrote its dst";
    }
    EXPECT_EQ(deferred::g_events_free, deferred::g_events_new);
}

// An allocation failure while a queued call is in flight: the message says the session's
// outstanding work was completed, and it was (rule 5): nothing is pending when it returns, the
// queued call still reports its own result at its wait.
TEST_F(Failures, AllocationFailureWithAQueuedCallInFlightCompletesItFirst) {
    Rig r(Kind::CpuStaged);
    deferred::install_with_events(r.seam());
    cases::ScaleAdd w = cases::scale_add(r, 64);
    r.alloc();
    sam3d_session * s = create(r, r.seam());
    const std::vector<float> a = rig::ramp(64, 1.0f), b = rig::ramp(64, 2.0f);
    std::vector<float> o1(64), o2(64, -1.0f);
    sam3d_upload u[] = {rig::up(w.a, a.data(), 256), rig::up(w.b, b.data(), 256)};
    sam3d_download d1[] = {rig::down(w.out, o1.data(), 256)};
    sam3d_download d2[] = {rig::down(w.out, o2.data(), 256)};
    sam3d_call c1{u, 2, w.graph, d1, 1, false}, c2{u, 2, w.graph, d2, 1, false};
    sam3d_ticket t1 = 0, t2 = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c1, SAM3D_SUBMIT_QUEUED, &t1), SAM3D_OK) << sam3d_last_error();
    ASSERT_GT(deferred::pending(), 0u) << "the queued call is in flight";
    sam3d_testing_fail_allocation(s, 1);
    ASSERT_EQ(sam3d_session_submit(s, &c2, SAM3D_SUBMIT_QUEUED, &t2), SAM3D_ERR_OUT_OF_MEMORY);
    EXPECT_CONTAINS(sam3d_last_error(), "outstanding work was completed");
    EXPECT_EQ(deferred::pending(), 0u) << "the message says the outstanding work was completed: it must be";
    EXPECT_EQ(t2, 0u);
    EXPECT_EQ(o2, std::vector<float>(64, -1.0f)) << "the failed call wrote its dst";
    EXPECT_EQ(sam3d_session_outstanding(s), 1u) << "the queued call still awaits its wait";
    ASSERT_EQ(sam3d_session_wait(s, t1), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(o1, cases::expected(a, b));
    sam3d_session_free(s);
}

// An exception from a GGML entry point after submission (event_record, graph compute, the event
// wait before a queued call's uploads; a std::exception or not) becomes SAM3D_ERR_INTERNAL after
// the session's work is completed; no dst is written, no region stays held, nothing leaks, and
// the session goes on exactly.
TEST_F(Failures, ExceptionsFromGgmlAfterSubmissionCompleteTheWork) {
    Rig r(Kind::CpuStaged);
    deferred::install_with_events(r.seam());
    r.seam().graph_compute_async = throwing_compute_async;
    r.seam().event_wait = throwing_event_wait;
    const int64_t n = 333;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = create(r, r.seam());
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 2.0f);
    sam3d_upload u[] = {rig::up(w.a, a.data(), n * 4), rig::up(w.b, b.data(), n * 4)};
    struct Case {
        const char * name;
        int kind;          // g_throw_kind (0: event_record throws, 3: the event wait before the uploads, A6)
        bool queued;
        const char * message;
    };
    for (const Case & k : {Case{"event_record", 0, true, "event_record failed (test)"},
                           Case{"compute, not a std::exception, queued", 1, true, "not a std::exception"},
                           Case{"compute, not a std::exception, run", 1, false, "not a std::exception"},
                           Case{"compute, std::runtime_error, run", 2, false, "compute_async failed (test)"},
                           Case{"event_wait before the uploads, queued", 3, true, "event_wait failed (test)"}}) {
        SCOPED_TRACE(k.name);
        cases::Guarded g({n * 4});
        const std::vector<uint8_t> untouched = g.all();
        sam3d_download d[] = {rig::down(w.out, g.region(0), n * 4)};
        sam3d_call c{u, 2, w.graph, d, 1, false};
        // An earlier queued call is in flight: the failure completes it too.
        std::vector<float> earlier(n, -1.0f);
        sam3d_download de[] = {rig::down(w.out, earlier.data(), n * 4)};
        sam3d_call ce{u, 2, w.graph, de, 1, false};
        sam3d_ticket te = 0, t = 0;
        ASSERT_EQ(sam3d_session_submit(s, &ce, SAM3D_SUBMIT_QUEUED, &te), SAM3D_OK) << sam3d_last_error();
        const sam3d_counters k0 = r.counters(s);
        deferred::g_throw_event_record = k.kind == 0;
        g_throw_kind = k.kind;
        g_throw_compute = k.kind == 1 || k.kind == 2;
        g_throw_event_wait = k.kind == 3;
        sam3d_status st = SAM3D_OK;
        EXPECT_NO_THROW(st = k.queued ? sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &t) : sam3d_session_run(s, &c));
        deferred::g_throw_event_record = false;
        g_throw_compute = false;
        g_throw_event_wait = false;
        // Rule 8: a call that fails after submission counts calls and failed_calls, no transfer.
        const sam3d_counters k1 = r.counters(s);
        EXPECT_EQ(k1.calls - k0.calls, 1u);
        EXPECT_EQ(k1.failed_calls - k0.failed_calls, 1u);
        EXPECT_EQ(k1.async_uploads, k0.async_uploads);
        EXPECT_EQ(k1.bytes_uploaded, k0.bytes_uploaded);
        // The core's own GGML waits and events count as made, the one that threw too: a queued
        // call waits on the earlier call's event before its uploads (A6), a run completes it
        // first; the exception's drain synchronizes (rule 5); only the queued completion event
        // is recorded (after the graph).
        EXPECT_EQ(k1.event_records - k0.event_records, k.kind == 0 ? 1u : 0u);
        EXPECT_EQ(k1.event_waits - k0.event_waits, k.queued ? 1u : 0u);
        EXPECT_EQ(k1.synchronizes - k0.synchronizes, k.queued ? 1u : 2u);
        EXPECT_EQ(st, SAM3D_ERR_INTERNAL);
        EXPECT_STARTS_WITH(sam3d_last_error(), "internal:");
        EXPECT_CONTAINS(sam3d_last_error(), k.message);
        EXPECT_EQ(t, 0u);
        EXPECT_EQ(deferred::pending(), 0u) << "work left in flight after the exception";
        EXPECT_EQ(g.all(), untouched);
        EXPECT_EQ(sam3d_session_outstanding(s), 1u) << "only the earlier call, still the caller's to wait";
        ASSERT_EQ(sam3d_session_wait(s, te), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(earlier, cases::expected(a, b));
        EXPECT_EQ(sam3d_session_staging_in_flight(s), 0u);
        ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
        std::vector<float> got(n);
        std::memcpy(got.data(), g.region(0), n * 4);
        EXPECT_EQ(got, cases::expected(a, b));
    }
    sam3d_session_free(s);
    EXPECT_EQ(deferred::g_events_free, deferred::g_events_new) << "an event leaked";
}

// Creation: an exception from a seam entry is SAM3D_ERR_INTERNAL; every allocation failing in
// turn is SAM3D_ERR_OUT_OF_MEMORY with *out NULL and nothing leaked (LSan in cpu-asan).
TEST_F(Failures, CreationFailuresReturnAStatusAndLeakNothing) {
    Rig r(Kind::CpuStaged);
    sam3d_ggml_seam seam = r.seam();
    seam.dev_get_props = throwing_props;
    sam3d_session * s = reinterpret_cast<sam3d_session *>(&r);
    EXPECT_EQ(sam3d_testing_session_create(r.backend(), nullptr, &seam, &s), SAM3D_ERR_INTERNAL);
    EXPECT_EQ(s, nullptr);
    EXPECT_CONTAINS(sam3d_last_error(), "creating the session");
    seam = r.seam();
    uint64_t failures = 0;
    for (uint64_t k = 1;; ++k) {
        ASSERT_LT(k, 100u);
        seam.fail_allocation = k;
        s = reinterpret_cast<sam3d_session *>(&r);
        const sam3d_status st = sam3d_testing_session_create(r.backend(), nullptr, &seam, &s);
        if (st == SAM3D_OK) {
            EXPECT_EQ(sam3d_testing_allocations(s), failures);
            sam3d_session_free(s);
            break;
        }
        EXPECT_EQ(st, SAM3D_ERR_OUT_OF_MEMORY);
        EXPECT_EQ(s, nullptr);
        failures += 1;
    }
    EXPECT_GT(failures, 1u);
}

// A queued kept call whose compute fails is released by its wait (A4): release then refuses it
// naming why, and the next reservation gets its region back.
TEST_F(Failures, FailedQueuedKeptCallIsReleasedByItsWait) {
    Rig r(Kind::CpuStaged);
    probe::record_all(r.seam());
    const int64_t n = 256;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const size_t bytes = n * 4;
    const sam3d_slot_request req[3] = {{bytes}, {bytes}, {bytes}};
    void * p[3] = {nullptr, nullptr, nullptr};
    ASSERT_EQ(sam3d_session_reserve(s, req, 3, p), SAM3D_OK) << sam3d_last_error();
    sam3d_upload u[] = {rig::up(w.a, p[0], bytes), rig::up(w.b, p[1], bytes)};
    sam3d_download d[] = {rig::down(w.out, p[2], bytes)};
    sam3d_call c{u, 2, w.graph, d, 1, false};
    sam3d_ticket k = 0;
    probe::set_fail_compute(true);
    ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED | SAM3D_SUBMIT_KEEP_SLOTS, &k),
              SAM3D_OK)
        << sam3d_last_error();
    probe::set_fail_compute(false);
    EXPECT_EQ(sam3d_session_wait(s, k), SAM3D_ERR_COMPUTE);
    EXPECT_EQ(sam3d_session_release(s, k), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "ticket " + std::to_string(k) + " failed");
    sam3d_slot_request one = {64};
    void * q = nullptr;
    ASSERT_EQ(sam3d_session_reserve(s, &one, 1, &q), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_staging_in_flight(s), 64u) << "the failed kept call's region is still held";
}

// sam3d_session_reservation_pinned takes the session lock (rule 9): while a reservation is
// blocked inside the staging allocation, it waits for it and then sees the new reservation.
TEST_F(Failures, ReservationPinnedWaitsForTheSessionLock) {
    Rig r(Kind::CpuStaged);
    r.seam().buft_alloc_buffer = probe::alloc_buffer;
    r.bytes(64, "x");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    {
        std::lock_guard<std::mutex> l(probe::get().mutex);
        probe::get().block_alloc = true;
    }
    sam3d_slot_request one = {64};
    void * p = nullptr;
    std::thread reserving([&] { EXPECT_EQ(sam3d_session_reserve(s, &one, 1, &p), SAM3D_OK); });
    probe::wait_blocked();
    std::atomic<bool> released{false};
    std::atomic<bool> returned_early{false};
    bool pinned = false;
    std::thread asking([&] {
        pinned = sam3d_session_reservation_pinned(s);
        returned_early = !released.load();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    released = true;
    probe::release();
    reserving.join();
    asking.join();
    EXPECT_FALSE(returned_early.load()) << "reservation_pinned read the reservation without the session lock";
    EXPECT_TRUE(pinned);
}
