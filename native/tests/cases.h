// Shared workloads of the normal suite: out = 2 * a + b on F32 tensors (exact for the small
// integer inputs of rig::ramp), and guarded host buffers.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "rig.h"

// Substring checks on messages (GoogleTest without gMock).
#define EXPECT_CONTAINS(haystack, needle)                                                                    \
    EXPECT_NE(std::string(haystack).find(needle), std::string::npos)                                          \
        << "'" << std::string(haystack) << "' does not contain '" << std::string(needle) << "'"
#define EXPECT_STARTS_WITH(haystack, prefix)                                                                 \
    EXPECT_EQ(std::string(haystack).rfind(prefix, 0), 0u)                                                     \
        << "'" << std::string(haystack) << "' does not start with '" << std::string(prefix) << "'"

namespace cases {

struct ScaleAdd {
    int64_t n = 0;
    ggml_tensor * a = nullptr;
    ggml_tensor * b = nullptr;
    ggml_tensor * out = nullptr;
    ggml_cgraph * graph = nullptr;
};

// Builds the tensors and graph in `ctx` (no_alloc; ggml_tensor_overhead() * 8 +
// ggml_graph_overhead() bytes are enough).
inline ScaleAdd scale_add(ggml_context * ctx, int64_t n) {
    ScaleAdd w;
    w.n = n;
    w.a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
    ggml_set_name(w.a, "a");
    // a and b do not meet on the device, so each upload is a GGML copy of its own (rule 10's
    // coalescing has its own cases, test_coalescing.cpp).
    ggml_set_name(ggml_new_tensor_1d(ctx, GGML_TYPE_I8, 64), "apart");
    w.b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
    ggml_set_name(w.b, "b");
    w.out = ggml_add(ctx, ggml_scale(ctx, w.a, 2.0f), w.b);
    ggml_set_name(w.out, "out");
    w.graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(w.graph, w.out);
    return w;
}

// The same in the rig's context (call before r.alloc()).
inline ScaleAdd scale_add(rig::Rig & r, int64_t n) { return scale_add(r.ctx(), n); }

inline std::vector<float> expected(const std::vector<float> & a, const std::vector<float> & b) {
    std::vector<float> e(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
        e[i] = 2.0f * a[i] + b[i];
    }
    return e;
}

// One call of the workload: upload a and b, compute, download out into dst.
struct Call {
    sam3d_upload ups[2];
    sam3d_download downs[1];
    sam3d_call call;
    Call(const ScaleAdd & w, const void * a, const void * b, void * dst, bool synchronous = false)
        : ups{rig::up(w.a, a, bytes(w)), rig::up(w.b, b, bytes(w))},
          downs{rig::down(w.out, dst, bytes(w))},
          call{ups, 2, w.graph, downs, 1, synchronous} {}
    Call(const Call &) = delete;
    Call & operator=(const Call &) = delete;
    static size_t bytes(const ScaleAdd & w) { return static_cast<size_t>(w.n) * sizeof(float); }
};

inline sam3d_status run(sam3d_session * s, const ScaleAdd & w, const float * a, const float * b, float * dst,
                        bool synchronous = false) {
    Call c(w, a, b, dst, synchronous);
    return sam3d_session_run(s, &c.call);
}

// The same call through sam3d_session_submit (host pointers a, b, dst; slots with ZERO_COPY).
inline sam3d_status submit(sam3d_session * s, const ScaleAdd & w, const void * a, const void * b, void * dst,
                           unsigned flags, sam3d_ticket * ticket) {
    Call c(w, a, b, dst);
    return sam3d_session_submit(s, &c.call, flags, ticket);
}

// Whether batching calls of `s` can take the pinned staging path (batching on, no static fallback).
inline bool staged(sam3d_session * s) {
    return sam3d_session_batching(s) && sam3d_session_static_fallback(s) == SAM3D_FALLBACK_COUNT;
}

// One zero-copy call of the workload: reserve_scale_add reserves a, b, out (the caller fills
// a and b); submit_scale_add submits the call on those slots.
struct Slots {
    float * a;
    float * b;
    float * out;
};
inline Slots reserve_scale_add(sam3d_session * s, const ScaleAdd & w) {
    const size_t bytes = Call::bytes(w);
    sam3d_slot_request req[3] = {{bytes}, {bytes}, {bytes}};
    void * p[3] = {nullptr, nullptr, nullptr};
    EXPECT_EQ(sam3d_session_reserve(s, req, 3, p), SAM3D_OK) << sam3d_last_error();
    return Slots{static_cast<float *>(p[0]), static_cast<float *>(p[1]), static_cast<float *>(p[2])};
}
inline sam3d_status submit_scale_add(sam3d_session * s, const ScaleAdd & w, const Slots & sl, unsigned flags,
                                     sam3d_ticket * t) {
    return submit(s, w, sl.a, sl.b, sl.out, flags, t);
}

// A host buffer with `guard` bytes of a known value before and after each of its regions.
class Guarded {
   public:
    static constexpr uint8_t kGuard = 0xA5;
    static constexpr size_t kGuardBytes = 64;

