// The one validation pass (validate.h).
#include "validate.h"

#include <algorithm>
#include <functional>

#include "runs.h"

namespace sam3d {

Call * kept_slot_owner(Session & s, const void * p, size_t size) {
    const auto * q = static_cast<const uint8_t *>(p);
    for (Call & c : s.calls) {
        if (!c.keep || c.state == Call::State::Released || c.state == Call::State::Reported) {
            continue;
        }
        for (const Slot & slot : c.slots) {
            if (q >= slot.data && q < slot.data + slot.size && size <= static_cast<size_t>(slot.data + slot.size - q)) {
                return &c;
            }
        }
    }
    return nullptr;
}

namespace {

std::string where(const char * array, size_t i, const char * field) {
    return std::string(array) + "[" + std::to_string(i) + "]." + field;
}

// Rule 1's tensor checks, for a descriptor's tensor or an area (`name()` says which, made only
// for a message: an accepted call builds no string): allocated in a backend buffer, of a buffer
// type the session's backend can use, contiguous.
template <class Name>
sam3d_status check_tensor(const Session & s, const ggml_tensor * t, const Name & name) {
    ggml_backend_buffer_t buf = tensor_buffer(t);
    if (buf == nullptr || t->data == nullptr) {
        return fail(SAM3D_ERR_UNALLOCATED_TENSOR, name() + " ('" + t->name + "') is not allocated in a backend buffer");
    }
    if (!ggml_backend_supports_buft(s.backend, ggml_backend_buffer_get_type(buf))) {
        return fail(SAM3D_ERR_FOREIGN_TENSOR, name() + " ('" + t->name + "') lives in a " + ggml_backend_buffer_name(buf) +
                                                  " buffer, which backend " + ggml_backend_name(s.backend) + " cannot use");
    }
    if (!ggml_is_contiguous(t)) {
        return fail(SAM3D_ERR_NOT_CONTIGUOUS, name() + " ('" + t->name + "') is not contiguous");
    }
    return SAM3D_OK;
}

// Rule 1 for one descriptor (an upload when `up`, else a download).
sam3d_status check_descriptor(const Session & s, bool up, size_t i, const ggml_tensor * t, const void * host,
                              size_t offset, size_t size) {
    const char * array = up ? "uploads" : "downloads";
    if (t == nullptr) {
        return fail(SAM3D_ERR_NULL_TENSOR, where(array, i, "tensor") + " is NULL");
    }
    if (host == nullptr) {
        return fail(SAM3D_ERR_NULL_POINTER, where(array, i, up ? "src" : "dst") + " is NULL (tensor '" + t->name + "')");
    }
    if (sam3d_status st = check_tensor(s, t, [&] { return where(array, i, "tensor"); })) {
        return st;
    }
    const size_t nbytes = ggml_nbytes(t);
    // The message names the bad field: the offset or the size alone past the end, else both.
    const auto extent = [&](const std::string & field) {
        return fail(SAM3D_ERR_EXTENT, field + ": [" + std::to_string(offset) + ", " + std::to_string(offset) + "+" +
                                          std::to_string(size) + ") is not inside the " + std::to_string(nbytes) +
                                          " bytes of tensor '" + t->name + "'");
    };
    if (size == 0) {
        return fail(SAM3D_ERR_EXTENT, where(array, i, "size") + " is 0: give the number of bytes to transfer");
    }
    if (offset > nbytes) {
        return extent(where(array, i, "offset"));
    }
    if (size > nbytes) {
        return extent(where(array, i, "size"));
    }
    if (size > nbytes - offset) {
        return extent(where(array, i, "offset") + " + " + where(array, i, "size"));
    }
    if (reinterpret_cast<uintptr_t>(host) > UINTPTR_MAX - size) {
        return fail(SAM3D_ERR_EXTENT, where(array, i, "size") + ": [" + where(array, i, up ? "src" : "dst") +
                                          ", +" + std::to_string(size) + ") wraps around the address space");
    }
    return SAM3D_OK;
}

// Sorts `r` and reports the first overlapping pair with the same key.
bool find_overlap(std::vector<Session::Range> & r, size_t * a, size_t * b) {
    std::sort(r.begin(), r.end(), [](const Session::Range & x, const Session::Range & y) {
        return x.key != y.key ? std::less<const void *>()(x.key, y.key) : x.begin < y.begin;
    });
    for (size_t k = 1; k < r.size(); ++k) {
        if (r[k].key == r[k - 1].key && r[k].begin < r[k - 1].end) {
            *a = std::min(r[k - 1].index, r[k].index);
            *b = std::max(r[k - 1].index, r[k].index);
            return true;
        }
    }
    return false;
}

// Rule 1: descriptors, extents, contiguity and overlaps (path-independent).
sam3d_status check_call(Session & s, const sam3d_call & c) {
    if ((c.n_uploads > 0 && c.uploads == nullptr) || (c.n_downloads > 0 && c.downloads == nullptr)) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, c.uploads == nullptr && c.n_uploads > 0
                                                    ? "call.uploads is NULL with n_uploads > 0"
                                                    : "call.downloads is NULL with n_downloads > 0");
    }
    for (size_t i = 0; i < c.n_uploads; ++i) {
        const sam3d_upload & u = c.uploads[i];
        if (sam3d_status st = check_descriptor(s, true, i, u.tensor, u.src, u.offset, u.size)) {
            return st;
        }
    }
    for (size_t i = 0; i < c.n_downloads; ++i) {
        const sam3d_download & d = c.downloads[i];
        if (sam3d_status st = check_descriptor(s, false, i, d.tensor, d.dst, d.offset, d.size)) {
            return st;
        }
    }
    size_t a = 0;
    size_t b = 0;
    s.alloc.reserve(s.ranges, std::max(c.n_uploads, c.n_downloads));
    s.ranges.clear();
    for (size_t i = 0; i < c.n_uploads; ++i) {
        const sam3d_upload & u = c.uploads[i];
        const uintptr_t begin = device_address(u.tensor, u.offset);
        s.ranges.push_back({tensor_buffer(u.tensor), begin, begin + u.size, i});
    }
    if (find_overlap(s.ranges, &a, &b)) {
        return fail(SAM3D_ERR_OVERLAPPING_UPLOADS, "uploads[" + std::to_string(a) + "] and uploads[" +
                                                       std::to_string(b) + "] write overlapping bytes of one buffer");
    }
    s.ranges.clear();
    for (size_t i = 0; i < c.n_downloads; ++i) {
        const sam3d_download & d = c.downloads[i];
        const uintptr_t begin = reinterpret_cast<uintptr_t>(d.dst);
        s.ranges.push_back({nullptr, begin, begin + d.size, i});
    }
    if (find_overlap(s.ranges, &a, &b)) {
        return fail(SAM3D_ERR_OVERLAPPING_OUTPUTS, "downloads[" + std::to_string(a) + "].dst and downloads[" +
                                                       std::to_string(b) + "].dst overlap in host memory");
    }
    return SAM3D_OK;
}

