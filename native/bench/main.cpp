// sam3d_bench: replays the SAM3D transfer profile through the batched-transfer core.
//
// Protocol: one session per mode on one backend ("off": SAM3D_BATCHING_OFF; every other mode:
// SAM3D_BATCHING_FROM_ENV, which must resolve to batching: the runner sets
// SAM3D_BATCHED_TRANSFERS=1), running the same graphs interleaved per image (the mode order
// rotates every two images: on,off then off,on with the default modes); --warmups untimed
// images, then --images timed ones. Per timed image and mode: wall time of the 83 calls
// (steady_clock), the core's counter deltas (enqueue, synchronize, copy and synchronous-path
// host time; transfers and bytes), and the SHA-256 of all downloads in profile order. After the
// first batched mode of every image, one round of the limit probes (probes.cpp: transfer floor,
// round trips, staging memcpy; on transfer-only runs the modes' GGML calls without the core).
// Then the driver overhead (measure.cpp) and the output document
// (output.cpp).
//
// Exit status: 0 ok; 1 bad arguments, profile or setup; 2 a core call failed; 3 a check failed
// (outputs differ between modes, nondeterministic outputs, counters vary by image) after the
// JSON was written. `--list-modes` prints the mode table (options.cpp) and exits.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "ggml-alloc.h"
#include "ggml-cpu.h"
#include "output.h"
#include "probes.h"
#include "replay.h"
#ifdef SAM3D_VULKAN
#include "ggml-vulkan.h"
#endif
#ifdef SAM3D_CUDA
#include "ggml-cuda.h"
#endif

