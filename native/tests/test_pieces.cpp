// Rule 2's pieces (docs/contract.md): a copying call's inputs are copied into staging and
// uploaded piece by piece, each piece but the last followed by an event before the next is
// copied; a run's outputs are copied out piece by piece, each once its own event completed; the
// piece events are synchronized before they are recorded again; results are the same for every
// piece size, on every backend.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <sched.h>

#include "cases.h"
#include "deferred.h"
#include "probe.h"
#include "rig.h"

using rig::Kind;
using rig::Rig;

namespace {

constexpr int kTensors = 4;
constexpr int64_t kFloats = 1024;               // 4 KiB per tensor: one piece each at 4 KiB
constexpr size_t kBytes = kFloats * sizeof(float);

// What the seam saw during one call, on the deferred queue with events (cpu_staged).
struct Seen {
    const std::vector<std::vector<float>> * inputs = nullptr;
    std::vector<std::vector<float>> * outputs = nullptr;
    const std::vector<std::vector<float>> * expected = nullptr;
    int uploads = 0;
    int downloads = 0;
    std::vector<bool> next_staged;      // at upload i's enqueue: upload i+1's staging holds its input
    std::vector<int> records_after;     // uploads enqueued when each upload-phase event was recorded
    std::vector<int> copied_out;        // outputs already in the caller's dst at each download-phase event wait
    std::map<ggml_backend_event_t, bool> pending;  // recorded and not synchronized since
    bool rerecorded_pending = false;
};
Seen g_seen;

int outputs_copied_out() {
    int n = 0;
    for (int i = 0; i < kTensors; ++i) {
        n += (*g_seen.outputs)[i] == (*g_seen.expected)[i];
    }
    return n;
}

void set_async(ggml_backend_t b, ggml_tensor * t, const void * data, size_t off, size_t size) {
    const int i = g_seen.uploads++;
    if (i + 1 < kTensors) {
        // The layout (rule 2): upload i+1's staging follows upload i's, aligned (4 KiB is).
        const auto * next = static_cast<const uint8_t *>(data) + size;
        g_seen.next_staged.push_back(std::memcmp(next, (*g_seen.inputs)[i + 1].data(), kBytes) == 0);
    }
    deferred::set_async(b, t, data, off, size);
}
void get_async(ggml_backend_t b, const ggml_tensor * t, void * data, size_t off, size_t size) {
    g_seen.downloads += 1;
    deferred::get_async(b, t, data, off, size);
}
void event_record(ggml_backend_event_t e, ggml_backend_t b) {
    g_seen.rerecorded_pending = g_seen.rerecorded_pending || g_seen.pending[e];
    g_seen.pending[e] = true;
    if (g_seen.downloads == 0) {
        g_seen.records_after.push_back(g_seen.uploads);
    }
    deferred::event_record(e, b);
}
void event_synchronize(ggml_backend_event_t e) {
    deferred::event_synchronize(e);
    g_seen.pending[e] = false;
    if (g_seen.downloads == kTensors) {
        g_seen.copied_out.push_back(outputs_copied_out());
    }
}

// The deferred queue with events, every transfer and event call seen by g_seen.
void watch(Rig & r) {
    deferred::install_with_events(r.seam());
    r.seam().tensor_set_async = set_async;
    r.seam().tensor_get_async = get_async;
    r.seam().event_record = event_record;
    r.seam().event_synchronize = event_synchronize;
}

// kTensors tensors; one call uploads input i into tensor i and downloads it back into output i
// (an in-order queue: the download reads what the upload wrote).
struct Roundtrip {
    ggml_tensor * t[kTensors];
    std::vector<std::vector<float>> in, out;

