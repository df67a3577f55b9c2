// Rule 1: malformed requests are refused before anything is submitted, with a status naming
// the bad entry; the caller's output buffers stay byte-for-byte unchanged. Also the
// SAM3D_BATCHED_TRANSFERS environment decision.
#include "cases.h"
#include "probe.h"
#include "rig.h"

using rig::Kind;
using rig::Rig;

namespace {

// Runs `c` on a fresh session of each mode and checks the rejection: the status, a message
// that starts with the status name and names `entry`, counters that show nothing submitted,
// no seam entry reached, and every download destination unchanged.
void expect_rejected(Rig & r, const sam3d_call & c, sam3d_status want, const std::string & entry) {
    for (sam3d_batching mode : {SAM3D_BATCHING_ON, SAM3D_BATCHING_OFF}) {
        SCOPED_TRACE(mode == SAM3D_BATCHING_ON ? "batching on" : "batching off");
        probe::reset();
        sam3d_session * s = r.session(mode);
        ASSERT_NE(s, nullptr);
        std::vector<std::vector<uint8_t>> before;
        for (size_t i = 0; i < c.n_downloads && c.downloads; ++i) {
            const sam3d_download & d = c.downloads[i];
            const uint8_t * p = static_cast<const uint8_t *>(d.dst);
            const bool wraps = reinterpret_cast<uintptr_t>(p) > UINTPTR_MAX - d.size;  // not memory: never read
            before.push_back(p && !wraps ? std::vector<uint8_t>(p, p + std::min<size_t>(d.size, 1 << 16))
                                         : std::vector<uint8_t>());
        }
        EXPECT_EQ(sam3d_session_run(s, &c), want) << sam3d_last_error();
        const std::string msg = sam3d_last_error();
        EXPECT_STARTS_WITH(msg, std::string(sam3d_status_name(want)) + ":");
        EXPECT_CONTAINS(msg, entry);
        const sam3d_counters k = r.counters(s);
        EXPECT_EQ(k.calls, 0u);
        EXPECT_EQ(k.rejected_calls, 1u);
        EXPECT_EQ(k.failed_calls, 0u);
        EXPECT_EQ(k.async_uploads + k.sync_uploads + k.async_downloads + k.sync_downloads, 0u);
        EXPECT_EQ(k.bytes_uploaded + k.bytes_downloaded, 0u);
        EXPECT_EQ(k.pinned_batches, 0u);
        cases::expect_fallbacks(k);
        EXPECT_EQ(k.staging_allocations, 0u);
        EXPECT_TRUE(probe::events().empty()) << "a seam entry ran: " << probe::events().front().what;
        EXPECT_EQ(probe::get().alloc_calls, 0);
        for (size_t i = 0; i < before.size(); ++i) {
            const uint8_t * p = static_cast<const uint8_t *>(c.downloads[i].dst);
            if (p && !before[i].empty()) {
                EXPECT_EQ(0, std::memcmp(p, before[i].data(), before[i].size())) << "downloads[" << i << "].dst changed";
            }
        }
    }
}

// A valid request (2 uploads, graph, 2 downloads) that each test breaks in one place.
struct Request {
    explicit Request(Rig & r) : w(cases::scale_add(r, kN)) {
        a = rig::ramp(kN, 1.0f);
        b = rig::ramp(kN, 2.0f);
        out0.assign(kN, 12345.0f);
        out1.assign(kN, 54321.0f);
    }
    void alloc(Rig & r) {
        r.alloc();
        ups[0] = rig::up(w.a, a.data(), kN * 4);
        ups[1] = rig::up(w.b, b.data(), kN * 4);
        downs[0] = rig::down(w.out, out0.data(), kN * 4);
        downs[1] = rig::down(w.out, out1.data(), 16, 8);
    }
    sam3d_call call() { return sam3d_call{ups, 2, w.graph, downs, 2, false}; }

    static constexpr int64_t kN = 64;
    cases::ScaleAdd w;
    std::vector<float> a, b, out0, out1;
    sam3d_upload ups[2];
    sam3d_download downs[2];
};

class Validation : public testing::TestWithParam<Kind> {
   protected:
    void SetUp() override {
        r_ = std::make_unique<Rig>(GetParam());
        if (!r_->ok()) {
            return;
        }
        probe::record_all(r_->seam());
        req_ = std::make_unique<Request>(*r_);
    }
    Rig & r() { return *r_; }
    Request & req() { return *req_; }
    std::unique_ptr<Rig> r_;
    std::unique_ptr<Request> req_;
};

}  // namespace