    explicit Guarded(const std::vector<size_t> & sizes) : sizes_(sizes) {
        size_t at = kGuardBytes;
        for (size_t n : sizes_) {
            offsets_.push_back(at);
            at += n + kGuardBytes;
        }
        bytes_.assign(at, kGuard);
        for (size_t i = 0; i < sizes_.size(); ++i) {
            std::memset(bytes_.data() + offsets_[i], 0x5A, sizes_[i]);
        }
    }
    uint8_t * region(size_t i) { return bytes_.data() + offsets_[i]; }
    size_t size(size_t i) const { return sizes_[i]; }
    // Number of guard bytes that changed.
    size_t guards_changed() const {
        size_t changed = 0;
        size_t region = 0;
        for (size_t k = 0; k < bytes_.size(); ++k) {
            if (region < offsets_.size() && k >= offsets_[region] && k < offsets_[region] + sizes_[region]) {
                if (k + 1 == offsets_[region] + sizes_[region]) {
                    ++region;
                }
                continue;
            }
            changed += bytes_[k] != kGuard;
        }
        return changed;
    }
    const std::vector<uint8_t> & all() const { return bytes_; }

   private:
    std::vector<size_t> sizes_;
    std::vector<size_t> offsets_;
    std::vector<uint8_t> bytes_;
};

// Sets or unsets an environment variable for a scope and restores the previous value.
class EnvVar {
   public:
    EnvVar(const char * name, const char * value) : name_(name) {
        if (const char * old = std::getenv(name)) {
            old_ = old;
        }
        if (value) {
            setenv(name, value, 1);
        } else {
            unsetenv(name);
        }
    }
    ~EnvVar() {
        if (old_) {
            setenv(name_, old_->c_str(), 1);
        } else {
            unsetenv(name_);
        }
    }
    EnvVar(const EnvVar &) = delete;
    EnvVar & operator=(const EnvVar &) = delete;

   private:
    const char * name_;
    std::optional<std::string> old_;
};

// One call of the workload on a new backend of `dev` (its own context and buffer), through a
// new session with batching on: for cases that pick devices through GGML's registry (CUDA,
// two GPUs), where the rig's kinds do not reach.
struct DeviceRun {
    sam3d_status status = SAM3D_ERR_INTERNAL;
    sam3d_fallback static_fallback = SAM3D_FALLBACK_COUNT;
    sam3d_counters counters{};
    std::vector<float> out;
};
inline DeviceRun run_on_device(ggml_backend_dev_t dev, const std::vector<float> & a, const std::vector<float> & b) {
    DeviceRun run;
    const int64_t n = static_cast<int64_t>(a.size());
    ggml_backend_t backend = ggml_backend_dev_init(dev, nullptr);
    if (backend == nullptr) {
        ADD_FAILURE() << "ggml_backend_dev_init failed for " << ggml_backend_dev_name(dev);
        return run;
    }
    ggml_init_params p = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true};
    ggml_context * ctx = ggml_init(p);
    const ScaleAdd w = scale_add(ctx, n);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = SAM3D_BATCHING_ON;
    sam3d_session * s = nullptr;
    if (buf == nullptr || sam3d_session_create(backend, &o, &s) != SAM3D_OK) {
        ADD_FAILURE() << "no buffer or no session on " << ggml_backend_dev_name(dev) << ": " << sam3d_last_error();
    } else {
        run.out.assign(a.size(), -1.0f);
        Call c(w, a.data(), b.data(), run.out.data());
        run.status = sam3d_session_run(s, &c.call);
        EXPECT_EQ(run.status, SAM3D_OK) << ggml_backend_dev_name(dev) << ": " << sam3d_last_error();
        run.static_fallback = sam3d_session_static_fallback(s);
        run.counters.struct_size = sizeof run.counters;
        sam3d_session_counters(s, &run.counters);
    }
    sam3d_session_free(s);
    if (buf != nullptr) {
        ggml_backend_buffer_free(buf);
    }
    ggml_free(ctx);
    ggml_backend_free(backend);
    return run;
}

// Every fallback counter is 0, except `reason`'s, which is `n` (reason COUNT: all zero).
inline void expect_fallbacks(const sam3d_counters & k, sam3d_fallback reason = SAM3D_FALLBACK_COUNT,
                             uint64_t n = 0) {
    for (int f = 0; f < SAM3D_FALLBACK_COUNT; ++f) {
        EXPECT_EQ(k.fallbacks[f], f == reason ? n : 0u) << sam3d_fallback_name(static_cast<sam3d_fallback>(f));
    }
}

}  // namespace cases
