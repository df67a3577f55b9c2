// Rules 3 and 4: every fallback reason, decided in order (first match wins), counted once per
// call, with exact results on the synchronous path.
#include "cases.h"
#include "probe.h"
#include "rig.h"

using rig::Kind;
using rig::Rig;

namespace {

// A device handle that is not the session's (only compared, never dereferenced).
char other_device_storage;
ggml_backend_dev_t other_device() { return reinterpret_cast<ggml_backend_dev_t>(&other_device_storage); }

void props_without_async(ggml_backend_dev_t dev, ggml_backend_dev_props * props) {
    fake_async::props(dev, props);
    props->caps.async = false;
}
void props_without_host_buffer(ggml_backend_dev_t dev, ggml_backend_dev_props * props) {
    fake_async::props(dev, props);
    props->caps.host_buffer = false;
}
ggml_backend_buffer_type_t no_host_buft(ggml_backend_dev_t) { return nullptr; }

// A host buffer type of the CPU device whose buffers are the probe's ordinary memory (mode 2, so
// of that very type: GGML's CPU_Mapped, the type of ggml_backend_cpu_buffer_from_ptr's buffers)
// and whose alignment is 64: the probe's alloc_offset then sets a base that is, or is not,
// aligned to it.
ggml_backend_buffer_type_t mapped_host_buft(ggml_backend_dev_t) { return fake_async::cpu_mapped_buffer_type(); }
ggml_backend_dev_t mapped_buft_device(ggml_backend_buffer_type_t buft) {
    return buft == fake_async::cpu_mapped_buffer_type() ? fake_async::cpu_device() : nullptr;
}
size_t alignment_64(ggml_backend_buffer_type_t) { return 64; }

class Fallbacks : public testing::Test {
   protected:
    static constexpr int64_t kN = 2048;
    void SetUp() override { probe::reset(); }

