// Sanitizer canary: a data race on purpose (two threads write one int, nothing orders them).
// Registered WILL_FAIL: ThreadSanitizer must report "data race" and, with
// TSAN_OPTIONS=halt_on_error=1, exit non-zero.
#include <cstdio>
#include <thread>

static int g_shared;

int main() {
    std::thread writer([] { g_shared = 1; });
    g_shared = 2;  // not ordered with the writer's store: the thread's start orders only what came before it
    writer.join();
    std::printf("g_shared = %d\n", g_shared);
    return 0;
}
