// The SAM3D batched-transfer core (see include/sam3d/transfer.h for the contract).
#include "sam3d/transfer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

namespace {

thread_local std::string g_last_error;

sam3d_status fail(sam3d_status status, std::string message) {
    g_last_error = std::string(sam3d_status_name(status)) + ": " + message;
    return status;
}

uint64_t now_ns() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now().time_since_epoch()).count());
}

size_t align_up(size_t n, size_t a) { return a <= 1 ? n : (n + a - 1) / a * a; }

// The seam with every NULL entry replaced by GGML's own function.
struct Ggml {
    decltype(sam3d_ggml_seam::tensor_set) tensor_set;
    decltype(sam3d_ggml_seam::tensor_get) tensor_get;
    decltype(sam3d_ggml_seam::tensor_set_async) tensor_set_async;
    decltype(sam3d_ggml_seam::tensor_get_async) tensor_get_async;
    decltype(sam3d_ggml_seam::graph_compute) graph_compute;
    decltype(sam3d_ggml_seam::graph_compute_async) graph_compute_async;
    decltype(sam3d_ggml_seam::synchronize) synchronize;
    decltype(sam3d_ggml_seam::dev_get_props) dev_get_props;
    decltype(sam3d_ggml_seam::dev_host_buffer_type) dev_host_buffer_type;
    decltype(sam3d_ggml_seam::buft_get_device) buft_get_device;
    decltype(sam3d_ggml_seam::buft_alloc_buffer) buft_alloc_buffer;

    explicit Ggml(const sam3d_ggml_seam * s) {
        sam3d_ggml_seam z{};
        if (s == nullptr) {
            s = &z;
        }
        tensor_set = s->tensor_set ? s->tensor_set : ggml_backend_tensor_set;
        tensor_get = s->tensor_get ? s->tensor_get : ggml_backend_tensor_get;
        tensor_set_async = s->tensor_set_async ? s->tensor_set_async : ggml_backend_tensor_set_async;
        tensor_get_async = s->tensor_get_async ? s->tensor_get_async : ggml_backend_tensor_get_async;
        graph_compute = s->graph_compute ? s->graph_compute : ggml_backend_graph_compute;
        graph_compute_async = s->graph_compute_async ? s->graph_compute_async : ggml_backend_graph_compute_async;
        synchronize = s->synchronize ? s->synchronize : ggml_backend_synchronize;
        dev_get_props = s->dev_get_props ? s->dev_get_props : ggml_backend_dev_get_props;
        dev_host_buffer_type = s->dev_host_buffer_type ? s->dev_host_buffer_type : ggml_backend_dev_host_buffer_type;
        buft_get_device = s->buft_get_device ? s->buft_get_device : ggml_backend_buft_get_device;
        buft_alloc_buffer = s->buft_alloc_buffer ? s->buft_alloc_buffer : ggml_backend_buft_alloc_buffer;
    }
};

// A byte range for the overlap checks: `key` groups ranges that can overlap (a buffer for
// device bytes, nullptr for host memory), `index` names the descriptor in messages.
struct Range {
    const void * key;
    uintptr_t begin;
    uintptr_t end;
    size_t index;
};

// One call's staging (a ring region or heap slots) and completion state (queued and zero-copy
// calls; see transfer.h).
struct Ticket {
    uint64_t id = 0;
    bool ring = false;          // [begin, end) of the staging buffer is held
    size_t begin = 0;
    size_t end = 0;
    std::unique_ptr<uint8_t[]> heap;  // fallback slots
    std::vector<std::pair<uint8_t *, size_t>> slots;  // a reservation's slots
    sam3d_fallback reason = SAM3D_FALLBACK_COUNT;     // why a reservation is not pinned (batching on)
    ggml_backend_event_t event = nullptr;
    bool submitted = false;     // a queued call whose completion is not reported yet
    bool done = false;          // completion known
    bool reported = false;      // completion reported to the caller (slots released at next reserve)
    bool kept = false;          // SAM3D_SUBMIT_KEEP_SLOTS: slots held until sam3d_session_release
    bool release_requested = false;
    uint64_t last_reader = 0;   // the latest call whose uploads read these (kept) slots
    sam3d_status status = SAM3D_OK;
    std::string message;
    struct Copy {
        void * dst;
        const uint8_t * src;
        size_t size;
    };
    std::vector<Copy> copies;   // a copying queued call's outputs, copied at the wait
    std::vector<size_t> down_sizes;
};

}  // namespace

struct sam3d_session {
    ggml_backend_t backend = nullptr;
    ggml_backend_dev_t dev = nullptr;
    Ggml ggml;
    bool batching = false;
    bool perf_logger = false;
    bool drain_before_compute = true;
    sam3d_fallback static_fallback = SAM3D_FALLBACK_COUNT;
    ggml_backend_buffer_type_t host_buft = nullptr;
    size_t alignment = 0;
    ggml_backend_buffer_t staging = nullptr;
    std::mutex mutex;
    sam3d_counters counters{};
    std::vector<Range> ranges;     // validation scratch, reused across calls
    std::vector<size_t> offsets;   // staging offsets of this call, reused across calls
    // Zero-copy and queued calls.
    bool events = false;           // props.caps.events, read at creation
    std::list<Ticket> tickets;     // submitted calls holding staging or awaiting their wait
    std::unique_ptr<Ticket> pending;  // the current reservation
    uint64_t next_ticket = 1;
    size_t ring_head = 0;
    std::vector<const uint8_t *> up_ptrs;
    std::vector<uint8_t *> down_ptrs;
    std::vector<ggml_backend_event_t> event_pool;  // events of released tickets, for reuse
    std::vector<Ticket *> kept_sources;            // kept calls read by the call being submitted
    std::vector<std::pair<size_t, size_t>> held;   // ring_alloc scratch: held regions [begin, end)
    std::vector<bool> used;                        // check_slots scratch

