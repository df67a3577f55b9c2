// What sam3d_bench measures besides the replay itself: the clock, the core's counters per
// image and the driver's own overhead (the limit probes: probes.cpp). Milliseconds, bytes.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "bench.h"

namespace sam3d_bench {

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

sam3d_counters snapshot(sam3d_session * s) {
    sam3d_counters c{};
    c.struct_size = sizeof c;
    sam3d_session_counters(s, &c);
    return c;
}

sam3d_counters delta(const sam3d_counters & a, const sam3d_counters & b) {
    sam3d_counters d{};
    d.calls = b.calls - a.calls;
    d.rejected_calls = b.rejected_calls - a.rejected_calls;
    d.failed_calls = b.failed_calls - a.failed_calls;
    d.async_uploads = b.async_uploads - a.async_uploads;
    d.sync_uploads = b.sync_uploads - a.sync_uploads;
    d.async_downloads = b.async_downloads - a.async_downloads;
    d.sync_downloads = b.sync_downloads - a.sync_downloads;
    d.bytes_uploaded = b.bytes_uploaded - a.bytes_uploaded;
    d.bytes_downloaded = b.bytes_downloaded - a.bytes_downloaded;
    d.pinned_batches = b.pinned_batches - a.pinned_batches;
    for (int k = 0; k < SAM3D_FALLBACK_COUNT; ++k) d.fallbacks[k] = b.fallbacks[k] - a.fallbacks[k];
    d.enqueue_ns = b.enqueue_ns - a.enqueue_ns;
    d.synchronize_ns = b.synchronize_ns - a.synchronize_ns;
    d.copy_ns = b.copy_ns - a.copy_ns;
    d.sync_path_ns = b.sync_path_ns - a.sync_path_ns;
    d.staging_bytes = b.staging_bytes;
    d.staging_allocations = b.staging_allocations - a.staging_allocations;
    d.upload_copies = b.upload_copies - a.upload_copies;
    d.download_copies = b.download_copies - a.download_copies;
    d.synchronizes = b.synchronizes - a.synchronizes;
    d.event_records = b.event_records - a.event_records;
    d.event_waits = b.event_waits - a.event_waits;
    d.event_synchronizes = b.event_synchronizes - a.event_synchronizes;
    d.duplex_calls = b.duplex_calls - a.duplex_calls;
    d.duplex_event_records = b.duplex_event_records - a.duplex_event_records;
    d.duplex_event_waits = b.duplex_event_waits - a.duplex_event_waits;
    return d;
}

// The per-image counts of the result schema (times are per sample).
json ggml_calls_json(const sam3d_counters & c) {
    return json{{"ggml_copies_per_image", c.upload_copies + c.download_copies},
                {"synchronizes_per_image", c.synchronizes},
                {"event_records_per_image", c.event_records},
                {"event_waits_per_image", c.event_waits},
                {"event_synchronizes_per_image", c.event_synchronizes},
                {"duplex_calls_per_image", c.duplex_calls},
                {"duplex_event_records_per_image", c.duplex_event_records},
                {"duplex_event_waits_per_image", c.duplex_event_waits}};
}

json count_json(const sam3d_counters & c) {
    json f = json::object();
    for (int k = 0; k < SAM3D_FALLBACK_COUNT; ++k) {
        f[sam3d_fallback_name(static_cast<sam3d_fallback>(k))] = c.fallbacks[k];
    }
    return json{{"async_uploads", c.async_uploads},     {"sync_uploads", c.sync_uploads},
                {"async_downloads", c.async_downloads}, {"sync_downloads", c.sync_downloads},
                {"bytes_uploaded", c.bytes_uploaded},   {"bytes_downloaded", c.bytes_downloaded},
                {"pinned_batches", c.pinned_batches},   {"fallbacks", f}};
}

double ms(uint64_t ns) { return static_cast<double>(ns) / 1e6; }

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
// Driver overhead: the same replay loop (same call count, same sessions) with empty transfers
// and a one-element graph per call, and with no graph at all; per image ms, keyed
// "trivial_graphs_<row>" and "no_graphs_<row>" for the "on" and "off" sessions.
json measure_overhead(ggml_backend_t backend, sam3d_session * on, sam3d_session * off, size_t n_graphs, int warmups,
                      int images) {
    ggml_init_params ip = {ggml_tensor_overhead() * n_graphs * 2 + ggml_graph_overhead_custom(8, false) * n_graphs + 4096,
                           nullptr, true};
    ggml_context * ctx = ggml_init(ip);
    if (ctx == nullptr) die(1, "ggml_init for the overhead graphs failed");
    std::vector<ggml_cgraph *> gs;
    std::vector<ggml_tensor *> ins;
    for (size_t g = 0; g < n_graphs; ++g) {
        ggml_tensor * a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1);
        ggml_set_input(a);
        ggml_tensor * out = ggml_scale(ctx, a, 1.0f);
        ggml_set_output(out);
        ggml_cgraph * gr = ggml_new_graph_custom(ctx, 8, false);
        ggml_build_forward_expand(gr, out);
        gs.push_back(gr);
        ins.push_back(a);
    }
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    if (buf == nullptr) die(1, "allocating the overhead graphs failed");
    const float one = 1.0f;
    for (ggml_tensor * a : ins) ggml_backend_tensor_set(a, &one, 0, sizeof one);
    json out = json::object();
    const std::pair<Mode, sam3d_session *> sessions[] = {{kOn, on}, {kOff, off}};
    for (const auto & [mode, session] : sessions) {
        for (int with_graph = 1; with_graph >= 0; --with_graph) {
            std::vector<double> samples;
            for (int i = 0; i < warmups + images; ++i) {
                const double t0 = now_ms();
                for (size_t g = 0; g < n_graphs; ++g) {
                    sam3d_call c{nullptr, 0, with_graph ? gs[g] : nullptr, nullptr, 0, false};
                    if (sam3d_session_run(session, &c) != SAM3D_OK) {
                        die(2, std::string("overhead replay: ") + sam3d_last_error());
                    }
                }
                if (i >= warmups) samples.push_back(now_ms() - t0);
            }
            const std::string key = std::string(with_graph ? "trivial_graphs" : "no_graphs") + "_" + row_name(mode);
            out[key] = json{{"median_ms", median(samples)}, {"samples_ms", samples}};
        }
    }
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    return out;
}

}  // namespace sam3d_bench
