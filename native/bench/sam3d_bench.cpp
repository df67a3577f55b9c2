// sam3d_bench: replays the SAM3D transfer profile through the batched-transfer core.
//
// The profile (native/bench/profiles/sam3d-transfer-v1.json, written by sam3d/profile.py)
// lists one full inference of one image: per graph, upload and download sizes in bytes (F32
// tensors), a replay op, whether the graph is the synchronous image encoder, and which uploads
// take an earlier graph's download. Each graph really computes on its inputs with GGML
// (op "scale_add": out[j] = 0.5 * fit(in[j mod n]) + the other inputs' fits; op "add": the sum
// of all inputs' fits; fit = the first |out[j]| elements, tiled with ggml_repeat_4d when the
// input is shorter), so every output depends on the inputs and results are bit-exact on one
// backend. Inputs alternate between two data sets ("images"); dependent uploads read the
// earlier download's host buffer directly.
//
// Protocol (design.md, "The SAM3D transfer profile"): two sessions on one backend, "off"
// (SAM3D_BATCHING_OFF) and "on" (SAM3D_BATCHING_FROM_ENV, which must resolve to batching:
// the runner sets SAM3D_BATCHED_TRANSFERS=1), run the same graphs interleaved per image
// (on,off then off,on alternately); --warmups untimed images, then --images timed ones.
// Per timed image and mode: wall time of the 83 calls (steady_clock), the core's counter
// deltas (enqueue, synchronize, copy and synchronous-path host time; transfers and bytes),
// and the SHA-256 (OpenSSL EVP) of all downloads in profile order.
//
// Transfers go only through the core's C API (sam3d/transfer.h); GGML is used to create the
// backend, the tensors and the graphs. Output: one JSON document (--out FILE, else stdout),
// which sam3d/bench.py wraps into a "sam3d-bench-result/1" file. Units: bytes, milliseconds.
// Exit status: 0 ok; 1 bad arguments, profile or setup; 2 a core call failed;
// 3 a check failed (outputs differ on/off, nondeterministic outputs, counters vary by image)
// after the JSON was written.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "sam3d/transfer.h"
#ifdef SAM3D_VULKAN
#include "ggml-vulkan.h"
#endif

using json = nlohmann::json;

namespace {

constexpr size_t kElement = sizeof(float);  // the profile is F32 throughout

struct Error : std::runtime_error {
    int code;
    Error(int c, const std::string & m) : std::runtime_error(m), code(c) {}
};

[[noreturn]] void die(int code, const std::string & message) { throw Error(code, message); }

// ---------------------------------------------------------------- options
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
    // Replay modes, in table order: on (CLI "staged"), off, zerocopy, queued.
    std::vector<int> modes;
    bool transfer_only = false;
};

const char * kUsage =
    "usage: sam3d_bench --profile PATH [--backend cpu|vulkan] [--device N] [--warmups N] [--images N]\n"
    "                   [--threads N] [--out FILE.json] [--modes off,staged[,zerocopy,queued]]\n"
    "                   [--transfer-only]\n"
    "  --profile   the transfer profile (native/bench/profiles/sam3d-transfer-v1.json)\n"
    "  --backend   GGML backend to replay on (default cpu)\n"
    "  --device    Vulkan device index (default 0)\n"
    "  --warmups   untimed images per mode before the timed ones (default 5)\n"
    "  --images    timed images per mode (default 20)\n"
    "  --threads   CPU backend threads (default 1)\n"
    "  --out       result JSON (default: stdout)\n"
    "  --modes     replay modes, comma-separated (default off,staged; both are required):\n"
    "              off       batching off, sam3d_session_run\n"
    "              staged    batching on, sam3d_session_run (row \"on\")\n"
    "              zerocopy  batching on, inputs written into reserved staging slots and outputs\n"
    "                        read in place (sam3d_session_reserve + SAM3D_SUBMIT_ZERO_COPY); the\n"
    "                        producer's writes of independent inputs and reads of outputs are\n"
    "                        not timed (in the other modes they happen before and after a call)\n"
    "              queued    zerocopy, with SAM3D_SUBMIT_QUEUED: a graph is waited only when a\n"
    "                        later graph's upload takes its download (depends_on_downloads), when\n"
    "                        the staging ring has no room for the next reservation, before the\n"
    "                        synchronous graph, and at the end of the image\n"
    "  --transfer-only  replay the transfers without compute (graph = NULL): output tensors hold a\n"
    "              fixed pattern, so ratios to the transfer floor can be measured\n"
    "The 'on' session reads SAM3D_BATCHED_TRANSFERS, which must be 1.\n";

int parse_int(const std::string & flag, const char * v, int min) {
    char * end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || x < min || x > 1000000) {
        die(1, flag + " " + v + ": expected an integer >= " + std::to_string(min));
    }
    return static_cast<int>(x);
}

