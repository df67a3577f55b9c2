// The session: creation (rule 6: capabilities read once, the backend facts), what it frees,
// the extensible structs of the C API, and the thread's last error.
#include "session.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

namespace sam3d {

namespace {
thread_local std::string g_last_error;
}  // namespace

sam3d_status fail(sam3d_status status, const std::string & message) {
    g_last_error = std::string(sam3d_status_name(status)) + ": " + message;
    return status;
}
void clear_error() { g_last_error.clear(); }
const char * last_error() { return g_last_error.c_str(); }

uint64_t now_ns() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now().time_since_epoch()).count());
}

sam3d_status read_extensible(const void * in, size_t known, void * out, const char * name) {
    size_t given = 0;
    std::memcpy(&given, in, sizeof given);
    if (given < sizeof(size_t)) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, std::string(name) + ".struct_size is " + std::to_string(given) +
                                                    ": start from sam3d_session_default_options(), which sets it");
    }
    const auto * bytes = static_cast<const uint8_t *>(in);
    for (size_t i = known; i < given; ++i) {
        if (bytes[i] != 0) {
            return fail(SAM3D_ERR_INVALID_ARGUMENT,
                        std::string(name) + ": byte " + std::to_string(i) + " of its " + std::to_string(given) +
                            " is set, past the " + std::to_string(known) + " bytes this sam3d core " +
                            SAM3D_CORE_VERSION + " knows: link the core whose header the caller was built with, "
                                                 "or leave the newer fields at their defaults");
        }
    }
    std::memcpy(out, in, std::min(given, known));
    return SAM3D_OK;
}

sam3d_status write_extensible(const void * value, size_t known, void * out, const char * name) {
    size_t given = 0;
    std::memcpy(&given, out, sizeof given);
    if (given < sizeof(size_t)) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, std::string(name) + ".struct_size is " + std::to_string(given) +
                                                    ": set it to sizeof(sam3d_" + name + ")");
    }
    auto * bytes = static_cast<uint8_t *>(out);
    const size_t n = std::min(given, known);
    std::memcpy(bytes + sizeof given, static_cast<const uint8_t *>(value) + sizeof given, n - sizeof given);
    if (given > known) {
        std::memset(bytes + known, 0, given - known);
    }
    return SAM3D_OK;
}

Ggml::Ggml(const sam3d_ggml_seam & s)
    : tensor_set(s.tensor_set ? s.tensor_set : ggml_backend_tensor_set),
      tensor_get(s.tensor_get ? s.tensor_get : ggml_backend_tensor_get),
      tensor_set_async(s.tensor_set_async ? s.tensor_set_async : ggml_backend_tensor_set_async),
      tensor_get_async(s.tensor_get_async ? s.tensor_get_async : ggml_backend_tensor_get_async),
      graph_compute(s.graph_compute ? s.graph_compute : ggml_backend_graph_compute),
      graph_compute_async(s.graph_compute_async ? s.graph_compute_async : ggml_backend_graph_compute_async),
      synchronize(s.synchronize ? s.synchronize : ggml_backend_synchronize),
      dev_get_props(s.dev_get_props ? s.dev_get_props : ggml_backend_dev_get_props),
      dev_host_buffer_type(s.dev_host_buffer_type ? s.dev_host_buffer_type : ggml_backend_dev_host_buffer_type),
      buft_get_device(s.buft_get_device ? s.buft_get_device : ggml_backend_buft_get_device),
      buft_get_alignment(s.buft_get_alignment ? s.buft_get_alignment : ggml_backend_buft_get_alignment),
      reg_name(s.reg_name ? s.reg_name : ggml_backend_reg_name),
      buft_alloc_buffer(s.buft_alloc_buffer ? s.buft_alloc_buffer : ggml_backend_buft_alloc_buffer),
      event_new(s.event_new ? s.event_new : ggml_backend_event_new),
      event_free(s.event_free ? s.event_free : ggml_backend_event_free),
      event_record(s.event_record ? s.event_record : ggml_backend_event_record),
      event_synchronize(s.event_synchronize ? s.event_synchronize : ggml_backend_event_synchronize),
      event_wait(s.event_wait ? s.event_wait : ggml_backend_event_wait),
      dev_init(s.dev_init ? s.dev_init : ggml_backend_dev_init),
      backend_free(s.backend_free ? s.backend_free : ggml_backend_free) {}

