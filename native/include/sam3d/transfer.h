// sam3d/transfer.h - the SAM3D batched-transfer core: uploads, one graph compute and downloads
// on one GGML backend, batched through one bounded pinned staging buffer.
//
// The contract is docs/contract.md: rules 1-9 (validation, one synchronization, the bound,
// pinned or nothing, completion on error, capabilities once, the perf-logger drain, counters,
// serialization), the amended rules A1-A7 for zero-copy, queued and kept calls, which entry
// points may run concurrently, and what a caller may assume about its buffers after a failure.
// Units: sizes and offsets in bytes, times in nanoseconds. No C++ exception crosses this API.
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

// The core's version, the Conan package's and CMake's (docs/contract.md, "API versions").
#define SAM3D_CORE_VERSION "0.8.0"

// The staging bound (rule 3): a call batches only if its descriptors' aligned sizes
// (align_up(size, host buffer type alignment)) sum to at most this many bytes (32 MiB).
#define SAM3D_STAGING_BOUND_BYTES ((size_t)33554432)

// The staged path's default piece (rule 2): a copying call's inputs are copied and uploaded,
// and a run's outputs downloaded and copied out, this many bytes at a time (1 MiB).
#define SAM3D_STAGING_PIECE_BYTES ((size_t)1048576)

// The staged path's copy threads (rule 2): by default the caller's thread and up to 7 workers
// copy each piece (at most the processors the process may run on); an option may ask for up to 64.
#define SAM3D_STAGING_COPY_THREADS 8u
#define SAM3D_STAGING_COPY_THREADS_MAX 64u

// Coalesced copies (rule 10): consecutive descriptors of one direction whose device ranges are
// adjacent in one buffer go as one GGML copy; inside an area the caller declared
// (sam3d_session_add_area) a gap of at most this many bytes between them is bridged (64 KiB).
#define SAM3D_COALESCE_GAP_BYTES ((size_t)65536)

typedef enum sam3d_status {
    SAM3D_OK = 0,
    SAM3D_ERR_INVALID_ARGUMENT,   // null session/call/backend, a null array with a count > 0, bad flags, slots or tickets
    SAM3D_ERR_NULL_TENSOR,        // a descriptor's tensor is NULL
    SAM3D_ERR_NULL_POINTER,       // a descriptor's host pointer is NULL
    SAM3D_ERR_UNALLOCATED_TENSOR, // no buffer (its own or its view source's) or no data; on the batched path, a view without its own buffer
    SAM3D_ERR_FOREIGN_TENSOR,     // the tensor's buffer type is not usable by the session's backend
    SAM3D_ERR_EXTENT,             // size == 0, [offset, offset+size) not inside ggml_nbytes(tensor), or a host range that wraps
    SAM3D_ERR_NOT_CONTIGUOUS,     // !ggml_is_contiguous(tensor) (contiguous views are allowed)
    SAM3D_ERR_OVERLAPPING_UPLOADS,// two uploads write overlapping bytes of one buffer
    SAM3D_ERR_OVERLAPPING_OUTPUTS,// two downloads write overlapping caller host memory
    SAM3D_ERR_BAD_ENV,            // SAM3D_BATCHED_TRANSFERS is set to something other than "0" or "1"
    SAM3D_ERR_COMPUTE,            // graph compute did not return GGML_STATUS_SUCCESS
    SAM3D_ERR_OUT_OF_MEMORY,      // host memory for the session's bookkeeping could not be allocated
    SAM3D_ERR_INTERNAL,           // an unexpected exception inside the core (message says which)
} sam3d_status;

// Why a batching call took the synchronous path; first match wins, in this order
// (docs/contract.md, "Normative details"). The first two are decided at session creation.
typedef enum sam3d_fallback {
    SAM3D_FALLBACK_NO_ASYNC_CAPS = 0,    // props lack caps.async or caps.host_buffer, or no host buffer type
    SAM3D_FALLBACK_FOREIGN_HOST_BUFFER,  // the host buffer type's device is not the session's device
    SAM3D_FALLBACK_OVERSIZED,            // aligned bytes over SAM3D_STAGING_BOUND_BYTES, or no room in the ring
    SAM3D_FALLBACK_PINNED_UNAVAILABLE,   // the staging allocation failed or came back as ordinary CPU memory
    SAM3D_FALLBACK_COUNT
} sam3d_fallback;

// Entries of sam3d_counters.fallbacks: fixed, so that a new reason changes no layout (a library
// knows at most this many reasons; docs/contract.md, "API versions").
#define SAM3D_FALLBACK_CAPACITY 8

