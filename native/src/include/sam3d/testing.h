// sam3d/testing.h - test-only entry points of the core: the GGML seam, sessions created with
// it, and the allocation-failure point. Used by native/tests and sam3d_microbench; never
// installed (native/CMakeLists.txt installs include/ only) and not part of the Conan package.
#ifndef SAM3D_TESTING_H
#define SAM3D_TESTING_H

#include "sam3d/transfer.h"

#ifdef __cplusplus
extern "C" {
#endif

// The GGML entry points and capability decisions the core goes through. Tests replace entries
// to inject faults (compute failure, pinned allocation failure or CPU memory, a host buffer of
// another device, a call that blocks, events) or to drive the staged and queued paths on the
// CPU backend. A NULL entry is GGML's own function. Copied at session creation.
typedef struct sam3d_ggml_seam {
    void (*tensor_set)(struct ggml_tensor * tensor, const void * data, size_t offset, size_t size);
    void (*tensor_get)(const struct ggml_tensor * tensor, void * data, size_t offset, size_t size);
    void (*tensor_set_async)(ggml_backend_t backend, struct ggml_tensor * tensor, const void * data, size_t offset, size_t size);
    void (*tensor_get_async)(ggml_backend_t backend, const struct ggml_tensor * tensor, void * data, size_t offset, size_t size);
    enum ggml_status (*graph_compute)(ggml_backend_t backend, struct ggml_cgraph * graph);
    enum ggml_status (*graph_compute_async)(ggml_backend_t backend, struct ggml_cgraph * graph);
    void (*synchronize)(ggml_backend_t backend);
    // Device properties (caps.async, caps.host_buffer, caps.events); called once, at creation.
    void (*dev_get_props)(ggml_backend_dev_t dev, struct ggml_backend_dev_props * props);
    // The staging buffer type, its device and its alignment; called once, at creation.
    ggml_backend_buffer_type_t (*dev_host_buffer_type)(ggml_backend_dev_t dev);
    ggml_backend_dev_t (*buft_get_device)(ggml_backend_buffer_type_t buft);
    size_t (*buft_get_alignment)(ggml_backend_buffer_type_t buft);
    // The name of the session device's backend registry (GGML's "CUDA", "Vulkan"), the key of
    // the per-backend facts (docs/contract.md, "Backend facts"); called at creation only.
    const char * (*reg_name)(ggml_backend_reg_t reg);
    // Allocates the staging buffer (ggml_backend_buft_alloc_buffer); NULL result = failure.
    ggml_backend_buffer_t (*buft_alloc_buffer)(ggml_backend_buffer_type_t buft, size_t size);
    // Completion events of queued calls (used only when dev_get_props reports caps.events).
    // event_new may return NULL: the call's wait then synchronizes the backend.
    ggml_backend_event_t (*event_new)(ggml_backend_dev_t dev);
    void (*event_free)(ggml_backend_event_t event);
    void (*event_record)(ggml_backend_event_t event, ggml_backend_t backend);
    void (*event_synchronize)(ggml_backend_event_t event);
    // Orders the backend's later work, uploads included, after `event` (ggml_backend_event_wait).
    void (*event_wait)(ggml_backend_t backend, ggml_backend_event_t event);
    // Duplex's second backend of the session's device (ggml_backend_dev_init; NULL: one queue)
    // and its free (ggml_backend_free); called once each, at creation and at the session's free.
    ggml_backend_t (*dev_init)(ggml_backend_dev_t dev, const char * params);
    void (*backend_free)(ggml_backend_t backend);
    // -1: read GGML_VK_PERF_LOGGER at session creation; 0/1: treat it as unset/set.
    int perf_logger;
    // -1/1: drain uploads before compute when the perf logger is on (rule 7); 0: do not
    // (only to demonstrate GGML's abort in a death test).
    int drain_before_compute;
    // n > 0: the n-th allocation the core makes, counted from the start of session creation,
    // fails (std::bad_alloc inside the core, SAM3D_ERR_OUT_OF_MEMORY at the C API); 0: none.
    uint64_t fail_allocation;
} sam3d_ggml_seam;

// A seam that is exactly GGML: every entry NULL, both flags -1, no allocation failure.
sam3d_ggml_seam sam3d_testing_default_seam(void);

// sam3d_session_create with `seam` (NULL: sam3d_testing_default_seam()). Same errors.
sam3d_status sam3d_testing_session_create(ggml_backend_t backend, const sam3d_session_options * options,
                                          const sam3d_ggml_seam * seam, sam3d_session ** out);

// The n-th allocation the core makes from now on fails (n > 0); 0 disarms. Every allocation of
// the core's bookkeeping after creation goes through one counted point (the thread's error
// message excepted); GGML's own allocations fail through the seam instead.
void sam3d_testing_fail_allocation(sam3d_session * session, uint64_t n);

// Allocations the core has made through the counted point since the session was created.
uint64_t sam3d_testing_allocations(sam3d_session * session);

// The staged copies' bytes per participant since the session was created (docs/contract.md,
// rule 2, "Copy threads"): bytes[0] the caller's thread, bytes[k] the k-th copy thread, for the
// first `n` participants. Returns how many participants the session has (sam3d_session_copy_threads;
// 0 for a NULL session).
unsigned sam3d_testing_copied_bytes(sam3d_session * session, uint64_t * bytes, unsigned n);

// How many parts the session's copy threads cut a piece of `bytes` bytes into (docs/contract.md,
// rule 2, "Copy threads"); 0 for a NULL session.
unsigned sam3d_testing_copy_parts(sam3d_session * session, size_t bytes);

// Which of a session's copy threads claim no part of a copy of several parts (docs/contract.md,
// rule 2, "Copy threads"; a copy of one part is always the caller's), as where the machine does
// not run them: SAM3D_TESTING_HOLD_NONE (the default), _WORKERS (the caller's thread copies every
// part) or _CALLER (the workers copy every part; only for a session with at least one copy
// worker, sam3d_session_copy_threads() > 1, or a copy never ends). No-op for a NULL session.
typedef enum {
    SAM3D_TESTING_HOLD_NONE = 0,
    SAM3D_TESTING_HOLD_WORKERS = 1,
    SAM3D_TESTING_HOLD_CALLER = 2,
} sam3d_testing_hold;
void sam3d_testing_hold_copy_threads(sam3d_session * session, sam3d_testing_hold held);

#ifdef __cplusplus
}
#endif

#endif // SAM3D_TESTING_H