    explicit sam3d_session(const sam3d_ggml_seam * seam) : ggml(seam) {}
    ~sam3d_session() {
        bool outstanding = false;
        for (Ticket & t : tickets) {
            outstanding = outstanding || !t.done;
        }
        if (outstanding) {
            ggml.synchronize(backend);
        }
        for (Ticket & t : tickets) {
            if (t.event != nullptr) {
                ggml_backend_event_free(t.event);
            }
        }
        for (ggml_backend_event_t e : event_pool) {
            ggml_backend_event_free(e);
        }
        if (staging != nullptr) {
            ggml_backend_buffer_free(staging);
        }
    }
};

namespace {

std::string where(const char * array, size_t i, const char * field) {
    return std::string(array) + "[" + std::to_string(i) + "]." + field;
}

// Rule 1 for one descriptor; `array` is "uploads" or "downloads".
sam3d_status check_descriptor(const sam3d_session & s, const char * array, size_t i,
                              const ggml_tensor * t, const void * host, size_t offset, size_t size) {
    if (t == nullptr) {
        return fail(SAM3D_ERR_NULL_TENSOR, where(array, i, "tensor") + " is NULL");
    }
    if (host == nullptr) {
        return fail(SAM3D_ERR_NULL_POINTER, where(array, i, std::strcmp(array, "uploads") == 0 ? "src" : "dst") +
                                                " is NULL (tensor '" + t->name + "')");
    }
    if (t->buffer == nullptr || t->data == nullptr) {
        return fail(SAM3D_ERR_UNALLOCATED_TENSOR, where(array, i, "tensor") + " ('" + t->name +
                                                      "') is not allocated in a backend buffer");
    }
    if (!ggml_backend_supports_buft(s.backend, ggml_backend_buffer_get_type(t->buffer))) {
        return fail(SAM3D_ERR_FOREIGN_TENSOR, where(array, i, "tensor") + " ('" + t->name + "') lives in a " +
                                                  ggml_backend_buffer_name(t->buffer) + " buffer, which backend " +
                                                  ggml_backend_name(s.backend) + " cannot use");
    }
    if (!ggml_is_contiguous(t)) {
        return fail(SAM3D_ERR_NOT_CONTIGUOUS, where(array, i, "tensor") + " ('" + t->name + "') is not contiguous");
    }
    const size_t nbytes = ggml_nbytes(t);
    if (size == 0 || offset > nbytes || size > nbytes - offset) {
        return fail(SAM3D_ERR_EXTENT, where(array, i, size == 0 ? "size" : "offset") + ": [" + std::to_string(offset) +
                                          ", " + std::to_string(offset) + "+" + std::to_string(size) +
                                          ") is not inside the " + std::to_string(nbytes) + " bytes of tensor '" +
                                          t->name + "'");
    }
    return SAM3D_OK;
}

// Sorts `r` and reports the first overlapping pair with the same key.
bool find_overlap(std::vector<Range> & r, size_t * a, size_t * b) {
    std::sort(r.begin(), r.end(), [](const Range & x, const Range & y) {
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

sam3d_status validate(sam3d_session & s, const sam3d_call & c) {
    if ((c.n_uploads > 0 && c.uploads == nullptr) || (c.n_downloads > 0 && c.downloads == nullptr)) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, c.uploads == nullptr && c.n_uploads > 0
                                                    ? "call.uploads is NULL with n_uploads > 0"
                                                    : "call.downloads is NULL with n_downloads > 0");
    }
    for (size_t i = 0; i < c.n_uploads; ++i) {
        const sam3d_upload & u = c.uploads[i];
        if (sam3d_status st = check_descriptor(s, "uploads", i, u.tensor, u.src, u.offset, u.size)) {
            return st;
        }
    }
    for (size_t i = 0; i < c.n_downloads; ++i) {
        const sam3d_download & d = c.downloads[i];
        if (sam3d_status st = check_descriptor(s, "downloads", i, d.tensor, d.dst, d.offset, d.size)) {
            return st;
        }
    }
    size_t a = 0;
    size_t b = 0;
    s.ranges.clear();
    for (size_t i = 0; i < c.n_uploads; ++i) {
        const sam3d_upload & u = c.uploads[i];
        const uintptr_t begin = reinterpret_cast<uintptr_t>(u.tensor->data) + u.offset;
        s.ranges.push_back({u.tensor->buffer, begin, begin + u.size, i});
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

void count_sync(sam3d_counters & k, const sam3d_call & c) {
    k.sync_uploads += c.n_uploads;
    k.sync_downloads += c.n_downloads;
}

void count_bytes(sam3d_counters & k, const sam3d_call & c) {
    for (size_t i = 0; i < c.n_uploads; ++i) {
        k.bytes_uploaded += c.uploads[i].size;
    }
    for (size_t i = 0; i < c.n_downloads; ++i) {
        k.bytes_downloaded += c.downloads[i].size;
    }
}

// Bytes a call's staging takes (rule 3): align_up(size, staging alignment) summed over its
// inputs and outputs.
size_t staging_need(const sam3d_session & s, const sam3d_call & c) {
    size_t need = 0;
    for (size_t i = 0; i < c.n_uploads; ++i) {
        need += align_up(c.uploads[i].size, s.alignment);
    }
    for (size_t i = 0; i < c.n_downloads; ++i) {
        need += align_up(c.downloads[i].size, s.alignment);
    }
    return need;
}

// ggml_backend_tensor_set / graph_compute / tensor_get, one by one (batching off and fallbacks).
sam3d_status run_sync(sam3d_session & s, const sam3d_call & c) {
    const uint64_t t0 = now_ns();
    for (size_t i = 0; i < c.n_uploads; ++i) {
        const sam3d_upload & u = c.uploads[i];
        s.ggml.tensor_set(u.tensor, u.src, u.offset, u.size);
    }
    if (c.graph != nullptr) {
        const ggml_status st = s.ggml.graph_compute(s.backend, c.graph);
        if (st != GGML_STATUS_SUCCESS) {
            // ggml_backend_graph_compute has synchronized: nothing is outstanding.
            s.counters.sync_path_ns += now_ns() - t0;
            return fail(SAM3D_ERR_COMPUTE, std::string("graph compute returned ") + ggml_status_to_string(st));
        }
    }
    for (size_t i = 0; i < c.n_downloads; ++i) {
        const sam3d_download & d = c.downloads[i];
        s.ggml.tensor_get(d.tensor, d.dst, d.offset, d.size);
    }
    s.counters.sync_path_ns += now_ns() - t0;
    count_sync(s.counters, c);
    return SAM3D_OK;
}

// Makes sure the staging buffer holds `need` bytes of pinned memory (rules 3 and 4).
// Returns false when pinned memory is unavailable (allocation failed or came back as
// ordinary CPU memory); the session then holds no staging buffer.
bool ensure_staging(sam3d_session & s, size_t need) {
    if (s.staging != nullptr && ggml_backend_buffer_get_size(s.staging) >= need) {
        return true;
    }
    size_t want = need;
    if (s.staging != nullptr) {
        // Grow geometrically below the bound so a slowly growing workload reallocates rarely.
        want = std::max(need, std::min(SAM3D_STAGING_BOUND_BYTES, 2 * ggml_backend_buffer_get_size(s.staging)));
        ggml_backend_buffer_free(s.staging);
        s.staging = nullptr;
        s.counters.staging_bytes = 0;
    }
    ggml_backend_buffer_t buf = s.ggml.buft_alloc_buffer(s.host_buft, want);
    if (buf == nullptr) {
        return false;
    }
    // GGML's Vulkan host buffer type returns an ordinary CPU buffer when pinned allocation
    // fails (ggml_backend_vk_host_buffer_type_alloc_buffer): its type is then not host_buft.
    if (ggml_backend_buffer_get_type(buf) != s.host_buft ||
        reinterpret_cast<uintptr_t>(ggml_backend_buffer_get_base(buf)) % std::max<size_t>(s.alignment, 1) != 0) {
        ggml_backend_buffer_free(buf);
        return false;
    }
    s.staging = buf;
    s.counters.staging_bytes = want;
    s.counters.staging_allocations += 1;
    return true;
}

// Rule 2: stage inputs, enqueue uploads, graph and downloads, synchronize once, copy outputs.
sam3d_status run_staged(sam3d_session & s, const sam3d_call & c, size_t region = 0) {
    uint8_t * base = static_cast<uint8_t *>(ggml_backend_buffer_get_base(s.staging)) + region;
    const size_t n = c.n_uploads + c.n_downloads;
    s.offsets.resize(n);
    size_t at = 0;
    for (size_t k = 0; k < n; ++k) {
        s.offsets[k] = at;
        at += align_up(k < c.n_uploads ? c.uploads[k].size : c.downloads[k - c.n_uploads].size, s.alignment);
    }
    uint64_t t = now_ns();
    for (size_t i = 0; i < c.n_uploads; ++i) {
        std::memcpy(base + s.offsets[i], c.uploads[i].src, c.uploads[i].size);
    }
    uint64_t t2 = now_ns();
    s.counters.copy_ns += t2 - t;
    t = t2;
    for (size_t i = 0; i < c.n_uploads; ++i) {
        const sam3d_upload & u = c.uploads[i];
        s.ggml.tensor_set_async(s.backend, u.tensor, base + s.offsets[i], u.offset, u.size);
    }
    if (c.graph != nullptr) {
        if (s.perf_logger && s.drain_before_compute) {
            // Rule 7: GGML_VK_PERF_LOGGER's query-pool reset asserts that no transfer context
            // is open (GGML_ASSERT(ctx->compute_ctx.expired())); diagnostic runs only.
            t2 = now_ns();
            s.counters.enqueue_ns += t2 - t;
            s.ggml.synchronize(s.backend);
            t = now_ns();
            s.counters.synchronize_ns += t - t2;
        }
        const ggml_status st = s.ggml.graph_compute_async(s.backend, c.graph);
        if (st != GGML_STATUS_SUCCESS) {
            // Rule 5: complete the uploads already enqueued before the caller can free anything.
            t2 = now_ns();
            s.counters.enqueue_ns += t2 - t;
            s.ggml.synchronize(s.backend);
            s.counters.synchronize_ns += now_ns() - t2;
            return fail(SAM3D_ERR_COMPUTE, std::string("graph compute returned ") + ggml_status_to_string(st) +
                                               " (uploads were completed before returning)");
        }
    }
    for (size_t i = 0; i < c.n_downloads; ++i) {
        const sam3d_download & d = c.downloads[i];
        s.ggml.tensor_get_async(s.backend, d.tensor, base + s.offsets[c.n_uploads + i], d.offset, d.size);
    }
    t2 = now_ns();
    s.counters.enqueue_ns += t2 - t;
    s.ggml.synchronize(s.backend);
    t = now_ns();
    s.counters.synchronize_ns += t - t2;
    for (size_t i = 0; i < c.n_downloads; ++i) {
        std::memcpy(c.downloads[i].dst, base + s.offsets[c.n_uploads + i], c.downloads[i].size);
    }
    s.counters.copy_ns += now_ns() - t;
    s.counters.async_uploads += c.n_uploads;
    s.counters.async_downloads += c.n_downloads;
    s.counters.pinned_batches += 1;
    return SAM3D_OK;
}

// ---- the staging ring of zero-copy and queued calls (transfer.h)

bool ring_busy(const sam3d_session & s) {
    if (s.pending && s.pending->ring) {
        return true;
    }
    for (const Ticket & t : s.tickets) {
        if (t.ring) {
            return true;
        }
    }
    return false;
}

// Completes every submitted call with one full synchronize (no-op when none is outstanding).
void complete_all(sam3d_session & s) {
    bool outstanding = false;
    for (const Ticket & t : s.tickets) {
        outstanding = outstanding || !t.done;
    }
    if (!outstanding) {
        return;
    }
    const uint64_t t0 = now_ns();
    s.ggml.synchronize(s.backend);
    s.counters.synchronize_ns += now_ns() - t0;
    for (Ticket & t : s.tickets) {
        t.done = true;
    }
}

// Marks every ticket complete after a synchronize the caller made.
void mark_all_done(sam3d_session & s) {
    for (Ticket & t : s.tickets) {
        t.done = true;
    }
}

// A region of `need` bytes that overlaps no held region: first fit at the ring head, then at
// the start, then after each held region. Held regions are released only once their
// completion is known and reported (transfer.h), so a fit never overwrites work in flight.
bool ring_alloc(sam3d_session & s, size_t need, size_t * at) {
    const size_t cap = s.staging != nullptr ? ggml_backend_buffer_get_size(s.staging) : 0;
    std::vector<std::pair<size_t, size_t>> & held = s.held;
    held.clear();
    if (s.pending && s.pending->ring) {
        held.emplace_back(s.pending->begin, s.pending->end);
    }
    for (const Ticket & t : s.tickets) {
        if (t.ring) {
            held.emplace_back(t.begin, t.end);
        }
    }
    if (held.empty()) {
        s.ring_head = 0;  // nothing held: restart at the front, whose memory is likely still in cache
    }
    // Candidates: the head, the front, then the end of each held region.
    for (size_t k = 0; k < held.size() + 2; ++k) {
        const size_t c = align_up(k == 0 ? s.ring_head : k == 1 ? 0 : held[k - 2].second, s.alignment);
        if (c > cap || need > cap - c) {
            continue;
        }
        bool free = true;
        for (const auto & h : held) {
            free = free && !(c < h.second && h.first < c + need);
        }
        if (free) {
            *at = c;
            s.ring_head = c + need;
            return true;
        }
    }
    return false;
}

// The ring is the staging buffer at the bound; it is never reallocated under held regions.
bool ensure_ring(sam3d_session & s) {
    if (s.staging != nullptr && ggml_backend_buffer_get_size(s.staging) >= SAM3D_STAGING_BOUND_BYTES) {
        return true;
    }
    if (ring_busy(s)) {
        return s.staging != nullptr;
    }
    return ensure_staging(s, SAM3D_STAGING_BOUND_BYTES);
}

// Whether the call with ticket `id` (0: none) has completed: a ticket no longer held was
// reported, hence complete.
bool reader_done(const sam3d_session & s, uint64_t id) {
    for (const Ticket & t : s.tickets) {
        if (t.id == id) {
            return t.done;
        }
    }
    return true;
}

void release_ticket(sam3d_session & s, std::list<Ticket>::iterator it) {
    if (it->event != nullptr) {
        // The call is complete (released tickets always are): this returns at once, and lets
        // GGML recycle the event's Vulkan objects before the event is recorded again.
        ggml_backend_event_synchronize(it->event);
        s.event_pool.push_back(it->event);
    }
    s.tickets.erase(it);
}

// total += align_up(size, a); false when that does not fit in size_t.
bool add_aligned(size_t * total, size_t size, size_t a) {
    const size_t al = std::max<size_t>(a, 1);
    if (size > SIZE_MAX - (al - 1)) {
        return false;
    }
    const size_t aligned = align_up(size, al);
    if (*total > SIZE_MAX - aligned) {
        return false;
    }
    *total += aligned;
    return true;
}

sam3d_status reserve_locked(sam3d_session & s, const sam3d_slot_request * req, size_t n, void ** slots) {
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
    // Slots of calls whose completion was reported are released now, kept slots once released
    // by the caller and no call that read them is still in flight (transfer.h).
    for (auto it = s.tickets.begin(); it != s.tickets.end();) {
        auto next = std::next(it);
        if (it->reported && (!it->kept || it->release_requested) && reader_done(s, it->last_reader)) {
            release_ticket(s, it);
        }
        it = next;
    }
    s.pending.reset();
    auto t = std::make_unique<Ticket>();
    sam3d_fallback reason = SAM3D_FALLBACK_COUNT;
    size_t at = 0;
    if (s.batching) {
        reason = s.static_fallback;
        if (reason == SAM3D_FALLBACK_COUNT && need > SAM3D_STAGING_BOUND_BYTES) {
            reason = SAM3D_FALLBACK_OVERSIZED;
        }
        if (reason == SAM3D_FALLBACK_COUNT && !ensure_ring(s)) {
            reason = SAM3D_FALLBACK_PINNED_UNAVAILABLE;
        }
        if (reason == SAM3D_FALLBACK_COUNT && !ring_alloc(s, need, &at)) {
            reason = SAM3D_FALLBACK_OVERSIZED;  // the ring is full of calls not yet released
        }
    }
    uint8_t * base = nullptr;
    size_t al = s.alignment;
    if (s.batching && reason == SAM3D_FALLBACK_COUNT) {
        t->ring = true;
        t->begin = at;
        t->end = at + need;
        base = static_cast<uint8_t *>(ggml_backend_buffer_get_base(s.staging)) + at;
    } else {
        al = heap_al;
        t->heap.reset(new uint8_t[heap]);
        base = t->heap.get();
        base += (al - reinterpret_cast<uintptr_t>(base) % al) % al;
        t->reason = s.batching ? reason : SAM3D_FALLBACK_COUNT;
    }
    size_t off = 0;
    for (size_t i = 0; i < n; ++i) {
        t->slots.emplace_back(base + off, req[i].size);
        slots[i] = base + off;
        off += align_up(req[i].size, al);
    }
    s.pending = std::move(t);
    return SAM3D_OK;
}

// Uploads, graph and downloads of a batching call from/into staging: the call's slots
// (zero-copy) or a ring region it copies through. Queued: records the completion event and
// returns; otherwise synchronizes once.
sam3d_status enqueue_staged(sam3d_session & s, const sam3d_call & c, Ticket & t, bool use_slots, bool queued) {
    s.up_ptrs.resize(c.n_uploads);
    s.down_ptrs.resize(c.n_downloads);
    uint64_t t1 = now_ns();
    if (use_slots) {
        for (size_t i = 0; i < c.n_uploads; ++i) {
            s.up_ptrs[i] = static_cast<const uint8_t *>(c.uploads[i].src);
        }
        for (size_t i = 0; i < c.n_downloads; ++i) {
            s.down_ptrs[i] = static_cast<uint8_t *>(c.downloads[i].dst);
        }
    } else if (c.n_uploads + c.n_downloads > 0) {
        uint8_t * base = static_cast<uint8_t *>(ggml_backend_buffer_get_base(s.staging)) + t.begin;
        size_t at = 0;
        for (size_t i = 0; i < c.n_uploads; ++i) {
            std::memcpy(base + at, c.uploads[i].src, c.uploads[i].size);
            s.up_ptrs[i] = base + at;
            at += align_up(c.uploads[i].size, s.alignment);
        }
        for (size_t i = 0; i < c.n_downloads; ++i) {
            s.down_ptrs[i] = base + at;
            at += align_up(c.downloads[i].size, s.alignment);
        }
        const uint64_t t2 = now_ns();
        s.counters.copy_ns += t2 - t1;
        t1 = t2;
    }
    for (size_t i = 0; i < c.n_uploads; ++i) {
        const sam3d_upload & u = c.uploads[i];
        s.ggml.tensor_set_async(s.backend, u.tensor, s.up_ptrs[i], u.offset, u.size);
    }
    if (c.graph != nullptr) {
        if (s.perf_logger && s.drain_before_compute) {
            const uint64_t t2 = now_ns();
            s.counters.enqueue_ns += t2 - t1;
            s.ggml.synchronize(s.backend);  // rule 7
            mark_all_done(s);
            t1 = now_ns();
            s.counters.synchronize_ns += t1 - t2;
        }
        const ggml_status st = s.ggml.graph_compute_async(s.backend, c.graph);
        if (st != GGML_STATUS_SUCCESS) {
            const uint64_t t2 = now_ns();
            s.counters.enqueue_ns += t2 - t1;
            s.ggml.synchronize(s.backend);  // rule 5: nothing of the session stays outstanding
            mark_all_done(s);
            t.done = true;
            s.counters.synchronize_ns += now_ns() - t2;
            return fail(SAM3D_ERR_COMPUTE, std::string("graph compute returned ") + ggml_status_to_string(st) +
                                               " (the session's outstanding work was completed)");
        }
    }
    for (size_t i = 0; i < c.n_downloads; ++i) {
        const sam3d_download & d = c.downloads[i];
        s.ggml.tensor_get_async(s.backend, d.tensor, s.down_ptrs[i], d.offset, d.size);
    }
    uint64_t t2 = now_ns();
    s.counters.enqueue_ns += t2 - t1;
    if (queued) {
        if (s.events) {
            if (t.event == nullptr && !s.event_pool.empty()) {
                t.event = s.event_pool.back();
                s.event_pool.pop_back();
            }
            if (t.event == nullptr) {
                t.event = ggml_backend_event_new(s.dev);
            }
            if (t.event != nullptr) {
                ggml_backend_event_record(t.event, s.backend);
            }
        }
        if (!use_slots) {
            for (size_t i = 0; i < c.n_downloads; ++i) {
                t.copies.push_back({c.downloads[i].dst, s.down_ptrs[i], c.downloads[i].size});
            }
        }
        s.counters.enqueue_ns += now_ns() - t2;
    } else {
        s.ggml.synchronize(s.backend);
        mark_all_done(s);
        t.done = true;
        t1 = now_ns();
        s.counters.synchronize_ns += t1 - t2;
        if (!use_slots) {
            for (size_t i = 0; i < c.n_downloads; ++i) {
                std::memcpy(c.downloads[i].dst, s.down_ptrs[i], c.downloads[i].size);
            }
            s.counters.copy_ns += now_ns() - t1;
        }
    }
    s.counters.async_uploads += c.n_uploads;
    s.counters.async_downloads += c.n_downloads;
    s.counters.pinned_batches += c.n_uploads + c.n_downloads > 0;  // a graph only stages nothing
    return SAM3D_OK;
}

// A kept call (SAM3D_SUBMIT_KEEP_SLOTS, not released) one of whose slots holds [p, p+size),
// or nullptr.
Ticket * kept_slot_owner(sam3d_session & s, const void * p, size_t size) {
    const auto * q = static_cast<const uint8_t *>(p);
    for (Ticket & t : s.tickets) {
        if (!t.kept || t.release_requested) {
            continue;
        }
        for (const auto & slot : t.slots) {
            if (q >= slot.first && q < slot.first + slot.second && size <= static_cast<size_t>(slot.first + slot.second - q)) {
                return &t;
            }
        }
    }
    return nullptr;
}

// Zero-copy: every descriptor's host pointer is a distinct slot of the current reservation, or,
// for an upload, bytes inside a kept slot of a call whose completion was reported (recorded in
// s.kept_sources). *own: whether the call uses a slot of the current reservation.
sam3d_status check_slots(sam3d_session & s, const sam3d_call & c, bool * own) {
    *own = false;
    const std::vector<std::pair<uint8_t *, size_t>> none;
    const auto & current = s.pending ? s.pending->slots : none;
    std::vector<bool> & used = s.used;
    used.assign(current.size(), false);
    const size_t n = c.n_uploads + c.n_downloads;
    for (size_t k = 0; k < n; ++k) {
        const bool is_up = k < c.n_uploads;
        const size_t i = is_up ? k : k - c.n_uploads;
        const void * p = is_up ? c.uploads[i].src : c.downloads[i].dst;
        const size_t size = is_up ? c.uploads[i].size : c.downloads[i].size;
        const auto name = [&] { return where(is_up ? "uploads" : "downloads", i, is_up ? "src" : "dst"); };
        size_t slot = used.size();
        for (size_t j = 0; j < used.size(); ++j) {
            if (current[j].first == p) {
                slot = j;
            }
        }
        if (slot == used.size()) {
            Ticket * owner = is_up ? kept_slot_owner(s, p, size) : nullptr;
            if (owner == nullptr) {
                return fail(SAM3D_ERR_INVALID_ARGUMENT,
                            name() + " is not a slot of the current reservation" + (is_up ? " nor inside a kept slot" : "") +
                                (s.pending ? "" : " (there is no current reservation: call sam3d_session_reserve first)"));
            }
            if (!owner->reported) {
                return fail(SAM3D_ERR_INVALID_ARGUMENT, name() + " reads a kept slot of ticket " +
                                                            std::to_string(owner->id) +
                                                            ", whose completion was not reported yet (wait for it first)");
            }
            s.kept_sources.push_back(owner);
            continue;
        }
        if (used[slot]) {
            return fail(SAM3D_ERR_INVALID_ARGUMENT, name() + " uses slot " + std::to_string(slot) + " a second time");
        }
        if (size > current[slot].second) {
            return fail(SAM3D_ERR_INVALID_ARGUMENT, where(is_up ? "uploads" : "downloads", i, "size") + " " +
                                                        std::to_string(size) + " exceeds the " +
                                                        std::to_string(current[slot].second) + " bytes of slot " +
                                                        std::to_string(slot));
        }
        used[slot] = true;
        *own = true;
    }
    return SAM3D_OK;
}

sam3d_status run_locked(sam3d_session & s, const sam3d_call & c);

sam3d_status submit_locked(sam3d_session & s, const sam3d_call & c, unsigned flags, sam3d_ticket * ticket) {
    const bool zero_copy = (flags & SAM3D_SUBMIT_ZERO_COPY) != 0;
    const bool queued = (flags & SAM3D_SUBMIT_QUEUED) != 0;
    const bool keep = (flags & SAM3D_SUBMIT_KEEP_SLOTS) != 0;
    if ((flags & ~(SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED | SAM3D_SUBMIT_KEEP_SLOTS)) != 0) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "flags has unknown bits");
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
    const size_t n = c.n_uploads + c.n_downloads;
    bool own_slots = false;  // the call consumes the current reservation
    s.kept_sources.clear();  // filled by check_slots; read after the call is enqueued
    sam3d_status st = validate(s, c);
    if (st == SAM3D_OK && zero_copy) {
        st = check_slots(s, c, &own_slots);
    }
    if (st != SAM3D_OK) {
        s.counters.rejected_calls += 1;
        return st;
    }
    s.counters.calls += 1;
    std::unique_ptr<Ticket> t = own_slots ? std::move(s.pending) : std::make_unique<Ticket>();
    t->id = s.next_ticket++;
    bool staged = false;
    if (s.batching && !c.synchronous) {
        sam3d_fallback reason = SAM3D_FALLBACK_COUNT;
        if (own_slots) {
            reason = t->ring ? SAM3D_FALLBACK_COUNT : t->reason;
            staged = t->ring;
        } else if (zero_copy) {
            // Uploads only from kept slots, or no transfers: nothing to stage. A call with no
            // transfers is enqueued only when queued (sam3d_session_run runs it synchronously).
            reason = s.static_fallback;
            staged = reason == SAM3D_FALLBACK_COUNT && (n > 0 || queued);
        } else {
            reason = s.static_fallback;
            const size_t need = staging_need(s, c);
            size_t at = 0;
            if (reason == SAM3D_FALLBACK_COUNT && need > SAM3D_STAGING_BOUND_BYTES) {
                reason = SAM3D_FALLBACK_OVERSIZED;
            } else if (reason == SAM3D_FALLBACK_COUNT && need > 0 && !ensure_ring(s)) {
                reason = SAM3D_FALLBACK_PINNED_UNAVAILABLE;
            } else if (reason == SAM3D_FALLBACK_COUNT && need > 0 && !ring_alloc(s, need, &at)) {
                reason = SAM3D_FALLBACK_OVERSIZED;
            } else if (reason == SAM3D_FALLBACK_COUNT && need > 0) {
                t->ring = true;
                t->begin = at;
                t->end = at + need;
                staged = true;
            } else if (reason == SAM3D_FALLBACK_COUNT) {
                staged = queued;  // a graph only: enqueued without staging when queued
            }
        }
        if (reason != SAM3D_FALLBACK_COUNT) {
            s.counters.fallbacks[reason] += 1;
        }
    }
    if (staged) {
        st = enqueue_staged(s, c, *t, zero_copy, queued);
    } else {
        complete_all(s);  // the synchronous path may not overtake queued work
        st = run_sync(s, c);
        t->done = true;
    }
    if (st != SAM3D_OK) {
        s.counters.failed_calls += 1;
        t->status = st;
        t->message = g_last_error;
        t->copies.clear();
    } else {
        count_bytes(s.counters, c);
    }
    for (Ticket * src : s.kept_sources) {
        src->last_reader = t->id;  // released kept slots wait for this call's completion
    }
    // A failed non-queued call is not kept: its outputs are unspecified.
    t->kept = keep && (queued || st == SAM3D_OK);
    if (!queued) {
        if (own_slots || t->kept) {
            t->reported = true;  // its slots stay the caller's until the next reservation (or release)
            if (t->kept) {
                *ticket = t->id;
            }
            s.tickets.push_back(std::move(*t));
        }
        return st;
    }
    t->submitted = true;
    *ticket = t->id;
    s.tickets.push_back(std::move(*t));
    return SAM3D_OK;
}

sam3d_status release_locked(sam3d_session & s, sam3d_ticket id) {
    auto it = std::find_if(s.tickets.begin(), s.tickets.end(),
                           [&](const Ticket & t) { return t.id == id && t.kept && !t.release_requested; });
    if (id == 0 || it == s.tickets.end()) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "ticket " + std::to_string(id) +
                                                    " is unknown, was not submitted with SAM3D_SUBMIT_KEEP_SLOTS, "
                                                    "or was already released");
    }
    if (!it->reported) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "ticket " + std::to_string(id) +
                                                    " was not waited yet: wait for it before releasing its slots");
    }
    it->release_requested = true;  // freed by the next reservation once its readers completed
    return SAM3D_OK;
}

