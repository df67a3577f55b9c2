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

// An event: the position in its queue (0: the session's backend, 1: the second backend) of its
// last record.
struct Marker {
    int queue = 0;
    size_t upto = 0;       // ops of its queue before the record
    size_t other = 0;      // ops of the other queue its queue waited for before the record (events are transitive)
    bool recorded = false;
};

struct Op {
    size_t after = 0;  // ops of the other queue that run before it (an event_wait of a record there)
    std::function<void()> run;
};

struct Transfer {
    size_t gate = 0;   // ops of queue 0 that run before it (an event_wait's record)
    size_t after = 0;  // ops of queue 1 that run before it
    std::function<void()> run;
};

inline std::mutex g_mutex;
inline std::vector<Op> g_ops[2];          // [0]: the session's backend, [1]: the second backend
inline size_t g_done[2] = {0, 0};         // ops run so far (positions count from the start)
inline size_t g_after[2] = {0, 0};        // the `after` of ops pushed from now on (event waits)
inline ggml_backend_t g_second = nullptr;  // the second backend (dev_init): its entries go to queue 1
// The order the two queues take where nothing orders them: false, queue 1 runs only when a
// synchronize, an event or a wait needs it (a dropped wait before a write after its reads shows);
// true, before every op of queue 0, queue 1 runs what it may (a dropped wait before a read shows).
inline bool g_second_first = false;
inline bool g_fail_dev_init = false;   // dev_init returns NULL
inline int g_dev_inits = 0;
inline int g_backend_frees = 0;
inline bool g_transfer_queue = false;
inline std::vector<Transfer> g_transfers;  // uploads, with g_transfer_queue
inline size_t g_gate = 0;                   // the gate of uploads pushed from now on
inline int g_syncs = 0;
inline int g_events_new = 0;
inline int g_events_free = 0;
inline int g_event_records = 0;
inline int g_event_syncs = 0;
inline int g_event_waits = 0;
inline int g_event_wait_sleep_ms = 0;  // host time each event_wait takes (a slow driver call)
inline bool g_fail_event_new = false;    // event_new returns NULL
inline bool g_throw_event_record = false;

inline int queue_of(ggml_backend_t b) { return b != nullptr && b == g_second ? 1 : 0; }

