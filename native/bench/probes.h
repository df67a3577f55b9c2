// The measurements sam3d/results/limits.py builds each mode's modelled limit from
// (docs/benchmark.md, "Transfer floor, round trips and limits"), taken through GGML directly,
// never through the core, in rounds interleaved with the replay: the transfer floor (each
// direction alone and both together), the round trips (a 4-byte download + synchronize, a
// one-node graph + synchronize) and a plain memcpy of the staged path's bytes (on the 'on'
// session's copy threads); with GGML's
// alternatives to a full synchronize beside them as diagnostics (an event wait, graphs
// submitted back to back), and on transfer-only runs the modes' GGML calls without the core.
// Milliseconds, bytes.
#pragma once

#include <memory>

#include "bench.h"

namespace sam3d_bench {

class Probes {
   public:
    // `images`: the timed images of the run (one round follows each image); `staging_alignment`:
    // the core's (sam3d_session_staging_alignment), every host offset is aligned to it and to 64.
    // `copy_threads`: the 'on' session's (sam3d_session_copy_threads), the staging memcpy's
    // threads. `calls`: also time the modes' GGML calls without the core (transfer-only runs).
    Probes(ggml_backend_t backend, ggml_backend_dev_t dev, const Profile & profile, size_t staging_alignment,
           unsigned copy_threads, int images, bool calls);
    ~Probes();
    Probes(const Probes &) = delete;
    Probes & operator=(const Probes &) = delete;

    // One round after image `image` (0-based among the timed ones; warm-up rounds pass timed =
    // false and are not kept): a sample of each floor kind, the staging memcpy, then the round
    // trips, in an order that rotates with the image.
    void round(int image, bool timed);

    json floor() const;           // null on a device without a host buffer type (CPU)
    json round_trips() const;
    json staging_memcpy() const;
    json ggml_calls() const;      // null unless `calls` and the device has a host buffer type

   private:
    struct State;
    std::unique_ptr<State> s_;
};

}  // namespace sam3d_bench