TEST_P(Validation, ValidRequestIsAcceptedAndExact) {
    RIG_REQUIRE(r());
    req().alloc(r());
    sam3d_session * s = r().session(SAM3D_BATCHING_ON);
    sam3d_call c = req().call();
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    EXPECT_STREQ(sam3d_last_error(), "");
    EXPECT_EQ(req().out0, cases::expected(req().a, req().b));
    EXPECT_EQ(0, std::memcmp(req().out1.data(), reinterpret_cast<const uint8_t *>(req().out0.data()) + 8, 16));
    EXPECT_EQ(req().out1[4], 54321.0f) << "bytes past downloads[1]'s 16 bytes are not written";
    EXPECT_EQ(r().counters(s).rejected_calls, 0u);
}

TEST_P(Validation, NullUploadTensorIsRejectedNamingTheEntry) {
    RIG_REQUIRE(r());
    req().alloc(r());
    req().ups[1].tensor = nullptr;
    expect_rejected(r(), req().call(), SAM3D_ERR_NULL_TENSOR, "uploads[1].tensor");
}

TEST_P(Validation, NullDownloadTensorIsRejectedNamingTheEntry) {
    RIG_REQUIRE(r());
    req().alloc(r());
    req().downs[1].tensor = nullptr;
    expect_rejected(r(), req().call(), SAM3D_ERR_NULL_TENSOR, "downloads[1].tensor");
}

TEST_P(Validation, NullSourcePointerIsRejectedNamingTheEntry) {
    RIG_REQUIRE(r());
    req().alloc(r());
    req().ups[1].src = nullptr;
    expect_rejected(r(), req().call(), SAM3D_ERR_NULL_POINTER, "uploads[1].src");
}

TEST_P(Validation, NullDestinationPointerIsRejectedNamingTheEntry) {
    RIG_REQUIRE(r());
    req().alloc(r());
    req().downs[0].dst = nullptr;
    expect_rejected(r(), req().call(), SAM3D_ERR_NULL_POINTER, "downloads[0].dst");
}

TEST_P(Validation, UnallocatedTensorIsRejectedNamingTheEntry) {
    RIG_REQUIRE(r());
    req().alloc(r());
    ggml_tensor * late = r().f32(Request::kN, "late");  // created after the buffer: no data
    req().ups[1].tensor = late;
    expect_rejected(r(), req().call(), SAM3D_ERR_UNALLOCATED_TENSOR, "uploads[1].tensor ('late')");
}

TEST_P(Validation, ExtentPastTheEndIsRejected) {
    RIG_REQUIRE(r());
    req().alloc(r());
    req().ups[1].offset = 4;  // 4 + nbytes > nbytes
    expect_rejected(r(), req().call(), SAM3D_ERR_EXTENT, "uploads[1].offset");
}

// The message names the bad field: an offset at the tensor's end is not past it, so a byte
// from there names the offset and the size together (the generated campaign's `offset >
// nbytes` boundaries); an offset one byte further names the offset alone, a size one byte over
// the tensor's bytes the size alone.
TEST_P(Validation, AnOffsetAtTheEndNamesTheOffsetAndTheSize) {
    RIG_REQUIRE(r());
    req().alloc(r());
    req().ups[0].offset = Request::kN * 4;
    req().ups[0].size = 1;
    expect_rejected(r(), req().call(), SAM3D_ERR_EXTENT,
                    "uploads[0].offset + uploads[0].size: [256, 256+1) is not inside the 256 bytes");
    req().ups[0].offset = Request::kN * 4 + 1;
    expect_rejected(r(), req().call(), SAM3D_ERR_EXTENT, "uploads[0].offset: [257, 257+1) is not inside");
    req().ups[0].offset = 0;
    req().ups[0].size = Request::kN * 4 + 1;  // the size alone one byte past the end
    expect_rejected(r(), req().call(), SAM3D_ERR_EXTENT, "uploads[0].size: [0, 0+257) is not inside");
    EXPECT_EQ(std::string(sam3d_last_error()).find("uploads[0].offset"), std::string::npos) << sam3d_last_error();
}

TEST_P(Validation, DownloadExtentPastTheEndIsRejected) {
    RIG_REQUIRE(r());
    req().alloc(r());
    req().downs[1].offset = Request::kN * 4 - 15;  // 16 bytes from nbytes - 15
    expect_rejected(r(), req().call(), SAM3D_ERR_EXTENT, "downloads[1].offset");
}

TEST_P(Validation, ZeroSizeIsRejected) {
    RIG_REQUIRE(r());
    req().alloc(r());
    req().downs[1].size = 0;
    expect_rejected(r(), req().call(), SAM3D_ERR_EXTENT, "downloads[1].size");
}

