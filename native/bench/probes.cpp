// The limit probes (probes.h). Each quantity is sampled once per round (the round trips
// several times), one round after every image, so samples spread through the run between the
// modes' images; the timed rounds fall into up to kMaxBlocks consecutive blocks, and a
// quantity's value is the smallest of its block medians (a slow stretch of the run, another
// process on the machine, does not set it). A round starts after a batched mode's image (main.cpp),
// never right after a synchronous copy, and its host memcpy separates the floor samples from
// the round trips.
#include "probes.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ggml-alloc.h"

namespace sam3d_bench {

namespace {

constexpr int kMaxBlocks = 4;
constexpr int kRoundTripSamplesPerBlock = 50;  // at least this many samples per block median
constexpr int kBackToBackGraphs = 8;
constexpr size_t kMinAlignment = 64;
constexpr size_t kRoundTripBytes = 4;  // one F32

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// One measured quantity: its timed samples per block (ms).
struct Series {
    std::vector<std::vector<double>> blocks;

    explicit Series(int n = 0) : blocks(static_cast<size_t>(n)) {}
    void add(int block, double v) { blocks[static_cast<size_t>(block)].push_back(v); }
    bool empty() const {
        return std::all_of(blocks.begin(), blocks.end(), [](const std::vector<double> & b) { return b.empty(); });
    }
    // The smallest block median; 0 without samples.
    double best() const {
        double b = 0;
        bool any = false;
        for (const auto & x : blocks) {
            if (x.empty()) continue;
            const double m = median(x);
            b = any ? std::min(b, m) : m;
            any = true;
        }
        return b;
    }
    json to_json() const {
        std::vector<double> medians, all;
        for (const auto & x : blocks) {
            if (x.empty()) continue;
            medians.push_back(median(x));
            all.insert(all.end(), x.begin(), x.end());
        }
        return json{{"best_median_ms", best()}, {"block_medians_ms", medians}, {"median_ms", median(all)},
                    {"n", all.size()}, {"samples_ms", all}};
    }
};

double gb_per_s(size_t bytes, double ms) { return ms > 0 ? static_cast<double>(bytes) / (ms * 1e6) : 0.0; }

// One copy of the staged path: a descriptor's bytes between caller memory and staging.
struct Copy {
    bool upload;
    size_t staging_offset;
    size_t caller_offset;
    size_t size;
};

}  // namespace

struct Probes::State {
    ggml_backend_t backend;
    ggml_backend_dev_t dev;
    size_t up_bytes, down_bytes;
    size_t alignment;
    int n_blocks, images, rt_per_round;
    bool pinned = false;
    ggml_backend_buffer_type_t host_buft = nullptr;
    ggml_backend_buffer_t host = nullptr;  // pinned: the floor's source and destination, the memcpy's staging
    ggml_backend_buffer_t dbuf = nullptr;
    ggml_context * ctx = nullptr;
    ggml_tensor *up = nullptr, *down = nullptr, *rt_in = nullptr, *rt_out = nullptr;
    ggml_cgraph * graph = nullptr;  // one node: rt_out = rt_in * 1
    ggml_backend_event_t event = nullptr;
    uint8_t * mem = nullptr;
    size_t down_offset = 0, rt_offset = 0;
    std::vector<uint8_t> heap_staging;  // without a host buffer type
    uint8_t * staging = nullptr;
    std::vector<Copy> copies;
    size_t memcpy_up = 0, memcpy_down = 0, memcpy_descriptors_up = 0, memcpy_descriptors_down = 0;
    unsigned memcpy_threads = 1;  // the 'on' session's copy threads (sam3d_session_copy_threads)
    float rt_host_heap = 0;
    Series f_up, f_down, f_both, cp, rt_down, rt_graph, rt_down_event, rt_graph_event, b2b;
    // Duplex: the upload on `backend` while the download runs on a second backend of the same
    // device, each submitted by an event record (GGML's Vulkan backend submits nothing before a
    // record or a synchronize); a diagnostic of whether the hardware overlaps the directions.
    ggml_backend_t backend2 = nullptr;
    ggml_backend_event_t duplex_up = nullptr, duplex_down = nullptr;
    Series f_duplex;
    // The modes' GGML calls alone (transfer-only runs): every descriptor at its own aligned
    // offset of the floor's host buffer and device tensors, in the issue order (profile.order).
    const Profile & profile;
    bool calls = false;
    std::vector<std::vector<size_t>> call_up_at, call_down_at;  // [graph][descriptor]: offset
    // Caller memory of every descriptor at the same offsets (the staged copies' and the
    // replay's producer's and consumer's): inputs come from call_src, outputs go to call_dst.
    std::vector<uint8_t> call_src, call_dst;
    std::vector<ggml_backend_event_t> call_events;    // one per graph (queued calls)
    std::vector<ggml_backend_event_t> upload_events;  // one per graph (queued, downloads on backend2)
    Series c_copies, c_zerocopy, c_queued, c_zerocopy_cold, c_queued_cold;
    // queued's calls without the event wait before uploads, and with every wait a synchronize
    // and no event at all (docs/benchmark.md, "Events and waits").
    Series c_queued_no_upload_wait, c_queued_synchronize;
    // queued's calls with each graph's downloads on the second backend (its own stream on CUDA)
    // after an event wait on its uploads: whether the directions overlap across graphs.
    Series c_queued_two_backends;
    // queued's calls (the core's policy) with the graphs in dependency-level order
    // (level_order()): the waits the profile needs when a runtime issues each level's graphs
    // together, instead of the profile's order.
    Series c_queued_levels;
    std::vector<size_t> levels_order;  // position -> graph

