// The invariant checker (checks.h says what it checks against).
#include "checks.h"

#include <algorithm>
#include <cstring>

#include "invariant.h"

namespace fuzz {

namespace {

// Counter fields by name, for "only these changed" checks.
struct Field {
    const char * name;
    uint64_t sam3d_counters::*member;
};
const Field kFields[] = {
    {"calls", &sam3d_counters::calls},
    {"rejected_calls", &sam3d_counters::rejected_calls},
    {"async_uploads", &sam3d_counters::async_uploads},
    {"sync_uploads", &sam3d_counters::sync_uploads},
    {"async_downloads", &sam3d_counters::async_downloads},
    {"sync_downloads", &sam3d_counters::sync_downloads},
    {"bytes_uploaded", &sam3d_counters::bytes_uploaded},
    {"bytes_downloaded", &sam3d_counters::bytes_downloaded},
    {"pinned_batches", &sam3d_counters::pinned_batches},
    {"enqueue_ns", &sam3d_counters::enqueue_ns},
    {"synchronize_ns", &sam3d_counters::synchronize_ns},
    {"copy_ns", &sam3d_counters::copy_ns},
    {"sync_path_ns", &sam3d_counters::sync_path_ns},
    {"staging_bytes", &sam3d_counters::staging_bytes},
    {"staging_allocations", &sam3d_counters::staging_allocations},
    {"upload_copies", &sam3d_counters::upload_copies},
    {"download_copies", &sam3d_counters::download_copies},
};

const void * host_of(const sam3d_upload & u) { return u.src; }
const void * host_of(const sam3d_download & d) { return d.dst; }

// Whether seam entry `r` transfers the k-th descriptor of `ds`: its tensor, offset and size.
template <typename D>
bool transfers(const Record & r, const std::vector<D> & ds, size_t k) {
    return k < ds.size() && r.tensor == ds[k].tensor && r.offset == ds[k].offset && r.size == ds[k].size;
}

// Whether seam entry `r` is the one GGML copy of expected run `run` of `ds` (rule 10): exactly the
// run's device bytes, in its buffer; a run of one with the descriptor's own tensor and offset, a
// run of several through a span tensor (a 1-D GGML_TYPE_I8 header over exactly those bytes, in
// the run's buffer, no view) from its byte 0.
template <typename D>
bool copies_run(const Record & r, const RunModel & run, const std::vector<D> & ds) {
    if (r.device != run.begin || r.size != run.bytes || r.buffer != run.buffer) {
        return false;
    }
    if (run.last - run.first == 1) {
        return r.tensor == ds[run.first].tensor && r.offset == ds[run.first].offset;
    }
    const auto bytes = static_cast<int64_t>(run.bytes);
    return r.offset == 0 && r.type == GGML_TYPE_I8 && r.ne == std::array<int64_t, 4>{bytes, 1, 1, 1} &&
           r.nbytes == run.bytes && !r.view && r.own_buffer && r.contiguous;
}

// A copy and the run expected, at byte offsets in the world's tensor buffer.
std::string describe(const Record & r, const RunModel * run, const Env & e) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(buffer_base(e));
    std::string s = "copy of " + str(r.size) + " B at buffer byte " + str(r.device - base) + " (offset " + str(r.offset) +
                    " into a tensor of " + str(r.nbytes) + " B)";
    if (run != nullptr) {
        s += "; expected the run of descriptors [" + str(run->first) + ", " + str(run->last) + "), " + str(run->bytes) +
             " B at buffer byte " + str(run->begin - base);
    } else {
        s += "; expected no more copies";
    }
    return s;
}

uint64_t fallbacks(const sam3d_counters & k) {
    uint64_t n = 0;
    for (uint64_t f : k.fallbacks) {
        n += f;
    }
    return n;
}

}  // namespace

