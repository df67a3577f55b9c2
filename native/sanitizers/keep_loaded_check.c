/* keep_loaded_check MODULE kept|unloaded: opens MODULE, closes it, and says whether it is still
 * mapped (dlopen with RTLD_NOLOAD); exits 0 when that is what the second argument expects. Run
 * with libsam3d_keep_loaded.so preloaded it must be "kept", without it "unloaded" (which shows
 * the check can tell the two apart). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[2], "kept") != 0 && strcmp(argv[2], "unloaded") != 0)) {
        fprintf(stderr, "usage: keep_loaded_check MODULE kept|unloaded\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 2;
    }
    if (dlclose(h) != 0) {
        fprintf(stderr, "dlclose: %s\n", dlerror());
        return 2;
    }
    void *again = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
    const char *state = again != NULL ? "kept" : "unloaded";
    printf("%s: %s after dlclose\n", argv[1], state);
    return strcmp(state, argv[2]) == 0 ? 0 : 1;
}