    explicit Roundtrip(Rig & r) : in(kTensors), out(kTensors) {
        for (int i = 0; i < kTensors; ++i) {
            t[i] = r.f32(kFloats, ("t" + std::to_string(i)).c_str());
            r.bytes(64, "apart");  // the tensors do not meet on the device: a run each (rule 10)
        }
    }
    sam3d_status run(sam3d_session * s, float seed) {
        sam3d_upload u[kTensors];
        sam3d_download d[kTensors];
        for (int i = 0; i < kTensors; ++i) {
            in[i] = rig::ramp(kFloats, seed + 10.0f * static_cast<float>(i));
            out[i].assign(kFloats, -1.0f);
            u[i] = rig::up(t[i], in[i].data(), kBytes);
            d[i] = rig::down(t[i], out[i].data(), kBytes);
        }
        const sam3d_call c{u, kTensors, nullptr, d, kTensors, false};
        return sam3d_session_run(s, &c);
    }
};

sam3d_session_options pieces_of(size_t bytes, unsigned copy_threads = 0) {
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = SAM3D_BATCHING_ON;
    o.staging_piece_bytes = bytes;
    o.staging_copy_threads = copy_threads;
    return o;
}

// One call of the workload on a and b, submitted with `flags` (0: a run; SAM3D_SUBMIT_QUEUED:
// queued, then waited): its output (-1 where nothing was written; empty if a call failed).
std::vector<float> scale_add_once(sam3d_session * s, const cases::ScaleAdd & w, const std::vector<float> & a,
                                  const std::vector<float> & b, unsigned flags) {
    const size_t bytes = a.size() * sizeof(float);
    std::vector<float> out(a.size(), -1.0f);
    sam3d_upload u[] = {rig::up(w.a, a.data(), bytes), rig::up(w.b, b.data(), bytes)};
    sam3d_download d[] = {rig::down(w.out, out.data(), bytes)};
    const sam3d_call c{u, 2, w.graph, d, 1, false};
    sam3d_ticket t = 0;
    sam3d_status st = sam3d_session_submit(s, &c, flags, &t);
    if (st == SAM3D_OK && (flags & SAM3D_SUBMIT_QUEUED)) {
        st = sam3d_session_wait(s, t);
    }
    EXPECT_EQ(st, SAM3D_OK) << sam3d_last_error();
    return st == SAM3D_OK ? out : std::vector<float>{};
}

// cpu_staged over the deferred queue with events (`seam` changes it further when given), the
// roundtrip's tensors, and a session of one-descriptor pieces.
struct EventPieces {
    Rig r{Kind::CpuStaged};
    Roundtrip w{r};
    sam3d_session * s = nullptr;
    explicit EventPieces(void (*seam)(sam3d_ggml_seam &) = nullptr) {
        deferred::install_with_events(r.seam());
        if (seam != nullptr) {
            seam(r.seam());
        }
        r.alloc();
        s = r.session(pieces_of(kBytes));
    }
};

class Pieces : public testing::TestWithParam<Kind> {
   protected:
    void SetUp() override {
        probe::reset();
        deferred::reset();
        g_seen = Seen{};
    }
    void TearDown() override { deferred::reset(); }
};

class PiecesOrder : public testing::Test {
   protected:
    void SetUp() override {
        probe::reset();
        deferred::reset();
        g_seen = Seen{};
    }
    void TearDown() override { deferred::reset(); }
};

}  // namespace

// One descriptor per piece (4 KiB pieces): each upload is enqueued before the next input is
// copied into staging, with an event recorded after each piece but the last; each output but
// the last is in the caller's dst when the core waits for the next piece's event; the events
// of the first call are synchronized before the second records them again. Checked on the
// second call, whose staging still holds the first call's (different) inputs.
TEST_F(PiecesOrder, EachPieceTransfersWhileTheNextIsCopied) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    watch(r);
    Roundtrip w(r);
    r.alloc();
    sam3d_session * s = r.session(pieces_of(kBytes));
    ASSERT_NE(s, nullptr);
    for (float seed : {1.0f, 500.0f}) {
        g_seen.uploads = g_seen.downloads = 0;
        g_seen.next_staged.clear();
        g_seen.records_after.clear();
        g_seen.copied_out.clear();
        g_seen.inputs = &w.in;
        g_seen.outputs = &w.out;
        g_seen.expected = &w.in;
        ASSERT_EQ(w.run(s, seed), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(w.out, w.in) << "seed " << seed;
    }
    EXPECT_EQ(g_seen.next_staged, std::vector<bool>(kTensors - 1, false))
        << "an input was copied into staging before the previous piece was enqueued";
    EXPECT_EQ(g_seen.records_after, (std::vector<int>{1, 2, 3})) << "an event after each input piece but the last";
    EXPECT_EQ(g_seen.copied_out, (std::vector<int>{0, 1, 2}))
        << "each output piece is copied out once its own event completed, before the next wait";
    EXPECT_FALSE(g_seen.rerecorded_pending) << "a piece event was recorded again before it was synchronized";
    EXPECT_EQ(deferred::g_events_new, 2 * (kTensors - 1)) << "the events of the first call are reused";
    EXPECT_EQ(deferred::g_syncs, 2) << "one synchronize per call (rule 2)";
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.pinned_batches, 2u);
    EXPECT_EQ(k.async_uploads, 2u * kTensors);
    EXPECT_GT(k.copy_ns, 0u);
    // Rule 8: the pieces' events and the calls' synchronizes, as the seam saw them made.
    EXPECT_EQ(k.synchronizes, 2u);
    EXPECT_EQ(k.event_records, static_cast<uint64_t>(deferred::g_event_records));
    EXPECT_EQ(k.event_records, 2u * 2u * (kTensors - 1)) << "per call, after every piece but the last, both ways";
    EXPECT_EQ(k.event_synchronizes, static_cast<uint64_t>(deferred::g_event_syncs));
    EXPECT_EQ(k.event_waits, 0u);
}

