// The session's state: the seam resolved to GGML's functions, the counted allocation point,
// the staging buffer, the reservation and the tracked calls (each with an explicit state), and
// the thread's last error. Creation (rule 6) is here; what happens to a call is in calls.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "copier.h"
#include "sam3d/testing.h"
#include "sam3d/transfer.h"

namespace sam3d {

// Sets the thread's last error to "<status name>: <message>" and returns `status`.
sam3d_status fail(sam3d_status status, const std::string & message);
void clear_error();
const char * last_error();

uint64_t now_ns();

// The extensible structs of the C API (docs/contract.md, "API versions"): each starts with the
// caller's struct_size. Reading one: the first min(struct_size, sizeof(T)) bytes are the
// caller's, the rest of `defaults` stands; bytes the caller has past sizeof(T) must be 0.
// Writing one: the first min(struct_size, sizeof(T)) bytes of `value` (struct_size kept), the
// caller's bytes past sizeof(T) zeroed. Either refuses a struct_size below sizeof(size_t).
sam3d_status read_extensible(const void * in, size_t known, void * out, const char * name);
sam3d_status write_extensible(const void * value, size_t known, void * out, const char * name);
template <class T>
sam3d_status read_extensible(const T * in, T * out, const char * name) {
    static_assert(offsetof(T, struct_size) == 0, "an extensible struct starts with its struct_size");
    return read_extensible(static_cast<const void *>(in), sizeof(T), static_cast<void *>(out), name);
}
template <class T>
sam3d_status write_extensible(const T & value, T * out, const char * name) {
    static_assert(offsetof(T, struct_size) == 0, "an extensible struct starts with its struct_size");
    return write_extensible(static_cast<const void *>(&value), sizeof(T), static_cast<void *>(out), name);
}
inline size_t align_up(size_t n, size_t a) { return a <= 1 ? n : (n + a - 1) / a * a; }
// total += align_up(size, a); false (total unchanged) when that does not fit in size_t.
inline bool add_aligned(size_t * total, size_t size, size_t a) {
    const size_t al = a > 1 ? a : 1;
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
    decltype(sam3d_ggml_seam::buft_get_alignment) buft_get_alignment;
    decltype(sam3d_ggml_seam::reg_name) reg_name;
    decltype(sam3d_ggml_seam::buft_alloc_buffer) buft_alloc_buffer;
    decltype(sam3d_ggml_seam::event_new) event_new;
    decltype(sam3d_ggml_seam::event_free) event_free;
    decltype(sam3d_ggml_seam::event_record) event_record;
    decltype(sam3d_ggml_seam::event_synchronize) event_synchronize;
    decltype(sam3d_ggml_seam::event_wait) event_wait;
    decltype(sam3d_ggml_seam::dev_init) dev_init;
    decltype(sam3d_ggml_seam::backend_free) backend_free;

    explicit Ggml(const sam3d_ggml_seam & s);
};

// The one point every allocation of the core's bookkeeping goes through: counts them and
// fails the armed one (sam3d_testing_fail_allocation) with std::bad_alloc.
class Allocations {
   public:
    explicit Allocations(uint64_t fail_at) : countdown_(fail_at) {}
    void operator()() {
        count_ += 1;
        if (countdown_ > 0 && --countdown_ == 0) {
            throw std::bad_alloc();
        }
    }
    // v.reserve(n) through the point (nothing when the capacity is already there).
    template <class V>
    void reserve(V & v, size_t n) {
        if (v.capacity() < n) {
            (*this)();
            v.reserve(n);
        }
    }
    void arm(uint64_t n) { countdown_ = n; }
    uint64_t count() const { return count_; }

   private:
    uint64_t countdown_;
    uint64_t count_ = 0;
};

// Staging memory of a reservation or a call.
struct Region {
    enum class Kind { None, Ring, Heap };
    Kind kind = Kind::None;
    size_t begin = 0;                   // Ring: [begin, end) of the staging buffer
    size_t end = 0;
    std::unique_ptr<uint8_t[]> heap;    // Heap: session-owned slots that cannot batch
    sam3d_fallback reason = SAM3D_FALLBACK_COUNT;  // Heap on a batching session: why

