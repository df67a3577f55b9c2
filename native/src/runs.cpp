// Coalesced copies (runs.h).
#include "runs.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>

#include "validate.h"

namespace sam3d {

namespace {

// The declared area holding [begin, end) of `buffer`, or nullptr (areas are sorted, disjoint).
const Area * area_holding(const Session & s, ggml_backend_buffer_t buffer, uintptr_t begin, uintptr_t end) {
    const auto before = [](const Area & a, const std::pair<ggml_backend_buffer_t, uintptr_t> & k) {
        return a.buffer != k.first ? std::less<const void *>()(a.buffer, k.first) : a.end <= k.second;
    };
    auto it = std::lower_bound(s.areas.begin(), s.areas.end(), std::make_pair(buffer, begin), before);
    if (it == s.areas.end() || it->buffer != buffer || it->begin > begin || it->end < end) {
        return nullptr;
    }
    return &*it;
}

struct Descriptor {
    const ggml_tensor * tensor;
    const uint8_t * host;
    size_t offset;
    size_t size;
};

template <class D>
Descriptor descriptor(const D & d) {
    return {d.tensor, static_cast<const uint8_t *>(host_of(d)), d.offset, d.size};
}

// Whether a zero-copy call may bridge the host bytes between the run's last descriptor and
// descriptor i (which mirror the device gap). Uploads only read slot bytes. A download writes
// them, so only when they are the run's last slot's bytes past its descriptor and the padding
// after that slot: descriptor i's slot is the next one of the reservation, and the last
// descriptor fills its slot or the caller said its slots' tails are scratch (SLOT_TAILS).
template <class D>
bool bridges_host(const Session & s, const D * d, size_t last, size_t i, bool up, bool slot_tails) {
    if (up) {
        return true;
    }
    const size_t slot = s.down_slots[last];
    return s.down_slots[i] == slot + 1 && (slot_tails || d[last].size == s.reservation->slots[slot].size);
}

// `up`: uploads, `zero_copy`: host ranges are slots (rule 10's host conditions).
template <class D>
void runs_of(Session & s, const D * d, size_t n, bool zero_copy, bool slot_tails, bool up, std::vector<Run> * out) {
    s.alloc.reserve(*out, n);
    out->clear();
    for (size_t i = 0; i < n; ++i) {
        const Descriptor x = descriptor(d[i]);
        const uintptr_t at = device_address(x.tensor, x.offset);
        if (!out->empty()) {
            Run & r = out->back();
            const Descriptor first = descriptor(d[r.first]);
            const uintptr_t begin = device_address(first.tensor, first.offset);
            const uintptr_t end = begin + r.bytes;
            const ggml_backend_buffer_t buffer = tensor_buffer(x.tensor);
            // A range starting before the run's end wraps to a gap past any limit: never joined.
            const uintptr_t gap = at - end;
            // A copying call's run stops growing at a piece (rule 2 overlaps pieces' copies).
            bool joins = buffer == tensor_buffer(first.tensor) && (zero_copy || r.bytes < s.piece_bytes) &&
                         (gap == 0 || (gap <= SAM3D_COALESCE_GAP_BYTES &&
                                       area_holding(s, buffer, begin, at + x.size) != nullptr &&
                                       (!zero_copy || bridges_host(s, d, r.last - 1, i, up, slot_tails))));
            if (joins && zero_copy) {
                // The host bytes mirror the device's: as far after the run's first host byte.
                joins = x.host == first.host + (at - begin);
            }
            if (joins) {
                r.last = i + 1;
                r.bytes = static_cast<size_t>(at - begin) + x.size;
                continue;
            }
        }
        Run r;
        r.first = i;
        r.last = i + 1;
        r.bytes = x.size;
        out->push_back(r);
    }
}

}  // namespace

sam3d_status add_area(Session & s, const ggml_tensor * t) {
    Area a{};
    size_t at = 0;
    if (sam3d_status st = admit_area(s, t, &a, &at)) {
        return st;
    }
    s.alloc.reserve(s.areas, s.areas.size() + 1);
    s.areas.insert(s.areas.begin() + static_cast<std::ptrdiff_t>(at), a);
    return SAM3D_OK;
}

sam3d_status remove_area(Session & s, const ggml_tensor * t) {
    size_t at = 0;
    if (sam3d_status st = admit_remove_area(s, t, &at)) {
        return st;
    }
    s.areas.erase(s.areas.begin() + static_cast<std::ptrdiff_t>(at));
    return SAM3D_OK;
}

void find_runs(Session & s, const sam3d_call & c, bool zero_copy, bool slot_tails) {
    runs_of(s, c.uploads, c.n_uploads, zero_copy, slot_tails, true, &s.up_runs);
    runs_of(s, c.downloads, c.n_downloads, zero_copy, slot_tails, false, &s.down_runs);
}

size_t laid_out_bytes(const Session & s) {
    size_t need = 0;
    for (const std::vector<Run> * runs : {&s.up_runs, &s.down_runs}) {
        for (const Run & r : *runs) {
            if (!add_aligned(&need, r.bytes, s.alignment)) {
                return SIZE_MAX;
            }
        }
    }
    return need;
}

size_t spanning_runs(const Session & s) {
    size_t n = 0;
    for (const std::vector<Run> * runs : {&s.up_runs, &s.down_runs}) {
        for (const Run & r : *runs) {
            n += r.last - r.first > 1;
        }
    }
    return n;
}

void make_span(ggml_tensor * out, const ggml_tensor * t, size_t offset, size_t bytes) {
    std::memset(out, 0, sizeof *out);
    out->type = GGML_TYPE_I8;
    out->buffer = tensor_buffer(t);
    out->ne[0] = static_cast<int64_t>(bytes);
    out->ne[1] = out->ne[2] = out->ne[3] = 1;
    out->nb[0] = 1;
    out->nb[1] = out->nb[2] = out->nb[3] = bytes;
    out->op = GGML_OP_NONE;
    out->data = static_cast<uint8_t *>(t->data) + offset;
    std::snprintf(out->name, sizeof out->name, "sam3d span of %zu B", bytes);
}

}  // namespace sam3d