// Rule 2 counts pieces, not the session's events: a call of four pieces each way makes six
// piece events, one per piece but the last of each direction, and synchronizes none before its
// first record; after it, a call of two pieces each way records one event per direction, none
// after either direction's last piece, though spare events are there.
TEST_F(PiecesOrder, TheLastPieceHasNoEventEvenWithSpareEvents) {
    EventPieces e;
    Rig & r = e.r;
    Roundtrip & w = e.w;
    sam3d_session * s = e.s;
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(w.run(s, 1.0f), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(deferred::g_events_new, 2 * (kTensors - 1));
    const sam3d_counters k0 = r.counters(s);
    // Six events, each recorded once, none before its first record: only the three download
    // pieces' events are waited before their outputs are copied out.
    EXPECT_EQ(k0.event_records, 2u * (kTensors - 1));
    EXPECT_EQ(k0.event_synchronizes, uint64_t{kTensors - 1}) << "an event was synchronized before its first record, "
                                                                  "or two pieces took one event";
    std::vector<float> in0 = rig::ramp(kFloats, 7.0f), in1 = rig::ramp(kFloats, 70.0f);
    std::vector<float> out2(kFloats, -1.0f), out3(kFloats, -1.0f);
    // Uploads into tensors 0 and 1, downloads of tensors 2 and 3 (the first call's inputs).
    sam3d_upload u[] = {rig::up(w.t[0], in0.data(), kBytes), rig::up(w.t[1], in1.data(), kBytes)};
    sam3d_download d[] = {rig::down(w.t[2], out2.data(), kBytes), rig::down(w.t[3], out3.data(), kBytes)};
    const sam3d_call c{u, 2, nullptr, d, 2, false};
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    const sam3d_counters k1 = r.counters(s);
    EXPECT_EQ(k1.event_records - k0.event_records, 2u) << "one event per direction: after the first of two pieces";
    // Each of the two events was recorded before: synchronized before its record, and the
    // download piece's once more before its output is copied out.
    EXPECT_EQ(k1.event_synchronizes - k0.event_synchronizes, 3u);
    EXPECT_EQ(deferred::g_events_new, 2 * (kTensors - 1)) << "the spare events are reused, none made";
    EXPECT_EQ(out2, w.in[2]);
    EXPECT_EQ(out3, w.in[3]);
}

// Pieces and their events belong to batching calls (rule 2): a run and a queued copying call
// whose staging allocation failed take the synchronous path (rule 4) and make no piece event,
// on a session with events; the queued one is complete when submit returns.
TEST_F(PiecesOrder, ACallThatFellBackMakesNoPieceEvent) {
    probe::get().alloc_mode = 1;  // every staging allocation fails: pinned_unavailable
    EventPieces e([](sam3d_ggml_seam & seam) { seam.buft_alloc_buffer = probe::alloc_buffer; });
    Rig & r = e.r;
    Roundtrip & w = e.w;
    sam3d_session * s = e.s;
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(w.run(s, 3.0f), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(w.out, w.in);
    const std::vector<float> in = rig::ramp(kFloats, 5.0f);
    std::vector<float> out(kFloats, -1.0f);
    sam3d_upload u[] = {rig::up(w.t[0], in.data(), kBytes), rig::up(w.t[1], in.data(), kBytes)};
    sam3d_download d[] = {rig::down(w.t[0], out.data(), kBytes)};
    const sam3d_call c{u, 2, nullptr, d, 1, false};
    sam3d_ticket t = 0;
    ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK) << sam3d_last_error();
    const uint64_t synchronizes = r.counters(s).synchronizes;
    ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(out, in);
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.synchronizes, synchronizes) << "the queued call took the synchronous path: its wait has nothing to wait for";
    EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_PINNED_UNAVAILABLE], 2u);
    EXPECT_EQ(deferred::g_events_new, 0) << "the synchronous path made piece events";
    EXPECT_EQ(k.event_records, 0u);
}

// Zero-copy calls go in one piece (rule 2): queued or not, with four slots each way of one
// piece's bytes each, they make and record no piece event (a queued one records its completion
// event only).
TEST_F(PiecesOrder, AZeroCopyCallMakesNoPieceEvent) {
    EventPieces e;
    Rig & r = e.r;
    Roundtrip & w = e.w;
    sam3d_session * s = e.s;
    ASSERT_NE(s, nullptr);
    for (unsigned flags : {0u, unsigned{SAM3D_SUBMIT_QUEUED}}) {
        SCOPED_TRACE(flags ? "queued" : "not queued");
        sam3d_slot_request req[2 * kTensors];
        void * p[2 * kTensors] = {};
        for (auto & q : req) {
            q.size = kBytes;
        }
        ASSERT_EQ(sam3d_session_reserve(s, req, 2 * kTensors, p), SAM3D_OK) << sam3d_last_error();
        sam3d_upload u[kTensors];
        sam3d_download d[kTensors];
        for (int i = 0; i < kTensors; ++i) {
            w.in[i] = rig::ramp(kFloats, 3.0f * static_cast<float>(i + 1) + static_cast<float>(flags));
            std::memcpy(p[i], w.in[i].data(), kBytes);
            u[i] = rig::up(w.t[i], p[i], kBytes);
            d[i] = rig::down(w.t[i], p[kTensors + i], kBytes);
        }
        const sam3d_call c{u, kTensors, nullptr, d, kTensors, false};
        sam3d_ticket t = 0;
        ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY | flags, &t), SAM3D_OK) << sam3d_last_error();
        if (flags != 0) {
            ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
        }
        for (int i = 0; i < kTensors; ++i) {
            const float * o = static_cast<const float *>(p[kTensors + i]);
            EXPECT_EQ(std::vector<float>(o, o + kFloats), w.in[i]) << "tensor " << i;
        }
    }
    EXPECT_EQ(r.counters(s).pinned_batches, 2u);
    EXPECT_EQ(deferred::g_events_new, 1) << "a zero-copy call made piece events (the queued call's own event is one)";
    EXPECT_EQ(r.counters(s).event_records, 1u);
}