Options parse_args(int argc, char ** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::fputs(kUsage, stdout);
            std::exit(0);
        }
        if (a == "--transfer-only") {
            o.transfer_only = true;
            continue;
        }
        if (i + 1 >= argc) {
            die(1, a + " needs a value (or is unknown)\n" + kUsage);
        }
        const char * v = argv[++i];
        if (a == "--profile") {
            o.profile = v;
        } else if (a == "--backend") {
            o.backend = v;
        } else if (a == "--device") {
            o.device = parse_int(a, v, 0);
        } else if (a == "--warmups") {
            o.warmups = parse_int(a, v, 0);
        } else if (a == "--images") {
            o.images = parse_int(a, v, 1);
        } else if (a == "--threads") {
            o.threads = parse_int(a, v, 1);
        } else if (a == "--out") {
            o.out = v;
        } else if (a == "--modes") {
            bool want[4] = {false, false, false, false};
            std::stringstream ss(std::string(v) + ",");
            std::string m;
            while (std::getline(ss, m, ',')) {
                const int k = m == "staged" ? 0 : m == "off" ? 1 : m == "zerocopy" ? 2 : m == "queued" ? 3 : -1;
                if (k < 0) die(1, "--modes: unknown mode '" + m + "' in '" + v + "' (use off, staged, zerocopy, queued)");
                want[k] = true;
            }
            if (!want[0] || !want[1]) {
                die(1, std::string("--modes '") + v + "': off and staged are required (every row is compared with "
                                                      "off, the zerocopy and queued rows also with staged)");
            }
            o.modes.clear();
            for (int k = 0; k < 4; ++k) {
                if (want[k]) o.modes.push_back(k);
            }
        } else {
            die(1, "unknown option " + a + "\n" + kUsage);
        }
    }
    if (o.profile.empty()) {
        die(1, std::string("--profile is required\n") + kUsage);
    }
    if (o.modes.empty()) {
        o.modes = {0, 1};  // on (staged), off: exactly the default protocol
    }
    if (o.backend != "cpu" && o.backend != "vulkan") {
        die(1, "--backend " + o.backend + ": use cpu or vulkan");
    }
    return o;
}

// ---------------------------------------------------------------- SHA-256 (OpenSSL libcrypto)
class Sha256 {
   public:
    Sha256() : ctx_(EVP_MD_CTX_new()) {
        if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
            die(1, "OpenSSL EVP_DigestInit_ex(sha256) failed");
        }
    }
    ~Sha256() { EVP_MD_CTX_free(ctx_); }
    Sha256(const Sha256 &) = delete;
    Sha256 & operator=(const Sha256 &) = delete;
    void update(const void * p, size_t n) {
        if (EVP_DigestUpdate(ctx_, p, n) != 1) {
            die(1, "OpenSSL EVP_DigestUpdate failed");
        }
    }
    std::string hex() {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        if (EVP_DigestFinal_ex(ctx_, md, &n) != 1) {
            die(1, "OpenSSL EVP_DigestFinal_ex failed");
        }
        static const char * digits = "0123456789abcdef";
        std::string s;
        for (unsigned int i = 0; i < n; ++i) {
            s += digits[md[i] >> 4];
            s += digits[md[i] & 15];
        }
        return s;
    }

   private:
    EVP_MD_CTX * ctx_;
};

// ---------------------------------------------------------------- the profile
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
};

struct Profile {
    std::string path;
    std::string name;
    int version = 0;
    std::string sha256;
    std::vector<GraphSpec> graphs;
    size_t n_uploads = 0, n_downloads = 0, upload_bytes = 0, download_bytes = 0;
};

Profile load_profile(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        die(1, "cannot read the profile " + path + ": check --profile");
    }
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    Profile p;
    p.path = path;
    {
        Sha256 h;
        h.update(text.data(), text.size());
        p.sha256 = h.hex();
    }
    json j;
    try {
        j = json::parse(text);
        p.name = j.at("name").get<std::string>();
        p.version = j.at("version").get<int>();
        std::map<std::string, size_t> index;
        for (const json & g : j.at("graphs")) {
            GraphSpec s;
            s.name = g.at("name").get<std::string>();
            const std::string where = path + ": graph " + s.name;
            s.op = g.at("op").get<std::string>();
            if (s.op != "scale_add" && s.op != "add") {
                die(1, where + ": op '" + s.op + "' is not scale_add or add");
            }
            s.synchronous = g.at("synchronous").get<bool>();
            s.uploads = g.at("uploads").get<std::vector<size_t>>();
            s.downloads = g.at("downloads").get<std::vector<size_t>>();
            if (s.uploads.empty() || s.downloads.empty()) {
                die(1, where + ": needs at least one upload and one download");
            }
            for (size_t b : s.uploads) {
                if (b == 0 || b % kElement) die(1, where + ": upload of " + std::to_string(b) + " bytes is not a positive multiple of 4 (F32)");
            }
            for (size_t b : s.downloads) {
                if (b == 0 || b % kElement) die(1, where + ": download of " + std::to_string(b) + " bytes is not a positive multiple of 4 (F32)");
            }
            for (const json & d : g.at("depends_on_downloads")) {
                Dep dep{d.at("upload").get<size_t>(), 0, d.at("download").get<size_t>()};
                const std::string src = d.at("graph").get<std::string>();
                auto it = index.find(src);
                if (it == index.end()) die(1, where + ": depends on '" + src + "', which is not an earlier graph");
                dep.graph = it->second;
                if (dep.upload >= s.uploads.size() || dep.download >= p.graphs[dep.graph].downloads.size() ||
                    s.uploads[dep.upload] != p.graphs[dep.graph].downloads[dep.download]) {
                    die(1, where + ": dependency on " + src + " names a missing upload/download or sizes differ");
                }
                s.deps.push_back(dep);
            }
            index[s.name] = p.graphs.size();
            p.n_uploads += s.uploads.size();
            p.n_downloads += s.downloads.size();
            for (size_t b : s.uploads) p.upload_bytes += b;
            for (size_t b : s.downloads) p.download_bytes += b;
            p.graphs.push_back(std::move(s));
        }
    } catch (const json::exception & e) {
        die(1, path + ": not a transfer profile: " + e.what());
    }
    if (p.graphs.empty()) {
        die(1, path + ": no graphs");
    }
    return p;
}

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

