/* A dlclose that keeps every module mapped until the process exits.
 *
 * Preloaded (LD_PRELOAD) into every run of a variant with ASan and GGML's Vulkan backend
 * (sam3d/core/variants.py, the address sanitizer's vulkan_preload). Every handle, a bad one too,
 * gets 0: the callers are the Vulkan loader's, whose handles come from its own dlopen. The Vulkan loader unloads
 * NVIDIA's driver modules at vkDestroyInstance, before LeakSanitizer's check at exit, so the
 * driver's allocations would be reported from "<unknown module>" frames that no suppression can
 * name; kept mapped, they are attributed to the driver's module and lsan.supp can name it
 * (docs/gpu.md, "vulkan-asan on NVIDIA"). Built without instrumentation: it must load into any
 * process the run starts. */
#include <dlfcn.h>

int dlclose(void *handle) {
    (void)handle;
    return 0;
}
