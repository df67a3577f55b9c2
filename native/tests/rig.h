// Test rig for the batched-transfer core: real GGML backends, real tensors, and the seam.
//
// Backends a test runs on (value-parameterized):
//   cpu         the real CPU backend, real GGML (no async caps: batching falls back)
//   cpu_staged  the real CPU backend dressed as an async-capable device (fake_async::seam(),
//               native/testing/sam3d_fake_async.h): the staged path runs (GGML performs async
//               set/get synchronously), so ASan and UBSan cover the staging code in cpu-asan
//   vulkan      the real Vulkan backend, device 0 (lavapipe without a GPU), when built
//   cuda        the real CUDA backend, device 0, when built; skipped without an NVIDIA GPU
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "sam3d/testing.h"
#include "sam3d/transfer.h"
#include "sam3d_fake_async.h"
#ifdef SAM3D_VULKAN
#include "ggml-vulkan.h"
#endif
#ifdef SAM3D_CUDA
#include "ggml-cuda.h"
#endif

namespace rig {

enum class Kind { Cpu, CpuStaged, Vulkan, Cuda };

inline const char * kind_name(Kind k) {
    switch (k) {
        case Kind::Cpu: return "cpu";
        case Kind::CpuStaged: return "cpu_staged";
        case Kind::Vulkan: return "vulkan";
        case Kind::Cuda: return "cuda";
    }
    return "?";
}

inline bool is_gpu(Kind k) { return k == Kind::Vulkan || k == Kind::Cuda; }

// The GPU backends this binary was built with.
inline std::vector<Kind> gpu_kinds() {
    std::vector<Kind> k;
#ifdef SAM3D_VULKAN
    k.push_back(Kind::Vulkan);
#endif
#ifdef SAM3D_CUDA
    k.push_back(Kind::Cuda);
#endif
    return k;
}

inline std::vector<Kind> kinds() {
    std::vector<Kind> k = {Kind::Cpu, Kind::CpuStaged};
    for (Kind g : gpu_kinds()) k.push_back(g);
    return k;
}

// The kinds whose sessions take the staged path: the seam's CPU and the GPU backends.
inline std::vector<Kind> staged_kinds() {
    std::vector<Kind> k = {Kind::CpuStaged};
    for (Kind g : gpu_kinds()) k.push_back(g);
    return k;
}

// Devices of a GPU backend (0 when it is not built; CUDA without a driver or GPU: 0).
inline int gpu_device_count(Kind k) {
#ifdef SAM3D_VULKAN
    if (k == Kind::Vulkan) return ggml_backend_vk_get_device_count();
#endif
#ifdef SAM3D_CUDA
    if (k == Kind::Cuda) return ggml_backend_cuda_get_device_count();
#endif
    (void)k;
    return 0;
}

// The GPU backend on device `dev` (nullptr when it is not built or fails).
inline ggml_backend_t gpu_init(Kind k, int dev) {
#ifdef SAM3D_VULKAN
    if (k == Kind::Vulkan) return ggml_backend_vk_init(static_cast<size_t>(dev));
#endif
#ifdef SAM3D_CUDA
    if (k == Kind::Cuda) return ggml_backend_cuda_init(dev);
#endif
    (void)k;
    (void)dev;
    return nullptr;
}

// The device's description as its backend gives it ("" when it is not built).
inline std::string gpu_description(Kind k, int dev) {
    char desc[256] = {0};
#ifdef SAM3D_VULKAN
    if (k == Kind::Vulkan) ggml_backend_vk_get_device_description(dev, desc, sizeof desc);
#endif
#ifdef SAM3D_CUDA
    if (k == Kind::Cuda) ggml_backend_cuda_get_device_description(dev, desc, sizeof desc);
#endif
    (void)k;
    (void)dev;
    return desc;
}

inline void PrintTo(Kind k, std::ostream * os) { *os << kind_name(k); }

inline std::string param_name(const testing::TestParamInfo<Kind> & info) { return kind_name(info.param); }

inline sam3d_ggml_seam real_seam() { return sam3d_testing_default_seam(); }

// A backend plus a no_alloc context whose tensors are allocated in one backend buffer.
class Rig {
   public:
    explicit Rig(Kind kind, size_t max_tensors = 64) : kind_(kind) {
        if (is_gpu(kind)) {
            if (gpu_device_count(kind) > 0) {
                backend_ = gpu_init(kind, 0);
            }
        } else {
            backend_ = ggml_backend_cpu_init();
        }
        ggml_init_params p = {ggml_tensor_overhead() * max_tensors + ggml_graph_overhead(), nullptr, true};
        ctx_ = ggml_init(p);
        seam_ = kind == Kind::CpuStaged ? fake_async::seam() : real_seam();
    }
    ~Rig() {
        free_sessions();
        if (buffer_) {
            ggml_backend_buffer_free(buffer_);
        }
        ggml_free(ctx_);
        if (backend_) {
            ggml_backend_free(backend_);
        }
    }
    Rig(const Rig &) = delete;
    Rig & operator=(const Rig &) = delete;

