// API versions (docs/contract.md): sam3d_counters and sam3d_session_options carry the caller's
// struct_size; the library reads and writes only the bytes both know. A caller built against an
// older (smaller) header is played here by a struct that is a prefix of today's, allocated to
// exactly its size (ASan in cpu-asan reports any access past it) and followed by guard bytes
// (every variant checks them).
#include <cstdlib>
#include <cstring>
#include <memory>

#include "cases.h"

using rig::Kind;
using rig::Rig;

namespace {

// A caller's struct of `size` bytes, heap-allocated to exactly that size plus `guard` bytes of
// 0xAB after it, the first `size` bytes filled with `fill`.
struct CallerBytes {
    CallerBytes(size_t size, size_t guard, uint8_t fill) : size_(size), guard_(guard), bytes_(new uint8_t[size + guard]) {
        std::memset(bytes_.get(), fill, size);
        std::memset(bytes_.get() + size, 0xAB, guard);
        std::memcpy(bytes_.get(), &size, sizeof size);
    }
    template <class T>
    T * as() { return reinterpret_cast<T *>(bytes_.get()); }
    uint8_t * data() { return bytes_.get(); }
    bool guard_intact() const {
        for (size_t i = 0; i < guard_; ++i) {
            if (bytes_[size_ + i] != 0xAB) return false;
        }
        return true;
    }

