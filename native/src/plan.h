// The execution plan: the one place that decides, for sam3d_session_run, copying and zero-copy
// submits and sam3d_session_reserve alike, the path, the fallback reason (first match wins:
// no_async_caps, foreign_host_buffer, oversized, pinned_unavailable) and the staging region.
#pragma once

#include <vector>

#include "session.h"

namespace sam3d {

enum class Entry {
    Run,       // sam3d_session_run, and a submit without flags
    Copying,   // a queued copying submit
    ZeroCopy,  // a zero-copy submit (queued or not)
    Reserve,   // sam3d_session_reserve
};

struct Request {
    Entry entry;
    const sam3d_call * call = nullptr;       // NULL for Reserve
    bool queued = false;
    size_t reserve_bytes = 0;                // Reserve: the slots' aligned sizes
    const Region * own = nullptr;            // ZeroCopy: the reservation's region, when the call uses it
    const std::vector<Call *> * kept = nullptr;  // ZeroCopy: kept calls whose slots the uploads read
};

enum class Path {
    Rejected,  // the batched path cannot take the call (validate_async); nothing submitted
    Sync,      // the blocking GGML calls (batching off, synchronous, a fallback, nothing to stage)
    Staged,    // the staged executor, synchronized before returning (Reserve: pinned ring slots)
    Queued,    // the staged executor, completed at the wait
};

struct Plan {
    Path path = Path::Sync;
    sam3d_fallback reason = SAM3D_FALLBACK_COUNT;  // counted once per call when not COUNT
    size_t begin = 0;   // Staged/Queued copying, Reserve: the region's offset in the staging buffer
    size_t end = 0;
    bool held = false;  // the region is a ring region the call or reservation holds (A5)
    sam3d_status rejected = SAM3D_OK;  // Rejected: why (the message is the thread's last error)
};

// The aligned bytes of a call's descriptors (rule 3); SIZE_MAX when the sum overflows.
size_t staging_need(const Session & s, const sam3d_call & c);

Plan plan(Session & s, const Request & r);

}  // namespace sam3d