// The queue's entries, without any record of who called them (the users' seams add theirs).
inline void push(ggml_backend_t b, std::function<void()> op) {
    const int q = queue_of(b);
    g_ops[q].push_back({g_after[q], std::move(op)});
}
inline void queue_set_async(ggml_backend_t b, ggml_tensor * t, const void * data, size_t off, size_t size) {
    std::lock_guard<std::mutex> l(g_mutex);
    std::function<void()> op = [=] { ggml_backend_tensor_set_async(b, t, data, off, size); };
    if (g_transfer_queue && queue_of(b) == 0) {
        g_transfers.push_back({g_gate, g_after[0], std::move(op)});
    } else {
        push(b, std::move(op));
    }
}
inline void queue_get_async(ggml_backend_t b, const ggml_tensor * t, void * data, size_t off, size_t size) {
    std::lock_guard<std::mutex> l(g_mutex);
    push(b, [=] { ggml_backend_tensor_get_async(b, t, data, off, size); });
}
inline void queue_compute(ggml_backend_t b, ggml_cgraph * g) {
    std::lock_guard<std::mutex> l(g_mutex);
    push(b, [=] { ggml_backend_graph_compute(b, g); });
}
// Runs the pending uploads whose gates have passed, in order (the transfer queue stops at the
// first that waits).
inline void run_transfers() {
    std::vector<std::function<void()>> ready;
    {
        std::lock_guard<std::mutex> l(g_mutex);
        size_t n = 0;
        while (n < g_transfers.size() && g_transfers[n].gate <= g_done[0] && g_transfers[n].after <= g_done[1]) {
            ready.push_back(std::move(g_transfers[n].run));
            n += 1;
        }
        g_transfers.erase(g_transfers.begin(), g_transfers.begin() + static_cast<std::ptrdiff_t>(n));
    }
    for (auto & op : ready) {
        op();
    }
}
inline void run_until(int q, size_t upto);
// Runs queue q's next op, once the other queue has run the ops it waits for. False when q has none.
inline bool step(int q) {
    for (;;) {
        if (q == 0) {
            run_transfers();  // a graph waits for the uploads submitted before it
        }
        size_t after = 0;
        size_t progress = 0;
        std::function<void()> op;
        {
            std::lock_guard<std::mutex> l(g_mutex);
            if (g_ops[q].empty()) {
                return false;
            }
            after = g_ops[q].front().after;
            progress = g_done[0] + g_done[1];
            if (g_done[1 - q] >= after) {
                op = std::move(g_ops[q].front().run);
                g_ops[q].erase(g_ops[q].begin());
                g_done[q] += 1;
            }
        }
        if (op) {
            op();
            return true;
        }
        run_until(1 - q, after);  // may run ops of q too (g_second_first): look again
        std::lock_guard<std::mutex> l(g_mutex);
        if (g_done[0] + g_done[1] == progress) {
            throw std::logic_error("deferred: the two queues wait for each other");
        }
    }
}
// Queue 1's ops that wait for nothing queue 0 has not run yet (g_second_first).
inline void run_second_ready() {
    for (;;) {
        {
            std::lock_guard<std::mutex> l(g_mutex);
            if (g_ops[1].empty() || g_ops[1].front().after > g_done[0]) {
                return;
            }
        }
        step(1);
    }
}
// Runs queue q up to position `upto` (counted from the start), each upload as early as it may
// run. An upload's gate is at most the position of the first op after it, so every graph still
// finds the uploads submitted before it done.
inline void run_until(int q, size_t upto) {
    for (;;) {
        run_transfers();
        if (g_second_first) {
            run_second_ready();
        }
        {
            std::lock_guard<std::mutex> l(g_mutex);
            if (g_done[q] >= upto || g_ops[q].empty()) {
                return;
            }
        }
        step(q);
    }
}
// A queue's event waits are in its order like its ops (cudaStreamWaitEvent): its synchronize also
// waits for the other queue's ops before the events it waited for, with or without ops after them.
inline void queue_synchronize(ggml_backend_t b) {
    const int q = queue_of(b);
    size_t waited = 0;
    {
        std::lock_guard<std::mutex> l(g_mutex);
        g_syncs += 1;
        waited = g_after[q];
    }
    run_until(1 - q, waited);
    run_until(q, SIZE_MAX);
    ggml_backend_synchronize(b);
}
inline size_t pending() {
    std::lock_guard<std::mutex> l(g_mutex);
    return g_ops[0].size() + g_ops[1].size() + g_transfers.size();
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
inline void queue_event_record(ggml_backend_event_t e, ggml_backend_t b) {
    std::lock_guard<std::mutex> l(g_mutex);
    if (g_throw_event_record) {
        throw std::runtime_error("event_record failed (test)");
    }
    auto * m = reinterpret_cast<Marker *>(e);
    m->queue = queue_of(b);
    m->upto = g_done[m->queue] + g_ops[m->queue].size();
    m->other = g_after[m->queue];
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
    if (m->recorded) run_until(1 - m->queue, m->other);
    run_until(m->queue, n);
}
// The backend's later work waits for the ops before the event's record: on its own queue its
// later uploads (the transfer queue's), on the other queue everything it enqueues from now on.
inline void queue_event_wait(ggml_backend_t b, ggml_backend_event_t e) {
    std::this_thread::sleep_for(std::chrono::milliseconds(g_event_wait_sleep_ms));
    std::lock_guard<std::mutex> l(g_mutex);
    g_event_waits += 1;
    const auto * m = reinterpret_cast<const Marker *>(e);
    if (!m->recorded) {
        return;
    }
    const int q = queue_of(b);
    if (m->queue != q) {
        g_after[q] = std::max(g_after[q], m->upto);
        if (q == 0) g_gate = std::max(g_gate, m->other);
    } else {
        g_after[q] = std::max(g_after[q], m->other);
        if (q == 0) g_gate = std::max(g_gate, m->upto);
    }
}

// The second backend of duplex (the seam's dev_init): a CPU backend of its own, whose entries
// go to queue 1; and its free.
inline ggml_backend_t dev_init(ggml_backend_dev_t dev, const char * params) {
    std::lock_guard<std::mutex> l(g_mutex);
    if (g_fail_dev_init) {
        return nullptr;
    }
    g_dev_inits += 1;
    g_second = ggml_backend_dev_init(dev, params);
    return g_second;
}
inline void backend_free(ggml_backend_t b) {
    std::lock_guard<std::mutex> l(g_mutex);
    g_backend_frees += 1;
    if (b == g_second) {
        g_second = nullptr;
    }
    ggml_backend_free(b);
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
    for (int q = 0; q < 2; ++q) {
        g_ops[q].clear();
        g_done[q] = g_after[q] = 0;
    }
    g_second_first = g_fail_dev_init = false;
    g_dev_inits = g_backend_frees = 0;
    g_transfers.clear();
    g_transfer_queue = false;
    g_gate = 0;
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
