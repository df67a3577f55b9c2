// The installed package's C API: a session on GGML's CPU backend, created and freed.
#include <cstdio>

#include <ggml-cpu.h>
#include <sam3d/transfer.h>

int main() {
    ggml_backend_t backend = ggml_backend_cpu_init();
    if (backend == nullptr) {
        std::fprintf(stderr, "test_package: ggml_backend_cpu_init failed\n");
        return 1;
    }
    sam3d_session * session = nullptr;
    const sam3d_status status = sam3d_session_create(backend, nullptr, &session);
    std::printf("test_package: sam3d_session_create on %s: %s (batching %s)\n", ggml_backend_name(backend),
                sam3d_status_name(status), session != nullptr && sam3d_session_batching(session) ? "on" : "off");
    sam3d_session_free(session);
    ggml_backend_free(backend);
    return status == SAM3D_OK ? 0 : 1;
}
