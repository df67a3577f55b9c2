// sam3d_microbench: the core's own costs, through its C API, on the CPU backend.
//
//   1. bookkeeping per call (validation, layout, counters) for 10 uploads + 10 downloads of
//      64 bytes each on the staged path (the CPU backend with the seam forcing caps on and the
//      CPU buffer type as staging: GGML then sets/gets synchronously, so the copies are a few
//      hundred bytes and the call is dominated by the core's bookkeeping), and the same call
//      with batching off (ggml_backend_tensor_set/get only) for reference; ns per call;
//   2. staging copy speed: one 16 MiB upload + one 16 MiB download on the staged path, the
//      core's copy_ns counter against a plain memcpy of the same bytes; GB/s;
//   3. host memory: the staging bytes the session asked of GGML, and the heap growth
//      (mallinfo2) over 10,000 warm calls, which must be 0.
// Prints one JSON object. Usage: sam3d_microbench [--calls N]
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "sam3d/testing.h"
#include "sam3d/transfer.h"

namespace {

double now_ns() {
    return static_cast<double>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

void props_async(ggml_backend_dev_t dev, ggml_backend_dev_props * props) {
    ggml_backend_dev_get_props(dev, props);
    props->caps.async = true;
    props->caps.host_buffer = true;
}
ggml_backend_buffer_type_t cpu_buft(ggml_backend_dev_t) { return ggml_backend_cpu_buffer_type(); }
ggml_backend_dev_t cpu_dev(ggml_backend_buffer_type_t) { return ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU); }

sam3d_session * session(ggml_backend_t backend, sam3d_batching mode, const sam3d_ggml_seam * seam) {
    sam3d_session_options o = sam3d_session_default_options();
    o.batching = mode;
    sam3d_session * s = nullptr;
    if (sam3d_testing_session_create(backend, &o, seam, &s) != SAM3D_OK) {
        std::fprintf(stderr, "sam3d_microbench: %s\n", sam3d_last_error());
        std::exit(1);
    }
    return s;
}

void run(sam3d_session * s, const sam3d_call & c) {
    if (sam3d_session_run(s, &c) != SAM3D_OK) {
        std::fprintf(stderr, "sam3d_microbench: %s\n", sam3d_last_error());
        std::exit(1);
    }
}

}  // namespace

int main(int argc, char ** argv) {
    long calls = 100000;
    for (int i = 1; i + 1 < argc; ++i) {
        if (std::string(argv[i]) == "--calls") calls = std::atol(argv[i + 1]);
    }
    ggml_backend_t backend = ggml_backend_cpu_init();
    sam3d_ggml_seam seam = sam3d_testing_default_seam();
    seam.dev_get_props = props_async;
    seam.dev_host_buffer_type = cpu_buft;
    seam.buft_get_device = cpu_dev;

    const int n = 10;
    const size_t small = 64, big = 16u << 20;
    ggml_init_params ip = {ggml_tensor_overhead() * (2 * n + 2), nullptr, true};
    ggml_context * ctx = ggml_init(ip);
    std::vector<ggml_tensor *> ins, outs;
    for (int i = 0; i < n; ++i) {
        ins.push_back(ggml_new_tensor_1d(ctx, GGML_TYPE_I8, small));
        outs.push_back(ggml_new_tensor_1d(ctx, GGML_TYPE_I8, small));
    }
    ggml_tensor * big_in = ggml_new_tensor_1d(ctx, GGML_TYPE_I8, static_cast<int64_t>(big));
    ggml_tensor * big_out = ggml_new_tensor_1d(ctx, GGML_TYPE_I8, static_cast<int64_t>(big));
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);

    std::vector<uint8_t> src(n * small, 7), dst(n * small);
    std::vector<sam3d_upload> ups;
    std::vector<sam3d_download> downs;
    for (int i = 0; i < n; ++i) {
        ups.push_back({ins[i], src.data() + i * small, 0, small});
        downs.push_back({outs[i], dst.data() + i * small, 0, small});
    }
    const sam3d_call c{ups.data(), ups.size(), nullptr, downs.data(), downs.size(), false};

    double per_call[2];
    long heap_growth = 0;
    uint64_t staging_bytes = 0;
    for (int m = 0; m < 2; ++m) {
        sam3d_session * s = session(backend, m == 0 ? SAM3D_BATCHING_ON : SAM3D_BATCHING_OFF, &seam);
        for (int i = 0; i < 1000; ++i) run(s, c);  // warm: staging allocated, scratch vectors sized
        const size_t heap0 = mallinfo2().uordblks;
        const double t0 = now_ns();
        for (long i = 0; i < calls; ++i) run(s, c);
        per_call[m] = (now_ns() - t0) / static_cast<double>(calls);
        if (m == 0) {
            heap_growth = static_cast<long>(mallinfo2().uordblks) - static_cast<long>(heap0);
            sam3d_counters k{};
            sam3d_session_counters(s, &k);
            staging_bytes = k.staging_bytes;
            if (k.pinned_batches < static_cast<uint64_t>(calls)) {
                std::fprintf(stderr, "sam3d_microbench: the staged path did not run\n");
                return 1;
            }
        }
        sam3d_session_free(s);
    }

    // Staging copies: 16 MiB in, 16 MiB out, on the staged path; copy_ns vs memcpy.
    std::vector<uint8_t> bsrc(big, 3), bdst(big), scratch(big);
    sam3d_upload bu{big_in, bsrc.data(), 0, big};
    sam3d_download bd{big_out, bdst.data(), 0, big};
    const sam3d_call bc{&bu, 1, nullptr, &bd, 1, false};
    sam3d_session * s = session(backend, SAM3D_BATCHING_ON, &seam);
    run(s, bc);
    sam3d_session_reset_counters(s);
    const int reps = 20;
    for (int i = 0; i < reps; ++i) run(s, bc);
    sam3d_counters k{};
    sam3d_session_counters(s, &k);
    const double staging_gbs = 2.0 * big * reps / static_cast<double>(k.copy_ns);
    double t0 = now_ns();
    for (int i = 0; i < reps; ++i) {
        std::memcpy(scratch.data(), bsrc.data(), big);
        std::memcpy(bdst.data(), scratch.data(), big);
    }
    const double memcpy_gbs = 2.0 * big * reps / (now_ns() - t0);
    sam3d_session_free(s);

    std::printf(
        "{\"calls\": %ld, \"descriptors\": %d, \"descriptor_bytes\": %zu,\n"
        " \"staged_ns_per_call\": %.1f, \"off_ns_per_call\": %.1f,\n"
        " \"heap_growth_bytes_over_warm_calls\": %ld, \"staging_bytes_asked_of_ggml\": %llu,\n"
        " \"staging_copy_gb_per_s\": %.2f, \"memcpy_gb_per_s\": %.2f, \"copy_bytes\": %zu}\n",
        calls, 2 * n, small, per_call[0], per_call[1], heap_growth, static_cast<unsigned long long>(staging_bytes),
        staging_gbs, memcpy_gbs, 2 * big);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    ggml_backend_free(backend);
    return heap_growth == 0 ? 0 : 2;
}