sam3d_status wait_locked(sam3d_session & s, sam3d_ticket id) {
    auto it = std::find_if(s.tickets.begin(), s.tickets.end(),
                           [&](const Ticket & t) { return t.id == id && t.submitted && !t.reported; });
    if (id == 0 || it == s.tickets.end()) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "ticket " + std::to_string(id) + " is unknown or already waited");
    }
    Ticket & t = *it;
    if (!t.done) {
        const uint64_t t0 = now_ns();
        // The newest outstanding call is waited with a full synchronize: it completes the same
        // work as its event, and GGML's Vulkan backend spins on its fence there, where the
        // event's timeline-semaphore wait may sleep. An older call waits on its own event.
        const bool newest = std::none_of(s.tickets.begin(), s.tickets.end(),
                                         [&](const Ticket & o) { return !o.done && o.id > t.id; });
        if (t.event != nullptr && !newest) {
            ggml_backend_event_synchronize(t.event);
            t.done = true;
        } else {
            s.ggml.synchronize(s.backend);  // completes every call submitted so far
            mark_all_done(s);
        }
        s.counters.synchronize_ns += now_ns() - t0;
    }
    if (t.status == SAM3D_OK && !t.copies.empty()) {
        const uint64_t t0 = now_ns();
        for (const Ticket::Copy & k : t.copies) {
            std::memcpy(k.dst, k.src, k.size);
        }
        s.counters.copy_ns += now_ns() - t0;
    }
    t.reported = true;
    const sam3d_status st = t.status;
    const std::string message = t.message;
    if (t.slots.empty() && !t.kept) {
        release_ticket(s, it);  // a copying call's region is free once its outputs are copied
    }
    if (st != SAM3D_OK) {
        g_last_error = message;
    }
    return st;
}

