// libFuzzer target for the core's C API on the CPU backend (built in the Clang ASan variant).
//
// An input is a sequence of operations decoded with FuzzedDataProvider, one byte per choice
// (make_corpus.py writes seeds in that encoding): run, submit (any flags, ticket or NULL),
// reserve, wait, release, reset of the counters, writes to caller host memory, and an armed
// compute failure. Calls are built from the input: descriptor arrays (or NULL arrays) over real
// CPU tensors (plain, contiguous views, non-contiguous views, a view made after its source was
// allocated, an unallocated tensor, NULL), offsets and sizes in range, out of range and
// overflowing, host pointers into one caller arena (overlaps included), NULL, or into slots.
//
// Every operation runs on four sessions ("worlds"), each over its own identical tensors and
// caller memory:
//   off       batching off: the reference, exactly the blocking GGML calls
//   staged    batching on; the seam makes the CPU backend async-capable with CPU memory as
//             its host buffer (native/testing/sam3d_fake_async.h), so the staged, zero-copy,
//             queued and kept paths run
//   no_caps   batching on with the CPU backend's own caps (every batching call falls back)
//   unpinned  like staged, but the staging allocation fails or returns ordinary CPU memory
// After each operation the invariants of the contract are checked (check_* below); a violation
// prints which and aborts, so libFuzzer keeps the input. At the end of the input every ticket
// is waited, every kept call released, and the ring must be empty again.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "sam3d/testing.h"
#include "sam3d/transfer.h"
#include "sam3d_fake_async.h"

namespace {

[[noreturn]] void violated(const char * invariant, const std::string & detail) {
    std::fprintf(stderr, "sam3d_fuzz_capi: invariant violated: %s\n  %s\n", invariant, detail.c_str());
    std::fflush(stderr);
    std::abort();
}

// `detail` is evaluated only on a violation.
#define CHECK(cond, invariant, detail)     \
    do {                                   \
        if (!(cond)) {                     \
            violated(invariant, (detail)); \
        }                                  \
    } while (0)

std::string str(size_t v) { return std::to_string(v); }

// The byte loops of the checks are not coverage-instrumented: their comparisons say nothing
// about the core and would only slow libFuzzer down.
#define NO_COVERAGE __attribute__((no_sanitize("coverage")))

constexpr size_t kArena = 1024;   // caller host memory of each world (copying calls)
constexpr size_t kShadow = 256;   // bytes of each slot the checks read and write
constexpr size_t kMaxOps = 32;
constexpr uint8_t kCanary = 0xC3;

enum World : int { kOff, kStaged, kNoCaps, kUnpinned, kWorlds };
const char * const kWorldName[kWorlds] = {"off", "staged", "no_caps", "unpinned"};

enum TensorId : int {
    kA, kB, kOut,      // out = 2 * a + b, the graph
    kRaw,              // I8 [96]
    kMat,              // F32 [6, 4]
    kRawView,          // contiguous view of raw, bytes [16, 48)
    kMatRows,          // contiguous view of mat, rows 1-2
    kTransposed,       // transpose of mat: not contiguous
    kStrided,          // 4 of every 6 floats of mat: not contiguous
    kLateView,         // contiguous view of raw, bytes [40, 64), made after allocation
    kUnallocated,      // F32 [8], never allocated
    kNullTensor,       // a descriptor with tensor NULL
    kTensorChoices
};

struct Record {
    enum What { Set, Get, SetAsync, GetAsync, Compute, ComputeAsync, Synchronize, Alloc } what;
    const ggml_tensor * tensor;
    const void * data;
    size_t offset;
    size_t size;
};

// One world: its tensors (identical layout in every world), caller memory, seam and session.
struct Env {
    World world = kOff;
    ggml_context * ctx = nullptr;
    ggml_context * late_ctx = nullptr;
    ggml_backend_buffer_t buffer = nullptr;
    std::array<ggml_tensor *, kTensorChoices> tensors{};
    ggml_cgraph * graph = nullptr;
    std::vector<uint8_t> arena;
    sam3d_ggml_seam seam{};
    sam3d_session * session = nullptr;
    std::vector<Record> records;  // seam entries of the current operation
    bool fail_compute = false;    // the next compute entry returns GGML_STATUS_FAILED
};

ggml_backend_t g_backend = nullptr;
std::array<Env, kWorlds> g_env;
Env * g_in = nullptr;          // the world whose session is being called
bool g_ordinary = false;       // unpinned: the allocation returns ordinary memory (else NULL)
alignas(64) uint8_t g_ordinary_memory[1 << 20];
// Staged: staging memory is one block for the process, handed out as a CPU buffer at its end
// (ASan still sees an overrun past it), rather than 32 MiB allocated and poisoned per input.
std::vector<uint8_t> g_staging_memory;

// ------------------------------------------------------------------------ the seam (only here)
// Every entry records itself in the calling world; transfer and compute entries forward to GGML.

Env & caller() {
    CHECK(g_in != nullptr, "the core enters GGML only inside a sam3d call", "a seam entry ran outside any call");
    return *g_in;
}

void record(Record::What what, const ggml_tensor * t, const void * data, size_t offset, size_t size) {
    Env & e = caller();
    if (t != nullptr) {
        const ggml_backend_buffer_t b = t->view_src != nullptr ? t->view_src->buffer : t->buffer;
        CHECK(b == e.buffer, "a session transfers only the tensors of its own call",
              std::string(kWorldName[e.world]) + ": tensor '" + t->name + "' is another world's");
    }
    e.records.push_back({what, t, data, offset, size});
}

void seam_set(ggml_tensor * t, const void * d, size_t o, size_t n) {
    record(Record::Set, t, d, o, n);
    ggml_backend_tensor_set(t, d, o, n);
}
void seam_get(const ggml_tensor * t, void * d, size_t o, size_t n) {
    record(Record::Get, t, d, o, n);
    ggml_backend_tensor_get(t, d, o, n);
}
void seam_set_async(ggml_backend_t b, ggml_tensor * t, const void * d, size_t o, size_t n) {
    record(Record::SetAsync, t, d, o, n);
    ggml_backend_tensor_set_async(b, t, d, o, n);
}
void seam_get_async(ggml_backend_t b, const ggml_tensor * t, void * d, size_t o, size_t n) {
    record(Record::GetAsync, t, d, o, n);
    ggml_backend_tensor_get_async(b, t, d, o, n);
}
bool take_failure() {
    Env & e = caller();
    const bool fail = e.fail_compute;
    e.fail_compute = false;
    return fail;
}
ggml_status seam_compute(ggml_backend_t b, ggml_cgraph * g) {
    record(Record::Compute, nullptr, g, 0, 0);
    return take_failure() ? GGML_STATUS_FAILED : ggml_backend_graph_compute(b, g);
}
ggml_status seam_compute_async(ggml_backend_t b, ggml_cgraph * g) {
    record(Record::ComputeAsync, nullptr, g, 0, 0);
    return take_failure() ? GGML_STATUS_FAILED : ggml_backend_graph_compute_async(b, g);
}
void seam_synchronize(ggml_backend_t b) {
    record(Record::Synchronize, nullptr, nullptr, 0, 0);
    ggml_backend_synchronize(b);
}
// Staged: the host buffer type is that of the buffers over the staging block (GGML's CPU_Mapped),
// which fake_async::buffer_type_device reports as the CPU device's.
ggml_backend_buffer_type_t seam_host_buft_staged(ggml_backend_dev_t) { return fake_async::cpu_mapped_buffer_type(); }
ggml_backend_buffer_t seam_alloc_real(ggml_backend_buffer_type_t buft, size_t size) {
    record(Record::Alloc, nullptr, nullptr, 0, size);
    return ggml_backend_buft_alloc_buffer(buft, size);
}
ggml_backend_buffer_t seam_alloc_staged(ggml_backend_buffer_type_t, size_t size) {
    record(Record::Alloc, nullptr, nullptr, 0, size);
    if (size > g_staging_memory.size()) {
        return nullptr;
    }
    const size_t at = (g_staging_memory.size() - size) / 64 * 64;
    return ggml_backend_cpu_buffer_from_ptr(g_staging_memory.data() + at, size);
}
ggml_backend_buffer_t seam_alloc_unpinned(ggml_backend_buffer_type_t, size_t size) {
    record(Record::Alloc, nullptr, nullptr, 0, size);
    return g_ordinary && size <= sizeof(g_ordinary_memory) ? ggml_backend_cpu_buffer_from_ptr(g_ordinary_memory, size)
                                                           : nullptr;
}

sam3d_ggml_seam seam_for(World w) {
    sam3d_ggml_seam s = sam3d_testing_default_seam();
    s.perf_logger = 0;  // no perf logger, whatever the environment says
    s.drain_before_compute = -1;
    s.tensor_set = seam_set;
    s.tensor_get = seam_get;
    s.tensor_set_async = seam_set_async;
    s.tensor_get_async = seam_get_async;
    s.graph_compute = seam_compute;
    s.graph_compute_async = seam_compute_async;
    s.synchronize = seam_synchronize;
    s.buft_alloc_buffer = w == kStaged ? seam_alloc_staged : w == kUnpinned ? seam_alloc_unpinned : seam_alloc_real;
    if (w == kStaged || w == kUnpinned) {
        fake_async::install(s);  // unpinned: the host buffer type is GGML's CPU buffer type
        if (w == kStaged) {
            s.dev_host_buffer_type = seam_host_buft_staged;
        }
    }
    return s;
}

sam3d_session * open_session(Env & e) {
    e.seam = seam_for(e.world);
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = e.world == kOff ? SAM3D_BATCHING_OFF : SAM3D_BATCHING_ON;
    sam3d_session * s = nullptr;
    const sam3d_status st = sam3d_testing_session_create(g_backend, &o, &e.seam, &s);
    CHECK(st == SAM3D_OK, "a session is created", sam3d_last_error());
    CHECK(sam3d_session_batching(s) == (e.world != kOff) &&
              sam3d_session_static_fallback(s) ==
                  (e.world == kStaged || e.world == kUnpinned ? SAM3D_FALLBACK_COUNT : SAM3D_FALLBACK_NO_ASYNC_CAPS),
          "a session batches as asked, with the static fallback its caps give", kWorldName[e.world]);
    return s;
}

// ------------------------------------------------------------------------ worlds

void build_world(Env & e, World w) {
    e.world = w;
    ggml_init_params p = {ggml_tensor_overhead() * 32 + ggml_graph_overhead(), nullptr, true};
    e.ctx = ggml_init(p);
    auto & t = e.tensors;
    t[kA] = ggml_new_tensor_1d(e.ctx, GGML_TYPE_F32, 16);
    t[kB] = ggml_new_tensor_1d(e.ctx, GGML_TYPE_F32, 16);
    t[kOut] = ggml_add(e.ctx, ggml_scale(e.ctx, t[kA], 2.0f), t[kB]);
    t[kRaw] = ggml_new_tensor_1d(e.ctx, GGML_TYPE_I8, 96);
    t[kMat] = ggml_new_tensor_2d(e.ctx, GGML_TYPE_F32, 6, 4);
    t[kRawView] = ggml_view_1d(e.ctx, t[kRaw], 32, 16);
    t[kMatRows] = ggml_view_1d(e.ctx, t[kMat], 12, t[kMat]->nb[1]);
    t[kTransposed] = ggml_transpose(e.ctx, t[kMat]);
    t[kStrided] = ggml_view_2d(e.ctx, t[kMat], 4, 4, t[kMat]->nb[1], 0);
    e.graph = ggml_new_graph(e.ctx);
    ggml_build_forward_expand(e.graph, t[kOut]);
    e.buffer = ggml_backend_alloc_ctx_tensors(e.ctx, g_backend);
    CHECK(e.buffer != nullptr, "the world's tensors are allocated", kWorldName[w]);
    e.late_ctx = ggml_init({ggml_tensor_overhead() * 4, nullptr, true});
    t[kLateView] = ggml_view_1d(e.late_ctx, t[kRaw], 24, 40);
    t[kUnallocated] = ggml_new_tensor_1d(e.late_ctx, GGML_TYPE_F32, 8);
    t[kNullTensor] = nullptr;
    const char * names[] = {"a", "b", "out", "raw", "mat", "raw_view", "mat_rows", "transposed", "strided",
                            "late_view", "unallocated"};
    for (int i = 0; i < kNullTensor; ++i) {
        ggml_set_name(t[i], names[i]);
    }
    e.arena.assign(kArena, 0);
}

// Deterministic bytes for tensor contents, host memory and slots.
NO_COVERAGE void fill(uint8_t * p, size_t n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = static_cast<uint8_t>(x >> 8);
    }
}