// ---------------------------------------------------------------- timing and counters
double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

sam3d_counters snapshot(sam3d_session * s) {
    sam3d_counters c{};
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
    return d;
}

// The per-image counts of the result schema (times are per sample).
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

// ---------------------------------------------------------------- the replay
enum Mode { kOn = 0, kOff = 1, kZeroCopy = 2, kQueued = 3, kModes = 4 };
const char * mode_name(int m) {
    switch (m) {
        case kOn: return "on";
        case kOff: return "off";
        case kZeroCopy: return "zerocopy";
        case kQueued: return "queued";
    }
    return "?";
}

struct Replay {
    const Profile & profile;
    ggml_backend_t backend;
    std::vector<BuiltGraph> graphs;
    // inputs[data set][graph][upload]; empty for uploads fed by a dependency
    std::vector<std::vector<std::vector<float>>> inputs[2];
    // outputs[mode][graph][download]
    std::vector<std::vector<std::vector<float>>> outputs[kModes];
    // descriptors[mode][data set][graph] of the copying modes (on, off)
    std::vector<std::vector<sam3d_upload>> ups[kModes][2];
    std::vector<std::vector<sam3d_download>> downs[kModes][2];
    std::vector<sam3d_call> calls[kModes][2];
    bool transfer_only = false;
    // zerocopy and queued scratch
    sam3d_session * session_ = nullptr;
    std::vector<sam3d_slot_request> req;
    std::vector<void *> slots;
    std::vector<sam3d_upload> zc_ups;
    std::vector<sam3d_download> zc_downs;
    std::vector<sam3d_ticket> tickets;
    std::vector<std::vector<void *>> out_slots;  // each graph's output slots
    std::vector<size_t> last_reader;             // the last graph that uploads a graph's download (0: none)
    std::vector<sam3d_ticket> kept;              // tickets of kept calls not released yet (0: none)
    double excluded_ms = 0;       // producer writes and consumer reads of slots in the last image (not timed)
    size_t dependency_waits = 0;  // queued, last image: wait points before an input that takes an earlier download
    size_t ring_waits = 0;        // queued, last image: wait points because the staging ring had no room

