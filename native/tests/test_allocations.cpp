// No allocation after a call's first GGML call (docs/contract.md, "Where the core decides":
// every bookkeeping allocation of a run or submit is made before it reaches GGML, so an
// allocation failure never leaves work half submitted, and a wait never fails for memory; a
// reserve is no call: it may wait on released calls' events before it allocates its slots).
// The counted allocation point (sam3d_testing_allocations) sees only what the core routes
// through it; this file replaces the global operator new of the test program, so a container
// that grows on its own (a push_back past a capacity nobody reserved) is seen too. Counted:
// allocations on the calling thread after the first GGML transfer, compute, wait or record of
// one entry point, outside GGML itself (every seam entry is wrapped, GGML's own functions where
// the seam has none; the staging buffer and events are the call's allocations, made before).
// The same allocator counts each thread's live blocks, so a call that should leave nothing of
// itself behind on the calling thread is seen to. The replacement is this program's alone
// (native/tests/CMakeLists.txt: sam3d_allocation_tests).
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "cases.h"
#include "deferred.h"
#include "rig.h"

using rig::Kind;
using rig::Rig;

namespace late {

thread_local bool t_counting = false;  // inside the entry point under test
thread_local bool t_reached = false;   // it reached a GGML entry
thread_local int t_in_ggml = 0;        // inside a GGML entry now
thread_local size_t t_late = 0;        // allocations after the first GGML entry, outside GGML
thread_local long t_live = 0;          // blocks this thread allocated minus those it freed

// `work`: a transfer, compute, wait or record; GGML's allocations (the staging buffer, an event)
// are the call's allocations and may come before them.
struct InGgml {
    explicit InGgml(bool work) {
        t_reached = t_reached || work;
        t_in_ggml += 1;
    }
    ~InGgml() { t_in_ggml -= 1; }
    InGgml(const InGgml &) = delete;
    InGgml & operator=(const InGgml &) = delete;
};

void * allocate(std::size_t n) {
    if (t_counting && t_reached && t_in_ggml == 0) {
        t_late += 1;
    }
    if (void * p = std::malloc(n > 0 ? n : 1)) {
        t_live += 1;
        return p;
    }
    throw std::bad_alloc();
}

void release(void * p) {
    if (p != nullptr) {
        t_live -= 1;
        std::free(p);
    }
}

// The entries the seam had (NULL: GGML's own), each called inside an InGgml.
sam3d_ggml_seam g_inner{};

bool work(const char * entry) {
    return std::strcmp(entry, "buft_alloc_buffer") != 0 && std::strcmp(entry, "event_new") != 0 &&
           std::strcmp(entry, "event_free") != 0;
}

#define LATE_WRAP(ret, name, fallback, params, args)                      \
    ret name params {                                                    \
        InGgml in_ggml(work(#name));                                     \
        return g_inner.name != nullptr ? g_inner.name args : fallback args; \
    }
LATE_WRAP(void, tensor_set, ggml_backend_tensor_set, (ggml_tensor * t, const void * d, size_t o, size_t n), (t, d, o, n))
LATE_WRAP(void, tensor_get, ggml_backend_tensor_get, (const ggml_tensor * t, void * d, size_t o, size_t n), (t, d, o, n))
LATE_WRAP(void, tensor_set_async, ggml_backend_tensor_set_async,
          (ggml_backend_t b, ggml_tensor * t, const void * d, size_t o, size_t n), (b, t, d, o, n))
LATE_WRAP(void, tensor_get_async, ggml_backend_tensor_get_async,
          (ggml_backend_t b, const ggml_tensor * t, void * d, size_t o, size_t n), (b, t, d, o, n))
LATE_WRAP(ggml_status, graph_compute, ggml_backend_graph_compute, (ggml_backend_t b, ggml_cgraph * g), (b, g))
LATE_WRAP(ggml_status, graph_compute_async, ggml_backend_graph_compute_async, (ggml_backend_t b, ggml_cgraph * g),
          (b, g))
LATE_WRAP(void, synchronize, ggml_backend_synchronize, (ggml_backend_t b), (b))
LATE_WRAP(ggml_backend_buffer_t, buft_alloc_buffer, ggml_backend_buft_alloc_buffer,
          (ggml_backend_buffer_type_t t, size_t n), (t, n))
LATE_WRAP(ggml_backend_event_t, event_new, ggml_backend_event_new, (ggml_backend_dev_t d), (d))
LATE_WRAP(void, event_free, ggml_backend_event_free, (ggml_backend_event_t e), (e))
LATE_WRAP(void, event_record, ggml_backend_event_record, (ggml_backend_event_t e, ggml_backend_t b), (e, b))
LATE_WRAP(void, event_synchronize, ggml_backend_event_synchronize, (ggml_backend_event_t e), (e))
LATE_WRAP(void, event_wait, ggml_backend_event_wait, (ggml_backend_t b, ggml_backend_event_t e), (b, e))
#undef LATE_WRAP

// Every GGML entry a call can reach, wrapped.
void wrap(sam3d_ggml_seam & s) {
    g_inner = s;
    s.tensor_set = tensor_set;
    s.tensor_get = tensor_get;
    s.tensor_set_async = tensor_set_async;
    s.tensor_get_async = tensor_get_async;
    s.graph_compute = graph_compute;
    s.graph_compute_async = graph_compute_async;
    s.synchronize = synchronize;
    s.buft_alloc_buffer = buft_alloc_buffer;
    s.event_new = event_new;
    s.event_free = event_free;
    s.event_record = event_record;
    s.event_synchronize = event_synchronize;
    s.event_wait = event_wait;
}

// The late allocations of one entry point's call `f`, which must return SAM3D_OK.
template <class F>
size_t of(const char * what, F && f) {
    t_late = 0;
    t_reached = false;
    t_counting = true;
    const sam3d_status st = f();
    t_counting = false;
    EXPECT_EQ(st, SAM3D_OK) << what << ": " << sam3d_last_error();
    EXPECT_TRUE(t_reached) << what << " reached no GGML entry: nothing was checked";
    return t_late;
}

}  // namespace late

void * operator new(std::size_t n) { return late::allocate(n); }
void * operator new[](std::size_t n) { return late::allocate(n); }
void * operator new(std::size_t n, const std::nothrow_t &) noexcept {
    try {
        return late::allocate(n);
    } catch (...) {
        return nullptr;
    }
}
void * operator new[](std::size_t n, const std::nothrow_t &) noexcept {
    try {
        return late::allocate(n);
    } catch (...) {
        return nullptr;
    }
}
void operator delete(void * p) noexcept { late::release(p); }
void operator delete[](void * p) noexcept { late::release(p); }
void operator delete(void * p, std::size_t) noexcept { late::release(p); }
void operator delete[](void * p, std::size_t) noexcept { late::release(p); }
void operator delete(void * p, const std::nothrow_t &) noexcept { late::release(p); }
void operator delete[](void * p, const std::nothrow_t &) noexcept { late::release(p); }

// Every entry point of a call on the staged paths, with events and copying calls in pieces, two
// rounds (the second on the first round's events and capacities): three queued copying calls
// in flight at once and waited oldest first, a staged run, and a kept zero-copy queued call with
// its release. Each of them allocates nothing after its first GGML call, on one queue and on a
// duplex session (rule 11: the queued calls' downloads on the second backend).
void no_call_allocates_after_its_first_ggml_call(sam3d_duplex duplex) {
    deferred::reset();
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    deferred::install_with_events(r.seam());
    late::wrap(r.seam());
    const int64_t n = 1024;
    const size_t bytes = n * sizeof(float);
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = SAM3D_BATCHING_ON;
    o.staging_piece_bytes = bytes;  // one piece per descriptor: piece events both ways
    o.duplex = duplex;
    sam3d_session * s = r.session(o);
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(sam3d_session_duplex(s), duplex == SAM3D_DUPLEX_ON);
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 3.0f);
    for (int round = 0; round < 2; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        std::vector<std::vector<float>> outs(3, std::vector<float>(n, -1.0f));
        std::vector<std::unique_ptr<cases::Call>> calls;
        sam3d_ticket t[3] = {0, 0, 0};
        for (int i = 0; i < 3; ++i) {
            calls.push_back(std::make_unique<cases::Call>(w, a.data(), b.data(), outs[i].data()));
            EXPECT_EQ(late::of("queued submit",
                               [&] { return sam3d_session_submit(s, &calls[i]->call, SAM3D_SUBMIT_QUEUED, &t[i]); }),
                      0u)
                << "queued submit " << i;
        }
        for (int i = 0; i < 3; ++i) {
            EXPECT_EQ(late::of("wait", [&] { return sam3d_session_wait(s, t[i]); }), 0u) << "wait " << i;
            EXPECT_EQ(outs[i], cases::expected(a, b)) << "call " << i;
        }
        std::vector<float> out(n, -1.0f);
        cases::Call run(w, a.data(), b.data(), out.data());
        EXPECT_EQ(late::of("run", [&] { return sam3d_session_run(s, &run.call); }), 0u);
        EXPECT_EQ(out, cases::expected(a, b));

        cases::Slots sl = cases::reserve_scale_add(s, w);
        std::memcpy(sl.a, a.data(), bytes);
        std::memcpy(sl.b, b.data(), bytes);
        sam3d_ticket k = 0;
        const unsigned flags = SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED | SAM3D_SUBMIT_KEEP_SLOTS;
        EXPECT_EQ(late::of("zero-copy submit", [&] { return cases::submit_scale_add(s, w, sl, flags, &k); }), 0u);
        EXPECT_EQ(late::of("wait", [&] { return sam3d_session_wait(s, k); }), 0u);
        EXPECT_EQ(std::vector<float>(sl.out, sl.out + n), cases::expected(a, b));
        EXPECT_EQ(sam3d_session_release(s, k), SAM3D_OK) << sam3d_last_error();
    }
    EXPECT_GT(deferred::g_event_records, 0) << "no event was recorded: the event paths were not checked";
    deferred::reset();
}

TEST(Allocations, NoCallAllocatesAfterItsFirstGgmlCall) { no_call_allocates_after_its_first_ggml_call(SAM3D_DUPLEX_OFF); }

TEST(Allocations, NoDuplexCallAllocatesAfterItsFirstGgmlCall) {
    no_call_allocates_after_its_first_ggml_call(SAM3D_DUPLEX_ON);
}

// A call complete on return that keeps nothing (not queued, not kept, no slot of the current
// reservation: uploads from kept slots only, A4) leaves nothing of itself in the session: fifty
// of them, after warm-up, leave the program's live allocations where they were.
TEST(Allocations, ACallCompleteOnReturnRetainsNothing) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    const int64_t n = 256;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    ASSERT_NE(s, nullptr);
    const std::vector<float> a = rig::ramp(n, 1.0f), b = rig::ramp(n, 4.0f);
    cases::Slots sl = cases::reserve_scale_add(s, w);
    std::memcpy(sl.a, a.data(), n * 4);
    std::memcpy(sl.b, b.data(), n * 4);
    sam3d_ticket kept = 0;
    ASSERT_EQ(cases::submit_scale_add(s, w, sl, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, &kept), SAM3D_OK)
        << sam3d_last_error();
    sam3d_upload u[] = {rig::up(w.a, sl.a, n * 4), rig::up(w.b, sl.b, n * 4)};
    const sam3d_call c{u, 2, w.graph, nullptr, 0, false};
    const auto calls = [&](int k) {
        for (int i = 0; i < k; ++i) {
            ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_OK) << sam3d_last_error();
        }
    };
    calls(5);
    const long live = late::t_live;
    calls(50);
    EXPECT_EQ(late::t_live - live, 0) << "calls complete on return left allocations behind";
    std::vector<float> out(n, -1.0f);
    sam3d_download d[] = {rig::down(w.out, out.data(), n * 4)};
    const sam3d_call back{nullptr, 0, nullptr, d, 1, false};
    ASSERT_EQ(sam3d_session_run(s, &back), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(out, cases::expected(a, b));
    EXPECT_EQ(sam3d_session_release(s, kept), SAM3D_OK) << sam3d_last_error();
}