uint8_t * buffer_base(const Env & e) { return static_cast<uint8_t *>(ggml_backend_buffer_get_base(e.buffer)); }
size_t buffer_size(const Env & e) { return ggml_backend_buffer_get_size(e.buffer); }

// Tensor bytes after an operation whose effect on them the contract leaves open (a failed
// call): every world gets batching off's, so later results stay comparable.
NO_COVERAGE void resync_tensors() {
    for (int w = 1; w < kWorlds; ++w) {
        std::memcpy(buffer_base(g_env[w]), buffer_base(g_env[kOff]), buffer_size(g_env[kOff]));
    }
}

// ------------------------------------------------------------------------ the model
// What the caller knows: reservations (slot sets), tickets, the current reservation.

struct HostRef {
    enum Kind { Null, Arena, Slot } kind = Null;
    size_t at = 0;  // Arena: offset in the arena; Slot: offset in the slot
    int set = -1;   // Slot: index in g_model.sets
    size_t slot = 0;
};

struct Region {
    HostRef ref;
    size_t size;
};

struct SlotSet {
    enum State { Pending, InFlight, Reported, Expired } state = Pending;
    std::vector<size_t> sizes;
    std::array<std::vector<uint8_t *>, kWorlds> ptr;
    std::array<bool, kWorlds> pinned{};
    bool kept = false;  // kept slots not released yet
};

struct TicketModel {
    std::array<sam3d_ticket, kWorlds> id{};
    bool queued = false;
    bool zero_copy = false;
    bool fails = false;     // its compute was armed to fail
    bool waited = false;    // a queued call's wait returned
    bool kept = false;      // holds kept slots now (release is valid once reported)
    bool lower_bound_counts = true;  // its failure counts toward failed_calls' lower bound
    int set = -1;           // the reservation it consumed
    std::vector<Region> outputs;
    bool in_flight() const { return queued && !waited; }
    bool reported() const { return !queued || waited; }
};

struct Model {
    std::vector<SlotSet> sets;
    int pending = -1;
    std::vector<TicketModel> tickets;
    bool armed = false;          // the next call's compute fails
    uint64_t failed_lo = 0;      // failed_calls is within [failed_lo, failed_hi]
    uint64_t failed_hi = 0;
    uint32_t fills = 0;          // seeds for harness writes
};
Model g_model;

uint8_t * resolve(const HostRef & r, int w) {
    switch (r.kind) {
        case HostRef::Null: return nullptr;
        case HostRef::Arena: return g_env[w].arena.data() + r.at;
        case HostRef::Slot: return g_model.sets[r.set].ptr[w][r.slot] + r.at;
    }
    return nullptr;
}

size_t shadow_of(const SlotSet & s, size_t slot) { return std::min(s.sizes[slot], kShadow); }

// Writes the same bytes to [ref, ref+n) in every world (the caller writing its memory).
NO_COVERAGE void write_all(const HostRef & ref, size_t n, bool canary) {
    const uint32_t seed = ++g_model.fills;
    for (int w = 0; w < kWorlds; ++w) {
        uint8_t * p = resolve(ref, w);
        if (canary) {
            std::memset(p, kCanary, n);
        } else {
            fill(p, n, seed);
        }
    }
}

// Caller memory the checks compare: the arena and the first kShadow bytes of every live slot.
struct Block {
    HostRef ref;
    size_t size;
};

std::vector<Block> blocks() {
    std::vector<Block> b = {{{HostRef::Arena, 0, -1, 0}, kArena}};
    for (size_t s = 0; s < g_model.sets.size(); ++s) {
        const SlotSet & set = g_model.sets[s];
        if (set.state == SlotSet::Expired) {
            continue;
        }
        for (size_t j = 0; j < set.sizes.size(); ++j) {
            b.push_back({{HostRef::Slot, 0, static_cast<int>(s), j}, shadow_of(set, j)});
        }
    }
    return b;
}

bool same_block(const HostRef & a, const HostRef & b) {
    return a.kind == b.kind && (a.kind != HostRef::Slot || (a.set == b.set && a.slot == b.slot));
}

NO_COVERAGE bool covers(const std::vector<Region> & rs, const Block & b, size_t i) {
    for (const Region & r : rs) {
        if (same_block(r.ref, b.ref) && i >= r.ref.at && i - r.ref.at < r.size) {
            return true;
        }
    }
    return false;
}

std::vector<Region> in_flight_outputs() {
    std::vector<Region> r;
    for (const TicketModel & t : g_model.tickets) {
        if (t.in_flight()) {
            r.insert(r.end(), t.outputs.begin(), t.outputs.end());
        }
    }
    return r;
}

size_t outstanding_model() {
    size_t n = 0;
    for (const TicketModel & t : g_model.tickets) {
        n += t.in_flight();
    }
    return n;
}

struct Snapshot {
    std::vector<Block> blocks;
    std::array<std::vector<std::vector<uint8_t>>, kWorlds> host;
    std::array<std::vector<uint8_t>, kWorlds> tensors;
    std::array<sam3d_counters, kWorlds> counters{};
    std::array<size_t, kWorlds> in_flight{};
};

NO_COVERAGE Snapshot snapshot() {
    Snapshot s;
    s.blocks = blocks();
    for (int w = 0; w < kWorlds; ++w) {
        for (const Block & b : s.blocks) {
            const uint8_t * p = resolve(b.ref, w);
            s.host[w].emplace_back(p, p + b.size);
        }
        s.tensors[w].assign(buffer_base(g_env[w]), buffer_base(g_env[w]) + buffer_size(g_env[w]));
        s.counters[w].struct_size = sizeof s.counters[w];
        sam3d_session_counters(g_env[w].session, &s.counters[w]);
        s.in_flight[w] = sam3d_session_staging_in_flight(g_env[w].session);
    }
    return s;
}

// ------------------------------------------------------------------------ checks

std::string where(const char * what, int w) { return std::string(what) + " (session " + kWorldName[w] + ")"; }