sam3d_status run_locked(sam3d_session & s, const sam3d_call & c) {
    if (sam3d_status st = validate(s, c)) {
        s.counters.rejected_calls += 1;
        return st;
    }
    s.counters.calls += 1;
    complete_all(s);  // no-op unless queued calls are outstanding
    size_t region = 0;
    sam3d_status st = SAM3D_OK;
    if (!s.batching || c.synchronous) {
        st = run_sync(s, c);
    } else {
        sam3d_fallback reason = s.static_fallback;
        size_t need = 0;
        if (reason == SAM3D_FALLBACK_COUNT) {
            need = staging_need(s, c);
            if (need > SAM3D_STAGING_BOUND_BYTES) {
                reason = SAM3D_FALLBACK_OVERSIZED;
            } else if (need > 0 && ring_busy(s)) {
                // Zero-copy or queued calls hold parts of the staging buffer: take a free region.
                if (!ring_alloc(s, need, &region)) {
                    reason = SAM3D_FALLBACK_OVERSIZED;
                }
            } else if (need > 0 && !ensure_staging(s, need)) {
                reason = SAM3D_FALLBACK_PINNED_UNAVAILABLE;
            }
        }
        if (reason != SAM3D_FALLBACK_COUNT) {
            s.counters.fallbacks[reason] += 1;
            st = run_sync(s, c);
        } else if (need == 0) {
            st = run_sync(s, c);  // a graph with no transfers: nothing to stage
        } else {
            st = run_staged(s, c, region);
        }
    }
    if (st != SAM3D_OK) {
        s.counters.failed_calls += 1;
        return st;
    }
    count_bytes(s.counters, c);
    return SAM3D_OK;
}

