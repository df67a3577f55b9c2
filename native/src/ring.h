// The staging buffer (rules 3, 4) and the ring of regions of zero-copy and queued calls (A5).
// The queries are pure (the plan asks them); allocate_staging is the one allocation of pinned
// memory, made when calls.cpp applies a plan.
#pragma once

#include "session.h"

namespace sam3d {

// The staging buffer's base address.
uint8_t * staging_base(const Session & s);
// The staging buffer's size in bytes (0: none held).
size_t staging_size(const Session & s);
// The allocation that makes the growable staging buffer hold `need` bytes: 0 when it already
// does, else geometric growth below the bound (never past it, never below `need`).
size_t staging_growth(const Session & s, size_t need);
// Whether the reservation or a tracked call holds a region of the ring.
bool ring_busy(const Session & s);
// The allocation that makes the staging buffer the ring (at the bound): 0 when it is one, or
// while regions are held (it is never reallocated under them).
size_t ring_allocation(const Session & s);
// A region of `need` bytes in a ring of `capacity` bytes overlapping no held region: first fit
// at the ring head (the front when nothing is held), then at the front, then after each held
// region. Held regions are released only once complete and released (A5), so a fit never
// overwrites work in flight.
bool ring_fit(const Session & s, size_t capacity, size_t need, size_t * at);
// Replaces the staging buffer with `bytes` of the host buffer type. false when pinned memory is
// unavailable (allocation failed, or came back as ordinary CPU memory or misaligned, rule 4):
// the session then holds no staging buffer.
bool allocate_staging(Session & s, size_t bytes);

}  // namespace sam3d
