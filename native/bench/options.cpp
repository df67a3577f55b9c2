// sam3d_bench's command line and its mode table (the one place the modes are declared).
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>

#include "bench.h"

namespace sam3d_bench {

void die(int code, const std::string & message) { throw Error(code, message); }

const char * const kModesSchema = "sam3d-bench-modes/3";

// In the order the output lists the rows (the default protocol first).
const ModeInfo kModeTable[kModeCount] = {
    {kOn, "staged", "on", true, "batching on, sam3d_session_run (the spec's staged batch)"},
    {kOff, "off", "off", true, "batching off, sam3d_session_run (GGML's blocking tensor_set/compute/get)"},
    {kZeroCopy, "zerocopy", "zerocopy", false,
     "batching on, inputs written into reserved staging slots and outputs read in place "
     "(sam3d_session_reserve + SAM3D_SUBMIT_ZERO_COPY); the producer's writes of independent inputs and "
     "reads of outputs are not timed (in the other modes they happen before and after a call)"},
    {kQueued, "queued", "queued", false,
     "zerocopy, with SAM3D_SUBMIT_QUEUED: a graph is waited only when a later graph's upload takes its "
     "download (depends_on_downloads), when the staging ring has no room for the next reservation, before "
     "the synchronous graph, and at the end of the image"},
};

// The device layouts (--layout) and issue orders (--order), the default first.
const Choice<Layout> kLayoutTable[2] = {
    {Layout::Scattered, "scattered", "the profile's: tensors in creation order, one GGML copy per descriptor"},
    {Layout::Areas, "areas",
     "each graph's inputs and outputs in one declared area each (coalesced copies, rule 10)"},
};
const Choice<Order> kOrderTable[2] = {
    {Order::Profile, "profile", "the profile's"},
    {Order::Levels, "levels", "by dependency level, each level's graphs together (queued waits on older calls)"},
};

// The duplex modes (--duplex), in sam3d_duplex's order (duplex_name indexes it).
const Choice<sam3d_duplex> kDuplexTable[3] = {
    {SAM3D_DUPLEX_OFF, "off", "one queue (the core's default)"},
    {SAM3D_DUPLEX_AUTO, "auto", "a second backend where the backend overlaps the two directions (CUDA)"},
    {SAM3D_DUPLEX_ON, "on", "a second backend wherever one and events can be had"},
};

const char * row_name(Mode m) { return kModeTable[m].row; }

namespace {

// The choices of one option, the default (Options' value) first.
template <class T, size_t N>
json choices_json(const Choice<T> (&table)[N], T deflt) {
    json out = json::array();
    for (const Choice<T> & c : table) {
        const json entry{{"name", c.name}, {"description", c.description}};
        out.insert(c.value == deflt ? out.begin() : out.end(), entry);
    }
    return out;
}

}  // namespace

json mode_table_json(const std::vector<Mode> & modes) {
    json out = json::array();
    for (Mode m : modes) {
        const ModeInfo & i = kModeTable[m];
        out.push_back(json{{"name", i.name}, {"row", i.row}, {"required", i.required}, {"description", i.description}});
    }
    const Options d;
    return json{{"schema", kModesSchema},
                {"modes", out},
                {"layouts", choices_json(kLayoutTable, d.layout)},
                {"orders", choices_json(kOrderTable, d.order)},
                {"duplex", choices_json(kDuplexTable, d.duplex)}};
}

namespace {

std::string usage() {
    std::string u =
        "usage: sam3d_bench --profile PATH [--backend cpu|vulkan|cuda] [--device N] [--warmups N] [--images N]\n"
        "                   [--threads N] [--out FILE.json] [--modes M[,M...]] [--transfer-only]\n"
        "       sam3d_bench --list-modes [--modes M[,M...]]\n"
        "  --profile   the transfer profile (native/bench/profiles/sam3d-transfer-v1.json)\n"
        "  --backend   GGML backend to replay on (default cpu)\n"
        "  --device    Vulkan or CUDA device index (default 0)\n"
        "  --warmups   untimed images per mode before the timed ones (default 5)\n"
        "  --images    timed images per mode (default 20)\n"
        "  --threads   CPU backend threads (default 1)\n"
        "  --out       result JSON (default: stdout)\n"
        "  --modes     replay modes, comma-separated (default: the required ones, off,staged):\n";
    for (const ModeInfo & i : kModeTable) {
        u += std::string("              ") + i.name + (i.required ? " (required)" : "") + ": " + i.description + "\n";
    }
    u += "  --transfer-only  replay the transfers without compute (graph = NULL): output tensors hold a\n"
         "              fixed pattern, so ratios to the transfer floor can be measured\n"
         "  --staging-piece-bytes N|max  the batched sessions' piece of the staged path (default 1048576,\n"
         "              SAM3D_STAGING_PIECE_BYTES; max: the whole call in one piece)\n"
         "  --staging-copy-threads N  the batched sessions' threads copying each piece, the caller's\n"
         "              included (default: SAM3D_STAGING_COPY_THREADS, at most the processors)\n"
         "  --layout L  the device layout (default ";
    u += std::string(layout_name(Options{}.layout)) + "):\n";
    for (const Choice<Layout> & c : kLayoutTable) u += std::string("              ") + c.name + ": " + c.description + "\n";
    u += std::string("  --order O   the order the graphs are issued in (default ") + order_name(Options{}.order) + "):\n";
    for (const Choice<Order> & c : kOrderTable) u += std::string("              ") + c.name + ": " + c.description + "\n";
    u += std::string("  --duplex D  the batched sessions' duplex mode, downloads on a second backend (default ") +
         duplex_name(Options{}.duplex) + "):\n";
    for (const Choice<sam3d_duplex> & c : kDuplexTable) {
        u += std::string("              ") + c.name + ": " + c.description + "\n";
    }
    u += "  --uninitialized-areas  leave the areas layout's areas unwritten where no tensor lies (the replay\n"
         "              clears them once; this is the canary compute-sanitizer initcheck must report)\n"
         "  --list-modes  print the mode table (or the --modes given), the layouts, the orders and the duplex\n"
         "              modes as JSON and exit\n"
         "The 'on' session reads SAM3D_BATCHED_TRANSFERS, which must be 1.\n";
    return u;
}

int parse_int(const std::string & flag, const char * v, int min) {
    char * end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || x < min || x > 1000000) {
        die(1, flag + " " + v + ": expected an integer >= " + std::to_string(min));
    }
    return static_cast<int>(x);
}

// A piece size in bytes: 1 to the staging bound, or "max" (SIZE_MAX: one piece per call).
size_t parse_piece_bytes(const std::string & flag, const char * v) {
    if (std::string(v) == "max") {
        return SIZE_MAX;
    }
    char * end = nullptr;
    const unsigned long long x = std::strtoull(v, &end, 10);
    if (end == v || *end != '\0' || v[0] == '-' || x < 1 || x > SAM3D_STAGING_BOUND_BYTES) {
        die(1, flag + " " + v + ": expected bytes from 1 to " + std::to_string(SAM3D_STAGING_BOUND_BYTES) + ", or max");
    }
    return static_cast<size_t>(x);
}

// The value of a table's flag (--layout, --order), or a one-line refusal naming the choices.
template <class T, size_t N>
T parse_choice(const std::string & flag, const std::string & v, const Choice<T> (&table)[N]) {
    std::string names;
    for (const Choice<T> & c : table) {
        if (v == c.name) return c.value;
        names += std::string(names.empty() ? "" : ", ") + c.name;
    }
    die(1, flag + " " + v + ": expected one of " + names);
}

// The --modes value as modes in table order; refuses unknown and missing required names.
std::vector<Mode> parse_modes(const std::string & v) {
    bool want[kModeCount] = {};
    std::stringstream ss(v + ",");
    std::string m;
    while (std::getline(ss, m, ',')) {
        const ModeInfo * found = nullptr;
        for (const ModeInfo & i : kModeTable) {
            if (m == i.name) found = &i;
        }
        if (found == nullptr) {
            std::string names;
            for (const ModeInfo & i : kModeTable) names += std::string(names.empty() ? "" : ", ") + i.name;
            die(1, "--modes '" + v + "': unknown mode '" + m + "' (use " + names + ")");
        }
        want[found->mode] = true;
    }
    std::vector<Mode> modes;
    for (const ModeInfo & i : kModeTable) {
        if (i.required && !want[i.mode]) {
            die(1, "--modes '" + v + "': off and staged are required (every row is compared with off, the "
                                     "zerocopy and queued rows also with staged)");
        }
        if (want[i.mode]) modes.push_back(i.mode);
    }
    return modes;
}

}  // namespace