// Zero-copy calls go in one piece (rule 2) also on a session that holds piece events: after a
// run in pieces recorded them, a zero-copy call whose four slots each way span four pieces
// records none (rule 8's event_records; a queued one records its completion event only).
TEST_F(PiecesOrder, AZeroCopyCallAfterACallInPiecesRecordsNoPieceEvent) {
    EventPieces e;
    Rig & r = e.r;
    Roundtrip & w = e.w;
    sam3d_session * s = e.s;
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(w.run(s, 2.0f), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(w.out, w.in);
    ASSERT_GT(r.counters(s).event_records, 0u) << "the run in pieces recorded its piece events";
    for (unsigned flags : {0u, unsigned{SAM3D_SUBMIT_QUEUED}}) {
        SCOPED_TRACE(flags ? "queued" : "not queued");
        sam3d_slot_request req[2 * kTensors];
        void * p[2 * kTensors] = {};
        for (auto & q : req) {
            q.size = kBytes;
        }
        ASSERT_EQ(sam3d_session_reserve(s, req, 2 * kTensors, p), SAM3D_OK) << sam3d_last_error();
        sam3d_upload u[kTensors];
        sam3d_download d[kTensors];
        for (int i = 0; i < kTensors; ++i) {
            w.in[i] = rig::ramp(kFloats, 5.0f * static_cast<float>(i + 1) + static_cast<float>(flags));
            std::memcpy(p[i], w.in[i].data(), kBytes);
            u[i] = rig::up(w.t[i], p[i], kBytes);
            d[i] = rig::down(w.t[i], p[kTensors + i], kBytes);
        }
        const uint64_t records = r.counters(s).event_records;
        const sam3d_call c{u, kTensors, nullptr, d, kTensors, false};
        sam3d_ticket t = 0;
        ASSERT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY | flags, &t), SAM3D_OK) << sam3d_last_error();
        if (flags != 0) {
            ASSERT_EQ(sam3d_session_wait(s, t), SAM3D_OK) << sam3d_last_error();
        }
        for (int i = 0; i < kTensors; ++i) {
            const float * o = static_cast<const float *>(p[kTensors + i]);
            EXPECT_EQ(std::vector<float>(o, o + kFloats), w.in[i]) << "tensor " << i;
        }
        EXPECT_EQ(r.counters(s).event_records - records, flags != 0 ? 1u : 0u)
            << "a zero-copy call recorded piece events";
    }
    EXPECT_EQ(r.counters(s).pinned_batches, 3u);
}

