// The operations an input is made of, each on the five worlds: the sam3d calls, the checks of
// their results (checks.h) and the model's update (model.h). Arguments come from the input
// decoder (decode.h); each operation leaves every invariant checked.
#pragma once

#include <array>
#include <cstddef>
#include <vector>

#include "model.h"

namespace fuzz {

// sam3d_session_run (submit false) or sam3d_session_submit with `flags` and a ticket (NULL with
// ticket_null). A call that reads or writes caller memory of a call in flight is not made.
void do_call(const Call & c, bool submit, unsigned flags, bool ticket_null);
// sam3d_session_wait and sam3d_session_release: t is the model's ticket (-1: none it handed
// out), ids each world's.
void do_wait(int t, const std::array<sam3d_ticket, kWorlds> & ids);
void do_release(int t, const std::array<sam3d_ticket, kWorlds> & ids);
// sam3d_session_reserve of `sizes` (NULL slots array with null_slots).
void do_reserve(const std::vector<size_t> & sizes, bool null_slots);
// The caller writes arena bytes [at, at + n), unless a queued call's dst lies there.
void do_scribble(size_t at, size_t n);
// sam3d_session_add_area (add) or sam3d_session_remove_area of tensor choice `tensor`.
void do_area(int tensor, bool add);
// The next call's compute fails (every world's).
void arm_compute_failure();
// sam3d_session_reset_counters.
void do_reset_counters();
// Every ticket waited, every kept call released, one more reservation: nothing is outstanding
// and the ring holds only that reservation.
void drain();
// sam3d_session_free of every world's session: it only completes its work.
void close_sessions();

}  // namespace fuzz
