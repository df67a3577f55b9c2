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

// Backend facts (docs/contract.md, "Backend facts"), keyed on GGML's backend registry name
// (ggml_backend_reg_name: "CUDA", "Vulkan"): whether the pinned memory of the backend's host
// buffer type is usable by every device of the backend, or only by the device the host buffer
// type reports (ggml_backend_buft_get_device). A backend not listed: its reported device only.
bool host_buffer_every_device(const char * reg_name);

// The fallback every batching call of the session takes, decided once at creation (rules 3, 6;
// first match wins): no_async_caps (props lack caps.async or caps.host_buffer, or no host
// buffer type), foreign_host_buffer (the host buffer type is not usable by the session's
// device), else SAM3D_FALLBACK_COUNT.
sam3d_fallback static_fallback(const Session & s, const ggml_backend_dev_props & props);

// The aligned bytes of a call's descriptors (rule 3); SIZE_MAX when the sum overflows.
size_t staging_need(const Session & s, const sam3d_call & c);

Plan plan(Session & s, const Request & r);

}  // namespace sam3d