// A queued copying call in pieces (rule 2) makes its input pieces' events before submission,
// on a fresh session as after runs: one after each input piece but the last, and its completion
// event (a queued call's downloads complete at its wait, in no piece).
TEST_F(PiecesOrder, AQueuedCallsInputPiecesHaveTheirEvents) {
    EventPieces e;
    ASSERT_NE(e.s, nullptr);
    sam3d_upload u[kTensors];
    sam3d_download d[kTensors];
    for (int i = 0; i < kTensors; ++i) {
        e.w.in[i] = rig::ramp(kFloats, 7.0f * static_cast<float>(i + 1));
        e.w.out[i].assign(kFloats, -1.0f);
        u[i] = rig::up(e.w.t[i], e.w.in[i].data(), kBytes);
        d[i] = rig::down(e.w.t[i], e.w.out[i].data(), kBytes);
    }
    const sam3d_call c{u, kTensors, nullptr, d, kTensors, false};
    sam3d_ticket t = 0;
    ASSERT_EQ(sam3d_session_submit(e.s, &c, SAM3D_SUBMIT_QUEUED, &t), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(deferred::g_events_new, kTensors) << "three input pieces' events and the completion event";
    EXPECT_EQ(e.r.counters(e.s).event_records, uint64_t{kTensors});
    ASSERT_EQ(sam3d_session_wait(e.s, t), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(e.w.out, e.w.in);
}

// One piece (SIZE_MAX): every input is staged before the first upload, no piece event is made,
// and every output is copied out after the one synchronize.
TEST_F(PiecesOrder, OnePieceStagesEverythingFirstAndMakesNoEvent) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    watch(r);
    Roundtrip w(r);
    r.alloc();
    sam3d_session * s = r.session(pieces_of(SIZE_MAX));
    ASSERT_NE(s, nullptr);
    g_seen.inputs = &w.in;
    g_seen.outputs = &w.out;
    g_seen.expected = &w.in;
    ASSERT_EQ(w.run(s, 3.0f), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(w.out, w.in);
    EXPECT_EQ(g_seen.next_staged, std::vector<bool>(kTensors - 1, true));
    EXPECT_EQ(deferred::g_events_new, 0);
    EXPECT_EQ(deferred::g_event_records, 0);
    EXPECT_EQ(deferred::g_syncs, 1);
}

// Without events (GGML's event_new returns NULL), pieces still stage and upload in order; every
// output is copied out after the synchronize; results exact.
TEST_F(PiecesOrder, WithoutEventsPiecesJoinTheNext) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    deferred::install_with_events(r.seam());
    deferred::g_fail_event_new = true;
    r.seam().tensor_set_async = set_async;
    r.seam().tensor_get_async = get_async;
    Roundtrip w(r);
    r.alloc();
    sam3d_session * s = r.session(pieces_of(kBytes));
    ASSERT_NE(s, nullptr);
    g_seen.inputs = &w.in;
    ASSERT_EQ(w.run(s, 7.0f), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(w.out, w.in);
    EXPECT_EQ(deferred::g_event_records, 0);
    EXPECT_EQ(deferred::g_syncs, 1);
}

// Every piece size gives the workload's exact result, for runs and queued copying calls, on
// every backend (lavapipe's real events included): 1 byte (one descriptor per piece), a size
// that splits the call unevenly, the default, one piece.
TEST_P(Pieces, EveryPieceSizeGivesTheSameBytes) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 70001;  // not a multiple of any alignment
    cases::ScaleAdd w = cases::scale_add(r, n);
    Roundtrip trip(r);
    r.alloc();
    const std::vector<float> a = rig::ramp(n, 4.0f), b = rig::ramp(n, 9.0f);
    for (size_t piece : {size_t{1}, size_t{100000}, size_t{0}, SIZE_MAX}) {
        sam3d_session * s = r.session(pieces_of(piece));
        ASSERT_NE(s, nullptr);
        for (unsigned flags : {0u, unsigned{SAM3D_SUBMIT_QUEUED}}) {
            EXPECT_EQ(scale_add_once(s, w, a, b, flags), cases::expected(a, b)) << "piece " << piece << ", flags " << flags;
        }
        ASSERT_EQ(trip.run(s, 11.0f), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(trip.out, trip.in) << "piece " << piece;
    }
}

// Every number of copy threads gives the workload's exact result with every piece size, for
// runs and queued copying calls, on every backend: 1.2 MB per tensor, so that each thread's
// part of a piece (at least 64 KiB, docs/contract.md rule 2 "Copy threads") starts and ends
// inside a descriptor, and 8 threads split one piece of both inputs into parts of ~300 KB.
TEST_P(Pieces, EveryCopyThreadCountGivesTheSameBytes) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    constexpr int64_t n = 300001;
    cases::ScaleAdd w = cases::scale_add(r, n);
    r.alloc();
    // Every float of every call distinct (exact in float: below 2^24), so that a byte copied
    // from the wrong place, or left from the previous call, shows.
    const auto distinct = [](float first) {
        std::vector<float> v(n);
        for (int64_t i = 0; i < n; ++i) {
            v[i] = first + static_cast<float>(i);
        }
        return v;
    };
    float seed = 1.0f;
    for (unsigned threads : {1u, 2u, 3u, 8u}) {
        for (size_t piece : {size_t{0}, size_t{700000}, SIZE_MAX}) {
            sam3d_session * s = r.session(pieces_of(piece, threads));
            ASSERT_NE(s, nullptr);
            const bool stages = sam3d_session_static_fallback(s) == SAM3D_FALLBACK_COUNT;
            EXPECT_EQ(sam3d_session_copy_threads(s), stages ? threads : 1u);
            for (unsigned flags : {0u, unsigned{SAM3D_SUBMIT_QUEUED}}) {
                const std::vector<float> a = distinct(seed), b = distinct(seed + 2000000.0f);
                seed += 1.0f;
                ASSERT_EQ(scale_add_once(s, w, a, b, flags), cases::expected(a, b))
                    << threads << " threads, piece " << piece << ", flags " << flags;
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, Pieces, testing::ValuesIn(rig::kinds()), rig::param_name);

// Rule 2, "Copy threads": the participants claim a piece's parts, so one the machine does not run
// leaves its parts to the others. With the workers held (the seam: as if none ran) the caller's
// thread copies every part; with the caller held, the workers do; either way the call completes
// with the same bytes and the participants' bytes add up to the piece's, each byte once. A piece
// below twice 64 KiB is one part, the caller's. What each participant copied, through the seam.
TEST_F(PiecesOrder, TheCopyThreadsClaimAPiecesPartsAndTheOthersCopyWhatOneLeaves) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    const int64_t floats = 100001;  // 400,004 bytes: 6 parts of 64 KiB
    const size_t bytes = floats * sizeof(float);
    ggml_tensor * big = r.f32(floats, "big");
    r.bytes(64, "apart");
    ggml_tensor * small = r.f32(1000, "small");
    r.alloc();
    sam3d_session * s = r.session(pieces_of(SIZE_MAX, 4));  // one piece per call
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(sam3d_session_copy_threads(s), 4u);
    const auto roundtrip = [&](ggml_tensor * t, size_t n) {
        std::vector<float> in = rig::ramp(static_cast<int64_t>(n / sizeof(float)), 5.0f);
        std::vector<float> out(in.size(), -1.0f);
        sam3d_upload u = rig::up(t, in.data(), n);
        sam3d_download d = rig::down(t, out.data(), n);
        const sam3d_call c{&u, 1, nullptr, &d, 1, false};
        ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(out, in);
    };
    const auto copied = [&] {
        std::vector<uint64_t> k(5, 7);
        EXPECT_EQ(sam3d_testing_copied_bytes(s, k.data(), 5), 4u);
        EXPECT_EQ(k[4], 7u) << "written beyond the session's participants";
        k.pop_back();
        return k;
    };
    sam3d_testing_hold_copy_threads(s, SAM3D_TESTING_HOLD_WORKERS);
    for (int i = 0; i < 50; ++i) {  // back to back, so workers that would claim are awake for it
        roundtrip(big, bytes);
    }
    EXPECT_EQ(copied(), (std::vector<uint64_t>{100 * bytes, 0, 0, 0})) << "in and out, all on the caller's thread";
    sam3d_testing_hold_copy_threads(s, SAM3D_TESTING_HOLD_CALLER);
    roundtrip(big, bytes);
    const std::vector<uint64_t> held = copied();
    EXPECT_EQ(held[0], 100 * bytes) << "the caller claimed a part while held";
    EXPECT_EQ(held[1] + held[2] + held[3], 2 * bytes) << "the workers copied each byte once, in and out";
    sam3d_testing_hold_copy_threads(s, SAM3D_TESTING_HOLD_NONE);
    for (int i = 0; i < 20; ++i) {
        roundtrip(big, bytes);
    }
    const std::vector<uint64_t> shared = copied();
    EXPECT_EQ(shared[0] + shared[1] + shared[2] + shared[3], 142 * bytes) << "each byte copied once, in and out";
    roundtrip(small, 4000);  // one part: the caller's
    std::vector<uint64_t> after = copied();
    EXPECT_EQ(after[0], shared[0] + 8000);
    after[0] = shared[0];
    EXPECT_EQ(after, shared) << "the workers copied part of a piece of one part";
    sam3d_testing_hold_copy_threads(nullptr, SAM3D_TESTING_HOLD_WORKERS);  // no-op
    EXPECT_EQ(sam3d_testing_copied_bytes(nullptr, after.data(), 4), 0u);
}

// Rule 2, "Copy threads": a piece's bytes are cut into one part per 64 KiB, at most four per
// thread, one on a single thread (what the session would cut a piece of so many bytes into,
// through the seam). More parts than that hand more pieces between threads for the same bytes;
// fewer leave a preempted worker's share on it.
TEST_F(PiecesOrder, APieceIsCutIntoOnePartPer64KiBAndAtMostFourPerThread) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    constexpr size_t kib = 1024, mib = kib * kib;
    sam3d_session * one = r.session(pieces_of(0, 1));
    sam3d_session * four = r.session(pieces_of(0, 4));
    sam3d_session * most = r.session(pieces_of(0, SAM3D_STAGING_COPY_THREADS_MAX));
    ASSERT_NE(one, nullptr);
    ASSERT_NE(four, nullptr);
    ASSERT_NE(most, nullptr);
    ASSERT_EQ(sam3d_session_copy_threads(four), 4u);
    ASSERT_EQ(sam3d_session_copy_threads(most), SAM3D_STAGING_COPY_THREADS_MAX);
    EXPECT_EQ(sam3d_testing_copy_parts(one, 32 * mib), 1u) << "one part on a single thread";
    EXPECT_EQ(sam3d_testing_copy_parts(four, 1), 1u);
    EXPECT_EQ(sam3d_testing_copy_parts(four, 128 * kib - 1), 1u) << "one per 64 KiB: below two";
    EXPECT_EQ(sam3d_testing_copy_parts(four, 128 * kib), 2u);
    EXPECT_EQ(sam3d_testing_copy_parts(four, 400004), 6u);
    EXPECT_EQ(sam3d_testing_copy_parts(four, mib), 16u);
    EXPECT_EQ(sam3d_testing_copy_parts(four, 32 * mib), 16u) << "at most four per thread";
    EXPECT_EQ(sam3d_testing_copy_parts(most, 16 * mib - 1), 255u);
    EXPECT_EQ(sam3d_testing_copy_parts(most, 32 * mib), 256u) << "64 threads, four parts each";
    EXPECT_EQ(sam3d_testing_copy_parts(nullptr, mib), 0u);
}

// Rule 2, "Copy threads", at its largest: 64 threads cut a piece of 20,000,000 bytes into 256
// parts, the most a piece has. Every byte arrives, in and out, with the caller's thread copying
// its share or held (the workers copy all 256); each byte is copied once (the participants'
// bytes add up to the pieces'). Inner edges lie on multiples of 64 bytes of the piece and the
// last part takes the remainder, so with pieces of a multiple of 64 bytes (but parts that are
// not) every participant's bytes are a multiple of 64.
TEST_F(PiecesOrder, SixtyFourThreadsCopyTheMostPartsOnceEachOn64ByteEdges) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    constexpr int64_t floats = 5000000;
    constexpr size_t bytes = floats * sizeof(float);  // 20,000,000: 64 x 312,500; a part 78,125
    ggml_tensor * t = r.f32(floats, "t");
    r.alloc();
    sam3d_session * s = r.session(pieces_of(SIZE_MAX, SAM3D_STAGING_COPY_THREADS_MAX));
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(sam3d_session_copy_threads(s), SAM3D_STAGING_COPY_THREADS_MAX);
    ASSERT_EQ(sam3d_testing_copy_parts(s, bytes), 256u);
    float seed = 1.0f;
    for (sam3d_testing_hold held : {SAM3D_TESTING_HOLD_NONE, SAM3D_TESTING_HOLD_CALLER, SAM3D_TESTING_HOLD_NONE}) {
        sam3d_testing_hold_copy_threads(s, held);
        std::vector<float> in(floats), out(floats, -1.0f);
        for (int64_t i = 0; i < floats; ++i) {
            in[i] = seed + static_cast<float>(i % 8000000);
        }
        seed += 1.0f;
        // An upload alone, then a download alone: each call one piece of 20,000,000 bytes, within
        // the bound.
        sam3d_upload u = rig::up(t, in.data(), bytes);
        sam3d_download d = rig::down(t, out.data(), bytes);
        const sam3d_call up{&u, 1, nullptr, nullptr, 0, false};
        const sam3d_call down{nullptr, 0, nullptr, &d, 1, false};
        ASSERT_EQ(sam3d_session_run(s, &up), SAM3D_OK) << sam3d_last_error();
        ASSERT_EQ(sam3d_session_run(s, &down), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(out, in) << "hold " << held;
    }
    std::vector<uint64_t> k(SAM3D_STAGING_COPY_THREADS_MAX, 0);
    ASSERT_EQ(sam3d_testing_copied_bytes(s, k.data(), SAM3D_STAGING_COPY_THREADS_MAX), SAM3D_STAGING_COPY_THREADS_MAX);
    uint64_t sum = 0;
    for (unsigned i = 0; i < k.size(); ++i) {
        sum += k[i];
        EXPECT_EQ(k[i] % 64, 0u) << "participant " << i << " copied a part whose edge is off 64 bytes";
    }
    EXPECT_EQ(sum, 6 * uint64_t{bytes}) << "each byte copied once, three calls in and three out";
}

// Rule 2, "Copy threads": workers that found no part for a while sleep, and the next piece wakes
// them, one sleeper as well as several (sessions of 2 and 3 copy threads). With the caller held
// only the workers copy, so a piece that came while they slept completes only if it woke them.
// (The wait only lets them reach their sleep; nothing is timed.)
TEST_F(PiecesOrder, APieceWakesWorkersThatSlept) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    constexpr int64_t floats = 100000;  // 400,000 bytes: 6 parts
    ggml_tensor * t = r.f32(floats, "t");
    r.alloc();
    for (const unsigned threads : {2u, 3u}) {
        SCOPED_TRACE(std::to_string(threads) + " copy threads");
        sam3d_session * s = r.session(pieces_of(SIZE_MAX, threads));
        ASSERT_NE(s, nullptr);
        ASSERT_EQ(sam3d_session_copy_threads(s), threads);
        sam3d_testing_hold_copy_threads(s, SAM3D_TESTING_HOLD_CALLER);
        for (int i = 0; i < 3; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));  // well past the workers' 2 ms
            std::vector<float> in = rig::ramp(floats, 3.0f + static_cast<float>(i)), out(floats, -1.0f);
            sam3d_upload u = rig::up(t, in.data(), sizeof(float) * floats);
            sam3d_download d = rig::down(t, out.data(), sizeof(float) * floats);
            const sam3d_call c{&u, 1, nullptr, &d, 1, false};
            ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
            EXPECT_EQ(out, in);
        }
        std::vector<uint64_t> k(threads, 7);
        ASSERT_EQ(sam3d_testing_copied_bytes(s, k.data(), threads), threads);
        EXPECT_EQ(k[0], 0u) << "the caller copied while held";
        uint64_t workers = 0;
        for (unsigned w = 1; w < threads; ++w) {
            workers += k[w];
        }
        EXPECT_EQ(workers, 6u * sizeof(float) * floats);
    }
}

