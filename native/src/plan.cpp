#include "plan.h"

#include <algorithm>
#include <cstring>

#include "ring.h"
#include "validate.h"

namespace sam3d {

namespace {

// GGML 0.20.2's host buffer types, each pinned by a test in native/tests/test_ggml_contract.cpp.
struct HostBufferFact {
    const char * backend;  // ggml_backend_reg_name
    bool every_device;
};
constexpr HostBufferFact kHostBufferFacts[] = {
    // ggml_cuda_host_malloc: cudaMallocHost, page-locked for every device of the process under
    // unified addressing (every 64-bit CUDA platform); the type reports device 0.
    {"CUDA", true},
    // ggml_vk_host_malloc(vk_instance.devices[0], ...): memory imported into device 0 only.
    {"Vulkan", false},
};

}  // namespace

bool host_buffer_every_device(const char * reg_name) {
    for (const HostBufferFact & f : kHostBufferFacts) {
        if (reg_name != nullptr && std::strcmp(f.backend, reg_name) == 0) {
            return f.every_device;
        }
    }
    return false;
}

sam3d_fallback static_fallback(const Session & s, const ggml_backend_dev_props & props) {
    if (!props.caps.async || !props.caps.host_buffer || s.host_buft == nullptr) {
        return SAM3D_FALLBACK_NO_ASYNC_CAPS;
    }
    const ggml_backend_dev_t reported = s.ggml.buft_get_device(s.host_buft);
    if (reported == s.dev) {
        return SAM3D_FALLBACK_COUNT;
    }
    // The device's own host buffer type reports another device of its backend (or none): usable
    // only where that backend's pinned memory is usable by every one of its devices.
    if (reported != nullptr && host_buffer_every_device(s.ggml.reg_name(ggml_backend_dev_backend_reg(s.dev)))) {
        return SAM3D_FALLBACK_COUNT;
    }
    return SAM3D_FALLBACK_FOREIGN_HOST_BUFFER;
}

size_t staging_need(const Session & s, const sam3d_call & c) {
    size_t need = 0;
    for (size_t i = 0; i < c.n_uploads; ++i) {
        if (!add_aligned(&need, c.uploads[i].size, s.alignment)) {
            return SIZE_MAX;
        }
    }
    for (size_t i = 0; i < c.n_downloads; ++i) {
        if (!add_aligned(&need, c.downloads[i].size, s.alignment)) {
            return SIZE_MAX;
        }
    }
    return need;
}

namespace {

Plan sync(sam3d_fallback reason) {
    Plan p;
    p.reason = reason;
    return p;
}

// Why memory the call's host pointers name cannot batch (its fallback reason), COUNT if pinned.
sam3d_fallback memory_reason(const Region & r) {
    return r.kind == Region::Kind::Ring ? SAM3D_FALLBACK_COUNT : r.reason;
}

}  // namespace

Plan plan(Session & s, const Request & r) {
    const sam3d_call * c = r.call;
    const bool transfers = r.entry == Entry::Reserve || c->n_uploads + c->n_downloads > 0;
    if (!s.batching || (c != nullptr && c->synchronous)) {
        return sync(SAM3D_FALLBACK_COUNT);
    }
    // A call without transfers stages nothing: never a fallback nor a pinned batch. Queued, it
    // is enqueued (A6); otherwise it runs synchronously.
    if (!transfers && (!r.queued || s.static_fallback != SAM3D_FALLBACK_COUNT)) {
        return sync(SAM3D_FALLBACK_COUNT);
    }
    if (s.static_fallback != SAM3D_FALLBACK_COUNT) {
        return sync(s.static_fallback);
    }
    if (!transfers) {
        Plan p;
        p.path = Path::Queued;
        return p;
    }
    const size_t need = r.entry == Entry::Reserve ? r.reserve_bytes : staging_need(s, *c);
    if (need > SAM3D_STAGING_BOUND_BYTES) {
        return sync(SAM3D_FALLBACK_OVERSIZED);
    }
    if (r.entry == Entry::ZeroCopy) {
        // The memory is the slots': pinned only if every slot the call names is a ring region.
        sam3d_fallback reason = r.own != nullptr ? memory_reason(*r.own) : SAM3D_FALLBACK_COUNT;
        for (const Call * k : *r.kept) {
            reason = std::min(reason, memory_reason(k->region));
        }
        if (reason != SAM3D_FALLBACK_COUNT) {
            return sync(reason);
        }
    }
    if (c != nullptr) {
        if (sam3d_status st = validate_async(*c)) {
            Plan p;
            p.path = Path::Rejected;
            p.rejected = st;
            return p;
        }
    }
    Plan p;
    p.path = r.queued ? Path::Queued : Path::Staged;
    if (r.entry == Entry::ZeroCopy) {
        return p;
    }
    if (r.entry == Entry::Run) {
        // While the ring holds regions, a run stages through a free one (A6); otherwise through
        // the growable staging buffer.
        size_t at = 0;
        if (ring_busy(s)) {
            if (!ring_alloc(s, need, &at)) {
                return sync(SAM3D_FALLBACK_OVERSIZED);
            }
        } else if (!ensure_staging(s, need)) {
            return sync(SAM3D_FALLBACK_PINNED_UNAVAILABLE);
        }
        p.begin = at;
        p.end = at + need;
        return p;
    }
    // A queued copying call or a reservation holds a ring region until released (A5).
    size_t at = 0;
    if (!ensure_ring(s)) {
        return sync(SAM3D_FALLBACK_PINNED_UNAVAILABLE);
    }
    if (!ring_alloc(s, need, &at)) {
        return sync(SAM3D_FALLBACK_OVERSIZED);  // the ring is full of calls not yet released
    }
    p.begin = at;
    p.end = at + need;
    p.held = true;
    return p;
}

}  // namespace sam3d
