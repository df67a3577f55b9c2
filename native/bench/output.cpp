// The checks over one run's measurements and the output document (see output.h).
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "output.h"

namespace sam3d_bench {

const char * const kOutputSchema = "sam3d-bench-driver/4";

namespace {

double row_median(const ModeRun & r) {
    std::vector<double> v;
    for (const auto & x : r.samples) v.push_back(x["wall_ms"].get<double>());
    return median(v);
}

std::string str(const char * s) { return s ? s : ""; }

struct Checks {
    std::vector<std::string> problems;
    bool identical = true;      // every mode's outputs equal off's, image by image
    bool deterministic = true;  // the same data set gives the same outputs every time
    bool inputs_matter = true;  // the two data sets give different outputs (or nothing computes)
};

// Counts the same every timed image, outputs identical to off, deterministic per data set.
Checks check(const Measured & m) {
    const Options & o = *m.options;
    const ModeRun & off = m.runs[kOff];
    Checks c;
    for (Mode mode : o.modes) {
        const ModeRun & r = m.runs[mode];
        for (size_t i = 1; i < r.per_image.size(); ++i) {
            // The GGML calls from the second timed image on: an event's first use in a run with
            // no warm-up skips the synchronize that recycles it (docs/contract.md, rule 2).
            json now = count_json(r.per_image[i]), first = count_json(r.per_image.front());
            if (i >= 2) {
                now.update(ggml_calls_json(r.per_image[i]));
                first.update(ggml_calls_json(r.per_image[1]));
            }
            if (now != first) {
                std::string which;
                for (auto it = now.begin(); it != now.end(); ++it) {
                    if (it.value() != first[it.key()]) which += (which.empty() ? "" : ", ") + it.key();
                }
                c.problems.push_back(std::string("batching ") + row_name(mode) + ": counters of timed image " +
                                     std::to_string(i) + " differ from image " + (i >= 2 ? "1" : "0") + " (" + which + ")");
                break;
            }
        }
    }
    for (Mode mode : o.modes) {
        if (mode != kOff && m.runs[mode].shas != off.shas) {
            c.identical = false;
            c.problems.push_back(std::string("outputs differ between batching ") + row_name(mode) + " and off");
        }
    }
    for (size_t i = 2; i < off.shas.size(); ++i) {
        if (off.shas[i] != off.shas[i - 2]) c.deterministic = false;
    }
    // Transfer-only: nothing is computed, outputs are the fixed pattern whatever the inputs.
    c.inputs_matter = o.transfer_only || off.shas.size() < 2 || off.shas[0] != off.shas[1];
    if (!c.deterministic) c.problems.push_back("outputs of the same input data set differ between images");
    if (!c.inputs_matter) c.problems.push_back("the two input data sets give the same outputs");
    return c;
}

// Per mode: the session's facts and the counters that are not per-image schema fields.
json mode_extra(const Measured & m) {
    json out = json::object();
    for (Mode mode : m.options->modes) {
        const ModeRun & r = m.runs[mode];
        const sam3d_counters & c = r.per_image.front();
        json x = ggml_calls_json(r.per_image.back());  // the steady state (check(): the same from image 1 on)
        x.update({{"calls_per_image", c.calls},
                  {"failed_calls", c.failed_calls},
                  {"rejected_calls", c.rejected_calls},
                  {"staging_bytes", c.staging_bytes},
                  {"staging_allocations_total", snapshot(r.session).staging_allocations},
                  {"warmup_wall_ms", r.warm_ms},
                  {"session_batching", sam3d_session_batching(r.session)},
                  {"session_duplex", sam3d_session_duplex(r.session)},
                  {"static_fallback", sam3d_fallback_name(sam3d_session_static_fallback(r.session))},
                  {"staging_alignment", sam3d_session_staging_alignment(r.session)}});
        if (!r.excluded_write_ms.empty()) {
            // Host time the row's wall time leaves out, per timed image: the producer's writes of
            // independent inputs into slots and the consumer's reads of outputs out of them.
            x["excluded_ms"] = {{"slot_writes", r.excluded_write_ms}, {"slot_reads", r.excluded_read_ms}};
        }
        if (mode == kQueued) {
            // Wait points per image (the same every image: the replay is deterministic).
            x["dependency_wait_points_per_image"] = m.dependency_waits;
            x["ring_wait_points_per_image"] = m.ring_waits;
            x["end_wait_points_per_image"] = m.end_waits;
        }
        out[row_name(mode)] = x;
    }
    return out;
}

json document(const Measured & m, const Checks & c) {
    const Options & o = *m.options;
    json rows = json::array();
    for (Mode mode : o.modes) {
        const ModeRun & r = m.runs[mode];
        rows.push_back(json{{"batching", row_name(mode)}, {"samples", r.samples}, {"counters", count_json(r.per_image.front())}});
    }
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    const ggml_backend_dev_props & p = m.props;
    json doc = {
        {"schema", kOutputSchema},
        {"tool", "sam3d_bench"},
        {"backend", backend_name(o.backend)},
        {"device", str(p.description)},
        {"caps", {{"async", p.caps.async},
                  {"host_buffer", p.caps.host_buffer},
                  {"buffer_from_host_ptr", p.caps.buffer_from_host_ptr},
                  {"events", p.caps.events}}},
        {"protocol", {{"warmups", o.warmups}, {"images", o.images}, {"interleaved", true}}},
        {"profile", {{"path", m.profile->path}, {"name", m.profile->name}, {"version", m.profile->version},
                     {"sha256", m.profile->sha256}}},
        {"rows", rows},
        {"extra",
         {{"driver_overhead_ms_per_image", m.overhead.at(std::string("trivial_graphs_") + row_name(kOff)).at("median_ms")},
          {"driver_overhead", m.overhead},
          {"peak_rss_bytes", static_cast<uint64_t>(ru.ru_maxrss) * 1024u},
          {"transfer_floor", m.floor},
          {"round_trips", m.round_trips},
          {"staging_memcpy", m.staging_memcpy},
          {"ggml_calls", m.ggml_calls},
          {"device_tensor_bytes", m.device_bytes},
          {"ggml_device", {{"name", str(p.name)},
                           {"description", str(p.description)},
                           {"backend", ggml_backend_name(m.backend)},
                           {"memory_total", p.memory_total},
                           {"device_id", str(p.device_id)}}},
          {"cpu_threads", o.backend == "cpu" ? o.threads : 0},
          {"modes", mode_extra(m)},
          {"mode_table", mode_table_json(o.modes).at("modes")},
          {"order", m.order},
          {"input_data_set", "image k (warm-ups first) uses data set k mod 2"},
          {"outputs_identical_on_off", c.identical},
          {"outputs_deterministic", c.deterministic},
          {"inputs_change_outputs", c.inputs_matter},
          {"problems", c.problems}}},
    };
    if (o.transfer_only) doc["extra"]["transfer_only"] = true;
    doc["extra"]["staging_piece_bytes"] = o.staging_piece_bytes;
    doc["extra"]["layout"] = layout_name(o.layout);
    doc["extra"]["graph_order"] = order_name(o.order);
    doc["extra"]["duplex"] = duplex_name(o.duplex);  // as asked; modes.<row>.session_duplex: what each session got
    json issued = json::array();  // the graphs' names in the order they were issued
    for (size_t g : m.profile->order) issued.push_back(m.profile->graphs[g].name);
    doc["extra"]["issue_order"] = issued;
    doc["extra"]["staging_copy_threads"] = sam3d_session_copy_threads(m.runs[kOn].session);
    return doc;
}

void print_summary(const Measured & m, const Checks & c) {
    for (Mode mode : m.options->modes) {
        const double med = row_median(m.runs[mode]);
        std::fprintf(stderr, "sam3d_bench: %-8s median %9.3f ms", row_name(mode), med);
        if (m.floor.is_object()) {
            std::fprintf(stderr, "  (%.2fx the transfer floor)", med / m.floor.at("median_ms").get<double>());
        }
        std::fputc('\n', stderr);
    }
    if (m.floor.is_object()) {
        const json & f = m.floor;
        std::fprintf(stderr, "sam3d_bench: floor %.3f ms (upload %.3f ms = %.1f GB/s, download %.3f ms = %.1f GB/s, alone)\n",
                     f.at("median_ms").get<double>(), f.at("upload").at("best_median_ms").get<double>(),
                     f.at("gb_per_s").at("upload").get<double>(), f.at("download").at("best_median_ms").get<double>(),
                     f.at("gb_per_s").at("download").get<double>());
    }
    std::fprintf(stderr, "sam3d_bench: round trips: download %.4f ms, graph %.4f ms; staging memcpy %.3f ms\n",
                 m.round_trips.at("download").at("best_median_ms").get<double>(),
                 m.round_trips.at("graph").at("best_median_ms").get<double>(),
                 m.staging_memcpy.at("median_ms").get<double>());
    std::fprintf(stderr, "sam3d_bench: outputs %s in every mode%s\n", c.identical ? "identical" : "DIFFERENT",
                 m.options->transfer_only ? " (transfer-only)" : "");
    for (const std::string & pr : c.problems) std::fprintf(stderr, "sam3d_bench: CHECK FAILED: %s\n", pr.c_str());
}

}  // namespace

int write_output(const Measured & m) {
    const Checks c = check(m);
    const std::string text = document(m, c).dump(1) + "\n";
    const std::string & out = m.options->out;
    if (out.empty()) {
        std::fputs(text.c_str(), stdout);
    } else {
        std::ofstream f(out, std::ios::binary);
        if (!(f << text)) die(1, "cannot write " + out);
    }
    print_summary(m, c);
    return c.problems.empty() ? 0 : 3;
}

}  // namespace sam3d_bench