   private:
    size_t size_;
    size_t guard_;
    std::unique_ptr<uint8_t[]> bytes_;
};

// A session with counters worth reading: one staged call on the CPU backend's seam.
struct Counted {
    Rig r{Kind::CpuStaged};
    sam3d_session * s = nullptr;
    Counted() {
        cases::ScaleAdd w = cases::scale_add(r, 32);
        r.alloc();
        s = r.session(SAM3D_BATCHING_ON);
        const std::vector<float> a = rig::ramp(32, 1.0f), b = rig::ramp(32, 2.0f);
        std::vector<float> dst(32);
        EXPECT_EQ(cases::run(s, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
    }
};

}  // namespace

static_assert(SAM3D_FALLBACK_COUNT <= SAM3D_FALLBACK_CAPACITY, "every reason has its entry");
static_assert(offsetof(sam3d_counters, struct_size) == 0 && offsetof(sam3d_session_options, struct_size) == 0,
              "struct_size comes first");

TEST(ApiVersions, CountersOfAnOlderCallerAreWrittenUpToItsStructSizeOnly) {
    Counted c;
    const sam3d_counters full = c.r.counters(c.s);
    ASSERT_GT(full.calls, 0u);
    ASSERT_GT(full.bytes_uploaded, 0u);
    // An older header whose counters ended after bytes_downloaded.
    const size_t older = offsetof(sam3d_counters, pinned_batches);
    CallerBytes caller(older, 64, 0x5A);
    ASSERT_EQ(sam3d_session_counters(c.s, caller.as<sam3d_counters>()), SAM3D_OK) << sam3d_last_error();
    EXPECT_TRUE(caller.guard_intact()) << "the library wrote past the caller's struct_size";
    sam3d_counters seen{};
    std::memcpy(&seen, caller.data(), older);
    EXPECT_EQ(seen.struct_size, older) << "struct_size is the caller's";
    EXPECT_EQ(seen.calls, full.calls);
    EXPECT_EQ(seen.async_uploads, full.async_uploads);
    EXPECT_EQ(seen.bytes_uploaded, full.bytes_uploaded);
    EXPECT_EQ(seen.bytes_downloaded, full.bytes_downloaded);
}

TEST(ApiVersions, CountersOfANewerCallerGetZeroesPastWhatTheLibraryKnows) {
    Counted c;
    const sam3d_counters full = c.r.counters(c.s);
    for (const size_t newer : {sizeof(sam3d_counters) + 1, sizeof(sam3d_counters) + 24}) {
        CallerBytes caller(newer, 16, 0x5A);
        ASSERT_EQ(sam3d_session_counters(c.s, caller.as<sam3d_counters>()), SAM3D_OK) << sam3d_last_error();
        EXPECT_TRUE(caller.guard_intact());
        EXPECT_EQ(caller.as<sam3d_counters>()->struct_size, newer);
        EXPECT_EQ(caller.as<sam3d_counters>()->staging_allocations, full.staging_allocations);
        for (size_t i = sizeof(sam3d_counters); i < newer; ++i) {
            EXPECT_EQ(caller.data()[i], 0) << "byte " << i << " of " << newer
                                           << " is a field this library does not know: it reads 0";
        }
    }
}

// The smallest struct a caller may pass is its struct_size alone (sizeof(size_t) bytes): accepted,
// and nothing is written past it (the generated campaign's write_extensible boundary).
TEST(ApiVersions, CountersOfOnlyAStructSizeAreAcceptedAndNothingElseIsWritten) {
    Counted c;
    CallerBytes caller(sizeof(size_t), 32, 0x5A);
    ASSERT_EQ(sam3d_session_counters(c.s, caller.as<sam3d_counters>()), SAM3D_OK) << sam3d_last_error();
    EXPECT_TRUE(caller.guard_intact()) << "the library wrote past the caller's struct_size";
    size_t size = 0;
    std::memcpy(&size, caller.data(), sizeof size);
    EXPECT_EQ(size, sizeof(size_t));
}

TEST(ApiVersions, CountersWithoutAStructSizeAreRefusedUntouched) {
    Counted c;
    for (size_t bad : {size_t{0}, sizeof(size_t) - 1}) {
        sam3d_counters k{};
        std::memset(&k, 0x5A, sizeof k);
        k.struct_size = bad;
        EXPECT_EQ(sam3d_session_counters(c.s, &k), SAM3D_ERR_INVALID_ARGUMENT);
        EXPECT_CONTAINS(sam3d_last_error(), "counters.struct_size is " + std::to_string(bad));
        EXPECT_CONTAINS(sam3d_last_error(), "sizeof(sam3d_counters)");
        EXPECT_EQ(k.calls, 0x5A5A5A5A5A5A5A5Aull) << "a refused read writes nothing";
    }
    EXPECT_EQ(sam3d_session_counters(c.s, nullptr), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(sam3d_session_counters(nullptr, nullptr), SAM3D_ERR_INVALID_ARGUMENT);
}

TEST(ApiVersions, FallbackEntriesPastTheKnownReasonsStayZero) {
    Rig r(Kind::Cpu);  // every batching call falls back: no_async_caps
    cases::ScaleAdd w = cases::scale_add(r, 32);
    r.alloc();
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    const std::vector<float> a = rig::ramp(32, 1.0f), b = rig::ramp(32, 2.0f);
    std::vector<float> dst(32);
    ASSERT_EQ(cases::run(s, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.fallbacks[SAM3D_FALLBACK_NO_ASYNC_CAPS], 1u);
    for (int i = SAM3D_FALLBACK_COUNT; i < SAM3D_FALLBACK_CAPACITY; ++i) {
        EXPECT_EQ(k.fallbacks[i], 0u) << "fallbacks[" << i << "]";
    }
}

TEST(ApiVersions, DefaultOptionsCarryTheirSize) {
    EXPECT_EQ(sam3d_session_default_options().struct_size, sizeof(sam3d_session_options));
    EXPECT_STRNE(SAM3D_CORE_VERSION, "");
}

TEST(ApiVersions, OptionsOfAnOlderCallerAreReadUpToItsStructSizeOnly) {
    Rig r(Kind::Cpu);
    // An older header whose options held struct_size alone: batching takes its default (from
    // the environment), and nothing past the caller's bytes is read (ASan, cpu-asan).
    const size_t older = offsetof(sam3d_session_options, batching);
    for (const char * env : {"1", "0"}) {
        cases::EnvVar var("SAM3D_BATCHED_TRANSFERS", env);
        CallerBytes caller(older, 0, 0);
        sam3d_session * s = nullptr;
        ASSERT_EQ(sam3d_session_create(r.backend(), caller.as<sam3d_session_options>(), &s), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(sam3d_session_batching(s), std::strcmp(env, "1") == 0) << "SAM3D_BATCHED_TRANSFERS=" << env;
        sam3d_session_free(s);
    }
}

TEST(ApiVersions, OptionsOfANewerCallerAreRefusedOnlyWhenItsNewerFieldsAreSet) {
    Rig r(Kind::Cpu);
    const size_t newer = sizeof(sam3d_session_options) + 16;
    {
        CallerBytes caller(newer, 0, 0);
        caller.as<sam3d_session_options>()->batching = SAM3D_BATCHING_ON;
        sam3d_session * s = nullptr;
        ASSERT_EQ(sam3d_session_create(r.backend(), caller.as<sam3d_session_options>(), &s), SAM3D_OK) << sam3d_last_error();
        EXPECT_TRUE(sam3d_session_batching(s)) << "the fields both know are read";
        sam3d_session_free(s);
    }
    {
        CallerBytes caller(newer, 0, 0);
        caller.as<sam3d_session_options>()->batching = SAM3D_BATCHING_ON;
        caller.data()[newer - 1] = 1;
        sam3d_session * s = reinterpret_cast<sam3d_session *>(&r);
        EXPECT_EQ(sam3d_session_create(r.backend(), caller.as<sam3d_session_options>(), &s), SAM3D_ERR_INVALID_ARGUMENT);
        EXPECT_EQ(s, nullptr);
        EXPECT_CONTAINS(sam3d_last_error(), "options: byte " + std::to_string(newer - 1) + " of its " + std::to_string(newer));
        EXPECT_CONTAINS(sam3d_last_error(), SAM3D_CORE_VERSION);
    }
    for (size_t bad : {size_t{0}, sizeof(size_t) - 1}) {
        sam3d_session_options o = sam3d_session_default_options();
        o.struct_size = bad;
        sam3d_session * s = nullptr;
        EXPECT_EQ(sam3d_session_create(r.backend(), &o, &s), SAM3D_ERR_INVALID_ARGUMENT);
        EXPECT_CONTAINS(sam3d_last_error(), "options.struct_size is " + std::to_string(bad));
    }
}