// Runs `f` with the session's mutex held (rule 9); no exception crosses the C API: an
// allocation failure becomes SAM3D_ERR_OUT_OF_MEMORY naming `what`, any other SAM3D_ERR_INTERNAL.
template <typename F>
sam3d_status serialized(sam3d_session & s, const char * what, F && f) {
    try {
        std::lock_guard<std::mutex> lock(s.mutex);
        const sam3d_status st = f();
        if (st == SAM3D_OK) {
            g_last_error.clear();
        }
        return st;
    } catch (const std::bad_alloc &) {
        return fail(SAM3D_ERR_OUT_OF_MEMORY, what);
    } catch (const std::exception & e) {
        return fail(SAM3D_ERR_INTERNAL, e.what());
    }
}

}  // namespace

extern "C" {

sam3d_session_options sam3d_session_default_options(void) {
    sam3d_session_options o;
    o.batching = SAM3D_BATCHING_FROM_ENV;
    o.seam = nullptr;
    return o;
}

sam3d_status sam3d_session_create(ggml_backend_t backend, const sam3d_session_options * options,
                                  sam3d_session ** out) {
    if (out == nullptr || backend == nullptr) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, out == nullptr ? "out is NULL" : "backend is NULL");
    }
    *out = nullptr;
    const sam3d_session_options opts = options ? *options : sam3d_session_default_options();
    bool batching = false;
    if (opts.batching == SAM3D_BATCHING_FROM_ENV) {
        const char * env = std::getenv("SAM3D_BATCHED_TRANSFERS");
        if (env == nullptr || std::strcmp(env, "0") == 0) {
            batching = false;
        } else if (std::strcmp(env, "1") == 0) {
            batching = true;
        } else {
            return fail(SAM3D_ERR_BAD_ENV, std::string("SAM3D_BATCHED_TRANSFERS='") + env +
                                               "': use 1 (on), 0 or unset (off)");
        }
    } else if (opts.batching == SAM3D_BATCHING_ON || opts.batching == SAM3D_BATCHING_OFF) {
        batching = opts.batching == SAM3D_BATCHING_ON;
    } else {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "options.batching is " + std::to_string(opts.batching) +
                                                    ": use SAM3D_BATCHING_FROM_ENV, _OFF or _ON");
    }
    try {
        auto * s = new sam3d_session(opts.seam);
        s->backend = backend;
        s->dev = ggml_backend_get_device(backend);
        s->batching = batching;
        const int perf = opts.seam ? opts.seam->perf_logger : -1;
        s->perf_logger = perf < 0 ? std::getenv("GGML_VK_PERF_LOGGER") != nullptr : perf != 0;
        s->drain_before_compute = !(opts.seam && opts.seam->drain_before_compute == 0);
        // Rule 6: capabilities are read once, here.
        ggml_backend_dev_props props{};
        s->ggml.dev_get_props(s->dev, &props);
        s->host_buft = s->ggml.dev_host_buffer_type(s->dev);
        if (s->host_buft != nullptr) {
            s->alignment = ggml_backend_buft_get_alignment(s->host_buft);
        }
        s->events = props.caps.events;
        if (!props.caps.async || !props.caps.host_buffer || s->host_buft == nullptr) {
            s->static_fallback = SAM3D_FALLBACK_NO_ASYNC_CAPS;
        } else if (s->ggml.buft_get_device(s->host_buft) != s->dev) {
            s->static_fallback = SAM3D_FALLBACK_FOREIGN_HOST_BUFFER;
        }
        s->ranges.reserve(64);
        s->offsets.reserve(64);
        *out = s;
        g_last_error.clear();
        return SAM3D_OK;
    } catch (const std::bad_alloc &) {
        return fail(SAM3D_ERR_OUT_OF_MEMORY, "allocating the session");
    } catch (const std::exception & e) {
        return fail(SAM3D_ERR_INTERNAL, std::string("creating the session: ") + e.what());
    }
}

