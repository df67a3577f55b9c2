// GGML 0.20.2 facts the core and this suite rely on (docs/contract.md, "Backend facts"). A GGML upgrade that
// changes one of them fails here, by name, before it silently changes the core's behaviour.
#include "rig.h"

namespace {

ggml_backend_dev_t cpu_device() { return ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU); }

bool abort_now(void *) { return true; }

}  // namespace

// No async tensor IO on CPU: batching on the real CPU backend falls back for no_async_caps.
TEST(GgmlContract, CpuDeviceReportsNoAsyncCaps) {
    ASSERT_NE(cpu_device(), nullptr);
    ggml_backend_dev_props props{};
    ggml_backend_dev_get_props(cpu_device(), &props);
    EXPECT_FALSE(props.caps.async);
    EXPECT_FALSE(props.caps.host_buffer);
}

TEST(GgmlContract, CpuDeviceHasNoHostBufferType) {
    EXPECT_EQ(ggml_backend_dev_host_buffer_type(cpu_device()), nullptr);
}

// The cpu_staged rig relies on this (ggml-backend.cpp: ".device = NULL // FIXME").
TEST(GgmlContract, CpuBufferTypeHasNoDevice) {
    EXPECT_EQ(ggml_backend_buft_get_device(ggml_backend_cpu_buffer_type()), nullptr);
    EXPECT_TRUE(ggml_backend_buft_is_host(ggml_backend_cpu_buffer_type()));
}

// The pinned_unavailable "ordinary CPU memory" case relies on buffer_from_ptr buffers having a
// buffer type of their own.
TEST(GgmlContract, CpuBufferFromPtrHasAnotherBufferType) {
    alignas(64) static uint8_t mem[4096];
    ggml_backend_buffer_t b = ggml_backend_cpu_buffer_from_ptr(mem, sizeof(mem));
    ASSERT_NE(b, nullptr);
    EXPECT_NE(ggml_backend_buffer_get_type(b), ggml_backend_cpu_buffer_type());
    EXPECT_EQ(ggml_backend_buffer_get_base(b), static_cast<void *>(mem));
    EXPECT_TRUE(ggml_backend_buffer_is_host(b));
    ggml_backend_buffer_free(b);
}

// Async set/get on CPU fall back to synchronous copies: the data is visible at once, without a
// synchronize.
TEST(GgmlContract, CpuTensorSetAsyncIsASynchronousSet) {
    rig::Rig r(rig::Kind::Cpu);
    ggml_tensor * t = r.bytes(4097, "t");
    r.alloc();
    const std::vector<uint8_t> src = rig::pattern(4097, 5);
    ggml_backend_tensor_set_async(r.backend(), t, src.data(), 0, 4097);
    EXPECT_EQ(0, std::memcmp(t->data, src.data(), 4097));
    std::vector<uint8_t> dst(4097, 0);
    ggml_backend_tensor_get_async(r.backend(), t, dst.data(), 0, 4097);
    EXPECT_EQ(dst, src);
}

// The fault tests' CPU failure: an abort callback makes graph compute return a non-success
// status (GGML_STATUS_ABORTED).
TEST(GgmlContract, CpuAbortCallbackMakesGraphComputeFail) {
    rig::Rig r(rig::Kind::Cpu);
    ggml_tensor * a = r.f32(16, "a");
    ggml_tensor * out = ggml_scale(r.ctx(), a, 2.0f);
    ggml_cgraph * g = ggml_new_graph(r.ctx());
    ggml_build_forward_expand(g, out);
    r.alloc();
    EXPECT_EQ(ggml_backend_graph_compute(r.backend(), g), GGML_STATUS_SUCCESS);
    ggml_backend_cpu_set_abort_callback(r.backend(), abort_now, nullptr);
    EXPECT_EQ(ggml_backend_graph_compute(r.backend(), g), GGML_STATUS_ABORTED);
}

// The CPU backend can use any host buffer (so no CPU-only foreign tensor exists).
TEST(GgmlContract, CpuBackendUsesHostBuffers) {
    rig::Rig r(rig::Kind::Cpu);
    EXPECT_TRUE(ggml_backend_supports_buft(r.backend(), ggml_backend_cpu_buffer_type()));
}

#ifdef SAM3D_VULKAN
namespace {
ggml_backend_dev_t vk_device0() {
    return ggml_backend_vk_get_device_count() > 0 ? ggml_backend_reg_dev_get(ggml_backend_vk_reg(), 0) : nullptr;
}
}  // namespace

#define REQUIRE_VK_DEVICE()                                                                             \
    do {                                                                                                \
        rig::Rig probe_rig(rig::Kind::Vulkan);                                                          \
        RIG_REQUIRE(probe_rig);                                                                         \
    } while (0)

TEST(GgmlContractVulkan, DeviceReportsAsyncAndHostBufferCaps) {
    REQUIRE_VK_DEVICE();
    ggml_backend_dev_props props{};
    ggml_backend_dev_get_props(vk_device0(), &props);
    EXPECT_TRUE(props.caps.async);
    EXPECT_TRUE(props.caps.host_buffer);
}

// The host buffer type is bound to device 0, whatever device asks (the spec's warning).
TEST(GgmlContractVulkan, HostBufferTypeBelongsToDeviceZero) {
    REQUIRE_VK_DEVICE();
    ggml_backend_buffer_type_t host = ggml_backend_dev_host_buffer_type(vk_device0());
    ASSERT_NE(host, nullptr);
    EXPECT_EQ(host, ggml_backend_vk_host_buffer_type());
    EXPECT_EQ(ggml_backend_buft_get_device(host), ggml_backend_reg_dev_get(ggml_backend_vk_reg(), 0));
    EXPECT_TRUE(ggml_backend_buft_is_host(host));
    for (size_t i = 0; i < ggml_backend_reg_dev_count(ggml_backend_vk_reg()); ++i) {
        EXPECT_EQ(ggml_backend_dev_host_buffer_type(ggml_backend_reg_dev_get(ggml_backend_vk_reg(), i)), host) << i;
    }
}

TEST(GgmlContractVulkan, CpuBufferTypeIsNotTheVulkanHostBufferType) {
    REQUIRE_VK_DEVICE();
    alignas(64) static uint8_t mem[256];
    ggml_backend_buffer_t b = ggml_backend_cpu_buffer_from_ptr(mem, sizeof(mem));
    EXPECT_NE(ggml_backend_buffer_get_type(b), ggml_backend_vk_host_buffer_type());
    EXPECT_NE(ggml_backend_cpu_buffer_type(), ggml_backend_vk_host_buffer_type());
    ggml_backend_buffer_free(b);
}

TEST(GgmlContractVulkan, BackendCannotUseCpuBuffers) {
    rig::Rig r(rig::Kind::Vulkan);
    RIG_REQUIRE(r);
    EXPECT_FALSE(ggml_backend_supports_buft(r.backend(), ggml_backend_cpu_buffer_type()));
    EXPECT_TRUE(ggml_backend_supports_buft(r.backend(), ggml_backend_get_default_buffer_type(r.backend())));
}

// Where pinning works (lavapipe, real GPUs), the host buffer type's allocation is its own type.
TEST(GgmlContractVulkan, HostBufferAllocationHasTheHostBufferType) {
    REQUIRE_VK_DEVICE();
    ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(ggml_backend_vk_host_buffer_type(), 1 << 20);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(ggml_backend_buffer_get_type(b), ggml_backend_vk_host_buffer_type());
    ggml_backend_buffer_free(b);
}
#endif