// Batching mode of a session. FROM_ENV reads SAM3D_BATCHED_TRANSFERS at creation: unset or
// "0" off, "1" on, anything else SAM3D_ERR_BAD_ENV. ON/OFF win over the variable.
typedef enum sam3d_batching {
    SAM3D_BATCHING_FROM_ENV = -1,
    SAM3D_BATCHING_OFF = 0,
    SAM3D_BATCHING_ON = 1,
} sam3d_batching;

// One upload: `size` bytes read from `src` into bytes [offset, offset+size) of `tensor`.
// `src` is read during the call only (queued copying calls: at submission); it may alias a dst.
typedef struct sam3d_upload {
    struct ggml_tensor * tensor;
    const void *         src;
    size_t               offset; // bytes into the tensor's data
    size_t               size;   // bytes, > 0
} sam3d_upload;

// One download: bytes [offset, offset+size) of `tensor` into `dst` once the call's work is
// complete. On any error `dst` is left untouched.
typedef struct sam3d_download {
    const struct ggml_tensor * tensor;
    void *                     dst;
    size_t                     offset; // bytes into the tensor's data
    size_t                     size;   // bytes, > 0
} sam3d_download;

// A call: uploads, then `graph` (NULL: transfers only), then downloads. `synchronous` keeps the
// call on the synchronous path whatever the batching mode; it is not a fallback.
typedef struct sam3d_call {
    const sam3d_upload *   uploads;
    size_t                 n_uploads;
    struct ggml_cgraph *   graph;
    const sam3d_download * downloads;
    size_t                 n_downloads;
    bool                   synchronous;
} sam3d_call;

// Per-session counters (rule 8): one count per descriptor for transfers and bytes, one per call
// for pinned_batches and fallbacks (a call without transfers is neither). Refused calls change
// only rejected_calls. Batching off counts transfers as sync, never as fallbacks.
// Extensible (docs/contract.md, "API versions"): fields are only ever added at the end.
typedef struct sam3d_counters {
    size_t   struct_size;        // set by the caller: sizeof(sam3d_counters) of its header
    uint64_t calls;              // calls that submitted work (successful or failed after submission)
    uint64_t rejected_calls;     // calls refused before submission (nothing submitted)
    uint64_t failed_calls;       // calls that failed after submission (work completed first)
    uint64_t async_uploads;
    uint64_t sync_uploads;
    uint64_t async_downloads;
    uint64_t sync_downloads;
    uint64_t bytes_uploaded;     // bytes, both paths
    uint64_t bytes_downloaded;   // bytes, both paths
    uint64_t pinned_batches;     // calls with transfers that went through pinned staging
    uint64_t fallbacks[SAM3D_FALLBACK_CAPACITY]; // by sam3d_fallback; entries past SAM3D_FALLBACK_COUNT stay 0
    uint64_t enqueue_ns;         // host ns enqueuing async uploads, graph, downloads (not GPU time)
    uint64_t synchronize_ns;     // host ns blocked in synchronize / event waits of batched calls
    uint64_t copy_ns;            // host ns copying between caller buffers and staging
    uint64_t sync_path_ns;       // host ns in the synchronous path (blocking set, compute, get)
    uint64_t staging_bytes;      // bytes of the staging allocation now held (as asked of GGML)
    uint64_t staging_allocations;// times the staging allocation was (re)allocated
    uint64_t upload_copies;      // GGML copies made for uploads (set / set_async), both paths; <= uploads (rule 10)
    uint64_t download_copies;    // GGML copies made for downloads (get / get_async), both paths; <= downloads
    uint64_t synchronizes;       // ggml_backend_synchronize calls of the core (not GGML's own inside a blocking copy)
    uint64_t event_records;      // ggml_backend_event_record calls (queued calls' completion, staged pieces, duplex handoffs)
    uint64_t event_waits;        // ggml_backend_event_wait calls (A6; duplex: both backends', rule 11)
    uint64_t event_synchronizes; // ggml_backend_event_synchronize calls (waits on an older call or a piece; recycling)
    uint64_t duplex_calls;       // queued calls that ran on both backends: downloads on the second (duplex, rule 11)
    uint64_t duplex_event_records; // of event_records, those on the second backend (a duplex call's completion)
    uint64_t duplex_event_waits;   // of event_waits, those the second backend made (a duplex call's downloads after its graph)
} sam3d_counters;

// Whether a session's queued calls download on a second GGML backend of its device, so that
// one call's uploads and an earlier call's downloads move at once (docs/contract.md, rule 11).
typedef enum sam3d_duplex {
    SAM3D_DUPLEX_OFF = 0,   // one backend, one queue (the default)
    SAM3D_DUPLEX_AUTO = 1,  // on where the backend moves both directions at once (Backend facts: CUDA)
    SAM3D_DUPLEX_ON = 2,    // on wherever a second backend can be made and the device has events
} sam3d_duplex;