void sam3d_session_free(sam3d_session * session) { delete session; }

sam3d_status sam3d_session_run(sam3d_session * session, const sam3d_call * call) {
    if (session == nullptr || call == nullptr) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, session == nullptr ? "session is NULL" : "call is NULL");
    }
    return serialized(*session, "bookkeeping for the call", [&] { return run_locked(*session, *call); });
}

sam3d_status sam3d_session_reserve(sam3d_session * session, const sam3d_slot_request * requests, size_t n,
                                   void ** slots) {
    if (session == nullptr || requests == nullptr || slots == nullptr || n == 0) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, session == nullptr ? "session is NULL"
                                                : n == 0            ? "n is 0"
                                                                    : "requests or slots is NULL");
    }
    return serialized(*session, "slots of the reservation",
                      [&] { return reserve_locked(*session, requests, n, slots); });
}

bool sam3d_session_reservation_pinned(const sam3d_session * session) {
    return session != nullptr && session->pending && session->pending->ring;
}

sam3d_status sam3d_session_submit(sam3d_session * session, const sam3d_call * call, unsigned flags,
                                  sam3d_ticket * ticket) {
    if (session == nullptr || call == nullptr) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, session == nullptr ? "session is NULL" : "call is NULL");
    }
    // Serialized at submission (rule 9); the wait is serialized too.
    return serialized(*session, "bookkeeping for the call",
                      [&] { return submit_locked(*session, *call, flags, ticket); });
}

