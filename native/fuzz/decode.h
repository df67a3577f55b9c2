// The input decoder. An input is a sequence of operations decoded with FuzzedDataProvider, one
// byte per choice (native/fuzz/make_corpus.py writes seeds in that encoding and describes it):
// run, submit (any flags, ticket or NULL), reserve, wait, release, reset of the counters, writes
// to caller host memory, and an armed compute failure. Calls are built from the input:
// descriptor arrays (or NULL arrays) over the worlds' tensors (plain, contiguous views,
// non-contiguous views, a view made after its source was allocated, an unallocated tensor,
// NULL), offsets and sizes in range, out of range and overflowing, host pointers into the
// caller arena (overlaps included), NULL, or into slots; a descriptor may also follow the one
// before it on the device (where it ends, a small gap after, or as far after as the next slot
// after the previous one's slot: the worlds' tensors lie back to back in one buffer) with its
// host pointer as far after the previous one's, so that calls have runs to coalesce
// (docs/contract.md, rule 10), and areas are declared and withdrawn. Some choices depend on the model as the
// operations before left it (the current reservation, live slot sets, tickets handed out), so
// each operation is decoded just before it runs. Decoding changes nothing.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model.h"

namespace fuzz {

// Operations an input runs at most (bytes after them are not read).
constexpr size_t kMaxOps = 32;

// The input's bytes as choices.
class Input {
   public:
    Input(const uint8_t * data, size_t size) : p_(data, size) {}
    // A choice in [0, n), n <= 256: one byte (0 once the input is used up).
    size_t pick(size_t n) { return p_.ConsumeIntegralInRange<size_t>(0, n - 1); }
    bool more() { return p_.remaining_bytes() > 0; }

   private:
    FuzzedDataProvider p_;
};

// What an input starts with.
struct InputStart {
    bool ordinary = false;  // the unpinned world's staging allocation returns ordinary memory
    uint32_t seed = 0;      // of the tensors' and the caller memory's first bytes
};
InputStart decode_start(Input & in);

// One operation and its arguments.
struct Op {
    enum Kind { Run, Submit, Reserve, Wait, Release, ArmComputeFailure, ResetCounters, Scribble, AddArea, RemoveArea } kind = Run;
    // Run, Submit (flags and ticket_null: Submit only)
    unsigned flags = 0;
    bool ticket_null = false;
    Call call;
    // Reserve
    std::vector<size_t> sizes;
    bool null_slots = false;
    // Wait, Release: the model's ticket (-1: none it handed out) and each world's id
    int ticket = -1;
    std::array<sam3d_ticket, kWorlds> ids{};
    // Scribble: the caller writes arena bytes [at, at + n)
    size_t at = 0;
    size_t n = 0;
    // AddArea, RemoveArea: the tensor choice (TensorId)
    int tensor = kNullTensor;
};
Op decode_op(Input & in);

}  // namespace fuzz
