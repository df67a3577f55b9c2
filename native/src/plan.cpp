#include "plan.h"

#include "ring.h"
#include "runs.h"

namespace sam3d {

namespace {

Plan sync(sam3d_fallback reason) {
    Plan p;
    p.reason = reason;
    return p;
}

}  // namespace

Plan plan(const Session & s, const Request & r) {
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
    Plan p;
    p.path = r.queued ? Path::Queued : Path::Staged;
    if (!transfers) {
        return p;
    }
    const size_t need = r.entry == Entry::Reserve ? r.reserve_bytes : laid_out_bytes(s);
    if (need > SAM3D_STAGING_BOUND_BYTES) {
        return sync(SAM3D_FALLBACK_OVERSIZED);
    }
    p.need = need;
    if (r.entry == Entry::ZeroCopy) {
        // The memory is the slots': pinned only if every slot the call names is a ring region.
        return r.slot_memory != SAM3D_FALLBACK_COUNT ? sync(r.slot_memory) : p;
    }
    if (r.entry == Entry::Run && !ring_busy(s)) {
        // Nothing held: a run stages through the growable staging buffer.
        p.staging = Staging::Grow;
        p.allocate = staging_growth(s, need);
        p.end = need;
        return p;
    }
    // While the ring holds regions, a run stages through a free one (A6); a queued copying call
    // or a reservation holds a ring region until released (A5). The ring is the staging buffer
    // at the bound, allocated first when it is not one yet.
    p.staging = Staging::Ring;
    p.allocate = r.entry == Entry::Run ? 0 : ring_allocation(s);
    p.held = r.entry != Entry::Run;
    const size_t capacity = p.allocate > 0 ? p.allocate : staging_size(s);
    if (!ring_fit(s, capacity, need, &p.begin)) {
        Plan full = sync(SAM3D_FALLBACK_OVERSIZED);  // the ring is full of calls not yet released
        full.no_room = true;
        return full;
    }
    p.end = p.begin + need;
    return p;
}

}  // namespace sam3d
