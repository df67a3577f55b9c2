// Sanitizer canary: signed integer overflow on purpose. Registered WILL_FAIL: UBSan must report
// "runtime error" and, with UBSAN_OPTIONS=halt_on_error=1, exit non-zero; its stack trace
// (print_stacktrace=1), symbolized, names overflow_on_purpose.
#include <climits>
#include <cstdio>

__attribute__((noinline)) static int overflow_on_purpose(int big) { return big + 1; }

int main() {
    volatile int big = INT_MAX;
    std::printf("INT_MAX + 1 = %d\n", overflow_on_purpose(big));
    return 0;
}