NO_COVERAGE Snapshot snapshot() {
    Snapshot s;
    s.blocks = blocks();
    for (int w = 0; w < kWorlds; ++w) {
        for (const Block & b : s.blocks) {
            const uint8_t * p = resolve(b.ref, w);
            s.host[w].emplace_back(p, p + b.size);
        }
        s.tensors[w].assign(buffer_base(g_env[w]), buffer_base(g_env[w]) + buffer_size(g_env[w]));
        s.counters[w].struct_size = sizeof s.counters[w];
        sam3d_session_counters(g_env[w].session, &s.counters[w]);
        s.in_flight[w] = sam3d_session_staging_in_flight(g_env[w].session);
    }
    return s;
}

std::string where(const char * what, int w) { return std::string(what) + " (session " + kWorldName[w] + ")"; }

NO_COVERAGE void check_host(const Snapshot & before, const std::vector<Region> & allowed, const Scratch & scratch,
                            bool settle) {
    const std::vector<Block> now = blocks();
    // A queued call's downloads write its outputs (and scratch) whenever the device runs them,
    // until its wait: during any later operation (the deferred world's device works late).
    const std::vector<Region> writing = in_flight_outputs();
    for (int w = 0; w < kWorlds; ++w) {
        const std::vector<Region> writing_scratch = in_flight_scratch(w);
        for (size_t k = 0; k < before.blocks.size(); ++k) {
            const Block & b = before.blocks[k];
            const bool live = std::any_of(now.begin(), now.end(), [&](const Block & n) { return same_block(n.ref, b.ref); });
            if (!live) {
                continue;
            }
            const uint8_t * p = resolve(b.ref, w);
            if (std::memcmp(p, before.host[w][k].data(), b.size) == 0) {
                continue;
            }
            for (size_t i = 0; i < b.size; ++i) {
                CHECK(p[i] == before.host[w][k][i] || covers(allowed, b, i) || covers(scratch[w], b, i) ||
                          covers(writing, b, i) || covers(writing_scratch, b, i),
                      "a call writes caller memory only at its downloads' dst (and a zero-copy download run with "
                      "SAM3D_SUBMIT_SLOT_TAILS the slot tails it bridges), and a rejected or failed call none",
                      where(b.ref.kind == HostRef::Arena ? "arena" : "slot", w) + " byte " + str(i) + " changed");
            }
        }
    }
    if (settle) {
        // The scratch bytes inside the blocks (the first kShadow bytes of a slot) get off's.
        for (int w = 1; w < kWorlds; ++w) {
            for (const Region & r : scratch[w]) {
                if (r.ref.kind != HostRef::Slot || g_model.sets[r.ref.set].state == SlotSet::Expired) {
                    continue;
                }
                const size_t shadow = shadow_of(g_model.sets[r.ref.set], r.ref.slot);
                if (r.ref.at < shadow) {
                    std::memcpy(resolve(r.ref, w), resolve(r.ref, kOff), std::min(r.size, shadow - r.ref.at));
                }
            }
        }
    }
    const std::vector<Region> flying = in_flight_outputs();
    for (const Block & b : now) {
        const uint8_t * ref = resolve(b.ref, kOff);
        for (int w = 1; w < kWorlds; ++w) {
            const uint8_t * p = resolve(b.ref, w);
            if (std::memcmp(p, ref, b.size) == 0) {
                continue;
            }
            const std::vector<Region> flying_scratch = in_flight_scratch(w);
            for (size_t i = 0; i < b.size; ++i) {
                CHECK(p[i] == ref[i] || covers(flying, b, i) || covers(flying_scratch, b, i),
                      "an accepted call gives exactly the batching-off result",
                      where(b.ref.kind == HostRef::Arena ? "arena" : "slot", w) + " byte " + str(i) + " differs from off");
            }
        }
    }
}

