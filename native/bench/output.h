// sam3d_bench's output: the checks over what was measured and the one JSON document (schema
// kOutputSchema), which sam3d/running/driver.py reads and sam3d/cli/bench.py wraps into a result
// record (sam3d/results/record.py, docs/results.md). Units: bytes, milliseconds.
#pragma once

#include <string>
#include <vector>

#include "bench.h"

namespace sam3d_bench {

extern const char * const kOutputSchema;

// One mode's measurements over all images (warm-ups included where said).
struct ModeRun {
    sam3d_session * session = nullptr;
    json samples = json::array();          // timed images: the schema's sample objects
    std::vector<double> warm_ms;           // warm-up wall times
    std::vector<sam3d_counters> per_image; // timed images' counter deltas
    std::vector<std::string> shas;         // every image's outputs_sha256, warm-ups first
    std::vector<double> excluded_write_ms; // timed images' untimed slot writes (zerocopy, queued)
    std::vector<double> excluded_read_ms;  // timed images' untimed slot reads (zerocopy, queued)
};

// Everything one driver run measured.
struct Measured {
    const Options * options = nullptr;
    const Profile * profile = nullptr;
    ggml_backend_t backend = nullptr;
    ggml_backend_dev_props props{};
    size_t device_bytes = 0;
    ModeRun runs[kModeCount];
    std::vector<std::string> order;  // per image, the modes in the order they ran
    size_t dependency_waits = 0;     // queued, per image
    size_t ring_waits = 0;           // queued, per image
    size_t end_waits = 0;            // queued, per image
    json overhead;
    json floor;           // the limit probes (probes.h)
    json round_trips;
    json staging_memcpy;
    json ggml_calls;  // the modes' GGML calls without the core (transfer-only), or null
};

// Checks what was measured, writes the document (--out, else stdout) and the console summary.
// Returns the exit status: 0, or 3 when a check failed (the document is written either way).
int write_output(const Measured & m);

}  // namespace sam3d_bench
