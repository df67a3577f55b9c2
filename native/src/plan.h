// The plan: for sam3d_session_run, copying and zero-copy submits and sam3d_session_reserve alike,
// the one place that decides the path, the fallback reason (first match wins: no_async_caps,
// foreign_host_buffer, oversized, pinned_unavailable) and the staging the call needs (the
// laid-out bytes of the runs the validation pass found, runs.h). plan() changes nothing; calls.cpp applies it (allocates the staging, takes the ring region), and only
// a failed pinned allocation can change it then (to pinned_unavailable, rule 4).
#pragma once

#include "session.h"

namespace sam3d {

enum class Entry {
    Run,       // sam3d_session_run, and a submit without flags
    Copying,   // a queued copying submit
    ZeroCopy,  // a zero-copy submit (queued or not)
    Reserve,   // sam3d_session_reserve
};

// What the validation pass hands the plan.
struct Request {
    Entry entry = Entry::Run;
    const sam3d_call * call = nullptr;  // NULL for Reserve
    bool queued = false;
    bool keep = false;                  // ZeroCopy: SAM3D_SUBMIT_KEEP_SLOTS
    bool slot_tails = false;            // ZeroCopy: SAM3D_SUBMIT_SLOT_TAILS
    size_t reserve_bytes = 0;           // Reserve: the slots' aligned sizes
    bool own = false;                   // ZeroCopy: the call consumes the current reservation
    sam3d_fallback slot_memory = SAM3D_FALLBACK_COUNT;  // ZeroCopy: why its slots' memory cannot batch
};

enum class Path {
    Sync,    // the blocking GGML calls (batching off, synchronous, a fallback, nothing to stage)
    Staged,  // the staged executor, synchronized before returning (Reserve: pinned ring slots)
    Queued,  // the staged executor, completed at the wait
};

// The staging a plan needs before submission.
enum class Staging {
    None,  // nothing (the synchronous path, zero-copy, a graph only)
    Grow,  // the growable staging buffer, at least `need` bytes (a run while the ring holds nothing)
    Ring,  // the region [begin, end) of the ring (the staging buffer at the bound)
};

struct Plan {
    Path path = Path::Sync;
    sam3d_fallback reason = SAM3D_FALLBACK_COUNT;  // counted once per call when not COUNT
    Staging staging = Staging::None;
    size_t need = 0;      // the laid-out bytes of the call's runs (rules 3, 10)
    size_t allocate = 0;  // Grow or Ring: the staging allocation to make first, in bytes (0: none)
    size_t begin = 0;     // Grow, Ring: the region's offset in the staging buffer
    size_t end = 0;
    bool held = false;    // Ring: the call or reservation holds the region until released (A5)
    bool no_room = false; // Sync: only a ring without room now kept the call from batching

    bool batched() const { return path != Path::Sync; }
    // Whether the path-dependent refusals apply: the batched path, or the one fallback that
    // depends on the work in flight (a refusal must not depend on the ring's occupancy).
    bool batchable() const { return batched() || no_room; }
};

Plan plan(const Session & s, const Request & r);

}  // namespace sam3d
