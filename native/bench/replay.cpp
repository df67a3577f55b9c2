// The replay: each graph of the profile really computes on its inputs with GGML (op
// "scale_add": out[j] = 0.5 * fit(in[j mod n]) + the other inputs' fits; op "add": the sum of
// all inputs' fits; fit = the first |out[j]| elements, tiled with ggml_repeat_4d when the
// input is shorter), so every output depends on the inputs and results are bit-exact on one
// backend. Inputs alternate between two data sets ("images"); dependent uploads read the
// earlier download's host buffer (on, off) or its kept output slot (zerocopy, queued; the
// slots and the areas layout's input offsets: plan_slots, input_offsets). The
// graphs are issued in profile.order (the profile's, or by dependency level: --order).
#include <algorithm>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "replay.h"

namespace sam3d_bench {

namespace {

// ---------------------------------------------------------------- deterministic inputs
// Small multiples of 0.25 in [-2, 2): exact in F32, so sums stay far from overflow.
void fill(std::vector<float> & v, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    for (float & f : v) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        f = static_cast<float>(static_cast<int>(x % 16u) - 8) * 0.25f;
    }
}

// ---------------------------------------------------------------- GGML graphs
ggml_tensor * fit(ggml_context * ctx, ggml_tensor * x, int64_t n) {
    const int64_t have = x->ne[0];
    if (have >= n) {
        return ggml_view_1d(ctx, x, n, 0);
    }
    const int64_t reps = (n + have - 1) / have;
    return ggml_view_1d(ctx, ggml_repeat_4d(ctx, x, have, reps, 1, 1), n, 0);
}

struct BuiltGraph {
    std::vector<ggml_tensor *> inputs;
    std::vector<ggml_tensor *> outputs;
    ggml_cgraph * graph = nullptr;
};

constexpr size_t kGraphNodes = 512;

BuiltGraph build_graph(ggml_context * ctx, const GraphSpec & s) {
    BuiltGraph b;
    for (size_t i = 0; i < s.uploads.size(); ++i) {
        ggml_tensor * t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, static_cast<int64_t>(s.uploads[i] / kElement));
        ggml_set_name(t, (s.name + ".in" + std::to_string(i)).c_str());
        ggml_set_input(t);
        b.inputs.push_back(t);
    }
    b.graph = ggml_new_graph_custom(ctx, kGraphNodes, false);
    const size_t n = b.inputs.size();
    for (size_t j = 0; j < s.downloads.size(); ++j) {
        const int64_t m = static_cast<int64_t>(s.downloads[j] / kElement);
        ggml_tensor * acc = nullptr;
        for (size_t i = 0; i < n; ++i) {
            ggml_tensor * term = fit(ctx, b.inputs[i], m);
            if (s.op == "scale_add" && i == j % n) {
                term = ggml_scale(ctx, term, 0.5f);
            }
            acc = acc == nullptr ? term : ggml_add(ctx, acc, term);
        }
        if (acc->op == GGML_OP_VIEW || acc->op == GGML_OP_NONE) {
            acc = ggml_add(ctx, acc, acc);  // "add" with one input: in + in, so the output is computed
        }
        ggml_set_name(acc, (s.name + ".out" + std::to_string(j)).c_str());
        ggml_set_output(acc);
        ggml_build_forward_expand(b.graph, acc);
        b.outputs.push_back(acc);
    }
    return b;
}

}  // namespace

