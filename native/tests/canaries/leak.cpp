// Sanitizer canary: leaks on purpose. Registered WILL_FAIL: LeakSanitizer must report it, with
// the allocation's stack symbolized (the report names leak_on_purpose).
#include <cstdio>
#include <cstdlib>

static void * volatile g_sink;

__attribute__((noinline)) static void leak_on_purpose() {
    g_sink = std::malloc(4096);
    std::printf("allocated %p and dropped it\n", g_sink);
    g_sink = nullptr;
}

int main() {
    leak_on_purpose();
    return 0;
}