    State(ggml_backend_t be, ggml_backend_dev_t d, const Profile & p, size_t staging_alignment, int n_images,
          bool with_calls)
        : backend(be), dev(d), up_bytes(p.upload_bytes), down_bytes(p.download_bytes),
          alignment(std::max(staging_alignment, kMinAlignment)), n_blocks(std::min(kMaxBlocks, n_images)),
          images(n_images), f_up(n_blocks), f_down(n_blocks), f_both(n_blocks), cp(n_blocks), rt_down(n_blocks),
          rt_graph(n_blocks), rt_down_event(n_blocks), rt_graph_event(n_blocks), b2b(n_blocks), f_duplex(n_blocks), profile(p),
          c_copies(n_blocks), c_zerocopy(n_blocks), c_queued(n_blocks), c_zerocopy_cold(n_blocks),
          c_queued_cold(n_blocks), c_queued_no_upload_wait(n_blocks),
          c_queued_synchronize(n_blocks), c_queued_two_backends(n_blocks), c_queued_levels(n_blocks),
          levels_order(level_order(p)) {
        const int per_block = images / n_blocks;  // the fewest timed rounds of any block
        rt_per_round = (kRoundTripSamplesPerBlock + per_block - 1) / per_block;
        // Each direction's area holds its descriptors at aligned offsets (at least its bytes).
        const size_t up_area = layout_calls(p, true), down_area = layout_calls(p, false);
        call_src.assign(up_area, 0x3c);
        call_dst.assign(down_area, 0);
        layout_copies(p);
        host_buft = ggml_backend_dev_host_buffer_type(dev);
        const size_t host_bytes = up_area + down_area + alignment;
        if (host_buft != nullptr) {
            host = ggml_backend_buft_alloc_buffer(host_buft, host_bytes);
            if (host == nullptr) die(1, "probes: allocating " + std::to_string(host_bytes) + " bytes of pinned host memory failed");
            pinned = ggml_backend_buffer_get_type(host) == host_buft;
            mem = static_cast<uint8_t *>(ggml_backend_buffer_get_base(host));
            if (reinterpret_cast<uintptr_t>(mem) % alignment != 0) {
                die(1, "probes: the host buffer's base is not " + std::to_string(alignment) + "-byte aligned");
            }
            std::memset(mem, 0x5a, host_bytes);
            down_offset = up_area;
            rt_offset = down_offset + down_area;
            staging = mem;
        } else {
            heap_staging.assign(host_bytes, 0x5a);
            staging = heap_staging.data();
        }
        ggml_init_params ip = {ggml_tensor_overhead() * 8 + ggml_graph_overhead_custom(8, false), nullptr, true};
        ctx = ggml_init(ip);
        if (ctx == nullptr) die(1, "probes: ggml_init failed");
        if (host != nullptr) {
            up = ggml_new_tensor_1d(ctx, GGML_TYPE_I8, static_cast<int64_t>(up_area));
            down = ggml_new_tensor_1d(ctx, GGML_TYPE_I8, static_cast<int64_t>(down_area));
        }
        rt_in = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1);
        ggml_set_input(rt_in);
        rt_out = ggml_scale(ctx, rt_in, 1.0f);
        ggml_set_output(rt_out);
        graph = ggml_new_graph_custom(ctx, 8, false);
        ggml_build_forward_expand(graph, rt_out);
        dbuf = ggml_backend_alloc_ctx_tensors(ctx, backend);
        if (dbuf == nullptr) die(1, "probes: allocating the device tensors failed");
        // Defined bytes everywhere: the transfer rounds download rt_out before any graph wrote it.
        ggml_backend_buffer_clear(dbuf, 0);
        const float one = 1.0f;
        ggml_backend_tensor_set(rt_in, &one, 0, sizeof one);
        if (down != nullptr) {
            std::vector<uint8_t> pattern(down_area, 0xa5);
            ggml_backend_tensor_set(down, pattern.data(), 0, down_area);
        }
        ggml_backend_dev_props props{};
        ggml_backend_dev_get_props(dev, &props);
        if (props.caps.events) event = ggml_backend_event_new(dev);
        if (host != nullptr && props.caps.events) {  // else (or a NULL of the three) no duplex samples
            backend2 = ggml_backend_dev_init(dev, nullptr);
            duplex_up = ggml_backend_event_new(dev);
            duplex_down = ggml_backend_event_new(dev);
        }
        calls = with_calls && host != nullptr;
        if (calls && props.caps.events) {
            for (size_t g = 0; g < p.graphs.size(); ++g) {
                ggml_backend_event_t e = ggml_backend_event_new(dev);
                if (e == nullptr) {  // as without events: no queued samples
                    for (ggml_backend_event_t made : call_events) ggml_backend_event_free(made);
                    call_events.clear();
                    break;
                }
                call_events.push_back(e);
            }
        }
        if (!call_events.empty() && backend2 != nullptr) {
            for (size_t g = 0; g < p.graphs.size(); ++g) {
                ggml_backend_event_t e = ggml_backend_event_new(dev);
                if (e == nullptr) {  // no two-backend samples
                    for (ggml_backend_event_t made : upload_events) ggml_backend_event_free(made);
                    upload_events.clear();
                    break;
                }
                upload_events.push_back(e);
            }
        }
    }

