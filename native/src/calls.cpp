// Each entry point: validate, plan, make every allocation, count, execute, then record the
// call's state. Nothing after the first GGML call of a call allocates.
#include "calls.h"

#include <algorithm>
#include <cstring>

#include "execute.h"
#include "plan.h"
#include "ring.h"
#include "validate.h"

namespace sam3d {

namespace {

void count_bytes(sam3d_counters & k, const sam3d_call & c) {
    for (size_t i = 0; i < c.n_uploads; ++i) {
        k.bytes_uploaded += c.uploads[i].size;
    }
    for (size_t i = 0; i < c.n_downloads; ++i) {
        k.bytes_downloaded += c.downloads[i].size;
    }
}

// The executor's scratch, sized before submission.
void reserve_scratch(Session & s, const sam3d_call & c) {
    s.alloc.reserve(s.up_ptrs, c.n_uploads);
    s.alloc.reserve(s.down_ptrs, c.n_downloads);
}

// The per-call counts (rule 8), at submission: a call that fails after it keeps them.
void count_plan(Session & s, const Plan & p, const sam3d_call & c) {
    s.counters.calls += 1;
    if (p.reason != SAM3D_FALLBACK_COUNT) {
        s.counters.fallbacks[p.reason] += 1;
    }
    const bool staged = p.path == Path::Staged || p.path == Path::Queued;
    s.counters.pinned_batches += staged && c.n_uploads + c.n_downloads > 0;  // a graph only stages nothing
}

// A completion event for a queued call (A5): a pooled one, else a new one (NULL: its wait
// synchronizes). The pool's capacity covers every event created, so giving one back never
// allocates.
void acquire_event(Session & s, Call & call) {
    if (!s.event_pool.empty()) {
        call.event = s.event_pool.back();
        s.event_pool.pop_back();
        return;
    }
    s.alloc.reserve(s.event_pool, s.events_created + 1);
    call.event = s.ggml.event_new(s.dev);
    s.events_created += call.event != nullptr;
}

void give_back_event(Session & s, Call & call) {
    if (call.event != nullptr) {
        s.event_pool.push_back(call.event);
        call.event = nullptr;
    }
}

}  // namespace

sam3d_status run_locked(Session & s, const sam3d_call & c) {
    if (sam3d_status st = validate(s, c)) {
        s.counters.rejected_calls += 1;
        return st;
    }
    Request r{Entry::Run, &c};
    const Plan p = plan(s, r);
    if (p.path == Path::Rejected) {
        s.counters.rejected_calls += 1;
        return p.rejected;
    }
    reserve_scratch(s, c);
    count_plan(s, p, c);
    sam3d_status st = SAM3D_OK;
    if (p.path == Path::Sync) {
        st = run_sync(s, c);
    } else {
        st = execute_staged(s, c, staging_base(s) + p.begin, nullptr);
    }
    if (st != SAM3D_OK) {
        s.counters.failed_calls += 1;
        return st;
    }
    count_bytes(s.counters, c);
    return SAM3D_OK;
}

sam3d_status submit_locked(Session & s, const sam3d_call & c, unsigned flags, sam3d_ticket * ticket) {
    const bool zero_copy = (flags & SAM3D_SUBMIT_ZERO_COPY) != 0;
    const bool queued = (flags & SAM3D_SUBMIT_QUEUED) != 0;
    const bool keep = (flags & SAM3D_SUBMIT_KEEP_SLOTS) != 0;
    if ((flags & ~(SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED | SAM3D_SUBMIT_KEEP_SLOTS)) != 0) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "flags has unknown bits: use SAM3D_SUBMIT_* only");
    }
    if ((queued || keep) && ticket == nullptr) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, queued ? "ticket is NULL with SAM3D_SUBMIT_QUEUED"
                                                       : "ticket is NULL with SAM3D_SUBMIT_KEEP_SLOTS");
    }
    if (keep && !zero_copy) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "SAM3D_SUBMIT_KEEP_SLOTS needs SAM3D_SUBMIT_ZERO_COPY (only slots are kept)");
    }
    if (ticket != nullptr) {
        *ticket = 0;
    }
    if (!zero_copy && !queued) {
        return run_locked(s, c);  // exactly sam3d_session_run
    }
    bool own = false;  // the call consumes the current reservation
    s.kept_sources.clear();
    sam3d_status st = validate(s, c);
    if (st == SAM3D_OK && zero_copy) {
        st = check_slots(s, c, &own);
    }
    if (st != SAM3D_OK) {
        s.counters.rejected_calls += 1;
        return st;
    }
    Request r{zero_copy ? Entry::ZeroCopy : Entry::Copying, &c, queued};
    r.own = own ? &s.reservation->region : nullptr;
    r.kept = &s.kept_sources;
    const Plan p = plan(s, r);
    if (p.path == Path::Rejected) {
        s.counters.rejected_calls += 1;
        return p.rejected;
    }
    const bool staged = p.path == Path::Staged || p.path == Path::Queued;

    // Every allocation of the call, before its first GGML call: its node, its output copies,
    // the executor's scratch, and last its event (nothing after it can throw).
    std::list<Call> node;
    s.alloc();
    node.emplace_back();
    Call & call = node.back();
    call.queued = queued;
    call.keep = keep;
    if (p.held) {
        call.region.kind = Region::Kind::Ring;
        call.region.begin = p.begin;
        call.region.end = p.end;
    }
    if (p.path == Path::Queued && !zero_copy) {
        s.alloc.reserve(call.copies, c.n_downloads);
    }
    reserve_scratch(s, c);
    if (p.path == Path::Queued && s.events) {
        acquire_event(s, call);
    }
    if (own) {
        call.region = std::move(s.reservation->region);
        call.slots = std::move(s.reservation->slots);
        s.reservation.reset();
    }
    call.id = s.next_id++;
    count_plan(s, p, c);
    try {
        if (staged) {
            const bool copy_through = !zero_copy && c.n_uploads + c.n_downloads > 0;
            st = execute_staged(s, c, copy_through ? staging_base(s) + p.begin : nullptr, queued ? &call : nullptr);
        } else {
            st = run_sync(s, c, &call.compute_status);
        }
    } catch (...) {
        give_back_event(s, call);
        throw;
    }
    if (st != SAM3D_OK) {
        s.counters.failed_calls += 1;
        call.status = st;
    } else {
        count_bytes(s.counters, c);
    }
    for (Call * src : s.kept_sources) {
        src->last_reader = call.id;  // released kept slots wait for this call's completion
    }
    if (!queued) {
        // Complete now. A failed call is not kept (A4): its outputs are unspecified.
        call.state = keep && st == SAM3D_OK ? Call::State::Kept : Call::State::Reported;
        if (call.state == Call::State::Kept) {
            *ticket = call.id;
        }
        if (own || call.state == Call::State::Kept) {
            s.calls.splice(s.calls.end(), node);  // its slots stay the caller's until the next reserve
        }
        return st;
    }
    if (!staged) {
        call.state = Call::State::Complete;
    }
    *ticket = call.id;
    s.calls.splice(s.calls.end(), node);
    return SAM3D_OK;
}

