// Execution: the GGML calls of a call, in the steps calls.cpp puts together, with no policy of
// their own (what completes when, what is counted: calls.cpp) and no allocation (the scratch
// s.up_ptrs and s.down_ptrs is sized before submission).
#pragma once

#include "session.h"

namespace sam3d {

// The synchronous path: ggml_backend_tensor_set per upload, ggml_backend_graph_compute, then
// ggml_backend_tensor_get per download; no download after a failed compute (GGML has
// synchronized). Returns the compute's status (GGML_STATUS_SUCCESS without a graph).
ggml_status run_blocking(Session & s, const sam3d_call & c);

// The staged layout (rule 2) into s.up_ptrs and s.down_ptrs: inputs, then outputs, at aligned
// offsets of `region` (a copying call), or the call's own host pointers (zero-copy, region NULL).
void lay_out(Session & s, const sam3d_call & c, uint8_t * region);
// The pieces of a copying call (docs/contract.md, rule 2): [i, upload_piece_end(s, c, i)) are
// the fewest consecutive uploads from i whose aligned sizes reach s.piece_bytes (at least one;
// the last piece may hold less); downloads likewise.
size_t upload_piece_end(const Session & s, const sam3d_call & c, size_t i);
size_t download_piece_end(const Session & s, const sam3d_call & c, size_t i);
// Copies uploads [begin, end) into their staging (a copying call), on the session's copy threads.
void stage_inputs(Session & s, const sam3d_call & c, size_t begin, size_t end);
// ggml_backend_tensor_set_async of uploads [begin, end) from their staging.
void enqueue_uploads(Session & s, const sam3d_call & c, size_t begin, size_t end);
// ggml_backend_graph_compute_async of the call's graph (GGML_STATUS_SUCCESS without one).
ggml_status enqueue_graph(Session & s, const sam3d_call & c);
// ggml_backend_tensor_get_async of downloads [begin, end) into their staging.
void enqueue_downloads(Session & s, const sam3d_call & c, size_t begin, size_t end);
// Copies downloads [begin, end), complete, from their staging into the callers' dst, on the
// session's copy threads.
void copy_outputs(Session & s, const sam3d_call & c, size_t begin, size_t end);

// The message of a failed compute.
std::string compute_message(ggml_status st);

}  // namespace sam3d