    bool ok() const { return backend_ != nullptr; }
    Kind kind() const { return kind_; }
    ggml_backend_t backend() const { return backend_; }
    ggml_context * ctx() const { return ctx_; }
    // The seam sessions of this rig get; tests may change entries before session().
    sam3d_ggml_seam & seam() { return seam_; }

    ggml_tensor * tensor(ggml_type type, int64_t n, const char * name) {
        ggml_tensor * t = ggml_new_tensor_1d(ctx_, type, n);
        ggml_set_name(t, name);
        return t;
    }
    ggml_tensor * bytes(int64_t n, const char * name) { return tensor(GGML_TYPE_I8, n, name); }
    ggml_tensor * f32(int64_t n, const char * name) { return tensor(GGML_TYPE_F32, n, name); }

    // Allocates every tensor created so far in one buffer of the backend's default type, every
    // byte set to kFill: a case that reads back bytes no call wrote (a gap, a tensor around a
    // view) reads defined memory (compute-sanitizer's initcheck, docs/gpu-checks.md).
    static constexpr uint8_t kFill = 0xa5;
    void alloc() {
        buffer_ = ggml_backend_alloc_ctx_tensors(ctx_, backend_);
        ASSERT_NE(buffer_, nullptr);
        ggml_backend_buffer_clear(buffer_, kFill);
    }

    sam3d_session * session(sam3d_batching batching) {
        sam3d_session_options o = sam3d_session_default_options();
        o.batching = batching;
        return session(o);
    }
    sam3d_session * session(const sam3d_session_options & o) {
        sam3d_session * s = nullptr;
        const sam3d_status st = sam3d_testing_session_create(backend_, &o, &seam_, &s);
        EXPECT_EQ(st, SAM3D_OK) << sam3d_last_error();
        if (s) {
            sessions_.push_back(s);
        }
        return s;
    }

    // Frees the sessions made so far.
    void free_sessions() {
        for (sam3d_session * s : sessions_) {
            sam3d_session_free(s);
        }
        sessions_.clear();
    }

    sam3d_counters counters(sam3d_session * s) {
        sam3d_counters c{};
        c.struct_size = sizeof c;
        sam3d_session_counters(s, &c);
        return c;
    }

   private:
    Kind kind_;
    ggml_backend_t backend_ = nullptr;
    ggml_context * ctx_ = nullptr;
    ggml_backend_buffer_t buffer_ = nullptr;
    sam3d_ggml_seam seam_{};
    std::vector<sam3d_session *> sessions_;
};

// Deterministic bytes: pattern(seed, i) differs for neighbouring seeds and positions.
inline std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    uint32_t x = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        v[i] = static_cast<uint8_t>(x);
    }
    return v;
}

// Floats that are exact under scaling by 2 and adding (small integers).
inline std::vector<float> ramp(size_t n, float start) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
        v[i] = start + static_cast<float>(i % 1000);
    }
    return v;
}

inline sam3d_upload up(ggml_tensor * t, const void * src, size_t size, size_t offset = 0) {
    return sam3d_upload{t, src, offset, size};
}
inline sam3d_download down(const ggml_tensor * t, void * dst, size_t size, size_t offset = 0) {
    return sam3d_download{t, dst, offset, size};
}

}  // namespace rig

// A Vulkan case without a device fails (lavapipe stands in for a GPU), unless
// SAM3D_ALLOW_NO_VULKAN_DEVICE is set. A CUDA case without a device is skipped, saying why (CUDA
// has no CPU implementation, so machines without an NVIDIA GPU run the CPU cases only), unless
// SAM3D_REQUIRE_CUDA_DEVICE is set (on a GPU machine): then it fails.
#define RIG_REQUIRE(r)                                                                                   \
    do {                                                                                                 \
        if (!(r).ok() && (r).kind() == rig::Kind::Cuda) {                                                \
            if (std::getenv("SAM3D_REQUIRE_CUDA_DEVICE")) FAIL() << "no CUDA device (SAM3D_REQUIRE_CUDA_DEVICE is set)"; \
            GTEST_SKIP() << "no CUDA device: ggml_backend_cuda_get_device_count() is 0 (no NVIDIA GPU or driver)"; \
        }                                                                                                \
        if (!(r).ok()) {                                                                                 \
            if (std::getenv("SAM3D_ALLOW_NO_VULKAN_DEVICE")) GTEST_SKIP() << "no Vulkan device";       \
            FAIL() << "no Vulkan device: without a GPU, install mesa-vulkan-drivers and set "           \
                      "GGML_VK_VISIBLE_DEVICES=0 (lavapipe)";                                            \
        }                                                                                                \
    } while (0)