Options parse_args(int argc, char ** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::fputs(usage().c_str(), stdout);
            std::exit(0);
        }
        if (a == "--transfer-only" || a == "--list-modes" || a == "--uninitialized-areas") {
            (a == "--transfer-only" ? o.transfer_only : a == "--list-modes" ? o.list_modes : o.uninitialized_areas) = true;
            continue;
        }
        if (i + 1 >= argc) {
            die(1, a + " needs a value (or is unknown)\n" + usage());
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
            o.modes = parse_modes(v);
        } else if (a == "--staging-piece-bytes") {
            o.staging_piece_bytes = parse_piece_bytes(a, v);
        } else if (a == "--layout") {
            o.layout = parse_choice(a, v, kLayoutTable);
        } else if (a == "--order") {
            o.order = parse_choice(a, v, kOrderTable);
        } else if (a == "--duplex") {
            o.duplex = parse_choice(a, v, kDuplexTable);
        } else if (a == "--staging-copy-threads") {
            const int n = parse_int(a, v, 1);
            if (n > static_cast<int>(SAM3D_STAGING_COPY_THREADS_MAX)) {
                die(1, a + " " + v + ": at most " + std::to_string(SAM3D_STAGING_COPY_THREADS_MAX));
            }
            o.staging_copy_threads = static_cast<unsigned>(n);
        } else {
            die(1, "unknown option " + a + "\n" + usage());
        }
    }
    if (o.modes.empty()) {
        for (const ModeInfo & i : kModeTable) {
            if (i.required || o.list_modes) o.modes.push_back(i.mode);
        }
    }
    if (o.profile.empty() && !o.list_modes) {
        die(1, "--profile is required\n" + usage());
    }
    if (backend_name(o.backend) == nullptr) {
        die(1, "--backend " + o.backend + ": use cpu, vulkan or cuda");
    }
    return o;
}

const char * layout_name(Layout l) { return kLayoutTable[static_cast<int>(l)].name; }
const char * order_name(Order o) { return kOrderTable[static_cast<int>(o)].name; }
const char * duplex_name(sam3d_duplex d) { return kDuplexTable[static_cast<int>(d)].name; }

const char * backend_name(const std::string & backend) {
    static const std::pair<const char *, const char *> kBackends[] = {
        {"cpu", "CPU"}, {"vulkan", "Vulkan"}, {"cuda", "CUDA"}};
    for (const auto & b : kBackends) {
        if (backend == b.first) return b.second;
    }
    return nullptr;
}

}  // namespace sam3d_bench
