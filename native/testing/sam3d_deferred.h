// sam3d_deferred.h - an in-order asynchronous queue over GGML's CPU backend, for seams: async
// uploads, graphs and downloads are only recorded and run in order at a synchronize, the way a
// device reads and writes pinned memory later (uploads read their host memory then, downloads
// write it then). Events are markers on top of it: recording one notes the queue position,
// synchronizing one runs the queue up to there (GGML's CPU backend has no events: ggml-cpu.cpp
// ".event_new = NULL"). The one copy, for the normal suite (native/tests/deferred.h, which adds
// its probe's records and faults around each entry) and the fuzz target (native/fuzz/worlds.cpp,
// its deferred world); target sam3d::fake_async, like sam3d_fake_async.h, which it builds on
// (props()).
//
// With g_transfer_queue, uploads go to a queue of their own that nothing orders after earlier
// graphs, as GGML 0.20.2's Vulkan backend does on a device with a dedicated transfer queue
// (GGML_VK_ASYNC_USE_TRANSFER_QUEUE, AMD dGPUs by default): a graph waits for the uploads
// submitted before it (ggml_vk_get_compute_ctx waits on the transfer semaphore), an upload waits
// for no graph (ggml_vk_get_transfer_ctx) unless an event_wait came before it (GGML's
// ggml_backend_vk_event_wait adds the event's timeline semaphore to the transfer context's
// waits). Each upload runs as early as that allows (a synchronize or an event's synchronize runs
// pending uploads before any graph they do not wait for), an order the two real queues may take.
//
// One queue per process (seam entries are plain function pointers without user data): a user
// calls reset() before each use.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ggml-backend.h"
#include "sam3d_fake_async.h"

