// sam3d_bench's parts (one file each): the options and mode table (options.cpp), the profile
// (profile.cpp), the replay (replay.cpp), the measurements (measure.cpp), the limit probes
// (probes.cpp), the output document (output.cpp) and main (main.cpp). Transfers go only through the core's public C API
// (sam3d/transfer.h); GGML creates the backend, the tensors and the graphs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include "ggml-backend.h"
#include "ggml.h"
#include "sam3d/transfer.h"

namespace sam3d_bench {

using json = nlohmann::json;

constexpr size_t kElement = sizeof(float);  // the profile is F32 throughout

// A failure with the driver's exit status: 1 bad arguments, profile or setup; 2 a core call
// failed. (3, a check failed after the output was written, is main's.)
struct Error : std::runtime_error {
    int code;
    Error(int c, const std::string & m) : std::runtime_error(m), code(c) {}
};

[[noreturn]] void die(int code, const std::string & message);

// ---------------------------------------------------------------- modes (options.cpp)
// The replay modes, declared once: kModeTable below gives each its --modes name, its row name
// in the output ("batching"), whether every run needs it and what it does. `--list-modes`
// prints the table as JSON (schema kModesSchema); sam3d/running/driver.py reads it there.
enum Mode : int { kOn, kOff, kZeroCopy, kQueued, kModeCount };

struct ModeInfo {
    Mode mode;
    const char * name;  // the --modes name
    const char * row;   // the output row's "batching"
    bool required;      // every run has it (each row is compared with off, the others also with on)
    const char * description;
};

extern const ModeInfo kModeTable[kModeCount];
extern const char * const kModesSchema;
const char * row_name(Mode m);
json mode_table_json(const std::vector<Mode> & modes);

// ---------------------------------------------------------------- options (options.cpp)
// A value of a flag with a fixed set of choices: its name on the command line and in the
// output, and what it does. Each table lists them in enum order (the *_name functions index it).
// `--list-modes` prints the layouts, orders and duplex modes beside the modes, Options' default
// first (the GPU bundle's run.pyz runs and checks every layout and order, and takes its --duplex
// choices and default from there).
template <class T>
struct Choice {
    T value;
    const char * name;
    const char * description;
};
// The replay's device layout (--layout): the profile's (tensors in creation order, one GGML
// copy per descriptor), or per-graph I/O areas (docs/contract.md, rule 10; docs/benchmark.md).
enum class Layout { Scattered, Areas };
extern const Choice<Layout> kLayoutTable[2];
const char * layout_name(Layout l);
// The order the replay issues the graphs in (--order): the profile's, or by dependency level
// (level_order; docs/benchmark.md, "Issue order").
enum class Order { Profile, Levels };
extern const Choice<Order> kOrderTable[2];
const char * order_name(Order o);
// The batched sessions' duplex mode (--duplex; docs/contract.md, rule 11): sam3d_duplex's values.
extern const Choice<sam3d_duplex> kDuplexTable[3];
const char * duplex_name(sam3d_duplex d);

struct Options {
    std::string profile;
    std::string backend = "cpu";
    int device = 0;
    int warmups = 5;
    int images = 20;
    // CPU backend threads. 1 by default: the replay's compute is light, and GGML's CPU threads
    // spin at a barrier after every node, so with more threads a busy machine measures
    // scheduling (seconds per image on 2 loaded cores) instead of transfers.
    int threads = 1;
    std::string out;
    std::vector<Mode> modes;  // in table order; the required modes when --modes is not given
    bool transfer_only = false;
    bool list_modes = false;
    // The batched sessions' options.staging_piece_bytes (docs/contract.md, rule 2): the core's
    // default (SAM3D_STAGING_PIECE_BYTES) unless --staging-piece-bytes names one.
    size_t staging_piece_bytes = SAM3D_STAGING_PIECE_BYTES;
    // The batched sessions' options.staging_copy_threads (rule 2, "Copy threads"): 0, the core's
    // default (SAM3D_STAGING_COPY_THREADS, at most the processors), unless
    // --staging-copy-threads names a count.
    unsigned staging_copy_threads = 0;
    // The batched sessions' options.duplex: SAM3D_DUPLEX_OFF, the core's default (on the profile's
    // replay duplex made the CUDA queued rows slower, docs/benchmark.md "Events, waits, duplex and
    // the transfer queue"), unless --duplex names one.
    sam3d_duplex duplex = SAM3D_DUPLEX_OFF;
    Layout layout = Layout::Scattered;
    Order order = Order::Profile;
    // --uninitialized-areas: the areas are not cleared where they are created (Replay::place_areas),
    // so a download span's read of a gap reads bytes nothing wrote (compute-sanitizer initcheck's canary).
    bool uninitialized_areas = false;
};

// The result's name of a --backend value ("cpu" -> "CPU", "vulkan" -> "Vulkan", "cuda" -> "CUDA").
const char * backend_name(const std::string & backend);

Options parse_args(int argc, char ** argv);

// ---------------------------------------------------------------- the profile (profile.cpp)
struct Dep {
    size_t upload;
    size_t graph;
    size_t download;
};

struct GraphSpec {
    std::string name;
    std::string op;
    bool synchronous = false;
    std::vector<size_t> uploads;    // bytes
    std::vector<size_t> downloads;  // bytes
    std::vector<Dep> deps;