// The copy threads a session reports: as asked (up to 64), the default at most the processors
// the test may run on (its affinity), 1 where the session never stages; 65 is refused, naming
// the field.
TEST_F(PiecesOrder, CopyThreadsAreWhatTheOptionAsked) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    cpu_set_t set;
    ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    const unsigned cpus = static_cast<unsigned>(CPU_COUNT(&set));
    EXPECT_EQ(sam3d_session_copy_threads(r.session(pieces_of(0))), std::min(SAM3D_STAGING_COPY_THREADS, cpus));
    EXPECT_EQ(sam3d_session_copy_threads(r.session(pieces_of(0, 3))), 3u);
    EXPECT_EQ(sam3d_session_copy_threads(r.session(pieces_of(0, SAM3D_STAGING_COPY_THREADS_MAX))),
              SAM3D_STAGING_COPY_THREADS_MAX);
    sam3d_session_options off = pieces_of(0, 3);
    off.batching = SAM3D_BATCHING_OFF;
    EXPECT_EQ(sam3d_session_copy_threads(r.session(off)), 1u);
    sam3d_session_options many = pieces_of(0, SAM3D_STAGING_COPY_THREADS_MAX + 1);
    sam3d_session * s = nullptr;
    EXPECT_EQ(sam3d_testing_session_create(r.backend(), &many, &r.seam(), &s), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(s, nullptr);
    EXPECT_NE(std::string(sam3d_last_error()).find("staging_copy_threads is 65"), std::string::npos)
        << sam3d_last_error();
}

