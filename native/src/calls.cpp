// A call's lifecycle (calls.h). Each entry point: admit (validate.cpp, with the plan), apply the
// plan (the staging allocation; only a failed pinned allocation changes it), make every
// bookkeeping allocation, take the ring region, count, execute (execute.cpp's steps), then
// record the call's state. Nothing after the first GGML call of a call allocates.
#include "calls.h"

#include <algorithm>
#include <cstring>

#include "execute.h"
#include "plan.h"
#include "ring.h"
#include "runs.h"
#include "validate.h"

namespace sam3d {

namespace {

// ---------------------------------------------------------------- counters (rule 8)

sam3d_status rejected(Session & s, const Admitted & a, sam3d_status st) {
    s.counters.rejected_calls += a.is_call;
    return st;
}

// The per-call counts, at submission: a call that fails after it keeps them.
void count_submitted(Session & s, const Plan & p, const sam3d_call & c) {
    s.counters.calls += 1;
    if (p.reason != SAM3D_FALLBACK_COUNT) {
        s.counters.fallbacks[p.reason] += 1;
    }
    s.counters.pinned_batches += p.batched() && c.n_uploads + c.n_downloads > 0;  // a graph only stages nothing
}

// The per-descriptor counts of a call that succeeded, and its GGML copies (rule 10: one per
// run on the batched path, one per descriptor on the synchronous one).
void count_transfers(Session & s, bool batched, const sam3d_call & c) {
    sam3d_counters & k = s.counters;
    (batched ? k.async_uploads : k.sync_uploads) += c.n_uploads;
    (batched ? k.async_downloads : k.sync_downloads) += c.n_downloads;
    k.upload_copies += batched ? s.up_runs.size() : c.n_uploads;
    k.download_copies += batched ? s.down_runs.size() : c.n_downloads;
    for (size_t i = 0; i < c.n_uploads; ++i) {
        k.bytes_uploaded += c.uploads[i].size;
    }
    for (size_t i = 0; i < c.n_downloads; ++i) {
        k.bytes_downloaded += c.downloads[i].size;
    }
}

// ---------------------------------------------------------------- GGML's waits and events, counted (rule 8)

// The session's backend, then the second one where work went to it since its last (rule 11).
void backend_synchronize(Session & s) {
    s.counters.synchronizes += 1;
    s.ggml.synchronize(s.backend);
    if (s.second_busy) {
        s.counters.synchronizes += 1;
        s.ggml.synchronize(s.second);
        s.second_busy = false;
    }
}

void event_synchronize(Session & s, ggml_backend_event_t e) {
    s.counters.event_synchronizes += 1;
    s.ggml.event_synchronize(e);
}

void event_record(Session & s, ggml_backend_event_t e, ggml_backend_t b) {
    s.counters.event_records += 1;
    s.counters.duplex_event_records += b == s.second;
    s.ggml.event_record(e, b);
}
void event_record(Session & s, ggml_backend_event_t e) { event_record(s, e, s.backend); }

void event_wait(Session & s, ggml_backend_t b, ggml_backend_event_t e) {
    s.counters.event_waits += 1;
    s.counters.duplex_event_waits += b == s.second;
    s.ggml.event_wait(b, e);
}
void event_wait(Session & s, ggml_backend_event_t e) { event_wait(s, s.backend, e); }

// ---------------------------------------------------------------- completion policy

void mark_all_done(Session & s) {
    for (Call & c : s.calls) {
        if (c.state == Call::State::InFlight) {
            c.state = Call::State::Complete;
        }
    }
}

// Rule 5 (and rule 7's drain): completes everything the session submitted, whatever happened.
void drain(Session & s) {
    const uint64_t t0 = now_ns();
    backend_synchronize(s);
    mark_all_done(s);
    s.counters.synchronize_ns += now_ns() - t0;
}

// Completes every in-flight call with one synchronize (no-op when none is in flight).
void complete_all(Session & s) {
    if (std::any_of(s.calls.begin(), s.calls.end(), [](const Call & c) { return !c.done(); })) {
        drain(s);
    }
}

// Whether the call with id `id` (0: none) is complete: a call no longer tracked is.
bool call_done(const Session & s, uint64_t id) {
    for (const Call & c : s.calls) {
        if (c.id == id) {
            return c.done();
        }
    }
    return true;
}

// Frees a call's region and gives its (complete) events back to the pool.
void free_call(Session & s, std::list<Call>::iterator it) {
    for (ggml_backend_event_t e : {it->event, it->handoff}) {
        if (e != nullptr) {
            // The call is complete: this returns at once, and lets GGML recycle the event's
            // objects before it is recorded again. The pool's capacity was reserved when the
            // event was created, so this push does not allocate.
            event_synchronize(s, e);
            s.event_pool.push_back(e);
        }
    }
    s.calls.erase(it);
}

// An event from the pool, else a new one (NULL when GGML makes none). The pool's capacity
// covers every event created (reserved by acquire_events), so giving one back never allocates.
ggml_backend_event_t pooled_event(Session & s) {
    if (!s.event_pool.empty()) {
        ggml_backend_event_t e = s.event_pool.back();
        s.event_pool.pop_back();
        return e;
    }
    ggml_backend_event_t e = s.ggml.event_new(s.dev);
    s.events_created += e != nullptr;
    return e;
}

void give_back_event(Session & s, ggml_backend_event_t * e) {
    if (*e != nullptr) {
        s.event_pool.push_back(*e);
        *e = nullptr;
    }
}

void give_back_events(Session & s, Call & call) {
    give_back_event(s, &call.event);
    give_back_event(s, &call.handoff);
}

// A queued call's events: its completion (A5; NULL: its wait synchronizes), and on a duplex
// session its handoff (rule 11). A duplex call gets both or neither: with one missing, the
// completion alone, and the call takes the session's backend only.
void acquire_events(Session & s, Call & call) {
    const size_t need = s.second != nullptr ? 2 : 1;
    s.alloc.reserve(s.event_pool, s.events_created + need);
    call.event = pooled_event(s);
    if (need == 2 && call.event != nullptr) {
        call.handoff = pooled_event(s);
    }
}

// Enqueues an event wait of the session's backend, counted with the call's enqueue (rule 8);
// on an exception the outstanding calls complete before it leaves (rule 5).
void wait_before(Session & s, ggml_backend_event_t e) {
    const uint64_t t0 = now_ns();
    try {
        event_wait(s, e);
    } catch (...) {
        drain(s);
        throw;
    }
    s.counters.enqueue_ns += now_ns() - t0;
}

// A6: a staged call's uploads may not overtake the outstanding queued graphs. GGML's Vulkan
// backend with a dedicated transfer queue orders a graph after the uploads submitted before it
// but no upload after an earlier graph; its event_wait makes the transfer queue wait for the
// event. On a backend of one in-order queue (Backend facts) the queue already orders them, and a
// queued call's uploads enqueue no wait. `queued`: the call (nullptr: one completed on return).
// Returns whether all earlier work now precedes this call's on both backends (completed, or
// waited for with the newest call's event): rule 11's edges are then in place.
bool order_uploads(Session & s, const sam3d_call & c, const Call * queued) {
    if (queued == nullptr || (queued->handoff == nullptr && s.second_busy)) {
        // A call completed on return first completes outstanding queued work; so does a queued
        // call on the session's backend alone after calls that downloaded on the second (rule 11).
        complete_all(s);
        return true;
    }
    if (s.in_order || c.n_uploads == 0) {
        return false;
    }
    const Call * newest = nullptr;  // s.calls is in submission order
    for (const Call & o : s.calls) {
        newest = o.done() ? newest : &o;
    }
    if (newest == nullptr) {
        return true;
    }
    if (newest->event != nullptr) {
        // The calls before it complete before it (rule 11 too: a duplex call's event follows its
        // downloads, which follow its graph).
        wait_before(s, newest->event);
        return true;
    }
    if (s.events) {
        complete_all(s);  // its event could not be created: nothing to wait on
        return true;
    }
    return false;
}

// Rule 11: the newest call not known complete whose downloads went to the second backend, or
// nullptr. Its event, recorded there after them, follows every earlier call's work.
const Call * newest_duplex(const Session & s) {
    const Call * newest = nullptr;
    for (const Call & o : s.calls) {
        newest = !o.done() && o.handoff != nullptr ? &o : newest;
    }
    return newest;
}

// The device bytes `bytes` from byte `offset` of `t` (a run's, gaps included).
Area device_bytes(const ggml_tensor * t, size_t offset, size_t bytes) {
    const uintptr_t begin = device_address(t, offset);
    return {t->buffer, begin, begin + bytes};
}

// Rule 11: whether an upload run of the call writes device bytes that a duplex call not known
// complete reads with its downloads.
bool uploads_overwrite_reads(const Session & s) {
    for (const Run & r : s.up_runs) {
        const Area w = device_bytes(r.tensor, r.offset, r.bytes);
        for (const Call & o : s.calls) {
            for (size_t i = 0; !o.done() && i < o.reads.size(); ++i) {
                const Area & a = o.reads[i];
                if (a.buffer == w.buffer && w.begin < a.end && a.begin < w.end) {
                    return true;
                }
            }
        }
    }
    return false;
}

// ---------------------------------------------------------------- execution

// The synchronous path, after completing the session's outstanding queued work (A6). A failed
// compute's GGML status goes to *compute.
sam3d_status execute_blocking(Session & s, const sam3d_call & c, ggml_status * compute) {
    complete_all(s);  // the synchronous path may not overtake queued work
    const uint64_t t0 = now_ns();
    const ggml_status st = run_blocking(s, c);
    s.counters.sync_path_ns += now_ns() - t0;
    if (st != GGML_STATUS_SUCCESS) {
        *compute = st;
        return fail(SAM3D_ERR_COMPUTE, std::string("graph compute returned ") + ggml_status_to_string(st));
    }
    return SAM3D_OK;
}

// Records piece event k after the work enqueued so far: on GGML's Vulkan backend a record
// submits it, so the piece transfers while the next one is copied (rule 2). False when the
// session has no event k (no events, or event_new returned NULL): nothing is recorded.
bool record_piece(Session & s, size_t k) {
    if (k >= s.piece_events.size()) {
        return false;
    }
    PieceEvent & e = s.piece_events[k];
    if (e.recorded) {
        event_synchronize(s, e.event);  // complete (an earlier call's piece): GGML may recycle it
    }
    event_record(s, e.event);
    e.recorded = true;
    return true;
}

// The inputs of a copying call, piece by piece: each piece's copy into staging, then its
// uploads, then its event (the last piece's work is submitted by what follows). Zero-copy: the
// uploads alone. Counts its host time (copy_ns, enqueue_ns); returns the piece events recorded.
size_t stage_and_upload(Session & s, const sam3d_call & c, bool copying) {
    size_t k = 0;
    const size_t n = s.up_runs.size();
    for (size_t i = 0; i < n;) {
        const size_t j = copying ? piece_end(s, s.up_runs, i) : n;
        uint64_t t1 = now_ns();
        if (copying) {
            stage_inputs(s, c, i, j);
            const uint64_t t0 = t1;
            t1 = now_ns();
            s.counters.copy_ns += t1 - t0;
        }
        enqueue_uploads(s, i, j);
        if (j < n && record_piece(s, k)) {
            k += 1;
        }
        s.counters.enqueue_ns += now_ns() - t1;
        i = j;
    }
    return k;
}

// A run's outputs, piece by piece: every download enqueued with an event after each piece but
// the last; then each piece with an event is copied out once its event completed, while the
// later pieces still transfer; one synchronize completes the rest, copied out last. Events
// from `k` on are free for this call.
void download_and_copy_out(Session & s, const sam3d_call & c, size_t k, uint64_t t) {
    const size_t first = k;
    const size_t n = s.down_runs.size();
    for (size_t i = 0; i < n;) {
        const size_t j = piece_end(s, s.down_runs, i);
        enqueue_downloads(s, s.backend, i, j);
        if (j < n && record_piece(s, k)) {
            k += 1;
        }
        i = j;
    }
    s.counters.enqueue_ns += now_ns() - t;
    size_t i = 0;
    for (size_t e = first; e < k; ++e) {
        const size_t j = piece_end(s, s.down_runs, i);
        t = now_ns();
        event_synchronize(s, s.piece_events[e].event);
        const uint64_t t2 = now_ns();
        s.counters.synchronize_ns += t2 - t;
        copy_outputs(s, c, i, j);
        s.counters.copy_ns += now_ns() - t2;
        i = j;
    }
    drain(s);
    t = now_ns();
    copy_outputs(s, c, i, n);
    s.counters.copy_ns += now_ns() - t;
}

// The staged path, for sam3d_session_run, queued copying, zero-copy and queued zero-copy calls.
// `region`: the staging bytes a copying call copies through (nullptr: zero-copy, the host
// pointers are the slots). `queued`: the call to complete at its wait (its event is recorded,
// a copying call's output copies stored; its uploads wait for the newest outstanding call's
// event, A6); nullptr: complete the session's outstanding queued work first (A6), then
// synchronize and finish here. A copying call goes in pieces (rule 2). On any failure or
// exception the session's outstanding work is completed before returning (rule 5). A compute
// failure returns SAM3D_ERR_COMPUTE (queued: also stored in the call, reported at its wait).
sam3d_status execute_staged(Session & s, const sam3d_call & c, uint8_t * region, Call * queued, ggml_status * compute) {
    const bool copying = region != nullptr;
    const bool duplex = queued != nullptr && queued->handoff != nullptr;
    const bool ordered = order_uploads(s, c, queued);
    lay_out(s, c, region, queued != nullptr ? queued->spans : s.span_tensors);
    try {
        // Rule 11: the earlier duplex calls whose downloads may still run on the second backend.
        const Call * newest = duplex && !ordered ? newest_duplex(s) : nullptr;
        if (newest != nullptr && uploads_overwrite_reads(s)) {
            wait_before(s, newest->event);  // write after read: the uploads wait for those downloads
            newest = nullptr;
        }
        const size_t recorded = stage_and_upload(s, c, copying);
        uint64_t t = now_ns();
        if (c.graph != nullptr && s.perf_logger && s.drain_before_compute) {
            // Rule 7: GGML_VK_PERF_LOGGER's query-pool reset asserts that no transfer context
            // is open (GGML_ASSERT(ctx->compute_ctx.expired())); diagnostic runs only.
            s.counters.enqueue_ns += now_ns() - t;
            drain(s);
            newest = nullptr;
            t = now_ns();
        }
        if (c.graph != nullptr && newest != nullptr) {
            event_wait(s, newest->event);  // rule 11: a graph may write what those downloads read
        }
        const ggml_status st = enqueue_graph(s, c);
        if (st != GGML_STATUS_SUCCESS) {
            s.counters.enqueue_ns += now_ns() - t;
            drain(s);  // rule 5: nothing of the session stays outstanding
            *compute = st;
            return fail(SAM3D_ERR_COMPUTE, compute_message(st));
        }
        if (queued == nullptr && copying) {
            download_and_copy_out(s, c, recorded, t);
            return SAM3D_OK;
        }
        if (duplex) {
            // Rule 11: the downloads on the second backend, after this call's uploads and graph.
            event_record(s, queued->handoff);
            event_wait(s, s.second, queued->handoff);
            s.second_busy = true;
            enqueue_downloads(s, s.second, 0, s.down_runs.size());
            for (const Run & r : s.down_runs) {  // capacity reserved before submission
                queued->reads.push_back(device_bytes(r.tensor, r.offset, r.bytes));
            }
            s.counters.duplex_calls += 1;
        } else {
            enqueue_downloads(s, s.backend, 0, s.down_runs.size());
        }
        if (queued != nullptr) {
            if (queued->event != nullptr) {
                event_record(s, queued->event, duplex ? s.second : s.backend);
            }
            s.counters.enqueue_ns += now_ns() - t;
            queued->state = Call::State::InFlight;
            if (copying) {
                for (size_t i = 0; i < c.n_downloads; ++i) {  // capacity reserved before submission
                    queued->copies.push_back({c.downloads[i].dst, s.down_ptrs[i], c.downloads[i].size});
                }
            }
        } else {
            s.counters.enqueue_ns += now_ns() - t;
            drain(s);
        }
    } catch (...) {
        drain(s);  // rule 5, for an exception from a GGML entry point too
        throw;
    }
    return SAM3D_OK;
}

// Executes a call whose plan was applied and whose allocations are made: the path's executor,
// then the counts of its outcome (rule 8; a GGML exception is a failure after submission too).
sam3d_status execute(Session & s, const Plan & p, const sam3d_call & c, uint8_t * region, Call * queued,
                     ggml_status * compute) {
    sam3d_status st = SAM3D_OK;
    try {
        st = p.batched() ? execute_staged(s, c, region, queued, compute) : execute_blocking(s, c, compute);
    } catch (...) {
        s.counters.failed_calls += 1;
        throw;
    }
    if (st != SAM3D_OK) {
        s.counters.failed_calls += 1;
        return st;
    }
    count_transfers(s, p.batched(), c);
    return SAM3D_OK;
}

// ---------------------------------------------------------------- applying a plan

// Provides the staging the plan needs: the one allocation of pinned memory. A failed one turns
// the plan into the synchronous path counting pinned_unavailable (rule 4); nothing else of the
// session changes until commit().
void apply(Session & s, Plan * p) {
    if (p->staging == Staging::None || p->allocate == 0) {
        return;
    }
    s.counters.staging_bytes = 0;  // the buffer held so far is freed first
    if (!allocate_staging(s, p->allocate)) {
        Plan fallback;
        fallback.reason = SAM3D_FALLBACK_PINNED_UNAVAILABLE;
        *p = fallback;
        return;
    }
    s.counters.staging_bytes = p->allocate;
    s.counters.staging_allocations += 1;
}

// Takes the plan's ring region (moves the ring head past it).
void commit(Session & s, const Plan & p) {
    if (p.staging == Staging::Ring) {
        s.ring_head = p.end;
    }
}

// The number of pieces of `runs`.
size_t pieces(const Session & s, const std::vector<Run> & runs) {
    size_t k = 0;
    for (size_t i = 0; i < runs.size(); i = piece_end(s, runs, i)) {
        k += 1;
    }
    return k;
}

// The executor's scratch, the call's span tensors (in `spans`: the session's, or a queued
// call's own, rule 10) and the piece events of a copying call (rule 2: one after every piece
// but the last, downloads' only when they complete here), made before submission. An event
// GGML does not create (NULL) is left out: its piece goes with the next.
void reserve_scratch(Session & s, const Plan & p, const sam3d_call & c, bool copying, std::vector<ggml_tensor> & spans) {
    s.alloc.reserve(s.up_ptrs, c.n_uploads);
    s.alloc.reserve(s.down_ptrs, c.n_downloads);
    s.alloc.reserve(s.spans, std::max(c.n_uploads, c.n_downloads));
    if (!p.batched()) {
        return;
    }
    s.alloc.reserve(spans, spanning_runs(s));
    if (!s.events || !copying) {
        return;
    }
    const size_t up = pieces(s, s.up_runs);
    const size_t down = p.path == Path::Staged ? pieces(s, s.down_runs) : 0;
    const size_t need = (up > 0 ? up - 1 : 0) + (down > 0 ? down - 1 : 0);
    if (s.piece_events.size() >= need) {
        return;
    }
    s.alloc.reserve(s.piece_events, need);
    while (s.piece_events.size() < need) {
        ggml_backend_event_t e = s.ggml.event_new(s.dev);
        if (e == nullptr) {
            return;
        }
        s.piece_events.push_back({e});
    }
}

// sam3d_session_run's work once admitted (also a submit without flags).
sam3d_status run_admitted(Session & s, Admitted & a, const sam3d_call & c) {
    apply(s, &a.plan);
    reserve_scratch(s, a.plan, c, a.plan.batched(), s.span_tensors);
    commit(s, a.plan);
    count_submitted(s, a.plan, c);
    ggml_status compute = GGML_STATUS_SUCCESS;
    return execute(s, a.plan, c, a.plan.batched() ? staging_base(s) + a.plan.begin : nullptr, nullptr, &compute);
}

}  // namespace

// ---------------------------------------------------------------- entry points

sam3d_status run_locked(Session & s, const sam3d_call * call) {
    Admitted a;
    if (sam3d_status st = admit_run(s, call, &a)) {
        return rejected(s, a, st);
    }
    return run_admitted(s, a, *call);
}

sam3d_status submit_locked(Session & s, const sam3d_call * call, unsigned flags, sam3d_ticket * ticket) {
    Admitted a;
    if (sam3d_status st = admit_submit(s, call, flags, ticket, &a)) {
        return rejected(s, a, st);
    }
    const sam3d_call & c = *call;
    const Request & r = a.request;
    if (r.entry == Entry::Run) {
        return run_admitted(s, a, c);  // no flags: exactly sam3d_session_run
    }
    const bool zero_copy = r.entry == Entry::ZeroCopy;
    Plan & p = a.plan;
    apply(s, &p);

    // Every allocation of the call, before its first GGML call: its node, its output copies,
    // the executor's scratch, and last its event (nothing after it can throw).
    std::list<Call> node;
    s.alloc();
    node.emplace_back();
    Call & k = node.back();
    k.queued = r.queued;
    k.keep = r.keep;
    if (p.path == Path::Queued && !zero_copy) {
        s.alloc.reserve(k.copies, c.n_downloads);
    }
    reserve_scratch(s, p, c, !zero_copy, r.queued ? k.spans : s.span_tensors);
    if (p.path == Path::Queued && s.second != nullptr) {
        s.alloc.reserve(k.reads, s.down_runs.size());
    }
    if (p.path == Path::Queued && s.events) {
        acquire_events(s, k);
    }
    commit(s, p);
    if (p.held) {
        k.region.kind = Region::Kind::Ring;
        k.region.begin = p.begin;
        k.region.end = p.end;
    }
    if (r.own) {
        k.region = std::move(s.reservation->region);
        k.slots = std::move(s.reservation->slots);
        s.reservation.reset();
    }
    k.id = s.next_id++;
    count_submitted(s, p, c);
    const bool copy_through = p.batched() && !zero_copy && c.n_uploads + c.n_downloads > 0;
    sam3d_status st = SAM3D_OK;
    try {
        st = execute(s, p, c, copy_through ? staging_base(s) + p.begin : nullptr, r.queued ? &k : nullptr,
                     &k.compute_status);
    } catch (...) {
        give_back_events(s, k);
        throw;
    }
    k.status = st;
    if (st != SAM3D_OK && r.queued) {
        k.state = Call::State::Complete;  // rule 5: its work and the session's were completed
    }
    // Released kept slots this call's uploads read wait for its completion (A4).
    for (size_t i = 0; zero_copy && i < c.n_uploads; ++i) {
        if (Call * src = kept_slot_owner(s, c.uploads[i].src, c.uploads[i].size)) {
            src->last_reader = k.id;
        }
    }
    if (!r.queued) {
        // Complete now. A failed call is not kept (A4): its outputs are unspecified.
        k.state = r.keep && st == SAM3D_OK ? Call::State::Kept : Call::State::Reported;
        if (k.state == Call::State::Kept) {
            *ticket = k.id;
        }
        if (r.own || k.state == Call::State::Kept) {
            s.calls.splice(s.calls.end(), node);  // its slots stay the caller's until the next reserve
        }
        return st;
    }
    if (!p.batched()) {
        k.state = Call::State::Complete;
    }
    *ticket = k.id;
    s.calls.splice(s.calls.end(), node);
    return SAM3D_OK;
}

sam3d_status wait_locked(Session & s, sam3d_ticket id) {
    std::list<Call>::iterator it;
    if (sam3d_status st = admit_wait(s, id, &it)) {
        return st;
    }
    Call & c = *it;
    if (!c.done()) {
        const uint64_t t0 = now_ns();
        // The newest in-flight call is waited with a full synchronize: it completes the same
        // work as its event, and GGML's Vulkan backend spins on its fence there, where the
        // event's timeline-semaphore wait may sleep. An older call waits on its own event.
        const bool newest = std::none_of(s.calls.begin(), s.calls.end(),
                                         [&](const Call & o) { return !o.done() && o.id > c.id; });
        if (c.event != nullptr && !newest) {
            event_synchronize(s, c.event);
            for (Call & o : s.calls) {
                if (o.id <= c.id && o.state == Call::State::InFlight) {
                    o.state = Call::State::Complete;  // calls execute in submission order (A6)
                }
            }
        } else if (c.handoff != nullptr) {
            // Rule 11: the newest call's completion is the second backend's last work, after its
            // handoff, the session backend's last: one synchronize completes every call.
            s.counters.synchronizes += 1;
            s.ggml.synchronize(s.second);
            s.second_busy = false;
            mark_all_done(s);
        } else {
            backend_synchronize(s);  // completes every call submitted so far
            mark_all_done(s);
        }
        s.counters.synchronize_ns += now_ns() - t0;
    }
    if (c.status == SAM3D_OK && !c.copies.empty()) {
        const uint64_t t0 = now_ns();
        s.copier->copy(c.copies.data(), c.copies.size());
        s.counters.copy_ns += now_ns() - t0;
    }
    const sam3d_status st = c.status;
    const ggml_status compute = c.compute_status;
    // Reported; a failed kept call is released by its wait (A4).
    c.state = c.keep && st == SAM3D_OK ? Call::State::Kept : Call::State::Reported;
    if (c.freed_at_wait()) {
        free_call(s, it);  // a copying call's region is free once its outputs are copied
    }
    if (st != SAM3D_OK) {
        return fail(st, compute_message(compute));
    }
    return SAM3D_OK;
}

sam3d_status release_locked(Session & s, sam3d_ticket id) {
    Call * c = nullptr;
    if (sam3d_status st = admit_release(s, id, &c)) {
        return st;
    }
    c->state = Call::State::Released;  // freed by the next reserve once its readers completed
    return SAM3D_OK;
}

sam3d_status reserve_locked(Session & s, const sam3d_slot_request * req, size_t n, void ** slots) {
    // Heap slots (the fallback) are aligned to at least 64 bytes.
    const size_t heap_al = std::max<size_t>(s.alignment, 64);
    size_t need = 0;
    size_t heap = 0;
    if (sam3d_status st = admit_reserve(s, req, n, slots, heap_al, &need, &heap)) {
        return st;
    }
    // Reported calls give their slots back now; released kept calls once no call that read
    // them is in flight (A2, A4).
    for (auto it = s.calls.begin(); it != s.calls.end();) {
        auto next = std::next(it);
        if (it->state == Call::State::Reported ||
            (it->state == Call::State::Released && call_done(s, it->last_reader))) {
            free_call(s, it);
        }
        it = next;
    }
    s.reservation.reset();
    s.alloc();
    auto res = std::make_unique<Reservation>();
    s.alloc.reserve(res->slots, n);
    Request r;
    r.entry = Entry::Reserve;
    r.reserve_bytes = need;
    Plan p = plan(s, r);
    apply(s, &p);
    uint8_t * base = nullptr;
    size_t al = s.alignment;
    if (p.held) {
        commit(s, p);
        res->region.kind = Region::Kind::Ring;
        res->region.begin = p.begin;
        res->region.end = p.end;
        base = staging_base(s) + p.begin;
    } else {
        al = heap_al;
        s.alloc();
        res->region.kind = Region::Kind::Heap;
        res->region.heap.reset(new uint8_t[heap]);
        res->region.reason = p.reason;
        base = res->region.heap.get();
        base += (al - reinterpret_cast<uintptr_t>(base) % al) % al;
    }
    size_t off = 0;
    for (size_t i = 0; i < n; ++i) {
        res->slots.push_back({base + off, req[i].size});
        slots[i] = base + off;
        off += align_up(req[i].size, al);
    }
    s.reservation = std::move(res);
    return SAM3D_OK;
}

size_t outstanding(const Session & s) {
    size_t n = 0;
    for (const Call & c : s.calls) {
        n += c.queued && (c.state == Call::State::InFlight || c.state == Call::State::Complete);
    }
    return n;
}

size_t staging_in_flight(const Session & s) {
    size_t n = s.reservation ? s.reservation->region.ring_bytes() : 0;
    for (const Call & c : s.calls) {
        n += c.region.ring_bytes();
    }
    return n;
}

bool reservation_pinned(const Session & s) {
    return s.reservation && s.reservation->region.kind == Region::Kind::Ring;
}

void reset_counters(Session & s) {
    const uint64_t held = s.counters.staging_bytes;
    s.counters = sam3d_counters{};
    s.counters.staging_bytes = held;
}

void complete_outstanding(Session & s) { complete_all(s); }

void close(Session & s) {
    if (std::any_of(s.calls.begin(), s.calls.end(), [](const Call & c) { return !c.done(); })) {
        backend_synchronize(s);  // A7: outstanding work completes before anything is freed
    }
}

}  // namespace sam3d
