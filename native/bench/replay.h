// The replay of one image: every graph of the profile in profile.order, through the core's C API, in
// one of the modes of kModeTable (bench.h).
#pragma once

#include <memory>
#include <string>

#include "bench.h"

namespace sam3d_bench {

class Replay {
   public:
    // transfer_only: the calls carry no graph (output tensors hold a fixed pattern).
    Replay(const Profile & profile, ggml_backend_t backend, bool transfer_only);
    ~Replay();
    Replay(const Replay &) = delete;
    Replay & operator=(const Replay &) = delete;

    // The no_alloc GGML context size prepare() needs for the profile's tensors and graphs.
    static size_t context_bytes(const Profile & profile);
    // Builds the graphs in ctx (no_alloc) and the inputs and descriptors of every mode.
    void prepare(ggml_context * ctx);
    // The areas layout (--layout areas): places each graph's inputs in one input area and its
    // outputs in one output area (ggml_backend_tensor_alloc, at offsets aligned to the larger of
    // the device's and the staging alignment), in a buffer of their own, before the rest of the
    // context is allocated; zero-copy slots are then requested at the same aligned sizes, and
    // each input area mirrors the slots its uploads read (a fed input reads its feeder's kept
    // output slot, and the other inputs lie beside it in that feeder's reservation), so a
    // call's uploads are one run per reservation they read and its downloads one run (rule 10;
    // docs/benchmark.md, "Coalesced copies and I/O areas"). `clear`: the area buffer is cleared once
    // (ggml_backend_buffer_clear), so the gaps a coalesced download reads hold defined bytes
    // (docs/contract.md, rule 10); false only for compute-sanitizer initcheck's canary
    // (--uninitialized-areas). Declare the areas with declare_areas.
    void place_areas(size_t staging_alignment, bool clear);
    // sam3d_session_add_area of every area on `s` (none in the scattered layout).
    void declare_areas(sam3d_session * s);
    // Transfer-only replay: writes the fixed pattern into the output tensors (after allocation).
    void fill_outputs();
    // One image in `mode` with input data set `data` (0 or 1). Returns the wall time in ms.
    double run(sam3d_session * s, Mode mode, int data);
    // SHA-256 of all downloads of the last image in `mode`, in profile order.
    std::string digest(Mode mode);

    // The last image's host time excluded from the zerocopy and queued wall times (the
    // producer's writes into slots, the consumer's reads out of them), and the queued mode's
    // wait points per image (before a dependent input or the synchronous graph, for ring room,
    // at the end).
    double excluded_write_ms() const;
    double excluded_read_ms() const;
    size_t dependency_waits() const;
    size_t ring_waits() const;
    size_t end_waits() const;

   private:
    struct State;
    std::unique_ptr<State> s_;
};

}  // namespace sam3d_bench
