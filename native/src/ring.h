// The staging buffer (rules 3, 4) and the ring of regions of zero-copy and queued calls (A5).
#pragma once

#include "session.h"

namespace sam3d {

// Makes the staging buffer hold `need` bytes of pinned memory, growing geometrically below the
// bound. false when pinned memory is unavailable (allocation failed or came back as ordinary
// CPU memory); the session then holds no staging buffer.
bool ensure_staging(Session & s, size_t need);

// The staging buffer at the bound (the ring); never reallocated under held regions.
bool ensure_ring(Session & s);

// Whether the reservation or a tracked call holds a region of the ring.
bool ring_busy(const Session & s);

// A region of `need` bytes overlapping no held region: first fit at the ring head, then at the
// front, then after each held region. Held regions are released only once complete and
// released (A5), so a fit never overwrites work in flight.
bool ring_alloc(Session & s, size_t need, size_t * at);

// The staging buffer's base address.
uint8_t * staging_base(const Session & s);

}  // namespace sam3d