namespace {

// GGML 0.20.2's facts per backend (its registry name), each pinned by a test in
// native/tests/test_ggml_contract.cpp; a backend not listed has neither.
struct BackendFact {
    const char * backend;  // ggml_backend_reg_name
    bool every_device;     // its host buffer type's pinned memory is usable by every device
    bool in_order;         // one ggml_backend_t's async copies, graphs and events on one in-order queue (A6)
    bool duplex;           // two ggml_backend_t of one device move the two directions at once (rule 11)
};
constexpr BackendFact kBackendFacts[] = {
    // ggml_cuda_host_malloc: cudaMallocHost, page-locked for every device of the process under
    // unified addressing (every 64-bit CUDA platform); the type reports device 0.
    // In order: the backend's stream (cuda_ctx->stream()); its blocking copies run on
    // cudaStreamPerThread instead, so A6's synchronous path still completes queued work first.
    // Duplex: each ggml_backend_cuda_init has its own stream, and the copy engines move one
    // stream's host-to-device copy while another's device-to-host copy runs (the transfer
    // floor's duplex series, docs/benchmark.md "Events, waits, duplex and the transfer queue").
    {"CUDA", true, true, true},
    // ggml_vk_host_malloc(vk_instance.devices[0], ...): memory imported into device 0 only.
    // Not in order: with a dedicated transfer queue (GGML_VK_ASYNC_USE_TRANSFER_QUEUE, AMD dGPUs
    // by default) its uploads go to a queue of their own.
    // No duplex: every ggml_backend_t of a device submits to the device's one compute queue (the
    // duplex series is no faster than the two copies one after the other).
    {"Vulkan", false, false, false},
};

const BackendFact * backend_fact(const char * reg_name) {
    for (const BackendFact & f : kBackendFacts) {
        if (reg_name != nullptr && std::strcmp(f.backend, reg_name) == 0) {
            return &f;
        }
    }
    return nullptr;
}

}  // namespace

bool in_order_backend(const char * reg_name) {
    const BackendFact * f = backend_fact(reg_name);
    return f != nullptr && f->in_order;
}

bool duplex_backend(const char * reg_name) {
    const BackendFact * f = backend_fact(reg_name);
    return f != nullptr && f->duplex;
}

bool host_buffer_every_device(const char * reg_name) {
    const BackendFact * f = backend_fact(reg_name);
    return f != nullptr && f->every_device;
}

sam3d_fallback static_fallback(const Session & s, const ggml_backend_dev_props & props) {
    if (!props.caps.async || !props.caps.host_buffer || s.host_buft == nullptr) {
        return SAM3D_FALLBACK_NO_ASYNC_CAPS;
    }
    const ggml_backend_dev_t reported = s.ggml.buft_get_device(s.host_buft);
    if (reported == s.dev) {
        return SAM3D_FALLBACK_COUNT;
    }
    // The device's own host buffer type reports another device of its backend (or none): usable
    // only where that backend's pinned memory is usable by every one of its devices.
    if (reported != nullptr && host_buffer_every_device(s.ggml.reg_name(ggml_backend_dev_backend_reg(s.dev)))) {
        return SAM3D_FALLBACK_COUNT;
    }
    return SAM3D_FALLBACK_FOREIGN_HOST_BUFFER;
}

namespace {

// The processors this process may run on: its CPU affinity (sched_getaffinity, which a
// container's cpuset narrows) where the system has one, else std::thread::hardware_concurrency
// (0 where unknown).
unsigned processors() {
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        return static_cast<unsigned>(CPU_COUNT(&set));
    }
#endif
    return std::thread::hardware_concurrency();
}

// The copy threads of options.staging_copy_threads (validated): as asked, or for 0
// SAM3D_STAGING_COPY_THREADS, at most processors(): more threads than processors only wait for
// each other.
unsigned copy_threads(unsigned option) {
    if (option != 0) {
        return option;
    }
    const unsigned n = processors();
    return n != 0 ? std::min(SAM3D_STAGING_COPY_THREADS, n) : SAM3D_STAGING_COPY_THREADS;
}

}  // namespace