    ~State() {
        for (ggml_backend_event_t e : call_events) ggml_backend_event_free(e);
        for (ggml_backend_event_t e : upload_events) ggml_backend_event_free(e);
        if (event != nullptr) ggml_backend_event_free(event);
        if (duplex_up != nullptr) ggml_backend_event_free(duplex_up);
        if (duplex_down != nullptr) ggml_backend_event_free(duplex_down);
        if (backend2 != nullptr) ggml_backend_free(backend2);
        if (dbuf != nullptr) ggml_backend_buffer_free(dbuf);
        if (ctx != nullptr) ggml_free(ctx);
        if (host != nullptr) ggml_backend_buffer_free(host);
    }

    // The staged path's copies: every upload and download of the batched (not synchronous)
    // graphs, laid out per graph from the start of staging at the alignment, as the core lays
    // out one call; caller memory holds each descriptor at its offset of call_src or call_dst.
    void layout_copies(const Profile & p) {
        for (size_t gi = 0; gi < p.graphs.size(); ++gi) {
            const GraphSpec & g = p.graphs[gi];
            if (g.synchronous) continue;
            size_t at = 0;
            // One direction's descriptors: staged from `at` on, caller memory at `caller`.
            auto lay = [&](const std::vector<size_t> & sizes, bool upload, const std::vector<size_t> & caller,
                           size_t & bytes, size_t & descriptors) {
                for (size_t i = 0; i < sizes.size(); ++i) {
                    copies.push_back({upload, at, caller[i], sizes[i]});
                    at = align_up(at + sizes[i], alignment);
                    bytes += sizes[i];
                    ++descriptors;
                }
            };
            lay(g.uploads, true, call_up_at[gi], memcpy_up, memcpy_descriptors_up);
            lay(g.downloads, false, call_down_at[gi], memcpy_down, memcpy_descriptors_down);
            if (at > align_up(p.upload_bytes, alignment) + align_up(p.download_bytes, alignment)) {
                die(1, "probes: graph " + g.name + " does not fit the staging copy's buffer");
            }
        }
    }

    // Every descriptor of one direction (all graphs, the synchronous one too) at its own aligned
    // offset; returns the direction's area in bytes.
    size_t layout_calls(const Profile & p, bool upload) {
        std::vector<std::vector<size_t>> & at = upload ? call_up_at : call_down_at;
        size_t off = 0;
        for (const GraphSpec & g : p.graphs) {
            at.emplace_back();
            for (size_t b : upload ? g.uploads : g.downloads) {
                at.back().push_back(off);
                off += align_up(b, alignment);
            }
        }
        return std::max(off, align_up(upload ? p.upload_bytes : p.download_bytes, alignment));
    }