    // Builds the workload on a cpu_staged rig whose seam the test has adjusted in `tweak`.
    template <class F>
    sam3d_session * make(F tweak, int64_t n = kN) {
        r_ = std::make_unique<Rig>(Kind::CpuStaged);
        probe::record_all(r_->seam());
        tweak(r_->seam());
        w_ = cases::scale_add(*r_, n);
        r_->alloc();
        return r_->session(SAM3D_BATCHING_ON);
    }
    // Runs `calls` calls with distinct inputs and checks each result.
    void run_exact(sam3d_session * s, int calls) {
        for (int call = 0; call < calls; ++call) {
            const std::vector<float> a = rig::ramp(static_cast<size_t>(w_.n), static_cast<float>(call + 1));
            const std::vector<float> b = rig::ramp(static_cast<size_t>(w_.n), static_cast<float>(40 * call));
            std::vector<float> dst(static_cast<size_t>(w_.n), -1.0f);
            ASSERT_EQ(cases::run(s, w_, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
            ASSERT_EQ(dst, cases::expected(a, b)) << "call " << call;
        }
    }
    // The counters of a session whose `calls` calls all fell back for `reason`.
    void expect_fallbacks(sam3d_session * s, sam3d_fallback reason, uint64_t calls) {
        const sam3d_counters k = r_->counters(s);
        cases::expect_fallbacks(k, reason, calls);
        EXPECT_EQ(k.pinned_batches, 0u);
        EXPECT_EQ(k.async_uploads + k.async_downloads, 0u);
        EXPECT_EQ(k.sync_uploads, 2 * calls);
        EXPECT_EQ(k.sync_downloads, calls);
        EXPECT_EQ(k.staging_allocations, 0u);
        EXPECT_EQ(k.staging_bytes, 0u);
        for (const std::string & e : probe::names()) {
            EXPECT_TRUE(e == "set" || e == "get" || e == "compute") << "the synchronous path called " << e;
        }
    }

    std::unique_ptr<Rig> r_;
    cases::ScaleAdd w_;
};

}  // namespace

// The real CPU backend (caps.async false, no host buffer type) falls back for no_async_caps,
// decided at session creation.
TEST(FallbackReal, CpuBackendFallsBackForNoAsyncCaps) {
    Rig r(Kind::Cpu);
    cases::ScaleAdd w = cases::scale_add(r, 500);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    EXPECT_TRUE(sam3d_session_batching(s));
    EXPECT_EQ(sam3d_session_static_fallback(s), SAM3D_FALLBACK_NO_ASYNC_CAPS);
    EXPECT_EQ(sam3d_session_staging_alignment(s), 0u) << "no host buffer type";
    const std::vector<float> a = rig::ramp(500, 1.0f), b = rig::ramp(500, 2.0f);
    std::vector<float> dst(500);
    for (int call = 0; call < 3; ++call) {
        ASSERT_EQ(cases::run(s, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
    }
    EXPECT_EQ(dst, cases::expected(a, b));
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_NO_ASYNC_CAPS], 3u);
    EXPECT_EQ(k.pinned_batches, 0u);
    EXPECT_EQ(k.sync_uploads, 6u);
}

TEST_F(Fallbacks, StagedSeamHasNoStaticFallback) {
    sam3d_session * s = make([](sam3d_ggml_seam &) {});
    EXPECT_EQ(sam3d_session_static_fallback(s), SAM3D_FALLBACK_COUNT);
    EXPECT_EQ(sam3d_session_staging_alignment(s), ggml_backend_buft_get_alignment(ggml_backend_cpu_buffer_type()));
    run_exact(s, 1);
    EXPECT_EQ(r_->counters(s).pinned_batches, 1u);
}

TEST_F(Fallbacks, PropsWithoutAsyncFallBackForNoAsyncCaps) {
    sam3d_session * s = make([](sam3d_ggml_seam & m) { m.dev_get_props = props_without_async; });
    EXPECT_EQ(sam3d_session_static_fallback(s), SAM3D_FALLBACK_NO_ASYNC_CAPS);
    run_exact(s, 2);
    expect_fallbacks(s, SAM3D_FALLBACK_NO_ASYNC_CAPS, 2);
}

TEST_F(Fallbacks, PropsWithoutHostBufferFallBackForNoAsyncCaps) {
    sam3d_session * s = make([](sam3d_ggml_seam & m) { m.dev_get_props = props_without_host_buffer; });
    EXPECT_EQ(sam3d_session_static_fallback(s), SAM3D_FALLBACK_NO_ASYNC_CAPS);
    run_exact(s, 2);
    expect_fallbacks(s, SAM3D_FALLBACK_NO_ASYNC_CAPS, 2);
}

TEST_F(Fallbacks, MissingHostBufferTypeFallsBackForNoAsyncCaps) {
    sam3d_session * s = make([](sam3d_ggml_seam & m) { m.dev_host_buffer_type = no_host_buft; });
    EXPECT_EQ(sam3d_session_static_fallback(s), SAM3D_FALLBACK_NO_ASYNC_CAPS);
    EXPECT_EQ(sam3d_session_staging_alignment(s), 0u);
    run_exact(s, 1);
    expect_fallbacks(s, SAM3D_FALLBACK_NO_ASYNC_CAPS, 1);
}

// A host buffer type without a device (GGML's CPU buffer type reports NULL) is not the
// session device's.
TEST_F(Fallbacks, HostBufferTypeWithoutDeviceIsForeign) {
    sam3d_session * s = make([](sam3d_ggml_seam & m) { m.buft_get_device = probe::buft_device_override; });
    EXPECT_EQ(sam3d_session_static_fallback(s), SAM3D_FALLBACK_FOREIGN_HOST_BUFFER);
    run_exact(s, 3);
    expect_fallbacks(s, SAM3D_FALLBACK_FOREIGN_HOST_BUFFER, 3);
}

// GGML's Vulkan host buffer type belongs to device 0: a session on another device must not
// stage through it.
TEST_F(Fallbacks, HostBufferTypeOfAnotherDeviceIsForeign) {
    probe::get().buft_device_result = other_device();
    sam3d_session * s = make([](sam3d_ggml_seam & m) { m.buft_get_device = probe::buft_device_override; });
    EXPECT_EQ(sam3d_session_static_fallback(s), SAM3D_FALLBACK_FOREIGN_HOST_BUFFER);
    run_exact(s, 2);
    expect_fallbacks(s, SAM3D_FALLBACK_FOREIGN_HOST_BUFFER, 2);
}

// Backend facts: a session on one device whose host buffer type reports another device (GGML's
// CUDA and Vulkan host buffer types both report device 0, so this is every device but 0 on a
// machine with two GPUs), decided on one device through the seam. The backend's fact decides:
// CUDA's pinned memory is usable by every device (the calls batch), Vulkan's by device 0 only,
// and a backend the facts do not list (GGML's ROCm build of the CUDA backend) keeps the
// conservative decision. A host buffer type without a device is foreign whatever the backend.
TEST_F(Fallbacks, HostBufferTypeOfAnotherDeviceIsUsableOnlyWhereTheBackendPinsForEveryDevice) {
    struct Case {
        const char * backend;
        ggml_backend_dev_t reported;
        sam3d_fallback want;
    };
    const Case cases_[] = {
        {"CUDA", other_device(), SAM3D_FALLBACK_COUNT},
        {"Vulkan", other_device(), SAM3D_FALLBACK_FOREIGN_HOST_BUFFER},
        {"ROCm", other_device(), SAM3D_FALLBACK_FOREIGN_HOST_BUFFER},
        {"CUDA", nullptr, SAM3D_FALLBACK_FOREIGN_HOST_BUFFER},
    };
    for (const Case & c : cases_) {
        SCOPED_TRACE(std::string(c.backend) + (c.reported ? ", another device" : ", no device"));
        probe::reset();
        probe::get().buft_device_result = c.reported;
        probe::get().reg_name_result = c.backend;
        sam3d_session * s = make([](sam3d_ggml_seam & m) {
            m.buft_get_device = probe::buft_device_override;
            m.reg_name = probe::reg_name_override;
        });
        EXPECT_EQ(sam3d_session_static_fallback(s), c.want);
        run_exact(s, 2);
        if (c.want == SAM3D_FALLBACK_COUNT) {
            const sam3d_counters k = r_->counters(s);
            cases::expect_fallbacks(k);
            EXPECT_EQ(k.pinned_batches, 2u);
            EXPECT_EQ(k.async_uploads, 4u);
            EXPECT_EQ(k.sync_uploads, 0u);
        } else {
            expect_fallbacks(s, c.want, 2);
        }
    }
}

TEST_F(Fallbacks, NoAsyncCapsWinsOverForeignHostBuffer) {
    sam3d_session * s = make([](sam3d_ggml_seam & m) {
        m.dev_get_props = props_without_async;
        m.buft_get_device = probe::buft_device_override;
    });
    EXPECT_EQ(sam3d_session_static_fallback(s), SAM3D_FALLBACK_NO_ASYNC_CAPS);
    run_exact(s, 1);
    expect_fallbacks(s, SAM3D_FALLBACK_NO_ASYNC_CAPS, 1);
}

// Static reasons win over oversized: a 36 MiB call on a foreign-host-buffer session counts
// foreign_host_buffer.
TEST_F(Fallbacks, ForeignHostBufferWinsOverOversized) {
    sam3d_session * s = make([](sam3d_ggml_seam & m) { m.buft_get_device = probe::buft_device_override; },
                             (12 << 20) / 4);
    run_exact(s, 1);
    expect_fallbacks(s, SAM3D_FALLBACK_FOREIGN_HOST_BUFFER, 1);
}

// Oversized is decided before any allocation: a failing allocator is never asked.
TEST_F(Fallbacks, OversizedWinsOverPinnedUnavailable) {
    probe::get().alloc_mode = 1;
    sam3d_session * s = make([](sam3d_ggml_seam &) {}, (12 << 20) / 4);
    run_exact(s, 1);
    expect_fallbacks(s, SAM3D_FALLBACK_OVERSIZED, 1);
    EXPECT_EQ(probe::get().alloc_calls, 0);
}

// Rule 4: the staging allocation fails (NULL): counted fallback, synchronous and exact.
TEST_F(Fallbacks, FailedStagingAllocationFallsBackPinnedUnavailable) {
    sam3d_session * s = make([](sam3d_ggml_seam &) {});
    probe::get().alloc_mode = 1;
    run_exact(s, 2);
    expect_fallbacks(s, SAM3D_FALLBACK_PINNED_UNAVAILABLE, 2);
    EXPECT_EQ(probe::get().alloc_calls, 2) << "each call tries again";
}

// Rule 4: the staging allocation comes back as ordinary CPU memory (a buffer of another type,
// as GGML's Vulkan host buffer type does when pinning fails): a counted fallback, never a
// pinned batch, exact results.
TEST_F(Fallbacks, OrdinaryCpuMemoryIsAFallbackNotAPinnedBatch) {
    sam3d_session * s = make([](sam3d_ggml_seam &) {});
    probe::get().alloc_mode = 2;
    run_exact(s, 2);
    expect_fallbacks(s, SAM3D_FALLBACK_PINNED_UNAVAILABLE, 2);
    EXPECT_EQ(probe::get().alloc_calls, 2);
}

// Rule 4: a staging allocation of the host buffer type itself whose base is not aligned to the
// type's alignment A is not pinned staging either. No GGML 0.20.2 host buffer type hands one out
// (CPU, Vulkan and CUDA bases are aligned), so the seam builds it: a host buffer type of
// alignment 64 whose buffers are CPU memory 32 bytes past a 64-byte boundary. The same type
// with an aligned base batches.
TEST_F(Fallbacks, StagingBaseNotAlignedToTheHostBufferTypeIsAFallbackNotAPinnedBatch) {
    sam3d_session * s = make([](sam3d_ggml_seam & m) {
        m.dev_host_buffer_type = mapped_host_buft;
        m.buft_get_device = mapped_buft_device;
        m.buft_get_alignment = alignment_64;
    });
    ASSERT_EQ(sam3d_session_static_fallback(s), SAM3D_FALLBACK_COUNT);
    ASSERT_EQ(sam3d_session_staging_alignment(s), 64u);
    probe::get().alloc_mode = 2;
    probe::get().alloc_offset = 32;
    run_exact(s, 2);
    expect_fallbacks(s, SAM3D_FALLBACK_PINNED_UNAVAILABLE, 2);
    EXPECT_EQ(probe::get().alloc_calls, 2) << "each call tries again";
    probe::get().alloc_offset = 64;
    sam3d_session_reset_counters(s);
    run_exact(s, 1);
    const sam3d_counters k = r_->counters(s);
    cases::expect_fallbacks(k);
    EXPECT_EQ(k.pinned_batches, 1u);
    EXPECT_EQ(k.staging_allocations, 1u);
}

// The pinned_unavailable fallback is per call: once allocation works again, calls batch.
TEST_F(Fallbacks, PinnedUnavailableIsPerCallAndBatchingResumes) {
    sam3d_session * s = make([](sam3d_ggml_seam &) {});
    probe::get().alloc_mode = 2;
    run_exact(s, 1);
    probe::get().alloc_mode = 0;
    run_exact(s, 2);
    const sam3d_counters k = r_->counters(s);
    EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_PINNED_UNAVAILABLE], 1u);
    EXPECT_EQ(k.pinned_batches, 2u);
    EXPECT_EQ(k.async_uploads, 4u);
    EXPECT_EQ(k.sync_uploads, 2u);
    EXPECT_EQ(k.staging_allocations, 1u);
}