namespace sam3d_bench {
namespace {

sam3d_session * make_session(ggml_backend_t backend, sam3d_batching batching, const Options & opts) {
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = batching;
    o.staging_piece_bytes = opts.staging_piece_bytes;
    o.staging_copy_threads = opts.staging_copy_threads;
    o.duplex = opts.duplex;
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
    sam3d_session * s = nullptr;
    ~SessionPtr() { sam3d_session_free(s); }
};

// Device o.device of a GPU backend that has n devices, opened with init(index); dies with
// `none` when there is no device.
template <typename Init>
ggml_backend_t open_gpu(const Options & o, const char * name, int n, const char * none, Init init) {
    if (n <= 0) die(1, none);
    if (o.device >= n) {
        die(1, "--device " + std::to_string(o.device) + ": only " + std::to_string(n) + " " + name + " device(s)");
    }
    ggml_backend_t b = init(o.device);
    if (b == nullptr) die(1, std::string("initializing ") + name + " device " + std::to_string(o.device) + " failed");
    return b;
}

ggml_backend_t make_backend(const Options & o) {
    if (o.backend == "cpu") {
        ggml_backend_t b = ggml_backend_cpu_init();
        if (b == nullptr) die(1, "ggml_backend_cpu_init failed");
        ggml_backend_cpu_set_n_threads(b, o.threads);
        return b;
    }
    if (o.backend == "vulkan") {
#ifdef SAM3D_VULKAN
        return open_gpu(o, "Vulkan", ggml_backend_vk_get_device_count(),
                        "no Vulkan device: without a GPU, install mesa-vulkan-drivers and set "
                        "GGML_VK_VISIBLE_DEVICES=0 (lavapipe)",
                        [](int d) { return ggml_backend_vk_init(static_cast<size_t>(d)); });
#else
        die(1, "--backend vulkan: this sam3d_bench was built without Vulkan (use the driver of a variant with "
               "the Vulkan backend: docs/variants.md)");
#endif
    }
#ifdef SAM3D_CUDA
    return open_gpu(o, "CUDA", ggml_backend_cuda_get_device_count(),
                    "no CUDA device: ggml_backend_cuda_get_device_count() is 0 (no NVIDIA GPU, or its driver is "
                    "missing or older than the CUDA runtime)",
                    [](int d) { return ggml_backend_cuda_init(d); });
#else
    die(1, "--backend cuda: this sam3d_bench was built without CUDA (use the driver of a variant with the CUDA "
           "backend: docs/variants.md)");
#endif
}

// Every image of every mode, interleaved, with a probe round after each image's first batched
// mode (so a round follows async work and its synchronize, never a synchronous copy); fills
// m.runs and m.order.
void measure_modes(const Options & o, Replay & replay, Probes & probes, Measured & m) {
    const std::vector<Mode> & modes = o.modes;
    const size_t nm = modes.size();
    const int total = o.warmups + o.images;
    for (int idx = 0; idx < total; ++idx) {
        // Inputs alternate every image and the mode order rotates every two images, so each
        // mode goes first with each input set equally often (two modes: on,off then off,on).
        const int data = idx % 2;
        const size_t rot = static_cast<size_t>(idx / 2) % nm;
        const bool timed = idx >= o.warmups;
        std::string ord;
        for (size_t k = 0; k < nm; ++k) ord += std::string(k ? "," : "") + row_name(modes[(rot + k) % nm]);
        m.order.push_back(ord);
        bool probed = false;
        for (size_t k = 0; k < nm; ++k) {
            const Mode mode = modes[(rot + k) % nm];
            ModeRun & r = m.runs[mode];
            const sam3d_counters before = snapshot(r.session);
            const double wall = replay.run(r.session, mode, data);
            const sam3d_counters d = delta(before, snapshot(r.session));
            if (mode != kOff && !probed) {
                probes.round(timed ? idx - o.warmups : idx, timed);
                probed = true;
            }
            r.shas.push_back(replay.digest(mode));
            std::fprintf(stderr, "sam3d_bench: %-3s %s %d/%d %9.3f ms\n", row_name(mode), timed ? "image " : "warmup",
                         timed ? idx - o.warmups + 1 : idx + 1, timed ? o.images : o.warmups, wall);
            if (!timed) {
                r.warm_ms.push_back(wall);
                continue;
            }
            if (mode == kZeroCopy || mode == kQueued) {
                r.excluded_write_ms.push_back(replay.excluded_write_ms());
                r.excluded_read_ms.push_back(replay.excluded_read_ms());
            }
            r.per_image.push_back(d);
            r.samples.push_back(json{{"image", idx - o.warmups},
                                     {"wall_ms", wall},
                                     {"enqueue_ms", ms(d.enqueue_ns)},
                                     {"synchronize_ms", ms(d.synchronize_ns)},
                                     {"copy_ms", ms(d.copy_ns)},
                                     {"sync_path_ms", ms(d.sync_path_ns)},
                                     {"outputs_sha256", r.shas.back()}});
        }
    }
    m.dependency_waits = replay.dependency_waits();
    m.ring_waits = replay.ring_waits();
    m.end_waits = replay.end_waits();
}

int bench(const Options & o) {
    Profile loaded = load_profile(o.profile);
    if (o.order == Order::Levels) loaded.order = level_order(loaded);
    const Profile profile = std::move(loaded);
    std::fprintf(stderr, "sam3d_bench: profile %s v%d (%s): %zu graphs, %zu uploads = %zu bytes, %zu downloads = %zu bytes\n",
                 profile.name.c_str(), profile.version, profile.sha256.substr(0, 12).c_str(), profile.graphs.size(),
                 profile.n_uploads, profile.upload_bytes, profile.n_downloads, profile.download_bytes);

    std::unique_ptr<ggml_backend, decltype(&ggml_backend_free)> backend(make_backend(o), ggml_backend_free);
    Measured m;
    m.options = &o;
    m.profile = &profile;
    m.backend = backend.get();
    ggml_backend_dev_t dev = ggml_backend_get_device(backend.get());
    ggml_backend_dev_get_props(dev, &m.props);
    std::fprintf(stderr, "sam3d_bench: backend %s, device %s (%s), caps async=%d host_buffer=%d\n",
                 ggml_backend_name(backend.get()), m.props.name ? m.props.name : "?",
                 m.props.description ? m.props.description : "?", m.props.caps.async, m.props.caps.host_buffer);

    // Sessions first: a wrong environment fails before any allocation.
    SessionPtr sessions[kModeCount];
    for (Mode mode : o.modes) {
        sessions[mode].s = make_session(backend.get(), mode == kOff ? SAM3D_BATCHING_OFF : SAM3D_BATCHING_FROM_ENV, o);
        m.runs[mode].session = sessions[mode].s;
    }
    sam3d_session * on = sessions[kOn].s;
    if (!sam3d_session_batching(on)) {
        const char * v = std::getenv("SAM3D_BATCHED_TRANSFERS");
        die(1, std::string("the 'on' session does not batch: SAM3D_BATCHED_TRANSFERS is ") +
                   (v ? std::string("'") + v + "'" : std::string("unset")) +
                   " in this process; it must be 1. Run through `python -m sam3d bench` (it removes any inherited "
                   "value and sets 1), or export SAM3D_BATCHED_TRANSFERS=1");
    }

    std::fprintf(stderr, "sam3d_bench: duplex %s: the batched sessions %s second backend\n", duplex_name(o.duplex),
                 sam3d_session_duplex(on) ? "have a" : "have no");

    ggml_init_params ip = {Replay::context_bytes(profile), nullptr, true};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> ctx(ggml_init(ip), ggml_free);
    if (!ctx) die(1, "ggml_init failed");
    Replay replay(profile, backend.get(), o.transfer_only);
    replay.prepare(ctx.get());
    if (o.layout == Layout::Areas) {
        replay.place_areas(sam3d_session_staging_alignment(on), !o.uninitialized_areas);
        for (Mode mode : o.modes) replay.declare_areas(sessions[mode].s);
    }
    std::unique_ptr<ggml_backend_buffer, decltype(&ggml_backend_buffer_free)> buffer(
        ggml_backend_alloc_ctx_tensors(ctx.get(), backend.get()), ggml_backend_buffer_free);
    if (!buffer) die(1, "allocating the profile's tensors on " + o.backend + " failed");
    if (o.transfer_only) replay.fill_outputs();
    m.device_bytes = ggml_backend_buffer_get_size(buffer.get());
    std::fprintf(stderr, "sam3d_bench: %zu device bytes for tensors; 'on' session static fallback: %s, staging alignment %zu\n",
                 m.device_bytes, sam3d_fallback_name(sam3d_session_static_fallback(on)),
                 sam3d_session_staging_alignment(on));

    Probes probes(backend.get(), dev, profile, sam3d_session_staging_alignment(on), sam3d_session_copy_threads(on),
                  o.images, o.transfer_only);
    measure_modes(o, replay, probes, m);
    m.floor = probes.floor();
    m.round_trips = probes.round_trips();
    m.staging_memcpy = probes.staging_memcpy();
    m.ggml_calls = probes.ggml_calls();
    std::fprintf(stderr, "sam3d_bench: measuring driver overhead (empty transfers, trivial graphs)\n");
    m.overhead = measure_overhead(backend.get(), on, sessions[kOff].s, profile.graphs.size(), o.warmups, o.images);
    return write_output(m);
}

}  // namespace
}  // namespace sam3d_bench

int main(int argc, char ** argv) {
    using namespace sam3d_bench;
    try {
        const Options o = parse_args(argc, argv);
        if (o.list_modes) {
            std::fputs((mode_table_json(o.modes).dump(1) + "\n").c_str(), stdout);
            return 0;
        }
        return bench(o);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "sam3d_bench: error: %s\n", e.what());
        return dynamic_cast<const Error *>(&e) ? static_cast<const Error &>(e).code : 1;
    }
}
