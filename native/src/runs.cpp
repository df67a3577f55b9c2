// Coalesced copies (runs.h).
#include "runs.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>

#include "validate.h"

namespace sam3d {

namespace {

uintptr_t device_address(const ggml_tensor * t, size_t offset) { return reinterpret_cast<uintptr_t>(t->data) + offset; }

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
Descriptor descriptor(const D & d);
template <>
Descriptor descriptor(const sam3d_upload & u) {
    return {u.tensor, static_cast<const uint8_t *>(u.src), u.offset, u.size};
}
template <>
Descriptor descriptor(const sam3d_download & d) {
    return {d.tensor, static_cast<const uint8_t *>(d.dst), d.offset, d.size};
}

// `up`: uploads (a zero-copy call may bridge a gap only there: reading the slot bytes between
// two of its host ranges writes nothing of the caller's).
template <class D>
void runs_of(Session & s, const D * d, size_t n, bool zero_copy, bool up, std::vector<Run> * out) {
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
                         (gap == 0 || (gap <= SAM3D_COALESCE_GAP_BYTES && (!zero_copy || up) &&
                                       area_holding(s, buffer, begin, at + x.size) != nullptr));
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
    if (t == nullptr) {
        return fail(SAM3D_ERR_NULL_TENSOR, "area is NULL");
    }
    const ggml_backend_buffer_t buffer = tensor_buffer(t);
    if (buffer == nullptr || t->data == nullptr) {
        return fail(SAM3D_ERR_UNALLOCATED_TENSOR, std::string("area ('") + t->name + "') is not allocated in a backend buffer");
    }
    if (!ggml_backend_supports_buft(s.backend, ggml_backend_buffer_get_type(buffer))) {
        return fail(SAM3D_ERR_FOREIGN_TENSOR, std::string("area ('") + t->name + "') lives in a " +
                                                  ggml_backend_buffer_name(buffer) + " buffer, which backend " +
                                                  ggml_backend_name(s.backend) + " cannot use");
    }
    if (!ggml_is_contiguous(t)) {
        return fail(SAM3D_ERR_NOT_CONTIGUOUS, std::string("area ('") + t->name + "') is not contiguous");
    }
    if (ggml_nbytes(t) == 0) {
        return fail(SAM3D_ERR_EXTENT, std::string("area ('") + t->name + "') has no bytes: declare a tensor of at least one");
    }
    const Area a{buffer, device_address(t, 0), device_address(t, ggml_nbytes(t))};
    const auto order = [](const Area & x, const Area & y) {
        return x.buffer != y.buffer ? std::less<const void *>()(x.buffer, y.buffer) : x.begin < y.begin;
    };
    auto it = std::lower_bound(s.areas.begin(), s.areas.end(), a, order);
    const bool overlaps_next = it != s.areas.end() && it->buffer == a.buffer && it->begin < a.end;
    const bool overlaps_prev = it != s.areas.begin() && std::prev(it)->buffer == a.buffer && std::prev(it)->end > a.begin;
    if (overlaps_next || overlaps_prev) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, std::string("area ('") + t->name +
                                                    "') overlaps an area already declared: remove that one first");
    }
    const auto at = it - s.areas.begin();
    s.alloc.reserve(s.areas, s.areas.size() + 1);
    s.areas.insert(s.areas.begin() + at, a);
    return SAM3D_OK;
}

sam3d_status remove_area(Session & s, const ggml_tensor * t) {
    if (t == nullptr) {
        return fail(SAM3D_ERR_NULL_TENSOR, "area is NULL");
    }
    const ggml_backend_buffer_t buffer = tensor_buffer(t);
    const uintptr_t begin = device_address(t, 0);
    const uintptr_t end = t->data != nullptr ? device_address(t, ggml_nbytes(t)) : begin;
    auto it = std::find_if(s.areas.begin(), s.areas.end(),
                           [&](const Area & a) { return a.buffer == buffer && a.begin == begin && a.end == end; });
    if (t->data == nullptr || it == s.areas.end()) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, std::string("area ('") + t->name +
                                                    "') is not a declared area (declare it with sam3d_session_add_area)");
    }
    s.areas.erase(it);
    return SAM3D_OK;
}

void find_runs(Session & s, const sam3d_call & c, bool zero_copy) {
    runs_of(s, c.uploads, c.n_uploads, zero_copy, true, &s.up_runs);
    runs_of(s, c.downloads, c.n_downloads, zero_copy, false, &s.down_runs);
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
