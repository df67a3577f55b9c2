#include "validate.h"

#include <algorithm>
#include <functional>

namespace sam3d {

namespace {

std::string where(const char * array, size_t i, const char * field) {
    return std::string(array) + "[" + std::to_string(i) + "]." + field;
}

// Rule 1 for one descriptor (an upload when `up`, else a download).
sam3d_status check_descriptor(const Session & s, bool up, size_t i, const ggml_tensor * t, const void * host,
                              size_t offset, size_t size) {
    const char * array = up ? "uploads" : "downloads";
    if (t == nullptr) {
        return fail(SAM3D_ERR_NULL_TENSOR, where(array, i, "tensor") + " is NULL");
    }
    if (host == nullptr) {
        return fail(SAM3D_ERR_NULL_POINTER, where(array, i, up ? "src" : "dst") + " is NULL (tensor '" + t->name + "')");
    }
    ggml_backend_buffer_t buf = tensor_buffer(t);
    if (buf == nullptr || t->data == nullptr) {
        return fail(SAM3D_ERR_UNALLOCATED_TENSOR, where(array, i, "tensor") + " ('" + t->name +
                                                      "') is not allocated in a backend buffer");
    }
    if (!ggml_backend_supports_buft(s.backend, ggml_backend_buffer_get_type(buf))) {
        return fail(SAM3D_ERR_FOREIGN_TENSOR, where(array, i, "tensor") + " ('" + t->name + "') lives in a " +
                                                  ggml_backend_buffer_name(buf) + " buffer, which backend " +
                                                  ggml_backend_name(s.backend) + " cannot use");
    }
    if (!ggml_is_contiguous(t)) {
        return fail(SAM3D_ERR_NOT_CONTIGUOUS, where(array, i, "tensor") + " ('" + t->name + "') is not contiguous");
    }
    const size_t nbytes = ggml_nbytes(t);
    // The message names the bad field: the offset or the size alone past the end, else both.
    const auto extent = [&](const std::string & field) {
        return fail(SAM3D_ERR_EXTENT, field + ": [" + std::to_string(offset) + ", " + std::to_string(offset) + "+" +
                                          std::to_string(size) + ") is not inside the " + std::to_string(nbytes) +
                                          " bytes of tensor '" + t->name + "'");
    };
    if (size == 0) {
        return fail(SAM3D_ERR_EXTENT, where(array, i, "size") + " is 0: give the number of bytes to transfer");
    }
    if (offset > nbytes) {
        return extent(where(array, i, "offset"));
    }
    if (size > nbytes) {
        return extent(where(array, i, "size"));
    }
    if (size > nbytes - offset) {
        return extent(where(array, i, "offset") + " + " + where(array, i, "size"));
    }
    if (reinterpret_cast<uintptr_t>(host) > UINTPTR_MAX - size) {
        return fail(SAM3D_ERR_EXTENT, where(array, i, "size") + ": [" + where(array, i, up ? "src" : "dst") +
                                          ", +" + std::to_string(size) + ") wraps around the address space");
    }
    return SAM3D_OK;
}

// Sorts `r` and reports the first overlapping pair with the same key.
bool find_overlap(std::vector<Session::Range> & r, size_t * a, size_t * b) {
    std::sort(r.begin(), r.end(), [](const Session::Range & x, const Session::Range & y) {
        return x.key != y.key ? std::less<const void *>()(x.key, y.key) : x.begin < y.begin;
    });
    for (size_t k = 1; k < r.size(); ++k) {
        if (r[k].key == r[k - 1].key && r[k].begin < r[k - 1].end) {
            *a = std::min(r[k - 1].index, r[k].index);
            *b = std::max(r[k - 1].index, r[k].index);
            return true;
        }
    }
    return false;
}

}  // namespace

sam3d_status validate(Session & s, const sam3d_call & c) {
    if ((c.n_uploads > 0 && c.uploads == nullptr) || (c.n_downloads > 0 && c.downloads == nullptr)) {
        return fail(SAM3D_ERR_INVALID_ARGUMENT, c.uploads == nullptr && c.n_uploads > 0
                                                    ? "call.uploads is NULL with n_uploads > 0"
                                                    : "call.downloads is NULL with n_downloads > 0");
    }
    for (size_t i = 0; i < c.n_uploads; ++i) {
        const sam3d_upload & u = c.uploads[i];
        if (sam3d_status st = check_descriptor(s, true, i, u.tensor, u.src, u.offset, u.size)) {
            return st;
        }
    }
    for (size_t i = 0; i < c.n_downloads; ++i) {
        const sam3d_download & d = c.downloads[i];
        if (sam3d_status st = check_descriptor(s, false, i, d.tensor, d.dst, d.offset, d.size)) {
            return st;
        }
    }
    size_t a = 0;
    size_t b = 0;
    s.alloc.reserve(s.ranges, std::max(c.n_uploads, c.n_downloads));
    s.ranges.clear();
    for (size_t i = 0; i < c.n_uploads; ++i) {
        const sam3d_upload & u = c.uploads[i];
        const uintptr_t begin = reinterpret_cast<uintptr_t>(u.tensor->data) + u.offset;
        s.ranges.push_back({tensor_buffer(u.tensor), begin, begin + u.size, i});
    }
    if (find_overlap(s.ranges, &a, &b)) {
        return fail(SAM3D_ERR_OVERLAPPING_UPLOADS, "uploads[" + std::to_string(a) + "] and uploads[" +
                                                       std::to_string(b) + "] write overlapping bytes of one buffer");
    }
    s.ranges.clear();
    for (size_t i = 0; i < c.n_downloads; ++i) {
        const sam3d_download & d = c.downloads[i];
        const uintptr_t begin = reinterpret_cast<uintptr_t>(d.dst);
        s.ranges.push_back({nullptr, begin, begin + d.size, i});
    }
    if (find_overlap(s.ranges, &a, &b)) {
        return fail(SAM3D_ERR_OVERLAPPING_OUTPUTS, "downloads[" + std::to_string(a) + "].dst and downloads[" +
                                                       std::to_string(b) + "].dst overlap in host memory");
    }
    return SAM3D_OK;
}

sam3d_status validate_async(const sam3d_call & c) {
    const size_t n = c.n_uploads + c.n_downloads;
    for (size_t k = 0; k < n; ++k) {
        const bool up = k < c.n_uploads;
        const size_t i = up ? k : k - c.n_uploads;
        const ggml_tensor * t = up ? c.uploads[i].tensor : c.downloads[i].tensor;
        if (t->buffer == nullptr) {
            return fail(SAM3D_ERR_UNALLOCATED_TENSOR,
                        where(up ? "uploads" : "downloads", i, "tensor") + " ('" + t->name +
                            "') is a view without a buffer of its own (created after '" + t->view_src->name +
                            "' was allocated): batched calls use GGML's async set/get, which need tensor->buffer; "
                            "call ggml_backend_view_init on it, or set call.synchronous");
        }
    }
    return SAM3D_OK;
}

namespace {

// A kept call (not released) one of whose slots holds [p, p+size), or nullptr.
Call * kept_slot_owner(Session & s, const void * p, size_t size) {
    const auto * q = static_cast<const uint8_t *>(p);
    for (Call & c : s.calls) {
        if (!c.keep || c.state == Call::State::Released || c.state == Call::State::Reported) {
            continue;
        }
        for (const Slot & slot : c.slots) {
            if (q >= slot.data && q < slot.data + slot.size && size <= static_cast<size_t>(slot.data + slot.size - q)) {
                return &c;
            }
        }
    }
    return nullptr;
}

}  // namespace

sam3d_status check_slots(Session & s, const sam3d_call & c, bool * own) {
    *own = false;
    static const std::vector<Slot> none;
    const std::vector<Slot> & current = s.reservation ? s.reservation->slots : none;
    s.alloc.reserve(s.used, current.size());
    s.used.assign(current.size(), false);
    s.alloc.reserve(s.kept_sources, c.n_uploads);
    s.kept_sources.clear();
    const size_t n = c.n_uploads + c.n_downloads;
    for (size_t k = 0; k < n; ++k) {
        const bool up = k < c.n_uploads;
        const size_t i = up ? k : k - c.n_uploads;
        const void * p = up ? c.uploads[i].src : c.downloads[i].dst;
        const size_t size = up ? c.uploads[i].size : c.downloads[i].size;
        const auto name = [&] { return where(up ? "uploads" : "downloads", i, up ? "src" : "dst"); };
        size_t slot = current.size();
        for (size_t j = 0; j < current.size(); ++j) {
            if (current[j].data == p) {
                slot = j;
            }
        }
        if (slot == current.size()) {
            Call * owner = up ? kept_slot_owner(s, p, size) : nullptr;
            if (owner == nullptr) {
                return fail(SAM3D_ERR_INVALID_ARGUMENT,
                            name() + " is not a slot of the current reservation" + (up ? " nor inside a kept slot" : "") +
                                (s.reservation ? "" : " (there is no current reservation: call sam3d_session_reserve first)"));
            }
            if (owner->state != Call::State::Kept) {
                return fail(SAM3D_ERR_INVALID_ARGUMENT, name() + " reads a kept slot of ticket " + std::to_string(owner->id) +
                                                            ", whose completion was not reported yet (wait for it first)");
            }
            s.kept_sources.push_back(owner);
            continue;
        }
        if (s.used[slot]) {
            return fail(SAM3D_ERR_INVALID_ARGUMENT, name() + " uses slot " + std::to_string(slot) + " a second time");
        }
        if (size > current[slot].size) {
            return fail(SAM3D_ERR_INVALID_ARGUMENT, where(up ? "uploads" : "downloads", i, "size") + " " +
                                                        std::to_string(size) + " exceeds the " +
                                                        std::to_string(current[slot].size) + " bytes of slot " +
                                                        std::to_string(slot));
        }
        s.used[slot] = true;
        *own = true;
    }
    return SAM3D_OK;
}

}  // namespace sam3d
