// Sanitizer canary: a data race on purpose (two threads write one int, nothing orders them).
// Registered WILL_FAIL: ThreadSanitizer must report "data race" and, with
// TSAN_OPTIONS=halt_on_error=1, exit non-zero; the symbolized report names store_racing.
// Both threads are alive when they store: a barrier (an atomic counter, which orders nothing
// after it) lets them start together, and each stores many times, so the race is there on
// every run whichever thread the scheduler runs first (with one store each, a run once
// ended without a report).
#include <atomic>
#include <cstdio>
#include <thread>

static int g_shared;
static std::atomic<int> g_arrived{0};

__attribute__((noinline)) static void store_racing(int value) {
    g_arrived.fetch_add(1, std::memory_order_relaxed);
    while (g_arrived.load(std::memory_order_relaxed) < 2) {
        std::this_thread::yield();
    }
    for (int i = 0; i < 1000; ++i) {
        *static_cast<volatile int *>(&g_shared) = value;
    }
}

int main() {
    std::thread writer(store_racing, 1);
    store_racing(2);
    writer.join();
    std::printf("g_shared = %d\n", g_shared);
    return 0;
}
