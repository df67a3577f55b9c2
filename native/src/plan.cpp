#include "plan.h"

#include <algorithm>

#include "ring.h"
#include "validate.h"

namespace sam3d {

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