NO_COVERAGE void check_tensors_unchanged(const Snapshot & before, const char * op) {
    for (int w = 0; w < kWorlds; ++w) {
        if (w == kDeferred && outstanding_model() != 0) {
            continue;  // its device may run earlier calls' work during any entry point
        }
        CHECK(std::memcmp(before.tensors[w].data(), buffer_base(g_env[w]), before.tensors[w].size()) == 0,
              "a rejected request submits nothing (tensors unchanged)", where(op, w));
    }
}

NO_COVERAGE void check_tensors_equal() {
    if (outstanding_model() != 0) {
        return;  // tensors are comparable once every call has completed
    }
    for (int w = 1; w < kWorlds; ++w) {
        CHECK(std::memcmp(buffer_base(g_env[w]), buffer_base(g_env[kOff]), buffer_size(g_env[kOff])) == 0,
              "an accepted call gives exactly the batching-off result (tensor bytes)", where("tensors", w));
    }
}

// The state every operation leaves: outstanding tickets and ring bytes as the model says,
// failed_calls within its bounds.
void check_state() {
    const size_t outstanding = outstanding_model();
    for (int w = 0; w < kWorlds; ++w) {
        Env & e = g_env[w];
        CHECK(sam3d_session_outstanding(e.session) == outstanding, "outstanding counts the queued calls not waited",
              where("outstanding", w) + " " + str(sam3d_session_outstanding(e.session)) + " != " + str(outstanding));
        const size_t flight = sam3d_session_staging_in_flight(e.session);
        CHECK(flight <= SAM3D_STAGING_BOUND_BYTES && (pinned_world(w) || flight == 0),
              "staging in flight stays within the bound (and 0 without pinned staging)", where("in flight", w) + " " + str(flight));
        if (pinned_world(w)) {
            bool exact = false;
            const size_t held = held_ring_bytes(w, &exact);
            CHECK(exact ? flight == held : flight >= held,
                  "the ring holds the current reservation, the calls' slots until the first reservation after their "
                  "completion was reported, kept slots until their release, and a released kept region until every "
                  "call that read it completed (A2, A4, A5)",
                  where("in flight", w) + " " + str(flight) + " bytes, the model " + (exact ? "" : "at least ") + str(held));
        }
        sam3d_counters k{};
        k.struct_size = sizeof k;
        sam3d_session_counters(e.session, &k);
        CHECK(k.failed_calls >= g_model.failed_lo && k.failed_calls <= g_model.failed_hi, "failed_calls counts failed calls",
              where("failed_calls", w) + " " + str(k.failed_calls) + " not in [" + str(g_model.failed_lo) + ", " +
                  str(g_model.failed_hi) + "]");
        // Rule 8's waits and events, counted as the core makes them: batching off and the static
        // fallbacks make only GGML's blocking calls (the core synchronizes nothing), and a device
        // without caps.events gets no event call (A5: a full synchronize instead).
        CHECK((w != kOff && w != kNoCaps) || k.synchronizes == 0,
              "batching off and the static fallbacks never synchronize the backend themselves",
              where("synchronizes", w) + " " + str(k.synchronizes));
        CHECK(w == kDeferred || k.event_records + k.event_waits + k.event_synchronizes == 0,
              "a device without events gets no event record, wait or synchronize", where("event counters", w));
        CHECK(k.staging_bytes <= SAM3D_STAGING_BOUND_BYTES && (pinned_world(w) || k.staging_bytes == 0),
              "staging_bytes stays within the bound (and 0 without pinned staging)", where("staging_bytes", w));
        CHECK(sam3d_session_areas(e.session) == g_model.areas.size(), "areas counts the declared areas",
              where("areas", w) + " " + str(sam3d_session_areas(e.session)) + " != " + str(g_model.areas.size()));
    }
}

