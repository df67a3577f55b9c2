// The input decoder (decode.h says what an input is; make_corpus.py, the encoding).
#include "decode.h"

#include <algorithm>
#include <iterator>

namespace fuzz {

namespace {

size_t nbytes_of(int tensor) {
    const ggml_tensor * t = g_env[kOff].tensors[tensor];
    return t != nullptr ? ggml_nbytes(t) : 64;
}

size_t decode_offset(Input & in, size_t nbytes) {
    switch (in.pick(8)) {
        case 4: return in.pick(nbytes + 1);
        case 5: return nbytes;
        case 6: return nbytes + 1 + in.pick(4);
        case 7: return SIZE_MAX - in.pick(8);
        default: return 0;
    }
}

size_t decode_size(Input & in, size_t nbytes, size_t offset) {
    const size_t rest = offset <= nbytes ? nbytes - offset : 8;
    switch (in.pick(8)) {
        case 3: return 1 + in.pick(std::max<size_t>(rest, 1));
        case 4: return 0;
        case 5: return rest + 1;
        case 6: return SIZE_MAX - in.pick(8);  // offset + size overflows
        case 7: return 4 + 4 * in.pick(4);
        default: return rest;
    }
}

// Live slot sets other than the current reservation, for pointers a zero-copy call may not use
// (consumed, in flight) or may (kept and reported).
std::vector<int> other_live_sets() {
    std::vector<int> r;
    for (size_t s = 0; s < g_model.sets.size(); ++s) {
        if (g_model.sets[s].state != SlotSet::Expired && static_cast<int>(s) != g_model.pending) {
            r.push_back(static_cast<int>(s));
        }
    }
    return r;
}

HostRef decode_host(Input & in, bool zero_copy) {
    HostRef r;
    const size_t kind = in.pick(8);
    if (kind == 0) {
        return r;  // NULL
    }
    if (zero_copy && kind >= 2) {
        if (kind <= 5 && g_model.pending >= 0) {  // a slot of the current reservation
            const SlotSet & s = g_model.sets[g_model.pending];
            r.kind = HostRef::Slot;
            r.set = g_model.pending;
            r.slot = in.pick(4) % s.sizes.size();
            r.at = kind == 5 ? std::min<size_t>(4, shadow_of(s, r.slot) - 1) : 0;  // 5: inside, not at its start
            return r;
        }
        const std::vector<int> others = other_live_sets();
        if (kind >= 6 && !others.empty()) {  // inside a slot of another live set
            const SlotSet & s = g_model.sets[others[in.pick(8) % others.size()]];
            r.kind = HostRef::Slot;
            r.set = static_cast<int>(&s - g_model.sets.data());
            r.slot = in.pick(4) % s.sizes.size();
            r.at = kind == 7 ? 4 * in.pick(64) % shadow_of(s, r.slot) : 0;
            return r;
        }
    }
    r.kind = HostRef::Arena;
    r.at = 3 * in.pick(256);  // + at most 96 bytes stays inside kArena
    return r;
}

Desc decode_desc(Input & in, bool zero_copy) {
    Desc d;
    d.tensor = static_cast<int>(in.pick(kTensorChoices));
    d.host = decode_host(in, zero_copy);
    const size_t nbytes = nbytes_of(d.tensor);
    d.offset = decode_offset(in, nbytes);
    d.size = decode_size(in, nbytes, d.offset);
    return d;
}

Call decode_call(Input & in, bool zero_copy) {
    Call c;
    c.graph = in.pick(2) == 1;
    c.synchronous = in.pick(8) == 0;
    const size_t nu = in.pick(5);
    const size_t nd = in.pick(4);
    const size_t nulls = in.pick(32);
    c.null_ups = nulls == 0;
    c.null_downs = nulls == 1;
    for (size_t i = 0; i < nu; ++i) {
        c.ups.push_back(decode_desc(in, zero_copy));
    }
    for (size_t i = 0; i < nd; ++i) {
        c.downs.push_back(decode_desc(in, zero_copy));
    }
    return c;
}

// A ticket from the input: one the model knows (any state), 0, or one never handed out.
int decode_ticket(Input & in, std::array<sam3d_ticket, kWorlds> & ids) {
    const size_t k = in.pick(10);
    if (k < 8 && !g_model.tickets.empty()) {
        const int t = static_cast<int>(k % g_model.tickets.size());
        ids = g_model.tickets[t].id;
        return t;
    }
    ids.fill(k == 8 ? 0 : 1000000 + k);
    return -1;
}

// The sizes of a reservation's slots (make_corpus.py names them by index). Few of them large: every world but staged allocates them on the heap, where ASan poisons the
// shadow of each fresh block (four fifths of this target's time went there with one in six large).
const size_t kSlotSizes[] = {1,    2,    7,    16,   31,    32,    33,   48,   63,   64,  65,  96,
                             100,  128,  200,  256,  512,   1000,  4096, 8192, kMiB, 31 * kMiB,
                             SAM3D_STAGING_BOUND_BYTES, SAM3D_STAGING_BOUND_BYTES + 1, 0, SIZE_MAX, SIZE_MAX - 31,
                             SIZE_MAX / 2 + 1};

}  // namespace

InputStart decode_start(Input & in) {
    InputStart s;
    s.ordinary = in.pick(2) == 1;
    s.seed = static_cast<uint32_t>(in.pick(256));
    return s;
}

Op decode_op(Input & in) {
    Op op;
    switch (in.pick(8)) {
        case 0:
            op.kind = Op::Run;
            op.call = decode_call(in, false);
            break;
        case 1:
        case 2:
            op.kind = Op::Submit;
            op.flags = static_cast<unsigned>(in.pick(8));
            if (in.pick(16) == 0) {
                op.flags |= 8u << in.pick(4);  // an unknown bit
            }
            op.ticket_null = in.pick(8) == 0;
            op.call = decode_call(in, (op.flags & SAM3D_SUBMIT_ZERO_COPY) != 0);
            break;
        case 3: {
            op.kind = Op::Reserve;
            const size_t n = in.pick(5);
            op.null_slots = in.pick(16) == 0;
            for (size_t i = 0; i < n; ++i) {
                op.sizes.push_back(kSlotSizes[in.pick(std::size(kSlotSizes))]);
            }
            break;
        }
        case 4:
            op.kind = Op::Wait;
            op.ticket = decode_ticket(in, op.ids);
            break;
        case 5:
            op.kind = Op::Release;
            op.ticket = decode_ticket(in, op.ids);
            break;
        case 6:
            op.kind = in.pick(2) == 0 ? Op::ArmComputeFailure : Op::ResetCounters;
            break;
        case 7:
            op.kind = Op::Scribble;
            op.at = 3 * in.pick(256);
            op.n = std::min<size_t>(1 + in.pick(128), kArena - op.at);
            break;
    }
    return op;
}

}  // namespace fuzz
