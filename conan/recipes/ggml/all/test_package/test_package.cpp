// The installed package: GGML's CPU backend, created through the backend registry of ggml-backend.h,
// computes sum(a * b) of two 4-element vectors; the dot product must be 70.
#include <cstdio>

#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml.h>

int main() {
    ggml_backend_t backend = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, nullptr);
    if (backend == nullptr) {
        std::fprintf(stderr, "test_package: no CPU backend in the GGML registry\n");
        return 1;
    }
    const ggml_init_params params = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true};
    ggml_context * ctx = ggml_init(params);
    ggml_tensor * a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4);
    ggml_tensor * b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4);
    ggml_tensor * sum = ggml_sum(ctx, ggml_mul(ctx, a, b));
    ggml_cgraph * graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, sum);
    ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors(ctx, backend);

    const float av[4] = {1, 2, 3, 4};
    const float bv[4] = {5, 6, 7, 8};
    ggml_backend_tensor_set(a, av, 0, sizeof av);
    ggml_backend_tensor_set(b, bv, 0, sizeof bv);
    const ggml_status status = ggml_backend_graph_compute(backend, graph);
    float result = 0;
    ggml_backend_tensor_get(sum, &result, 0, sizeof result);
    std::printf("test_package: sum(a * b) on %s: %s, %g (want 70)\n", ggml_backend_name(backend),
                ggml_status_to_string(status), result);

    ggml_backend_buffer_free(buffer);
    ggml_free(ctx);
    ggml_backend_free(backend);
    return status == GGML_STATUS_SUCCESS && result == 70.0f ? 0 : 1;
}
