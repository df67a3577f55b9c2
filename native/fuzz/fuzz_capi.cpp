// libFuzzer target for the core's C API on the CPU backend (built in the Clang ASan variant):
// the driver. An input is a sequence of operations (run, submit, reserve, wait, release,
// counter resets, writes to caller memory, armed compute failures, areas declared and removed)
// over real CPU tensors, run on five sessions ("worlds"); after each operation every world is
// checked against what the reference model predicts from the contract (statuses, the fields
// errors name, tickets, the runs and counters of each call, the ring bytes held) and against
// batching off's bytes, and a violation prints which and aborts, so libFuzzer keeps the input. At the end of the input every ticket is waited, every kept call released,
// and the ring must be empty again. The parts, each in its own files:
//   worlds.h/.cpp        the fake GGML (each world's recording seam) and the five worlds
//   model.h/.cpp         the reference model: what the caller knows, what the contract says
//   decode.h/.cpp        the input decoder (the encoding: make_corpus.py)
//   checks.h/.cpp        the invariant checker
//   operations.h/.cpp    each operation on the five worlds: calls, checks, the model's update
//   invariant.h          how a violation is reported
//   fuzz_capi.cpp        this driver: libFuzzer's entry points, one input from start to end
#include <cstddef>
#include <cstdint>

#include "checks.h"
#include "decode.h"
#include "model.h"
#include "operations.h"
#include "worlds.h"

namespace fuzz {
namespace {

void run(const Op & op) {
    switch (op.kind) {
        case Op::Run: do_call(op.call, false, 0, false); break;
        case Op::Submit: do_call(op.call, true, op.flags, op.ticket_null); break;
        case Op::Reserve: do_reserve(op.sizes, op.null_slots); break;
        case Op::Wait: do_wait(op.ticket, op.ids); break;
        case Op::Release: do_release(op.ticket, op.ids); break;
        case Op::ArmComputeFailure: arm_compute_failure(); break;
        case Op::ResetCounters: do_reset_counters(); break;
        case Op::Scribble: do_scribble(op.at, op.n); break;
        case Op::AddArea: do_area(op.tensor, true); break;
        case Op::RemoveArea: do_area(op.tensor, false); break;
    }
}

void run_input(Input & in) {
    const InputStart start = decode_start(in);
    g_model = Model{};
    begin_input(start.ordinary, start.seed);
    for (size_t n = 0; n < kMaxOps && in.more(); ++n) {
        run(decode_op(in));
    }
    drain();
    check_tensors_equal();
    close_sessions();
    // Everything this input allocated is freed before it ends: libFuzzer then sees as many frees
    // as allocations and skips its per-input leak check.
    g_model = Model{};
}

}  // namespace
}  // namespace fuzz

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    fuzz::init_worlds();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    fuzz::Input in(data, size);
    fuzz::run_input(in);
    return 0;
}
