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

#ifdef SAM3D_VULKAN
// GGML_VK_ASYNC_USE_TRANSFER_QUEUE (and AMD dGPUs by default) put async uploads on a separate
// transfer queue. GGML 0.20.2 covers them with the event: ggml_backend_vk_event_record first
// submits the transfer context (ggml_vk_submit_transfer_ctx, signalling the transfer
// semaphore), and the compute submission that sets the event and signals its timeline
// semaphore waits on that semaphore (ggml_vk_get_compute_ctx). So a transfers-only queued
// call's event signals only after the transfer queue has read the ring, and the core may hand
// its region out again after that event's wait. This case runs in its own process with the
// variable set (GGML reads it at device start-up; on a single-queue device such as lavapipe it
// has no effect and the case checks the ordinary path): the region of a waited transfers-only
// call is handed out again and overwritten at once, while the upload's bytes stay intact.
TEST(TransferQueue, EventOfATransfersOnlyCallCoversTheTransferQueueReads) {
    ASSERT_NE(std::getenv("GGML_VK_ASYNC_USE_TRANSFER_QUEUE"), nullptr) << "run through CTest";
    rig::Rig r(rig::Kind::Vulkan);
    RIG_REQUIRE(r);
    const size_t big = size_t(16) << 20, other = size_t(15) << 20;
    ggml_tensor * a = r.bytes(static_cast<int64_t>(big), "a");
    ggml_tensor * b = r.bytes(static_cast<int64_t>(other), "b");
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<uint8_t> xa = rig::pattern(big, 1), xb = rig::pattern(other, 2);
    auto queued_upload = [&](ggml_tensor * t, const std::vector<uint8_t> & x, void ** slot) {
        sam3d_slot_request req = {x.size()};
        EXPECT_EQ(sam3d_session_reserve(s, &req, 1, slot), SAM3D_OK) << sam3d_last_error();
        EXPECT_TRUE(sam3d_session_reservation_pinned(s));
        std::memcpy(*slot, x.data(), x.size());
        sam3d_upload u[] = {rig::up(t, *slot, x.size())};
        sam3d_call c{u, 1, nullptr, nullptr, 0, false};
        sam3d_ticket k = 0;
        EXPECT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &k), SAM3D_OK)
            << sam3d_last_error();
        return k;
    };
    void * p1 = nullptr;
    void * p2 = nullptr;
    const sam3d_ticket t1 = queued_upload(a, xa, &p1);
    const sam3d_ticket t2 = queued_upload(b, xb, &p2);
    ASSERT_EQ(sam3d_session_wait(s, t1), SAM3D_OK) << sam3d_last_error();  // an older call: its event
    sam3d_slot_request again = {big};
    void * p3 = nullptr;
    ASSERT_EQ(sam3d_session_reserve(s, &again, 1, &p3), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(p3, p1) << "the waited call's region is handed out again (the ring head has no room)";
    std::memset(p3, 0xEE, big);
    ASSERT_EQ(sam3d_session_wait(s, t2), SAM3D_OK) << sam3d_last_error();
    std::vector<uint8_t> back(big);
    ggml_backend_tensor_get(a, back.data(), 0, big);
    EXPECT_TRUE(back == xa) << "the upload read its ring region after the event signalled";
}
#endif
