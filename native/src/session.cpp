// The session: creation (rule 6: capabilities read once), destruction (A7), the thread's last
// error, and the completion bookkeeping shared by every path.
#include "session.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "plan.h"

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
      event_wait(s.event_wait ? s.event_wait : ggml_backend_event_wait) {}

void mark_all_done(Session & s) {
    for (Call & c : s.calls) {
        if (c.state == Call::State::InFlight) {
            c.state = Call::State::Complete;
        }
    }
}

void complete_all(Session & s) {
    for (const Call & c : s.calls) {
        if (!c.done()) {
            const uint64_t t0 = now_ns();
            s.ggml.synchronize(s.backend);
            s.counters.synchronize_ns += now_ns() - t0;
            mark_all_done(s);
            return;
        }
    }
}

void free_call(Session & s, std::list<Call>::iterator it) {
    if (it->event != nullptr) {
        // The call is complete: this returns at once, and lets GGML recycle the event's
        // objects before it is recorded again. The pool's capacity was reserved when the
        // event was created, so this push does not allocate.
        s.ggml.event_synchronize(it->event);
        s.event_pool.push_back(it->event);
    }
    s.calls.erase(it);
}

bool call_done(const Session & s, uint64_t id) {
    for (const Call & c : s.calls) {
        if (c.id == id) {
            return c.done();
        }
    }
    return true;
}

// Creation: the environment, the seam, props and caps, once. Every allocation goes through the
// counted point; the session is owned by a unique_ptr until it is handed out.
sam3d_status create(ggml_backend_t backend, const sam3d_session_options * options, const sam3d_ggml_seam * seam,
                    sam3d_session ** out) {
    if (out == nullptr || backend == nullptr) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, out == nullptr ? "out is NULL" : "backend is NULL");
    }
    *out = nullptr;
    const sam3d_session_options opts = options ? *options : sam3d_session_default_options();
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
    Allocations alloc(sm.fail_allocation);
    alloc();
    std::unique_ptr<sam3d_session> s(new sam3d_session(backend, sm));
    s->alloc = alloc;
    s->batching = batching;
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
    s->static_fallback = static_fallback(*s, props);
    s->alloc.reserve(s->ranges, 64);
    s->alloc.reserve(s->up_ptrs, 32);
    s->alloc.reserve(s->down_ptrs, 32);
    *out = s.release();
    return SAM3D_OK;
}

}  // namespace sam3d

sam3d_session::sam3d_session(ggml_backend_t b, const sam3d_ggml_seam & seam)
    : backend(b), dev(ggml_backend_get_device(b)), ggml(seam), alloc(0) {}

sam3d_session::~sam3d_session() {
    for (const sam3d::Call & c : calls) {
        if (!c.done()) {
            ggml.synchronize(backend);  // A7: outstanding work completes before anything is freed
            break;
        }
    }
    for (sam3d::Call & c : calls) {
        if (c.event != nullptr) {
            ggml.event_free(c.event);
        }
    }
    for (ggml_backend_event_t e : event_pool) {
        ggml.event_free(e);
    }
    if (staging != nullptr) {
        ggml_backend_buffer_free(staging);
    }
}