TEST_P(Validation, OffsetPlusSizeOverflowIsRejected) {
    RIG_REQUIRE(r());
    req().alloc(r());
    req().ups[0].offset = SIZE_MAX - 3;
    req().ups[0].size = 8;  // offset + size wraps to 4
    expect_rejected(r(), req().call(), SAM3D_ERR_EXTENT, "uploads[0].offset");
    req().ups[0].offset = 8;
    req().ups[0].size = SIZE_MAX - 3;  // wraps to 4; the size alone is past the end: the bad field
    expect_rejected(r(), req().call(), SAM3D_ERR_EXTENT, "uploads[0].size");
}

// A host range that wraps around the address space is refused before anything reads it: the
// pointers are near UINTPTR_MAX, never memory, so only validation stands between them and a
// read (upload) or a write (download).
TEST_P(Validation, HostRangeWrappingTheAddressSpaceIsRejected) {
    RIG_REQUIRE(r());
    req().alloc(r());
    const size_t size = Request::kN * 4;
    req().ups[1].src = reinterpret_cast<const void *>(UINTPTR_MAX - size + 2);  // its last byte would be at 0
    expect_rejected(r(), req().call(), SAM3D_ERR_EXTENT, "uploads[1].size: [uploads[1].src, +256) wraps around");
    req().ups[1].src = req().b.data();
    req().downs[0].dst = reinterpret_cast<void *>(UINTPTR_MAX - 100);
    expect_rejected(r(), req().call(), SAM3D_ERR_EXTENT, "downloads[0].size: [downloads[0].dst, +256) wraps around");
}

// A host range that ends exactly at the top of the address space does not wrap: rule 1's
// extent check passes it (the generated campaign's boundary), so a zero-copy submit refuses it
// only as not a slot. Nothing is read: the pointer is never memory.
TEST_P(Validation, AHostRangeEndingAtTheTopOfTheAddressSpaceDoesNotWrap) {
    RIG_REQUIRE(r());
    req().alloc(r());
    sam3d_session * s = r().session(SAM3D_BATCHING_ON);
    const size_t size = Request::kN * 4;
    sam3d_upload top[] = {rig::up(req().w.a, reinterpret_cast<const void *>(UINTPTR_MAX - size), size)};
    sam3d_call c{top, 1, nullptr, nullptr, 0, false};
    EXPECT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "uploads[0].src is not a slot of the current reservation");
    top[0].src = reinterpret_cast<const void *>(UINTPTR_MAX - size + 1);  // its last byte at UINTPTR_MAX: wraps
    EXPECT_EQ(sam3d_session_submit(s, &c, SAM3D_SUBMIT_ZERO_COPY, nullptr), SAM3D_ERR_EXTENT);
    EXPECT_CONTAINS(sam3d_last_error(), "uploads[0].size: [uploads[0].src, +256) wraps around");
}

// A view made before its source was allocated, whose source is then allocated on its own
// (ggml_backend_tensor_alloc; the context allocators would initialize the view too), has its
// source's buffer but no data: GGML's blocking set/get assert on it ("tensor not allocated").
// The core refuses it as unallocated.
TEST_P(Validation, ViewWhoseSourceWasAllocatedWithoutItIsRejectedAsUnallocated) {
    RIG_REQUIRE(r());
    req().alloc(r());
    ggml_tensor * src = r().f32(Request::kN, "src");
    ggml_tensor * v = ggml_view_1d(r().ctx(), src, Request::kN, 0);
    ggml_set_name(v, "v");
    ggml_backend_buffer_type_t buft = ggml_backend_get_default_buffer_type(r().backend());
    ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(buft, ggml_backend_buft_get_alloc_size(buft, src));
    ASSERT_NE(buf, nullptr);
    ASSERT_EQ(ggml_backend_tensor_alloc(buf, src, ggml_backend_buffer_get_base(buf)), GGML_STATUS_SUCCESS);
    ASSERT_EQ(v->data, nullptr);
    ASSERT_EQ(v->buffer, nullptr);
    ASSERT_EQ(v->view_src->buffer, buf);
    req().ups[1].tensor = v;
    expect_rejected(r(), req().call(), SAM3D_ERR_UNALLOCATED_TENSOR, "uploads[1].tensor ('v') is not allocated");
    req().ups[1].tensor = req().w.b;
    req().downs[1] = rig::down(v, req().out1.data(), 16);
    expect_rejected(r(), req().call(), SAM3D_ERR_UNALLOCATED_TENSOR, "downloads[1].tensor ('v') is not allocated");
    ggml_backend_buffer_free(buf);
}

TEST_P(Validation, TransposedViewIsRejectedAsNotContiguous) {
    RIG_REQUIRE(r());
    ggml_tensor * m = ggml_new_tensor_2d(r().ctx(), GGML_TYPE_F32, 8, 4);
    ggml_set_name(m, "m");
    ggml_tensor * mt = ggml_transpose(r().ctx(), m);
    req().alloc(r());
    ASSERT_NE(mt->data, nullptr);
    req().downs[1] = rig::down(mt, req().out1.data(), 16);
    expect_rejected(r(), req().call(), SAM3D_ERR_NOT_CONTIGUOUS, "downloads[1].tensor");
}

