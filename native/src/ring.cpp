#include "ring.h"

#include <algorithm>

namespace sam3d {

uint8_t * staging_base(const Session & s) { return static_cast<uint8_t *>(ggml_backend_buffer_get_base(s.staging)); }

bool ensure_staging(Session & s, size_t need) {
    if (s.staging != nullptr && ggml_backend_buffer_get_size(s.staging) >= need) {
        return true;
    }
    size_t want = need;
    if (s.staging != nullptr) {
        want = std::max(need, std::min(SAM3D_STAGING_BOUND_BYTES, 2 * ggml_backend_buffer_get_size(s.staging)));
        ggml_backend_buffer_free(s.staging);
        s.staging = nullptr;
        s.counters.staging_bytes = 0;
    }
    ggml_backend_buffer_t buf = s.ggml.buft_alloc_buffer(s.host_buft, want);
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
    s.counters.staging_bytes = want;
    s.counters.staging_allocations += 1;
    return true;
}

bool ring_busy(const Session & s) {
    if (s.reservation && s.reservation->region.kind == Region::Kind::Ring) {
        return true;
    }
    return std::any_of(s.calls.begin(), s.calls.end(), [](const Call & c) { return c.region.kind == Region::Kind::Ring; });
}

bool ensure_ring(Session & s) {
    if (s.staging != nullptr && ggml_backend_buffer_get_size(s.staging) >= SAM3D_STAGING_BOUND_BYTES) {
        return true;
    }
    if (ring_busy(s)) {
        return s.staging != nullptr;
    }
    return ensure_staging(s, SAM3D_STAGING_BOUND_BYTES);
}

bool ring_alloc(Session & s, size_t need, size_t * at) {
    const size_t cap = s.staging != nullptr ? ggml_backend_buffer_get_size(s.staging) : 0;
    s.alloc.reserve(s.held, s.calls.size() + 1);
    s.held.clear();
    if (s.reservation && s.reservation->region.kind == Region::Kind::Ring) {
        s.held.emplace_back(s.reservation->region.begin, s.reservation->region.end);
    }
    for (const Call & c : s.calls) {
        if (c.region.kind == Region::Kind::Ring) {
            s.held.emplace_back(c.region.begin, c.region.end);
        }
    }
    if (s.held.empty()) {
        s.ring_head = 0;  // nothing held: restart at the front, whose memory is likely still in cache
    }
    for (size_t k = 0; k < s.held.size() + 2; ++k) {
        const size_t c = align_up(k == 0 ? s.ring_head : k == 1 ? 0 : s.held[k - 2].second, s.alignment);
        if (c > cap || need > cap - c) {
            continue;
        }
        bool free = true;
        for (const auto & h : s.held) {
            free = free && !(c < h.second && h.first < c + need);
        }
        if (free) {
            *at = c;
            s.ring_head = c + need;
            return true;
        }
    }
    return false;
}

}  // namespace sam3d
