// compute-sanitizer canary: one deliberate device fault per tool (docs/gpu-checks.md).
//   cuda_faults memcheck    a kernel stores 4 bytes past the end of its allocation, and an allocation
//                           is still held when the context is reset (--leak-check full)
//   cuda_faults initcheck   a kernel reads device memory nothing has written
//   cuda_faults racecheck   two warps write and read one shared-memory word with no barrier
//   cuda_faults synccheck   a warp-level barrier whose mask leaves out a thread that executes it
// The kernels are PTX, JIT-compiled by the driver, and the driver API is opened with dlopen, so
// the canary needs neither nvcc nor the CUDA toolkit: only the GPU machine's libcuda.so.1.
// Without compute-sanitizer the faults go unnoticed and it exits 0; the run that uses it
// (sam3d/core/gpu_checks.py) fails unless the tool reports an error. Exit 77: no CUDA device.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

namespace {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;

const char kPtx[] = R"(
.version 7.8
.target sm_70
.address_size 64

.visible .entry oob_store(.param .u64 p)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [p];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r1;
    ret;
}

.visible .entry uninit_copy(.param .u64 dst, .param .u64 src)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [dst];
    ld.param.u64 %rd2, [src];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd5, %r1, 4;
    add.s64 %rd6, %rd4, %rd5;
    ld.global.u32 %r2, [%rd6];
    add.s64 %rd7, %rd3, %rd5;
    st.global.u32 [%rd7], %r2;
    ret;
}

.visible .entry shared_race(.param .u64 out)
{
    .shared .align 4 .b32 word[1];
    .reg .b32 %r<3>;
    .reg .b64 %rd<5>;
    mov.u32 %r1, %tid.x;
    st.shared.u32 [word], %r1;
    ld.shared.u32 %r2, [word];
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r2;
    ret;
}

.visible .entry bad_warp_barrier(.param .u64 out)
{
    bar.warp.sync 0xfffffffe;
    ret;
}
)";

struct Driver {
    CUresult (*init)(unsigned);
    CUresult (*device_get)(CUdevice*, int);
    CUresult (*primary_retain)(CUctx_st**, CUdevice);
    CUresult (*ctx_set_current)(CUctx_st*);
    CUresult (*module_load_data)(CUmod_st**, const void*);
    CUresult (*module_get_function)(CUfunc_st**, CUmod_st*, const char*);
    CUresult (*mem_alloc)(CUdeviceptr*, size_t);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*memset)(CUdeviceptr, unsigned char, size_t);
    CUresult (*launch)(CUfunc_st*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       CUstream_st*, void**, void**);
    CUresult (*synchronize)();
    CUresult (*primary_reset)(CUdevice);
};

template <class F>
bool bind(void* lib, const char* name, F& f) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    if (f == nullptr) {
        std::fprintf(stderr, "cuda_faults: libcuda.so.1 has no %s\n", name);
    }
    return f != nullptr;
}

int fail(const char* what, CUresult r) {
    std::fprintf(stderr, "cuda_faults: %s failed (CUresult %d)\n", what, r);
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    const char* fault = argc == 2 ? argv[1] : "";
    const char* kernels[][2] = {{"memcheck", "oob_store"}, {"initcheck", "uninit_copy"},
                                {"racecheck", "shared_race"}, {"synccheck", "bad_warp_barrier"}};
    const char* kernel = nullptr;
    for (const auto& k : kernels) {
        if (std::strcmp(fault, k[0]) == 0) {
            kernel = k[1];
        }
    }
    if (kernel == nullptr) {
        std::fprintf(stderr, "usage: cuda_faults memcheck|initcheck|racecheck|synccheck\n");
        return 2;
    }
    void* lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == nullptr) {
        std::printf("cuda_faults: no CUDA driver (%s)\n", dlerror());
        return 77;
    }
    Driver d{};
    if (!(bind(lib, "cuInit", d.init) && bind(lib, "cuDeviceGet", d.device_get) &&
          bind(lib, "cuDevicePrimaryCtxRetain", d.primary_retain) && bind(lib, "cuCtxSetCurrent", d.ctx_set_current) &&
          bind(lib, "cuModuleLoadData", d.module_load_data) && bind(lib, "cuModuleGetFunction", d.module_get_function) &&
          bind(lib, "cuMemAlloc_v2", d.mem_alloc) && bind(lib, "cuMemFree_v2", d.mem_free) &&
          bind(lib, "cuMemsetD8_v2", d.memset) && bind(lib, "cuLaunchKernel", d.launch) &&
          bind(lib, "cuCtxSynchronize", d.synchronize) && bind(lib, "cuDevicePrimaryCtxReset_v2", d.primary_reset))) {
        return 2;
    }
    CUdevice dev = 0;
    CUctx_st* ctx = nullptr;
    CUmod_st* mod = nullptr;
    CUfunc_st* fn = nullptr;
    if (CUresult r = d.init(0); r != 0) {
        std::printf("cuda_faults: no CUDA device (cuInit: %d)\n", r);
        return 77;
    }
    if (CUresult r = d.device_get(&dev, 0); r != 0) return fail("cuDeviceGet", r);
    if (CUresult r = d.primary_retain(&ctx, dev); r != 0) return fail("cuDevicePrimaryCtxRetain", r);
    if (CUresult r = d.ctx_set_current(ctx); r != 0) return fail("cuCtxSetCurrent", r);
    if (CUresult r = d.module_load_data(&mod, kPtx); r != 0) return fail("cuModuleLoadData", r);
    if (CUresult r = d.module_get_function(&fn, mod, kernel); r != 0) return fail("cuModuleGetFunction", r);

    const unsigned threads = std::strcmp(fault, "racecheck") == 0 ? 64 : 32;
    CUdeviceptr a = 0;
    CUdeviceptr b = 0;
    // memcheck: 31 words for 32 threads, so the last store lands 4 bytes past the end.
    const size_t a_bytes = (std::strcmp(fault, "memcheck") == 0 ? threads - 1 : threads) * 4;
    if (CUresult r = d.mem_alloc(&a, a_bytes); r != 0) return fail("cuMemAlloc", r);
    if (CUresult r = d.mem_alloc(&b, threads * 4); r != 0) return fail("cuMemAlloc", r);
    if (CUresult r = d.memset(a, 0, a_bytes); r != 0) return fail("cuMemsetD8", r);
    // b stays unwritten: uninit_copy reads it (initcheck).
    void* args_two[] = {&a, &b};
    void* args_one[] = {&a};
    void** args = std::strcmp(kernel, "uninit_copy") == 0 ? args_two : args_one;
    if (CUresult r = d.launch(fn, 1, 1, 1, threads, 1, 1, 0, nullptr, args, nullptr); r != 0) {
        return fail("cuLaunchKernel", r);
    }
    const CUresult sync = d.synchronize();
    d.mem_free(a);
    d.mem_free(b);
    if (std::strcmp(fault, "memcheck") == 0) {
        // A leak: memcheck reports allocations still held when their context is destroyed.
        CUdeviceptr leaked = 0;
        if (CUresult r = d.mem_alloc(&leaked, 64); r != 0) return fail("cuMemAlloc", r);
        d.primary_reset(dev);
    }
    std::printf("cuda_faults %s: kernel %s ran (synchronize: %d)\n", fault, kernel, sync);
    return 0;
}
