// Coalesced copies (docs/contract.md, rule 10): the declared areas, the runs of a batched call
// (consecutive descriptors of one direction copied as one GGML copy) and the tensors that carry
// a run of several descriptors to GGML. The runs are found once per call, by the validation
// pass, before the plan (the bound counts their laid-out bytes, rule 3).
#pragma once

#include "session.h"

namespace sam3d {

// sam3d_session_add_area / sam3d_session_remove_area, with the session's lock held.
sam3d_status add_area(Session & s, const ggml_tensor * area);
sam3d_status remove_area(Session & s, const ggml_tensor * area);

// Finds the call's runs into s.up_runs and s.down_runs. A descriptor joins the run before it
// when both lie in one buffer, a copying call's run is still below a piece (rule 2), its
// device range starts where the run ends (or, inside one declared area, at most
// SAM3D_COALESCE_GAP_BYTES after; a zero-copy call's download only from the run's last slot to
// the next one, where that slot's descriptor fills it or `slot_tails` makes its tail scratch),
// and, for a zero-copy call, its host range sits as far after the run's as on the device.
// A zero-copy call's s.down_slots are its downloads' slots (the validation's check_slots).
void find_runs(Session & s, const sam3d_call & c, bool zero_copy, bool slot_tails);

// The laid-out bytes of the runs found (rule 3): each run's span aligned to the staging
// alignment, summed; SIZE_MAX when the sum overflows.
size_t laid_out_bytes(const Session & s);

// The runs of several descriptors among those found (each needs a span tensor).
size_t spanning_runs(const Session & s);

// A tensor header for `bytes` bytes of device memory from byte `offset` of `t`'s data, in t's
// buffer: a 1-D GGML_TYPE_I8 tensor that GGML's set/get take like any allocated tensor.
void make_span(ggml_tensor * out, const ggml_tensor * t, size_t offset, size_t bytes);

}  // namespace sam3d