sam3d_status wait_locked(Session & s, sam3d_ticket id) {
    auto it = std::find_if(s.calls.begin(), s.calls.end(), [&](const Call & c) {
        return c.id == id && c.queued && (c.state == Call::State::InFlight || c.state == Call::State::Complete);
    });
    if (id == 0 || it == s.calls.end()) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "ticket " + std::to_string(id) + " is unknown or already waited");
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
            s.ggml.event_synchronize(c.event);
            for (Call & o : s.calls) {
                if (o.id <= c.id && o.state == Call::State::InFlight) {
                    o.state = Call::State::Complete;  // calls execute in submission order (A6)
                }
            }
        } else {
            s.ggml.synchronize(s.backend);  // completes every call submitted so far
            mark_all_done(s);
        }
        s.counters.synchronize_ns += now_ns() - t0;
    }
    if (c.status == SAM3D_OK && !c.copies.empty()) {
        const uint64_t t0 = now_ns();
        for (const Call::Copy & k : c.copies) {
            std::memcpy(k.dst, k.src, k.size);
        }
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
    auto it = std::find_if(s.calls.begin(), s.calls.end(), [&](const Call & c) { return c.id == id; });
    const std::string name = "ticket " + std::to_string(id);
    if (id == 0 || it == s.calls.end() || !it->keep || it->state == Call::State::Released) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT,
                    name + " is unknown, was not submitted with SAM3D_SUBMIT_KEEP_SLOTS, or was already released");
    }
    switch (it->state) {
        case Call::State::InFlight:
        case Call::State::Complete:
            return fail(SAM3D_ERR_INVALID_ARGUMENT, name + " was not waited yet: wait for it before releasing its slots");
        case Call::State::Reported:
            return fail(SAM3D_ERR_INVALID_ARGUMENT, name + " failed, and its wait released its slots: nothing to release");
        case Call::State::Kept:
        case Call::State::Released:
            break;
    }
    it->state = Call::State::Released;  // freed by the next reserve once its readers completed
    return SAM3D_OK;
}

sam3d_status reserve_locked(Session & s, const sam3d_slot_request * req, size_t n, void ** slots) {
    // Heap slots (the fallback) are aligned to at least 64 bytes and get one alignment extra.
    const size_t heap_al = std::max<size_t>(s.alignment, 64);
    size_t need = 0;
    size_t heap = heap_al;
    for (size_t i = 0; i < n; ++i) {
        if (req[i].size == 0) {
            return fail(SAM3D_ERR_INVALID_ARGUMENT, "requests[" + std::to_string(i) + "].size is 0");
        }
        if (!add_aligned(&need, req[i].size, s.alignment) || !add_aligned(&heap, req[i].size, heap_al)) {
            return fail(SAM3D_ERR_INVALID_ARGUMENT, "requests[0.." + std::to_string(i) + "]: the sizes add up to more "
                                                    "than the address space (requests[" + std::to_string(i) +
                                                    "].size is " + std::to_string(req[i].size) + ")");
        }
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
    Request r{Entry::Reserve};
    r.reserve_bytes = need;
    const Plan p = plan(s, r);
    uint8_t * base = nullptr;
    size_t al = s.alignment;
    if (p.held) {
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

}  // namespace sam3d