// Caller memory: an operation writes only `allowed` (its outputs) in each world; outside the
// outputs of calls still in flight, every world holds batching off's bytes.
NO_COVERAGE void check_host(const Snapshot & before, const std::vector<Region> & allowed) {
    const std::vector<Block> now = blocks();
    for (int w = 0; w < kWorlds; ++w) {
        for (size_t k = 0; k < before.blocks.size(); ++k) {
            const Block & b = before.blocks[k];
            const bool live = std::any_of(now.begin(), now.end(), [&](const Block & n) { return same_block(n.ref, b.ref); });
            if (!live) {
                continue;
            }
            const uint8_t * p = resolve(b.ref, w);
            if (std::memcmp(p, before.host[w][k].data(), b.size) == 0) {
                continue;
            }
            for (size_t i = 0; i < b.size; ++i) {
                CHECK(p[i] == before.host[w][k][i] || covers(allowed, b, i),
                      "a call writes caller memory only at its downloads' dst, and a rejected or failed call none",
                      where(b.ref.kind == HostRef::Arena ? "arena" : "slot", w) + " byte " + str(i) + " changed");
            }
        }
    }
    const std::vector<Region> flying = in_flight_outputs();
    for (const Block & b : now) {
        const uint8_t * ref = resolve(b.ref, kOff);
        for (int w = 1; w < kWorlds; ++w) {
            const uint8_t * p = resolve(b.ref, w);
            if (std::memcmp(p, ref, b.size) == 0) {
                continue;
            }
            for (size_t i = 0; i < b.size; ++i) {
                CHECK(p[i] == ref[i] || covers(flying, b, i), "an accepted call gives exactly the batching-off result",
                      where(b.ref.kind == HostRef::Arena ? "arena" : "slot", w) + " byte " + str(i) + " differs from off");
            }
        }
    }
}

NO_COVERAGE void check_tensors_unchanged(const Snapshot & before, const char * op) {
    for (int w = 0; w < kWorlds; ++w) {
        CHECK(std::memcmp(before.tensors[w].data(), buffer_base(g_env[w]), before.tensors[w].size()) == 0,
              "a rejected request submits nothing (tensors unchanged)", where(op, w));
    }
}

NO_COVERAGE void check_tensors_equal() {
    if (outstanding_model() != 0) {
        return;  // tensors are comparable once every call has completed
    }
    for (int w = 1; w < kWorlds; ++w) {
        CHECK(std::memcmp(buffer_base(g_env[w]), buffer_base(g_env[kOff]), buffer_size(g_env[kOff])) == 0,
              "an accepted call gives exactly the batching-off result (tensor bytes)", where("tensors", w));
    }
}

// The state every operation leaves: outstanding tickets and ring bytes as the model says,
// failed_calls within its bounds.
void check_state() {
    const size_t outstanding = outstanding_model();
    for (int w = 0; w < kWorlds; ++w) {
        Env & e = g_env[w];
        CHECK(sam3d_session_outstanding(e.session) == outstanding, "outstanding counts the queued calls not waited",
              where("outstanding", w) + " " + str(sam3d_session_outstanding(e.session)) + " != " + str(outstanding));
        const size_t flight = sam3d_session_staging_in_flight(e.session);
        CHECK(flight <= SAM3D_STAGING_BOUND_BYTES && (w == kStaged || flight == 0),
              "staging in flight stays within the bound (and 0 without pinned staging)", where("in flight", w) + " " + str(flight));
        sam3d_counters k{};
        k.struct_size = sizeof k;
        sam3d_session_counters(e.session, &k);
        CHECK(k.failed_calls >= g_model.failed_lo && k.failed_calls <= g_model.failed_hi, "failed_calls counts failed calls",
              where("failed_calls", w) + " " + str(k.failed_calls) + " not in [" + str(g_model.failed_lo) + ", " +
                  str(g_model.failed_hi) + "]");
        CHECK(k.staging_bytes <= SAM3D_STAGING_BOUND_BYTES && (w == kStaged || k.staging_bytes == 0),
              "staging_bytes stays within the bound (and 0 without pinned staging)", where("staging_bytes", w));
    }
}

// Counter fields by name, for "only these changed" checks.
struct Field {
    const char * name;
    uint64_t sam3d_counters::*member;
};
const Field kFields[] = {
    {"calls", &sam3d_counters::calls},
    {"rejected_calls", &sam3d_counters::rejected_calls},
    {"async_uploads", &sam3d_counters::async_uploads},
    {"sync_uploads", &sam3d_counters::sync_uploads},
    {"async_downloads", &sam3d_counters::async_downloads},
    {"sync_downloads", &sam3d_counters::sync_downloads},
    {"bytes_uploaded", &sam3d_counters::bytes_uploaded},
    {"bytes_downloaded", &sam3d_counters::bytes_downloaded},
    {"pinned_batches", &sam3d_counters::pinned_batches},
    {"enqueue_ns", &sam3d_counters::enqueue_ns},
    {"synchronize_ns", &sam3d_counters::synchronize_ns},
    {"copy_ns", &sam3d_counters::copy_ns},
    {"sync_path_ns", &sam3d_counters::sync_path_ns},
    {"staging_bytes", &sam3d_counters::staging_bytes},
    {"staging_allocations", &sam3d_counters::staging_allocations},
};

uint64_t fallbacks(const sam3d_counters & k) {
    uint64_t n = 0;
    for (uint64_t f : k.fallbacks) {
        n += f;
    }
    return n;
}

using Counter = uint64_t sam3d_counters::*;

// Every counter except failed_calls (checked by bounds) and those in `may_change` is the same.
void check_counters_only(const sam3d_counters & a, const sam3d_counters & b, std::initializer_list<Counter> may_change,
                         const char * invariant, const std::string & what) {
    for (const Field & f : kFields) {
        const bool may = std::find(may_change.begin(), may_change.end(), f.member) != may_change.end();
        CHECK(may || a.*f.member == b.*f.member, invariant, what + ": " + f.name + " changed");
    }
    for (int r = 0; r < SAM3D_FALLBACK_COUNT; ++r) {
        CHECK(a.fallbacks[r] == b.fallbacks[r], invariant, what + ": fallbacks changed");
    }
}

void check_records_only(int w, std::initializer_list<Record::What> allowed, const char * invariant, const char * op) {
    for (const Record & r : g_env[w].records) {
        CHECK(std::find(allowed.begin(), allowed.end(), r.what) != allowed.end(), invariant,
              where(op, w) + ": seam entry " + str(static_cast<size_t>(r.what)));
    }
}

// ------------------------------------------------------------------------ calls

struct Desc {
    int tensor = kNullTensor;
    HostRef host;
    size_t offset = 0;
    size_t size = 0;
};

struct Call {
    std::vector<Desc> ups;
    std::vector<Desc> downs;
    bool null_ups = false;
    bool null_downs = false;
    bool graph = false;
    bool synchronous = false;
};

class Input {
   public:
    Input(const uint8_t * data, size_t size) : p_(data, size) {}
    // A choice in [0, n), n <= 256: one byte (0 once the input is used up).
    size_t pick(size_t n) { return p_.ConsumeIntegralInRange<size_t>(0, n - 1); }
    bool more() { return p_.remaining_bytes() > 0; }

   private:
    FuzzedDataProvider p_;
};

size_t nbytes_of(int tensor) {
    const ggml_tensor * t = g_env[kOff].tensors[tensor];
    return t != nullptr ? ggml_nbytes(t) : 64;
}

size_t decode_offset(Input & in, size_t nbytes) {
    switch (in.pick(8)) {
        case 4: return in.pick(nbytes + 1);
        case 5: return nbytes;
        case 6: return nbytes + 1 + in.pick(4);
        case 7: return SIZE_MAX - in.pick(8);
        default: return 0;
    }
}

size_t decode_size(Input & in, size_t nbytes, size_t offset) {
    const size_t rest = offset <= nbytes ? nbytes - offset : 8;
    switch (in.pick(8)) {
        case 3: return 1 + in.pick(std::max<size_t>(rest, 1));
        case 4: return 0;
        case 5: return rest + 1;
        case 6: return SIZE_MAX - in.pick(8);  // offset + size overflows
        case 7: return 4 + 4 * in.pick(4);
        default: return rest;
    }
}

// Live slot sets other than the current reservation, for pointers a zero-copy call may not use
// (consumed, in flight) or may (kept and reported).
std::vector<int> other_live_sets() {
    std::vector<int> r;
    for (size_t s = 0; s < g_model.sets.size(); ++s) {
        if (g_model.sets[s].state != SlotSet::Expired && static_cast<int>(s) != g_model.pending) {
            r.push_back(static_cast<int>(s));
        }
    }
    return r;
}

HostRef decode_host(Input & in, bool zero_copy) {
    HostRef r;
    const size_t kind = in.pick(8);
    if (kind == 0) {
        return r;  // NULL
    }
    if (zero_copy && kind >= 2) {
        if (kind <= 5 && g_model.pending >= 0) {  // a slot of the current reservation
            const SlotSet & s = g_model.sets[g_model.pending];
            r.kind = HostRef::Slot;
            r.set = g_model.pending;
            r.slot = in.pick(4) % s.sizes.size();
            r.at = kind == 5 ? std::min<size_t>(4, shadow_of(s, r.slot) - 1) : 0;  // 5: inside, not at its start
            return r;
        }
        const std::vector<int> others = other_live_sets();
        if (kind >= 6 && !others.empty()) {  // inside a slot of another live set
            const SlotSet & s = g_model.sets[others[in.pick(8) % others.size()]];
            r.kind = HostRef::Slot;
            r.set = static_cast<int>(&s - g_model.sets.data());
            r.slot = in.pick(4) % s.sizes.size();
            r.at = kind == 7 ? 4 * in.pick(64) % shadow_of(s, r.slot) : 0;
            return r;
        }
    }
    r.kind = HostRef::Arena;
    r.at = 3 * in.pick(256);  // + at most 96 bytes stays inside kArena
    return r;
}

