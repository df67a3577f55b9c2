// GGML 0.20.2 facts the core and this suite rely on (docs/contract.md, "Backend facts"). A GGML upgrade that
// changes one of them fails here, by name, before it silently changes the core's behaviour.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cases.h"
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
    EXPECT_FALSE(props.caps.events);
    EXPECT_TRUE(props.caps.buffer_from_host_ptr);
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

// The per-backend host buffer facts are keyed on the registry names (docs/contract.md,
// "Backend facts"); the CPU's is not among them (it has no host buffer type).
TEST(GgmlContract, CpuRegistryIsNamedCpu) {
    EXPECT_STREQ(ggml_backend_reg_name(ggml_backend_dev_backend_reg(cpu_device())), "CPU");
}

// ---- CUDA, found through GGML's registry at run time: these cases build in every variant and
// skip where GGML was built without CUDA or the machine has no CUDA device.
namespace {

ggml_backend_reg_t cuda_reg() { return ggml_backend_reg_by_name("CUDA"); }

}  // namespace

// A skip without a device, a failure where SAM3D_REQUIRE_CUDA_DEVICE says one must be there
// (the GPU bundle's run.py sets it for CUDA variants).
#define REQUIRE_CUDA_DEVICE()                                                                     \
    do {                                                                                          \
        const char * why = cuda_reg() == nullptr ? "no CUDA backend registered (GGML built without CUDA)" \
                           : ggml_backend_reg_dev_count(cuda_reg()) == 0 ? "no CUDA device" : nullptr; \
        if (why != nullptr && std::getenv("SAM3D_REQUIRE_CUDA_DEVICE")) FAIL() << why << " (SAM3D_REQUIRE_CUDA_DEVICE is set)"; \
        if (why != nullptr) GTEST_SKIP() << why;                                                  \
    } while (0)

// caps of every device: async, a host buffer and events; no buffer_from_host_ptr (the core never
// needs it). With GGML_CUDA_NO_PINNED unset (the case after it sets it).
TEST(GgmlContractCuda, DeviceCapsAreAsyncHostBufferAndEventsWithoutBufferFromHostPtr) {
    REQUIRE_CUDA_DEVICE();
    cases::EnvVar pinned("GGML_CUDA_NO_PINNED", nullptr);
    for (size_t i = 0; i < ggml_backend_reg_dev_count(cuda_reg()); ++i) {
        ggml_backend_dev_props props{};
        ggml_backend_dev_get_props(ggml_backend_reg_dev_get(cuda_reg(), i), &props);
        EXPECT_TRUE(props.caps.async) << i;
        EXPECT_TRUE(props.caps.host_buffer) << i;
        EXPECT_TRUE(props.caps.events) << i << ": GGML built with GGML_CUDA_NO_PEER_COPY?";
        EXPECT_FALSE(props.caps.buffer_from_host_ptr) << i;
    }
}

// One host buffer type (CUDA_Host) for every device, reporting device 0, of the CPU buffer
// type's alignment, on the registry named CUDA: the fact the core's table keys on.
TEST(GgmlContractCuda, HostBufferTypeIsOneTypeForEveryDeviceReportingDeviceZero) {
    REQUIRE_CUDA_DEVICE();
    EXPECT_STREQ(ggml_backend_reg_name(cuda_reg()), "CUDA");
    ggml_backend_dev_t dev0 = ggml_backend_reg_dev_get(cuda_reg(), 0);
    ggml_backend_buffer_type_t host = ggml_backend_dev_host_buffer_type(dev0);
    ASSERT_NE(host, nullptr);
    EXPECT_STREQ(ggml_backend_buft_name(host), "CUDA_Host");
    EXPECT_EQ(ggml_backend_buft_get_device(host), dev0);
    EXPECT_TRUE(ggml_backend_buft_is_host(host));
    EXPECT_EQ(ggml_backend_buft_get_alignment(host), ggml_backend_buft_get_alignment(ggml_backend_cpu_buffer_type()));
    for (size_t i = 0; i < ggml_backend_reg_dev_count(cuda_reg()); ++i) {
        ggml_backend_dev_t dev = ggml_backend_reg_dev_get(cuda_reg(), i);
        EXPECT_EQ(ggml_backend_dev_host_buffer_type(dev), host) << i;
        EXPECT_EQ(ggml_backend_dev_backend_reg(dev), cuda_reg()) << i;
    }
}

