// The reference model (model.h says what it holds).
#include "model.h"

#include <algorithm>
#include <cstring>

#include "invariant.h"

namespace fuzz {

Model g_model;

uint8_t * resolve(const HostRef & r, int w) {
    switch (r.kind) {
        case HostRef::Null: return nullptr;
        case HostRef::Arena: return g_env[w].arena.data() + r.at;
        case HostRef::Slot: return g_model.sets[r.set].ptr[w][r.slot] + r.at;
    }
    return nullptr;
}

NO_COVERAGE void write_all(const HostRef & ref, size_t n, bool canary) {
    // The harness is a caller: it writes only memory the contract gives it, the arena and, of a
    // reservation, each slot's own sizes[i] bytes (rule A1).
    const size_t room = ref.kind == HostRef::Arena ? kArena
                        : ref.kind == HostRef::Slot ? g_model.sets[ref.set].sizes[ref.slot]
                                                    : 0;
    CHECK(ref.at <= room && n <= room - ref.at, "the fuzz target writes only caller memory (the arena, a slot's own bytes)",
          "write of " + str(n) + " bytes at " + str(ref.at) + " of a block of " + str(room));
    const uint32_t seed = ++g_model.fills;
    for (int w = 0; w < kWorlds; ++w) {
        uint8_t * p = resolve(ref, w);
        if (canary) {
            std::memset(p, kCanary, n);
        } else {
            fill(p, n, seed);
        }
    }
}

std::vector<Block> blocks() {
    std::vector<Block> b = {{{HostRef::Arena, 0, -1, 0}, kArena}};
    for (size_t s = 0; s < g_model.sets.size(); ++s) {
        const SlotSet & set = g_model.sets[s];
        if (set.state == SlotSet::Expired) {
            continue;
        }
        for (size_t j = 0; j < set.sizes.size(); ++j) {
            b.push_back({{HostRef::Slot, 0, static_cast<int>(s), j}, shadow_of(set, j)});
        }
    }
    return b;
}

bool same_block(const HostRef & a, const HostRef & b) {
    return a.kind == b.kind && (a.kind != HostRef::Slot || (a.set == b.set && a.slot == b.slot));
}

NO_COVERAGE bool covers(const std::vector<Region> & rs, const Block & b, size_t i) {
    for (const Region & r : rs) {
        if (same_block(r.ref, b.ref) && i >= r.ref.at && i - r.ref.at < r.size) {
            return true;
        }
    }
    return false;
}

std::vector<Region> in_flight_outputs() {
    std::vector<Region> r;
    for (const TicketModel & t : g_model.tickets) {
        if (t.in_flight()) {
            r.insert(r.end(), t.outputs.begin(), t.outputs.end());
        }
    }
    return r;
}

std::vector<Region> in_flight_scratch(int w) {
    std::vector<Region> r;
    for (const TicketModel & t : g_model.tickets) {
        if (t.in_flight()) {
            r.insert(r.end(), t.scratch[w].begin(), t.scratch[w].end());
        }
    }
    return r;
}

size_t outstanding_model() {
    size_t n = 0;
    for (const TicketModel & t : g_model.tickets) {
        n += t.in_flight();
    }
    return n;
}

namespace {

size_t aligned_bytes(const SlotSet & s, int w) {
    const size_t a = std::max<size_t>(sam3d_session_staging_alignment(g_env[w].session), 1);
    size_t n = 0;
    for (size_t size : s.sizes) {
        n += (size + a - 1) / a * a;
    }
    return n;
}

// Whether a reader of a released region may still be in flight in world w, and whether surely.
void readers_of(const SlotSet & s, int w, bool * maybe, bool * surely) {
    *maybe = *surely = false;
    for (int r : s.readers) {
        const TicketModel & t = g_model.tickets[r];
        *surely = *surely || t.flying[w];
        *maybe = *maybe || t.in_flight();  // not waited: complete or not, as far as the caller knows
    }
}

}  // namespace

bool still_read(const SlotSet & s, int w) {
    bool maybe = false, surely = false;
    readers_of(s, w, &maybe, &surely);
    return s.released && !s.gone[w] && surely;
}

size_t held_ring_bytes(int w, bool * exact) {
    *exact = true;
    size_t held = 0;
    for (const SlotSet & s : g_model.sets) {
        if (!s.pinned[w]) {
            continue;
        }
        if (s.state != SlotSet::Expired) {
            held += aligned_bytes(s, w);  // the current reservation, a call's slots, kept ones
            continue;
        }
        if (!s.released || s.gone[w]) {
            continue;
        }
        bool maybe = false, surely = false;
        readers_of(s, w, &maybe, &surely);
        if (surely) {
            held += aligned_bytes(s, w);
        } else {
            *exact = false;  // its readers may have completed since the last reservation
        }
    }
    for (const TicketModel & t : g_model.tickets) {
        if (t.in_flight() && !t.zero_copy) {
            *exact = false;  // a queued copying call's laid-out bytes, when it took a ring region
        }
    }
    return held;
}

void complete_all_model() {
    for (TicketModel & t : g_model.tickets) {
        t.flying.fill(false);
    }
}

void complete_by_wait(int t) {
    for (size_t i = 0; i < g_model.tickets.size(); ++i) {
        for (int w = 0; w < kWorlds; ++w) {
            if (static_cast<int>(i) <= t || w != kDeferred) {
                g_model.tickets[i].flying[w] = false;
            }
        }
    }
}

void reclaim_released() {
    for (SlotSet & s : g_model.sets) {
        if (!s.released) {
            continue;
        }
        for (int w = 0; w < kWorlds; ++w) {
            bool maybe = false, surely = false;
            readers_of(s, w, &maybe, &surely);
            s.gone[w] = s.gone[w] || !maybe;
        }
    }
}

WorldCall materialize(const Call & c, int w) {
    WorldCall m;
    Env & e = g_env[w];
    for (const Desc & d : c.ups) {
        m.ups.push_back({e.tensors[d.tensor], resolve(d.host, w), d.offset, d.size});
    }
    for (const Desc & d : c.downs) {
        m.downs.push_back({e.tensors[d.tensor], resolve(d.host, w), d.offset, d.size});
    }
    m.call.uploads = c.null_ups ? nullptr : m.ups.data();
    m.call.n_uploads = m.ups.size();
    m.call.downloads = c.null_downs ? nullptr : m.downs.data();
    m.call.n_downloads = m.downs.size();
    m.call.graph = c.graph ? e.graph : nullptr;
    m.call.synchronous = c.synchronous;
    if (m.call.n_uploads == 0 && !c.null_ups) {
        m.call.uploads = nullptr;
    }
    if (m.call.n_downloads == 0 && !c.null_downs) {
        m.call.downloads = nullptr;
    }
    return m;
}

bool touches_in_flight(const Call & c) {
    const std::vector<Region> flying = in_flight_outputs();
    auto hits = [&](const Desc & d) {
        if (d.host.kind != HostRef::Arena) {
            return false;
        }
        const size_t n = std::min(d.size, kArena - d.host.at);
        for (const Region & r : flying) {
            if (r.ref.kind == HostRef::Arena && d.host.at < r.ref.at + r.size && r.ref.at < d.host.at + n) {
                return true;
            }
        }
        return false;
    };
    return std::any_of(c.ups.begin(), c.ups.end(), hits) || std::any_of(c.downs.begin(), c.downs.end(), hits);
}

namespace {

std::string dname(bool up, size_t i, const char * field) {
    return std::string(up ? "uploads[" : "downloads[") + str(i) + "]." + field;
}

}  // namespace

Verdict judge(const Call & c, bool submit, unsigned flags, bool ticket_null, int w) {
    Verdict v;
    auto must = [&](sam3d_status st, std::string name = "") {
        v.must.push_back(st);
        if (!name.empty()) {
            v.names.emplace_back(st, std::move(name));
        }
    };
    const bool zero_copy = flags & SAM3D_SUBMIT_ZERO_COPY;
    const bool queued = flags & SAM3D_SUBMIT_QUEUED;
    const bool keep = flags & SAM3D_SUBMIT_KEEP_SLOTS;
    const bool slot_tails = flags & SAM3D_SUBMIT_SLOT_TAILS;
    if (submit) {
        // transfer.h: the flag errors, before any descriptor is read, in this order; the message
        // names the first that applies.
        const unsigned known =
            SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED | SAM3D_SUBMIT_KEEP_SLOTS | SAM3D_SUBMIT_SLOT_TAILS;
        const char * first = (flags & ~known) != 0            ? "unknown bits"
                             : (queued || keep) && ticket_null ? "ticket is NULL"
                             : keep && !zero_copy              ? "SAM3D_SUBMIT_KEEP_SLOTS needs SAM3D_SUBMIT_ZERO_COPY"
                             : slot_tails && !zero_copy        ? "SAM3D_SUBMIT_SLOT_TAILS needs SAM3D_SUBMIT_ZERO_COPY"
                                                               : nullptr;
        if (first != nullptr) {
            must(SAM3D_ERR_INVALID_ARGUMENT, first);
            v.flag_error = true;
        }
    }
    if ((c.null_ups && !c.ups.empty()) || (c.null_downs && !c.downs.empty())) {
        must(SAM3D_ERR_INVALID_ARGUMENT);
        return v;
    }
    struct Span {
        const void * key;
        uintptr_t begin, end;
        size_t index;
    };
    std::vector<Span> up_spans, down_spans;
    const Env & e = g_env[w];
    for (size_t k = 0; k < c.ups.size() + c.downs.size(); ++k) {
        const bool up = k < c.ups.size();
        const size_t i = up ? k : k - c.ups.size();
        const Desc & d = up ? c.ups[i] : c.downs[i];
        const ggml_tensor * t = e.tensors[d.tensor];
        const uint8_t * host = resolve(d.host, w);
        if (t == nullptr) {
            must(SAM3D_ERR_NULL_TENSOR, dname(up, i, "tensor"));
            continue;
        }
        bool valid = true;
        if (host == nullptr) {
            must(SAM3D_ERR_NULL_POINTER, dname(up, i, up ? "src" : "dst"));
            valid = false;
        }
        const ggml_backend_buffer_t buffer = t->view_src != nullptr ? t->view_src->buffer : t->buffer;
        if (t->data == nullptr || buffer == nullptr) {
            must(SAM3D_ERR_UNALLOCATED_TENSOR, dname(up, i, "tensor"));
            continue;
        }
        if (t->buffer == nullptr) {
            v.late_views.push_back(dname(up, i, "tensor"));
        }
        if (!ggml_is_contiguous(t)) {
            must(SAM3D_ERR_NOT_CONTIGUOUS, dname(up, i, "tensor"));
            valid = false;
        }
        const size_t nbytes = ggml_nbytes(t);
        if (d.size == 0 || d.offset > nbytes || d.size > nbytes - d.offset) {
            // The field that is wrong: the size when it is 0, the offset or the size alone past
            // the end, else both.
            const std::string field = d.size == 0          ? dname(up, i, "size")
                                      : d.offset > nbytes ? dname(up, i, "offset")
                                      : d.size > nbytes   ? dname(up, i, "size")
                                                          : dname(up, i, "offset") + " + " + dname(up, i, "size");
            must(SAM3D_ERR_EXTENT, field);
            valid = false;
        }
        if (valid) {
            if (up) {
                const uintptr_t b = reinterpret_cast<uintptr_t>(t->data) + d.offset;
                up_spans.push_back({buffer, b, b + d.size, i});
            } else {
                const uintptr_t b = reinterpret_cast<uintptr_t>(host);
                down_spans.push_back({nullptr, b, b + d.size, i});
            }
        }
    }
    auto overlap = [&](const std::vector<Span> & spans, sam3d_status st, const char * array) {
        for (size_t a = 0; a < spans.size(); ++a) {
            for (size_t b = a + 1; b < spans.size(); ++b) {
                if (spans[a].key == spans[b].key && spans[a].begin < spans[b].end && spans[b].begin < spans[a].end) {
                    const size_t lo = std::min(spans[a].index, spans[b].index);
                    const size_t hi = std::max(spans[a].index, spans[b].index);
                    must(st, std::string(array) + "[" + str(lo) + "]");
                    v.names.emplace_back(st, std::string(array) + "[" + str(hi) + "]");
                }
            }
        }
    };
    overlap(up_spans, SAM3D_ERR_OVERLAPPING_UPLOADS, "uploads");
    overlap(down_spans, SAM3D_ERR_OVERLAPPING_OUTPUTS, "downloads");
    if (submit && zero_copy) {
        // Every host pointer is a distinct slot of the current reservation, or an upload's
        // bytes lie inside a kept slot of a reported call.
        std::vector<bool> used(g_model.pending >= 0 ? g_model.sets[g_model.pending].sizes.size() : 0, false);
        for (size_t k = 0; k < c.ups.size() + c.downs.size(); ++k) {
            const bool up = k < c.ups.size();
            const Desc & d = up ? c.ups[k] : c.downs[k - c.ups.size()];
            if (d.host.kind == HostRef::Null) {
                continue;  // null_pointer above
            }
            bool ok = false;
            if (d.host.kind == HostRef::Slot && d.host.set == g_model.pending && d.host.at == 0) {
                const SlotSet & s = g_model.sets[d.host.set];
                ok = !used[d.host.slot] && d.size <= s.sizes[d.host.slot];
                used[d.host.slot] = true;
                v.own = true;
            } else if (up && d.host.kind == HostRef::Slot) {
                const SlotSet & s = g_model.sets[d.host.set];
                const size_t n = s.sizes[d.host.slot];
                bool reported = false;
                for (const TicketModel & t : g_model.tickets) {
                    reported = reported || (t.set == d.host.set && t.reported());
                }
                // A kept set belongs to a ticket (kept slots always do).
                ok = s.kept && reported && d.host.at < n && d.size <= n - d.host.at;
                if (ok) {
                    v.kept_sources.push_back(d.host.set);
                }
            }
            if (!ok) {
                must(SAM3D_ERR_INVALID_ARGUMENT);
            }
        }
    }
    return v;
}

bool takes_staged_path(const Call & c, bool zero_copy, const Verdict & v, int w) {
    if (!staging_world(w) || c.synchronous || c.ups.size() + c.downs.size() == 0) {
        return false;
    }
    if (zero_copy) {
        bool pinned = !v.own || g_model.sets[g_model.pending].pinned[w];
        for (int s : v.kept_sources) {
            pinned = pinned && g_model.sets[s].pinned[w];
        }
        return pinned;
    }
    return true;
}

}  // namespace fuzz