struct Replay::State {
    const Profile & profile;
    ggml_backend_t backend;
    std::vector<BuiltGraph> graphs;
    // inputs[data set][graph][upload]; empty for uploads fed by a dependency
    std::vector<std::vector<std::vector<float>>> inputs[2];
    // outputs[mode][graph][download]
    std::vector<std::vector<std::vector<float>>> outputs[kModeCount];
    // descriptors[mode][data set][graph] of the copying modes (on, off)
    std::vector<std::vector<sam3d_upload>> ups[kModeCount][2];
    std::vector<std::vector<sam3d_download>> downs[kModeCount][2];
    std::vector<sam3d_call> calls[kModeCount][2];
    bool transfer_only = false;
    // zerocopy and queued: the slot plan (plan_slots) and scratch
    struct SlotRef {
        size_t graph;  // whose reservation
        size_t slot;   // which of its slots
    };
    std::vector<std::vector<size_t>> requests;     // each graph's reservation: its slots' sizes
    std::vector<std::vector<SlotRef>> in_slot;     // each graph's uploads: the slot each reads
    std::vector<std::vector<size_t>> out_slot;     // each graph's downloads: their slots in its reservation
    std::vector<std::vector<size_t>> in_order;     // each graph's uploads in its calls' order (ascending on the device)
    std::vector<std::vector<void *>> res_slots;    // each graph's reservation of this image
    sam3d_session * session_ = nullptr;
    std::vector<sam3d_slot_request> req;
    std::vector<sam3d_upload> zc_ups;
    std::vector<sam3d_download> zc_downs;
    std::vector<sam3d_ticket> tickets;
    std::vector<size_t> pos;                     // graph -> position in profile.order
    std::vector<size_t> last_reader;             // the position of the last graph that uploads a graph's download (0: none)
    std::vector<sam3d_ticket> kept;              // tickets of kept calls not released yet (0: none)
    // The last image's untimed host time: the producer's writes of inputs into slots and the
    // consumer's reads of outputs out of them (zerocopy, queued).
    double excluded_write_ms = 0, excluded_read_ms = 0;
    // The areas layout: each graph's input and output areas, their context and buffer, and the
    // alignment of the offsets in them (1: the scattered layout, slots at their own sizes).
    std::vector<ggml_tensor *> areas;
    ggml_context * area_ctx = nullptr;
    ggml_backend_buffer_t area_buffer = nullptr;
    size_t area_alignment = 1;
    size_t dependency_waits = 0;  // queued, last image: wait points before an input that takes an earlier download
    size_t ring_waits = 0;        // queued, last image: wait points because the staging ring had no room
    size_t end_waits = 0;         // queued, last image: the wait at the end (0 or 1)

    State(const Profile & p, ggml_backend_t be, bool no_compute) : profile(p), backend(be), transfer_only(no_compute) {}
    ~State() {
        if (area_buffer) ggml_backend_buffer_free(area_buffer);
        if (area_ctx) ggml_free(area_ctx);
    }

    static size_t aligned(size_t n, size_t a) { return (n + a - 1) / a * a; }