Desc decode_desc(Input & in, bool zero_copy) {
    Desc d;
    d.tensor = static_cast<int>(in.pick(kTensorChoices));
    d.host = decode_host(in, zero_copy);
    const size_t nbytes = nbytes_of(d.tensor);
    d.offset = decode_offset(in, nbytes);
    d.size = decode_size(in, nbytes, d.offset);
    return d;
}

Call decode_call(Input & in, bool zero_copy) {
    Call c;
    c.graph = in.pick(2) == 1;
    c.synchronous = in.pick(8) == 0;
    const size_t nu = in.pick(5);
    const size_t nd = in.pick(4);
    const size_t nulls = in.pick(32);
    c.null_ups = nulls == 0;
    c.null_downs = nulls == 1;
    for (size_t i = 0; i < nu; ++i) {
        c.ups.push_back(decode_desc(in, zero_copy));
    }
    for (size_t i = 0; i < nd; ++i) {
        c.downs.push_back(decode_desc(in, zero_copy));
    }
    return c;
}

struct WorldCall {
    std::vector<sam3d_upload> ups;
    std::vector<sam3d_download> downs;
    sam3d_call call{};
};

WorldCall materialize(const Call & c, int w) {
    WorldCall m;
    Env & e = g_env[w];
    for (const Desc & d : c.ups) {
        m.ups.push_back({e.tensors[d.tensor], resolve(d.host, w), d.offset, d.size});
    }
    for (const Desc & d : c.downs) {
        m.downs.push_back({e.tensors[d.tensor], resolve(d.host, w), d.offset, d.size});
    }
    m.call.uploads = c.null_ups ? nullptr : m.ups.data();
    m.call.n_uploads = m.ups.size();
    m.call.downloads = c.null_downs ? nullptr : m.downs.data();
    m.call.n_downloads = m.downs.size();
    m.call.graph = c.graph ? e.graph : nullptr;
    m.call.synchronous = c.synchronous;
    if (m.call.n_uploads == 0 && !c.null_ups) {
        m.call.uploads = nullptr;
    }
    if (m.call.n_downloads == 0 && !c.null_downs) {
        m.call.downloads = nullptr;
    }
    return m;
}

// Reading or writing caller memory of a call still in flight is the caller's error: such
// calls are not made (nothing else is excluded).
bool touches_in_flight(const Call & c) {
    const std::vector<Region> flying = in_flight_outputs();
    auto hits = [&](const Desc & d) {
        if (d.host.kind != HostRef::Arena) {
            return false;
        }
        const size_t n = std::min(d.size, kArena - d.host.at);
        for (const Region & r : flying) {
            if (r.ref.kind == HostRef::Arena && d.host.at < r.ref.at + r.size && r.ref.at < d.host.at + n) {
                return true;
            }
        }
        return false;
    };
    return std::any_of(c.ups.begin(), c.ups.end(), hits) || std::any_of(c.downs.begin(), c.downs.end(), hits);
}

// What the contract says of a request: `must` holds the errors that apply (the call is rejected
// with one of them); `names` the descriptor names an error message may give for each status;
// `late_views` the descriptors whose tensor is a view without a buffer of its own (GGML's
// blocking set/get take it, the staged path refuses it: unallocated_tensor).
struct Verdict {
    std::vector<sam3d_status> must;
    std::vector<std::pair<sam3d_status, std::string>> names;
    std::vector<std::string> late_views;
    bool own = false;               // uses a slot of the current reservation
    std::vector<int> kept_sources;  // slot sets whose kept slots it reads
    bool flag_error = false;
    bool rejects() const { return !must.empty(); }
    bool allows(sam3d_status st) const {
        return must.empty() ? st == SAM3D_OK || st == SAM3D_ERR_COMPUTE
                            : std::find(must.begin(), must.end(), st) != must.end();
    }
};

std::string dname(bool up, size_t i, const char * field) {
    return std::string(up ? "uploads[" : "downloads[") + str(i) + "]." + field;
}

// `w`: the session whose host pointers count (slots of different sessions lie differently, so a
// download larger than its slot may overlap the next slot in one session and not in another).
Verdict judge(const Call & c, bool submit, unsigned flags, bool ticket_null, int w) {
    Verdict v;
    auto must = [&](sam3d_status st, std::string name = "") {
        v.must.push_back(st);
        if (!name.empty()) {
            v.names.emplace_back(st, std::move(name));
        }
    };
    const bool zero_copy = flags & SAM3D_SUBMIT_ZERO_COPY;
    const bool queued = flags & SAM3D_SUBMIT_QUEUED;
    const bool keep = flags & SAM3D_SUBMIT_KEEP_SLOTS;
    if (submit && ((flags & ~7u) != 0 || ((queued || keep) && ticket_null) || (keep && !zero_copy))) {
        must(SAM3D_ERR_INVALID_ARGUMENT);
        v.flag_error = true;
    }
    if ((c.null_ups && !c.ups.empty()) || (c.null_downs && !c.downs.empty())) {
        must(SAM3D_ERR_INVALID_ARGUMENT);
        return v;
    }
    struct Span {
        const void * key;
        uintptr_t begin, end;
        size_t index;
    };
    std::vector<Span> up_spans, down_spans;
    const Env & e = g_env[w];
    for (size_t k = 0; k < c.ups.size() + c.downs.size(); ++k) {
        const bool up = k < c.ups.size();
        const size_t i = up ? k : k - c.ups.size();
        const Desc & d = up ? c.ups[i] : c.downs[i];
        const ggml_tensor * t = e.tensors[d.tensor];
        const uint8_t * host = resolve(d.host, w);
        if (t == nullptr) {
            must(SAM3D_ERR_NULL_TENSOR, dname(up, i, "tensor"));
            continue;
        }
        bool valid = true;
        if (host == nullptr) {
            must(SAM3D_ERR_NULL_POINTER, dname(up, i, up ? "src" : "dst"));
            valid = false;
        }
        const ggml_backend_buffer_t buffer = t->view_src != nullptr ? t->view_src->buffer : t->buffer;
        if (t->data == nullptr || buffer == nullptr) {
            must(SAM3D_ERR_UNALLOCATED_TENSOR, dname(up, i, "tensor"));
            continue;
        }
        if (t->buffer == nullptr) {
            v.late_views.push_back(dname(up, i, "tensor"));
        }
        if (!ggml_is_contiguous(t)) {
            must(SAM3D_ERR_NOT_CONTIGUOUS, dname(up, i, "tensor"));
            valid = false;
        }
        const size_t nbytes = ggml_nbytes(t);
        if (d.size == 0 || d.offset > nbytes || d.size > nbytes - d.offset) {
            // The field that is wrong: the size when it is 0, the offset or the size alone past
            // the end, else both.
            const std::string field = d.size == 0          ? dname(up, i, "size")
                                      : d.offset > nbytes ? dname(up, i, "offset")
                                      : d.size > nbytes   ? dname(up, i, "size")
                                                          : dname(up, i, "offset") + " + " + dname(up, i, "size");
            must(SAM3D_ERR_EXTENT, field);
            valid = false;
        }
        if (valid) {
            if (up) {
                const uintptr_t b = reinterpret_cast<uintptr_t>(t->data) + d.offset;
                up_spans.push_back({buffer, b, b + d.size, i});
            } else {
                const uintptr_t b = reinterpret_cast<uintptr_t>(host);
                down_spans.push_back({nullptr, b, b + d.size, i});
            }
        }
    }
    auto overlap = [&](const std::vector<Span> & spans, sam3d_status st, const char * array) {
        for (size_t a = 0; a < spans.size(); ++a) {
            for (size_t b = a + 1; b < spans.size(); ++b) {
                if (spans[a].key == spans[b].key && spans[a].begin < spans[b].end && spans[b].begin < spans[a].end) {
                    const size_t lo = std::min(spans[a].index, spans[b].index);
                    const size_t hi = std::max(spans[a].index, spans[b].index);
                    must(st, std::string(array) + "[" + str(lo) + "]");
                    v.names.emplace_back(st, std::string(array) + "[" + str(hi) + "]");
                }
            }
        }
    };
    overlap(up_spans, SAM3D_ERR_OVERLAPPING_UPLOADS, "uploads");
    overlap(down_spans, SAM3D_ERR_OVERLAPPING_OUTPUTS, "downloads");
    if (submit && zero_copy) {
        // Every host pointer is a distinct slot of the current reservation, or an upload's
        // bytes lie inside a kept slot of a reported call.
        std::vector<bool> used(g_model.pending >= 0 ? g_model.sets[g_model.pending].sizes.size() : 0, false);
        for (size_t k = 0; k < c.ups.size() + c.downs.size(); ++k) {
            const bool up = k < c.ups.size();
            const Desc & d = up ? c.ups[k] : c.downs[k - c.ups.size()];
            if (d.host.kind == HostRef::Null) {
                continue;  // null_pointer above
            }
            bool ok = false;
            if (d.host.kind == HostRef::Slot && d.host.set == g_model.pending && d.host.at == 0) {
                const SlotSet & s = g_model.sets[d.host.set];
                ok = !used[d.host.slot] && d.size <= s.sizes[d.host.slot];
                used[d.host.slot] = true;
                v.own = true;
            } else if (up && d.host.kind == HostRef::Slot) {
                const SlotSet & s = g_model.sets[d.host.set];
                const size_t n = s.sizes[d.host.slot];
                bool reported = false;
                for (const TicketModel & t : g_model.tickets) {
                    reported = reported || (t.set == d.host.set && t.reported());
                }
                // A kept set belongs to a ticket (kept slots always do).
                ok = s.kept && reported && d.host.at < n && d.size <= n - d.host.at;
                if (ok) {
                    v.kept_sources.push_back(d.host.set);
                }
            }
            if (!ok) {
                must(SAM3D_ERR_INVALID_ARGUMENT);
            }
        }
    }
    return v;
}

