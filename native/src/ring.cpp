#include "ring.h"

#include <algorithm>

namespace sam3d {

uint8_t * staging_base(const Session & s) { return static_cast<uint8_t *>(ggml_backend_buffer_get_base(s.staging)); }

size_t staging_size(const Session & s) { return s.staging != nullptr ? ggml_backend_buffer_get_size(s.staging) : 0; }

size_t staging_growth(const Session & s, size_t need) {
    if (s.staging != nullptr && ggml_backend_buffer_get_size(s.staging) >= need) {
        return 0;
    }
    size_t want = need;
    if (s.staging != nullptr) {
        want = std::max(need, std::min(SAM3D_STAGING_BOUND_BYTES, 2 * ggml_backend_buffer_get_size(s.staging)));
    }
    return want;
}

bool ring_busy(const Session & s) {
    if (s.reservation && s.reservation->region.kind == Region::Kind::Ring) {
        return true;
    }
    return std::any_of(s.calls.begin(), s.calls.end(), [](const Call & c) { return c.region.kind == Region::Kind::Ring; });
}

size_t ring_allocation(const Session & s) {
    if (staging_size(s) >= SAM3D_STAGING_BOUND_BYTES || ring_busy(s)) {
        return 0;
    }
    return SAM3D_STAGING_BOUND_BYTES;
}

namespace {

// Calls f(begin, end) for every region of the ring held now.
template <class F>
void for_each_held(const Session & s, F && f) {
    if (s.reservation && s.reservation->region.kind == Region::Kind::Ring) {
        f(s.reservation->region.begin, s.reservation->region.end);
    }
    for (const Call & c : s.calls) {
        if (c.region.kind == Region::Kind::Ring) {
            f(c.region.begin, c.region.end);
        }
    }
}

}  // namespace

bool ring_fit(const Session & s, size_t capacity, size_t need, size_t * at) {
    bool any_held = false;
    for_each_held(s, [&](size_t, size_t) { any_held = true; });
    // Nothing held: start at the front, whose memory is likely still in cache.
    const auto fits = [&](size_t candidate) {
        const size_t c = align_up(candidate, s.alignment);
        if (c > capacity || need > capacity - c) {
            return false;
        }
        bool free = true;
        for_each_held(s, [&](size_t first, size_t second) { free = free && !(c < second && first < c + need); });
        if (free) {
            *at = c;
        }
        return free;
    };
    if (fits(any_held ? s.ring_head : 0) || fits(0)) {
        return true;
    }
    bool found = false;
    for_each_held(s, [&](size_t, size_t end) { found = found || fits(end); });
    return found;
}

bool allocate_staging(Session & s, size_t bytes) {
    if (s.staging != nullptr) {
        ggml_backend_buffer_free(s.staging);
        s.staging = nullptr;
    }
    ggml_backend_buffer_t buf = s.ggml.buft_alloc_buffer(s.host_buft, bytes);
    if (buf == nullptr) {
        return false;
    }
    // GGML's Vulkan host buffer type returns an ordinary CPU buffer when pinned allocation
    // fails (ggml_backend_vk_host_buffer_type_alloc_buffer): its type is then not host_buft.
    if (ggml_backend_buffer_get_type(buf) != s.host_buft ||
        reinterpret_cast<uintptr_t>(ggml_backend_buffer_get_base(buf)) % std::max<size_t>(s.alignment, 1) != 0) {
        ggml_backend_buffer_free(buf);
        return false;
    }
    s.staging = buf;
    return true;
}

}  // namespace sam3d