// Extensible like sam3d_counters: start from sam3d_session_default_options(), which sets
// struct_size; fields past the caller's struct_size take their defaults.
typedef struct sam3d_session_options {
    size_t         struct_size; // sizeof(sam3d_session_options) of the caller's header
    sam3d_batching batching;    // SAM3D_BATCHING_FROM_ENV by default
    size_t         staging_piece_bytes; // bytes per piece of the staged path (0: SAM3D_STAGING_PIECE_BYTES; SIZE_MAX: one piece)
    unsigned       staging_copy_threads; // threads copying each piece, the caller's included (0: SAM3D_STAGING_COPY_THREADS; 1: the caller's only)
    sam3d_duplex   duplex;      // SAM3D_DUPLEX_OFF by default
} sam3d_session_options;

typedef struct sam3d_session sam3d_session;

// Options with every field at its default (batching from the environment).
sam3d_session_options sam3d_session_default_options(void);

// Creates a session on `backend` (not owned; must outlive the session); reads props, host
// buffer type, alignment, SAM3D_BATCHED_TRANSFERS and GGML_VK_PERF_LOGGER once (rule 6), and
// makes the second backend of duplex (rule 11; one that cannot be made is no error: one queue).
// options NULL: defaults. *out is NULL on error.
// Errors: SAM3D_ERR_INVALID_ARGUMENT (null backend/out, unknown batching or duplex, a struct_size below
// sizeof(size_t), bytes past this library's options that are not 0, or staging_copy_threads
// over SAM3D_STAGING_COPY_THREADS_MAX), SAM3D_ERR_BAD_ENV,
// SAM3D_ERR_OUT_OF_MEMORY.
sam3d_status sam3d_session_create(ggml_backend_t backend, const sam3d_session_options * options,
                                  sam3d_session ** out);

// Completes outstanding work, frees the session and its staging buffer (A7). NULL is a no-op.
// No other call on the session may be in progress.
void sam3d_session_free(sam3d_session * session);

// Runs one call and returns when it is complete. Refused requests submit nothing (rule 1);
// errors after submission complete the session's work first and write no dst (rule 5).
// Errors: the validation statuses above, SAM3D_ERR_COMPUTE, SAM3D_ERR_OUT_OF_MEMORY.
sam3d_status sam3d_session_run(sam3d_session * session, const sam3d_call * call);

// Whether this session batches (after the option/environment decision).
bool sam3d_session_batching(const sam3d_session * session);

// The fallback every batching call of this session takes (NO_ASYNC_CAPS or
// FOREIGN_HOST_BUFFER, decided at creation), or SAM3D_FALLBACK_COUNT when none.
sam3d_fallback sam3d_session_static_fallback(const sam3d_session * session);

// The threads that copy the staged path's pieces, the caller's included: options.
// staging_copy_threads, or the default; fewer if a thread could not be started; 1 when the
// session never stages (batching off, or a fallback decided at creation).
unsigned sam3d_session_copy_threads(const sam3d_session * session);

// Whether the session has its second backend (rule 11): options.duplex asked for it, the session
// batches without a fallback decided at creation, the device has events (and, for AUTO, the
// backend moves both directions at once), and ggml_backend_dev_init made it.
bool sam3d_session_duplex(const sam3d_session * session);

// Alignment in bytes of the host buffer type (ggml_backend_buft_get_alignment); 0 without one.
size_t sam3d_session_staging_alignment(const sam3d_session * session);

// Copies a consistent snapshot of the session's counters into the first out->struct_size bytes
// of *out (struct_size kept; bytes past this library's counters are zeroed, nothing past
// struct_size is written). Leaves sam3d_last_error() as it was on success.
// Errors: SAM3D_ERR_INVALID_ARGUMENT (null session or out, struct_size below sizeof(size_t)).
sam3d_status sam3d_session_counters(sam3d_session * session, sam3d_counters * out);

// Declares the bytes of `area` (its data, ggml_nbytes of them) the caller's own whole (rule 10):
// a batched call may then copy descriptors inside it as one range across the gaps between them,
// writing the gap bytes on the device, on upload, with unspecified values, and reading them on
// download: initialize the area once where it is created (ggml_backend_buffer_clear of its
// buffer, or one ggml_backend_tensor_set over it), or downloads read bytes nothing wrote.
// Held until sam3d_session_remove_area or the session's free (remove it before freeing its
// buffer); areas may not overlap.
// Errors: SAM3D_ERR_INVALID_ARGUMENT (null session, overlaps a declared area), SAM3D_ERR_NULL_TENSOR,
// SAM3D_ERR_UNALLOCATED_TENSOR, SAM3D_ERR_FOREIGN_TENSOR, SAM3D_ERR_NOT_CONTIGUOUS, SAM3D_ERR_EXTENT
// (0 bytes), SAM3D_ERR_OUT_OF_MEMORY.
sam3d_status sam3d_session_add_area(sam3d_session * session, const struct ggml_tensor * area);