    // Where graph g's upload i reads from: its own slot, or with `fed` (the modes' calls) the
    // download slot of the earlier graph that feeds it, as the replay uploads a dependent input
    // straight from that graph's kept output slot.
    const uint8_t * upload_source(size_t g, size_t i, bool fed) const {
        const Dep * x = fed ? profile.graphs[g].feeder(i) : nullptr;
        return x ? mem + down_offset + call_down_at[x->graph][x->download] : mem + call_up_at[g][i];
    }

    // Graph g's descriptors as async copies (uploads, then downloads).
    // Graph g's uploads, then its downloads on `down_backend` (the same backend unless given).
    void enqueue_copies(size_t g, bool fed = false, ggml_backend_t down_backend = nullptr) {
        const GraphSpec & sp = profile.graphs[g];
        for (size_t i = 0; i < sp.uploads.size(); ++i) {
            ggml_backend_tensor_set_async(backend, up, upload_source(g, i, fed), call_up_at[g][i], sp.uploads[i]);
        }
        if (down_backend != nullptr) {  // the downloads after the uploads: an event between the two
            ggml_backend_event_record(upload_events[g], backend);
            ggml_backend_event_wait(down_backend, upload_events[g]);
        } else {
            down_backend = backend;
        }
        for (size_t j = 0; j < sp.downloads.size(); ++j) {
            ggml_backend_tensor_get_async(down_backend, down, mem + down_offset + call_down_at[g][j], call_down_at[g][j],
                                          sp.downloads[j]);
        }
    }

    // The profile's descriptors, each its own async copy, then one synchronize: the floor's
    // bytes in the profile's pieces.
    double copies_sample() {
        const double t0 = now_ms();
        for (size_t g : profile.order) enqueue_copies(g);
        ggml_backend_synchronize(backend);
        return now_ms() - t0;
    }

    // The synchronous graph's blocking copies (the core's synchronous path).
    void blocking_copies(size_t g) {
        const GraphSpec & sp = profile.graphs[g];
        for (size_t i = 0; i < sp.uploads.size(); ++i) {
            ggml_backend_tensor_set(up, upload_source(g, i, true), call_up_at[g][i], sp.uploads[i]);
        }
        for (size_t j = 0; j < sp.downloads.size(); ++j) {
            ggml_backend_tensor_get(down, mem + down_offset + call_down_at[g][j], call_down_at[g][j], sp.downloads[j]);
        }
    }

    // The replay's producer and consumer on the host memory of the calls (replay.cpp): graph
    // g's independent inputs written into their slots before its copies, every download read
    // out after the wait that completed it, each from or into its own caller memory. Their
    // time is excluded from the sample, as the zerocopy and queued rows exclude it; what they
    // do to the copies (the host buffer's cache lines are the CPU's when the copies read or
    // write them) is not.
    struct Touch {
        bool on;
        double excluded_ms = 0;
    };

    void write_inputs(size_t g, Touch & t) {
        if (!t.on) return;
        const GraphSpec & sp = profile.graphs[g];
        const double t0 = now_ms();
        for (size_t i = 0; i < sp.uploads.size(); ++i) {
            if (sp.feeder(i) == nullptr) std::memcpy(mem + call_up_at[g][i], call_src.data() + call_up_at[g][i], sp.uploads[i]);
        }
        t.excluded_ms += now_ms() - t0;
    }

    void read_outputs(size_t g, Touch & t) {
        if (!t.on) return;
        const GraphSpec & sp = profile.graphs[g];
        const double t0 = now_ms();
        for (size_t j = 0; j < sp.downloads.size(); ++j) {
            std::memcpy(call_dst.data() + call_down_at[g][j], mem + down_offset + call_down_at[g][j], sp.downloads[j]);
        }
        t.excluded_ms += now_ms() - t0;
    }

    // zerocopy's GGML calls: per graph its copies and a synchronize.
    double zerocopy_sample(bool touch) {
        Touch t{touch};
        const double t0 = now_ms();
        for (size_t g : profile.order) {
            write_inputs(g, t);
            if (profile.graphs[g].synchronous) {
                blocking_copies(g);
            } else {
                enqueue_copies(g, true);
                ggml_backend_synchronize(backend);
            }
            read_outputs(g, t);
        }
        return now_ms() - t0 - t.excluded_ms;
    }

