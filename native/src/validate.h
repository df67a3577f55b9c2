// The one validation pass: every refusal of a request is decided here, before anything is
// planned or submitted (rule 1, A1-A4): arguments, flags, tickets, reservation sizes, slots and
// descriptors. A refusal sets the thread's last error, changes nothing of the session (calls.cpp
// counts it as rejected_calls) and returns its status. The C shims refuse a NULL session (there
// is no lock to take) and nothing else.
#pragma once

#include "plan.h"
#include "session.h"

namespace sam3d {

// The tensor's buffer as GGML's blocking set/get find it (a view's source's buffer).
inline ggml_backend_buffer_t tensor_buffer(const ggml_tensor * t) { return t->view_src ? t->view_src->buffer : t->buffer; }
// The device address of byte `offset` of the tensor's data (the key of overlaps and runs).
inline uintptr_t device_address(const ggml_tensor * t, size_t offset) { return reinterpret_cast<uintptr_t>(t->data) + offset; }

// An accepted request: what the plan was asked and what it decided.
struct Admitted {
    Request request;
    Plan plan;
    // Set once the arguments (the call pointer, flags, ticket) passed: a refusal after that is
    // a refused call (rejected_calls, rule 8), one before it is not a call at all.
    bool is_call = false;
};

// sam3d_session_run, and a submit without flags.
sam3d_status admit_run(Session & s, const sam3d_call * c, Admitted * out);

// sam3d_session_submit: the flags, the ticket, then as admit_run, plus with ZERO_COPY the slot
// rules (A1, A4). *ticket is set to 0 (when given) whatever the outcome.
sam3d_status admit_submit(Session & s, const sam3d_call * c, unsigned flags, sam3d_ticket * ticket, Admitted * out);

// sam3d_session_reserve: the arrays, n, each size, and their sums (the ring's and the heap's,
// at `heap_alignment`); *ring_bytes and *heap_bytes are the aligned totals.
sam3d_status admit_reserve(const Session & s, const sam3d_slot_request * req, size_t n, void ** slots,
                           size_t heap_alignment, size_t * ring_bytes, size_t * heap_bytes);

// sam3d_session_add_area (rule 10): a non-NULL, allocated, contiguous tensor of a buffer type
// the backend can use, of at least one byte, overlapping no declared area; *area its bytes,
// *at its place in the sorted s.areas.
sam3d_status admit_area(const Session & s, const ggml_tensor * t, Area * area, size_t * at);

// sam3d_session_remove_area: a non-NULL tensor whose bytes are a declared area (*at its index).
sam3d_status admit_remove_area(const Session & s, const ggml_tensor * t, size_t * at);

// The host pointer of a descriptor (an upload's src, a download's dst).
inline const void * host_of(const sam3d_upload & u) { return u.src; }
inline const void * host_of(const sam3d_download & d) { return d.dst; }

// sam3d_session_wait: a queued call submitted and not waited yet.
sam3d_status admit_wait(Session & s, sam3d_ticket id, std::list<Call>::iterator * out);

// sam3d_session_release: a kept call whose completion was reported and not released yet.
sam3d_status admit_release(Session & s, sam3d_ticket id, Call ** out);

// A kept call (not released, not failed) one of whose slots holds [p, p+size), or nullptr.
Call * kept_slot_owner(Session & s, const void * p, size_t size);

}  // namespace sam3d
