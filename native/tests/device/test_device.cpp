// Device tests (CTest label `device`): the core on a real GPU through each GPU backend built
// (GGML's Vulkan and CUDA backends).
//
// The accepted spec's NVIDIA acceptance (spec/batched-transfers.md): 84 alternating cases and
// 84 pinned batches per backend, on Vulkan also with GGML's timestamp logger
// (GGML_VK_PERF_LOGGER) enabled. Every case reports "skipped: no GPU" when the backend's device
// 0 is absent or, on Vulkan, a CPU implementation (Mesa's llvmpipe/lavapipe); it never passes
// without a GPU, unless a dry run on lavapipe is asked for with SAM3D_DEVICE_TESTS_ANY_VULKAN=1.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "../cases.h"
#include "../rig.h"

namespace {

using rig::Kind;

constexpr int kCases = 84;

// Whether device 0 of the backend is a real GPU, and its description.
bool real_gpu(Kind kind, std::string * description) {
    if (rig::gpu_device_count(kind) < 1) {
        return false;
    }
    *description = rig::gpu_description(kind, 0);
    // SAM3D_DEVICE_TESTS_ANY_VULKAN=1 accepts a CPU implementation too: a dry run of these
    // tests on lavapipe before a GPU run, never a substitute for one.
    if (kind != Kind::Vulkan || std::getenv("SAM3D_DEVICE_TESTS_ANY_VULKAN") != nullptr) {
        return true;
    }
    return description->find("llvmpipe") == std::string::npos && description->find("lavapipe") == std::string::npos;
}

// A skip without the GPU; for CUDA cases a failure where SAM3D_REQUIRE_CUDA_DEVICE says a
// device must be there (the GPU bundle's run.py sets it for CUDA variants).
#define REQUIRE_GPU(kind)                                                                      \
    do {                                                                                       \
        std::string gpu;                                                                      \
        if (!real_gpu(kind, &gpu)) {                                                          \
            if ((kind) == Kind::Cuda && std::getenv("SAM3D_REQUIRE_CUDA_DEVICE")) {           \
                FAIL() << "no CUDA device (SAM3D_REQUIRE_CUDA_DEVICE is set)";                 \
            }                                                                                  \
            GTEST_SKIP() << "skipped: no GPU";                                                 \
        }                                                                                      \
        RecordProperty("device", gpu);                                                         \
    } while (0)

// Element counts spread over the SAM3D profile's transfer sizes: 4 bytes to ~4 MiB, odd
// counts included (geometric steps, then an odd offset).
int64_t elements_for(int i) {
    const double lo = 1.0, hi = 1048576.0;  // F32 elements
    const double t = static_cast<double>(i) / (kCases - 1);
    int64_t n = static_cast<int64_t>(lo * std::pow(hi / lo, t));
    return n + (i % 3);  // 1, 2 or 3 more: odd sizes
}

// out = 2 * a + b over n floats; on and off alternate, inputs alternate between two images.
void alternating_case(Kind kind, int i) {
    rig::Rig r(kind);
    ASSERT_TRUE(r.ok());
    const int64_t n = elements_for(i);
    ggml_tensor * a = r.f32(n, "a");
    ggml_tensor * b = r.f32(n, "b");
    ggml_tensor * out = ggml_add(r.ctx(), ggml_scale(r.ctx(), a, 2.0f), b);
    ggml_cgraph * g = ggml_new_graph(r.ctx());
    ggml_build_forward_expand(g, out);
    r.alloc();
    sam3d_session * on = r.session(SAM3D_BATCHING_ON);
    sam3d_session * off = r.session(SAM3D_BATCHING_OFF);
    ASSERT_TRUE(on && off);
    std::vector<float> img[2][2] = {{rig::ramp(n, 1.0f + static_cast<float>(i)), rig::ramp(n, 3.0f)},
                                    {rig::ramp(n, 7.0f), rig::ramp(n, 11.0f + static_cast<float>(i))}};
    std::vector<float> results[2][2];  // [image][mode]
    for (int step = 0; step < 4; ++step) {
        // Modes alternate every call; images go 0, 1, 1, 0, so each image meets both modes.
        const int image = ((step + 1) / 2) % 2;
        const bool use_on = (step + i) % 2 == 0;
        std::vector<float> & dst = results[image][use_on ? 1 : 0];
        dst.assign(n, -1.0f);
        sam3d_upload ups[] = {rig::up(a, img[image][0].data(), n * 4), rig::up(b, img[image][1].data(), n * 4)};
        sam3d_download downs[] = {rig::down(out, dst.data(), n * 4)};
        sam3d_call c{ups, 2, g, downs, 1, false};
        ASSERT_EQ(sam3d_session_run(use_on ? on : off, &c), SAM3D_OK) << sam3d_last_error();
    }
    for (int image = 0; image < 2; ++image) {
        for (int64_t k = 0; k < n; ++k) {
            ASSERT_EQ(results[image][0][k], 2.0f * img[image][0][k] + img[image][1][k]) << "image " << image << " at " << k;
        }
        EXPECT_EQ(0, std::memcmp(results[image][0].data(), results[image][1].data(), n * 4)) << "image " << image;
    }
    const sam3d_counters k = r.counters(on);
    EXPECT_EQ(k.pinned_batches, 2u);
    EXPECT_EQ(k.async_uploads, 4u);
    EXPECT_EQ(k.async_downloads, 2u);
}

// One call of several uploads and downloads that must go through the pinned path.
void pinned_batch(Kind kind, int i) {
    rig::Rig r(kind);
    ASSERT_TRUE(r.ok());
    const int parts = 2 + i % 5;
    const int64_t n = elements_for(i) / parts + 1;
    std::vector<ggml_tensor *> ins, outs;
    for (int p = 0; p < parts; ++p) {
        ins.push_back(r.f32(n, "in"));
        outs.push_back(ggml_scale(r.ctx(), ins.back(), static_cast<float>(p + 1)));
    }
    ggml_cgraph * g = ggml_new_graph(r.ctx());
    for (ggml_tensor * o : outs) {
        ggml_build_forward_expand(g, o);
    }
    r.alloc();
    sam3d_session * on = r.session(SAM3D_BATCHING_ON);
    sam3d_session * off = r.session(SAM3D_BATCHING_OFF);
    std::vector<std::vector<float>> src(parts), got_on(parts), got_off(parts);
    std::vector<sam3d_upload> ups;
    std::vector<sam3d_download> d_on, d_off;
    for (int p = 0; p < parts; ++p) {
        src[p] = rig::ramp(n, static_cast<float>(p * 13 + i));
        got_on[p].assign(n, -1.0f);
        got_off[p].assign(n, -1.0f);
        ups.push_back(rig::up(ins[p], src[p].data(), n * 4));
        d_on.push_back(rig::down(outs[p], got_on[p].data(), n * 4));
        d_off.push_back(rig::down(outs[p], got_off[p].data(), n * 4));
    }
    sam3d_call c_on{ups.data(), ups.size(), g, d_on.data(), d_on.size(), false};
    sam3d_call c_off{ups.data(), ups.size(), g, d_off.data(), d_off.size(), false};
    ASSERT_EQ(sam3d_session_run(on, &c_on), SAM3D_OK) << sam3d_last_error();
    ASSERT_EQ(sam3d_session_run(off, &c_off), SAM3D_OK) << sam3d_last_error();
    const sam3d_counters k = r.counters(on);
    EXPECT_EQ(k.pinned_batches, 1u) << "the call did not go through the pinned path";
    cases::expect_fallbacks(k);
    EXPECT_EQ(k.async_uploads, static_cast<uint64_t>(parts));
    EXPECT_EQ(k.async_downloads, static_cast<uint64_t>(parts));
    EXPECT_EQ(k.sync_uploads + k.sync_downloads, 0u);
    for (int p = 0; p < parts; ++p) {
        EXPECT_EQ(got_on[p][n - 1], src[p][n - 1] * static_cast<float>(p + 1));
        EXPECT_EQ(0, std::memcmp(got_on[p].data(), got_off[p].data(), n * 4)) << "part " << p;
    }
}

using Case = std::tuple<Kind, int>;
class DeviceAlternating : public testing::TestWithParam<Case> {};
class DevicePinnedBatch : public testing::TestWithParam<Case> {};

// "vulkan_17", "cuda_0": the backend and the case number.
std::string case_name(const testing::TestParamInfo<Case> & info) {
    return std::string(rig::kind_name(std::get<0>(info.param))) + "_" + std::to_string(std::get<1>(info.param));
}

TEST_P(DeviceAlternating, OnOffAlternatingIsByteIdentical) {
    REQUIRE_GPU(std::get<0>(GetParam()));
    alternating_case(std::get<0>(GetParam()), std::get<1>(GetParam()));
}

TEST_P(DevicePinnedBatch, GoesThroughPinnedPathAndIsExact) {
    REQUIRE_GPU(std::get<0>(GetParam()));
    pinned_batch(std::get<0>(GetParam()), std::get<1>(GetParam()));
}

// Two GPUs (docs/contract.md, "Backend facts"): both backends' host buffer types report device
// 0. Vulkan's pinned memory belongs to device 0 only, so a session on device 1 takes the
// synchronous path with foreign_host_buffer counted; CUDA's (cudaMallocHost) is usable by every
// device, so device 1 batches like device 0. Results identical on both devices. Runs for each
// backend GGML registered with two GPUs (Vulkan's CPU implementations do not count); skips on
// one GPU.
TEST(DeviceTwoGpus, DeviceOneUsesTheHostBufferTypeAsItsBackendDecides) {
    const int64_t n = 4096 + 3;
    const std::vector<float> va = rig::ramp(n, 2.0f), vb = rig::ramp(n, 9.0f);
    std::string seen;
    int ran = 0;
    for (const char * name : {"Vulkan", "CUDA"}) {
        ggml_backend_reg_t reg = ggml_backend_reg_by_name(name);
        std::string gpu;
        const size_t gpus = reg == nullptr ? 0
                            : std::strcmp(name, "Vulkan") == 0 && !real_gpu(Kind::Vulkan, &gpu) ? 0
                                                                                 : ggml_backend_reg_dev_count(reg);
        seen += std::string(seen.empty() ? "" : ", ") + name + ": " +
                (reg == nullptr ? std::string("not built") : std::to_string(gpus) + " GPU(s)");
        if (gpus < 2) {
            continue;
        }
        SCOPED_TRACE(name);
        ran += 1;
        const bool every_device = std::strcmp(name, "CUDA") == 0;
        const cases::DeviceRun zero = cases::run_on_device(ggml_backend_reg_dev_get(reg, 0), va, vb);
        const cases::DeviceRun one = cases::run_on_device(ggml_backend_reg_dev_get(reg, 1), va, vb);
        EXPECT_EQ(zero.static_fallback, SAM3D_FALLBACK_COUNT);
        EXPECT_EQ(zero.counters.pinned_batches, 1u);
        if (every_device) {
            EXPECT_EQ(one.static_fallback, SAM3D_FALLBACK_COUNT);
            EXPECT_EQ(one.counters.pinned_batches, 1u);
            cases::expect_fallbacks(one.counters);
        } else {
            EXPECT_EQ(one.static_fallback, SAM3D_FALLBACK_FOREIGN_HOST_BUFFER);
            EXPECT_EQ(one.counters.fallbacks[SAM3D_FALLBACK_FOREIGN_HOST_BUFFER], 1u);
            EXPECT_EQ(one.counters.pinned_batches, 0u);
            EXPECT_EQ(one.counters.sync_uploads, 2u);
        }
        ASSERT_EQ(zero.out.size(), static_cast<size_t>(n));
        EXPECT_EQ(zero.out[n - 1], 2.0f * va[n - 1] + vb[n - 1]);
        EXPECT_EQ(zero.out, one.out);
    }
    if (ran == 0) {
        GTEST_SKIP() << "skipped: one GPU (" << seen << ")";
    }
}

// Duplex on the GPU (docs/contract.md, rule 11). Each queued call uploads a 64 KiB input x; its
// graph first writes a wrong value into its 4 MiB output y (-2 x, repeated), then stalls the
// session's backend for a few hundred microseconds (8 scales of a 64 MiB tensor: few launches, much
// GPU time, so the device runs behind the host with or without CUDA graphs), and last rewrites y
// in place to 2 x; the call downloads y on the second backend. With the handoff dropped the
// download runs before the last node (the wrong value, or an earlier call's); with the graph's wait
// dropped the next call's first nodes rewrite y during the earlier call's 4 MiB download. Either
// should give wrong bytes (designed so; docs/gpu-checks.md says what has run on a GPU). Elementwise
// kernels use no shared memory, so compute-sanitizer racecheck tracks little of them (a chain of
// 128 matrix products per call took the process past the GPU machine's 128 GiB under racecheck,
// docs/gpu-checks.md). Skips where the session gets no second backend.
class DeviceDuplex : public testing::TestWithParam<Kind> {};

TEST_P(DeviceDuplex, AStalledGraphStillPrecedesItsDownloads) {
    const Kind kind = GetParam();
    REQUIRE_GPU(kind);
    constexpr int64_t d = 1024, rows = 16;  // the six calls' 6 x (64 KiB + 4 MiB) fit the staging bound
    constexpr int64_t stall_side = 4096;    // 64 MiB
    constexpr int kStalls = 8;
    constexpr int kCalls = 6;
    rig::Rig r(kind, kStalls + 16);
    ggml_tensor * x = ggml_new_tensor_2d(r.ctx(), GGML_TYPE_F32, d, rows);
    ggml_tensor * shape = ggml_new_tensor_2d(r.ctx(), GGML_TYPE_F32, d, d);
    ggml_tensor * y = ggml_scale(r.ctx(), ggml_repeat(r.ctx(), x, shape), -2.0f);
    ggml_tensor * stall = ggml_new_tensor_2d(r.ctx(), GGML_TYPE_F32, stall_side, stall_side);
    for (int i = 0; i < kStalls; ++i) {
        stall = ggml_scale(r.ctx(), stall, 1.0f);
    }
    ggml_tensor * last = ggml_scale_inplace(r.ctx(), y, -1.0f);  // y's bytes: 2 x
    ggml_cgraph * graph = ggml_new_graph(r.ctx());
    ggml_build_forward_expand(graph, y);  // in this order: y's wrong value, the stall, y's last write
    ggml_build_forward_expand(graph, stall);
    ggml_build_forward_expand(graph, last);
    r.alloc();
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = SAM3D_BATCHING_ON;
    o.duplex = SAM3D_DUPLEX_ON;
    sam3d_session * s = r.session(o);
    ASSERT_NE(s, nullptr);
    if (!sam3d_session_duplex(s)) {
        GTEST_SKIP() << "skipped: the session got no second backend";
    }
    std::vector<std::vector<float>> in(kCalls), out(kCalls, std::vector<float>(static_cast<size_t>(d * d), -1.0f));
    std::vector<sam3d_ticket> t(kCalls, 0);
    for (int c = 0; c < kCalls; ++c) {
        in[c].resize(static_cast<size_t>(d * rows));
        for (size_t k = 0; k < in[c].size(); ++k) {
            in[c][k] = static_cast<float>((k * 7 + static_cast<size_t>(c) * 131) % 1000);
        }
        const sam3d_upload up = rig::up(x, in[c].data(), ggml_nbytes(x));
        const sam3d_download down = rig::down(y, out[c].data(), ggml_nbytes(y));
        const sam3d_call call{&up, 1, graph, &down, 1, false};
        ASSERT_EQ(sam3d_session_submit(s, &call, SAM3D_SUBMIT_QUEUED, &t[c]), SAM3D_OK) << sam3d_last_error();
    }
    for (int c = kCalls - 1; c >= 0; --c) {
        ASSERT_EQ(sam3d_session_wait(s, t[c]), SAM3D_OK) << sam3d_last_error();
    }
    for (int c = 0; c < kCalls; ++c) {
        size_t wrong = 0;
        for (size_t k = 0; k < out[c].size(); ++k) {
            wrong += out[c][k] != 2.0f * in[c][k % in[c].size()];
        }
        EXPECT_EQ(wrong, 0u) << "call " << c << ": floats of y not 2 x its input";
    }
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.duplex_calls, static_cast<uint64_t>(kCalls));
    EXPECT_EQ(k.pinned_batches, static_cast<uint64_t>(kCalls));
}

INSTANTIATE_TEST_SUITE_P(Backends, DeviceDuplex, testing::ValuesIn(rig::gpu_kinds()), rig::param_name);

INSTANTIATE_TEST_SUITE_P(Cases, DeviceAlternating, testing::Combine(testing::ValuesIn(rig::gpu_kinds()),
                                                                    testing::Range(0, kCases)), case_name);
INSTANTIATE_TEST_SUITE_P(Cases, DevicePinnedBatch, testing::Combine(testing::ValuesIn(rig::gpu_kinds()),
                                                                    testing::Range(0, kCases)), case_name);

}  // namespace