    // The dependency whose download feeds upload `upload`, or nullptr: the upload takes
    // independent input. The loader allows at most one per upload.
    const Dep * feeder(size_t upload) const {
        for (const Dep & x : deps) {
            if (x.upload == upload) return &x;
        }
        return nullptr;
    }
};

// Where queued calls wait (replay.cpp's run_queued; the probes' queued calls), by position in
// the issue order (`pos`: graph -> position, positions()). Before the graph at position k every
// graph before position wait_end(sp, k, pos) must be complete: the graphs whose downloads its
// uploads take, or every earlier graph before a synchronous one.
inline size_t wait_end(const GraphSpec & sp, size_t k, const std::vector<size_t> & pos) {
    size_t end = sp.synchronous ? k : 0;
    for (const Dep & x : sp.deps) end = end > pos[x.graph] + 1 ? end : pos[x.graph] + 1;
    return end;
}

// graph -> position of an issue order (position -> graph).
inline std::vector<size_t> positions(const std::vector<size_t> & order) {
    std::vector<size_t> pos(order.size());
    for (size_t k = 0; k < order.size(); ++k) pos[order[k]] = k;
    return pos;
}

struct WaitSchedule {
    size_t next = 0;  // the graphs before it have been waited

    // The graphs to wait so that those before `end` are complete: [next, last), where
    // last - 1 is the newest of them that was enqueued (`enqueued(q)`), and empty (first ==
    // second) when none was; then the graphs before `end` count as waited.
    template <class Enqueued>
    std::pair<size_t, size_t> until(size_t end, Enqueued enqueued) {
        size_t last = end;
        while (last > next && !enqueued(last - 1)) --last;
        const std::pair<size_t, size_t> range{next, last > next ? last : next};
        next = next > end ? next : end;
        return range;
    }
};

struct Profile {
    std::string path;
    std::string name;
    int version = 0;
    std::string sha256;
    std::vector<GraphSpec> graphs;
    size_t n_uploads = 0, n_downloads = 0, upload_bytes = 0, download_bytes = 0;
    // position -> graph: the order the replay and the probes issue the graphs in (the
    // profile's unless --order levels).
    std::vector<size_t> order;
};

Profile load_profile(const std::string & path);
// The graphs in dependency-level order (position -> graph): a graph's level is one more than
// its feeders' highest (1 without feeders); before, between and after the synchronous graphs,
// which keep their places, the graphs go by level, then by profile order. Every feeder stays
// before its readers. sam3d/core/profile.py's level_order is the same order.
std::vector<size_t> level_order(const Profile & p);

// SHA-256 through OpenSSL's libcrypto (EVP).
class Sha256 {
   public:
    Sha256();
    ~Sha256();
    Sha256(const Sha256 &) = delete;
    Sha256 & operator=(const Sha256 &) = delete;
    void update(const void * p, size_t n);
    std::string hex();

   private:
    EVP_MD_CTX * ctx_;
};

// ---------------------------------------------------------------- measurements (measure.cpp)
double now_ms();
double ms(uint64_t ns);
double median(std::vector<double> v);
sam3d_counters snapshot(sam3d_session * s);
sam3d_counters delta(const sam3d_counters & a, const sam3d_counters & b);
// The per-image counts of the result schema (times are per sample).
json count_json(const sam3d_counters & c);
// The core's GGML calls of one image, per mode in extra.modes (docs/benchmark.md): copies,
// synchronizes, event records, event waits, event synchronizes, and the second backend's queued
// calls, event records and event waits (duplex).
json ggml_calls_json(const sam3d_counters & c);
// The driver overhead (the limit probes: probes.h).
json measure_overhead(ggml_backend_t backend, sam3d_session * on, sam3d_session * off, size_t n_graphs, int warmups,
                      int images);

}  // namespace sam3d_bench