TEST_P(Validation, PermutedViewIsRejectedAsNotContiguous) {
    RIG_REQUIRE(r());
    ggml_tensor * m = ggml_new_tensor_3d(r().ctx(), GGML_TYPE_F32, 4, 3, 2);
    ggml_set_name(m, "m3");
    ggml_tensor * mp = ggml_permute(r().ctx(), m, 0, 2, 1, 3);
    req().alloc(r());
    ASSERT_NE(mp->data, nullptr);
    req().ups[0] = rig::up(mp, req().a.data(), 16);
    expect_rejected(r(), req().call(), SAM3D_ERR_NOT_CONTIGUOUS, "uploads[0].tensor");
}

TEST_P(Validation, OverlappingOutputsAreRejected) {
    RIG_REQUIRE(r());
    req().alloc(r());
    req().downs[1].dst = reinterpret_cast<uint8_t *>(req().out0.data()) + 40;  // inside downloads[0]'s dst
    expect_rejected(r(), req().call(), SAM3D_ERR_OVERLAPPING_OUTPUTS, "downloads[0].dst and downloads[1].dst");
}

// Host destinations are compared to the byte (the generated campaign's boundaries of the overlap
// check and of its sort): one shared byte is an overlap; destinations one byte apart, given
// in descending order, are adjacent and exact.
TEST_P(Validation, OutputsSharingOneByteOverlapAndAdjacentOnesDoNot) {
    RIG_REQUIRE(r());
    req().alloc(r());
    std::vector<uint8_t> host(2 * Request::kN * 4, 0);
    req().downs[0].dst = host.data();
    req().downs[1].dst = host.data() + Request::kN * 4 - 1;  // downloads[0]'s last byte
    expect_rejected(r(), req().call(), SAM3D_ERR_OVERLAPPING_OUTPUTS, "downloads[0].dst and downloads[1].dst");

    std::vector<uint8_t> dst(17, 0xEE);
    sam3d_download adjacent[] = {rig::down(req().w.out, dst.data() + 1, 16, 0), rig::down(req().w.out, dst.data(), 1, 64)};
    sam3d_call c{req().ups, 2, req().w.graph, adjacent, 2, false};
    sam3d_session * s = r().session(SAM3D_BATCHING_ON);
    ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    std::vector<uint8_t> out(Request::kN * 4);
    ggml_backend_tensor_get(req().w.out, out.data(), 0, out.size());
    EXPECT_EQ(dst[0], out[64]);
    EXPECT_EQ(0, std::memcmp(dst.data() + 1, out.data(), 16));
}

// Many uploads of the same bytes (more than std::sort sorts by insertion): refused as
// overlapping, naming a pair of them; the check's sort orders ranges strictly (the generated
// campaign's `<=` in its comparator, which std::sort may follow past the array's start).
TEST_P(Validation, FortyUploadsOfTheSameBytesAreRejectedAsOverlapping) {
    RIG_REQUIRE(r());
    req().alloc(r());
    std::vector<sam3d_upload> ups(40, rig::up(req().w.a, req().a.data(), 16, 32));
    sam3d_call c{ups.data(), ups.size(), nullptr, nullptr, 0, false};
    expect_rejected(r(), c, SAM3D_ERR_OVERLAPPING_UPLOADS, "] and uploads[");
}

TEST_P(Validation, OverlappingUploadsToOneTensorAreRejected) {
    RIG_REQUIRE(r());
    req().alloc(r());
    req().ups[1] = rig::up(req().w.a, req().b.data(), 32, 100);  // [100, 132) inside uploads[0]'s [0, 256)
    expect_rejected(r(), req().call(), SAM3D_ERR_OVERLAPPING_UPLOADS, "uploads[0] and uploads[1]");
}

TEST_P(Validation, OverlappingUploadsThroughViewsOfOneBufferAreRejected) {
    RIG_REQUIRE(r());
    ggml_tensor * big = r().f32(64, "big");
    ggml_tensor * v1 = ggml_view_1d(r().ctx(), big, 16, 0);
    ggml_tensor * v2 = ggml_view_1d(r().ctx(), big, 16, 15 * sizeof(float));  // shares big[15]
    req().alloc(r());
    sam3d_upload ups[] = {req().ups[0], rig::up(v2, req().a.data(), 64), rig::up(v1, req().b.data(), 64)};
    sam3d_call c{ups, 3, nullptr, req().downs, 2, false};
    expect_rejected(r(), c, SAM3D_ERR_OVERLAPPING_UPLOADS, "uploads[1] and uploads[2]");
}