    size_t ring_bytes() const { return kind == Kind::Ring ? end - begin : 0; }
};

struct Slot {
    uint8_t * data;
    size_t size;
};

// A declared area (rule 10): bytes [begin, end) of `buffer` (device addresses as GGML's tensor
// data gives them) that the caller owns whole.
struct Area {
    ggml_backend_buffer_t buffer;
    uintptr_t begin;
    uintptr_t end;
};

// One GGML copy of a batched call (rule 10): descriptors [first, last) of one direction,
// adjacent on the device, `bytes` from the first one's first byte to the last one's end (gaps
// included). lay_out gives it its host bytes and the tensor and offset GGML copies with.
struct Run {
    size_t first = 0;
    size_t last = 0;
    size_t bytes = 0;
    uint8_t * host = nullptr;       // staging (a copying call) or the first slot's bytes
    ggml_tensor * tensor = nullptr; // the descriptor's own tensor, or a span tensor (several)
    size_t offset = 0;              // bytes into `tensor`
};

// The current reservation (sam3d_session_reserve), until a submit consumes it or the next
// reserve drops it.
struct Reservation {
    Region region;
    std::vector<Slot> slots;
};

// A submitted call the session still tracks: a queued call until its wait, a zero-copy call
// while its slots are the caller's, a kept call until released and unread.
struct Call {
    enum class State {
        InFlight,  // queued; completion not known yet
        Complete,  // queued; complete (a synchronize covered it), not waited
        Reported,  // completion reported; its slots are released by the next reserve (A2)
        Kept,      // reported, kept: slots held until sam3d_session_release (A4)
        Released,  // kept and released: freed once every call that read it completed
    };
    uint64_t id = 0;
    State state = State::InFlight;
    bool queued = false;
    bool keep = false;                  // submitted with SAM3D_SUBMIT_KEEP_SLOTS
    Region region;
    std::vector<Slot> slots;            // zero-copy: the reservation's slots
    ggml_backend_event_t event = nullptr;  // its completion (duplex: on the second backend)
    ggml_backend_event_t handoff = nullptr;  // duplex: its uploads and graph, recorded on the session's backend (rule 11)
    std::vector<Area> reads;            // duplex: the device bytes its downloads read, until it completes (rule 11)
    uint64_t last_reader = 0;           // the newest call whose uploads read these (kept) slots
    sam3d_status status = SAM3D_OK;
    ggml_status compute_status = GGML_STATUS_SUCCESS;
    std::vector<Span> copies;           // a copying queued call's outputs, copied at the wait
    std::vector<ggml_tensor> spans;     // a queued call's span tensors, alive until it completes (rule 10)

    bool done() const { return state != State::InFlight; }
    // Whether the call holds no slots the caller may read after its wait (a copying call, or a
    // zero-copy call reading kept slots only): it is freed by its wait.
    bool freed_at_wait() const { return slots.empty() && !keep; }
};

// An event marking the end of one piece of a copying call (rule 2): recorded after the piece's
// uploads so GGML submits them before the next piece is copied, or after a download piece so
// it can be copied out while the next pieces still transfer. Reused by the next call.
struct PieceEvent {
    ggml_backend_event_t event;
    bool recorded = false;  // recorded once: synchronized before it is recorded again
};

}  // namespace sam3d