    // The zero-copy modes' slots (reserve, fill_slots). A graph's reservation holds its
    // independent inputs and its outputs, at aligned sizes in that order; an upload fed by a
    // download reads that download's slot (kept). `fold` (the areas layout): the independent
    // inputs of a graph with feeders go into one feeder's reservation instead, as one block
    // just before or just after that feeder's outputs, where the fewest bytes lie between the
    // block and the outputs this graph reads there (the feeder and the side with the smallest
    // gap); that reservation stays kept until this graph's submit (A4). A reservation then
    // holds: its own independent inputs, the blocks folded before its outputs (the one issued
    // last first), its outputs, the blocks folded after them (the one issued last last). So a
    // reader's upload run spans the blocks of readers issued before it, never one of a reader
    // issued after it (which writes its block while the earlier reader may be in flight).
    void plan_slots(bool fold) {
        const size_t ng = graphs.size();
        std::vector<std::deque<size_t>> before(ng);  // per graph, the graphs whose blocks lie before its outputs
        std::vector<std::vector<size_t>> after(ng);  // ... and after them
        std::vector<size_t> home(ng);                // whose reservation holds a graph's independent inputs
        const auto block = [&](size_t r) {
            size_t n = 0;
            for (size_t i = 0; i < profile.graphs[r].uploads.size(); ++i) {
                if (!profile.graphs[r].feeder(i)) n += aligned(profile.graphs[r].uploads[i], area_alignment);
            }
            return n;
        };
        const auto blocks = [&](const auto & rs) {
            size_t n = 0;
            for (size_t r : rs) n += block(r);
            return n;
        };
        const auto out_at = [&](size_t f, size_t j) {  // download j's offset among f's outputs
            size_t n = 0;
            for (size_t k = 0; k < j; ++k) n += aligned(profile.graphs[f].downloads[k], area_alignment);
            return n;
        };
        for (size_t g : profile.order) {
            const GraphSpec & sp = profile.graphs[g];
            home[g] = g;
            size_t last = sp.uploads.size();  // the last independent input
            for (size_t i = 0; i < sp.uploads.size(); ++i) last = sp.feeder(i) ? last : i;
            if (!fold || sp.deps.empty() || last == sp.uploads.size()) continue;
            size_t best = SIZE_MAX;
            bool first = true;
            for (const Dep & x : sp.deps) {
                const size_t f = x.graph;
                const std::vector<size_t> & d = profile.graphs[f].downloads;
                size_t lo = x.download, hi = x.download;  // the outputs of f this graph reads
                for (const Dep & y : sp.deps) {
                    if (y.graph == f) {
                        lo = std::min(lo, y.download);
                        hi = std::max(hi, y.download);
                    }
                }
                const size_t pre = aligned(sp.uploads[last], area_alignment) - sp.uploads[last] + blocks(before[f]) + out_at(f, lo);
                const size_t post = out_at(f, d.size()) - out_at(f, hi) - d[hi] + blocks(after[f]);
                if (std::min(pre, post) < best) {
                    best = std::min(pre, post);
                    home[g] = f;
                    first = pre <= post;
                }
            }
            if (first) {
                before[home[g]].push_front(g);
            } else {
                after[home[g]].push_back(g);
            }
        }
        requests.assign(ng, {});
        in_slot.assign(ng, {});
        out_slot.assign(ng, {});
        in_order.assign(ng, {});
        for (size_t g = 0; g < ng; ++g) in_slot[g].resize(profile.graphs[g].uploads.size());
        const auto add_inputs = [&](size_t r, size_t owner) {
            const GraphSpec & sp = profile.graphs[r];
            for (size_t i = 0; i < sp.uploads.size(); ++i) {
                if (sp.feeder(i)) continue;
                in_slot[r][i] = {owner, requests[owner].size()};
                requests[owner].push_back(aligned(sp.uploads[i], area_alignment));
            }
        };
        for (size_t g = 0; g < ng; ++g) {
            if (home[g] == g) add_inputs(g, g);
            for (size_t r : before[g]) add_inputs(r, g);
            for (size_t b : profile.graphs[g].downloads) {
                out_slot[g].push_back(requests[g].size());
                requests[g].push_back(aligned(b, area_alignment));
            }
            for (size_t r : after[g]) add_inputs(r, g);
        }
        for (size_t g = 0; g < ng; ++g) {
            for (const Dep & x : profile.graphs[g].deps) in_slot[g][x.upload] = {x.graph, out_slot[x.graph][x.download]};
            for (size_t i = 0; i < in_slot[g].size(); ++i) in_order[g].push_back(i);
        }
    }