    // queued's GGML calls as the replay (replay.cpp, run_queued) and the core (execute.cpp,
    // calls.cpp, session.cpp) make them. Per graph: where the replay waits (before a graph that
    // takes a download of a graph not yet waited, before the synchronous graph, at the end) the
    // newest such graph is waited: a synchronize when no newer graph is in flight, else its
    // event's synchronize (newer graphs stay in flight); the completed graphs' events are
    // synchronized once more when the next graph's slots are reserved (free_call, which lets
    // GGML recycle them); an event wait on the newest graph in flight before the uploads; the
    // copies; an event record. The synchronous graph's copies are blocking. No ring waits: the
    // profile keeps at most 13.6 MiB in flight.
    // `policy`: Core as above; NoUploadWait without the event wait before the uploads (what the
    // core does on a backend of one in-order queue, docs/contract.md A6); Synchronize with no
    // event at all: every wait a synchronize (completing the newer graphs too), no record;
    // TwoBackends as NoUploadWait, with each graph's downloads on backend2 after an event wait on
    // its uploads, its completion event recorded there (a wait on the newest graph synchronizes
    // backend2, whose downloads waited for every upload before them).
    // `order` (position -> graph, a topological order of the profile's dependencies that keeps
    // each synchronous graph after every graph before it) is the order the graphs are issued in;
    // the waits are the replay's, by position.
    enum class Policy { Core, NoUploadWait, Synchronize, TwoBackends };
    double queued_sample(bool touch, Policy policy, const std::vector<size_t> & order) {
        Touch t{touch};
        const bool events = policy != Policy::Synchronize;
        const bool two = policy == Policy::TwoBackends;
        ggml_backend_t completes = two ? backend2 : backend;  // where the completion events are recorded
        const size_t ng = profile.graphs.size();
        const std::vector<size_t> pos = positions(order);
        WaitSchedule waited;            // by position
        std::vector<size_t> in_flight;  // positions recorded, completion not known, in submission order
        std::vector<size_t> to_free;    // complete, their event not synchronized since
        std::vector<bool> enqueued(ng, false);
        auto wait_until = [&](size_t end) {
            const auto [from, last] = waited.until(end, [&](size_t q) { return enqueued[q]; });
            if (last == from) return;
            const size_t k = last - 1;
            auto done = in_flight.begin();
            const bool flying = std::find(in_flight.begin(), in_flight.end(), k) != in_flight.end();
            if (flying && (in_flight.back() == k || !events)) {
                ggml_backend_synchronize(completes);
                done = in_flight.end();
            } else if (flying) {
                ggml_backend_event_synchronize(call_events[order[k]]);
                done = std::upper_bound(in_flight.begin(), in_flight.end(), k);
            }
            to_free.insert(to_free.end(), in_flight.begin(), done);
            in_flight.erase(in_flight.begin(), done);
            for (size_t q = from; q < last; ++q) {
                if (enqueued[q]) read_outputs(order[q], t);
            }
        };
        const double t0 = now_ms();
        for (size_t k = 0; k < ng; ++k) {
            const size_t g = order[k];
            const GraphSpec & sp = profile.graphs[g];
            wait_until(wait_end(sp, k, pos));
            if (events) {
                for (size_t q : to_free) ggml_backend_event_synchronize(call_events[order[q]]);
            }
            to_free.clear();
            write_inputs(g, t);
            if (sp.synchronous) {
                if (!in_flight.empty()) ggml_backend_synchronize(completes);  // the synchronous path completes queued work
                to_free.insert(to_free.end(), in_flight.begin(), in_flight.end());
                in_flight.clear();
                blocking_copies(g);
                read_outputs(g, t);
                waited.next = k + 1;
                continue;
            }
            if (policy == Policy::Core && !in_flight.empty() && !sp.uploads.empty()) {
                ggml_backend_event_wait(backend, call_events[order[in_flight.back()]]);
            }
            enqueue_copies(g, true, two ? backend2 : nullptr);
            if (events) ggml_backend_event_record(call_events[g], completes);
            in_flight.push_back(k);
            enqueued[k] = true;
        }
        wait_until(ng);
        if (events) {
            for (size_t q : to_free) ggml_backend_event_synchronize(call_events[order[q]]);
        }
        return now_ms() - t0 - t.excluded_ms;
    }

    // Host pointers for the round trip's 4 bytes: pinned when there is a host buffer type.
    void * rt_host() { return mem != nullptr ? static_cast<void *>(mem + rt_offset) : &rt_host_heap; }

