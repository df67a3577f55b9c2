// Rule 1: a request is checked whole before anything is submitted.
#pragma once

#include "session.h"

namespace sam3d {

// The tensor's buffer as GGML's blocking set/get find it (a view's source's buffer).
inline ggml_backend_buffer_t tensor_buffer(const ggml_tensor * t) { return t->view_src ? t->view_src->buffer : t->buffer; }

// Descriptors, extents, contiguity and overlaps (path-independent).
sam3d_status validate(Session & s, const sam3d_call & c);

// What only the batched path needs: GGML's async set/get (ggml_backend_tensor_set_async and
// the backends' set_tensor_async) read tensor->buffer, which a view created after its source
// was allocated does not have.
sam3d_status validate_async(const sam3d_call & c);

// Zero-copy (A1, A4): every host pointer is a distinct slot of the current reservation, or an
// upload's bytes inside a kept slot of a reported call (those calls are put in
// s.kept_sources). *own: whether the call uses a slot of the current reservation.
sam3d_status check_slots(Session & s, const sam3d_call & c, bool * own);

}  // namespace sam3d
