// The fake GGML and the five worlds (worlds.h says what they are).
#include "worlds.h"

#include <cstring>
#include <initializer_list>
#include <string>

#include "ggml-alloc.h"
#include "ggml-cpu.h"
#include "invariant.h"
#include "sam3d_deferred.h"
#include "sam3d_fake_async.h"

namespace fuzz {

std::array<Env, kWorlds> g_env;

namespace {

ggml_backend_t g_backend = nullptr;
Env * g_in = nullptr;          // the world whose session is being called
bool g_ordinary = false;       // unpinned: the allocation returns ordinary memory (else NULL)
bool g_duplex = false;         // deferred: the session is a duplex one (rule 11)
alignas(64) uint8_t g_ordinary_memory[1 << 20];
// Staged: staging memory is one block for the process, handed out as a CPU buffer at its end
// (ASan still sees an overrun past it), rather than 32 MiB allocated and poisoned per input.
std::vector<uint8_t> g_staging_memory;
std::vector<uint8_t> g_deferred_memory;  // the deferred world's, alike

// The seam (only here): every entry records itself in the calling world; transfer and compute
// entries forward to GGML.

Env & caller() {
    CHECK(g_in != nullptr, "the core enters GGML only inside a sam3d call", "a seam entry ran outside any call");
    return *g_in;
}

void record(Record::What what, const ggml_tensor * t, const void * data, size_t offset, size_t size) {
    Env & e = caller();
    Record r{what, t, data, offset, size};
    if (t != nullptr) {
        const ggml_backend_buffer_t b = t->view_src != nullptr ? t->view_src->buffer : t->buffer;
        CHECK(b == e.buffer, "a session transfers only the tensors of its own call",
              std::string(kWorldName[e.world]) + ": tensor '" + t->name + "' is another world's");
        r.device = reinterpret_cast<uintptr_t>(t->data) + offset;
        r.buffer = b;
        r.own_buffer = t->buffer == b;
        r.view = t->view_src != nullptr;
        r.contiguous = ggml_is_contiguous(t);
        r.type = t->type;
        r.ne = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        r.nbytes = ggml_nbytes(t);
    }
    e.records.push_back(r);
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
// Deferred: transfers and computes go to the deferred queue (sam3d_deferred.h), run at the
// core's synchronizes and event synchronizes; the blocking set first runs the transfer queue's
// ready uploads, as a device with a transfer queue of its own may.
void seam_set_deferred(ggml_tensor * t, const void * d, size_t o, size_t n) {
    record(Record::Set, t, d, o, n);
    deferred::queue_set_blocking(nullptr, t, d, o, n);
}
void seam_set_async_deferred(ggml_backend_t b, ggml_tensor * t, const void * d, size_t o, size_t n) {
    record(Record::SetAsync, t, d, o, n);
    deferred::queue_set_async(b, t, d, o, n);
}
void seam_get_async_deferred(ggml_backend_t b, const ggml_tensor * t, void * d, size_t o, size_t n) {
    record(Record::GetAsync, t, d, o, n);
    deferred::queue_get_async(b, t, d, o, n);
}
ggml_status seam_compute_async_deferred(ggml_backend_t b, ggml_cgraph * g) {
    record(Record::ComputeAsync, nullptr, g, 0, 0);
    if (take_failure()) {
        return GGML_STATUS_FAILED;
    }
    deferred::queue_compute(b, g);
    return GGML_STATUS_SUCCESS;
}
void seam_synchronize_deferred(ggml_backend_t b) {
    record(Record::Synchronize, nullptr, nullptr, 0, 0);
    deferred::queue_synchronize(b);
}
void seam_event_record(ggml_backend_event_t e, ggml_backend_t b) {
    caller();
    deferred::queue_event_record(e, b);
}
void seam_event_synchronize(ggml_backend_event_t e) {
    caller();
    deferred::queue_event_synchronize(e);
}
void seam_event_wait(ggml_backend_t b, ggml_backend_event_t e) {
    caller();
    deferred::queue_event_wait(b, e);
}
ggml_backend_buffer_t seam_alloc_deferred(ggml_backend_buffer_type_t, size_t size) {
    record(Record::Alloc, nullptr, nullptr, 0, size);
    if (size > g_deferred_memory.size()) {
        return nullptr;
    }
    const size_t at = (g_deferred_memory.size() - size) / 64 * 64;
    return ggml_backend_cpu_buffer_from_ptr(g_deferred_memory.data() + at, size);
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
    s.buft_alloc_buffer = w == kStaged      ? seam_alloc_staged
                          : w == kUnpinned  ? seam_alloc_unpinned
                          : w == kDeferred  ? seam_alloc_deferred
                                            : seam_alloc_real;
    if (staging_world(w)) {
        fake_async::install(s);  // unpinned: the host buffer type is GGML's CPU buffer type
        if (pinned_world(w)) {
            s.dev_host_buffer_type = seam_host_buft_staged;
        }
    }
    if (w == kDeferred) {
        s.dev_get_props = deferred::props_with_events;
        s.tensor_set = seam_set_deferred;
        s.tensor_set_async = seam_set_async_deferred;
        s.tensor_get_async = seam_get_async_deferred;
        s.graph_compute_async = seam_compute_async_deferred;
        s.synchronize = seam_synchronize_deferred;
        s.event_new = deferred::event_new;
        s.event_free = deferred::event_free;
        s.event_record = seam_event_record;
        s.event_synchronize = seam_event_synchronize;
        s.event_wait = seam_event_wait;
        s.dev_init = deferred::dev_init;  // duplex's second backend: the deferred seam's queue 1
        s.backend_free = deferred::backend_free;
    }
    return s;
}

sam3d_session * open_session(Env & e) {
    e.seam = seam_for(e.world);
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = e.world == kOff ? SAM3D_BATCHING_OFF : SAM3D_BATCHING_ON;
    // The staged and deferred worlds copy in pieces of 64 bytes (docs/contract.md, rule 2), so
    // the decoder's small calls are split as the profile's megabytes are by the default piece;
    // the unpinned world keeps the default (one piece each).
    o.staging_piece_bytes = pinned_world(e.world) ? 64 : 0;
    // The deferred world is a duplex session for half the inputs (docs/contract.md, rule 11): its
    // queued calls' downloads run on the deferred seam's second queue, ordered by the core's events
    // alone; for the other half its queued calls use events on one backend.
    o.duplex = e.world == kDeferred && g_duplex ? SAM3D_DUPLEX_ON : SAM3D_DUPLEX_OFF;
    sam3d_session * s = nullptr;
    const sam3d_status st = sam3d_testing_session_create(g_backend, &o, &e.seam, &s);
    CHECK(st == SAM3D_OK, "a session is created", sam3d_last_error());
    CHECK(sam3d_session_batching(s) == (e.world != kOff) &&
              sam3d_session_static_fallback(s) ==
                  (staging_world(e.world) ? SAM3D_FALLBACK_COUNT : SAM3D_FALLBACK_NO_ASYNC_CAPS),
          "a session batches as asked, with the static fallback its caps give", kWorldName[e.world]);
    CHECK(sam3d_session_duplex(s) == (o.duplex == SAM3D_DUPLEX_ON),
          "only a duplex deferred world's session has a second backend", kWorldName[e.world]);
    return s;
}

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

}  // namespace

void enter(int w) {
    g_in = &g_env[w];
    g_in->records.clear();
}

void leave() { g_in = nullptr; }

NO_COVERAGE void fill(uint8_t * p, size_t n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = static_cast<uint8_t>(x >> 8);
    }
}

bool deferred_pending() { return deferred::pending() != 0; }

NO_COVERAGE void resync_tensors() {
    for (int w = 1; w < kWorlds; ++w) {
        if (w == kDeferred && deferred_pending()) {
            continue;
        }
        std::memcpy(buffer_base(g_env[w]), buffer_base(g_env[kOff]), buffer_size(g_env[kOff]));
    }
}

void init_worlds() {
    g_backend = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(g_backend, 1);  // no worker threads per graph
    g_staging_memory.assign(SAM3D_STAGING_BOUND_BYTES, 0);
    g_deferred_memory.assign(SAM3D_STAGING_BOUND_BYTES, 0);
    fake_async::cpu_mapped_buffer_type();  // read here, once, rather than inside the first input
    for (int w = 0; w < kWorlds; ++w) {
        build_world(g_env[w], static_cast<World>(w));
    }
}

void begin_input(bool ordinary, uint32_t seed) {
    g_ordinary = ordinary;
    deferred::reset();
    deferred::g_transfer_queue = true;
    // The seed's low bits also pick whether the deferred world is a duplex session (bit 1) and the
    // order its two queues take where no event orders them (bit 0; sam3d_deferred.h,
    // g_second_first): a dropped wait before a read or before a write.
    g_duplex = (seed & 2) != 0;
    deferred::g_second_first = (seed & 1) != 0;
    for (int w = 0; w < kWorlds; ++w) {
        Env & e = g_env[w];
        ggml_backend_buffer_clear(e.buffer, 0);
        for (int t : {kA, kB, kOut, kRaw, kMat}) {
            fill(static_cast<uint8_t *>(e.tensors[t]->data), ggml_nbytes(e.tensors[t]), seed + static_cast<uint32_t>(t));
        }
        fill(e.arena.data(), kArena, seed + 100);
        e.session = open_session(e);
    }
}

}  // namespace fuzz
