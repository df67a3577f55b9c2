// The deferred seam of the normal suite: the in-order asynchronous queue of
// native/testing/sam3d_deferred.h (which says what it runs when, and the transfer queue it
// models), with this suite's probe around each entry (probe.h: its records, and a failing
// compute when armed). It builds on the fake async backend (native/testing/sam3d_fake_async.h,
// fake_async::props); the fuzz target's deferred world uses the same queue with its own records.
#pragma once

#include "probe.h"
#include "rig.h"
#include "sam3d_deferred.h"

namespace deferred {

inline void set_async(ggml_backend_t b, ggml_tensor * t, const void * data, size_t off, size_t size) {
    probe::Enter e("set_async", data);
    queue_set_async(b, t, data, off, size);
}
inline void get_async(ggml_backend_t b, const ggml_tensor * t, void * data, size_t off, size_t size) {
    probe::Enter e("get_async", data);
    queue_get_async(b, t, data, off, size);
}
inline ggml_status compute_async(ggml_backend_t b, ggml_cgraph * g) {
    {
        std::lock_guard<std::mutex> l(probe::get().mutex);
        if (probe::get().fail_compute) {
            probe::get().events.push_back({"compute_async", nullptr, std::this_thread::get_id()});
            return GGML_STATUS_FAILED;
        }
    }
    probe::Enter e("compute_async");
    queue_compute(b, g);
    return GGML_STATUS_SUCCESS;
}
inline void synchronize(ggml_backend_t b) {
    probe::Enter e("synchronize");
    queue_synchronize(b);
}
inline void event_record(ggml_backend_event_t e, ggml_backend_t b) {
    probe::Enter en("event_record");
    queue_event_record(e, b);
}
inline void event_synchronize(ggml_backend_event_t e) {
    probe::Enter en("event_synchronize");
    queue_event_synchronize(e);
}
inline void event_wait(ggml_backend_t b, ggml_backend_event_t e) { queue_event_wait(b, e); }

// GGML's blocking set (the synchronous path's), after the transfer queue's ready uploads
// (sam3d_deferred.h, queue_set_blocking, says why).
inline void (*g_blocking_set)(ggml_tensor *, const void *, size_t, size_t) = nullptr;
inline void set_blocking(ggml_tensor * t, const void * data, size_t off, size_t size) {
    queue_set_blocking(g_blocking_set, t, data, off, size);
}

inline void install(sam3d_ggml_seam & s) {
    if (s.tensor_set != set_blocking) {  // the seam's own, or GGML's where the seam has none
        g_blocking_set = s.tensor_set;
        s.tensor_set = set_blocking;
    }
    s.tensor_set_async = set_async;
    s.tensor_get_async = get_async;
    s.graph_compute_async = compute_async;
    s.synchronize = synchronize;
}

// The deferred queue plus events, on a cpu_staged seam.
inline void install_with_events(sam3d_ggml_seam & s) {
    install(s);
    s.dev_get_props = props_with_events;
    s.event_new = event_new;
    s.event_free = event_free;
    s.event_record = event_record;
    s.event_synchronize = event_synchronize;
    s.event_wait = event_wait;
    s.dev_init = dev_init;
    s.backend_free = backend_free;
}

}  // namespace deferred
