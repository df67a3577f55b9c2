// Execution: the synchronous path, and the one staged executor that sam3d_session_run, queued
// copying, zero-copy and queued zero-copy calls all go through (layout, copies, the
// perf-logger drain of rule 7, the failure drain of rule 5, counters).
#pragma once

#include "session.h"

namespace sam3d {

// ggml_backend_tensor_set / graph_compute / tensor_get one by one, after completing the
// session's outstanding queued work (A6). A failed compute's GGML status goes to *compute.
sam3d_status run_sync(Session & s, const sam3d_call & c, ggml_status * compute = nullptr);

// The staged executor. `region`: the staging bytes a copying call copies through (nullptr:
// zero-copy, the host pointers are the slots). `queued`: the call to complete at its wait (its
// event is recorded, a copying call's output copies stored; its uploads wait for the newest
// outstanding call's event, A6), nullptr: complete the session's outstanding queued work first
// (A6), then synchronize and finish here. Every allocation it needs was made before (s.up_ptrs, s.down_ptrs, queued->copies'
// capacity): after the first GGML call nothing allocates, and on any failure or exception the
// session's outstanding work is completed before returning (rule 5). A compute failure returns
// SAM3D_ERR_COMPUTE (queued: also stored in the call, reported at its wait).
sam3d_status execute_staged(Session & s, const sam3d_call & c, uint8_t * region, Call * queued);

// The message of a failed compute.
std::string compute_message(ggml_status st);

}  // namespace sam3d