// Pinning works (cudaMallocHost): the allocation is of the host buffer type itself, aligned.
TEST(GgmlContractCuda, HostBufferAllocationHasTheHostBufferType) {
    REQUIRE_CUDA_DEVICE();
    cases::EnvVar pinned("GGML_CUDA_NO_PINNED", nullptr);
    ggml_backend_buffer_type_t host = ggml_backend_dev_host_buffer_type(ggml_backend_reg_dev_get(cuda_reg(), 0));
    ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(host, 1 << 20);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(ggml_backend_buffer_get_type(b), host);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ggml_backend_buffer_get_base(b)) % ggml_backend_buft_get_alignment(host), 0u);
    ggml_backend_buffer_free(b);
}

// GGML_CUDA_NO_PINNED (read at each call, not at start-up) clears caps.host_buffer, so a
// session created with it falls back for no_async_caps; and the host buffer type then hands out
// ordinary CPU memory (GGML's CPU buffer type), which rule 4 refuses as staging.
TEST(GgmlContractCuda, NoPinnedClearsTheHostBufferCapAndAllocatesOrdinaryCpuMemory) {
    REQUIRE_CUDA_DEVICE();
    cases::EnvVar pinned("GGML_CUDA_NO_PINNED", "1");
    ggml_backend_dev_t dev0 = ggml_backend_reg_dev_get(cuda_reg(), 0);
    ggml_backend_dev_props props{};
    ggml_backend_dev_get_props(dev0, &props);
    EXPECT_TRUE(props.caps.async);
    EXPECT_FALSE(props.caps.host_buffer);
    ggml_backend_buffer_type_t host = ggml_backend_dev_host_buffer_type(dev0);
    ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(host, 1 << 20);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(ggml_backend_buffer_get_type(b), ggml_backend_cpu_buffer_type());
    ggml_backend_buffer_free(b);
    const std::vector<float> a = rig::ramp(1000, 1.0f), x = rig::ramp(1000, 5.0f);
    const cases::DeviceRun run = cases::run_on_device(dev0, a, x);
    EXPECT_EQ(run.static_fallback, SAM3D_FALLBACK_NO_ASYNC_CAPS);
    EXPECT_EQ(run.counters.fallbacks[SAM3D_FALLBACK_NO_ASYNC_CAPS], 1u);
    EXPECT_EQ(run.out, cases::expected(a, x));
}

// The core on each CUDA device: the host buffer type reports device 0, and CUDA's pinned memory
// is usable by every device, so every device batches (no foreign_host_buffer). On one GPU this
// is device 0 only; the device suite's two-GPU case covers device 1.
TEST(GgmlContractCuda, EveryDeviceBatchesThroughTheHostBufferType) {
    REQUIRE_CUDA_DEVICE();
    cases::EnvVar pinned("GGML_CUDA_NO_PINNED", nullptr);
    const std::vector<float> a = rig::ramp(4099, 1.0f), x = rig::ramp(4099, 7.0f);
    for (size_t i = 0; i < ggml_backend_reg_dev_count(cuda_reg()); ++i) {
        SCOPED_TRACE("device " + std::to_string(i));
        const cases::DeviceRun run = cases::run_on_device(ggml_backend_reg_dev_get(cuda_reg(), i), a, x);
        EXPECT_EQ(run.static_fallback, SAM3D_FALLBACK_COUNT);
        EXPECT_EQ(run.counters.pinned_batches, 1u);
        cases::expect_fallbacks(run.counters);
        EXPECT_EQ(run.out, cases::expected(a, x));
    }
}

