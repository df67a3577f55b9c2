// The entry points' work with the session lock held: run, submit, wait, release, reserve.
#pragma once

#include "session.h"

namespace sam3d {

sam3d_status run_locked(Session & s, const sam3d_call & c);
sam3d_status submit_locked(Session & s, const sam3d_call & c, unsigned flags, sam3d_ticket * ticket);
sam3d_status wait_locked(Session & s, sam3d_ticket id);
sam3d_status release_locked(Session & s, sam3d_ticket id);
sam3d_status reserve_locked(Session & s, const sam3d_slot_request * req, size_t n, void ** slots);

}  // namespace sam3d
