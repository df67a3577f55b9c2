// sam3d_floor_probe: an independent measurement of the transfer floor, in plain GGML (neither
// the core nor sam3d_bench's code), to cross-check sam3d_bench's floor in the same run.
//
// One sample: an upload of --upload-bytes from the backend's host buffer type into a device
// tensor and a download of --download-bytes from another device tensor into the same host
// buffer (ggml_backend_tensor_set_async, ggml_backend_tensor_get_async), then one
// ggml_backend_synchronize; the download's host offset is the upload's size rounded up to
// --alignment (64 by default). Between samples, other work: a small graph computed on the
// backend. 3 warm-up samples, then --samples (20); the floor is their median.
//
// Usage: sam3d_floor_probe --backend NAME [--device N] --upload-bytes N --download-bytes N
//                          [--samples N] [--alignment N]
// NAME is a GGML backend registry name ("Vulkan", "CUDA", "CPU"; any case), N the index among
// that backend's devices. Prints one JSON object (schema sam3d-floor-probe/1) to stdout;
// "median_ms" is null when the device has no host buffer type (CPU). Exit status 1 on bad
// arguments or a setup failure (message on stderr).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace {

[[noreturn]] void fail(const std::string & m) {
    std::fprintf(stderr, "sam3d_floor_probe: error: %s\n", m.c_str());
    std::exit(1);
}

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

size_t number(const char * flag, const char * v, size_t min = 1) {
    char * end = nullptr;
    const unsigned long long x = std::strtoull(v, &end, 10);
    if (end == v || *end != '\0' || *v == '-' || x < min) {
        fail(std::string(flag) + " " + v + ": expected an integer >= " + std::to_string(min));
    }
    return static_cast<size_t>(x);
}

// A JSON string literal (names from GGML: quotes and control characters escaped).
std::string quoted(const char * s) {
    std::string out = "\"";
    for (const char * p = s ? s : ""; *p; ++p) {
        const unsigned char c = static_cast<unsigned char>(*p);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out + "\"";
}

}  // namespace

int main(int argc, char ** argv) {
    std::string backend_name;
    size_t device = 0, up_bytes = 0, down_bytes = 0, samples = 20, alignment = 64;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) fail(a + " needs a value (or is unknown)");
        const char * v = argv[++i];
        if (a == "--backend") {
            backend_name = v;
        } else if (a == "--device") {
            device = number("--device", v, 0);
        } else if (a == "--upload-bytes") {
            up_bytes = number("--upload-bytes", v);
        } else if (a == "--download-bytes") {
            down_bytes = number("--download-bytes", v);
        } else if (a == "--samples") {
            samples = number("--samples", v);
        } else if (a == "--alignment") {
            alignment = number("--alignment", v);
        } else {
            fail("unknown option " + a);
        }
    }
    if (backend_name.empty() || up_bytes == 0 || down_bytes == 0) {
        fail("usage: sam3d_floor_probe --backend NAME [--device N] --upload-bytes N --download-bytes N "
             "[--samples N] [--alignment N]");
    }

    ggml_backend_dev_t dev = nullptr;
    std::string seen;
    for (size_t i = 0, k = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        const char * reg = ggml_backend_reg_name(ggml_backend_dev_backend_reg(d));
        seen += std::string(seen.empty() ? "" : ", ") + reg + ":" + ggml_backend_dev_name(d);
        if (lower(reg) == lower(backend_name) && k++ == device) dev = d;
    }
    if (dev == nullptr) fail("no device " + std::to_string(device) + " of backend " + backend_name + " (devices: " + seen + ")");
    ggml_backend_t backend = ggml_backend_dev_init(dev, nullptr);
    if (backend == nullptr) fail(std::string("ggml_backend_dev_init(") + ggml_backend_dev_name(dev) + ") failed");
    const char * reg = ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev));

    std::printf("{\"schema\": \"sam3d-floor-probe/1\", \"tool\": \"sam3d_floor_probe\", \"backend\": %s, "
                "\"device\": %s, \"upload_bytes\": %zu, \"download_bytes\": %zu, \"alignment\": %zu",
                quoted(reg).c_str(), quoted(ggml_backend_dev_description(dev)).c_str(), up_bytes, down_bytes,
                alignment);
    ggml_backend_buffer_type_t host_buft = ggml_backend_dev_host_buffer_type(dev);
    if (host_buft == nullptr) {
        std::printf(", \"median_ms\": null, \"reason\": \"the device has no host buffer type\"}\n");
        ggml_backend_free(backend);
        return 0;
    }
    const size_t down_offset = (up_bytes + alignment - 1) / alignment * alignment;
    ggml_backend_buffer_t host = ggml_backend_buft_alloc_buffer(host_buft, down_offset + down_bytes + alignment);
    if (host == nullptr) fail("allocating the host buffer failed");
    auto * base = static_cast<uint8_t *>(ggml_backend_buffer_get_base(host));
    // The buffer's base rounded up to the alignment (host buffers are usually aligned already).
    uint8_t * mem = base + (alignment - reinterpret_cast<uintptr_t>(base) % alignment) % alignment;
    std::memset(base, 0x5a, down_offset + down_bytes + alignment);

    const int64_t work_elements = 1 << 16;
    ggml_init_params ip = {ggml_tensor_overhead() * 8 + ggml_graph_overhead_custom(8, false), nullptr, true};
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * up = ggml_new_tensor_1d(ctx, GGML_TYPE_I8, static_cast<int64_t>(up_bytes));
    ggml_tensor * down = ggml_new_tensor_1d(ctx, GGML_TYPE_I8, static_cast<int64_t>(down_bytes));
    ggml_tensor * x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, work_elements);
    ggml_tensor * y = ggml_add(ctx, x, x);
    ggml_cgraph * work = ggml_new_graph_custom(ctx, 8, false);
    ggml_build_forward_expand(work, y);
    ggml_backend_buffer_t dbuf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    if (dbuf == nullptr) fail("allocating the device tensors failed");
    std::vector<float> xs(work_elements, 0.5f);
    ggml_backend_tensor_set(x, xs.data(), 0, xs.size() * sizeof(float));

    std::vector<double> ms;
    for (size_t i = 0; i < samples + 3; ++i) {
        if (ggml_backend_graph_compute(backend, work) != GGML_STATUS_SUCCESS) fail("the work graph failed");
        const double t0 = now_ms();
        ggml_backend_tensor_set_async(backend, up, mem, 0, up_bytes);
        ggml_backend_tensor_get_async(backend, down, mem + down_offset, 0, down_bytes);
        ggml_backend_synchronize(backend);
        if (i >= 3) ms.push_back(now_ms() - t0);
    }
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    const double med = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    std::printf(", \"host_buffer_type\": %s, \"pinned\": %s, \"median_ms\": %.6f, \"gb_per_s\": %.3f, \"samples_ms\": [",
                quoted(ggml_backend_buft_name(host_buft)).c_str(),
                ggml_backend_buffer_get_type(host) == host_buft ? "true" : "false", med,
                static_cast<double>(up_bytes + down_bytes) / (med * 1e6));
    for (size_t i = 0; i < n; ++i) std::printf("%s%.6f", i ? ", " : "", ms[i]);
    std::printf("]}\n");
    ggml_backend_buffer_free(dbuf);
    ggml_free(ctx);
    ggml_backend_buffer_free(host);
    ggml_backend_free(backend);
    return 0;
}