// The default copy threads are at most the processors the process may run on (rule 2, "Copy
// threads"): its CPU affinity, which a container's cpuset narrows, not the machine's count.
TEST_F(PiecesOrder, DefaultCopyThreadsFollowTheCpuAffinity) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    cpu_set_t all;
    ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
    if (CPU_COUNT(&all) < 2) GTEST_SKIP() << "one processor: an affinity of one is the machine's count";
    int first = 0;
    while (!CPU_ISSET(first, &all)) ++first;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    const unsigned threads = sam3d_session_copy_threads(r.session(pieces_of(0)));
    ASSERT_EQ(sched_setaffinity(0, sizeof all, &all), 0);
    EXPECT_EQ(threads, 1u) << "the default is at most the processors of this thread's affinity (1)";
}

// A piece is the fewest runs whose aligned bytes reach options.staging_piece_bytes (rule 2): at
// two runs' bytes one byte short of the piece it still grows. Five 64-byte uploads, each a run
// of its own (descending addresses never join), pieces of 2A + 1 bytes: [0, 3) and [3, 5), one
// event between them; pieces that ended a byte early would be three, two events.
TEST_F(PiecesOrder, APieceOneByteShortOfItsBytesStillGrows) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    deferred::install_with_events(r.seam());  // events, so that each piece but the last records one
    constexpr int n = 5;
    ggml_tensor * t[n];
    for (int i = 0; i < n; ++i) {
        t[i] = r.bytes(64, ("t" + std::to_string(i)).c_str());
    }
    r.alloc();
    sam3d_session * probe_session = r.session(pieces_of(SIZE_MAX));
    ASSERT_NE(probe_session, nullptr);
    const size_t al = sam3d_session_staging_alignment(probe_session);
    if (al == 0 || 64 % al != 0) {
        GTEST_SKIP() << "needs a staging alignment dividing 64 (each upload a run of one aligned size)";
    }
    sam3d_session * s = r.session(pieces_of(2 * 64 + 1));
    ASSERT_NE(s, nullptr);
    std::vector<std::vector<uint8_t>> in;
    in.reserve(n);  // the uploads point into these
    std::vector<sam3d_upload> u;
    for (int i = n - 1; i >= 0; --i) {
        in.push_back(rig::pattern(64, static_cast<uint8_t>(i + 1)));
        u.push_back(rig::up(t[i], in.back().data(), 64));
    }
    sam3d_call c{};
    c.uploads = u.data();
    c.n_uploads = u.size();
    sam3d_session_reset_counters(s);
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.upload_copies, 5u) << "each upload a run of its own";
    EXPECT_EQ(k.event_records, 1u) << "two pieces: [0, 3) and [3, 5)";
}