sam3d_status sam3d_session_wait(sam3d_session * session, sam3d_ticket ticket) {
    if (session == nullptr) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "session is NULL");
    }
    return serialized(*session, "waiting for the call", [&] { return wait_locked(*session, ticket); });
}

sam3d_status sam3d_session_release(sam3d_session * session, sam3d_ticket ticket) {
    if (session == nullptr) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "session is NULL");
    }
    return serialized(*session, "releasing kept slots", [&] { return release_locked(*session, ticket); });
}

size_t sam3d_session_outstanding(sam3d_session * session) {
    if (session == nullptr) {
        return 0;
    }
    std::lock_guard<std::mutex> lock(session->mutex);
    size_t n = 0;
    for (const Ticket & t : session->tickets) {
        n += t.submitted && !t.reported;
    }
    return n;
}

size_t sam3d_session_staging_in_flight(sam3d_session * session) {
    if (session == nullptr) {
        return 0;
    }
    std::lock_guard<std::mutex> lock(session->mutex);
    size_t n = session->pending && session->pending->ring ? session->pending->end - session->pending->begin : 0;
    for (const Ticket & t : session->tickets) {
        n += t.ring ? t.end - t.begin : 0;
    }
    return n;
}

bool sam3d_session_batching(const sam3d_session * session) { return session != nullptr && session->batching; }