void check_counters_only(const sam3d_counters & a, const sam3d_counters & b, std::initializer_list<Counter> may_change,
                         const char * invariant, const std::string & what) {
    for (const Field & f : kFields) {
        const bool may = std::find(may_change.begin(), may_change.end(), f.member) != may_change.end();
        CHECK(may || a.*f.member == b.*f.member, invariant, what + ": " + f.name + " changed");
    }
    for (int r = 0; r < SAM3D_FALLBACK_COUNT; ++r) {
        CHECK(a.fallbacks[r] == b.fallbacks[r], invariant, what + ": fallbacks changed");
    }
}

void check_records_only(int w, std::initializer_list<Record::What> allowed, const char * invariant, const char * op) {
    for (const Record & r : g_env[w].records) {
        CHECK(std::find(allowed.begin(), allowed.end(), r.what) != allowed.end(), invariant,
              where(op, w) + ": seam entry " + str(static_cast<size_t>(r.what)));
    }
}

void check_accepted_call(int w, const Call & c, const WorldCall & m, bool zero_copy, bool slot_tails, bool fails,
                         const Verdict & v, const sam3d_counters & a, const sam3d_counters & b, size_t in_flight_before,
                         const char * op) {
    const Env & e = g_env[w];
    const std::vector<RunModel> up_runs = expected_runs(c, m, true, zero_copy, slot_tails, w);
    const std::vector<RunModel> down_runs = expected_runs(c, m, false, zero_copy, slot_tails, w);
    size_t set = 0, get = 0, set_async = 0, get_async = 0, compute = 0, compute_async = 0;
    for (const Record & r : e.records) {
        const bool in_arena = r.data >= e.arena.data() && r.data < e.arena.data() + kArena;
        switch (r.what) {
            case Record::Set:
                CHECK(transfers(r, m.ups, set) && r.data == host_of(m.ups[set]),
                      "the synchronous path is ggml_backend_tensor_set per upload, in order, from src", where(op, w));
                ++set;
                break;
            case Record::Get:
                CHECK(transfers(r, m.downs, get) && r.data == host_of(m.downs[get]),
                      "the synchronous path is ggml_backend_tensor_get per download, in order, into dst", where(op, w));
                ++get;
                break;
            case Record::SetAsync: {
                const RunModel * run = set_async < up_runs.size() ? &up_runs[set_async] : nullptr;
                CHECK(run != nullptr && copies_run(r, *run, m.ups),
                      "the batched path uploads each maximal run (rule 10) as one GGML copy of exactly its bytes, in order",
                      where(op, w) + ": upload copy " + str(set_async) + ": " + describe(r, run, e));
                CHECK(zero_copy ? r.data == host_of(m.ups[run->first]) : !in_arena,
                      "zero-copy uploads read the slot in place; copying ones read staging", where(op, w));
                ++set_async;
                break;
            }
            case Record::GetAsync: {
                const RunModel * run = get_async < down_runs.size() ? &down_runs[get_async] : nullptr;
                CHECK(run != nullptr && copies_run(r, *run, m.downs),
                      "the batched path downloads each maximal run (rule 10) as one GGML copy of exactly its bytes, in order",
                      where(op, w) + ": download copy " + str(get_async) + ": " + describe(r, run, e));
                CHECK(zero_copy ? r.data == host_of(m.downs[run->first]) : !in_arena,
                      "zero-copy downloads write the slot in place; copying ones write staging", where(op, w));
                ++get_async;
                break;
            }
            case Record::Compute:
            case Record::ComputeAsync:
                CHECK(r.data == e.graph && c.graph, "a call computes its own graph, once", where(op, w));
                (r.what == Record::Compute ? compute : compute_async) += 1;
                break;
            case Record::Synchronize:
            case Record::Alloc:
                break;
        }
    }
    const size_t nu = c.ups.size();
    const size_t nd = c.downs.size();
    const bool async = set_async + get_async + compute_async > 0;
    const bool sync = set + get + compute > 0;
    CHECK(!(async && sync), "a call takes one path, synchronous or staged", where(op, w));
    CHECK(compute + compute_async == (c.graph ? 1u : 0u), "a call computes its graph once", where(op, w));
    CHECK(async ? set == 0 && set_async == up_runs.size() : set_async == 0 && set == nu,
          "every upload is made once: one copy per descriptor (synchronous) or per run (batched)",
          where(op, w) + ": " + str(set) + " sets, " + str(set_async) + " async sets for " + str(nu) + " uploads in " +
              str(up_runs.size()) + " runs");
    CHECK(fails ? get + get_async == 0
                : async ? get == 0 && get_async == down_runs.size() : get_async == 0 && get == nd,
          "every download is made once: one copy per descriptor (synchronous) or per run (batched); none after a failed compute",
          where(op, w) + ": " + str(get) + " gets, " + str(get_async) + " async gets for " + str(nd) + " downloads in " +
              str(down_runs.size()) + " runs");
    const bool batching = w != kOff && !c.synchronous;
    CHECK(batching || !async, "batching off and synchronous calls are the blocking GGML calls", where(op, w));

    // Counters: one count per descriptor for transfers and bytes.
    const uint64_t d_async_up = b.async_uploads - a.async_uploads, d_sync_up = b.sync_uploads - a.sync_uploads;
    const uint64_t d_async_down = b.async_downloads - a.async_downloads, d_sync_down = b.sync_downloads - a.sync_downloads;
    uint64_t up_bytes = 0, down_bytes = 0;
    for (const Desc & d : c.ups) {
        up_bytes += d.size;
    }
    for (const Desc & d : c.downs) {
        down_bytes += d.size;
    }
    const uint64_t d_up_bytes = b.bytes_uploaded - a.bytes_uploaded, d_down_bytes = b.bytes_downloaded - a.bytes_downloaded;
    const uint64_t d_up_copies = b.upload_copies - a.upload_copies, d_down_copies = b.download_copies - a.download_copies;
    const std::string what = where(op, w);
    CHECK(b.calls == a.calls + 1 && b.rejected_calls == a.rejected_calls, "an accepted call counts one call", what);
    if (!fails) {
        CHECK(d_async_up == (async ? nu : 0) && d_sync_up == (async ? 0 : nu) && d_async_down == (async ? nd : 0) &&
                  d_sync_down == (async ? 0 : nd),
              "transfers are counted once per descriptor, on the path they took", what);
        CHECK(d_up_bytes == up_bytes && d_down_bytes == down_bytes, "bytes are counted per descriptor", what);
        CHECK(d_up_copies == (async ? up_runs.size() : nu) && d_down_copies == (async ? down_runs.size() : nd),
              "upload_copies and download_copies count the GGML copies: one per run batched, one per descriptor synchronous",
              what + ": upload_copies +" + str(d_up_copies) + ", download_copies +" + str(d_down_copies) + " for " + str(nu) +
                  "/" + str(nd) + " descriptors in " + str(up_runs.size()) + "/" + str(down_runs.size()) + " runs" +
                  (async ? " (batched)" : " (synchronous)"));
    } else {
        CHECK(d_async_up + d_sync_up + d_async_down + d_sync_down == 0 && d_up_bytes == 0 && d_down_bytes == 0 &&
                  d_up_copies == 0 && d_down_copies == 0,
              "a call failing after submission counts none of its transfers, bytes or copies", what);
    }
    const uint64_t pinned = b.pinned_batches - a.pinned_batches;
    const uint64_t fell = fallbacks(b) - fallbacks(a);
    if (!batching) {
        CHECK(pinned == 0 && fell == 0, "batching off and synchronous calls count neither pinned batches nor fallbacks", what);
    } else if (nu + nd == 0) {
        CHECK(pinned == 0 && fell == 0,
              "a call with no transfers stages nothing: no pinned batch, no fallback (as without batching)", what);
    } else {
        CHECK(pinned + fell == 1, "a batching call with transfers counts one pinned batch or one fallback (failed or not)", what + ": pinned " + str(pinned) +
                  " + fallbacks " + str(fell));
        CHECK(pinned == 0 || async, "a pinned batch takes the staged path", what);
        CHECK(fell == 0 || !async, "a fallback takes the synchronous path", what);
        const uint64_t reason_ok[kWorlds] = {
            0,
            b.fallbacks[SAM3D_FALLBACK_OVERSIZED] - a.fallbacks[SAM3D_FALLBACK_OVERSIZED],
            b.fallbacks[SAM3D_FALLBACK_NO_ASYNC_CAPS] - a.fallbacks[SAM3D_FALLBACK_NO_ASYNC_CAPS],
            b.fallbacks[SAM3D_FALLBACK_OVERSIZED] - a.fallbacks[SAM3D_FALLBACK_OVERSIZED] +
                b.fallbacks[SAM3D_FALLBACK_PINNED_UNAVAILABLE] - a.fallbacks[SAM3D_FALLBACK_PINNED_UNAVAILABLE],
            b.fallbacks[SAM3D_FALLBACK_OVERSIZED] - a.fallbacks[SAM3D_FALLBACK_OVERSIZED],
        };
        CHECK(reason_ok[w] == fell, "the fallback reason is the session's (no_caps: no_async_caps; unpinned: "
                                    "pinned_unavailable or oversized; staged and deferred: oversized)", what);
        bool kept_pinned = true;
        for (int s : v.kept_sources) {
            kept_pinned = kept_pinned && g_model.sets[s].pinned[w];
        }
        CHECK(pinned_world(w) || pinned == 0, "without pinned staging no call is a pinned batch", what);
        if (zero_copy && v.own) {
            const bool set_pinned = g_model.sets[g_model.pending].pinned[w];
            CHECK(pinned == (set_pinned ? 1u : 0u), "a zero-copy call is a pinned batch exactly when its reservation is pinned",
                  what);
        }
        if (zero_copy && !v.own && pinned == 1) {
            CHECK(kept_pinned,
                  "a zero-copy call reading kept slots is a pinned batch only if they are pinned staging", what);
        }
        if (!zero_copy && pinned_world(w) && in_flight_before == 0) {
            CHECK(pinned == 1, "a small copying call with the ring empty is a pinned batch", what);
        }
    }
    if (zero_copy) {
        CHECK(b.copy_ns == a.copy_ns, "zero-copy calls copy nothing (copy_ns unchanged)", what);
    }
    if (w == kOff) {
        CHECK(b.enqueue_ns == a.enqueue_ns && b.synchronize_ns == a.synchronize_ns && b.copy_ns == a.copy_ns &&
                  b.staging_allocations == a.staging_allocations,
              "batching off stages nothing", what);
    }
}

void check_message(sam3d_status st, const std::string & msg, const Verdict & v, int w, const char * op) {
    const std::string prefix = std::string(sam3d_status_name(st)) + ":";
    CHECK(msg.rfind(prefix, 0) == 0, "an error's message starts with its status name", where(op, w) + ": '" + msg + "'");
    bool named = false, any = false;
    for (const auto & n : v.names) {
        if (n.first == st) {
            any = true;
            named = named || msg.find(n.second) != std::string::npos;
        }
    }
    CHECK(!any || named,
          "an error's message names the descriptor (and field) that is wrong, or the first flag error of a submit",
          where(op, w) + ": '" + msg + "'");
}

void check_same_status(const std::array<sam3d_status, kWorlds> & st, const std::array<std::string, kWorlds> & msg,
                       const char * op) {
    for (int w = 1; w < kWorlds; ++w) {
        CHECK(st[w] == st[kOff], "every session returns the batching-off status",
              where(op, w) + ": " + sam3d_status_name(st[w]) + " ('" + msg[w] + "') vs off's " + sam3d_status_name(st[kOff]) +
                  " ('" + msg[kOff] + "')");
    }
}

}  // namespace fuzz