// The counterpart of the overlap rules: adjacent device ranges, and an input whose host memory
// is also an output's destination, are valid and exact.
TEST_P(Validation, AdjacentUploadsAndInputAliasingAnOutputAreAccepted) {
    RIG_REQUIRE(r());
    req().alloc(r());
    const int64_t n = Request::kN;
    std::vector<float> io = req().b;  // b's input, then out's destination
    sam3d_upload ups[] = {rig::up(req().w.a, req().a.data(), n * 2), rig::up(req().w.a, req().a.data() + n / 2, n * 2, n * 2),
                          rig::up(req().w.b, io.data(), n * 4)};
    sam3d_download downs[] = {rig::down(req().w.out, io.data(), n * 4)};
    sam3d_call c{ups, 3, req().w.graph, downs, 1, false};
    for (sam3d_batching mode : {SAM3D_BATCHING_ON, SAM3D_BATCHING_OFF}) {
        io = req().b;
        sam3d_session * s = r().session(mode);
        ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(io, cases::expected(req().a, req().b));
    }
}

TEST_P(Validation, NullArraysWithCountsAreInvalidArguments) {
    RIG_REQUIRE(r());
    req().alloc(r());
    sam3d_call c = req().call();
    c.uploads = nullptr;
    expect_rejected(r(), c, SAM3D_ERR_INVALID_ARGUMENT, "call.uploads");
    c = req().call();
    c.downloads = nullptr;
    expect_rejected(r(), c, SAM3D_ERR_INVALID_ARGUMENT, "call.downloads");
    // One descriptor is a count (the generated campaign's `> 0` boundaries), and the message
    // names the array that is NULL with a count.
    c = req().call();
    c.uploads = nullptr;
    c.n_uploads = 1;
    expect_rejected(r(), c, SAM3D_ERR_INVALID_ARGUMENT, "call.uploads is NULL with n_uploads > 0");
    c = req().call();
    c.downloads = nullptr;
    c.n_downloads = 1;
    expect_rejected(r(), c, SAM3D_ERR_INVALID_ARGUMENT, "call.downloads is NULL with n_downloads > 0");
    c.uploads = nullptr;
    c.n_uploads = 0;
    expect_rejected(r(), c, SAM3D_ERR_INVALID_ARGUMENT, "call.downloads is NULL with n_downloads > 0");
    sam3d_session * s = r().session(SAM3D_BATCHING_ON);
    EXPECT_EQ(sam3d_session_run(s, nullptr), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "call is NULL");
    EXPECT_EQ(sam3d_session_run(nullptr, &c), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "session is NULL");
}

// Every refusal of a submit sets *ticket to 0 (a caller that waits on it is told it is unknown),
// and a refusal of the arguments (call, flags, ticket) is not a call: rejected_calls stays.
TEST_P(Validation, EveryRefusedSubmitZeroesTheTicket) {
    RIG_REQUIRE(r());
    req().alloc(r());
    sam3d_session * s = r().session(SAM3D_BATCHING_ON);
    sam3d_call good = req().call();
    sam3d_upload bad_ups[2] = {req().ups[0], req().ups[1]};
    bad_ups[1].src = nullptr;
    sam3d_call bad = good;
    bad.uploads = bad_ups;
    struct Case {
        sam3d_session * session;
        const sam3d_call * call;
        unsigned flags;
        const char * message;
        bool counted;
    };
    for (const Case & k : {Case{s, &good, 16u, "flags has unknown bits", false},
                           Case{s, &good, SAM3D_SUBMIT_KEEP_SLOTS, "KEEP_SLOTS needs SAM3D_SUBMIT_ZERO_COPY", false},
                           Case{s, &good, SAM3D_SUBMIT_SLOT_TAILS | SAM3D_SUBMIT_QUEUED,
                                "SLOT_TAILS needs SAM3D_SUBMIT_ZERO_COPY", false},
                           Case{s, &good, SAM3D_SUBMIT_SLOT_TAILS, "SLOT_TAILS needs SAM3D_SUBMIT_ZERO_COPY", false},
                           Case{s, nullptr, SAM3D_SUBMIT_QUEUED, "call is NULL", false},
                           Case{nullptr, &good, SAM3D_SUBMIT_QUEUED, "session is NULL", false},
                           Case{s, &bad, SAM3D_SUBMIT_QUEUED, "uploads[1].src", true},
                           Case{s, &good, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, "is not a slot", true}}) {
        SCOPED_TRACE(k.message);
        const uint64_t before = r().counters(s).rejected_calls;
        sam3d_ticket t = 77;
        EXPECT_NE(sam3d_session_submit(k.session, k.call, k.flags, &t), SAM3D_OK);
        EXPECT_CONTAINS(sam3d_last_error(), k.message);
        EXPECT_EQ(t, 0u);
        EXPECT_EQ(r().counters(s).rejected_calls - before, k.counted ? 1u : 0u);
    }
    EXPECT_EQ(r().counters(s).calls, 0u);
}