struct sam3d_session {
    ggml_backend_t backend = nullptr;
    ggml_backend_dev_t dev = nullptr;
    sam3d::Ggml ggml;
    bool batching = false;
    bool perf_logger = false;
    bool drain_before_compute = true;
    bool events = false;  // props.caps.events
    bool in_order = false;  // one in-order queue per backend (in_order_backend): A6 needs no event wait
    ggml_backend_t second = nullptr;  // duplex (rule 11): the queued calls' downloads, owned; NULL: one queue
    bool second_busy = false;         // work went to `second` since its last synchronize
    size_t piece_bytes = SAM3D_STAGING_PIECE_BYTES;  // options.staging_piece_bytes (rule 2)
    std::unique_ptr<sam3d::Copier> copier;           // the staged copies' threads (rule 2)
    sam3d_fallback static_fallback = SAM3D_FALLBACK_COUNT;
    ggml_backend_buffer_type_t host_buft = nullptr;
    size_t alignment = 0;
    ggml_backend_buffer_t staging = nullptr;
    mutable std::mutex mutex;
    sam3d_counters counters{};
    sam3d::Allocations alloc;

    std::unique_ptr<sam3d::Reservation> reservation;
    std::list<sam3d::Call> calls;
    uint64_t next_id = 1;
    size_t ring_head = 0;
    std::vector<ggml_backend_event_t> event_pool;  // events of freed calls, for reuse
    size_t events_created = 0;
    std::vector<sam3d::PieceEvent> piece_events;   // the pieces' events, created as calls need them

    // Scratch reused across calls (sized through the allocation point): the validation's
    // ranges and slot marks, the executor's staging pointers.
    struct Range {
        const void * key;
        uintptr_t begin;
        uintptr_t end;
        size_t index;
    };
    std::vector<Range> ranges;
    std::vector<bool> used;
    std::vector<size_t> down_slots;  // zero-copy: each download's slot in the current reservation
    std::vector<const uint8_t *> up_ptrs;
    std::vector<uint8_t *> down_ptrs;
    std::vector<sam3d::Span> spans;  // the host copies of one piece
    std::vector<sam3d::Run> up_runs;  // the call's runs (rule 10), found by the validation pass
    std::vector<sam3d::Run> down_runs;
    std::vector<ggml_tensor> span_tensors;  // the span tensors of a call completed on return
    std::vector<sam3d::Area> areas;  // declared areas, sorted by buffer then address, disjoint

    sam3d_session(ggml_backend_t b, const sam3d_ggml_seam & seam);
    ~sam3d_session();
    sam3d_session(const sam3d_session &) = delete;
    sam3d_session & operator=(const sam3d_session &) = delete;
};

namespace sam3d {

using Session = sam3d_session;

// Backend facts (docs/contract.md, "Backend facts"), keyed on GGML's backend registry name
// (ggml_backend_reg_name: "CUDA", "Vulkan"): whether the pinned memory of the backend's host
// buffer type is usable by every device of the backend, or only by the device the host buffer
// type reports (ggml_backend_buft_get_device). A backend not listed: its reported device only.
bool host_buffer_every_device(const char * reg_name);
// Whether the backend (its registry name) runs the async copies, graphs and event records of one
// ggml_backend_t on one in-order queue, so a later queued call's uploads cannot overtake an
// earlier call's work (A6; GGML's blocking copies may use another). A backend not listed: not known to.
bool in_order_backend(const char * reg_name);
// Whether two ggml_backend_t of one device of the backend move host-to-device and
// device-to-host copies at once (rule 11, SAM3D_DUPLEX_AUTO). A backend not listed: not known to.
bool duplex_backend(const char * reg_name);

// The fallback every batching call of the session takes, decided once at creation (rules 3, 6;
// first match wins): no_async_caps (props lack caps.async or caps.host_buffer, or no host
// buffer type), foreign_host_buffer (the host buffer type is not usable by the session's
// device), else SAM3D_FALLBACK_COUNT.
sam3d_fallback static_fallback(const Session & s, const ggml_backend_dev_props & props);

// sam3d_session_create / sam3d_testing_session_create (seam NULL: GGML's own functions).
sam3d_status create(ggml_backend_t backend, const sam3d_session_options * options, const sam3d_ggml_seam * seam,
                    sam3d_session ** out);

}  // namespace sam3d