// The seam entries of an accepted call against its descriptors and the counters it moved.
void check_accepted_call(int w, const Call & c, const WorldCall & m, bool zero_copy, bool fails, const Verdict & v,
                         const sam3d_counters & a, const sam3d_counters & b, size_t in_flight_before, const char * op) {
    const Env & e = g_env[w];
    size_t set = 0, get = 0, set_async = 0, get_async = 0, compute = 0, compute_async = 0;
    for (const Record & r : e.records) {
        switch (r.what) {
            case Record::Set:
                CHECK(set < m.ups.size() && r.tensor == m.ups[set].tensor && r.data == m.ups[set].src &&
                          r.offset == m.ups[set].offset && r.size == m.ups[set].size,
                      "the synchronous path is ggml_backend_tensor_set per upload, in order, from src", where(op, w));
                ++set;
                break;
            case Record::Get:
                CHECK(get < m.downs.size() && r.tensor == m.downs[get].tensor && r.data == m.downs[get].dst &&
                          r.offset == m.downs[get].offset && r.size == m.downs[get].size,
                      "the synchronous path is ggml_backend_tensor_get per download, in order, into dst", where(op, w));
                ++get;
                break;
            case Record::SetAsync: {
                CHECK(set_async < m.ups.size() && r.tensor == m.ups[set_async].tensor &&
                          r.offset == m.ups[set_async].offset && r.size == m.ups[set_async].size,
                      "the staged path uploads each descriptor once, in order", where(op, w));
                const bool in_arena = r.data >= e.arena.data() && r.data < e.arena.data() + kArena;
                CHECK(zero_copy ? r.data == m.ups[set_async].src : !in_arena,
                      "zero-copy uploads read the slot in place; copying ones read staging", where(op, w));
                ++set_async;
                break;
            }
            case Record::GetAsync: {
                CHECK(get_async < m.downs.size() && r.tensor == m.downs[get_async].tensor &&
                          r.offset == m.downs[get_async].offset && r.size == m.downs[get_async].size,
                      "the staged path downloads each descriptor once, in order", where(op, w));
                const bool in_arena = r.data >= e.arena.data() && r.data < e.arena.data() + kArena;
                CHECK(zero_copy ? r.data == m.downs[get_async].dst : !in_arena,
                      "zero-copy downloads write the slot in place; copying ones write staging", where(op, w));
                ++get_async;
                break;
            }
            case Record::Compute:
            case Record::ComputeAsync:
                CHECK(r.data == e.graph && c.graph, "a call computes its own graph, once", where(op, w));
                (r.what == Record::Compute ? compute : compute_async) += 1;
                break;
            case Record::Synchronize:
            case Record::Alloc:
                break;
        }
    }
    const size_t nu = c.ups.size();
    const size_t nd = c.downs.size();
    const bool async = set_async + get_async + compute_async > 0;
    const bool sync = set + get + compute > 0;
    CHECK(!(async && sync), "a call takes one path, synchronous or staged", where(op, w));
    CHECK(compute + compute_async == (c.graph ? 1u : 0u), "a call computes its graph once", where(op, w));
    CHECK((set == nu || set_async == nu) && set + set_async == nu, "every upload is made once", where(op, w));
    CHECK(fails ? get + get_async == 0 : (get == nd || get_async == nd) && get + get_async == nd,
          "every download is made once (none after a failed compute)", where(op, w));
    const bool batching = w != kOff && !c.synchronous;
    CHECK(batching || !async, "batching off and synchronous calls are the blocking GGML calls", where(op, w));

    // Counters: one count per descriptor for transfers and bytes.
    const uint64_t d_async_up = b.async_uploads - a.async_uploads, d_sync_up = b.sync_uploads - a.sync_uploads;
    const uint64_t d_async_down = b.async_downloads - a.async_downloads, d_sync_down = b.sync_downloads - a.sync_downloads;
    uint64_t up_bytes = 0, down_bytes = 0;
    for (const Desc & d : c.ups) {
        up_bytes += d.size;
    }
    for (const Desc & d : c.downs) {
        down_bytes += d.size;
    }
    const uint64_t d_up_bytes = b.bytes_uploaded - a.bytes_uploaded, d_down_bytes = b.bytes_downloaded - a.bytes_downloaded;
    const std::string what = where(op, w);
    CHECK(b.calls == a.calls + 1 && b.rejected_calls == a.rejected_calls, "an accepted call counts one call", what);
    if (!fails) {
        CHECK(d_async_up == set_async && d_sync_up == set && d_async_down == get_async && d_sync_down == get,
              "transfers are counted once per descriptor, on the path they took", what);
        CHECK(d_up_bytes == up_bytes && d_down_bytes == down_bytes, "bytes are counted per descriptor", what);
    } else {
        CHECK(d_async_up + d_sync_up + d_async_down + d_sync_down == 0 && d_up_bytes == 0 && d_down_bytes == 0,
              "a call failing after submission counts none of its transfers or bytes", what);
    }
    const uint64_t pinned = b.pinned_batches - a.pinned_batches;
    const uint64_t fell = fallbacks(b) - fallbacks(a);
    if (!batching) {
        CHECK(pinned == 0 && fell == 0, "batching off and synchronous calls count neither pinned batches nor fallbacks", what);
    } else if (nu + nd == 0) {
        CHECK(pinned == 0 && fell == 0,
              "a call with no transfers stages nothing: no pinned batch, no fallback (as without batching)", what);
    } else {
        CHECK(pinned + fell == 1, "a batching call with transfers counts one pinned batch or one fallback (failed or not)", what + ": pinned " + str(pinned) +
                  " + fallbacks " + str(fell));
        CHECK(pinned == 0 || async, "a pinned batch takes the staged path", what);
        CHECK(fell == 0 || !async, "a fallback takes the synchronous path", what);
        const uint64_t reason_ok[kWorlds] = {
            0,
            b.fallbacks[SAM3D_FALLBACK_OVERSIZED] - a.fallbacks[SAM3D_FALLBACK_OVERSIZED],
            b.fallbacks[SAM3D_FALLBACK_NO_ASYNC_CAPS] - a.fallbacks[SAM3D_FALLBACK_NO_ASYNC_CAPS],
            b.fallbacks[SAM3D_FALLBACK_OVERSIZED] - a.fallbacks[SAM3D_FALLBACK_OVERSIZED] +
                b.fallbacks[SAM3D_FALLBACK_PINNED_UNAVAILABLE] - a.fallbacks[SAM3D_FALLBACK_PINNED_UNAVAILABLE],
        };
        CHECK(reason_ok[w] == fell, "the fallback reason is the session's (no_caps: no_async_caps; unpinned: "
                                    "pinned_unavailable or oversized; staged: oversized)", what);
        bool kept_pinned = true;
        for (int s : v.kept_sources) {
            kept_pinned = kept_pinned && g_model.sets[s].pinned[w];
        }
        CHECK(w == kStaged || pinned == 0, "without pinned staging no call is a pinned batch", what);
        if (zero_copy && v.own) {
            const bool set_pinned = g_model.sets[g_model.pending].pinned[w];
            CHECK(pinned == (set_pinned ? 1u : 0u), "a zero-copy call is a pinned batch exactly when its reservation is pinned",
                  what);
        }
        if (zero_copy && !v.own && pinned == 1) {
            CHECK(kept_pinned,
                  "a zero-copy call reading kept slots is a pinned batch only if they are pinned staging", what);
        }
        if (!zero_copy && w == kStaged && in_flight_before == 0) {
            CHECK(pinned == 1, "a small copying call with the ring empty is a pinned batch", what);
        }
    }
    if (zero_copy) {
        CHECK(b.copy_ns == a.copy_ns, "zero-copy calls copy nothing (copy_ns unchanged)", what);
    }
    if (w == kOff) {
        CHECK(b.enqueue_ns == a.enqueue_ns && b.synchronize_ns == a.synchronize_ns && b.copy_ns == a.copy_ns &&
                  b.staging_allocations == a.staging_allocations,
              "batching off stages nothing", what);
    }
}

void check_message(sam3d_status st, const std::string & msg, const Verdict & v, int w, const char * op) {
    const std::string prefix = std::string(sam3d_status_name(st)) + ":";
    CHECK(msg.rfind(prefix, 0) == 0, "an error's message starts with its status name", where(op, w) + ": '" + msg + "'");
    bool named = false, any = false;
    for (const auto & n : v.names) {
        if (n.first == st) {
            any = true;
            named = named || msg.find(n.second) != std::string::npos;
        }
    }
    CHECK(!any || named, "an error's message names the descriptor (and field) that is wrong", where(op, w) + ": '" + msg + "'");
}

