// The operations (operations.h says what each does).
#include "operations.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "checks.h"
#include "invariant.h"

namespace fuzz {

namespace {

// After a reported failure: slots the call downloaded into hold unspecified bytes, tensors too.
void forget_failed_outputs(const std::vector<Region> & outputs) {
    for (const Region & r : outputs) {
        if (r.ref.kind == HostRef::Slot) {
            write_all(r.ref, std::min(r.size, shadow_of(g_model.sets[r.ref.set], r.ref.slot)), true);
        }
    }
    resync_tensors();
}

// Rule 1: a call that names a view without a buffer of its own is refused (unallocated_tensor,
// naming the descriptor) by the sessions whose settings and size would batch it, and taken by
// the others (batching off, synchronous calls, the static fallbacks). A copying call (a run, a
// submit, queued or not) with nothing outstanding runs in every session: the others take it (a
// queued one is waited there at once), and the refusing ones then get batching off's results.
// A zero-copy call runs in the refusing sessions only, since a reservation consumed in some
// sessions only would part the model. True if some session refused it.
bool reject_late_views(const Call & c, bool submit, unsigned flags, bool ticket_null,
                       const std::array<Verdict, kWorlds> & verdicts, const Snapshot & before, const char * op) {
    const bool zero_copy = submit && (flags & SAM3D_SUBMIT_ZERO_COPY);
    std::vector<int> refusing;
    for (int w = 0; w < kWorlds; ++w) {
        const Verdict & v = verdicts[w];
        if (v.must.empty() && !v.late_views.empty() && takes_staged_path(c, zero_copy, v, w)) {
            refusing.push_back(w);
        }
    }
    if (refusing.empty()) {
        return false;
    }
    for (int w : refusing) {
        WorldCall m = materialize(c, w);
        sam3d_ticket ticket = 12345;
        const sam3d_status st = in_world(w, [&](Env & e) {
            return submit ? sam3d_session_submit(e.session, &m.call, flags, ticket_null ? nullptr : &ticket)
                          : sam3d_session_run(e.session, &m.call);
        });
        const std::string msg = sam3d_last_error();
        CHECK(st == SAM3D_ERR_UNALLOCATED_TENSOR, "the staged path refuses a view without a buffer of its own",
              where(op, w) + ": " + sam3d_status_name(st) + " ('" + msg + "')");
        CHECK(msg.find(verdicts[w].late_views[0]) != std::string::npos && msg.find("synchronous") != std::string::npos,
              "the refusal names the first such descriptor and what to do", where(op, w) + ": '" + msg + "'");
        CHECK(g_env[w].records.empty(), "a rejected request submits nothing (no seam entry)", where(op, w));
        sam3d_counters now{};
        now.struct_size = sizeof now;
        sam3d_session_counters(g_env[w].session, &now);
        CHECK(now.rejected_calls == before.counters[w].rejected_calls + 1, "a rejected call counts one rejected call",
              where(op, w));
        check_counters_only(before.counters[w], now, {&sam3d_counters::rejected_calls},
                            "a rejected call changes no counter but rejected_calls", where(op, w));
        if (submit && !ticket_null) {
            CHECK(ticket == 0 || ticket == 12345, "a rejected submit hands out no ticket", where(op, w));
        }
    }
    check_host(before, {});
    if ((submit && (flags & SAM3D_SUBMIT_ZERO_COPY)) || outstanding_model() != 0) {
        check_tensors_unchanged(before, op);
        check_state();
        return true;
    }
    std::vector<Region> outputs;
    for (const Desc & d : c.downs) {
        outputs.push_back({d.host, d.size});
    }
    for (int w = 0; w < kWorlds; ++w) {
        if (std::find(refusing.begin(), refusing.end(), w) != refusing.end()) {
            continue;
        }
        WorldCall m = materialize(c, w);
        sam3d_ticket ticket = 0;
        const sam3d_status st = in_world(w, [&](Env & e) {
            return submit ? sam3d_session_submit(e.session, &m.call, flags, &ticket) : sam3d_session_run(e.session, &m.call);
        });
        const std::string msg = sam3d_last_error();
        CHECK(st == SAM3D_OK,
              "batching off, synchronous calls and the static fallbacks take a view without a buffer of its own",
              where(op, w) + ": " + sam3d_status_name(st) + " ('" + msg + "')");
        sam3d_counters now{};
        now.struct_size = sizeof now;
        sam3d_session_counters(g_env[w].session, &now);
        check_accepted_call(w, c, m, false, false, false, verdicts[w], before.counters[w], now, before.in_flight[w], op);
        if (flags & SAM3D_SUBMIT_QUEUED) {
            const sam3d_status waited = in_world(w, [&](Env & e) { return sam3d_session_wait(e.session, ticket); });
            CHECK(ticket != 0 && waited == SAM3D_OK, "a queued call that a session takes gets a ticket its wait completes",
                  where(op, w));
        }
    }
    // The refusing sessions wrote nothing: they get batching off's outputs and tensors.
    for (int w : refusing) {
        for (const Desc & d : c.downs) {
            const size_t room = d.host.kind == HostRef::Arena ? kArena : g_model.sets[d.host.set].sizes[d.host.slot];
            std::memcpy(resolve(d.host, w), resolve(d.host, kOff), std::min(d.size, room - d.host.at));
        }
    }
    resync_tensors();
    complete_all_model();
    check_host(before, outputs);
    check_tensors_equal();
    check_state();
    return true;
}

// Every world's status and error message of one entry point, called world by world.
struct Outcome {
    std::array<sam3d_status, kWorlds> st{};
    std::array<std::string, kWorlds> msg;
};
template <typename F>
Outcome in_every_world(F && f) {
    Outcome o;
    for (int w = 0; w < kWorlds; ++w) {
        o.st[w] = in_world(w, [&](Env & e) { return f(e, w); });
        o.msg[w] = sam3d_last_error();
    }
    return o;
}

// sum of align_up(size, a) over sizes (plus `extra`); false when it does not fit in size_t.
bool aligned_sum(const std::vector<size_t> & sizes, size_t a, size_t extra, size_t * out) {
    size_t total = extra;
    for (size_t n : sizes) {
        if (n > SIZE_MAX - (a - 1)) {
            return false;
        }
        const size_t al = (n + a - 1) / a * a;
        if (total > SIZE_MAX - al) {
            return false;
        }
        total += al;
    }
    *out = total;
    return true;
}

// Whether device bytes [begin, end) meet a gap.
bool meets(const std::vector<Gap> & gaps, uintptr_t begin, uintptr_t end) {
    return std::any_of(gaps.begin(), gaps.end(), [&](const Gap & g) { return g.begin < end && begin < g.end; });
}

// The gaps an accepted call's upload runs would bridge in world w, were it batched: device bytes
// of a declared area the call writes with unspecified values (rule 10).
std::vector<Gap> upload_gaps(const Call & c, const WorldCall & m, bool zero_copy, int w) {
    return gaps_of(expected_runs(c, m, true, zero_copy, false, w), m, true);
}

// The slot bytes an accepted zero-copy call's bridged download runs would write in world w, were
// it batched (the tails of its download slots with SAM3D_SUBMIT_SLOT_TAILS; padding between
// slots is no caller memory, outside every block): scratch, unspecified values (rule 10).
std::vector<Region> download_host_gaps(const Call & c, const WorldCall & m, bool slot_tails, int w) {
    return host_gaps_of(expected_runs(c, m, false, true, slot_tails, w), c, m);
}

// A call whose bridged upload gaps it reads itself (a download of those bytes, or its graph's
// inputs a and b) has results the contract leaves unspecified: such calls are not made.
bool reads_its_own_gaps(const Call & c, bool zero_copy, const std::array<Verdict, kWorlds> & verdicts) {
    for (int w = 1; w < kWorlds; ++w) {
        if (verdicts[w].rejects()) {
            continue;
        }
        const WorldCall m = materialize(c, w);
        const std::vector<Gap> gaps = upload_gaps(c, m, zero_copy, w);
        if (gaps.empty()) {
            continue;
        }
        for (const sam3d_download & d : m.downs) {
            const uintptr_t at = reinterpret_cast<uintptr_t>(d.tensor->data) + d.offset;
            if (meets(gaps, at, at + d.size)) {
                return true;
            }
        }
        if (c.graph) {
            for (int t : {kA, kB}) {
                const ggml_tensor * x = g_env[w].tensors[t];
                const uintptr_t at = reinterpret_cast<uintptr_t>(x->data);
                if (meets(gaps, at, at + ggml_nbytes(x))) {
                    return true;
                }
            }
        }
    }
    return false;
}

// After an accepted call: the gap bytes its bridged uploads wrote hold unspecified values in the
// worlds that batched it; they get batching off's, so later results stay comparable.
NO_COVERAGE void resync_gaps(const Call & c, const std::array<WorldCall, kWorlds> & calls, bool zero_copy) {
    const uintptr_t off = reinterpret_cast<uintptr_t>(buffer_base(g_env[kOff]));
    for (int w = 1; w < kWorlds; ++w) {
        const uintptr_t base = reinterpret_cast<uintptr_t>(buffer_base(g_env[w]));
        for (const Gap & g : upload_gaps(c, calls[w], zero_copy, w)) {
            std::memcpy(reinterpret_cast<void *>(g.begin), reinterpret_cast<const void *>(off + (g.begin - base)),
                        g.end - g.begin);
        }
    }
}

// A6 and rule 11, in the deferred world (events, not one in-order queue; a duplex session): on the
// session's backend a queued call on the staged path with uploads after an outstanding queued call
// first waits for an event, once, and so may the graph of one without uploads (rule 11: after an
// earlier duplex call's downloads); any other call, or one with nothing outstanding, waits for
// none there. The second backend waits once per duplex call (its handoff), and only for a
// queued call (one whose graph failed never gets there).
void check_upload_order(const Call & c, bool queued, bool flying_before, bool none_outstanding,
                        const sam3d_counters & a, const char * op) {
    sam3d_counters b{};
    b.struct_size = sizeof b;
    sam3d_session_counters(g_env[kDeferred].session, &b);
    const uint64_t second = b.duplex_event_waits - a.duplex_event_waits;
    const uint64_t waits = b.event_waits - a.event_waits - second;
    const bool batched = b.pinned_batches - a.pinned_batches == 1;
    const bool uploads = queued && batched && !c.ups.empty() && !none_outstanding;
    const bool may = uploads || (queued && c.graph && !none_outstanding);  // a graph-only call batches nothing
    CHECK(may ? waits <= 1 : waits == 0,
          "only a queued call's uploads or graph wait for an event, once, and only after an outstanding queued call",
          where(op, kDeferred) + ": " + str(waits) + " event waits");
    CHECK(!(uploads && flying_before) || waits == 1,
          "a queued call's uploads after a queued call still in flight first wait for its event",
          where(op, kDeferred) + ": " + str(waits) + " event waits");
    CHECK(second == b.duplex_calls - a.duplex_calls && second <= (queued ? 1u : 0u),
          "only a queued call's downloads wait on the second backend, for its handoff, once",
          where(op, kDeferred) + ": " + str(second) + " waits on the second backend");
}

}  // namespace

void do_call(const Call & c, bool submit, unsigned flags, bool ticket_null) {
    const bool zero_copy = flags & SAM3D_SUBMIT_ZERO_COPY;
    const bool queued = flags & SAM3D_SUBMIT_QUEUED;
    const bool keep = flags & SAM3D_SUBMIT_KEEP_SLOTS;
    const bool slot_tails = flags & SAM3D_SUBMIT_SLOT_TAILS;
    if (touches_in_flight(c)) {
        return;
    }
    std::array<Verdict, kWorlds> verdicts;
    for (int w = 0; w < kWorlds; ++w) {
        verdicts[w] = judge(c, submit, flags, ticket_null, w);
    }
    const Verdict & v = verdicts[kOff];  // what does not depend on the session (slots used, flags)
    if (reads_its_own_gaps(c, submit && zero_copy, verdicts)) {
        return;
    }
    // The caller writes the inputs of a zero-copy call into its slots: from the upload's start to
    // the end of the slot's compared bytes or of the upload, whichever is further, inside the slot
    // (a mirrored descriptor can start past the compared bytes of a slot larger than kShadow).
    for (const Desc & d : c.ups) {
        if (d.host.kind == HostRef::Slot && d.host.set == g_model.pending) {
            const SlotSet & s = g_model.sets[d.host.set];
            const size_t end = std::min(s.sizes[d.host.slot], std::max(shadow_of(s, d.host.slot), d.host.at + d.size));
            write_all(d.host, end > d.host.at ? end - d.host.at : 0, false);
        }
    }
    const char * op = submit ? "submit" : "run";
    // A6: in the deferred world, a queued call surely still in flight there (`flying`), or none.
    const bool flying_before = std::any_of(g_model.tickets.begin(), g_model.tickets.end(),
                                           [](const TicketModel & t) { return t.flying[kDeferred]; });
    const bool none_outstanding = outstanding_model() == 0;
    const bool armed = g_model.armed;
    g_model.armed = false;
    const Snapshot before = snapshot();
    if (reject_late_views(c, submit, flags, ticket_null, verdicts, before, op)) {
        return;
    }
    std::array<sam3d_status, kWorlds> st{};
    std::array<std::string, kWorlds> msg;
    std::array<sam3d_ticket, kWorlds> ticket{};
    std::array<WorldCall, kWorlds> calls;
    for (int w = 0; w < kWorlds; ++w) {
        calls[w] = materialize(c, w);
        g_env[w].fail_compute = armed;
        ticket[w] = 12345;
        st[w] = in_world(w, [&](Env & e) {
            return submit ? sam3d_session_submit(e.session, &calls[w].call, flags, ticket_null ? nullptr : &ticket[w])
                          : sam3d_session_run(e.session, &calls[w].call);
        });
        msg[w] = sam3d_last_error();
        g_env[w].fail_compute = false;
    }
    for (int w = 0; w < kWorlds; ++w) {
        const Verdict & vw = verdicts[w];
        CHECK(vw.allows(st[w]), "a request is rejected exactly when the contract says, with one of the errors that apply",
              where(op, w) + ": got " + sam3d_status_name(st[w]) + " ('" + msg[w] + "'), " +
                  (vw.rejects() ? "expected one of the errors that apply (first: " + std::string(sam3d_status_name(vw.must[0])) + ")"
                                : std::string("expected it to be accepted")));
    }
    const sam3d_status s0 = st[kOff];
    const bool accepted = s0 == SAM3D_OK || s0 == SAM3D_ERR_COMPUTE;
    if (!accepted) {
        for (int w = 0; w < kWorlds; ++w) {
            CHECK(st[w] != SAM3D_OK && st[w] != SAM3D_ERR_COMPUTE, "a request batching off rejects is rejected by every session",
                  where(op, w) + ": " + sam3d_status_name(st[w]));
            check_message(st[w], msg[w], verdicts[w], w, op);
            CHECK(g_env[w].records.empty(), "a rejected request submits nothing (no seam entry)", where(op, w));
            sam3d_counters now{};
            now.struct_size = sizeof now;
            sam3d_session_counters(g_env[w].session, &now);
            const uint64_t d = now.rejected_calls - before.counters[w].rejected_calls;
            CHECK(d == 1 || (v.flag_error && d == 0), "a rejected call counts one rejected call", where(op, w));
            check_counters_only(before.counters[w], now, {&sam3d_counters::rejected_calls},
                                "a rejected call changes no counter but rejected_calls", where(op, w));
            if (submit && !ticket_null) {
                CHECK(ticket[w] == 0 || ticket[w] == 12345, "a rejected submit hands out no ticket", where(op, w));
            }
        }
        check_tensors_unchanged(before, op);
        check_host(before, {});
        check_state();
        return;
    }
    check_same_status(st, msg, op);
    const bool fails = armed && c.graph;
    CHECK(s0 == (fails && !queued ? SAM3D_ERR_COMPUTE : SAM3D_OK),
          "an accepted call returns ok, or compute when its graph fails (queued: at its wait)",
          std::string(op) + ": " + sam3d_status_name(s0));
    for (int w = 0; w < kWorlds; ++w) {
        sam3d_counters now{};
        now.struct_size = sizeof now;
        sam3d_session_counters(g_env[w].session, &now);
        check_accepted_call(w, c, calls[w], submit && zero_copy, submit && slot_tails, fails, v, before.counters[w],
                            now, before.in_flight[w], op);
    }
    check_upload_order(c, queued, flying_before, none_outstanding, before.counters[kDeferred], op);
    resync_gaps(c, calls, submit && zero_copy);
    // The slot bytes its bridged download runs write with unspecified values, in the worlds that
    // batch it (only the zero-copy calls' host gaps are caller memory; padding is in no block; a
    // failed call downloads nothing).
    Scratch scratch;
    if (submit && zero_copy && !fails) {
        for (int w = 1; w < kWorlds; ++w) {
            if (takes_staged_path(c, true, verdicts[w], w)) {
                scratch[w] = download_host_gaps(c, calls[w], slot_tails, w);
            }
        }
    }
    // Outputs: what the call may write now.
    std::vector<Region> outputs;
    for (const Desc & d : c.downs) {
        outputs.push_back({d.host, d.size});
    }
    const bool tracked = submit && (queued || (zero_copy && keep && !fails));
    for (int w = 0; w < kWorlds; ++w) {
        if (submit && !ticket_null) {
            CHECK(tracked ? ticket[w] != 0 : ticket[w] == 0,
                  "submit hands out a ticket for queued and kept calls, else 0", where(op, w) + ": " + str(ticket[w]));
        }
    }
    // The worlds that take it on the staged path (read before the model consumes the reservation).
    std::array<bool, kWorlds> staged{};
    for (int w = 0; w < kWorlds; ++w) {
        staged[w] = takes_staged_path(c, submit && zero_copy, verdicts[w], w);
    }
    // The model.
    int set = -1;
    if (submit && zero_copy && v.own) {
        set = g_model.pending;
        g_model.pending = -1;
        SlotSet & s = g_model.sets[set];
        s.state = queued ? SlotSet::InFlight : SlotSet::Reported;
        s.kept = keep && (queued || !fails);
    }
    // Every accepted call may complete the outstanding ones: a call completed on return or a
    // failed one does (A6, rule 5), a queued one where it takes the synchronous path.
    complete_all_model();
    if (tracked) {
        // id, queued, zero_copy, fails, waited, kept, lower_bound_counts, set, outputs, scratch
        g_model.tickets.push_back({ticket, queued, zero_copy, fails, false, keep, true, set, outputs, scratch, {}});
        TicketModel & t = g_model.tickets.back();
        for (int w = 0; w < kWorlds; ++w) {
            t.flying[w] = queued && zero_copy && !fails && pinned_world(w) && staged[w];
        }
        // A4: the kept slots it reads stay held after their release until it completed.
        for (int k : v.kept_sources) {
            if (queued && !fails) {
                g_model.sets[k].readers.push_back(static_cast<int>(g_model.tickets.size()) - 1);
            }
        }
    }
    if (fails) {
        g_model.failed_hi += 1;
        g_model.failed_lo += queued ? 0 : 1;
    }
    // A failed call writes no dst; a failed zero-copy call's output slots are unspecified.
    std::vector<Region> allowed;
    if (!fails || (zero_copy && submit)) {
        allowed = outputs;
    }
    check_host(before, allowed, scratch, !queued);
    if (fails && !queued) {
        forget_failed_outputs(zero_copy && submit ? outputs : std::vector<Region>{});
    }
    check_tensors_equal();
    check_state();
}

void do_wait(int t, const std::array<sam3d_ticket, kWorlds> & ids) {
    const bool valid = t >= 0 && g_model.tickets[t].in_flight();
    const Snapshot before = snapshot();
    const Outcome outcome = in_every_world([&](Env & e, int w) { return sam3d_session_wait(e.session, ids[w]); });
    const auto & st = outcome.st;
    const auto & msg = outcome.msg;
    check_same_status(st, msg, "wait");
    TicketModel * tm = valid ? &g_model.tickets[t] : nullptr;
    const sam3d_status expect = !valid ? SAM3D_ERR_INVALID_ARGUMENT : tm->fails ? SAM3D_ERR_COMPUTE : SAM3D_OK;
    CHECK(st[kOff] == expect, "wait returns the queued call's status, once; other tickets are invalid_argument",
          std::string("wait: ") + sam3d_status_name(st[kOff]) + " ('" + msg[kOff] + "'), expected " + sam3d_status_name(expect));
    for (int w = 0; w < kWorlds; ++w) {
        if (st[w] != SAM3D_OK) {
            CHECK(msg[w].rfind(std::string(sam3d_status_name(st[w])) + ":", 0) == 0,
                  "an error's message starts with its status name", where("wait", w) + ": '" + msg[w] + "'");
        }
        check_records_only(w, {Record::Synchronize}, "a wait only synchronizes", "wait");
        sam3d_counters now{};
        now.struct_size = sizeof now;
        sam3d_session_counters(g_env[w].session, &now);
        const bool zero_copy = tm != nullptr && tm->zero_copy;
        if (zero_copy || w == kOff || !valid) {
            check_counters_only(before.counters[w], now, {&sam3d_counters::synchronize_ns}, "a wait changes only the timing counters",
                                where("wait", w));
        } else {
            check_counters_only(before.counters[w], now, {&sam3d_counters::synchronize_ns, &sam3d_counters::copy_ns},
                                "a wait changes only the timing counters", where("wait", w));
        }
        if (w == kOff || !valid) {
            CHECK(now.synchronize_ns == before.counters[w].synchronize_ns, "nothing to wait for: no synchronize",
                  where("wait", w));
        }
    }
    if (!valid) {
        check_tensors_unchanged(before, "wait");
        check_host(before, {});
        check_state();
        return;
    }
    tm->waited = true;
    complete_by_wait(t);
    if (tm->set >= 0) {
        g_model.sets[tm->set].state = SlotSet::Reported;
    }
    if (tm->fails) {
        g_model.failed_lo += tm->lower_bound_counts ? 1 : 0;
        if (tm->kept) {
            // Released after its wait whatever its status (transfer.h).
            tm->kept = false;
            if (tm->set >= 0) {
                g_model.sets[tm->set].kept = false;
            }
        }
    }
    const std::vector<Region> outputs = tm->outputs;
    const bool fails = tm->fails;
    check_host(before, fails && !tm->zero_copy ? std::vector<Region>{} : outputs, tm->scratch);
    if (fails) {
        forget_failed_outputs(tm->zero_copy ? outputs : std::vector<Region>{});
    }
    check_tensors_equal();
    check_state();
}

void do_release(int t, const std::array<sam3d_ticket, kWorlds> & ids) {
    const bool valid = t >= 0 && g_model.tickets[t].kept && g_model.tickets[t].reported();
    const Snapshot before = snapshot();
    const Outcome outcome = in_every_world([&](Env & e, int w) { return sam3d_session_release(e.session, ids[w]); });
    const auto & st = outcome.st;
    const auto & msg = outcome.msg;
    check_same_status(st, msg, "release");
    CHECK(st[kOff] == (valid ? SAM3D_OK : SAM3D_ERR_INVALID_ARGUMENT),
          "release takes a reported kept call's ticket once; others are invalid_argument",
          std::string("release: ") + sam3d_status_name(st[kOff]) + " ('" + msg[kOff] + "')");
    for (int w = 0; w < kWorlds; ++w) {
        check_records_only(w, {}, "a release enters no GGML function", "release");
        sam3d_counters now{};
        now.struct_size = sizeof now;
        sam3d_session_counters(g_env[w].session, &now);
        check_counters_only(before.counters[w], now, {}, "a release changes no counter", where("release", w));
    }
    if (valid) {
        g_model.tickets[t].kept = false;
        if (g_model.tickets[t].set >= 0) {
            g_model.sets[g_model.tickets[t].set].kept = false;
            g_model.sets[g_model.tickets[t].set].released = true;
        }
    }
    check_tensors_unchanged(before, "release");
    check_host(before, {});
    check_state();
}

void do_reserve(const std::vector<size_t> & sizes, bool null_slots) {
    size_t alignment = std::max<size_t>(sam3d_session_staging_alignment(g_env[kStaged].session), 1);
    size_t need = 0, heap = 0;
    const bool fits = aligned_sum(sizes, alignment, 0, &need);
    const bool heap_fits = aligned_sum(sizes, 64, 64, &heap);
    if (heap_fits && heap > 64 * kMiB) {
        return;  // this much host memory is not what a fuzz input is for
    }
    const bool zero = std::find(sizes.begin(), sizes.end(), size_t{0}) != sizes.end();
    const bool invalid = sizes.empty() || null_slots || zero || !fits;
    const Snapshot before = snapshot();
    std::vector<sam3d_slot_request> req;
    for (size_t n : sizes) {
        req.push_back({n});
    }
    std::array<std::vector<void *>, kWorlds> slots;
    for (std::vector<void *> & v : slots) {
        v.assign(sizes.size(), nullptr);
    }
    const Outcome outcome = in_every_world([&](Env & e, int w) {
        return sam3d_session_reserve(e.session, req.empty() ? nullptr : req.data(), req.size(),
                                     null_slots ? nullptr : slots[w].data());
    });
    const auto & st = outcome.st;
    const auto & msg = outcome.msg;
    check_same_status(st, msg, "reserve");
    CHECK(invalid ? st[kOff] == SAM3D_ERR_INVALID_ARGUMENT : st[kOff] == SAM3D_OK || (!heap_fits && st[kOff] == SAM3D_ERR_INVALID_ARGUMENT),
          "reserve refuses n == 0, NULL arrays, a size of 0 and sizes that overflow, and takes the rest",
          std::string("reserve: ") + sam3d_status_name(st[kOff]) + " ('" + msg[kOff] + "')");
    for (int w = 0; w < kWorlds; ++w) {
        sam3d_counters now{};
        now.struct_size = sizeof now;
        sam3d_session_counters(g_env[w].session, &now);
        if (st[w] != SAM3D_OK) {
            check_records_only(w, {}, "a refused reservation enters no GGML function", "reserve");
            check_counters_only(before.counters[w], now, {}, "a refused reservation changes no counter", where("reserve", w));
        } else {
            check_records_only(w, {Record::Alloc}, "a reservation at most allocates staging", "reserve");
            check_counters_only(before.counters[w], now, {&sam3d_counters::staging_bytes, &sam3d_counters::staging_allocations},
                                "a reservation changes only the staging counters", where("reserve", w));
        }
    }
    if (st[kOff] != SAM3D_OK) {
        check_tensors_unchanged(before, "reserve");
        check_host(before, {});
        check_state();
        return;
    }
    // The slot lifetime: the previous reservation is dropped, reported calls' slots (kept ones
    // once released) are given back.
    for (SlotSet & s : g_model.sets) {
        if (s.state == SlotSet::Pending || (s.state == SlotSet::Reported && !s.kept)) {
            s.state = SlotSet::Expired;
        }
    }
    reclaim_released();
    SlotSet s;
    s.sizes = sizes;
    for (int w = 0; w < kWorlds; ++w) {
        const bool pinned = sam3d_session_reservation_pinned(g_env[w].session);
        s.pinned[w] = pinned;
        CHECK(pinned_world(w) || !pinned, "only a session with pinned staging hands out pinned slots", where("reserve", w));
        if (pinned_world(w) && before.in_flight[w] == 0 && need <= SAM3D_STAGING_BOUND_BYTES) {
            CHECK(pinned, "a reservation within the bound, with the ring empty, is pinned staging", where("reserve", w));
        }
        const size_t al = std::max<size_t>(sam3d_session_staging_alignment(g_env[w].session), 1);
        for (size_t j = 0; j < sizes.size(); ++j) {
            uint8_t * p = static_cast<uint8_t *>(slots[w][j]);
            CHECK(p != nullptr && reinterpret_cast<uintptr_t>(p) % al == 0, "slots are aligned to the staging alignment",
                  where("reserve", w) + " slot " + str(j));
            s.ptr[w].push_back(p);
        }
        // No slot overlaps another slot of this set or of a live set (kept, in flight).
        for (size_t j = 0; j < sizes.size(); ++j) {
            const uintptr_t b = reinterpret_cast<uintptr_t>(s.ptr[w][j]);
            for (size_t k = j + 1; k < sizes.size(); ++k) {
                const uintptr_t c = reinterpret_cast<uintptr_t>(s.ptr[w][k]);
                CHECK(b + sizes[j] <= c || c + sizes[k] <= b, "the slots of a reservation are disjoint", where("reserve", w));
            }
            for (const SlotSet & o : g_model.sets) {
                if (o.state == SlotSet::Expired && !still_read(o, w)) {
                    continue;
                }
                for (size_t k = 0; k < o.sizes.size(); ++k) {
                    const uintptr_t c = reinterpret_cast<uintptr_t>(o.ptr[w][k]);
                    CHECK(b + sizes[j] <= c || c + o.sizes[k] <= b,
                          "a reservation never reuses slots still in use (in flight or kept)", where("reserve", w));
                }
            }
        }
    }
    g_model.sets.push_back(s);
    g_model.pending = static_cast<int>(g_model.sets.size()) - 1;
    for (size_t j = 0; j < sizes.size(); ++j) {  // the caller's canary in its new slots
        write_all({HostRef::Slot, 0, g_model.pending, j}, shadow_of(g_model.sets[g_model.pending], j), true);
    }
    check_tensors_unchanged(before, "reserve");
    check_host(before, {});
    check_state();
}

void do_scribble(size_t at, size_t n) {
    for (const Region & r : in_flight_outputs()) {
        if (r.ref.kind == HostRef::Arena && at < r.ref.at + r.size && r.ref.at < at + n) {
            return;  // a queued call's dst is not the caller's until its wait
        }
    }
    write_all({HostRef::Arena, at, -1, 0}, n, false);
}

void do_area(int tensor, bool add) {
    AreaModel bytes{};
    const sam3d_status expect = judge_area(tensor, add, &bytes);
    const char * op = add ? "add_area" : "remove_area";
    const Snapshot before = snapshot();
    const Outcome outcome = in_every_world([&](Env & e, int) {
        return add ? sam3d_session_add_area(e.session, e.tensors[tensor]) : sam3d_session_remove_area(e.session, e.tensors[tensor]);
    });
    check_same_status(outcome.st, outcome.msg, op);
    CHECK(outcome.st[kOff] == expect,
          "an area is declared once, over an allocated contiguous tensor overlapping no other, and removed by its bytes",
          std::string(op) + ": " + sam3d_status_name(outcome.st[kOff]) + " ('" + outcome.msg[kOff] + "'), expected " +
              sam3d_status_name(expect));
    for (int w = 0; w < kWorlds; ++w) {
        if (outcome.st[w] != SAM3D_OK) {
            CHECK(outcome.msg[w].rfind(std::string(sam3d_status_name(outcome.st[w])) + ":", 0) == 0,
                  "an error's message starts with its status name", where(op, w) + ": '" + outcome.msg[w] + "'");
        }
        check_records_only(w, {}, "an area's declaration enters no GGML function", op);
        sam3d_counters now{};
        now.struct_size = sizeof now;
        sam3d_session_counters(g_env[w].session, &now);
        check_counters_only(before.counters[w], now, {}, "an area's declaration is not a call (no counter changes)",
                            where(op, w));
        CHECK(now.failed_calls == before.counters[w].failed_calls,
              "an area's declaration is not a call (no counter changes)", where(op, w) + ": failed_calls");
    }
    if (expect == SAM3D_OK) {
        auto & areas = g_model.areas;
        if (add) {
            areas.push_back(bytes);
        } else {
            areas.erase(std::find_if(areas.begin(), areas.end(),
                                     [&](const AreaModel & a) { return a.begin == bytes.begin && a.end == bytes.end; }));
        }
    }
    check_tensors_unchanged(before, op);
    check_host(before, {});
    check_state();
}

void arm_compute_failure() { g_model.armed = true; }

void do_reset_counters() {
    for (int w = 0; w < kWorlds; ++w) {
        sam3d_counters a{}, b{};
        a.struct_size = sizeof a;
        sam3d_session_counters(g_env[w].session, &a);
        sam3d_session_reset_counters(g_env[w].session);
        b.struct_size = sizeof b;
        sam3d_session_counters(g_env[w].session, &b);
        sam3d_counters zero{};
        zero.struct_size = sizeof zero;
        zero.staging_bytes = a.staging_bytes;
        CHECK(std::memcmp(&b, &zero, sizeof(b)) == 0, "reset zeroes every counter but staging_bytes", where("reset", w));
    }
    g_model.failed_lo = 0;
    g_model.failed_hi = 0;
    for (TicketModel & t : g_model.tickets) {
        if (t.in_flight() && t.fails) {
            t.lower_bound_counts = false;  // counted before the reset, or at its wait
            g_model.failed_hi += 1;
        }
    }
}

void drain() {
    for (size_t t = 0; t < g_model.tickets.size(); ++t) {
        if (g_model.tickets[t].in_flight()) {
            do_wait(static_cast<int>(t), g_model.tickets[t].id);
        }
    }
    for (size_t t = 0; t < g_model.tickets.size(); ++t) {
        if (g_model.tickets[t].kept) {
            do_release(static_cast<int>(t), g_model.tickets[t].id);
        }
    }
    do_reserve({1}, false);
    for (int w = 0; w < kWorlds; ++w) {
        const size_t flight = sam3d_session_staging_in_flight(g_env[w].session);
        const size_t al = std::max<size_t>(sam3d_session_staging_alignment(g_env[w].session), 1);
        const size_t expect = g_model.sets[g_model.pending].pinned[w] ? al : 0;
        CHECK(flight == expect, "once every call is waited and released, the ring holds only the current reservation",
              where("drain", w) + ": " + str(flight) + " bytes in flight, expected " + str(expect));
        CHECK(sam3d_session_outstanding(g_env[w].session) == 0, "once every ticket is waited, nothing is outstanding",
              where("drain", w));
    }
}

void close_sessions() {
    for (int w = 0; w < kWorlds; ++w) {
        in_world(w, [](Env & e) {
            sam3d_session_free(e.session);
            return SAM3D_OK;
        });
        check_records_only(w, {Record::Synchronize}, "freeing a session only completes its work", "free");
        g_env[w].session = nullptr;
    }
}

}  // namespace fuzz
