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

HostRef decode_host_kind(Input & in, bool zero_copy, size_t kind) {
    HostRef r;
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

// A descriptor's first device byte as an offset in the worlds' tensor buffer (the same in every
// world), when its tensor is allocated and its extent valid.
bool device_at(const Desc & d, size_t * at) {
    const Env & e = g_env[kOff];
    const ggml_tensor * t = e.tensors[d.tensor];
    if (t == nullptr || t->data == nullptr) {
        return false;
    }
    const size_t nbytes = ggml_nbytes(t);
    if (d.size == 0 || d.offset > nbytes || d.size > nbytes - d.offset) {
        return false;
    }
    *at = static_cast<size_t>(static_cast<const uint8_t *>(t->data) - buffer_base(e)) + d.offset;
    return true;
}

// The contiguous tensor choices a following descriptor may name (worlds.h: the tensors lie back
// to back in one buffer, views inside their sources).
constexpr int kFollowers[] = {kA, kB, kOut, kRaw, kMat, kRawView, kMatRows, kLateView};

// The bytes from the previous descriptor's end to the next slot of the current reservation in
// the staged world (the one whose zero-copy calls batch), when its host memory is the start of a
// slot there, not the last, and it fits its slot; else 0.
size_t to_next_slot(const Desc & prev) {
    const HostRef & h = prev.host;
    if (h.kind != HostRef::Slot || h.set != g_model.pending || h.at != 0) {
        return 0;
    }
    const SlotSet & s = g_model.sets[h.set];
    if (h.slot + 1 >= s.sizes.size() || prev.size > s.sizes[h.slot]) {
        return 0;
    }
    const auto here = reinterpret_cast<uintptr_t>(s.ptr[kStaged][h.slot]);
    const auto next = reinterpret_cast<uintptr_t>(s.ptr[kStaged][h.slot + 1]);
    return next > here && next - here >= prev.size ? static_cast<size_t>(next - here) - prev.size : 0;
}

// Tensor choices 12-15: the descriptor follows the one before it on the device, starting where
// it ends (12), as far after its start as the next slot after its slot (13: with mirrored host
// memory, a zero-copy run across that slot's tail and padding, rule 10; where it ends when its
// host memory is no slot), 4 to 64 bytes after (14) or 1 to 64 bytes after (15), in a tensor
// holding that byte (the candidate picked); false when no tensor holds it or there is no previous
// valid descriptor (the gap and candidate choices are read either way).
bool decode_follow(Input & in, size_t choice, const Desc * prev, Desc * d) {
    const size_t gap = choice <= 13 ? 0 : choice == 14 ? 4 * (1 + in.pick(16)) : 1 + in.pick(64);
    const size_t which = in.pick(4);
    size_t at = 0;
    if (prev == nullptr || !device_at(*prev, &at)) {
        return false;
    }
    const size_t target = at + prev->size + (choice == 13 ? to_next_slot(*prev) : gap);
    std::vector<int> holding;
    for (int t : kFollowers) {
        size_t begin = 0;
        if (device_at({t, {}, 0, nbytes_of(t)}, &begin) && begin <= target && target < begin + nbytes_of(t)) {
            holding.push_back(t);
        }
    }
    if (holding.empty()) {
        return false;
    }
    d->tensor = holding[which % holding.size()];
    size_t begin = 0;
    device_at({d->tensor, {}, 0, nbytes_of(d->tensor)}, &begin);
    d->offset = target - begin;
    return true;
}

// Host kinds 8-15 with a previous descriptor: its host memory as far after the previous one's as
// the device range after its device range (rule 10's zero-copy condition): the arena or a slot
// of another live set at that offset, the next slot of the current reservation (adjacent slots
// lie as far apart as their aligned sizes).
HostRef mirror(const Desc & prev, const Desc & d) {
    size_t a = 0, b = 0;
    const size_t diff = device_at(prev, &a) && device_at(d, &b) && b >= a ? b - a : prev.size;
    HostRef r = prev.host;
    switch (r.kind) {
        case HostRef::Null: break;
        case HostRef::Arena:
            r.at = prev.host.at + diff <= kArena - std::min<size_t>(d.size, 96) ? prev.host.at + diff : 0;
            break;
        case HostRef::Slot: {
            const SlotSet & s = g_model.sets[r.set];
            if (r.set == g_model.pending && r.at == 0) {
                r.slot = (r.slot + 1) % s.sizes.size();
            } else if (r.at + diff < s.sizes[r.slot]) {
                r.at += diff;
            }
            break;
        }
    }
    return r;
}

Desc decode_desc(Input & in, bool zero_copy, const Desc * prev) {
    Desc d;
    const size_t choice = in.pick(kTensorChoices + 4);
    const bool follows = choice >= kTensorChoices && decode_follow(in, choice, prev, &d);
    if (!follows) {
        d.tensor = static_cast<int>(choice % kTensorChoices);
    }
    const size_t kind = in.pick(16);
    const bool mirrored = kind >= 8 && prev != nullptr;
    if (!mirrored) {
        d.host = decode_host_kind(in, zero_copy, kind % 8);
    }
    const size_t nbytes = nbytes_of(d.tensor);
    if (!follows) {
        d.offset = decode_offset(in, nbytes);
    }
    d.size = decode_size(in, nbytes, d.offset);
    if (mirrored) {
        d.host = mirror(*prev, d);
    }
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
        const Desc d = decode_desc(in, zero_copy, c.ups.empty() ? nullptr : &c.ups.back());
        c.ups.push_back(d);
    }
    for (size_t i = 0; i < nd; ++i) {
        const Desc d = decode_desc(in, zero_copy, c.downs.empty() ? nullptr : &c.downs.back());
        c.downs.push_back(d);
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
            op.flags = static_cast<unsigned>(in.pick(16));  // ZERO_COPY, QUEUED, KEEP_SLOTS, SLOT_TAILS
            if (in.pick(16) == 0) {
                op.flags |= 16u << in.pick(4);  // an unknown bit
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
        case 6: {
            const size_t k = in.pick(4);
            op.kind = k == 0 ? Op::ArmComputeFailure : k == 1 ? Op::ResetCounters : k == 2 ? Op::AddArea : Op::RemoveArea;
            if (k >= 2) {
                // Choices 12-15: the tensors whose gaps a run may bridge without touching the graph.
                const size_t t = in.pick(kTensorChoices + 4);
                constexpr int kAreas[] = {kRaw, kMat, kRawView, kMatRows};
                op.tensor = t < kTensorChoices ? static_cast<int>(t) : kAreas[t - kTensorChoices];
            }
            break;
        }
        case 7:
            op.kind = Op::Scribble;
            op.at = 3 * in.pick(256);
            op.n = std::min<size_t>(1 + in.pick(128), kArena - op.at);
            break;
    }
    return op;
}

}  // namespace fuzz