    Replay(const Profile & p, ggml_backend_t be, bool no_compute) : profile(p), backend(be), transfer_only(no_compute) {}

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
                    const bool fed = std::any_of(s.deps.begin(), s.deps.end(), [&](const Dep & x) { return x.upload == i; });
                    if (!fed) {
                        inputs[d][g][i].resize(s.uploads[i] / kElement);
                        fill(inputs[d][g][i], (static_cast<uint64_t>(d) << 40) ^ (g << 16) ^ i);
                    }
                }
            }
        }
        for (int m = 0; m < kModes; ++m) {
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
                        const void * src = inputs[d][g][i].data();
                        for (const Dep & x : s.deps) {
                            if (x.upload == i) src = outputs[m][x.graph][x.download].data();
                        }
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

    // One image: every graph in profile order. Returns the wall time in ms.
    double run(sam3d_session * s, int mode, int data) {
        if (mode == kZeroCopy) return run_zero_copy(s, data);
        if (mode == kQueued) return run_queued(s, data);
        const std::vector<sam3d_call> & cs = calls[mode][data];
        const double t0 = now_ms();
        for (size_t g = 0; g < cs.size(); ++g) {
            const sam3d_status st = sam3d_session_run(s, &cs[g]);
            if (st != SAM3D_OK) {
                die(2, std::string("graph ") + profile.graphs[g].name + " (batching " + mode_name(mode) +
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
    // modes). `excluded_ms` holds the excluded host time of the last image.
    const void * fed_by(size_t g, size_t i) const {
        for (const Dep & x : profile.graphs[g].deps) {
            if (x.upload == i) return out_slots[x.graph][x.download];
        }
        return nullptr;
    }

    // Reserves graph g's slots; returns whether they are pinned staging.
    bool reserve(size_t g) {
        const GraphSpec & sp = profile.graphs[g];
        req.clear();
        for (size_t i = 0; i < sp.uploads.size(); ++i) {
            if (fed_by(g, i) == nullptr) req.push_back({sp.uploads[i]});
        }
        for (size_t b : sp.downloads) req.push_back({b});
        slots.assign(req.size(), nullptr);
        if (sam3d_session_reserve(session_, req.data(), req.size(), slots.data()) != SAM3D_OK) failed(g, "reserve");
        return sam3d_session_reservation_pinned(session_);
    }

    // Writes graph g's independent inputs into their slots and builds its call.
    sam3d_call fill_slots(size_t g, int data, double * excluded) {
        const GraphSpec & sp = profile.graphs[g];
        zc_ups.clear();
        zc_downs.clear();
        size_t k = 0;
        for (size_t i = 0; i < sp.uploads.size(); ++i) {
            const void * src = fed_by(g, i);
            if (src == nullptr) {
                const double t = now_ms();
                std::memcpy(slots[k], inputs[data][g][i].data(), sp.uploads[i]);
                *excluded += now_ms() - t;
                src = slots[k++];
            }
            zc_ups.push_back(sam3d_upload{graphs[g].inputs[i], src, 0, sp.uploads[i]});
        }
        out_slots[g].assign(slots.begin() + static_cast<std::ptrdiff_t>(k), slots.end());
        for (size_t j = 0; j < sp.downloads.size(); ++j) {
            zc_downs.push_back(sam3d_download{graphs[g].outputs[j], out_slots[g][j], 0, sp.downloads[j]});
        }
        return sam3d_call{zc_ups.data(), zc_ups.size(), transfer_only ? nullptr : graphs[g].graph, zc_downs.data(),
                          zc_downs.size(), sp.synchronous};
    }

    // Copies graph g's outputs out of its slots (verification; excluded).
    void keep_outputs(size_t g, int mode, double * excluded) {
        const double t = now_ms();
        const GraphSpec & sp = profile.graphs[g];
        for (size_t j = 0; j < sp.downloads.size(); ++j) {
            std::memcpy(outputs[mode][g][j].data(), out_slots[g][j], sp.downloads[j]);
        }
        *excluded += now_ms() - t;
    }

    // Submits graph g's zero-copy call (kept when a later graph reads its outputs), then
    // releases the kept calls whose last reader g is.
    void submit_slots(size_t g, const sam3d_call & c, unsigned flags, const char * what) {
        if (last_reader[g] > g) flags |= SAM3D_SUBMIT_KEEP_SLOTS;
        sam3d_ticket * t = (flags & (SAM3D_SUBMIT_KEEP_SLOTS | SAM3D_SUBMIT_QUEUED)) ? &tickets[g] : nullptr;
        if (sam3d_session_submit(session_, &c, flags, t) != SAM3D_OK) failed(g, what);
        for (const Dep & x : profile.graphs[g].deps) {
            if (last_reader[x.graph] == g && kept[x.graph] != 0) {
                if (sam3d_session_release(session_, kept[x.graph]) != SAM3D_OK) failed(x.graph, "release");
                kept[x.graph] = 0;  // a graph may read the same download twice
            }
        }
        kept[g] = (flags & SAM3D_SUBMIT_KEEP_SLOTS) ? tickets[g] : 0;
    }

    void begin_slots(sam3d_session * s) {
        session_ = s;
        const size_t ng = graphs.size();
        tickets.assign(ng, 0);
        kept.assign(ng, 0);
        out_slots.assign(ng, {});
        if (last_reader.empty()) {
            last_reader.assign(ng, 0);
            for (size_t g = 0; g < ng; ++g) {
                for (const Dep & x : profile.graphs[g].deps) last_reader[x.graph] = std::max(last_reader[x.graph], g);
            }
        }
    }

    // zerocopy: one synchronization per graph (SAM3D_SUBMIT_ZERO_COPY).
    double run_zero_copy(sam3d_session * s, int data) {
        begin_slots(s);
        double excluded = 0;
        const double t0 = now_ms();
        for (size_t g = 0; g < graphs.size(); ++g) {
            reserve(g);
            const sam3d_call c = fill_slots(g, data, &excluded);
            submit_slots(g, c, SAM3D_SUBMIT_ZERO_COPY, "zerocopy");
            keep_outputs(g, kZeroCopy, &excluded);
        }
        excluded_ms = excluded;
        return now_ms() - t0 - excluded;
    }

    // queued: zero-copy calls submitted with SAM3D_SUBMIT_QUEUED. Tickets are waited in
    // submission order, and only when needed: before a graph whose input takes an earlier
    // graph's download (the profile's depends_on_downloads), when the staging ring has no room
    // for the next reservation (the oldest call is waited and the reservation retried), before
    // the synchronous image encoder, and at the end of the image.
    double run_queued(sam3d_session * s, int data) {
        begin_slots(s);
        double excluded = 0;
        const size_t ng = graphs.size();
        size_t next_wait = 0;  // graphs before this one have been waited
        dependency_waits = ring_waits = 0;
        // Waits the tickets of graphs [next_wait, end), the newest first (one synchronization
        // completes them all); counts one wait point if there was any.
        auto wait_until = [&](size_t end, size_t * wait_points) {
            size_t last = end;
            while (last > next_wait && tickets[last - 1] == 0) --last;
            if (last > next_wait) {
                if (sam3d_session_wait(s, tickets[last - 1]) != SAM3D_OK) failed(last - 1, "queued wait");
                for (size_t g = next_wait; g + 1 < last; ++g) {
                    if (tickets[g] != 0 && sam3d_session_wait(s, tickets[g]) != SAM3D_OK) failed(g, "queued wait");
                }
                for (size_t g = next_wait; g < last; ++g) {
                    if (tickets[g] != 0) keep_outputs(g, kQueued, &excluded);
                }
                *wait_points += 1;
            }
            next_wait = std::max(next_wait, end);
        };
        const double t0 = now_ms();
        for (size_t g = 0; g < ng; ++g) {
            const GraphSpec & sp = profile.graphs[g];
            size_t dep_end = sp.synchronous ? g : 0;
            for (const Dep & x : sp.deps) dep_end = std::max(dep_end, x.graph + 1);
            wait_until(dep_end, &dependency_waits);
            while (!reserve(g) && next_wait < g) wait_until(next_wait + 1, &ring_waits);
            const sam3d_call c = fill_slots(g, data, &excluded);
            if (sp.synchronous) {
                submit_slots(g, c, SAM3D_SUBMIT_ZERO_COPY, "queued, synchronous graph");
                keep_outputs(g, kQueued, &excluded);
                tickets[g] = 0;  // complete on return: nothing to wait
                next_wait = g + 1;
                continue;
            }
            submit_slots(g, c, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, "queued submit");
        }
        size_t end_waits = 0;
        wait_until(ng, &end_waits);
        excluded_ms = excluded;
        return now_ms() - t0 - excluded;
    }

    std::string digest(int mode) {
        Sha256 h;
        for (const auto & g : outputs[mode]) {
            for (const auto & o : g) h.update(o.data(), o.size() * kElement);
        }
        return h.hex();
    }
};

sam3d_session * make_session(ggml_backend_t backend, sam3d_batching batching) {
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = batching;
    sam3d_session * s = nullptr;
    const sam3d_status st = sam3d_session_create(backend, &o, &s);
    if (st == SAM3D_ERR_BAD_ENV) {
        die(1, std::string("the 'on' session reads SAM3D_BATCHED_TRANSFERS: ") + sam3d_last_error() +
                   "; run through `python -m sam3d bench`, which sets SAM3D_BATCHED_TRANSFERS=1");
    }
    if (st != SAM3D_OK) {
        die(1, std::string("sam3d_session_create failed: ") + sam3d_last_error());
    }
    return s;
}

struct SessionPtr {
    sam3d_session * s;
    ~SessionPtr() { sam3d_session_free(s); }
};

ggml_backend_t make_backend(const Options & o) {
    if (o.backend == "cpu") {
        ggml_backend_t b = ggml_backend_cpu_init();
        if (b == nullptr) die(1, "ggml_backend_cpu_init failed");
        ggml_backend_cpu_set_n_threads(b, o.threads);
        return b;
    }
#ifdef SAM3D_VULKAN
    const int n = ggml_backend_vk_get_device_count();
    if (n <= 0) {
        die(1, "no Vulkan device: without a GPU, install mesa-vulkan-drivers and set GGML_VK_VISIBLE_DEVICES=0 "
               "(lavapipe)");
    }
    if (o.device >= n) {
        die(1, "--device " + std::to_string(o.device) + ": only " + std::to_string(n) + " Vulkan device(s)");
    }
    ggml_backend_t b = ggml_backend_vk_init(static_cast<size_t>(o.device));
    if (b == nullptr) die(1, "ggml_backend_vk_init(" + std::to_string(o.device) + ") failed");
    return b;
#else
    die(1, "--backend vulkan: this sam3d_bench was built without Vulkan (use a Vulkan variant: release or "
           "vulkan-ubsan)");
#endif
}

// The transfer floor: the profile's bytes as two large copies from and to pinned host memory
// (ggml_backend_dev_host_buffer_type), host to device then device to host, through GGML
// directly (not the core): the least a per-image transfer can cost on this device. Measured
// both ways GGML offers, and the floor is the faster: asynchronous (tensor_set_async and
// tensor_get_async from pinned memory, then one ggml_backend_synchronize: DMA copies on a
// discrete GPU) and synchronous (ggml_backend_tensor_set/get; on a GPU whose device memory is
// host-visible, GGML's Vulkan backend writes it with a CPU memcpy). Null when the device has
// no host buffer type (CPU).
json measure_floor(ggml_backend_t backend, ggml_backend_dev_t dev, size_t up_bytes, size_t down_bytes, int warmups,
                   int images) {
    ggml_backend_buffer_type_t host_buft = ggml_backend_dev_host_buffer_type(dev);
    if (host_buft == nullptr) return nullptr;
    ggml_backend_buffer_t host = ggml_backend_buft_alloc_buffer(host_buft, up_bytes + down_bytes);
    if (host == nullptr) die(1, "floor: allocating pinned host memory failed");
    const bool pinned = ggml_backend_buffer_get_type(host) == host_buft;
    ggml_init_params ip = {ggml_tensor_overhead() * 2, nullptr, true};
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * up = ggml_new_tensor_1d(ctx, GGML_TYPE_I8, static_cast<int64_t>(up_bytes));
    ggml_tensor * down = ggml_new_tensor_1d(ctx, GGML_TYPE_I8, static_cast<int64_t>(down_bytes));
    ggml_backend_buffer_t dbuf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    if (dbuf == nullptr) die(1, "floor: allocating device tensors failed");
    auto * mem = static_cast<uint8_t *>(ggml_backend_buffer_get_base(host));
    std::memset(mem, 0x5a, up_bytes + down_bytes);
    std::vector<double> h2d, d2h, sync_total, async_total;
    for (int i = 0; i < warmups + images; ++i) {
        double t0 = now_ms();
        ggml_backend_tensor_set(up, mem, 0, up_bytes);
        const double t1 = now_ms();
        ggml_backend_tensor_get(down, mem + up_bytes, 0, down_bytes);
        const double t2 = now_ms();
        ggml_backend_tensor_set_async(backend, up, mem, 0, up_bytes);
        ggml_backend_tensor_get_async(backend, down, mem + up_bytes, 0, down_bytes);
        ggml_backend_synchronize(backend);
        const double t3 = now_ms();
        if (i >= warmups) {
            h2d.push_back(t1 - t0);
            d2h.push_back(t2 - t1);
            sync_total.push_back(t2 - t0);
            async_total.push_back(t3 - t2);
        }
    }
    ggml_backend_buffer_free(dbuf);
    ggml_free(ctx);
    ggml_backend_buffer_free(host);
    const bool async_faster = median(async_total) <= median(sync_total);
    const std::vector<double> & total = async_faster ? async_total : sync_total;
    return json{{"median_ms", median(total)}, {"samples_ms", total},
                {"how", async_faster ? "async" : "sync"},
                {"async_median_ms", median(async_total)}, {"sync_median_ms", median(sync_total)},
                {"sync_h2d_median_ms", median(h2d)}, {"sync_d2h_median_ms", median(d2h)},
                {"upload_bytes", up_bytes}, {"download_bytes", down_bytes}, {"pinned", pinned},
                {"what", "the profile's bytes as one upload and one download from pinned host memory: async = "
                         "ggml_backend_tensor_set_async + get_async + one synchronize, sync = "
                         "ggml_backend_tensor_set + get; the floor is the faster median"}};
}

// Driver overhead: the same replay loop (same call count, same sessions) with empty transfers
// and a one-element graph per call, and with no graph at all; per image ms.
json measure_overhead(ggml_backend_t backend, sam3d_session * sessions[2], size_t n_graphs, int warmups, int images) {
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
    for (int m = 0; m < 2; ++m) {
        for (int with_graph = 1; with_graph >= 0; --with_graph) {
            std::vector<double> samples;
            for (int i = 0; i < warmups + images; ++i) {
                const double t0 = now_ms();
                for (size_t g = 0; g < n_graphs; ++g) {
                    sam3d_call c{nullptr, 0, with_graph ? gs[g] : nullptr, nullptr, 0, false};
                    if (sam3d_session_run(sessions[m], &c) != SAM3D_OK) {
                        die(2, std::string("overhead replay: ") + sam3d_last_error());
                    }
                }
                if (i >= warmups) samples.push_back(now_ms() - t0);
            }
            const std::string key = std::string(with_graph ? "trivial_graphs" : "no_graphs") + "_" + mode_name(m);
            out[key] = json{{"median_ms", median(samples)}, {"samples_ms", samples}};
        }
    }
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    return out;
}

int bench(const Options & o) {
    const Profile profile = load_profile(o.profile);
    std::fprintf(stderr, "sam3d_bench: profile %s v%d (%s): %zu graphs, %zu uploads = %zu bytes, %zu downloads = %zu bytes\n",
                 profile.name.c_str(), profile.version, profile.sha256.substr(0, 12).c_str(), profile.graphs.size(),
                 profile.n_uploads, profile.upload_bytes, profile.n_downloads, profile.download_bytes);

    ggml_backend_t backend = make_backend(o);
    std::unique_ptr<ggml_backend, decltype(&ggml_backend_free)> backend_guard(backend, ggml_backend_free);
    ggml_backend_dev_t dev = ggml_backend_get_device(backend);
    ggml_backend_dev_props props{};
    ggml_backend_dev_get_props(dev, &props);
    const std::string backend_name = o.backend == "cpu" ? "CPU" : "Vulkan";
    std::fprintf(stderr, "sam3d_bench: backend %s, device %s (%s), caps async=%d host_buffer=%d\n",
                 ggml_backend_name(backend), props.name ? props.name : "?", props.description ? props.description : "?",
                 props.caps.async, props.caps.host_buffer);

    // Sessions first: a wrong environment fails before any allocation.
    SessionPtr off{make_session(backend, SAM3D_BATCHING_OFF)};
    SessionPtr on{make_session(backend, SAM3D_BATCHING_FROM_ENV)};
    if (!sam3d_session_batching(on.s)) {
        const char * v = std::getenv("SAM3D_BATCHED_TRANSFERS");
        die(1, std::string("the 'on' session does not batch: SAM3D_BATCHED_TRANSFERS is ") +
                   (v ? std::string("'") + v + "'" : std::string("unset")) +
                   " in this process; it must be 1. Run through `python -m sam3d bench` (it removes any inherited "
                   "value and sets 1), or export SAM3D_BATCHED_TRANSFERS=1");
    }
    SessionPtr zc{nullptr};
    SessionPtr queued{nullptr};
    sam3d_session * sessions[kModes] = {on.s, off.s, nullptr, nullptr};
    for (int m : o.modes) {
        if (m == kZeroCopy) sessions[m] = zc.s = make_session(backend, SAM3D_BATCHING_FROM_ENV);
        if (m == kQueued) sessions[m] = queued.s = make_session(backend, SAM3D_BATCHING_FROM_ENV);
    }

    size_t n_tensors = 0;
    for (const GraphSpec & s : profile.graphs) n_tensors += s.uploads.size() + s.downloads.size() * (5 * s.uploads.size() + 2);
    ggml_init_params ip = {ggml_tensor_overhead() * (n_tensors + 16) +
                               ggml_graph_overhead_custom(kGraphNodes, false) * profile.graphs.size(),
                           nullptr, true};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> ctx(ggml_init(ip), ggml_free);
    if (!ctx) die(1, "ggml_init failed");
    Replay replay(profile, backend, o.transfer_only);
    replay.prepare(ctx.get());
    std::unique_ptr<ggml_backend_buffer, decltype(&ggml_backend_buffer_free)> buffer(
        ggml_backend_alloc_ctx_tensors(ctx.get(), backend), ggml_backend_buffer_free);
    if (!buffer) die(1, "allocating the profile's tensors on " + backend_name + " failed");
    if (o.transfer_only) replay.fill_outputs();
    const size_t device_bytes = ggml_backend_buffer_get_size(buffer.get());
    std::fprintf(stderr, "sam3d_bench: %zu device bytes for tensors; 'on' session static fallback: %s, staging alignment %zu\n",
                 device_bytes, sam3d_fallback_name(sam3d_session_static_fallback(on.s)),
                 sam3d_session_staging_alignment(on.s));

    json rows[kModes];
    std::vector<double> warm_ms[kModes];
    std::vector<sam3d_counters> per_image[kModes];
    std::vector<std::string> shas[kModes];  // every image, warm-ups included
    std::vector<std::string> order;
    std::vector<double> excluded_ms[kModes];
    const int total = o.warmups + o.images;
    const std::vector<int> & modes = o.modes;
    const size_t nm = modes.size();
    for (int m : modes) rows[m] = json{{"batching", mode_name(m)}, {"samples", json::array()}};
    for (int idx = 0; idx < total; ++idx) {
        // Inputs alternate every image and the mode order rotates every two images, so each
        // mode goes first with each input set equally often (two modes: on,off then off,on).
        const int data = idx % 2;
        const size_t rot = static_cast<size_t>(idx / 2) % nm;
        const bool timed = idx >= o.warmups;
        std::string ord;
        for (size_t k = 0; k < nm; ++k) ord += std::string(k ? "," : "") + mode_name(modes[(rot + k) % nm]);
        order.push_back(ord);
        for (size_t k = 0; k < nm; ++k) {
            const int m = modes[(rot + k) % nm];
            const sam3d_counters before = snapshot(sessions[m]);
            const double wall = replay.run(sessions[m], m, data);
            const sam3d_counters d = delta(before, snapshot(sessions[m]));
            const std::string sha = replay.digest(m);
            shas[m].push_back(sha);
            if ((m == kZeroCopy || m == kQueued) && timed) excluded_ms[m].push_back(replay.excluded_ms);
            std::fprintf(stderr, "sam3d_bench: %-3s %s %d/%d %9.3f ms\n", mode_name(m), timed ? "image " : "warmup",
                         timed ? idx - o.warmups + 1 : idx + 1, timed ? o.images : o.warmups, wall);
            if (!timed) {
                warm_ms[m].push_back(wall);
                continue;
            }
            per_image[m].push_back(d);
            rows[m]["samples"].push_back(json{{"image", idx - o.warmups},
                                              {"wall_ms", wall},
                                              {"enqueue_ms", ms(d.enqueue_ns)},
                                              {"synchronize_ms", ms(d.synchronize_ns)},
                                              {"copy_ms", ms(d.copy_ns)},
                                              {"sync_path_ms", ms(d.sync_path_ns)},
                                              {"outputs_sha256", sha}});
        }
    }

    // Checks: counts the same every image, outputs identical on/off, deterministic per data set.
    std::vector<std::string> problems;
    json mode_extra = json::object();
    for (int m : modes) {
        const json first = count_json(per_image[m].front());
        for (size_t i = 1; i < per_image[m].size(); ++i) {
            if (count_json(per_image[m][i]) != first) {
                problems.push_back(std::string("batching ") + mode_name(m) + ": counters of timed image " +
                                   std::to_string(i) + " differ from image 0");
                break;
            }
        }
        rows[m]["counters"] = first;
        const sam3d_counters & c = per_image[m].front();
        mode_extra[mode_name(m)] = json{{"calls_per_image", c.calls},
                                        {"failed_calls", c.failed_calls},
                                        {"rejected_calls", c.rejected_calls},
                                        {"staging_bytes", c.staging_bytes},
                                        {"staging_allocations_total", snapshot(sessions[m]).staging_allocations},
                                        {"warmup_wall_ms", warm_ms[m]},
                                        {"session_batching", sam3d_session_batching(sessions[m])},
                                        {"static_fallback", sam3d_fallback_name(sam3d_session_static_fallback(sessions[m]))},
                                        {"staging_alignment", sam3d_session_staging_alignment(sessions[m])}};
    }
    for (int m : {kZeroCopy, kQueued}) {
        if (!excluded_ms[m].empty()) mode_extra[mode_name(m)]["slot_fill_and_read_ms_excluded"] = excluded_ms[m];
    }
    if (sessions[kQueued] != nullptr) {
        // Wait points per image (the same every image: the replay is deterministic).
        mode_extra[mode_name(kQueued)]["dependency_wait_points_per_image"] = replay.dependency_waits;
        mode_extra[mode_name(kQueued)]["ring_wait_points_per_image"] = replay.ring_waits;
    }
    bool identical = true, deterministic = true;
    std::vector<std::string> differ;
    for (int m : modes) {
        if (m == kOff) continue;
        for (int i = 0; i < total; ++i) {
            if (shas[m][static_cast<size_t>(i)] != shas[kOff][static_cast<size_t>(i)]) {
                identical = false;
                differ.push_back(mode_name(m));
                break;
            }
        }
    }
    for (int i = 0; i < total; ++i) {
        if (i >= 2 && shas[kOff][static_cast<size_t>(i)] != shas[kOff][static_cast<size_t>(i - 2)]) deterministic = false;
    }
    // Transfer-only: nothing is computed, outputs are the fixed pattern whatever the inputs.
    const bool inputs_matter = o.transfer_only || total < 2 || shas[kOff][0] != shas[kOff][1];
    for (const std::string & m : differ) {
        problems.push_back(m == "on" ? std::string("outputs differ between batching on and off")
                                     : "outputs differ between batching " + m + " and off");
    }
    if (!deterministic) problems.push_back("outputs of the same input data set differ between images");
    if (!inputs_matter) problems.push_back("the two input data sets give the same outputs");

    std::fprintf(stderr, "sam3d_bench: measuring driver overhead (empty transfers, trivial graphs)\n");
    const json overhead = measure_overhead(backend, sessions, profile.graphs.size(), o.warmups, o.images);
    std::fprintf(stderr, "sam3d_bench: measuring the transfer floor (two pinned copies of the profile's bytes)\n");
    const json floor = measure_floor(backend, dev, profile.upload_bytes, profile.download_bytes, o.warmups, o.images);

    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    json caps = {{"async", props.caps.async},
                 {"host_buffer", props.caps.host_buffer},
                 {"buffer_from_host_ptr", props.caps.buffer_from_host_ptr},
                 {"events", props.caps.events}};
    json doc = {
        {"tool", "sam3d_bench"},
        {"backend", backend_name},
        {"device", props.description ? props.description : ""},
        {"caps", caps},
        {"protocol", {{"warmups", o.warmups}, {"images", o.images}, {"interleaved", true}}},
        {"profile", {{"path", profile.path}, {"name", profile.name}, {"version", profile.version}, {"sha256", profile.sha256}}},
        {"rows", [&] { json r = json::array(); for (int m : modes) r.push_back(rows[m]); return r; }()},
        {"extra",
         {{"driver_overhead_ms_per_image", overhead.at("trivial_graphs_off").at("median_ms")},
          {"driver_overhead", overhead},
          {"peak_rss_bytes", static_cast<uint64_t>(ru.ru_maxrss) * 1024u},
          {"transfer_floor", floor},
          {"device_tensor_bytes", device_bytes},
          {"ggml_device", {{"name", props.name ? props.name : ""},
                           {"description", props.description ? props.description : ""},
                           {"backend", ggml_backend_name(backend)},
                           {"memory_total", props.memory_total},
                           {"device_id", props.device_id ? props.device_id : ""}}},
          {"cpu_threads", o.backend == "cpu" ? o.threads : 0},
          {"modes", mode_extra},
          {"order", order},
          {"input_data_set", "image k (warm-ups first) uses data set k mod 2"},
          {"outputs_identical_on_off", identical},
          {"outputs_deterministic", deterministic},
          {"inputs_change_outputs", inputs_matter},
          {"problems", problems}}},
    };
    if (o.transfer_only) doc["extra"]["transfer_only"] = true;
    if (modes != std::vector<int>{kOn, kOff}) {
        json names = json::array();
        for (int m : modes) names.push_back(mode_name(m));
        doc["extra"]["replay_modes"] = names;
    }
    const std::string text = doc.dump(1) + "\n";
    if (o.out.empty()) {
        std::fputs(text.c_str(), stdout);
    } else {
        std::ofstream f(o.out, std::ios::binary);
        if (!(f << text)) die(1, "cannot write " + o.out);
    }
    auto row_median = [&](int m) {
        std::vector<double> v;
        for (auto & x : rows[m]["samples"]) v.push_back(x["wall_ms"].get<double>());
        return median(v);
    };
    if (modes == std::vector<int>{kOn, kOff}) {
        std::fprintf(stderr, "sam3d_bench: on median %.3f ms, off median %.3f ms; outputs %s on/off\n", row_median(kOn),
                     row_median(kOff), identical ? "identical" : "DIFFERENT");
    } else {
        for (int m : modes) {
            std::fprintf(stderr, "sam3d_bench: %-8s median %9.3f ms", mode_name(m), row_median(m));
            if (floor.is_object()) {
                std::fprintf(stderr, "  (%.2fx the transfer floor)", row_median(m) / floor.at("median_ms").get<double>());
            }
            std::fputc('\n', stderr);
        }
        std::fprintf(stderr, "sam3d_bench: outputs %s in every mode%s\n", identical ? "identical" : "DIFFERENT",
                     o.transfer_only ? " (transfer-only)" : "");
    }
    for (const std::string & p : problems) std::fprintf(stderr, "sam3d_bench: CHECK FAILED: %s\n", p.c_str());
    return problems.empty() ? 0 : 3;
}

}  // namespace

int main(int argc, char ** argv) {
    try {
        return bench(parse_args(argc, argv));
    } catch (const Error & e) {
        std::fprintf(stderr, "sam3d_bench: error: %s\n", e.what());
        return e.code;
    } catch (const std::exception & e) {
        std::fprintf(stderr, "sam3d_bench: error: %s\n", e.what());
        return 1;
    }
}