// Creation: the environment, the seam, props and caps, once. Every allocation goes through the
// counted point; the session is owned by a unique_ptr until it is handed out.
sam3d_status create(ggml_backend_t backend, const sam3d_session_options * options, const sam3d_ggml_seam * seam,
                    sam3d_session ** out) {
    if (out == nullptr || backend == nullptr) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, out == nullptr ? "out is NULL" : "backend is NULL");
    }
    *out = nullptr;
    sam3d_session_options opts = sam3d_session_default_options();
    if (options != nullptr) {
        if (sam3d_status st = read_extensible(options, &opts, "options")) {
            return st;
        }
        opts.struct_size = sizeof opts;
    }
    const sam3d_ggml_seam sm = seam ? *seam : sam3d_testing_default_seam();
    bool batching = false;
    if (opts.batching == SAM3D_BATCHING_FROM_ENV) {
        const char * env = std::getenv("SAM3D_BATCHED_TRANSFERS");
        if (env != nullptr && std::strcmp(env, "1") == 0) {
            batching = true;
        } else if (env != nullptr && std::strcmp(env, "0") != 0) {
            return fail(SAM3D_ERR_BAD_ENV, std::string("SAM3D_BATCHED_TRANSFERS='") + env +
                                               "': use 1 (on), 0 or unset (off)");
        }
    } else if (opts.batching == SAM3D_BATCHING_ON || opts.batching == SAM3D_BATCHING_OFF) {
        batching = opts.batching == SAM3D_BATCHING_ON;
    } else {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "options.batching is " + std::to_string(opts.batching) +
                                                    ": use SAM3D_BATCHING_FROM_ENV, _OFF or _ON");
    }
    if (opts.duplex != SAM3D_DUPLEX_AUTO && opts.duplex != SAM3D_DUPLEX_OFF && opts.duplex != SAM3D_DUPLEX_ON) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "options.duplex is " + std::to_string(opts.duplex) +
                                                    ": use SAM3D_DUPLEX_AUTO, _OFF or _ON");
    }
    if (opts.staging_copy_threads > SAM3D_STAGING_COPY_THREADS_MAX) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, "options.staging_copy_threads is " +
                                                    std::to_string(opts.staging_copy_threads) + ": use 0 (default) to " +
                                                    std::to_string(SAM3D_STAGING_COPY_THREADS_MAX));
    }
    Allocations alloc(sm.fail_allocation);
    alloc();
    std::unique_ptr<sam3d_session> s(new sam3d_session(backend, sm));
    s->alloc = alloc;
    s->batching = batching;
    s->piece_bytes = opts.staging_piece_bytes != 0 ? opts.staging_piece_bytes : SAM3D_STAGING_PIECE_BYTES;
    s->perf_logger = sm.perf_logger < 0 ? std::getenv("GGML_VK_PERF_LOGGER") != nullptr : sm.perf_logger != 0;
    s->drain_before_compute = sm.drain_before_compute != 0;
    // Rule 6: capabilities are read once, here.
    ggml_backend_dev_props props{};
    s->ggml.dev_get_props(s->dev, &props);
    s->host_buft = s->ggml.dev_host_buffer_type(s->dev);
    if (s->host_buft != nullptr) {
        s->alignment = s->ggml.buft_get_alignment(s->host_buft);
    }
    s->events = props.caps.events;
    const char * reg = s->ggml.reg_name(ggml_backend_dev_backend_reg(s->dev));
    s->in_order = in_order_backend(reg);
    s->static_fallback = static_fallback(*s, props);
    // The staged copies' workers (rule 2, "Copy threads"), only where a call can stage.
    const bool stages = s->batching && s->static_fallback == SAM3D_FALLBACK_COUNT;
    // Rule 11: the second backend, where a queued call can use it; none made is one queue.
    if (stages && s->events &&
        (opts.duplex == SAM3D_DUPLEX_ON || (opts.duplex == SAM3D_DUPLEX_AUTO && duplex_backend(reg)))) {
        s->second = s->ggml.dev_init(s->dev, nullptr);
    }
    s->alloc();
    s->copier.reset(new Copier(stages ? copy_threads(opts.staging_copy_threads) : 1));
    s->alloc.reserve(s->ranges, 64);
    s->alloc.reserve(s->up_ptrs, 32);
    s->alloc.reserve(s->down_ptrs, 32);
    s->alloc.reserve(s->up_runs, 32);
    s->alloc.reserve(s->down_runs, 32);
    s->alloc.reserve(s->span_tensors, 8);
    s->alloc.reserve(s->spans, 32);
    *out = s.release();
    return SAM3D_OK;
}

}  // namespace sam3d

sam3d_session::sam3d_session(ggml_backend_t b, const sam3d_ggml_seam & seam)
    : backend(b), dev(ggml_backend_get_device(b)), ggml(seam), alloc(0) {}

// Frees what the session holds; its outstanding work was completed first (sam3d::close, A7).
sam3d_session::~sam3d_session() {
    for (sam3d::Call & c : calls) {
        for (ggml_backend_event_t e : {c.event, c.handoff}) {
            if (e != nullptr) {
                ggml.event_free(e);
            }
        }
    }
    for (ggml_backend_event_t e : event_pool) {
        ggml.event_free(e);
    }
    for (const sam3d::PieceEvent & e : piece_events) {
        ggml.event_free(e.event);
    }
    if (staging != nullptr) {
        ggml_backend_buffer_free(staging);
    }
    if (second != nullptr) {
        ggml.backend_free(second);
    }
}