namespace fuzz {

namespace {

ggml_backend_buffer_t buffer_of(const ggml_tensor * t) { return t->view_src != nullptr ? t->view_src->buffer : t->buffer; }

// Whether device bytes [begin, end) of `buffer` lie in one declared area of world w.
bool in_one_area(int w, ggml_backend_buffer_t buffer, uintptr_t begin, uintptr_t end) {
    const Env & e = g_env[w];
    if (buffer != e.buffer) {
        return false;
    }
    const uintptr_t base = reinterpret_cast<uintptr_t>(buffer_base(e));
    return std::any_of(g_model.areas.begin(), g_model.areas.end(),
                       [&](const AreaModel & a) { return base + a.begin <= begin && end <= base + a.end; });
}

struct Plain {
    const ggml_tensor * tensor;
    const uint8_t * host;
    size_t offset;
    size_t size;
};

Plain plain(const WorldCall & m, bool up, size_t i) {
    if (up) {
        const sam3d_upload & u = m.ups[i];
        return {u.tensor, static_cast<const uint8_t *>(u.src), u.offset, u.size};
    }
    const sam3d_download & d = m.downs[i];
    return {d.tensor, static_cast<const uint8_t *>(d.dst), d.offset, d.size};
}

uintptr_t device_of(const Plain & d) { return reinterpret_cast<uintptr_t>(d.tensor->data) + d.offset; }

// Whether a zero-copy download bridging a gap from descriptor `last` to descriptor `i` writes
// only bytes nobody's or scratch (rule 10): i's slot is the next one of the reservation after
// last's, and last fills its slot (the bytes between them are padding) or the call said its
// slots' tails are scratch. Every accepted zero-copy download's dst is the first byte of a slot
// of the current reservation (judge), so the request's HostRef names it.
bool download_bridges(const Call & c, size_t last, size_t i, bool slot_tails) {
    const HostRef & a = c.downs[last].host;
    const HostRef & b = c.downs[i].host;
    if (a.kind != HostRef::Slot || b.kind != HostRef::Slot || a.set != b.set || a.at != 0 || b.at != 0) {
        return false;
    }
    return b.slot == a.slot + 1 && (slot_tails || c.downs[last].size == g_model.sets[a.set].sizes[a.slot]);
}

}  // namespace

std::vector<RunModel> expected_runs(const Call & c, const WorldCall & m, bool up, bool zero_copy, bool slot_tails,
                                    int w) {
    std::vector<RunModel> runs;
    const size_t n = up ? m.ups.size() : m.downs.size();
    for (size_t i = 0; i < n; ++i) {
        const Plain d = plain(m, up, i);
        const uintptr_t at = device_of(d);
        const ggml_backend_buffer_t buffer = buffer_of(d.tensor);
        if (!runs.empty()) {
            RunModel & r = runs.back();
            const uintptr_t end = r.begin + r.bytes;
            // A copying call's run holds at most one piece (the staged and deferred worlds' 64
            // bytes, the unpinned world's default; rule 10).
            const size_t piece = pinned_world(w) ? 64 : SAM3D_STAGING_PIECE_BYTES;
            bool joins = buffer == r.buffer && at >= end && (zero_copy || r.bytes < piece);
            if (joins && at != end) {
                joins = at - end <= SAM3D_COALESCE_GAP_BYTES && in_one_area(w, buffer, r.begin, at + d.size) &&
                        (!zero_copy || up || download_bridges(c, r.last - 1, i, slot_tails));
            }
            if (joins && zero_copy) {
                joins = d.host == r.host + (at - r.begin);
            }
            if (joins) {
                r.last = i + 1;
                r.bytes = static_cast<size_t>(at + d.size - r.begin);
                continue;
            }
        }
        RunModel r;
        r.first = i;
        r.last = i + 1;
        r.begin = at;
        r.bytes = d.size;
        r.host = d.host;
        r.buffer = buffer;
        runs.push_back(r);
    }
    return runs;
}

namespace {

// Calls gap(i, end, at) for each gap a run bridges: between descriptor i - 1's device end and
// descriptor i's device start `at`, both of one run.
template <class F>
void for_each_bridged_gap(const std::vector<RunModel> & runs, const WorldCall & m, bool up, F gap) {
    for (const RunModel & r : runs) {
        for (size_t i = r.first + 1; i < r.last; ++i) {
            const Plain p = plain(m, up, i - 1);
            const uintptr_t end = device_of(p) + p.size;
            const uintptr_t at = device_of(plain(m, up, i));
            if (at > end) {
                gap(i, end, at);
            }
        }
    }
}

}  // namespace

std::vector<Gap> gaps_of(const std::vector<RunModel> & runs, const WorldCall & m, bool up) {
    std::vector<Gap> gaps;
    for_each_bridged_gap(runs, m, up, [&](size_t, uintptr_t end, uintptr_t at) { gaps.push_back({end, at}); });
    return gaps;
}

std::vector<Region> host_gaps_of(const std::vector<RunModel> & runs, const Call & c, const WorldCall & m) {
    std::vector<Region> r;
    for_each_bridged_gap(runs, m, false, [&](size_t i, uintptr_t end, uintptr_t at) {
        // Mirrored: the host gap is as long as the device gap, from the end of the earlier
        // descriptor's bytes in its slot.
        HostRef ref = c.downs[i - 1].host;
        ref.at += m.downs[i - 1].size;
        r.push_back({ref, static_cast<size_t>(at - end)});
    });
    return r;
}

sam3d_status judge_area(int tensor, bool add, AreaModel * bytes) {
    const Env & e = g_env[kOff];
    const ggml_tensor * t = e.tensors[tensor];
    if (t == nullptr) {
        return SAM3D_ERR_NULL_TENSOR;  // add and remove alike (transfer.h)
    }
    const bool has_data = t->data != nullptr;
    if (has_data) {
        const size_t at = static_cast<size_t>(static_cast<const uint8_t *>(t->data) - buffer_base(e));
        *bytes = {at, at + ggml_nbytes(t)};
    }
    if (!add) {
        // The same bytes as a declared area, whatever the tensor (a transposed view of an area
        // names its bytes too).
        const bool declared = has_data && std::any_of(g_model.areas.begin(), g_model.areas.end(), [&](const AreaModel & a) {
                                  return a.begin == bytes->begin && a.end == bytes->end;
                              });
        return declared ? SAM3D_OK : SAM3D_ERR_INVALID_ARGUMENT;
    }
    if (!has_data || buffer_of(t) == nullptr) {
        return SAM3D_ERR_UNALLOCATED_TENSOR;
    }
    if (!ggml_is_contiguous(t)) {
        return SAM3D_ERR_NOT_CONTIGUOUS;
    }
    const bool overlaps = std::any_of(g_model.areas.begin(), g_model.areas.end(),
                                      [&](const AreaModel & a) { return a.begin < bytes->end && bytes->begin < a.end; });
    return overlaps ? SAM3D_ERR_INVALID_ARGUMENT : SAM3D_OK;
}

}  // namespace fuzz