    double floor_sample(int kind) {
        const double t0 = now_ms();
        if (kind != 1) ggml_backend_tensor_set_async(backend, up, mem, 0, up_bytes);
        if (kind != 0) ggml_backend_tensor_get_async(backend, down, mem + down_offset, 0, down_bytes);
        ggml_backend_synchronize(backend);
        return now_ms() - t0;
    }

    // The floor's two directions at once: the upload on `backend`, the download on `backend2`,
    // each followed by an event record (which submits it on Vulkan), both submitted before
    // either is waited for.
    double duplex_sample() {
        const double t0 = now_ms();
        ggml_backend_tensor_set_async(backend, up, mem, 0, up_bytes);
        ggml_backend_event_record(duplex_up, backend);
        ggml_backend_tensor_get_async(backend2, down, mem + down_offset, 0, down_bytes);
        ggml_backend_event_record(duplex_down, backend2);
        ggml_backend_event_synchronize(duplex_up);
        ggml_backend_event_synchronize(duplex_down);
        return now_ms() - t0;
    }

    // Bytes [begin, end) of the concatenation of every staged copy, copied.
    void copy_part(size_t begin, size_t end) {
        size_t at = 0;
        for (size_t i = 0; i < copies.size() && at < end; at += copies[i].size, ++i) {
            const Copy & c = copies[i];
            const size_t lo = std::max(begin, at), hi = std::min(end, at + c.size);
            if (lo >= hi) continue;
            if (c.upload) {
                std::memcpy(staging + c.staging_offset + (lo - at), call_src.data() + c.caller_offset + (lo - at), hi - lo);
            } else {
                std::memcpy(call_dst.data() + c.caller_offset + (lo - at), staging + c.staging_offset + (lo - at), hi - lo);
            }
        }
    }

    // One image's staged copies on memcpy_threads threads, each a contiguous part of the bytes
    // (the best split the core's copy threads can reach, docs/contract.md rule 2 "Copy
    // threads"), timed from the moment every thread is running to the end of the last part.
    double memcpy_sample() {
        const size_t bytes = memcpy_up + memcpy_down;
        const unsigned n = memcpy_threads;
        std::atomic<unsigned> ready{0}, done{0};
        std::atomic<bool> go{false};
        std::vector<std::thread> workers;
        for (unsigned k = 1; k < n; ++k) {
            workers.emplace_back([&, k] {
                ready.fetch_add(1);
                while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
                copy_part(bytes / n * k, k + 1 == n ? bytes : bytes / n * (k + 1));
                done.fetch_add(1, std::memory_order_release);
            });
        }
        while (ready.load() != n - 1) std::this_thread::yield();
        const double t0 = now_ms();
        go.store(true, std::memory_order_release);
        copy_part(0, n == 1 ? bytes : bytes / n);
        while (done.load(std::memory_order_acquire) != n - 1) std::this_thread::yield();
        const double ms = now_ms() - t0;
        for (std::thread & w : workers) w.join();
        return ms;
    }

    void compute() {
        if (ggml_backend_graph_compute_async(backend, graph) != GGML_STATUS_SUCCESS) {
            die(2, "probes: the one-node graph failed to compute");
        }
    }

    // kind 0: a 4-byte download, 1: a one-node graph; then a synchronize, or with `on_event` an
    // event record + event synchronize.
    double round_trip(int kind, bool on_event) {
        const double t0 = now_ms();
        if (kind == 0) {
            ggml_backend_tensor_get_async(backend, rt_out, rt_host(), 0, kRoundTripBytes);
        } else {
            compute();
        }
        if (on_event) {
            ggml_backend_event_record(event, backend);
            ggml_backend_event_synchronize(event);
        } else {
            ggml_backend_synchronize(backend);
        }
        return now_ms() - t0;
    }

    double back_to_back() {
        const double t0 = now_ms();
        for (int i = 0; i < kBackToBackGraphs; ++i) compute();
        ggml_backend_synchronize(backend);
        return now_ms() - t0;
    }