namespace deferred {

struct Marker {
    size_t upto = 0;       // ops before the record
    bool recorded = false;
};

struct Transfer {
    size_t gate = 0;  // ops that run before it (an event_wait's record)
    std::function<void()> run;
};

inline std::mutex g_mutex;
inline std::vector<std::function<void()>> g_ops;
inline bool g_transfer_queue = false;
inline std::vector<Transfer> g_transfers;  // uploads, with g_transfer_queue
inline size_t g_gate = 0;                   // the gate of uploads pushed from now on
inline size_t g_done = 0;  // ops run so far (positions count from the start)
inline int g_syncs = 0;
inline int g_events_new = 0;
inline int g_events_free = 0;
inline int g_event_records = 0;
inline int g_event_syncs = 0;
inline int g_event_waits = 0;
inline int g_event_wait_sleep_ms = 0;  // host time each event_wait takes (a slow driver call)
inline bool g_fail_event_new = false;    // event_new returns NULL
inline bool g_throw_event_record = false;

// The queue's entries, without any record of who called them (the users' seams add theirs).
inline void queue_set_async(ggml_backend_t b, ggml_tensor * t, const void * data, size_t off, size_t size) {
    std::lock_guard<std::mutex> l(g_mutex);
    std::function<void()> op = [=] { ggml_backend_tensor_set_async(b, t, data, off, size); };
    if (g_transfer_queue) {
        g_transfers.push_back({g_gate, std::move(op)});
    } else {
        g_ops.push_back(std::move(op));
    }
}
inline void queue_get_async(ggml_backend_t b, const ggml_tensor * t, void * data, size_t off, size_t size) {
    std::lock_guard<std::mutex> l(g_mutex);
    g_ops.push_back([=] { ggml_backend_tensor_get_async(b, t, data, off, size); });
}
inline void queue_compute(ggml_backend_t b, ggml_cgraph * g) {
    std::lock_guard<std::mutex> l(g_mutex);
    g_ops.push_back([=] { ggml_backend_graph_compute(b, g); });
}
// Runs the first `n` pending ops.
inline void run_ops(size_t n) {
    std::vector<std::function<void()>> ops;
    {
        std::lock_guard<std::mutex> l(g_mutex);
        n = std::min(n, g_ops.size());
        ops.assign(g_ops.begin(), g_ops.begin() + static_cast<std::ptrdiff_t>(n));
        g_ops.erase(g_ops.begin(), g_ops.begin() + static_cast<std::ptrdiff_t>(n));
        g_done += n;
    }
    for (auto & op : ops) {
        op();
    }
}
// Runs the pending uploads whose gate has passed, in order (the transfer queue stops at the
// first that waits).
inline void run_transfers() {
    std::vector<std::function<void()>> ready;
    {
        std::lock_guard<std::mutex> l(g_mutex);
        size_t n = 0;
        while (n < g_transfers.size() && g_transfers[n].gate <= g_done) {
            ready.push_back(std::move(g_transfers[n].run));
            n += 1;
        }
        g_transfers.erase(g_transfers.begin(), g_transfers.begin() + static_cast<std::ptrdiff_t>(n));
    }
    for (auto & op : ready) {
        op();
    }
}
// Runs ops up to position `upto` (counted from the start), each upload as early as it may run.
// An upload's gate is at most the position of the first op after it, so every graph still
// finds the uploads submitted before it done.
inline void run_until(size_t upto) {
    for (;;) {
        run_transfers();
        {
            std::lock_guard<std::mutex> l(g_mutex);
            if (g_done >= upto || g_ops.empty()) {
                return;
            }
        }
        run_ops(1);
    }
}
inline void queue_synchronize(ggml_backend_t b) {
    {
        std::lock_guard<std::mutex> l(g_mutex);
        g_syncs += 1;
    }
    run_until(SIZE_MAX);
    ggml_backend_synchronize(b);
}
inline size_t pending() {
    std::lock_guard<std::mutex> l(g_mutex);
    return g_ops.size() + g_transfers.size();
}

inline ggml_backend_event_t event_new(ggml_backend_dev_t) {
    std::lock_guard<std::mutex> l(g_mutex);
    if (g_fail_event_new) {
        return nullptr;
    }
    g_events_new += 1;
    return reinterpret_cast<ggml_backend_event_t>(new Marker);
}
inline void event_free(ggml_backend_event_t e) {
    std::lock_guard<std::mutex> l(g_mutex);
    g_events_free += 1;
    delete reinterpret_cast<Marker *>(e);
}
inline void queue_event_record(ggml_backend_event_t e) {
    std::lock_guard<std::mutex> l(g_mutex);
    if (g_throw_event_record) {
        throw std::runtime_error("event_record failed (test)");
    }
    auto * m = reinterpret_cast<Marker *>(e);
    m->upto = g_done + g_ops.size();
    m->recorded = true;
    g_event_records += 1;
}
inline void queue_event_synchronize(ggml_backend_event_t e) {
    auto * m = reinterpret_cast<Marker *>(e);
    size_t n = 0;
    {
        std::lock_guard<std::mutex> l(g_mutex);
        g_event_syncs += 1;
        n = m->recorded ? m->upto : 0;
    }
    run_until(n);
}
// Later uploads wait for the ops before the event's record; ops are in order already.
inline void queue_event_wait(ggml_backend_event_t e) {
    std::this_thread::sleep_for(std::chrono::milliseconds(g_event_wait_sleep_ms));
    std::lock_guard<std::mutex> l(g_mutex);
    g_event_waits += 1;
    const auto * m = reinterpret_cast<const Marker *>(e);
    if (m->recorded) {
        g_gate = std::max(g_gate, m->upto);
    }
}

// GGML's blocking set (the synchronous path's): with g_transfer_queue the transfer queue may
// have run the uploads submitted before it by then while a graph of the compute queue still
// waits (an order the two real queues may take; on lavapipe the set is a memcpy at once), so
// a blocking set that does not first complete the queued work overwrites that graph's inputs.
// `set`: the blocking set to call then (GGML's when NULL).
inline void queue_set_blocking(void (*set)(ggml_tensor *, const void *, size_t, size_t), ggml_tensor * t,
                               const void * data, size_t off, size_t size) {
    if (g_transfer_queue) {
        run_transfers();
    }
    if (set != nullptr) {
        set(t, data, off, size);
    } else {
        ggml_backend_tensor_set(t, data, off, size);
    }
}

inline void reset() {
    std::lock_guard<std::mutex> l(g_mutex);
    g_ops.clear();
    g_transfers.clear();
    g_transfer_queue = false;
    g_gate = 0;
    g_done = 0;
    g_syncs = g_events_new = g_events_free = g_event_records = g_event_syncs = g_event_waits = 0;
    g_event_wait_sleep_ms = 0;
    g_fail_event_new = g_throw_event_record = false;
}

// Props with caps.events on (and async/host buffer, as fake_async::props).
inline void props_with_events(ggml_backend_dev_t dev, ggml_backend_dev_props * props) {
    fake_async::props(dev, props);
    props->caps.events = true;
}

}  // namespace deferred
