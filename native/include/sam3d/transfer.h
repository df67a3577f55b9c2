// sam3d/transfer.h - the SAM3D batched-transfer core.
//
// One call = uploads, one graph compute, downloads, on one GGML backend. With batching off
// a call is exactly ggml_backend_tensor_set / ggml_backend_graph_compute /
// ggml_backend_tensor_get per descriptor. With batching on, inputs are copied into one
// reusable pinned staging allocation (from ggml_backend_dev_host_buffer_type()), uploaded
// with ggml_backend_tensor_set_async, the graph is enqueued, outputs are downloaded with
// ggml_backend_tensor_get_async into the staging allocation, the backend is synchronized
// once, and complete outputs are copied into the caller's buffers.
//
// The contract (rules 1-9) is ../shared/design.md's, from the accepted spec
// spec/batched-transfers.md. Units: sizes and offsets in bytes, times in nanoseconds.
// No C++ exception crosses this API. All functions are thread-safe on distinct sessions;
// calls on one session are serialized by the session (rule 9).
#ifndef SAM3D_TRANSFER_H
#define SAM3D_TRANSFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ggml-backend.h"
#include "ggml.h"

#ifdef __cplusplus
extern "C" {
#endif

// The staging bound: a call batches only if the sum over its inputs and outputs of
// align_up(size, host buffer type alignment) is <= this many bytes (32 MiB; design.md).
#define SAM3D_STAGING_BOUND_BYTES ((size_t)33554432)

typedef enum sam3d_status {
    SAM3D_OK = 0,
    SAM3D_ERR_INVALID_ARGUMENT,   // null session/call/backend, or a null array with a count > 0
    SAM3D_ERR_NULL_TENSOR,        // a descriptor's tensor is NULL
    SAM3D_ERR_NULL_POINTER,       // a descriptor's host pointer is NULL
    SAM3D_ERR_UNALLOCATED_TENSOR, // tensor->buffer or tensor->data is NULL
    SAM3D_ERR_FOREIGN_TENSOR,     // the tensor's buffer type is not usable by the session's backend
    SAM3D_ERR_EXTENT,             // size == 0, or [offset, offset+size) not inside ggml_nbytes(tensor)
    SAM3D_ERR_NOT_CONTIGUOUS,     // !ggml_is_contiguous(tensor) (contiguous views are allowed)
    SAM3D_ERR_OVERLAPPING_UPLOADS,// two uploads write overlapping bytes of one buffer
    SAM3D_ERR_OVERLAPPING_OUTPUTS,// two downloads write overlapping caller host memory
    SAM3D_ERR_BAD_ENV,            // SAM3D_BATCHED_TRANSFERS is set to something other than "0" or "1"
    SAM3D_ERR_COMPUTE,            // graph compute did not return GGML_STATUS_SUCCESS
    SAM3D_ERR_OUT_OF_MEMORY,      // host memory for the session's bookkeeping could not be allocated
    SAM3D_ERR_INTERNAL,           // an unexpected C++ exception inside the core (message says which)
} sam3d_status;

// Why a batching-on call took the synchronous path; first match wins, in this order
// (design.md, "Normative details"). The first two are decided once, at session creation.
typedef enum sam3d_fallback {
    SAM3D_FALLBACK_NO_ASYNC_CAPS = 0,    // device props lack caps.async or caps.host_buffer, or no host buffer type
    SAM3D_FALLBACK_FOREIGN_HOST_BUFFER,  // the host buffer type's device is not the session's device
    SAM3D_FALLBACK_OVERSIZED,            // the call's aligned bytes exceed SAM3D_STAGING_BOUND_BYTES
    SAM3D_FALLBACK_PINNED_UNAVAILABLE,   // the staging allocation failed or came back as ordinary CPU memory
    SAM3D_FALLBACK_COUNT
} sam3d_fallback;

// Batching mode of a session. FROM_ENV reads SAM3D_BATCHED_TRANSFERS at session creation:
// unset or "0" off, "1" on, anything else SAM3D_ERR_BAD_ENV. ON/OFF win over the variable.
typedef enum sam3d_batching {
    SAM3D_BATCHING_FROM_ENV = -1,
    SAM3D_BATCHING_OFF = 0,
    SAM3D_BATCHING_ON = 1,
} sam3d_batching;

// One upload: ggml_nbytes-relative byte range [offset, offset+size) of `tensor` receives
// `size` bytes read from `src`. `src` is read during the call only; it may alias a download's dst.
typedef struct sam3d_upload {
    struct ggml_tensor * tensor;
    const void *         src;
    size_t               offset; // bytes into the tensor's data
    size_t               size;   // bytes, > 0
} sam3d_upload;

// One download: byte range [offset, offset+size) of `tensor` is written to `dst` once the
// call's work is complete. On any error `dst` is left untouched.
typedef struct sam3d_download {
    const struct ggml_tensor * tensor;
    void *                     dst;
    size_t                     offset; // bytes into the tensor's data
    size_t                     size;   // bytes, > 0
} sam3d_download;

// A call: uploads, then `graph` (may be NULL: transfers only), then downloads.
// `synchronous` keeps this call on the synchronous path whatever the batching mode (the
// SAM3D image encoder's graph); it is not a fallback.
typedef struct sam3d_call {
    const sam3d_upload *   uploads;
    size_t                 n_uploads;
    struct ggml_cgraph *   graph;
    const sam3d_download * downloads;
    size_t                 n_downloads;
    bool                   synchronous;
} sam3d_call;

// Per-session counters (design.md rule 8). One count per descriptor for transfers and bytes;
// one per call for pinned_batches and fallbacks. Calls rejected by validation change nothing
// here except rejected_calls. Batching off counts transfers as sync and never as fallbacks.
typedef struct sam3d_counters {
    uint64_t calls;              // calls that submitted work (successful or failed after submission)
    uint64_t rejected_calls;     // calls refused by validation (nothing submitted)
    uint64_t failed_calls;       // calls that failed after submission (work drained first)
    uint64_t async_uploads;
    uint64_t sync_uploads;
    uint64_t async_downloads;
    uint64_t sync_downloads;
    uint64_t bytes_uploaded;     // bytes, both paths
    uint64_t bytes_downloaded;   // bytes, both paths
    uint64_t pinned_batches;     // calls that went through the pinned staging path
    uint64_t fallbacks[SAM3D_FALLBACK_COUNT];
    uint64_t enqueue_ns;         // host time enqueuing async uploads, graph, downloads (not GPU time)
    uint64_t synchronize_ns;     // host time blocked in ggml_backend_synchronize on the staged path
    uint64_t copy_ns;            // host time copying between caller buffers and staging
    uint64_t sync_path_ns;       // host time in the synchronous path (blocking set, compute, get)
    uint64_t staging_bytes;      // size of the staging allocation now held (as asked of GGML)
    uint64_t staging_allocations;// times the staging allocation was (re)allocated
} sam3d_counters;

// The seam: GGML entry points and capability decisions the core goes through. Tests replace
// entries to inject faults (compute failure, pinned allocation failure or CPU memory, a host
// buffer of another device, a call that blocks) or to drive the staged path on the CPU
// backend. Every NULL entry and negative flag means GGML's own behaviour. A zeroed struct is
// NOT quite the real GGML: its flags at 0 mean "perf logger unset" and "no drain"; set both
// flags to -1 (or pass options.seam = NULL) for GGML's own behaviour. The seam is copied at
// session creation.
typedef struct sam3d_ggml_seam {
    void (*tensor_set)(struct ggml_tensor * tensor, const void * data, size_t offset, size_t size);
    void (*tensor_get)(const struct ggml_tensor * tensor, void * data, size_t offset, size_t size);
    void (*tensor_set_async)(ggml_backend_t backend, struct ggml_tensor * tensor, const void * data, size_t offset, size_t size);
    void (*tensor_get_async)(ggml_backend_t backend, const struct ggml_tensor * tensor, void * data, size_t offset, size_t size);
    enum ggml_status (*graph_compute)(ggml_backend_t backend, struct ggml_cgraph * graph);
    enum ggml_status (*graph_compute_async)(ggml_backend_t backend, struct ggml_cgraph * graph);
    void (*synchronize)(ggml_backend_t backend);
    // Device properties (caps); called once, at session creation.
    void (*dev_get_props)(ggml_backend_dev_t dev, struct ggml_backend_dev_props * props);
    // The staging buffer type and its device; called once, at session creation.
    ggml_backend_buffer_type_t (*dev_host_buffer_type)(ggml_backend_dev_t dev);
    ggml_backend_dev_t (*buft_get_device)(ggml_backend_buffer_type_t buft);
    // Allocates the staging buffer (ggml_backend_buft_alloc_buffer); NULL result = failure.
    ggml_backend_buffer_t (*buft_alloc_buffer)(ggml_backend_buffer_type_t buft, size_t size);
    // -1: read GGML_VK_PERF_LOGGER at session creation; 0/1: treat it as unset/set.
    int perf_logger;
    // -1/1: drain uploads before compute when the perf logger is on (rule 7); 0: do not
    // (only to demonstrate GGML's abort in a death test).
    int drain_before_compute;
} sam3d_ggml_seam;

typedef struct sam3d_session_options {
    sam3d_batching          batching; // SAM3D_BATCHING_FROM_ENV by default
    const sam3d_ggml_seam * seam;     // NULL: the real GGML
} sam3d_session_options;

typedef struct sam3d_session sam3d_session;

// Options with every field at its default (batching from the environment, real GGML).
sam3d_session_options sam3d_session_default_options(void);

// Creates a session bound to `backend` (not owned; must outlive the session). Reads the
// device's props and caps, the host buffer type and its alignment, SAM3D_BATCHED_TRANSFERS
// and GGML_VK_PERF_LOGGER, once. Allocates no staging memory yet.
// Errors: SAM3D_ERR_INVALID_ARGUMENT (null backend/out), SAM3D_ERR_BAD_ENV, SAM3D_ERR_OUT_OF_MEMORY.
sam3d_status sam3d_session_create(ggml_backend_t backend, const sam3d_session_options * options,
                                  sam3d_session ** out);

// Frees the session and its staging buffer. NULL is a no-op. No call may be in progress.
void sam3d_session_free(sam3d_session * session);

// Runs one call (see sam3d_call). The whole request is validated before any work is
// submitted; a malformed request returns its status, submits nothing, and writes no dst.
// On an error after submission, all outstanding work is completed before returning, so the
// caller may free inputs, graph and scratch tensors at once; no dst is written.
// Calls on one session are serialized (a second thread waits).
sam3d_status sam3d_session_run(sam3d_session * session, const sam3d_call * call);

// Whether this session batches (after the option/environment decision).
bool sam3d_session_batching(const sam3d_session * session);

// The fallback every batching call of this session takes, decided at creation
// (NO_ASYNC_CAPS or FOREIGN_HOST_BUFFER), or SAM3D_FALLBACK_COUNT when none.
sam3d_fallback sam3d_session_static_fallback(const sam3d_session * session);

// Alignment in bytes of the staging buffer type (ggml_backend_buft_get_alignment), 0 when
// the session has no host buffer type.
size_t sam3d_session_staging_alignment(const sam3d_session * session);

// Copies the session's counters into *out (consistent snapshot; serialized with calls).
void sam3d_session_counters(sam3d_session * session, sam3d_counters * out);

// Zeroes the counters, except staging_bytes (the allocation still held).
void sam3d_session_reset_counters(sam3d_session * session);

// The message of the last failed sam3d_* call on this thread: names the status, and for a
// malformed request the descriptor ("uploads[3].size") and what is wrong. "" when none.
const char * sam3d_last_error(void);

// Stable names for logs and result files: "ok", "null_tensor", ...; "no_async_caps", ...
const char * sam3d_status_name(sam3d_status status);
const char * sam3d_fallback_name(sam3d_fallback reason);

// ---------------------------------------------------------------- zero-copy and queued calls
// Additive to sam3d_session_run, whose behaviour does not change. Two independent options of
// sam3d_session_submit (SAM3D_SUBMIT_* flags):
//
// Zero-copy staging. sam3d_session_reserve hands out slots: host memory inside the session's
// pinned staging buffer (or, when the call cannot batch, ordinary session-owned host memory).
// The caller writes a call's inputs into slots and names slots as the host pointers of its
// descriptors (uploads[i].src and downloads[j].dst, each slot at most once, size <= the
// slot's size); the core uploads from and downloads into the slots in place, so copy_ns
// stays 0. A call that cannot batch (batching off, `synchronous`, a fallback reason) runs the
// synchronous path reading from and writing to the same slots; fallbacks are counted as for
// sam3d_session_run. Slot lifetime: a reservation's slots are the caller's from the
// reservation until the first sam3d_session_reserve made after the call's completion was
// reported (the return of a non-queued submit, or sam3d_session_wait of its ticket); output
// slots are readable from that report until then. A reservation that no submit consumed is
// dropped by the next sam3d_session_reserve. A zero-copy call that names no slot of the
// current reservation (its uploads read kept slots only, or it has no transfers) needs none
// and leaves it for the next submit.
//
// Kept slots (SAM3D_SUBMIT_KEEP_SLOTS with SAM3D_SUBMIT_ZERO_COPY): the call's slots outlive
// later reservations until sam3d_session_release of its ticket, so a later zero-copy call can
// upload straight from them: an upload's src may point anywhere inside a kept slot, any number
// of times, once the kept call's completion was reported (a chain of graphs whose input is an
// earlier output needs no host copy). Downloads never write kept slots. After the release,
// the region is reused only once every call that read from it has completed. Kept slots count
// against the bound until then; with the ring full, reservations fall back as below. A
// non-queued kept call that fails is not kept (*ticket 0); a queued one is released after its
// wait whatever its status.
//
// Queued calls. With SAM3D_SUBMIT_QUEUED, submit validates (errors at once, nothing
// submitted), enqueues the call and returns a ticket without waiting; sam3d_session_wait
// completes it. Rules:
//  - outputs (caller dst or output slots) are readable only after the wait returns SAM3D_OK;
//    a copying (non-zero-copy) call's inputs are copied at submission: src may be reused then;
//  - an error after submission (graph compute failure) is reported by the wait of that
//    ticket, with all outstanding work of the session completed before submit returned; no
//    dst is written; the ticket's outputs are unspecified;
//  - at most SAM3D_STAGING_BOUND_BYTES of staging is in flight: the staging buffer (allocated
//    at the bound on the first reservation or queued submit) is a ring of regions, one per
//    call, each with its completion tracked (a GGML event when the device's props report
//    caps.events, else a full ggml_backend_synchronize). A region is never reused before its
//    completion is known and it is released (see the slot lifetime above; copying calls
//    release at their wait). When the ring has no room for a call, the call does not wait:
//    it falls back (SAM3D_FALLBACK_OVERSIZED; heap slots; the synchronous path, after the
//    session's outstanding work is completed);
//  - a queued call with no transfers (a graph only) is enqueued too; sam3d_session_run and
//    non-queued submits run such a call synchronously, as without batching;
//  - calls are serialized per session at submission: the backend executes them in
//    submission order; queued calls whose inputs do not depend on earlier downloads may be
//    submitted back to back and share one synchronization (waiting for the last one completes
//    the earlier ones when the device has no events);
//  - sam3d_session_run and the synchronous path first complete outstanding queued work; while
//    regions are held, sam3d_session_run stages through a free region of the ring (no room:
//    the synchronous path, counted SAM3D_FALLBACK_OVERSIZED);
//  - sam3d_session_free completes outstanding work; unwaited tickets are dropped.
// Counters: transfers, bytes, pinned batches and fallbacks count at submission; enqueue_ns at
// submission, synchronize_ns at the wait, copy_ns only for copying calls.

typedef uint64_t sam3d_ticket;  // 0: no ticket

// Submit flags (bitwise or).
#define SAM3D_SUBMIT_ZERO_COPY 1u  // descriptors name slots of the current reservation
#define SAM3D_SUBMIT_QUEUED    2u  // return a ticket without waiting
#define SAM3D_SUBMIT_KEEP_SLOTS 4u // with ZERO_COPY: keep the slots until sam3d_session_release

// One slot of a reservation: `size` bytes (> 0), aligned to the staging alignment.
typedef struct sam3d_slot_request {
    size_t size;
} sam3d_slot_request;

// Reserves `n` slots for the next submit and writes their addresses to slots[0..n). The slot
// set is pinned staging when the session batches, the aligned sizes fit the bound and the
// ring has room; otherwise ordinary host memory (the submit then takes the synchronous path
// and counts the fallback). Releases the slots of calls whose completion was reported.
// Errors: SAM3D_ERR_INVALID_ARGUMENT (null session/array, n == 0, a size of 0, sizes whose
// aligned sum does not fit in size_t), SAM3D_ERR_OUT_OF_MEMORY (the fallback heap memory).
sam3d_status sam3d_session_reserve(sam3d_session * session, const sam3d_slot_request * requests, size_t n,
                                   void ** slots);

// Whether the current reservation's slots are pinned staging (false: fallback heap memory,
// or no reservation).
bool sam3d_session_reservation_pinned(const sam3d_session * session);

// Submits one call (validated as by sam3d_session_run; with SAM3D_SUBMIT_ZERO_COPY also: every
// host pointer is a distinct slot of the current reservation, or an upload's src lies inside
// a kept slot of a reported call; SAM3D_ERR_INVALID_ARGUMENT naming the descriptor otherwise).
// Without SAM3D_SUBMIT_QUEUED the call is complete on return, its status returned, and *ticket
// (may be NULL unless SAM3D_SUBMIT_KEEP_SLOTS) set to 0, or to the ticket to release with
// SAM3D_SUBMIT_KEEP_SLOTS. With it, *ticket (required) receives the ticket and SAM3D_OK means
// "submitted": the call's own status comes from sam3d_session_wait.
// SAM3D_SUBMIT_KEEP_SLOTS without SAM3D_SUBMIT_ZERO_COPY is SAM3D_ERR_INVALID_ARGUMENT.
sam3d_status sam3d_session_submit(sam3d_session * session, const sam3d_call * call, unsigned flags,
                                  sam3d_ticket * ticket);

// Completes a queued call: waits for its work (its event, or a full synchronize), copies a
// copying call's outputs to their dst, and returns the call's status (with its message in
// sam3d_last_error). A ticket is waited once; an unknown or already waited ticket is
// SAM3D_ERR_INVALID_ARGUMENT.
sam3d_status sam3d_session_wait(sam3d_session * session, sam3d_ticket ticket);

// Gives back the kept slots of `ticket` (a call submitted with SAM3D_SUBMIT_KEEP_SLOTS whose
// completion was reported). They stay readable until the next sam3d_session_reserve; their
// region is reused only after every call that read from them has completed.
// Errors: SAM3D_ERR_INVALID_ARGUMENT (unknown, not kept, already released, or not waited yet).
sam3d_status sam3d_session_release(sam3d_session * session, sam3d_ticket ticket);

// Queued calls submitted and not yet waited.
size_t sam3d_session_outstanding(sam3d_session * session);

// Bytes of the staging ring held now by reservations and unreleased calls (<= the bound).
size_t sam3d_session_staging_in_flight(sam3d_session * session);

#ifdef __cplusplus
}
#endif

#endif // SAM3D_TRANSFER_H
