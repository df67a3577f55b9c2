// sam3d_fake_async.h - GGML's CPU backend made to look like an async-capable device, through
// the core's seam (src/include/sam3d/testing.h), so that the staged, zero-copy, queued and kept
// paths run on the CPU backend, under ASan and UBSan in cpu-asan. The one copy, for the normal
// suite (native/tests/rig.h, Kind::CpuStaged), the microbenchmark (native/bench/sam3d_microbench.cpp)
// and the fuzz target (native/fuzz/worlds.cpp, the staged and unpinned worlds); target
// sam3d::fake_async (native/CMakeLists.txt), build tree only, like sam3d::testing.
//
// What GGML 0.20.2's CPU backend is, and what the fake changes (file names are GGML's, ggml/src/):
//   - Its device reports caps.async and caps.host_buffer false (ggml-cpu/ggml-cpu.cpp,
//     ggml_backend_cpu_device_get_props), so every batching call falls back (docs/contract.md,
//     "Fallback reasons": no_async_caps). props() turns both on; every other field stays GGML's,
//     caps.events false included.
//   - Its device has no host buffer type (ggml-cpu/ggml-cpu.cpp: ".get_host_buffer_type = NULL").
//     host_buffer_type() is GGML's CPU buffer type: staging is ordinary CPU memory.
//   - GGML's CPU buffer types have no device (ggml-backend.cpp, ggml_backend_cpu_buffer_type and
//     ggml_backend_cpu_buffer_from_ptr_type: ".device = NULL // FIXME"), and a host buffer type
//     that reports no device is foreign (docs/contract.md, "Backend facts"). buffer_type_device()
//     reports the CPU device for both, so the staging buffer is the session device's own.
// What needs no fake: the CPU backend has no async entry points (ggml-cpu/ggml-cpu.cpp:
// ".set_tensor_async = NULL", ".get_tensor_async = NULL", ".synchronize = NULL"), so GGML's
// ggml_backend_tensor_set_async/_get_async synchronize and copy at once and
// ggml_backend_graph_compute_async runs the graph before it returns (ggml-backend.cpp). Every
// transfer, compute and synchronize entry of the seam stays GGML's own: a call is complete when
// its last GGML call returns.
//
// What stays with each user, and why:
//   - Events and a device that works later: sam3d_deferred.h, beside this file (an in-order
//     queue run at synchronize, events as markers of its position, a transfer queue of its
//     own), for the suite's tests (native/tests/deferred.h) and the fuzz target's deferred world.
//     The CPU device has no events (ggml-cpu/ggml-cpu.cpp: ".event_new = NULL"), and this fake
//     keeps caps.events false, so a queued call completes with a synchronize. The microbenchmark
//     needs no pending work: it times the core's bookkeeping and requires 0 bytes of heap growth
//     over warm calls (the queue allocates one std::function per GGML call).
//   - The staging allocation (buft_alloc_buffer): the fuzz target hands out one block of the
//     process or ordinary memory, native/tests/probe.h fails or blocks it; others leave GGML's.
//   - Recording, counting and failing seam entries (probe.h, the fuzz target's records).
#pragma once

#include <cstdint>

#include "ggml-backend.h"
#include "sam3d/testing.h"

namespace fake_async {

// The CPU device (ggml-backend-reg.cpp registers it: GGML_BACKEND_DEVICE_TYPE_CPU).
inline ggml_backend_dev_t cpu_device() { return ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU); }

// GGML's CPU_Mapped buffer type, the type of ggml_backend_cpu_buffer_from_ptr's buffers: GGML has
// no public getter for it (ggml-backend.cpp, ggml_backend_cpu_buffer_from_ptr_type is static), so
// it is read off a buffer made over 64 bytes of static memory; it is one static struct in GGML,
// the same for every buffer.
inline ggml_backend_buffer_type_t cpu_mapped_buffer_type() {
    static ggml_backend_buffer_type_t type = [] {
        alignas(64) static uint8_t mem[64];
        ggml_backend_buffer_t b = ggml_backend_cpu_buffer_from_ptr(mem, sizeof(mem));
        ggml_backend_buffer_type_t t = ggml_backend_buffer_get_type(b);
        ggml_backend_buffer_free(b);
        return t;
    }();
    return type;
}

// The seam's dev_get_props: GGML's props with caps.async and caps.host_buffer on.
inline void props(ggml_backend_dev_t dev, ggml_backend_dev_props * props) {
    ggml_backend_dev_get_props(dev, props);
    props->caps.async = true;
    props->caps.host_buffer = true;
}

// The seam's dev_host_buffer_type: GGML's CPU buffer type.
inline ggml_backend_buffer_type_t host_buffer_type(ggml_backend_dev_t) { return ggml_backend_cpu_buffer_type(); }

// The seam's buft_get_device: the CPU device for GGML's two CPU buffer types, GGML's answer for
// any other.
inline ggml_backend_dev_t buffer_type_device(ggml_backend_buffer_type_t buft) {
    return buft == ggml_backend_cpu_buffer_type() || buft == cpu_mapped_buffer_type() ? cpu_device()
                                                                                      : ggml_backend_buft_get_device(buft);
}

// Puts the three capability entries above into `s`; its other entries are left as they are.
inline void install(sam3d_ggml_seam & s) {
    s.dev_get_props = props;
    s.dev_host_buffer_type = host_buffer_type;
    s.buft_get_device = buffer_type_device;
}

// GGML's own seam (sam3d_testing_default_seam) with the fake installed.
inline sam3d_ggml_seam seam() {
    sam3d_ggml_seam s = sam3d_testing_default_seam();
    install(s);
    return s;
}

}  // namespace fake_async
