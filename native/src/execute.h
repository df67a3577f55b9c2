// Execution: the GGML calls of a call, in the steps calls.cpp puts together, with no policy of
// their own (what completes when, what is counted: calls.cpp) and no allocation (the scratch
// s.up_ptrs, s.down_ptrs and the span tensors is sized before submission).
#pragma once

#include "session.h"

namespace sam3d {

// The synchronous path: ggml_backend_tensor_set per upload, ggml_backend_graph_compute, then
// ggml_backend_tensor_get per download; no download after a failed compute (GGML has
// synchronized). Returns the compute's status (GGML_STATUS_SUCCESS without a graph).
ggml_status run_blocking(Session & s, const sam3d_call & c);

// The staged layout (rules 2, 10) of the call's runs (s.up_runs, s.down_runs): a copying
// call's runs at aligned offsets of `region`, inputs then outputs, each descriptor as far into
// its run's bytes as into its device range; zero-copy (region NULL): the first slot's bytes.
// Each run gets the tensor GGML copies it with (its descriptor's, or for a run of several a
// span tensor in `spans`, sized here from capacity reserved before submission), each descriptor
// its host bytes in s.up_ptrs and s.down_ptrs.
void lay_out(Session & s, const sam3d_call & c, uint8_t * region, std::vector<ggml_tensor> & spans);
// The pieces of a copying call (docs/contract.md, rule 2): runs [r, piece_end(s, runs, r)) are
// the fewest consecutive runs from r whose aligned bytes reach s.piece_bytes (at least one; the
// last piece may hold less).
size_t piece_end(const Session & s, const std::vector<Run> & runs, size_t r);
// Copies the uploads of input runs [begin, end) into their staging (a copying call), on the
// session's copy threads.
void stage_inputs(Session & s, const sam3d_call & c, size_t begin, size_t end);
// ggml_backend_tensor_set_async of input runs [begin, end), one GGML copy each.
void enqueue_uploads(Session & s, size_t begin, size_t end);
// ggml_backend_graph_compute_async of the call's graph (GGML_STATUS_SUCCESS without one).
ggml_status enqueue_graph(Session & s, const sam3d_call & c);
// ggml_backend_tensor_get_async on `backend` (the session's, or duplex's second, rule 11) of
// output runs [begin, end) into their staging, one each.
void enqueue_downloads(Session & s, ggml_backend_t backend, size_t begin, size_t end);
// Copies the downloads of output runs [begin, end), complete, from their staging into the
// callers' dst (the descriptors' bytes only), on the session's copy threads.
void copy_outputs(Session & s, const sam3d_call & c, size_t begin, size_t end);

// The message of a failed compute.
std::string compute_message(ggml_status st);

}  // namespace sam3d