    // The areas layout's input offsets of graph g (off[i]; returns the area's bytes). Uploads
    // that read one reservation lie as far apart in the input area as their slots there, so they
    // join in a zero-copy call (rule 10), as long as the bytes between two of them are at most
    // the coalescing gap; each such group starts at the next aligned offset, the smallest first
    // (a copying call's run ends once it reaches a piece, rule 2: a large group last joins the
    // others before it). in_order[g] becomes the uploads by offset, the order of g's calls.
    size_t input_offsets(size_t g, std::vector<size_t> & off) {
        const GraphSpec & sp = profile.graphs[g];
        std::vector<size_t> at(sp.uploads.size());  // each upload's slot's offset in its reservation
        for (size_t i = 0; i < at.size(); ++i) {
            const SlotRef & r = in_slot[g][i];
            at[i] = 0;
            for (size_t k = 0; k < r.slot; ++k) at[i] += requests[r.graph][k];
        }
        std::vector<size_t> & order = in_order[g];
        std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            return std::make_pair(in_slot[g][a].graph, at[a]) < std::make_pair(in_slot[g][b].graph, at[b]);
        });
        std::vector<std::vector<size_t>> groups;
        for (size_t k = 0; k < order.size(); ++k) {
            const size_t i = order[k], p = k ? order[k - 1] : i;
            const bool joins = k && in_slot[g][p].graph == in_slot[g][i].graph && at[i] >= at[p] + sp.uploads[p] &&
                               at[i] - at[p] - sp.uploads[p] <= SAM3D_COALESCE_GAP_BYTES;
            if (!joins) groups.emplace_back();
            groups.back().push_back(i);
        }
        const auto span = [&](const std::vector<size_t> & r) { return at[r.back()] + sp.uploads[r.back()] - at[r.front()]; };
        std::stable_sort(groups.begin(), groups.end(), [&](const auto & a, const auto & b) { return span(a) < span(b); });
        off.assign(sp.uploads.size(), 0);
        order.clear();
        size_t end = 0;
        for (const std::vector<size_t> & r : groups) {
            const size_t base = aligned(end, area_alignment);
            for (size_t i : r) {
                off[i] = base + (at[i] - at[r.front()]);
                order.push_back(i);
            }
            end = base + span(r);
        }
        return aligned(end, area_alignment);
    }

    void place_areas(size_t staging_alignment, bool clear) {
        area_alignment = std::max(ggml_backend_get_alignment(backend), std::max<size_t>(staging_alignment, 1));
        plan_slots(true);
        const size_t ng = graphs.size();
        ggml_init_params ip = {ggml_tensor_overhead() * 2 * ng, nullptr, true};
        area_ctx = ggml_init(ip);
        if (!area_ctx) die(1, "ggml_init failed (areas)");
        std::vector<std::vector<size_t>> offsets[2];  // [output][graph][tensor]
        for (size_t g = 0; g < ng; ++g) {
            const GraphSpec & sp = profile.graphs[g];
            offsets[0].emplace_back();
            const size_t in_bytes = input_offsets(g, offsets[0][g]);
            offsets[1].emplace_back();
            size_t out_bytes = 0;
            for (size_t b : sp.downloads) {
                offsets[1][g].push_back(out_bytes);
                out_bytes += aligned(b, area_alignment);
            }
            for (int out = 0; out < 2; ++out) {
                const size_t n = out ? out_bytes : in_bytes;
                ggml_tensor * a = ggml_new_tensor_1d(area_ctx, GGML_TYPE_I8, static_cast<int64_t>(std::max<size_t>(n, 1)));
                ggml_set_name(a, (sp.name + (out ? ".outputs" : ".inputs")).c_str());
                areas.push_back(a);
            }
        }
        area_buffer = ggml_backend_alloc_ctx_tensors(area_ctx, backend);
        if (!area_buffer) die(1, "allocating the I/O areas failed");
        // Once, where the areas are created: a coalesced download span reads the gaps between
        // outputs (rule 10), which no tensor write ever reaches; cleared, they hold defined bytes.
        if (clear) ggml_backend_buffer_clear(area_buffer, 0);
        for (size_t g = 0; g < ng; ++g) {
            for (int out = 0; out < 2; ++out) {
                const std::vector<ggml_tensor *> & ts = out ? graphs[g].outputs : graphs[g].inputs;
                uint8_t * base = static_cast<uint8_t *>(areas[2 * g + out]->data);
                for (size_t k = 0; k < ts.size(); ++k) {
                    if (ggml_backend_tensor_alloc(area_buffer, ts[k], base + offsets[out][g][k]) != GGML_STATUS_SUCCESS) {
                        die(1, std::string("placing ") + ts[k]->name + " in its area failed");
                    }
                }
            }
        }
        // The copying modes' uploads in the same order, ascending on the device (rule 10).
        for (int m : {kOn, kOff}) {
            for (int d = 0; d < 2; ++d) {
                for (size_t g = 0; g < ng; ++g) {
                    std::vector<sam3d_upload> & u = ups[m][d][g];
                    std::vector<sam3d_upload> sorted;
                    for (size_t i : in_order[g]) sorted.push_back(u[i]);
                    std::copy(sorted.begin(), sorted.end(), u.begin());  // calls[m][d][g] points at u's data
                }
            }
        }
    }

    void declare_areas(sam3d_session * s) {
        for (ggml_tensor * a : areas) {
            if (sam3d_session_add_area(s, a) != SAM3D_OK) die(2, std::string("declaring area ") + a->name + ": " + sam3d_last_error());
        }
    }

    // Transfer-only replay: output tensors hold a fixed pattern (nothing computes them).
    void fill_outputs() {
        for (size_t g = 0; g < graphs.size(); ++g) {
            for (size_t j = 0; j < graphs[g].outputs.size(); ++j) {
                std::vector<float> v(static_cast<size_t>(ggml_nelements(graphs[g].outputs[j])));
                fill(v, 0xABCDull ^ (g << 16) ^ j);
                ggml_backend_tensor_set(graphs[g].outputs[j], v.data(), 0, v.size() * kElement);
            }
        }
    }

    void prepare(ggml_context * ctx) {
        for (const GraphSpec & s : profile.graphs) graphs.push_back(build_graph(ctx, s));
        const size_t ng = profile.graphs.size();
        for (int d = 0; d < 2; ++d) {
            inputs[d].resize(ng);
            for (size_t g = 0; g < ng; ++g) {
                const GraphSpec & s = profile.graphs[g];
                inputs[d][g].resize(s.uploads.size());
                for (size_t i = 0; i < s.uploads.size(); ++i) {
                    if (s.feeder(i) == nullptr) {
                        inputs[d][g][i].resize(s.uploads[i] / kElement);
                        fill(inputs[d][g][i], (static_cast<uint64_t>(d) << 40) ^ (g << 16) ^ i);
                    }
                }
            }
        }
        for (int m = 0; m < kModeCount; ++m) {
            outputs[m].resize(ng);
            for (size_t g = 0; g < ng; ++g) {
                for (size_t b : profile.graphs[g].downloads) outputs[m][g].emplace_back(b / kElement, -1.0f);
            }
        }
        for (int m : {kOn, kOff}) {
            for (int d = 0; d < 2; ++d) {
                ups[m][d].resize(ng);
                downs[m][d].resize(ng);
                for (size_t g = 0; g < ng; ++g) {
                    const GraphSpec & s = profile.graphs[g];
                    for (size_t i = 0; i < s.uploads.size(); ++i) {
                        const Dep * x = s.feeder(i);
                        const void * src = x ? outputs[m][x->graph][x->download].data() : inputs[d][g][i].data();
                        ups[m][d][g].push_back(sam3d_upload{graphs[g].inputs[i], src, 0, s.uploads[i]});
                    }
                    for (size_t j = 0; j < s.downloads.size(); ++j) {
                        downs[m][d][g].push_back(sam3d_download{graphs[g].outputs[j], outputs[m][g][j].data(), 0, s.downloads[j]});
                    }
                }
                for (size_t g = 0; g < ng; ++g) {
                    calls[m][d].push_back(sam3d_call{ups[m][d][g].data(), ups[m][d][g].size(),
                                                     transfer_only ? nullptr : graphs[g].graph,
                                                     downs[m][d][g].data(), downs[m][d][g].size(),
                                                     profile.graphs[g].synchronous});
                }
            }
        }
    }

    // One image: every graph in profile.order. Returns the wall time in ms.
    double run(sam3d_session * s, Mode mode, int data) {
        if (mode == kZeroCopy) return run_zero_copy(s, data);
        if (mode == kQueued) return run_queued(s, data);
        const std::vector<sam3d_call> & cs = calls[mode][data];
        const double t0 = now_ms();
        for (size_t g : profile.order) {
            const sam3d_status st = sam3d_session_run(s, &cs[g]);
            if (st != SAM3D_OK) {
                die(2, std::string("graph ") + profile.graphs[g].name + " (batching " + row_name(mode) +
                           "): sam3d_session_run failed: " + sam3d_last_error());
            }
        }
        return now_ms() - t0;
    }

    [[noreturn]] void failed(size_t g, const char * what) {
        die(2, std::string("graph ") + profile.graphs[g].name + " (" + what + "): " + sam3d_last_error());
    }

    // Zero-copy modes. Per graph: reserve slots for its independent uploads and its downloads,
    // write the inputs into them, submit. Writing an independent input into its slot stands for
    // its producer writing it there (the other modes find their inputs ready in caller memory):
    // that write is excluded from the wall time. An input that takes an earlier graph's download
    // is uploaded straight from that graph's output slot, kept for it (SAM3D_SUBMIT_KEEP_SLOTS)
    // and released after its last reader's submit, as the other modes read the earlier
    // download's buffer. Outputs are copied out of their slots once their completion is
    // reported, to verify them; that read stands for the consumer (excluded, as in the other
    // modes). `excluded_write_ms` and `excluded_read_ms` hold the last image's excluded time.
    // In the areas layout a graph's independent inputs are written into one feeder's kept
    // reservation (plan_slots), so that they and the inputs fed from there go up as one run.
    void * slot(const SlotRef & r) const { return res_slots[r.graph][r.slot]; }

    // Reserves graph g's slots; returns whether they are pinned staging.
    bool reserve(size_t g) {
        req.clear();
        for (size_t b : requests[g]) req.push_back({b});
        res_slots[g].assign(req.size(), nullptr);
        if (sam3d_session_reserve(session_, req.data(), req.size(), res_slots[g].data()) != SAM3D_OK) failed(g, "reserve");
        return sam3d_session_reservation_pinned(session_);
    }

    // Writes graph g's independent inputs into their slots and builds its call.
    sam3d_call fill_slots(size_t g, int data) {
        const GraphSpec & sp = profile.graphs[g];
        zc_ups.clear();
        zc_downs.clear();
        for (size_t i : in_order[g]) {
            void * src = slot(in_slot[g][i]);
            if (sp.feeder(i) == nullptr) {
                const double t = now_ms();
                std::memcpy(src, inputs[data][g][i].data(), sp.uploads[i]);
                excluded_write_ms += now_ms() - t;
            }
            zc_ups.push_back(sam3d_upload{graphs[g].inputs[i], src, 0, sp.uploads[i]});
        }
        for (size_t j = 0; j < sp.downloads.size(); ++j) {
            zc_downs.push_back(sam3d_download{graphs[g].outputs[j], slot({g, out_slot[g][j]}), 0, sp.downloads[j]});
        }
        return sam3d_call{zc_ups.data(), zc_ups.size(), transfer_only ? nullptr : graphs[g].graph, zc_downs.data(),
                          zc_downs.size(), sp.synchronous};
    }

    // Copies graph g's outputs out of its slots (verification; excluded).
    void keep_outputs(size_t g, Mode mode) {
        const double t = now_ms();
        const GraphSpec & sp = profile.graphs[g];
        for (size_t j = 0; j < sp.downloads.size(); ++j) {
            std::memcpy(outputs[mode][g][j].data(), slot({g, out_slot[g][j]}), sp.downloads[j]);
        }
        excluded_read_ms += now_ms() - t;
    }

    // Submits graph g's zero-copy call (kept when a later graph reads its outputs), then
    // releases the kept calls whose last reader g is.
    void submit_slots(size_t g, const sam3d_call & c, unsigned flags, const char * what) {
        if (last_reader[g] > pos[g]) flags |= SAM3D_SUBMIT_KEEP_SLOTS;
        // The areas layout's output slots are padded to the area's offsets, and nobody reads
        // past an output's bytes: their tails are scratch, so a graph's downloads join (rule 10).
        if (!areas.empty()) flags |= SAM3D_SUBMIT_SLOT_TAILS;
        sam3d_ticket * t = (flags & (SAM3D_SUBMIT_KEEP_SLOTS | SAM3D_SUBMIT_QUEUED)) ? &tickets[g] : nullptr;
        if (sam3d_session_submit(session_, &c, flags, t) != SAM3D_OK) failed(g, what);
        for (const Dep & x : profile.graphs[g].deps) {
            if (last_reader[x.graph] == pos[g] && kept[x.graph] != 0) {
                if (sam3d_session_release(session_, kept[x.graph]) != SAM3D_OK) failed(x.graph, "release");
                kept[x.graph] = 0;  // a graph may read the same download twice
            }
        }
        kept[g] = (flags & SAM3D_SUBMIT_KEEP_SLOTS) ? tickets[g] : 0;
    }

    void begin_slots(sam3d_session * s) {
        session_ = s;
        excluded_write_ms = excluded_read_ms = 0;
        const size_t ng = graphs.size();
        tickets.assign(ng, 0);
        kept.assign(ng, 0);
        res_slots.assign(ng, {});
        if (requests.empty()) plan_slots(false);  // the scattered layout (place_areas plans the areas layout's)
        if (last_reader.empty()) {
            pos = positions(profile.order);
            last_reader.assign(ng, 0);
            for (size_t g = 0; g < ng; ++g) {
                for (const Dep & x : profile.graphs[g].deps) last_reader[x.graph] = std::max(last_reader[x.graph], pos[g]);
            }
        }
    }

    // zerocopy: one synchronization per graph (SAM3D_SUBMIT_ZERO_COPY).
    double run_zero_copy(sam3d_session * s, int data) {
        begin_slots(s);
        const double t0 = now_ms();
        for (size_t g : profile.order) {
            reserve(g);
            const sam3d_call c = fill_slots(g, data);
            submit_slots(g, c, SAM3D_SUBMIT_ZERO_COPY, "zerocopy");
            keep_outputs(g, kZeroCopy);
        }
        return now_ms() - t0 - excluded_write_ms - excluded_read_ms;
    }

    // queued: zero-copy calls submitted with SAM3D_SUBMIT_QUEUED, in profile.order. Tickets are
    // waited in submission order, and only when needed: before a graph whose input takes an earlier
    // graph's download (the profile's depends_on_downloads), when the staging ring has no room
    // for the next reservation (the oldest call is waited and the reservation retried), before
    // the synchronous image encoder, and at the end of the image.
    double run_queued(sam3d_session * s, int data) {
        begin_slots(s);
        const size_t ng = graphs.size();
        const std::vector<size_t> & order = profile.order;
        WaitSchedule waited;  // by position
        dependency_waits = ring_waits = 0;
        // Waits the tickets of the graphs not yet waited before position `end`, the newest first
        // (one synchronization completes them all); counts one wait point if there was any.
        auto wait_until = [&](size_t end, size_t * wait_points) {
            const auto [from, last] = waited.until(end, [&](size_t q) { return tickets[order[q]] != 0; });
            if (last == from) return;
            if (sam3d_session_wait(s, tickets[order[last - 1]]) != SAM3D_OK) failed(order[last - 1], "queued wait");
            for (size_t q = from; q + 1 < last; ++q) {
                const size_t g = order[q];
                if (tickets[g] != 0 && sam3d_session_wait(s, tickets[g]) != SAM3D_OK) failed(g, "queued wait");
            }
            for (size_t q = from; q < last; ++q) {
                if (tickets[order[q]] != 0) keep_outputs(order[q], kQueued);
            }
            *wait_points += 1;
        };
        const double t0 = now_ms();
        for (size_t k = 0; k < ng; ++k) {
            const size_t g = order[k];
            const GraphSpec & sp = profile.graphs[g];
            wait_until(wait_end(sp, k, pos), &dependency_waits);
            while (!reserve(g) && waited.next < k) wait_until(waited.next + 1, &ring_waits);
            const sam3d_call c = fill_slots(g, data);
            if (sp.synchronous) {
                submit_slots(g, c, SAM3D_SUBMIT_ZERO_COPY, "queued, synchronous graph");
                keep_outputs(g, kQueued);
                tickets[g] = 0;  // complete on return: nothing to wait
                waited.next = k + 1;
                continue;
            }
            submit_slots(g, c, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, "queued submit");
        }
        end_waits = 0;
        wait_until(ng, &end_waits);
        return now_ms() - t0 - excluded_write_ms - excluded_read_ms;
    }

    std::string digest(Mode mode) {
        Sha256 h;
        for (const auto & g : outputs[mode]) {
            for (const auto & o : g) h.update(o.data(), o.size() * kElement);
        }
        return h.hex();
    }
};