sam3d_fallback sam3d_session_static_fallback(const sam3d_session * session) {
    return session ? session->static_fallback : SAM3D_FALLBACK_COUNT;
}

size_t sam3d_session_staging_alignment(const sam3d_session * session) { return session ? session->alignment : 0; }

void sam3d_session_counters(sam3d_session * session, sam3d_counters * out) {
    if (session == nullptr || out == nullptr) {
        return;
    }
    std::lock_guard<std::mutex> lock(session->mutex);
    *out = session->counters;
}

void sam3d_session_reset_counters(sam3d_session * session) {
    if (session == nullptr) {
        return;
    }
    std::lock_guard<std::mutex> lock(session->mutex);
    const uint64_t held = session->counters.staging_bytes;
    session->counters = sam3d_counters{};
    session->counters.staging_bytes = held;
}

const char * sam3d_last_error(void) { return g_last_error.c_str(); }

const char * sam3d_status_name(sam3d_status status) {
    switch (status) {
        case SAM3D_OK: return "ok";
        case SAM3D_ERR_INVALID_ARGUMENT: return "invalid_argument";
        case SAM3D_ERR_NULL_TENSOR: return "null_tensor";
        case SAM3D_ERR_NULL_POINTER: return "null_pointer";
        case SAM3D_ERR_UNALLOCATED_TENSOR: return "unallocated_tensor";
        case SAM3D_ERR_FOREIGN_TENSOR: return "foreign_tensor";
        case SAM3D_ERR_EXTENT: return "extent";
        case SAM3D_ERR_NOT_CONTIGUOUS: return "not_contiguous";
        case SAM3D_ERR_OVERLAPPING_UPLOADS: return "overlapping_uploads";
        case SAM3D_ERR_OVERLAPPING_OUTPUTS: return "overlapping_outputs";
        case SAM3D_ERR_BAD_ENV: return "bad_env";
        case SAM3D_ERR_COMPUTE: return "compute";
        case SAM3D_ERR_OUT_OF_MEMORY: return "out_of_memory";
        case SAM3D_ERR_INTERNAL: return "internal";
    }
    return "unknown_status";
}

const char * sam3d_fallback_name(sam3d_fallback reason) {
    switch (reason) {
        case SAM3D_FALLBACK_NO_ASYNC_CAPS: return "no_async_caps";
        case SAM3D_FALLBACK_FOREIGN_HOST_BUFFER: return "foreign_host_buffer";
        case SAM3D_FALLBACK_OVERSIZED: return "oversized";
        case SAM3D_FALLBACK_PINNED_UNAVAILABLE: return "pinned_unavailable";
        case SAM3D_FALLBACK_COUNT: break;
    }
    return "none";
}

}  // extern "C"
