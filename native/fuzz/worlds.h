// The fake GGML and the five worlds. Every operation runs on five sessions ("worlds"), each over
// its own identical tensors and caller memory, on one CPU backend:
//   off       batching off: the reference, exactly the blocking GGML calls
//   staged    batching on; the seam makes the CPU backend async-capable with CPU memory as
//             its host buffer (native/testing/sam3d_fake_async.h), so the staged, zero-copy,
//             queued and kept paths run; its staging is one block of the process
//   no_caps   batching on with the CPU backend's own caps (every batching call falls back)
//   unpinned  like staged, but the staging allocation fails or returns ordinary CPU memory
//   deferred  like staged, on a device that works later and has events: the deferred queue of
//             native/testing/sam3d_deferred.h with its transfer queue (uploads ordered after an
//             earlier graph only by an event wait), so pending work runs at the core's
//             synchronizes and event synchronizes, and an ordering rule (A4, A6) can fail; for
//             half the inputs (the seed's) its session is a duplex one, its queued downloads on
//             the seam's second queue (rule 11)
// Each world's seam records every entry the core makes (Env::records, what the checks read) and
// forwards transfers and computes to GGML, failing a compute when armed. worlds.cpp owns the
// backend, the worlds (g_env), the world being called and the staging memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "sam3d/testing.h"
#include "sam3d/transfer.h"

namespace fuzz {

constexpr size_t kArena = 1024;   // caller host memory of each world (copying calls)

enum World : int { kOff, kStaged, kNoCaps, kUnpinned, kDeferred, kWorlds };
inline constexpr const char * kWorldName[kWorlds] = {"off", "staged", "no_caps", "unpinned", "deferred"};
// The worlds whose staging is pinned (their staging allocation succeeds as the host buffer type's).
inline bool pinned_world(int w) { return w == kStaged || w == kDeferred; }
// The worlds without a static fallback, whose staged path runs (docs/contract.md, rule 3).
inline bool staging_world(int w) { return w == kStaged || w == kUnpinned || w == kDeferred; }

enum TensorId : int {
    kA, kB, kOut,      // out = 2 * a + b, the graph
    kRaw,              // I8 [96]
    kMat,              // F32 [6, 4]
    kRawView,          // contiguous view of raw, bytes [16, 48)
    kMatRows,          // contiguous view of mat, rows 1-2
    kTransposed,       // transpose of mat: not contiguous
    kStrided,          // 4 of every 6 floats of mat: not contiguous
    kLateView,         // contiguous view of raw, bytes [40, 64), made after allocation
    kUnallocated,      // F32 [8], never allocated
    kNullTensor,       // a descriptor with tensor NULL
    kTensorChoices
};

// A seam entry the core made, in the world that made it. A transfer's tensor is described as the
// seam saw it: a span tensor (docs/contract.md, rule 10) may be gone once the call returned, so
// the checks compare `tensor` as a pointer only and read the rest here.
struct Record {
    enum What { Set, Get, SetAsync, GetAsync, Compute, ComputeAsync, Synchronize, Alloc } what;
    const ggml_tensor * tensor;
    const void * data;
    size_t offset;
    size_t size;
    // transfers only
    uintptr_t device = 0;                   // the tensor's data + offset: the first device byte copied
    ggml_backend_buffer_t buffer = nullptr; // the tensor's buffer (a view's source's)
    bool own_buffer = false;                // the tensor's own buffer field is that buffer
    bool view = false;                      // view_src set
    bool contiguous = false;
    ggml_type type = GGML_TYPE_COUNT;
    std::array<int64_t, 4> ne{};
    size_t nbytes = 0;
};

// One world: its tensors (identical layout in every world), caller memory, seam and session.
struct Env {
    World world = kOff;
    ggml_context * ctx = nullptr;
    ggml_context * late_ctx = nullptr;
    ggml_backend_buffer_t buffer = nullptr;
    std::array<ggml_tensor *, kTensorChoices> tensors{};
    ggml_cgraph * graph = nullptr;
    std::vector<uint8_t> arena;
    sam3d_ggml_seam seam{};
    sam3d_session * session = nullptr;
    std::vector<Record> records;  // seam entries of the current operation
    bool fail_compute = false;    // the next compute entry returns GGML_STATUS_FAILED
};

extern std::array<Env, kWorlds> g_env;

// Once per process (LLVMFuzzerInitialize): the CPU backend, the staging block, the worlds.
void init_worlds();

// Every input starts alike: tensors and caller memory filled from `seed`, an empty deferred
// queue, a fresh session per world; `ordinary`: the unpinned world's staging allocation returns ordinary memory (else NULL).
void begin_input(bool ordinary, uint32_t seed);

// Deterministic bytes for tensor contents, host memory and slots.
void fill(uint8_t * p, size_t n, uint32_t seed);

inline uint8_t * buffer_base(const Env & e) { return static_cast<uint8_t *>(ggml_backend_buffer_get_base(e.buffer)); }
inline size_t buffer_size(const Env & e) { return ggml_backend_buffer_get_size(e.buffer); }

// Tensor bytes after an operation whose effect on them the contract leaves open (a failed
// call): every world gets batching off's, so later results stay comparable (the deferred world
// once its queue is empty: work still pending there runs on top of them later).
void resync_tensors();
// Whether the deferred world's device has work not run yet.
bool deferred_pending();

// Calls `f(env)` as world w: the seam entries it makes are recorded in that world (cleared
// first); a seam entry outside any such call is a violation.
void enter(int w);
void leave();
template <typename F>
sam3d_status in_world(int w, F && f) {
    enter(w);
    const sam3d_status st = f(g_env[w]);
    leave();
    return st;
}

}  // namespace fuzz