// Growth that fails releases the old allocation (the session holds none) and falls back; a
// later call that fits allocates again.
TEST_F(Fallbacks, FailedGrowthFallsBackAndHoldsNoStaging) {
    sam3d_session * s = make([](sam3d_ggml_seam &) {}, 4096);
    ggml_tensor * small = w_.a;
    const std::vector<uint8_t> src = rig::pattern(100, 3);
    sam3d_upload u[] = {rig::up(small, src.data(), 100)};
    sam3d_call c{u, 1, nullptr, nullptr, 0, false};
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(r_->counters(s).staging_allocations, 1u);
    probe::get().alloc_mode = 1;
    run_exact(s, 1);  // needs 3 * 16 KiB: more than held, allocation fails
    sam3d_counters k = r_->counters(s);
    EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_PINNED_UNAVAILABLE], 1u);
    EXPECT_EQ(k.staging_bytes, 0u);
    probe::get().alloc_mode = 0;
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    k = r_->counters(s);
    EXPECT_EQ(k.staging_allocations, 2u);
    EXPECT_EQ(k.pinned_batches, 2u);
}

// Batching off never counts a fallback, whatever the capabilities.
TEST_F(Fallbacks, BatchingOffNeverCountsAFallback) {
    probe::get().alloc_mode = 1;
    sam3d_session * on = make([](sam3d_ggml_seam & m) { m.buft_get_device = probe::buft_device_override; });
    (void)on;
    sam3d_session * s = r_->session(SAM3D_BATCHING_OFF);
    run_exact(s, 2);
    const sam3d_counters k = r_->counters(s);
    cases::expect_fallbacks(k);
    EXPECT_EQ(k.sync_uploads, 4u);
}
