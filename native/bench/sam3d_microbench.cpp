// sam3d_microbench: the core's own costs, through its C API, on the CPU backend.
//
//   1. bookkeeping per call (validation, plan, layout, counters) for 10 uploads + 10 downloads
//      of 64 bytes each on every path: sam3d_session_run staged, a copying queued submit and its
//      wait, a zero-copy submit (with its reservation), a queued zero-copy submit and its wait,
//      a kept zero-copy submit and its release (the CPU backend dressed as an async-capable
//      device, fake_async::seam() of native/testing/sam3d_fake_async.h: GGML then sets/gets
//      synchronously, so the copies are a few hundred bytes and the call is dominated by the
//      core's bookkeeping), and run with batching off (ggml_backend_tensor_set/get only) for
//      reference; ns per call;
//   2. staging copy speed: one 16 MiB upload + one 16 MiB download on the staged path, the
//      core's copy_ns counter against a plain memcpy of the same bytes; GB/s;
//   3. host memory: the staging bytes the session asked of GGML, and per path the heap growth
//      (mallinfo2) over the timed warm calls (100,000 by default), which must be 0 (exit 2 if not).
// Prints one JSON object. Usage: sam3d_microbench [--calls N]
#include <malloc.h>

#include <chrono>
#include <functional>
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
#include "sam3d_fake_async.h"

namespace {

double now_ns() {
    return static_cast<double>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

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

void check(sam3d_status st) {
    if (st != SAM3D_OK) {
        std::fprintf(stderr, "sam3d_microbench: %s\n", sam3d_last_error());
        std::exit(1);
    }
}

void run(sam3d_session * s, const sam3d_call & c) { check(sam3d_session_run(s, &c)); }

}  // namespace

int main(int argc, char ** argv) {
    long calls = 100000;
    for (int i = 1; i + 1 < argc; ++i) {
        if (std::string(argv[i]) == "--calls") calls = std::atol(argv[i + 1]);
    }
    ggml_backend_t backend = ggml_backend_cpu_init();
    const sam3d_ggml_seam seam = fake_async::seam();

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

    // Every path, on its own session: warm-up, then `calls` timed calls and the heap growth
    // over them (mallinfo2().uordblks, bytes in use), which must be 0.
    std::vector<sam3d_slot_request> req(2 * n, sam3d_slot_request{small});
    std::vector<void *> slot(2 * n);
    std::vector<sam3d_upload> zups(n);
    std::vector<sam3d_download> zdowns(n);
    auto zero_copy_call = [&] {
        for (int i = 0; i < n; ++i) {
            zups[i] = {ins[i], slot[i], 0, small};
            zdowns[i] = {outs[i], slot[n + i], 0, small};
        }
        return sam3d_call{zups.data(), zups.size(), nullptr, zdowns.data(), zdowns.size(), false};
    };
    auto reserve = [&](sam3d_session * s) { check(sam3d_session_reserve(s, req.data(), req.size(), slot.data())); };
    struct Path {
        const char * name;
        sam3d_batching mode;
        std::function<void(sam3d_session *)> one;  // one call of the path
    };
    const std::vector<Path> paths = {
        {"run_staged", SAM3D_BATCHING_ON, [&](sam3d_session * s) { run(s, c); }},
        {"run_off", SAM3D_BATCHING_OFF, [&](sam3d_session * s) { run(s, c); }},
        {"copying_queued", SAM3D_BATCHING_ON,
         [&](sam3d_session * s) {
             sam3d_ticket t = 0;
             check(sam3d_session_submit(s, &c, SAM3D_SUBMIT_QUEUED, &t));
             check(sam3d_session_wait(s, t));
         }},
        {"zero_copy", SAM3D_BATCHING_ON,
         [&](sam3d_session * s) {
             reserve(s);
             const sam3d_call z = zero_copy_call();
             check(sam3d_session_submit(s, &z, SAM3D_SUBMIT_ZERO_COPY, nullptr));
         }},
        {"zero_copy_queued", SAM3D_BATCHING_ON,
         [&](sam3d_session * s) {
             reserve(s);
             const sam3d_call z = zero_copy_call();
             sam3d_ticket t = 0;
             check(sam3d_session_submit(s, &z, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_QUEUED, &t));
             check(sam3d_session_wait(s, t));
         }},
        {"kept", SAM3D_BATCHING_ON,
         [&](sam3d_session * s) {
             reserve(s);
             const sam3d_call z = zero_copy_call();
             sam3d_ticket t = 0;
             check(sam3d_session_submit(s, &z, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, &t));
             check(sam3d_session_release(s, t));
         }},
    };
    std::string rows;
    bool heap_ok = true;
    for (const Path & p : paths) {
        sam3d_session * s = session(backend, p.mode, &seam);
        for (int i = 0; i < 1000; ++i) p.one(s);  // warm: staging allocated, scratch and pools sized
        const size_t heap0 = mallinfo2().uordblks;
        const double t0 = now_ns();
        for (long i = 0; i < calls; ++i) p.one(s);
        const double ns = (now_ns() - t0) / static_cast<double>(calls);
        const long growth = static_cast<long>(mallinfo2().uordblks) - static_cast<long>(heap0);
        heap_ok = heap_ok && growth == 0;
        sam3d_counters k{};
        k.struct_size = sizeof k;
        sam3d_session_counters(s, &k);
        if (p.mode == SAM3D_BATCHING_ON && k.pinned_batches < static_cast<uint64_t>(calls)) {
            std::fprintf(stderr, "sam3d_microbench: %s did not take the staged path\n", p.name);
            return 1;
        }
        char row[256];
        std::snprintf(row, sizeof(row),
                      "%s\n  \"%s\": {\"ns_per_call\": %.1f, \"heap_growth_bytes\": %ld, \"staging_bytes_asked_of_ggml\": %llu}",
                      rows.empty() ? "" : ",", p.name, ns, growth, static_cast<unsigned long long>(k.staging_bytes));
        rows += row;
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
    k.struct_size = sizeof k;
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
        " \"paths\": {%s},\n"
        " \"staging_copy_gb_per_s\": %.2f, \"memcpy_gb_per_s\": %.2f, \"copy_bytes\": %zu}\n",
        calls, 2 * n, small, rows.c_str(), staging_gbs, memcpy_gbs, 2 * big);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    ggml_backend_free(backend);
    return heap_ok ? 0 : 2;
}
