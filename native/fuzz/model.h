// The reference model: what the caller knows (reservations as slot sets, tickets, the current
// reservation, the failures it armed), a request in terms of no world (Call, what the input
// decoder builds), the same request as each world's sam3d_call, and what the contract says of
// it (judge: the errors that apply; takes_staged_path: which sessions batch it). The operations
// (operations.cpp) update the model; the checks (checks.cpp) compare the worlds against it.
// model.cpp owns g_model.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "worlds.h"

namespace fuzz {

constexpr size_t kShadow = 256;   // bytes of each slot the checks read and write
constexpr uint8_t kCanary = 0xC3;
constexpr size_t kMiB = size_t{1} << 20;

// What the caller knows: reservations (slot sets), tickets, the current reservation. Host memory
// is named the same in every world (resolve() gives each world's bytes).
struct HostRef {
    enum Kind { Null, Arena, Slot } kind = Null;
    size_t at = 0;  // Arena: offset in the arena; Slot: offset in the slot
    int set = -1;   // Slot: index in g_model.sets
    size_t slot = 0;
};

struct Region {
    HostRef ref;
    size_t size;
};

// Per world: caller bytes an operation leaves with unspecified values in that world (the slot
// tails a zero-copy download run bridges with SAM3D_SUBMIT_SLOT_TAILS; rule 10).
using Scratch = std::array<std::vector<Region>, kWorlds>;

struct SlotSet {
    enum State { Pending, InFlight, Reported, Expired } state = Pending;
    std::vector<size_t> sizes;
    std::array<std::vector<uint8_t *>, kWorlds> ptr;
    std::array<bool, kWorlds> pinned{};
    bool kept = false;  // kept slots not released yet
    bool released = false;      // kept slots sam3d_session_release gave back
    std::vector<int> readers;   // the queued calls (g_model.tickets) whose uploads read its kept slots
    std::array<bool, kWorlds> gone{};  // world w's ring region was handed back (A4, A5)
};

struct TicketModel {
    std::array<sam3d_ticket, kWorlds> id{};
    bool queued = false;
    bool zero_copy = false;
    bool fails = false;     // its compute was armed to fail
    bool waited = false;    // a queued call's wait returned
    bool kept = false;      // holds kept slots now (release is valid once reported)
    bool lower_bound_counts = true;  // its failure counts toward failed_calls' lower bound
    int set = -1;           // the reservation it consumed
    std::vector<Region> outputs;
    Scratch scratch;        // slot tails its bridged download runs write, per world (rule 10)
    // World w took it on the staged path and nothing the contract says completes it happened
    // since (A6, rule 5: its wait or a later ticket's, a call completed on return, a failure;
    // without events, any wait): surely still in flight there.
    std::array<bool, kWorlds> flying{};
    bool in_flight() const { return queued && !waited; }
    bool reported() const { return !queued || waited; }
};

// A declared area (sam3d_session_add_area): bytes [begin, end) of the worlds' tensor buffer,
// at the same offsets in every world.
struct AreaModel {
    size_t begin;
    size_t end;
};

struct Model {
    std::vector<AreaModel> areas;  // declared in every world's session, disjoint
    std::vector<SlotSet> sets;
    int pending = -1;
    std::vector<TicketModel> tickets;
    bool armed = false;          // the next call's compute fails
    uint64_t failed_lo = 0;      // failed_calls is within [failed_lo, failed_hi]
    uint64_t failed_hi = 0;
    uint32_t fills = 0;          // seeds for harness writes
};
extern Model g_model;

// The bytes `r` names in world w (NULL for HostRef::Null).
uint8_t * resolve(const HostRef & r, int w);

inline size_t shadow_of(const SlotSet & s, size_t slot) { return std::min(s.sizes[slot], kShadow); }

// Writes the same bytes to [ref, ref+n) in every world (the caller writing its memory): a fresh
// fill, or the canary.
void write_all(const HostRef & ref, size_t n, bool canary);

// Caller memory the checks compare: the arena and the first kShadow bytes of every live slot.
struct Block {
    HostRef ref;
    size_t size;
};

std::vector<Block> blocks();
bool same_block(const HostRef & a, const HostRef & b);
// Whether byte i of block b lies in one of `rs`.
bool covers(const std::vector<Region> & rs, const Block & b, size_t i);
// The outputs of the queued calls not waited yet, and how many such calls there are.
std::vector<Region> in_flight_outputs();
// The scratch bytes of world w of the queued calls not waited yet.
std::vector<Region> in_flight_scratch(int w);
size_t outstanding_model();

// ------------------------------------------------------------------------ the ring (A2, A4, A5)
// The ring bytes world w (pinned) holds for slot sets now, by the contract: the current
// reservation; a consumed reservation until the first reservation after its call's completion
// was reported (A2); kept slots until their release, then until the first reservation after
// every call that read them completed (A4). *exact: nothing else may hold ring bytes now (no
// queued copying call in flight, no released kept region whose readers may or may not have
// completed), so the session's staging in flight is exactly this; else at least this.
size_t held_ring_bytes(int w, bool * exact);

// What each rule says completes outstanding queued calls (their `flying`): a call completed on
// return, or one that failed (A6, rule 5): every one.
void complete_all_model();
// A wait that returned for ticket t: it and every earlier ticket (calls execute in submission
// order, A6); in a world without events (a full synchronize, A5) every one.
void complete_by_wait(int t);
// At a reservation: the released kept regions whose readers all completed are handed back, in
// the worlds where they were (A4); the model cannot tell the rest (`flying` false, not waited).
void reclaim_released();
// Whether released kept slots are surely still read by a call in flight in world w (A4).
bool still_read(const SlotSet & s, int w);

// ------------------------------------------------------------------------ requests
// A request in terms of no world: tensors by TensorId, host memory by HostRef.

struct Desc {
    int tensor = kNullTensor;
    HostRef host;
    size_t offset = 0;
    size_t size = 0;
};

struct Call {
    std::vector<Desc> ups;
    std::vector<Desc> downs;
    bool null_ups = false;
    bool null_downs = false;
    bool graph = false;
    bool synchronous = false;
};

// The request as world w's session receives it.
struct WorldCall {
    std::vector<sam3d_upload> ups;
    std::vector<sam3d_download> downs;
    sam3d_call call{};
};

WorldCall materialize(const Call & c, int w);

// Reading or writing caller memory of a call still in flight is the caller's error: such
// calls are not made (nothing else is excluded).
bool touches_in_flight(const Call & c);

// What the contract says of a request: `must` holds the errors that apply (the call is rejected
// with one of them); `names` the descriptor names an error message may give for each status;
// `late_views` the descriptors whose tensor is a view without a buffer of its own (GGML's
// blocking set/get take it, the staged path refuses it: unallocated_tensor).
struct Verdict {
    std::vector<sam3d_status> must;
    std::vector<std::pair<sam3d_status, std::string>> names;
    std::vector<std::string> late_views;
    bool own = false;               // uses a slot of the current reservation
    std::vector<int> kept_sources;  // slot sets whose kept slots it reads
    bool flag_error = false;
    bool rejects() const { return !must.empty(); }
    bool allows(sam3d_status st) const {
        return must.empty() ? st == SAM3D_OK || st == SAM3D_ERR_COMPUTE
                            : std::find(must.begin(), must.end(), st) != must.end();
    }
};

// `w`: the session whose host pointers count (slots of different sessions lie differently, so a
// download larger than its slot may overlap the next slot in one session and not in another).
Verdict judge(const Call & c, bool submit, unsigned flags, bool ticket_null, int w);

// Whether world w's session would take the staged path for a call it accepts (plan.cpp, the
// plan's batchable()): batching on, not synchronous, no static fallback, and for a zero-copy
// call every slot set it names pinned. Valid descriptors are far below the bound, and a ring
// without room does not count (docs/contract.md, rule 1): the path-dependent refusal does not
// depend on what is in flight.
bool takes_staged_path(const Call & c, bool zero_copy, const Verdict & v, int w);

// ------------------------------------------------------------------------ coalesced copies
// docs/contract.md, rule 10, read from the contract, not from the core: the GGML copies a batched
// call makes, in order, for one direction of world w's call `m` (every descriptor valid).

struct RunModel {
    size_t first = 0;   // descriptors [first, last)
    size_t last = 0;
    uintptr_t begin = 0;  // the first descriptor's first device byte
    size_t bytes = 0;     // to the last one's end, gaps included
    const uint8_t * host = nullptr;  // the first descriptor's host pointer
    ggml_backend_buffer_t buffer = nullptr;
};

// The maximal runs: a descriptor joins the run before it when both lie in one buffer, it starts
// at or after the run's end, either exactly there or inside one declared area holding the run
// and it at most SAM3D_COALESCE_GAP_BYTES after, and, zero-copy, its host pointer is as far after
// the run's first host byte as its device range after the run's first device byte. A zero-copy
// download bridges such a gap only from the run's last slot to the next slot of the reservation
// (every download's dst is a slot of it), and only when the run's last descriptor fills its slot
// or the call has SAM3D_SUBMIT_SLOT_TAILS (`slot_tails`). `c`: the request `m` is world w's of.
std::vector<RunModel> expected_runs(const Call & c, const WorldCall & m, bool up, bool zero_copy, bool slot_tails,
                                    int w);

// The device bytes [begin, end) a run writes or reads that are no descriptor's: its gaps.
struct Gap {
    uintptr_t begin;
    uintptr_t end;
};
std::vector<Gap> gaps_of(const std::vector<RunModel> & runs, const WorldCall & m, bool up);

// The host bytes a zero-copy call's download runs `runs` write that are no descriptor's: from a
// descriptor's end to the next one's start inside one run (its slot's tail, then the padding up
// to the next slot), as regions of the earlier descriptor's slot (rule 10: unspecified values).
std::vector<Region> host_gaps_of(const std::vector<RunModel> & runs, const Call & c, const WorldCall & m);

// What sam3d_session_add_area (add) or sam3d_session_remove_area of tensor choice `tensor`
// returns given the model's areas (transfer.h, rule 10); *bytes: the tensor's bytes when it has
// data.
sam3d_status judge_area(int tensor, bool add, AreaModel * bytes);

}  // namespace fuzz
