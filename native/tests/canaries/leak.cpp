// Sanitizer canary: leaks on purpose. Registered WILL_FAIL: LeakSanitizer must report it.
#include <cstdio>
#include <cstdlib>

static void * volatile g_sink;

int main() {
    g_sink = std::malloc(4096);
    std::printf("allocated %p and dropped it\n", g_sink);
    g_sink = nullptr;
    return 0;
}