// ------------------------------------------------------------------------ operations

template <typename F>
sam3d_status in_world(int w, F && f) {
    g_in = &g_env[w];
    g_in->records.clear();
    const sam3d_status st = f(g_env[w]);
    g_in = nullptr;
    return st;
}

void check_same_status(const std::array<sam3d_status, kWorlds> & st, const std::array<std::string, kWorlds> & msg,
                       const char * op) {
    for (int w = 1; w < kWorlds; ++w) {
        CHECK(st[w] == st[kOff], "every session returns the batching-off status",
              where(op, w) + ": " + sam3d_status_name(st[w]) + " ('" + msg[w] + "') vs off's " + sam3d_status_name(st[kOff]) +
                  " ('" + msg[kOff] + "')");
    }
}

// After a reported failure: slots the call downloaded into hold unspecified bytes, tensors too.
void forget_failed_outputs(const std::vector<Region> & outputs) {
    for (const Region & r : outputs) {
        if (r.ref.kind == HostRef::Slot) {
            write_all(r.ref, std::min(r.size, shadow_of(g_model.sets[r.ref.set], r.ref.slot)), true);
        }
    }
    resync_tensors();
}

// Whether world w's session takes the staged path for a call it accepts (plan.cpp): batching on,
// not synchronous, no static fallback, and for a zero-copy call every slot set it names pinned.
// (Valid descriptors are far below the bound: never oversized.)
bool takes_staged_path(const Call & c, bool zero_copy, const Verdict & v, int w) {
    if ((w != kStaged && w != kUnpinned) || c.synchronous || c.ups.size() + c.downs.size() == 0) {
        return false;
    }
    if (zero_copy) {
        bool pinned = !v.own || g_model.sets[g_model.pending].pinned[w];
        for (int s : v.kept_sources) {
            pinned = pinned && g_model.sets[s].pinned[w];
        }
        return pinned;
    }
    return true;
}

// A call that names a view without a buffer of its own is refused (unallocated_tensor, naming
// the descriptor) by the sessions whose staged path it would take, and taken by the others. It
// then runs in the refusing sessions only (the others would diverge from them); true if so.
bool reject_late_views(const Call & c, bool submit, unsigned flags, bool ticket_null,
                       const std::array<Verdict, kWorlds> & verdicts, const Snapshot & before, const char * op) {
    const bool zero_copy = submit && (flags & SAM3D_SUBMIT_ZERO_COPY);
    std::vector<int> refusing;
    for (int w = 0; w < kWorlds; ++w) {
        const Verdict & v = verdicts[w];
        if (v.must.empty() && !v.late_views.empty() && takes_staged_path(c, zero_copy, v, w)) {
            refusing.push_back(w);
        }
    }
    if (refusing.empty()) {
        return false;
    }
    for (int w : refusing) {
        WorldCall m = materialize(c, w);
        sam3d_ticket ticket = 12345;
        const sam3d_status st = in_world(w, [&](Env & e) {
            return submit ? sam3d_session_submit(e.session, &m.call, flags, ticket_null ? nullptr : &ticket)
                          : sam3d_session_run(e.session, &m.call);
        });
        const std::string msg = sam3d_last_error();
        CHECK(st == SAM3D_ERR_UNALLOCATED_TENSOR, "the staged path refuses a view without a buffer of its own",
              where(op, w) + ": " + sam3d_status_name(st) + " ('" + msg + "')");
        CHECK(msg.find(verdicts[w].late_views[0]) != std::string::npos && msg.find("synchronous") != std::string::npos,
              "the refusal names the first such descriptor and what to do", where(op, w) + ": '" + msg + "'");
        CHECK(g_env[w].records.empty(), "a rejected request submits nothing (no seam entry)", where(op, w));
        sam3d_counters now{};
        now.struct_size = sizeof now;
        sam3d_session_counters(g_env[w].session, &now);
        CHECK(now.rejected_calls == before.counters[w].rejected_calls + 1, "a rejected call counts one rejected call",
              where(op, w));
        check_counters_only(before.counters[w], now, {&sam3d_counters::rejected_calls},
                            "a rejected call changes no counter but rejected_calls", where(op, w));
        if (submit && !ticket_null) {
            CHECK(ticket == 0 || ticket == 12345, "a rejected submit hands out no ticket", where(op, w));
        }
    }
    check_tensors_unchanged(before, op);
    check_host(before, {});
    check_state();
    return true;
}

void op_call(Input & in, bool submit) {
    unsigned flags = 0;
    bool ticket_null = false;
    if (submit) {
        flags = static_cast<unsigned>(in.pick(8));
        if (in.pick(16) == 0) {
            flags |= 8u << in.pick(4);  // an unknown bit
        }
        ticket_null = in.pick(8) == 0;
    }
    const bool zero_copy = flags & SAM3D_SUBMIT_ZERO_COPY;
    const bool queued = flags & SAM3D_SUBMIT_QUEUED;
    const bool keep = flags & SAM3D_SUBMIT_KEEP_SLOTS;
    const Call c = decode_call(in, submit && zero_copy);
    if (touches_in_flight(c)) {
        return;
    }
    std::array<Verdict, kWorlds> verdicts;
    for (int w = 0; w < kWorlds; ++w) {
        verdicts[w] = judge(c, submit, flags, ticket_null, w);
    }
    const Verdict & v = verdicts[kOff];  // what does not depend on the session (slots used, flags)
    // The caller writes the inputs of a zero-copy call into its slots.
    for (const Desc & d : c.ups) {
        if (d.host.kind == HostRef::Slot && d.host.set == g_model.pending) {
            write_all(d.host, shadow_of(g_model.sets[d.host.set], d.host.slot) - d.host.at, false);
        }
    }
    const char * op = submit ? "submit" : "run";
    const bool armed = g_model.armed;
    g_model.armed = false;
    const Snapshot before = snapshot();
    if (reject_late_views(c, submit, flags, ticket_null, verdicts, before, op)) {
        return;
    }
    std::array<sam3d_status, kWorlds> st{};
    std::array<std::string, kWorlds> msg;
    std::array<sam3d_ticket, kWorlds> ticket{};
    std::array<WorldCall, kWorlds> calls;
    for (int w = 0; w < kWorlds; ++w) {
        calls[w] = materialize(c, w);
        g_env[w].fail_compute = armed;
        ticket[w] = 12345;
        st[w] = in_world(w, [&](Env & e) {
            return submit ? sam3d_session_submit(e.session, &calls[w].call, flags, ticket_null ? nullptr : &ticket[w])
                          : sam3d_session_run(e.session, &calls[w].call);
        });
        msg[w] = sam3d_last_error();
        g_env[w].fail_compute = false;
    }
    for (int w = 0; w < kWorlds; ++w) {
        const Verdict & vw = verdicts[w];
        CHECK(vw.allows(st[w]), "a request is rejected exactly when the contract says, with one of the errors that apply",
              where(op, w) + ": got " + sam3d_status_name(st[w]) + " ('" + msg[w] + "'), " +
                  (vw.rejects() ? "expected one of the errors that apply (first: " + std::string(sam3d_status_name(vw.must[0])) + ")"
                                : std::string("expected it to be accepted")));
    }
    const sam3d_status s0 = st[kOff];
    const bool accepted = s0 == SAM3D_OK || s0 == SAM3D_ERR_COMPUTE;
    if (!accepted) {
        for (int w = 0; w < kWorlds; ++w) {
            CHECK(st[w] != SAM3D_OK && st[w] != SAM3D_ERR_COMPUTE, "a request batching off rejects is rejected by every session",
                  where(op, w) + ": " + sam3d_status_name(st[w]));
            check_message(st[w], msg[w], verdicts[w], w, op);
            CHECK(g_env[w].records.empty(), "a rejected request submits nothing (no seam entry)", where(op, w));
            sam3d_counters now{};
            now.struct_size = sizeof now;
            sam3d_session_counters(g_env[w].session, &now);
            const uint64_t d = now.rejected_calls - before.counters[w].rejected_calls;
            CHECK(d == 1 || (v.flag_error && d == 0), "a rejected call counts one rejected call", where(op, w));
            check_counters_only(before.counters[w], now, {&sam3d_counters::rejected_calls},
                                "a rejected call changes no counter but rejected_calls", where(op, w));
            if (submit && !ticket_null) {
                CHECK(ticket[w] == 0 || ticket[w] == 12345, "a rejected submit hands out no ticket", where(op, w));
            }
        }
        check_tensors_unchanged(before, op);
        check_host(before, {});
        check_state();
        return;
    }
    check_same_status(st, msg, op);
    const bool fails = armed && c.graph;
    CHECK(s0 == (fails && !queued ? SAM3D_ERR_COMPUTE : SAM3D_OK),
          "an accepted call returns ok, or compute when its graph fails (queued: at its wait)",
          std::string(op) + ": " + sam3d_status_name(s0));
    for (int w = 0; w < kWorlds; ++w) {
        sam3d_counters now{};
        now.struct_size = sizeof now;
        sam3d_session_counters(g_env[w].session, &now);
        check_accepted_call(w, c, calls[w], submit && zero_copy, fails, v, before.counters[w], now, before.in_flight[w], op);
    }
    // Outputs: what the call may write now.
    std::vector<Region> outputs;
    for (const Desc & d : c.downs) {
        outputs.push_back({d.host, d.size});
    }
    const bool tracked = submit && (queued || (zero_copy && keep && !fails));
    for (int w = 0; w < kWorlds; ++w) {
        if (submit && !ticket_null) {
            CHECK(tracked ? ticket[w] != 0 : ticket[w] == 0,
                  "submit hands out a ticket for queued and kept calls, else 0", where(op, w) + ": " + str(ticket[w]));
        }
    }
    // The model.
    int set = -1;
    if (submit && zero_copy && v.own) {
        set = g_model.pending;
        g_model.pending = -1;
        SlotSet & s = g_model.sets[set];
        s.state = queued ? SlotSet::InFlight : SlotSet::Reported;
        s.kept = keep && (queued || !fails);
    }
    if (tracked) {
        TicketModel t;
        t.id = ticket;
        t.queued = queued;
        t.zero_copy = zero_copy;
        t.fails = fails;
        t.kept = keep;
        t.set = set;
        t.outputs = outputs;
        g_model.tickets.push_back(t);
    }
    if (fails) {
        g_model.failed_hi += 1;
        g_model.failed_lo += queued ? 0 : 1;
    }
    // A failed call writes no dst; a failed zero-copy call's output slots are unspecified.
    std::vector<Region> allowed;
    if (!fails || (zero_copy && submit)) {
        allowed = outputs;
    }
    check_host(before, allowed);
    if (fails && !queued) {
        forget_failed_outputs(zero_copy && submit ? outputs : std::vector<Region>{});
    }
    check_tensors_equal();
    check_state();
}

