// Recording and fault-injecting seam entries for the normal suite.
//
// Seam entries are plain function pointers without user data, so they share one process-wide
// Probe. Each test calls probe::reset() first; entries forward to GGML's own function unless a
// fault is armed. All fields are guarded by Probe::mutex (the serialization test calls from two
// threads).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rig.h"

namespace probe {

struct Event {
    std::string what;  // "set_async", "get_async", "compute_async", "compute", "synchronize", ...
    const void * data; // host pointer of a transfer, else nullptr
    std::thread::id thread;
};

struct Probe {
    std::mutex mutex;
    std::condition_variable cv;
    std::vector<Event> events;
    int props_calls = 0;
    int host_buft_calls = 0;
    int alloc_calls = 0;
    int active = 0;          // seam entries running right now
    int max_active = 0;      // the most seam entries ever running at once
    bool fail_compute = false;      // compute entries return GGML_STATUS_FAILED
    bool block_compute = false;     // the next compute_async entry blocks until release()
    bool blocked = false;           // a compute_async entry is blocked now
    bool released = false;
    int alloc_mode = 0;             // 0 real, 1 NULL, 2 ordinary CPU memory (buffer_from_ptr)
    size_t alloc_offset = 0;        // mode 2: the buffer's base is ordinary_memory + this (a multiple of 32)
    bool block_alloc = false;       // the next alloc_buffer entry blocks until release()
    ggml_backend_dev_t buft_device_result = nullptr;  // for buft_device_override
    const char * reg_name_result = nullptr;           // for reg_name_override
};

inline Probe & get() {
    static Probe p;
    return p;
}

inline void reset() {
    Probe & p = get();
    std::lock_guard<std::mutex> l(p.mutex);
    p.events.clear();
    p.props_calls = p.host_buft_calls = p.alloc_calls = 0;
    p.active = p.max_active = 0;
    p.fail_compute = p.block_compute = p.blocked = p.released = false;
    p.alloc_mode = 0;
    p.alloc_offset = 0;
    p.block_alloc = false;
    p.buft_device_result = nullptr;
    p.reg_name_result = nullptr;
}

inline std::vector<Event> events() {
    Probe & p = get();
    std::lock_guard<std::mutex> l(p.mutex);
    return p.events;
}

inline std::vector<std::string> names() {
    std::vector<std::string> n;
    for (const Event & e : events()) {
        n.push_back(e.what);
    }
    return n;
}

// RAII: one seam entry running (for the concurrency bound) and its event.
struct Enter {
    explicit Enter(const char * what, const void * data = nullptr) {
        Probe & p = get();
        std::lock_guard<std::mutex> l(p.mutex);
        p.active += 1;
        p.max_active = std::max(p.max_active, p.active);
        p.events.push_back({what, data, std::this_thread::get_id()});
    }
    ~Enter() {
        Probe & p = get();
        std::lock_guard<std::mutex> l(p.mutex);
        p.active -= 1;
    }
};

inline void set_async(ggml_backend_t b, ggml_tensor * t, const void * data, size_t off, size_t size) {
    Enter e("set_async", data);
    ggml_backend_tensor_set_async(b, t, data, off, size);
}
inline void get_async(ggml_backend_t b, const ggml_tensor * t, void * data, size_t off, size_t size) {
    Enter e("get_async", data);
    ggml_backend_tensor_get_async(b, t, data, off, size);
}
inline void set_sync(ggml_tensor * t, const void * data, size_t off, size_t size) {
    Enter e("set", data);
    ggml_backend_tensor_set(t, data, off, size);
}
inline void get_sync(const ggml_tensor * t, void * data, size_t off, size_t size) {
    Enter e("get", data);
    ggml_backend_tensor_get(t, data, off, size);
}
inline void synchronize(ggml_backend_t b) {
    Enter e("synchronize");
    ggml_backend_synchronize(b);
}
inline ggml_status compute_async(ggml_backend_t b, ggml_cgraph * g) {
    Enter e("compute_async");
    Probe & p = get();
    {
        std::unique_lock<std::mutex> l(p.mutex);
        if (p.block_compute) {
            p.block_compute = false;
            p.blocked = true;
            p.cv.notify_all();
            p.cv.wait(l, [&] { return p.released; });
            p.blocked = false;
        }
        if (p.fail_compute) {
            return GGML_STATUS_FAILED;
        }
    }
    return ggml_backend_graph_compute_async(b, g);
}
inline ggml_status compute(ggml_backend_t b, ggml_cgraph * g) {
    Enter e("compute");
    {
        Probe & p = get();
        std::lock_guard<std::mutex> l(p.mutex);
        if (p.fail_compute) {
            return GGML_STATUS_FAILED;
        }
    }
    return ggml_backend_graph_compute(b, g);
}

// Arms (or disarms) the compute fault: compute entries return GGML_STATUS_FAILED.
inline void set_fail_compute(bool fail) {
    std::lock_guard<std::mutex> l(get().mutex);
    get().fail_compute = fail;
}

// Waits until a compute_async (or alloc_buffer) entry is blocked; release() lets it go on.
inline void wait_blocked() {
    Probe & p = get();
    std::unique_lock<std::mutex> l(p.mutex);
    p.cv.wait(l, [&] { return p.blocked; });
}
inline void release() {
    Probe & p = get();
    std::lock_guard<std::mutex> l(p.mutex);
    p.released = true;
    p.cv.notify_all();
}

// Rule 9 races: `first` runs on a thread until it blocks inside compute_async, then `second`
// starts on another thread and gets 100 ms to enter the seam if the session let it (the
// assertions do not depend on the delay, only their power to catch a missing lock does);
// then `first` is released and both threads joined. Checks that no two seam entries ran at
// once and that the first `n_first` recorded events were `first`'s, the rest `second`'s.
inline void race(const std::function<void()> & first, const std::function<void()> & second, size_t n_first) {
    {
        std::lock_guard<std::mutex> l(get().mutex);
        get().block_compute = true;
    }
    std::thread::id id1, id2;
    std::thread t1([&] {
        id1 = std::this_thread::get_id();
        first();
    });
    wait_blocked();
    std::atomic<bool> second_started{false};
    std::thread t2([&] {
        id2 = std::this_thread::get_id();
        second_started = true;
        second();
    });
    while (!second_started) {
        std::this_thread::yield();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    release();
    t1.join();
    t2.join();
    EXPECT_EQ(get().max_active, 1) << "two seam entries ran at once";
    const std::vector<Event> ev = events();
    ASSERT_GT(ev.size(), n_first);
    for (size_t i = 0; i < ev.size(); ++i) {
        EXPECT_EQ(ev[i].thread, i < n_first ? id1 : id2) << "event " << i << " (" << ev[i].what << ") interleaved";
    }
}

// Capability entries that count their invocations (rule 6), on top of the cpu_staged seam.
inline void props_counting(ggml_backend_dev_t dev, ggml_backend_dev_props * props) {
    {
        Probe & p = get();
        std::lock_guard<std::mutex> l(p.mutex);
        p.props_calls += 1;
    }
    fake_async::props(dev, props);
}
inline ggml_backend_buffer_type_t host_buft_counting(ggml_backend_dev_t dev) {
    {
        Probe & p = get();
        std::lock_guard<std::mutex> l(p.mutex);
        p.host_buft_calls += 1;
    }
    return fake_async::host_buffer_type(dev);
}

// The staging allocation: real, failing (NULL), or ordinary CPU memory of another buffer type
// (what GGML's Vulkan host buffer type returns when pinned allocation fails).
alignas(64) inline uint8_t ordinary_memory[1 << 20];
inline ggml_backend_buffer_t alloc_buffer(ggml_backend_buffer_type_t buft, size_t size) {
    int mode = 0;
    size_t offset = 0;
    {
        Probe & p = get();
        std::unique_lock<std::mutex> l(p.mutex);
        p.alloc_calls += 1;
        mode = p.alloc_mode;
        offset = p.alloc_offset;
        if (p.block_alloc) {
            p.block_alloc = false;
            p.blocked = true;
            p.cv.notify_all();
            p.cv.wait(l, [&] { return p.released; });
            p.blocked = false;
        }
    }
    if (mode == 1) {
        return nullptr;
    }
    if (mode == 2) {
        return size <= sizeof(ordinary_memory) - offset ? ggml_backend_cpu_buffer_from_ptr(ordinary_memory + offset, size)
                                                        : nullptr;
    }
    return ggml_backend_buft_alloc_buffer(buft, size);
}

// The host buffer type's device as the test says (NULL, or another device).
inline ggml_backend_dev_t buft_device_override(ggml_backend_buffer_type_t) {
    Probe & p = get();
    std::lock_guard<std::mutex> l(p.mutex);
    return p.buft_device_result;
}

// The backend registry's name as the test says (the key of the per-backend facts).
inline const char * reg_name_override(ggml_backend_reg_t) {
    Probe & p = get();
    std::lock_guard<std::mutex> l(p.mutex);
    return p.reg_name_result;
}

// Every transfer, compute and synchronize entry of `s` goes through the recorders above.
inline void record_all(sam3d_ggml_seam & s) {
    s.tensor_set = set_sync;
    s.tensor_get = get_sync;
    s.tensor_set_async = set_async;
    s.tensor_get_async = get_async;
    s.graph_compute = compute;
    s.graph_compute_async = compute_async;
    s.synchronize = synchronize;
    s.buft_alloc_buffer = alloc_buffer;
}

}  // namespace probe