// What only the batched path needs: GGML's async set/get (ggml_backend_tensor_set_async and
// the backends' set_tensor_async) read tensor->buffer, which a view created after its source
// was allocated does not have.
sam3d_status check_batched(const sam3d_call & c) {
    const size_t n = c.n_uploads + c.n_downloads;
    for (size_t k = 0; k < n; ++k) {
        const bool up = k < c.n_uploads;
        const size_t i = up ? k : k - c.n_uploads;
        const ggml_tensor * t = up ? c.uploads[i].tensor : c.downloads[i].tensor;
        if (t->buffer == nullptr) {
            return fail(SAM3D_ERR_UNALLOCATED_TENSOR,
                        where(up ? "uploads" : "downloads", i, "tensor") + " ('" + t->name +
                            "') is a view without a buffer of its own (created after '" + t->view_src->name +
                            "' was allocated): batched calls use GGML's async set/get, which need tensor->buffer; "
                            "call ggml_backend_view_init on it, or set call.synchronous");
        }
    }
    return SAM3D_OK;
}

// Why memory the call's host pointers name cannot batch (its fallback reason), COUNT if pinned.
sam3d_fallback memory_reason(const Region & r) {
    return r.kind == Region::Kind::Ring ? SAM3D_FALLBACK_COUNT : r.reason;
}