    void round(int image, bool timed) {
        const int block = timed ? image * n_blocks / images : 0;
        auto keep = [&](Series & s, double v) {
            if (timed) s.add(block, v);
        };
        if (host != nullptr) {
            Series * kinds[4] = {&f_up, &f_down, &f_both, &f_duplex};
            const int n_kinds = backend2 != nullptr && duplex_up != nullptr && duplex_down != nullptr ? 4 : 3;
            for (int k = 0; k < n_kinds; ++k) {
                const int kind = (k + image) % n_kinds;  // rotates: each kind goes first equally often
                keep(*kinds[kind], kind == 3 ? duplex_sample() : floor_sample(kind));
            }
        }
        keep(cp, memcpy_sample());
        for (int i = 0; i < rt_per_round; ++i) {
            const bool graph_first = (i + image) % 2 != 0;
            for (int k = 0; k < 2; ++k) {
                const int kind = graph_first ? 1 - k : k;
                keep(kind == 0 ? rt_down : rt_graph, round_trip(kind, false));
                if (event != nullptr) keep(kind == 0 ? rt_down_event : rt_graph_event, round_trip(kind, true));
            }
        }
        keep(b2b, back_to_back());
        if (calls) {
            keep(c_copies, copies_sample());
            for (int k = 0; k < 2; ++k) {
                const bool touch = (k + image) % 2 == 0;  // touched and cold go first equally often
                keep(touch ? c_zerocopy : c_zerocopy_cold, zerocopy_sample(touch));
            }
            for (int k = 0; k < 2 && !call_events.empty(); ++k) {
                const bool touch = (k + image) % 2 == 0;
                keep(touch ? c_queued : c_queued_cold, queued_sample(touch, Policy::Core, profile.order));
            }
            if (!call_events.empty()) {  // the two other policies, touched, in alternating order
                for (int k = 0; k < 2; ++k) {
                    if ((k + image) % 2 == 0) {
                        keep(c_queued_no_upload_wait, queued_sample(true, Policy::NoUploadWait, profile.order));
                    } else {
                        keep(c_queued_synchronize, queued_sample(true, Policy::Synchronize, profile.order));
                    }
                }
                if (!upload_events.empty()) {
                    keep(c_queued_two_backends, queued_sample(true, Policy::TwoBackends, profile.order));
                }
                if (profile.order != levels_order) keep(c_queued_levels, queued_sample(true, Policy::Core, levels_order));
            }
        }
    }
};

Probes::Probes(ggml_backend_t backend, ggml_backend_dev_t dev, const Profile & profile, size_t staging_alignment,
               unsigned copy_threads, int images, bool calls)
    : s_(std::make_unique<State>(backend, dev, profile, staging_alignment, images, calls)) {
    s_->memcpy_threads = std::max(1u, copy_threads);
}
Probes::~Probes() = default;

void Probes::round(int image, bool timed) { s_->round(image, timed); }

json Probes::floor() const {
    const State & s = *s_;
    if (s.host == nullptr) return nullptr;
    const double up = s.f_up.best(), down = s.f_down.best(), both = s.f_both.best();
    return json{{"median_ms", both},
                {"how", "async"},
                {"upload_bytes", s.up_bytes},
                {"download_bytes", s.down_bytes},
                {"alignment", s.alignment},
                {"upload_offset", 0},
                {"download_offset", s.down_offset},
                {"pinned", s.pinned},
                {"blocks", s.n_blocks},
                {"both", s.f_both.to_json()},
                {"upload", s.f_up.to_json()},
                {"download", s.f_down.to_json()},
                {"duplex", s.f_duplex.empty() ? json(nullptr) : s.f_duplex.to_json()},
                {"gb_per_s", {{"upload", gb_per_s(s.up_bytes, up)},
                              {"download", gb_per_s(s.down_bytes, down)},
                              {"both", gb_per_s(s.up_bytes + s.down_bytes, both)}}},
                {"what", "the profile's bytes from the host buffer type's memory, offsets aligned to the staging "
                         "alignment (at least 64): upload alone (tensor_set_async + synchronize), download alone "
                         "(tensor_get_async + synchronize) and both (set_async + get_async + one synchronize), one "
                         "sample of each per round after every image; each the smallest of its block medians; the "
                         "floor (median_ms) is both's. duplex (the floor of rows whose session used duplex, where it is "
                         "the smaller: docs/benchmark.md): the upload on the "
                         "backend while the download runs on a second backend of the device, each submitted by an "
                         "event record before either event is synchronized"}};
}

