// The invariant checker: the contract's invariants, checked after every operation against the
// worlds' state before it (Snapshot), the reference model and the seam entries each world made.
// Each check names its invariant; a violation aborts (invariant.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "model.h"

namespace fuzz {

// What the checks compare against: every world's caller memory (blocks()), tensor bytes,
// counters and staging in flight, before an operation.
struct Snapshot {
    std::vector<Block> blocks;
    std::array<std::vector<std::vector<uint8_t>>, kWorlds> host;
    std::array<std::vector<uint8_t>, kWorlds> tensors;
    std::array<sam3d_counters, kWorlds> counters{};
    std::array<size_t, kWorlds> in_flight{};
};
Snapshot snapshot();

// "<what> (session <world>)", the detail of a violation.
std::string where(const char * what, int w);

// Caller memory: an operation writes only `allowed` (its outputs) in each world, and in world w
// also `scratch[w]` (bytes it leaves with unspecified values); with `settle`, those then get
// batching off's bytes, so later results stay comparable (the call is complete; a queued call's
// settle at its wait). Outside the outputs and scratch of calls still in flight, every world
// holds batching off's bytes.
void check_host(const Snapshot & before, const std::vector<Region> & allowed, const Scratch & scratch = {},
                bool settle = true);
// A rejected request submits nothing: no world's tensor bytes changed.
void check_tensors_unchanged(const Snapshot & before, const char * op);
// Once every call has completed, every world's tensor bytes are batching off's.
void check_tensors_equal();
// The state every operation leaves: outstanding tickets and ring bytes as the model says,
// failed_calls within its bounds.
void check_state();

using Counter = uint64_t sam3d_counters::*;
// Every counter except failed_calls (checked by bounds) and those in `may_change` is the same.
void check_counters_only(const sam3d_counters & a, const sam3d_counters & b, std::initializer_list<Counter> may_change,
                         const char * invariant, const std::string & what);
// World w's seam entries of the operation are all of the `allowed` kinds.
void check_records_only(int w, std::initializer_list<Record::What> allowed, const char * invariant, const char * op);
// The seam entries of an accepted call against its descriptors and the counters it moved.
void check_accepted_call(int w, const Call & c, const WorldCall & m, bool zero_copy, bool slot_tails, bool fails,
                         const Verdict & v, const sam3d_counters & a, const sam3d_counters & b, size_t in_flight_before,
                         const char * op);
// A refusal's message starts with its status name and names the descriptor that is wrong (a
// submit's flag error: the first that applies, in transfer.h's order).
void check_message(sam3d_status st, const std::string & msg, const Verdict & v, int w, const char * op);
// Every world returned batching off's status.
void check_same_status(const std::array<sam3d_status, kWorlds> & st, const std::array<std::string, kWorlds> & msg,
                       const char * op);

}  // namespace fuzz