// The first bad entry is named, and a rejected call leaves the session ready for the next.
TEST_P(Validation, RejectedCallLeavesTheSessionUsable) {
    RIG_REQUIRE(r());
    req().alloc(r());
    sam3d_session * s = r().session(SAM3D_BATCHING_ON);
    req().ups[1].src = nullptr;
    req().downs[1].size = 0;
    sam3d_call bad = req().call();
    ASSERT_EQ(sam3d_session_run(s, &bad), SAM3D_ERR_NULL_POINTER);
    EXPECT_CONTAINS(sam3d_last_error(), "uploads[1].src");
    req().ups[1].src = req().b.data();
    req().downs[1].size = 16;
    sam3d_call good = req().call();
    ASSERT_EQ(sam3d_session_run(s, &good), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(req().out0, cases::expected(req().a, req().b));
    const sam3d_counters k = r().counters(s);
    EXPECT_EQ(k.rejected_calls, 1u);
    EXPECT_EQ(k.calls, 1u);
    EXPECT_EQ(k.bytes_uploaded, 2u * Request::kN * 4);
}

INSTANTIATE_TEST_SUITE_P(Backends, Validation, testing::ValuesIn(rig::kinds()), rig::param_name);

#ifdef SAM3D_VULKAN
// A tensor in a CPU buffer given to a Vulkan session is foreign: the Vulkan backend cannot use
// that buffer type (only possible with a non-CPU backend).
TEST(ValidationVulkan, CpuBufferTensorGivenToVulkanSessionIsForeign) {
    Rig r(Kind::Vulkan);
    RIG_REQUIRE(r);
    probe::record_all(r.seam());
    Request req(r);
    req.alloc(r);
    ggml_init_params p = {ggml_tensor_overhead() * 4, nullptr, true};
    ggml_context * cctx = ggml_init(p);
    ggml_tensor * host = ggml_new_tensor_1d(cctx, GGML_TYPE_F32, 64);
    ggml_set_name(host, "cpu_tensor");
    ggml_backend_buffer_t cbuf = ggml_backend_alloc_ctx_tensors_from_buft(cctx, ggml_backend_cpu_buffer_type());
    ASSERT_NE(cbuf, nullptr);
    req.downs[1] = rig::down(host, req.out1.data(), 16);
    expect_rejected(r, req.call(), SAM3D_ERR_FOREIGN_TENSOR, "downloads[1].tensor ('cpu_tensor')");
    ggml_backend_buffer_free(cbuf);
    ggml_free(cctx);
}
#endif

// ---- SAM3D_BATCHED_TRANSFERS (read once at session creation; an explicit option wins) ----

namespace {

using cases::EnvVar;

sam3d_status create(ggml_backend_t backend, sam3d_batching mode, sam3d_session ** out) {
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = mode;
    return sam3d_session_create(backend, &o, out);
}

}  // namespace

TEST(Environment, DefaultOptionsReadBatchingFromTheEnvironment) {
    const sam3d_session_options o = sam3d_session_default_options();
    EXPECT_EQ(o.batching, SAM3D_BATCHING_FROM_ENV);
}

TEST(Environment, BadValueIsRejectedNamingTheValue) {
    Rig r(Kind::Cpu);
    for (const char * bad : {"yes", "true", "2", "", " 1"}) {
        EnvVar env("SAM3D_BATCHED_TRANSFERS", bad);
        sam3d_session * s = reinterpret_cast<sam3d_session *>(&r);  // must be overwritten with NULL
        EXPECT_EQ(create(r.backend(), SAM3D_BATCHING_FROM_ENV, &s), SAM3D_ERR_BAD_ENV) << "'" << bad << "'";
        EXPECT_EQ(s, nullptr);
        EXPECT_STARTS_WITH(sam3d_last_error(), "bad_env:");
        EXPECT_CONTAINS(sam3d_last_error(), std::string("SAM3D_BATCHED_TRANSFERS='") + bad + "'");
        EXPECT_EQ(create(r.backend(), SAM3D_BATCHING_FROM_ENV, nullptr), SAM3D_ERR_INVALID_ARGUMENT);
    }
}

TEST(Environment, OneTurnsBatchingOnZeroAndUnsetTurnItOff) {
    Rig r(Kind::Cpu);
    const std::pair<const char *, bool> cases_[] = {{"1", true}, {"0", false}, {nullptr, false}};
    for (const auto & [value, on] : cases_) {
        EnvVar env("SAM3D_BATCHED_TRANSFERS", value);
        sam3d_session * s = nullptr;
        ASSERT_EQ(create(r.backend(), SAM3D_BATCHING_FROM_ENV, &s), SAM3D_OK) << sam3d_last_error();
        EXPECT_EQ(sam3d_session_batching(s), on) << (value ? value : "(unset)");
        sam3d_session_free(s);
    }
}

TEST(Environment, ExplicitOptionWinsOverTheEnvironment) {
    Rig r(Kind::Cpu);
    sam3d_session * s = nullptr;
    {
        EnvVar env("SAM3D_BATCHED_TRANSFERS", "1");
        ASSERT_EQ(create(r.backend(), SAM3D_BATCHING_OFF, &s), SAM3D_OK);
        EXPECT_FALSE(sam3d_session_batching(s));
        sam3d_session_free(s);
    }
    {
        EnvVar env("SAM3D_BATCHED_TRANSFERS", "0");
        ASSERT_EQ(create(r.backend(), SAM3D_BATCHING_ON, &s), SAM3D_OK);
        EXPECT_TRUE(sam3d_session_batching(s));
        sam3d_session_free(s);
    }
    {
        EnvVar env("SAM3D_BATCHED_TRANSFERS", "yes");  // not even read
        ASSERT_EQ(create(r.backend(), SAM3D_BATCHING_ON, &s), SAM3D_OK) << sam3d_last_error();
        EXPECT_TRUE(sam3d_session_batching(s));
        sam3d_session_free(s);
        ASSERT_EQ(create(r.backend(), SAM3D_BATCHING_OFF, &s), SAM3D_OK) << sam3d_last_error();
        EXPECT_FALSE(sam3d_session_batching(s));
        sam3d_session_free(s);
    }
}

TEST(Environment, ValueIsReadOnceAtSessionCreation) {
    Rig r(Kind::CpuStaged);
    cases::ScaleAdd w = cases::scale_add(r, 32);
    r.alloc();
    sam3d_session * s = nullptr;
    {
        EnvVar env("SAM3D_BATCHED_TRANSFERS", "1");
        sam3d_session_options o = sam3d_session_default_options();
        ASSERT_EQ(sam3d_testing_session_create(r.backend(), &o, &r.seam(), &s), SAM3D_OK);
    }
    EnvVar env("SAM3D_BATCHED_TRANSFERS", "yes");  // changed after creation: no effect
    EXPECT_TRUE(sam3d_session_batching(s));
    const std::vector<float> a = rig::ramp(32, 1.0f), b = rig::ramp(32, 2.0f);
    std::vector<float> dst(32);
    ASSERT_EQ(cases::run(s, w, a.data(), b.data(), dst.data()), SAM3D_OK) << sam3d_last_error();
    sam3d_counters k{};
    k.struct_size = sizeof k;
    sam3d_session_counters(s, &k);
    EXPECT_EQ(k.pinned_batches, 1u);
    sam3d_session_free(s);
}

TEST(Environment, UnknownBatchingOptionIsAnInvalidArgument) {
    Rig r(Kind::Cpu);
    sam3d_session * s = nullptr;
    // -2 is inside the enum's value range (so no UB) but is not one of its named values.
    EXPECT_EQ(create(r.backend(), static_cast<sam3d_batching>(-2), &s), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(s, nullptr);
    EXPECT_CONTAINS(sam3d_last_error(), "options.batching is -2");
    EXPECT_EQ(sam3d_session_create(nullptr, nullptr, &s), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(sam3d_last_error(), "backend is NULL");
}

TEST(Names, StatusAndFallbackNamesAreStable) {
    EXPECT_STREQ(sam3d_status_name(SAM3D_OK), "ok");
    EXPECT_STREQ(sam3d_status_name(SAM3D_ERR_NULL_TENSOR), "null_tensor");
    EXPECT_STREQ(sam3d_status_name(SAM3D_ERR_OVERLAPPING_OUTPUTS), "overlapping_outputs");
    EXPECT_STREQ(sam3d_status_name(SAM3D_ERR_BAD_ENV), "bad_env");
    EXPECT_STREQ(sam3d_status_name(SAM3D_ERR_COMPUTE), "compute");
    EXPECT_STREQ(sam3d_fallback_name(SAM3D_FALLBACK_NO_ASYNC_CAPS), "no_async_caps");
    EXPECT_STREQ(sam3d_fallback_name(SAM3D_FALLBACK_FOREIGN_HOST_BUFFER), "foreign_host_buffer");
    EXPECT_STREQ(sam3d_fallback_name(SAM3D_FALLBACK_OVERSIZED), "oversized");
    EXPECT_STREQ(sam3d_fallback_name(SAM3D_FALLBACK_PINNED_UNAVAILABLE), "pinned_unavailable");
    EXPECT_STREQ(sam3d_fallback_name(SAM3D_FALLBACK_COUNT), "none");
}

// Every entry point given a NULL session: a status entry point refuses it naming it (and a
// submit zeroes its ticket, given or not), a query answers its documented value, and nothing
// dereferences it. The generated campaign found that no test passed NULL to most of them.
TEST(NullSession, EveryEntryPointRefusesOrAnswersWithoutTouchingIt) {
    sam3d_call c{};
    sam3d_slot_request req{64};
    void * slot = nullptr;
    const auto refused = [](sam3d_status st, const char * what) {
        EXPECT_EQ(st, SAM3D_ERR_INVALID_ARGUMENT) << what;
        EXPECT_STREQ(sam3d_last_error(), "invalid_argument: session is NULL") << what;
    };
    refused(sam3d_session_run(nullptr, &c), "run");
    refused(sam3d_session_reserve(nullptr, &req, 1, &slot), "reserve");
    EXPECT_EQ(slot, nullptr) << "reserve wrote a slot";
    sam3d_ticket t = 77;
    refused(sam3d_session_submit(nullptr, &c, SAM3D_SUBMIT_QUEUED, &t), "submit");
    EXPECT_EQ(t, 0u);
    refused(sam3d_session_submit(nullptr, &c, 0, nullptr), "submit without a ticket");
    refused(sam3d_session_wait(nullptr, 1), "wait");
    refused(sam3d_session_release(nullptr, 1), "release");
    refused(sam3d_session_add_area(nullptr, nullptr), "add_area");
    refused(sam3d_session_remove_area(nullptr, nullptr), "remove_area");
    sam3d_counters k{};
    k.struct_size = sizeof k;
    refused(sam3d_session_counters(nullptr, &k), "counters");
    EXPECT_EQ(sam3d_session_areas(nullptr), 0u);
    EXPECT_FALSE(sam3d_session_reservation_pinned(nullptr));
    EXPECT_FALSE(sam3d_session_batching(nullptr));
    EXPECT_EQ(sam3d_session_static_fallback(nullptr), SAM3D_FALLBACK_COUNT);
    EXPECT_EQ(sam3d_session_copy_threads(nullptr), 1u);
    EXPECT_EQ(sam3d_session_staging_alignment(nullptr), 0u);
    EXPECT_EQ(sam3d_session_outstanding(nullptr), 0u);
    EXPECT_EQ(sam3d_session_staging_in_flight(nullptr), 0u);
    uint64_t bytes[1] = {5};
    EXPECT_EQ(sam3d_testing_copied_bytes(nullptr, bytes, 1), 0u);
    EXPECT_EQ(bytes[0], 5u);
    EXPECT_EQ(sam3d_testing_allocations(nullptr), 0u);
    sam3d_testing_fail_allocation(nullptr, 1);
    sam3d_session_reset_counters(nullptr);
    sam3d_session_free(nullptr);
}

// sam3d_session_counters names which argument is NULL.
TEST(NullSession, CountersNameTheNullArgument) {
    Rig r(Kind::Cpu);
    RIG_REQUIRE(r);
    sam3d_session * s = r.session(SAM3D_BATCHING_ON);
    EXPECT_EQ(sam3d_session_counters(s, nullptr), SAM3D_ERR_INVALID_ARGUMENT);
    EXPECT_STREQ(sam3d_last_error(), "invalid_argument: out is NULL");
}

// A success clears the thread's last error, creation included ("" after a success).
TEST(LastError, ASuccessfulCreationClearsTheLastError) {
    Rig r(Kind::Cpu);
    RIG_REQUIRE(r);
    ASSERT_EQ(sam3d_session_run(nullptr, nullptr), SAM3D_ERR_INVALID_ARGUMENT);
    ASSERT_STRNE(sam3d_last_error(), "");
    sam3d_session * s = nullptr;
    ASSERT_EQ(sam3d_session_create(r.backend(), nullptr, &s), SAM3D_OK);
    EXPECT_STREQ(sam3d_last_error(), "");
    sam3d_session_free(s);
}

// The seam's copied bytes fill the first n participants and not one more.
TEST(CopiedBytes, OnlyTheFirstNParticipantsAreWritten) {
    Rig r(Kind::CpuStaged);
    RIG_REQUIRE(r);
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = SAM3D_BATCHING_ON;
    o.staging_copy_threads = 2;
    sam3d_session * s = nullptr;
    sam3d_ggml_seam seam = r.seam();
    ASSERT_EQ(sam3d_testing_session_create(r.backend(), &o, &seam, &s), SAM3D_OK) << sam3d_last_error();
    uint64_t bytes[2] = {7, 7};
    const unsigned threads = sam3d_testing_copied_bytes(s, bytes, 1);
    EXPECT_EQ(bytes[0], 0u) << "nothing copied yet";
    if (threads > 1) {
        EXPECT_EQ(bytes[1], 7u) << "a participant past n was written";
    }
    sam3d_session_free(s);
}