// Zero-copy (A1, A4): every host pointer is a distinct slot of the current reservation, or an
// upload's bytes inside a kept slot of a reported call. r->own: whether the call uses a slot of
// the current reservation; r->slot_memory: why the slots it names cannot batch (COUNT: pinned).
sam3d_status check_slots(Session & s, const sam3d_call & c, Request * r) {
    r->own = false;
    r->slot_memory = SAM3D_FALLBACK_COUNT;
    static const std::vector<Slot> none;
    const std::vector<Slot> & current = s.reservation ? s.reservation->slots : none;
    s.alloc.reserve(s.used, current.size());
    s.used.assign(current.size(), false);
    s.alloc.reserve(s.down_slots, c.n_downloads);
    s.down_slots.clear();
    const size_t n = c.n_uploads + c.n_downloads;
    for (size_t k = 0; k < n; ++k) {
        const bool up = k < c.n_uploads;
        const size_t i = up ? k : k - c.n_uploads;
        const void * p = up ? c.uploads[i].src : c.downloads[i].dst;
        const size_t size = up ? c.uploads[i].size : c.downloads[i].size;
        const auto name = [&] { return where(up ? "uploads" : "downloads", i, up ? "src" : "dst"); };
        size_t slot = current.size();
        for (size_t j = 0; j < current.size(); ++j) {
            if (current[j].data == p) {
                slot = j;
            }
        }
        if (slot == current.size()) {
            Call * owner = up ? kept_slot_owner(s, p, size) : nullptr;
            if (owner == nullptr) {
                return fail(SAM3D_ERR_INVALID_ARGUMENT,
                            name() + " is not a slot of the current reservation" + (up ? " nor inside a kept slot" : "") +
                                (s.reservation ? "" : " (there is no current reservation: call sam3d_session_reserve first)"));
            }
            if (owner->state != Call::State::Kept) {
                return fail(SAM3D_ERR_INVALID_ARGUMENT, name() + " reads a kept slot of ticket " + std::to_string(owner->id) +
                                                            ", whose completion was not reported yet (wait for it first)");
            }
            r->slot_memory = std::min(r->slot_memory, memory_reason(owner->region));
            continue;
        }
        if (s.used[slot]) {
            return fail(SAM3D_ERR_INVALID_ARGUMENT, name() + " uses slot " + std::to_string(slot) + " a second time");
        }
        if (size > current[slot].size) {
            return fail(SAM3D_ERR_INVALID_ARGUMENT, where(up ? "uploads" : "downloads", i, "size") + " " +
                                                        std::to_string(size) + " exceeds the " +
                                                        std::to_string(current[slot].size) + " bytes of slot " +
                                                        std::to_string(slot));
        }
        s.used[slot] = true;
        if (!up) {
            s.down_slots.push_back(slot);  // a download's dst is always a slot of the reservation
        }
        r->own = true;
    }
    if (r->own) {
        r->slot_memory = std::min(r->slot_memory, memory_reason(s.reservation->region));
    }
    return SAM3D_OK;
}


// The plan of an accepted request, and the one refusal that depends on its path.
sam3d_status admit(Session & s, const Request & r, Admitted * out) {
    out->request = r;
    if (r.call != nullptr) {
        find_runs(s, *r.call, r.entry == Entry::ZeroCopy, r.slot_tails);  // the plan's bound counts their bytes
    }
    out->plan = plan(s, r);
    if (r.call != nullptr && out->plan.batchable()) {
        return check_batched(*r.call);
    }
    return SAM3D_OK;
}

}  // namespace

sam3d_status admit_run(Session & s, const sam3d_call * c, Admitted * out) {
    if (c == nullptr) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "call is NULL");
    }
    out->is_call = true;
    if (sam3d_status st = check_call(s, *c)) {
        return st;
    }
    Request r;
    r.entry = Entry::Run;
    r.call = c;
    return admit(s, r, out);
}

sam3d_status admit_submit(Session & s, const sam3d_call * c, unsigned flags, sam3d_ticket * ticket, Admitted * out) {
    if (ticket != nullptr) {
        *ticket = 0;
    }
    const bool zero_copy = (flags & SAM3D_SUBMIT_ZERO_COPY) != 0;
    const bool queued = (flags & SAM3D_SUBMIT_QUEUED) != 0;
    const bool keep = (flags & SAM3D_SUBMIT_KEEP_SLOTS) != 0;
    const bool slot_tails = (flags & SAM3D_SUBMIT_SLOT_TAILS) != 0;
    if (c == nullptr) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "call is NULL");
    }
    if ((flags & ~(SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED | SAM3D_SUBMIT_KEEP_SLOTS | SAM3D_SUBMIT_SLOT_TAILS)) != 0) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "flags has unknown bits: use SAM3D_SUBMIT_* only");
    }
    if ((queued || keep) && ticket == nullptr) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, queued ? "ticket is NULL with SAM3D_SUBMIT_QUEUED"
                                                       : "ticket is NULL with SAM3D_SUBMIT_KEEP_SLOTS");
    }
    if (keep && !zero_copy) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "SAM3D_SUBMIT_KEEP_SLOTS needs SAM3D_SUBMIT_ZERO_COPY (only slots are kept)");
    }
    if (slot_tails && !zero_copy) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT,
                    "SAM3D_SUBMIT_SLOT_TAILS needs SAM3D_SUBMIT_ZERO_COPY (a copying call's downloads have no slots)");
    }
    if (!zero_copy && !queued) {
        return admit_run(s, c, out);  // exactly sam3d_session_run
    }
    out->is_call = true;
    if (sam3d_status st = check_call(s, *c)) {
        return st;
    }
    Request r;
    r.entry = zero_copy ? Entry::ZeroCopy : Entry::Copying;
    r.call = c;
    r.queued = queued;
    r.keep = keep;
    r.slot_tails = slot_tails;
    if (zero_copy) {
        if (sam3d_status st = check_slots(s, *c, &r)) {
            return st;
        }
    }
    return admit(s, r, out);
}