// Withdraws an area declared with `area` (the same bytes); later calls copy its gaps no more.
// Errors: SAM3D_ERR_INVALID_ARGUMENT (null session, no area declared with these bytes),
// SAM3D_ERR_NULL_TENSOR.
sam3d_status sam3d_session_remove_area(sam3d_session * session, const struct ggml_tensor * area);

// Areas declared now.
size_t sam3d_session_areas(sam3d_session * session);

// Zeroes the counters, except staging_bytes (the allocation still held).
void sam3d_session_reset_counters(sam3d_session * session);

// The message of this thread's last failed sam3d_* call: the status name, the descriptor or
// ticket ("uploads[3].size"), what is wrong and what to do. "" after a success.
const char * sam3d_last_error(void);

// Stable names for logs and result files: "ok", "null_tensor", ...; "no_async_caps", ..., "none".
const char * sam3d_status_name(sam3d_status status);
const char * sam3d_fallback_name(sam3d_fallback reason);

// ---------------------------------------------------------------- zero-copy, queued, kept calls
// docs/contract.md A1-A7. sam3d_session_run is unchanged by them.

typedef uint64_t sam3d_ticket;  // 0: no ticket

// Submit flags (bitwise or).
#define SAM3D_SUBMIT_ZERO_COPY 1u  // host pointers are slots of the current reservation (A1) or inside kept slots (A4)
#define SAM3D_SUBMIT_QUEUED    2u  // return a ticket without waiting (A3)
#define SAM3D_SUBMIT_KEEP_SLOTS 4u // with ZERO_COPY: keep the slots until sam3d_session_release (A4)
#define SAM3D_SUBMIT_SLOT_TAILS 8u // with ZERO_COPY: a download slot's bytes past its descriptor's size are
                                   // scratch; a download run in a declared area may write them (rule 10;
                                   // the bound counts them, rule 3)

// One slot of a reservation: `size` bytes (> 0), aligned to the staging alignment. The bytes
// between a slot's end and the next slot are the session's: a download run may write them.
typedef struct sam3d_slot_request {
    size_t size;
} sam3d_slot_request;

// Reserves `n` slots for the next submit and writes their addresses to slots[0..n): pinned ring
// memory, or heap memory when the call cannot batch (A1, A5). Releases the slots of reported
// calls (A2) and drops an unconsumed reservation.
// Errors: SAM3D_ERR_INVALID_ARGUMENT (null session/array, n == 0, a size of 0, sizes whose aligned
// sum does not fit in size_t), SAM3D_ERR_OUT_OF_MEMORY.
sam3d_status sam3d_session_reserve(sam3d_session * session, const sam3d_slot_request * requests, size_t n,
                                   void ** slots);

// Whether the current reservation's slots are pinned staging (false: heap memory, or none).
bool sam3d_session_reservation_pinned(const sam3d_session * session);

// Submits one call (validated as by sam3d_session_run, plus the slot rules with ZERO_COPY).
// Not QUEUED: complete on return, its status returned; *ticket (may be NULL unless KEEP_SLOTS)
// is 0, or the ticket to release when kept. QUEUED: *ticket (required) receives the ticket and
// SAM3D_OK means submitted; the call's status comes from sam3d_session_wait.
// Errors: as sam3d_session_run; SAM3D_ERR_INVALID_ARGUMENT (unknown flags, KEEP_SLOTS or SLOT_TAILS
// without ZERO_COPY, NULL ticket, a host pointer that is not a usable slot).
sam3d_status sam3d_session_submit(sam3d_session * session, const sam3d_call * call, unsigned flags,
                                  sam3d_ticket * ticket);

// Completes a queued call (its event, or a full synchronize), copies a copying call's outputs
// to their dst, and returns the call's status (message in sam3d_last_error). A failed kept call
// is released by its wait (A4). Errors: SAM3D_ERR_INVALID_ARGUMENT (unknown or already waited).
sam3d_status sam3d_session_wait(sam3d_session * session, sam3d_ticket ticket);

// Gives back the kept slots of `ticket`; readable until the next reserve, reused only after
// their readers completed (A4). Errors: SAM3D_ERR_INVALID_ARGUMENT (unknown, not kept, already
// released, released by a failed wait, or not waited yet).
sam3d_status sam3d_session_release(sam3d_session * session, sam3d_ticket ticket);

// Queued calls submitted and not yet waited.
size_t sam3d_session_outstanding(sam3d_session * session);

// Bytes of the staging ring held now by the reservation and unreleased calls (<= the bound).
size_t sam3d_session_staging_in_flight(sam3d_session * session);

#ifdef __cplusplus
}
#endif

#endif // SAM3D_TRANSFER_H