// One in-order queue per backend (the core's in_order_backend fact, A6): an upload enqueued after
// a graph that reads its tensor does not overtake the graph, nor a download between two uploads,
// with no event wait between them; an event record and its synchronize complete all of it. 64
// MiB a tensor, so a second queue would have time to run the later upload first; four rounds of
// the same graph, through GGML's CUDA-graph warm-up, capture and launch paths.
TEST(GgmlContractCuda, OneBackendRunsItsCopiesInSubmissionOrder) {
    REQUIRE_CUDA_DEVICE();
    cases::EnvVar pinned("GGML_CUDA_NO_PINNED", nullptr);
    EXPECT_STREQ(ggml_backend_reg_name(cuda_reg()), "CUDA");
    ggml_backend_dev_t dev0 = ggml_backend_reg_dev_get(cuda_reg(), 0);
    ggml_backend_t backend = ggml_backend_dev_init(dev0, nullptr);
    ASSERT_NE(backend, nullptr);
    ggml_backend_event_t event = ggml_backend_event_new(dev0);
    ASSERT_NE(event, nullptr);
    constexpr int64_t n = int64_t{16} << 20;  // floats
    constexpr size_t bytes = static_cast<size_t>(n) * sizeof(float);
    ggml_init_params ip = {ggml_tensor_overhead() * 4 + ggml_graph_overhead(), nullptr, true};
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
    ggml_set_input(x);
    ggml_tensor * y = ggml_scale(ctx, x, 1.0f);
    ggml_set_output(y);
    ggml_cgraph * graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, y);
    ggml_backend_buffer_t dbuf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    ggml_backend_buffer_t host = ggml_backend_buft_alloc_buffer(ggml_backend_dev_host_buffer_type(dev0), 4 * bytes);
    ASSERT_NE(dbuf, nullptr);
    ASSERT_NE(host, nullptr);
    float * first = static_cast<float *>(ggml_backend_buffer_get_base(host));
    float * second = first + n;
    float * out_y = second + n;
    float * out_x = out_y + n;
    for (int round = 0; round < 4; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        std::fill(first, first + n, 1.0f + static_cast<float>(round));
        std::fill(second, second + n, -7.0f);
        std::fill(out_y, out_y + n, 0.0f);
        std::fill(out_x, out_x + n, 0.0f);
        ggml_backend_tensor_set_async(backend, x, first, 0, bytes);
        ASSERT_EQ(ggml_backend_graph_compute_async(backend, graph), GGML_STATUS_SUCCESS);
        ggml_backend_tensor_get_async(backend, x, out_x, 0, bytes);
        ggml_backend_tensor_set_async(backend, x, second, 0, bytes);  // the next call's upload
        ggml_backend_tensor_get_async(backend, y, out_y, 0, bytes);
        ggml_backend_event_record(event, backend);
        ggml_backend_event_synchronize(event);
        EXPECT_EQ(std::memcmp(out_y, first, bytes), 0) << "the later upload overtook the graph";
        EXPECT_EQ(std::memcmp(out_x, first, bytes), 0) << "the later upload overtook the download";
    }
    ggml_backend_buffer_free(host);
    ggml_backend_buffer_free(dbuf);
    ggml_free(ctx);
    ggml_backend_event_free(event);
    ggml_backend_free(backend);
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
    EXPECT_TRUE(props.caps.events);
    EXPECT_FALSE(props.caps.buffer_from_host_ptr);
}

// The host buffer type is bound to device 0, whatever device asks (its memory is imported into
// device 0 only), on the registry named Vulkan: the fact the core's table keys on.
TEST(GgmlContractVulkan, HostBufferTypeBelongsToDeviceZero) {
    REQUIRE_VK_DEVICE();
    EXPECT_STREQ(ggml_backend_reg_name(ggml_backend_vk_reg()), "Vulkan");
    EXPECT_EQ(ggml_backend_dev_backend_reg(vk_device0()), ggml_backend_vk_reg());
    ggml_backend_buffer_type_t host = ggml_backend_dev_host_buffer_type(vk_device0());
    ASSERT_NE(host, nullptr);
    EXPECT_EQ(host, ggml_backend_vk_host_buffer_type());
    EXPECT_STREQ(ggml_backend_buft_name(host), "Vulkan_Host");
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