// A ticket from the input: one the model knows (any state), 0, or one never handed out.
int decode_ticket(Input & in, std::array<sam3d_ticket, kWorlds> & ids) {
    const size_t k = in.pick(10);
    if (k < 8 && !g_model.tickets.empty()) {
        const int t = static_cast<int>(k % g_model.tickets.size());
        ids = g_model.tickets[t].id;
        return t;
    }
    ids.fill(k == 8 ? 0 : 1000000 + k);
    return -1;
}

void do_wait(int t, const std::array<sam3d_ticket, kWorlds> & ids) {
    const bool valid = t >= 0 && g_model.tickets[t].in_flight();
    const Snapshot before = snapshot();
    std::array<sam3d_status, kWorlds> st{};
    std::array<std::string, kWorlds> msg;
    for (int w = 0; w < kWorlds; ++w) {
        st[w] = in_world(w, [&](Env & e) { return sam3d_session_wait(e.session, ids[w]); });
        msg[w] = sam3d_last_error();
    }
    check_same_status(st, msg, "wait");
    TicketModel * tm = valid ? &g_model.tickets[t] : nullptr;
    const sam3d_status expect = !valid ? SAM3D_ERR_INVALID_ARGUMENT : tm->fails ? SAM3D_ERR_COMPUTE : SAM3D_OK;
    CHECK(st[kOff] == expect, "wait returns the queued call's status, once; other tickets are invalid_argument",
          std::string("wait: ") + sam3d_status_name(st[kOff]) + " ('" + msg[kOff] + "'), expected " + sam3d_status_name(expect));
    for (int w = 0; w < kWorlds; ++w) {
        if (st[w] != SAM3D_OK) {
            CHECK(msg[w].rfind(std::string(sam3d_status_name(st[w])) + ":", 0) == 0,
                  "an error's message starts with its status name", where("wait", w) + ": '" + msg[w] + "'");
        }
        check_records_only(w, {Record::Synchronize}, "a wait only synchronizes", "wait");
        sam3d_counters now{};
        now.struct_size = sizeof now;
        sam3d_session_counters(g_env[w].session, &now);
        const bool zero_copy = tm != nullptr && tm->zero_copy;
        if (zero_copy || w == kOff || !valid) {
            check_counters_only(before.counters[w], now, {&sam3d_counters::synchronize_ns}, "a wait changes only the timing counters",
                                where("wait", w));
        } else {
            check_counters_only(before.counters[w], now, {&sam3d_counters::synchronize_ns, &sam3d_counters::copy_ns},
                                "a wait changes only the timing counters", where("wait", w));
        }
        if (w == kOff || !valid) {
            CHECK(now.synchronize_ns == before.counters[w].synchronize_ns, "nothing to wait for: no synchronize",
                  where("wait", w));
        }
    }
    if (!valid) {
        check_tensors_unchanged(before, "wait");
        check_host(before, {});
        check_state();
        return;
    }
    tm->waited = true;
    if (tm->set >= 0) {
        g_model.sets[tm->set].state = SlotSet::Reported;
    }
    if (tm->fails) {
        g_model.failed_lo += tm->lower_bound_counts ? 1 : 0;
        if (tm->kept) {
            // Released after its wait whatever its status (transfer.h).
            tm->kept = false;
            if (tm->set >= 0) {
                g_model.sets[tm->set].kept = false;
            }
        }
    }
    const std::vector<Region> outputs = tm->outputs;
    const bool fails = tm->fails;
    check_host(before, fails && !tm->zero_copy ? std::vector<Region>{} : outputs);
    if (fails) {
        forget_failed_outputs(tm->zero_copy ? outputs : std::vector<Region>{});
    }
    check_tensors_equal();
    check_state();
}

void do_release(int t, const std::array<sam3d_ticket, kWorlds> & ids) {
    const bool valid = t >= 0 && g_model.tickets[t].kept && g_model.tickets[t].reported();
    const Snapshot before = snapshot();
    std::array<sam3d_status, kWorlds> st{};
    std::array<std::string, kWorlds> msg;
    for (int w = 0; w < kWorlds; ++w) {
        st[w] = in_world(w, [&](Env & e) { return sam3d_session_release(e.session, ids[w]); });
        msg[w] = sam3d_last_error();
    }
    check_same_status(st, msg, "release");
    CHECK(st[kOff] == (valid ? SAM3D_OK : SAM3D_ERR_INVALID_ARGUMENT),
          "release takes a reported kept call's ticket once; others are invalid_argument",
          std::string("release: ") + sam3d_status_name(st[kOff]) + " ('" + msg[kOff] + "')");
    for (int w = 0; w < kWorlds; ++w) {
        check_records_only(w, {}, "a release enters no GGML function", "release");
        sam3d_counters now{};
        now.struct_size = sizeof now;
        sam3d_session_counters(g_env[w].session, &now);
        check_counters_only(before.counters[w], now, {}, "a release changes no counter", where("release", w));
    }
    if (valid) {
        g_model.tickets[t].kept = false;
        if (g_model.tickets[t].set >= 0) {
            g_model.sets[g_model.tickets[t].set].kept = false;
        }
    }
    check_tensors_unchanged(before, "release");
    check_host(before, {});
    check_state();
}

constexpr size_t kMiB = size_t{1} << 20;
// Few of them large: every world but staged allocates them on the heap, where ASan poisons the
// shadow of each fresh block (four fifths of this target's time went there with one in six large).
const size_t kSlotSizes[] = {1,    2,    7,    16,   31,    32,    33,   48,   63,   64,  65,  96,
                             100,  128,  200,  256,  512,   1000,  4096, 8192, kMiB, 31 * kMiB,
                             SAM3D_STAGING_BOUND_BYTES, SAM3D_STAGING_BOUND_BYTES + 1, 0, SIZE_MAX, SIZE_MAX - 31,
                             SIZE_MAX / 2 + 1};

// sum of align_up(size, a) over sizes (plus `extra`); false when it does not fit in size_t.
bool aligned_sum(const std::vector<size_t> & sizes, size_t a, size_t extra, size_t * out) {
    size_t total = extra;
    for (size_t n : sizes) {
        if (n > SIZE_MAX - (a - 1)) {
            return false;
        }
        const size_t al = (n + a - 1) / a * a;
        if (total > SIZE_MAX - al) {
            return false;
        }
        total += al;
    }
    *out = total;
    return true;
}