Replay::Replay(const Profile & profile, ggml_backend_t backend, bool transfer_only)
    : s_(std::make_unique<State>(profile, backend, transfer_only)) {}
Replay::~Replay() = default;

size_t Replay::context_bytes(const Profile & profile) {
    size_t n_tensors = 0;
    for (const GraphSpec & s : profile.graphs) n_tensors += s.uploads.size() + s.downloads.size() * (5 * s.uploads.size() + 2);
    return ggml_tensor_overhead() * (n_tensors + 16) + ggml_graph_overhead_custom(kGraphNodes, false) * profile.graphs.size();
}

void Replay::prepare(ggml_context * ctx) { s_->prepare(ctx); }
void Replay::fill_outputs() { s_->fill_outputs(); }
void Replay::place_areas(size_t staging_alignment, bool clear) { s_->place_areas(staging_alignment, clear); }
void Replay::declare_areas(sam3d_session * s) { s_->declare_areas(s); }
double Replay::run(sam3d_session * s, Mode mode, int data) { return s_->run(s, mode, data); }
std::string Replay::digest(Mode mode) { return s_->digest(mode); }
double Replay::excluded_write_ms() const { return s_->excluded_write_ms; }
double Replay::excluded_read_ms() const { return s_->excluded_read_ms; }
size_t Replay::dependency_waits() const { return s_->dependency_waits; }
size_t Replay::ring_waits() const { return s_->ring_waits; }
size_t Replay::end_waits() const { return s_->end_waits; }

}  // namespace sam3d_bench
