// A call's lifecycle, in one place: each entry point's work with the session lock held (admit,
// apply the plan, make every allocation, count, execute, record), the call's state machine
// (Call::State), the completion policy (events, the full synchronize, the drains of rules 5 and
// 7), the order of A6, and every counter of rule 8.
#pragma once

#include "session.h"

namespace sam3d {

sam3d_status run_locked(Session & s, const sam3d_call * c);
sam3d_status submit_locked(Session & s, const sam3d_call * c, unsigned flags, sam3d_ticket * ticket);
sam3d_status wait_locked(Session & s, sam3d_ticket id);
sam3d_status release_locked(Session & s, sam3d_ticket id);
sam3d_status reserve_locked(Session & s, const sam3d_slot_request * req, size_t n, void ** slots);

// Queued calls submitted and not yet waited.
size_t outstanding(const Session & s);
// Bytes of the ring held by the reservation and the tracked calls.
size_t staging_in_flight(const Session & s);
// Whether the current reservation's slots are pinned ring memory.
bool reservation_pinned(const Session & s);
// Zeroes the counters but staging_bytes.
void reset_counters(Session & s);
// Rule 5 after an allocation failure: completes every call in flight (one synchronize; none
// when nothing is in flight); their results stay for their waits.
void complete_outstanding(Session & s);
// A7: completes the session's outstanding work (before it is freed).
void close(Session & s);

}  // namespace sam3d