void do_reserve(const std::vector<size_t> & sizes, bool null_slots) {
    size_t alignment = std::max<size_t>(sam3d_session_staging_alignment(g_env[kStaged].session), 1);
    size_t need = 0, heap = 0;
    const bool fits = aligned_sum(sizes, alignment, 0, &need);
    const bool heap_fits = aligned_sum(sizes, 64, 64, &heap);
    if (heap_fits && heap > 64 * kMiB) {
        return;  // this much host memory is not what a fuzz input is for
    }
    const bool zero = std::find(sizes.begin(), sizes.end(), size_t{0}) != sizes.end();
    const bool invalid = sizes.empty() || null_slots || zero || !fits;
    const Snapshot before = snapshot();
    std::array<sam3d_status, kWorlds> st{};
    std::array<std::string, kWorlds> msg;
    std::array<std::vector<void *>, kWorlds> slots;
    for (int w = 0; w < kWorlds; ++w) {
        slots[w].assign(sizes.size(), nullptr);
        std::vector<sam3d_slot_request> req;
        for (size_t n : sizes) {
            req.push_back({n});
        }
        st[w] = in_world(w, [&](Env & e) {
            return sam3d_session_reserve(e.session, req.empty() ? nullptr : req.data(), req.size(),
                                         null_slots ? nullptr : slots[w].data());
        });
        msg[w] = sam3d_last_error();
    }
    check_same_status(st, msg, "reserve");
    CHECK(invalid ? st[kOff] == SAM3D_ERR_INVALID_ARGUMENT : st[kOff] == SAM3D_OK || (!heap_fits && st[kOff] == SAM3D_ERR_INVALID_ARGUMENT),
          "reserve refuses n == 0, NULL arrays, a size of 0 and sizes that overflow, and takes the rest",
          std::string("reserve: ") + sam3d_status_name(st[kOff]) + " ('" + msg[kOff] + "')");
    for (int w = 0; w < kWorlds; ++w) {
        sam3d_counters now{};
        now.struct_size = sizeof now;
        sam3d_session_counters(g_env[w].session, &now);
        if (st[w] != SAM3D_OK) {
            check_records_only(w, {}, "a refused reservation enters no GGML function", "reserve");
            check_counters_only(before.counters[w], now, {}, "a refused reservation changes no counter", where("reserve", w));
        } else {
            check_records_only(w, {Record::Alloc}, "a reservation at most allocates staging", "reserve");
            check_counters_only(before.counters[w], now, {&sam3d_counters::staging_bytes, &sam3d_counters::staging_allocations},
                                "a reservation changes only the staging counters", where("reserve", w));
        }
    }
    if (st[kOff] != SAM3D_OK) {
        check_tensors_unchanged(before, "reserve");
        check_host(before, {});
        check_state();
        return;
    }
    // The slot lifetime: the previous reservation is dropped, reported calls' slots (kept ones
    // once released) are given back.
    for (SlotSet & s : g_model.sets) {
        if (s.state == SlotSet::Pending || (s.state == SlotSet::Reported && !s.kept)) {
            s.state = SlotSet::Expired;
        }
    }
    SlotSet s;
    s.sizes = sizes;
    for (int w = 0; w < kWorlds; ++w) {
        const bool pinned = sam3d_session_reservation_pinned(g_env[w].session);
        s.pinned[w] = pinned;
        CHECK(w == kStaged || !pinned, "only a session with pinned staging hands out pinned slots", where("reserve", w));
        if (w == kStaged && before.in_flight[w] == 0 && need <= SAM3D_STAGING_BOUND_BYTES) {
            CHECK(pinned, "a reservation within the bound, with the ring empty, is pinned staging", where("reserve", w));
        }
        const size_t al = std::max<size_t>(sam3d_session_staging_alignment(g_env[w].session), 1);
        for (size_t j = 0; j < sizes.size(); ++j) {
            uint8_t * p = static_cast<uint8_t *>(slots[w][j]);
            CHECK(p != nullptr && reinterpret_cast<uintptr_t>(p) % al == 0, "slots are aligned to the staging alignment",
                  where("reserve", w) + " slot " + str(j));
            s.ptr[w].push_back(p);
        }
        // No slot overlaps another slot of this set or of a live set (kept, in flight).
        for (size_t j = 0; j < sizes.size(); ++j) {
            const uintptr_t b = reinterpret_cast<uintptr_t>(s.ptr[w][j]);
            for (size_t k = j + 1; k < sizes.size(); ++k) {
                const uintptr_t c = reinterpret_cast<uintptr_t>(s.ptr[w][k]);
                CHECK(b + sizes[j] <= c || c + sizes[k] <= b, "the slots of a reservation are disjoint", where("reserve", w));
            }
            for (const SlotSet & o : g_model.sets) {
                if (o.state == SlotSet::Expired) {
                    continue;
                }
                for (size_t k = 0; k < o.sizes.size(); ++k) {
                    const uintptr_t c = reinterpret_cast<uintptr_t>(o.ptr[w][k]);
                    CHECK(b + sizes[j] <= c || c + o.sizes[k] <= b,
                          "a reservation never reuses slots still in use (in flight or kept)", where("reserve", w));
                }
            }
        }
    }
    g_model.sets.push_back(s);
    g_model.pending = static_cast<int>(g_model.sets.size()) - 1;
    for (size_t j = 0; j < sizes.size(); ++j) {  // the caller's canary in its new slots
        write_all({HostRef::Slot, 0, g_model.pending, j}, shadow_of(g_model.sets[g_model.pending], j), true);
    }
    check_tensors_unchanged(before, "reserve");
    check_host(before, {});
    check_state();
}

void op_reserve(Input & in) {
    const size_t n = in.pick(5);
    const bool null_slots = in.pick(16) == 0;
    std::vector<size_t> sizes;
    for (size_t i = 0; i < n; ++i) {
        sizes.push_back(kSlotSizes[in.pick(std::size(kSlotSizes))]);
    }
    do_reserve(sizes, null_slots);
}

void op_scribble(Input & in) {
    const size_t at = 3 * in.pick(256);
    const size_t n = std::min<size_t>(1 + in.pick(128), kArena - at);
    for (const Region & r : in_flight_outputs()) {
        if (r.ref.kind == HostRef::Arena && at < r.ref.at + r.size && r.ref.at < at + n) {
            return;  // a queued call's dst is not the caller's until its wait
        }
    }
    write_all({HostRef::Arena, at, -1, 0}, n, false);
}

void op_reset_counters() {
    for (int w = 0; w < kWorlds; ++w) {
        sam3d_counters a{}, b{};
        a.struct_size = sizeof a;
        sam3d_session_counters(g_env[w].session, &a);
        sam3d_session_reset_counters(g_env[w].session);
        b.struct_size = sizeof b;
        sam3d_session_counters(g_env[w].session, &b);
        sam3d_counters zero{};
        zero.struct_size = sizeof zero;
        zero.staging_bytes = a.staging_bytes;
        CHECK(std::memcmp(&b, &zero, sizeof(b)) == 0, "reset zeroes every counter but staging_bytes", where("reset", w));
    }
    g_model.failed_lo = 0;
    g_model.failed_hi = 0;
    for (TicketModel & t : g_model.tickets) {
        if (t.in_flight() && t.fails) {
            t.lower_bound_counts = false;  // counted before the reset, or at its wait
            g_model.failed_hi += 1;
        }
    }
}

// Every ticket waited, every kept call released, one more reservation: nothing is outstanding
// and the ring holds only that reservation.
void drain() {
    for (size_t t = 0; t < g_model.tickets.size(); ++t) {
        if (g_model.tickets[t].in_flight()) {
            do_wait(static_cast<int>(t), g_model.tickets[t].id);
        }
    }
    for (size_t t = 0; t < g_model.tickets.size(); ++t) {
        if (g_model.tickets[t].kept) {
            do_release(static_cast<int>(t), g_model.tickets[t].id);
        }
    }
    do_reserve({1}, false);
    for (int w = 0; w < kWorlds; ++w) {
        const size_t flight = sam3d_session_staging_in_flight(g_env[w].session);
        const size_t al = std::max<size_t>(sam3d_session_staging_alignment(g_env[w].session), 1);
        const size_t expect = g_model.sets[g_model.pending].pinned[w] ? al : 0;
        CHECK(flight == expect, "once every call is waited and released, the ring holds only the current reservation",
              where("drain", w) + ": " + str(flight) + " bytes in flight, expected " + str(expect));
        CHECK(sam3d_session_outstanding(g_env[w].session) == 0, "once every ticket is waited, nothing is outstanding",
              where("drain", w));
    }
}

void run_input(Input & in) {
    g_ordinary = in.pick(2) == 1;
    const uint32_t seed = static_cast<uint32_t>(in.pick(256));
    g_model = Model{};
    for (int w = 0; w < kWorlds; ++w) {
        Env & e = g_env[w];
        ggml_backend_buffer_clear(e.buffer, 0);
        for (int t : {kA, kB, kOut, kRaw, kMat}) {
            fill(static_cast<uint8_t *>(e.tensors[t]->data), ggml_nbytes(e.tensors[t]), seed + static_cast<uint32_t>(t));
        }
        fill(e.arena.data(), kArena, seed + 100);
        e.session = open_session(e);
    }
    for (size_t n = 0; n < kMaxOps && in.more(); ++n) {
        switch (in.pick(8)) {
            case 0: op_call(in, false); break;
            case 1:
            case 2: op_call(in, true); break;
            case 3: op_reserve(in); break;
            case 4: {
                std::array<sam3d_ticket, kWorlds> ids{};
                const int t = decode_ticket(in, ids);
                do_wait(t, ids);
                break;
            }
            case 5: {
                std::array<sam3d_ticket, kWorlds> ids{};
                const int t = decode_ticket(in, ids);
                do_release(t, ids);
                break;
            }
            case 6:
                if (in.pick(2) == 0) {
                    g_model.armed = true;
                } else {
                    op_reset_counters();
                }
                break;
            case 7: op_scribble(in); break;
        }
    }
    drain();
    check_tensors_equal();
    for (int w = 0; w < kWorlds; ++w) {
        in_world(w, [](Env & e) {
            sam3d_session_free(e.session);
            return SAM3D_OK;
        });
        check_records_only(w, {Record::Synchronize}, "freeing a session only completes its work", "free");
        g_env[w].session = nullptr;
    }
    // Everything this input allocated is freed before it ends: libFuzzer then sees as many frees
    // as allocations and skips its per-input leak check.
    g_model = Model{};
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    g_backend = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(g_backend, 1);  // no worker threads per graph
    g_staging_memory.assign(SAM3D_STAGING_BOUND_BYTES, 0);
    fake_async::cpu_mapped_buffer_type();  // read here, once, rather than inside the first input
    for (int w = 0; w < kWorlds; ++w) {
        build_world(g_env[w], static_cast<World>(w));
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    Input in(data, size);
    run_input(in);
    return 0;
}