sam3d_status admit_reserve(const Session & s, const sam3d_slot_request * req, size_t n, void ** slots,
                           size_t heap_alignment, size_t * ring_bytes, size_t * heap_bytes) {
    if (req == nullptr || slots == nullptr || n == 0) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, n == 0 ? "n is 0" : "requests or slots is NULL");
    }
    size_t need = 0;
    size_t heap = heap_alignment;  // heap slots get one alignment extra, to align their base
    for (size_t i = 0; i < n; ++i) {
        if (req[i].size == 0) {
            return fail(SAM3D_ERR_INVALID_ARGUMENT, "requests[" + std::to_string(i) + "].size is 0");
        }
        if (!add_aligned(&need, req[i].size, s.alignment) || !add_aligned(&heap, req[i].size, heap_alignment)) {
            return fail(SAM3D_ERR_INVALID_ARGUMENT, "requests[0.." + std::to_string(i) + "]: the sizes add up to more "
                                                    "than the address space (requests[" + std::to_string(i) +
                                                    "].size is " + std::to_string(req[i].size) + ")");
        }
    }
    *ring_bytes = need;
    *heap_bytes = heap;
    return SAM3D_OK;
}

namespace {

Area area_of(const ggml_tensor * t) {
    const uintptr_t begin = device_address(t, 0);
    return {tensor_buffer(t), begin, begin + (t->data != nullptr ? ggml_nbytes(t) : 0)};
}

}  // namespace

sam3d_status admit_area(const Session & s, const ggml_tensor * t, Area * area, size_t * at) {
    if (t == nullptr) {
        return fail(SAM3D_ERR_NULL_TENSOR, "area is NULL");
    }
    if (sam3d_status st = check_tensor(s, t, [] { return std::string("area"); })) {
        return st;
    }
    if (ggml_nbytes(t) == 0) {
        return fail(SAM3D_ERR_EXTENT, std::string("area ('") + t->name + "') has no bytes: declare a tensor of at least one");
    }
    const Area a = area_of(t);
    const auto order = [](const Area & x, const Area & y) {
        return x.buffer != y.buffer ? std::less<const void *>()(x.buffer, y.buffer) : x.begin < y.begin;
    };
    const auto it = std::lower_bound(s.areas.begin(), s.areas.end(), a, order);
    const bool overlaps_next = it != s.areas.end() && it->buffer == a.buffer && it->begin < a.end;
    const bool overlaps_prev = it != s.areas.begin() && std::prev(it)->buffer == a.buffer && std::prev(it)->end > a.begin;
    if (overlaps_next || overlaps_prev) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, std::string("area ('") + t->name +
                                                    "') overlaps an area already declared: remove that one first");
    }
    *area = a;
    *at = static_cast<size_t>(it - s.areas.begin());
    return SAM3D_OK;
}

sam3d_status admit_remove_area(const Session & s, const ggml_tensor * t, size_t * at) {
    if (t == nullptr) {
        return fail(SAM3D_ERR_NULL_TENSOR, "area is NULL");
    }
    const Area a = area_of(t);
    const auto it = std::find_if(s.areas.begin(), s.areas.end(), [&](const Area & x) {
        return x.buffer == a.buffer && x.begin == a.begin && x.end == a.end;
    });
    if (t->data == nullptr || it == s.areas.end()) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, std::string("area ('") + t->name +
                                                    "') is not a declared area (declare it with sam3d_session_add_area)");
    }
    *at = static_cast<size_t>(it - s.areas.begin());
    return SAM3D_OK;
}

sam3d_status admit_wait(Session & s, sam3d_ticket id, std::list<Call>::iterator * out) {
    auto it = std::find_if(s.calls.begin(), s.calls.end(), [&](const Call & c) {
        return c.id == id && c.queued && (c.state == Call::State::InFlight || c.state == Call::State::Complete);
    });
    if (id == 0 || it == s.calls.end()) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "ticket " + std::to_string(id) + " is unknown or already waited");
    }
    *out = it;
    return SAM3D_OK;
}

sam3d_status admit_release(Session & s, sam3d_ticket id, Call ** out) {
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
    *out = &*it;
    return SAM3D_OK;
}

}  // namespace sam3d