json Probes::round_trips() const {
    const State & s = *s_;
    json out = {{"download", s.rt_down.to_json()},
                {"graph", s.rt_graph.to_json()},
                {"download_bytes", kRoundTripBytes},
                {"graph_nodes", ggml_graph_n_nodes(s.graph)},
                {"samples_per_round", s.rt_per_round},
                {"back_to_back", s.b2b.to_json()},
                {"back_to_back_graphs", kBackToBackGraphs},
                {"what", "download: ggml_backend_tensor_get_async of 4 bytes into host memory + synchronize; graph: "
                         "ggml_backend_graph_compute_async of a one-node graph + synchronize; each the smallest of "
                         "its block medians (>= 50 samples per block). Diagnostics, never in a limit: *_event waits "
                         "with ggml_backend_event_record + event_synchronize instead of a synchronize; back_to_back "
                         "submits back_to_back_graphs one-node graphs, then one synchronize"}};
    if (!s.rt_down_event.empty()) {
        out["download_event"] = s.rt_down_event.to_json();
        out["graph_event"] = s.rt_graph_event.to_json();
    }
    return out;
}

json Probes::staging_memcpy() const {
    const State & s = *s_;
    return json{{"median_ms", s.cp.best()},
                {"copy", s.cp.to_json()},
                {"upload_bytes", s.memcpy_up},
                {"download_bytes", s.memcpy_down},
                {"upload_descriptors", s.memcpy_descriptors_up},
                {"download_descriptors", s.memcpy_descriptors_down},
                {"into_host_buffer", s.host != nullptr},
                {"threads", s.memcpy_threads},
                {"gb_per_s", gb_per_s(s.memcpy_up + s.memcpy_down, s.cp.best())},
                {"what", "std::memcpy of every upload and download of the batched graphs between caller memory and "
                         "staging (the host buffer type's memory), descriptor by descriptor at the alignment, the "
                         "bytes split into one contiguous part per copy thread of the 'on' session: the staged "
                         "path's copies at plain memcpy speed; one sample per round, the smallest block median"}};
}

json Probes::ggml_calls() const {
    const State & s = *s_;
    if (!s.calls) return nullptr;
    const bool events = !s.call_events.empty();
    return json{{"copies", s.c_copies.to_json()},
                {"zerocopy", s.c_zerocopy.to_json()},
                {"zerocopy_cold", s.c_zerocopy_cold.to_json()},
                {"queued", events ? s.c_queued.to_json() : json(nullptr)},
                {"queued_cold", events ? s.c_queued_cold.to_json() : json(nullptr)},
                {"queued_no_upload_wait", events ? s.c_queued_no_upload_wait.to_json() : json(nullptr)},
                {"queued_synchronize", events ? s.c_queued_synchronize.to_json() : json(nullptr)},
                {"queued_two_backends", !s.upload_events.empty() ? s.c_queued_two_backends.to_json() : json(nullptr)},
                {"queued_levels", events && s.profile.order != s.levels_order ? s.c_queued_levels.to_json() : json(nullptr)},
                {"copies_per_image", s.profile.n_uploads + s.profile.n_downloads},
                {"what", "the modes' GGML calls without the core, on the floor's host buffer and device tensors, "
                         "every descriptor at its own aligned offset, one sample of each per round (touched and "
                         "cold in alternating order); best_median_ms is the smallest block median, median_ms the "
                         "median of all samples. copies: every descriptor of the profile as its own async copy, "
                         "then one synchronize. zerocopy: per graph its copies and a synchronize. queued: the "
                         "replay's waits and the core's calls for queued zero-copy calls (a synchronize for the "
                         "newest graph in flight, else its event's synchronize; an event wait on the newest graph "
                         "in flight before the uploads; the copies; an event record; each completed event "
                         "synchronized once more when the next graph's slots are reserved). The synchronous "
                         "graph's copies are blocking, and a dependent upload reads the download slot of the "
                         "graph that feeds it. zerocopy and queued write each graph's independent inputs into "
                         "their host memory before its copies and read its downloads after its wait, untimed, as "
                         "the replay's producer and consumer do; zerocopy_cold and queued_cold do not touch the "
                         "host memory. queued_no_upload_wait: queued without the event wait before the uploads "
                         "(the core's calls on a backend of one in-order queue, CUDA); queued_synchronize: queued with "
                         "no event, every wait a synchronize; queued_two_backends: queued_no_upload_wait with each "
                         "graph's downloads on a second backend of the device after an event wait on its uploads, "
                         "its completion event recorded there; queued_levels: queued with the graphs issued in "
                         "dependency-level order (between synchronous graphs by level, then profile order), its "
                         "waits by that order, null when the run's own order is that one (--order levels: every "
                         "probe above runs in the run's order). Diagnostics, never in a limit"}};
}

}  // namespace sam3d_bench
