// Sanitizer canary: signed integer overflow on purpose. Registered WILL_FAIL: UBSan must report
// "runtime error" and, with UBSAN_OPTIONS=halt_on_error=1, exit non-zero.
#include <climits>
#include <cstdio>

int main() {
    volatile int big = INT_MAX;
    const int wrapped = big + 1;
    std::printf("INT_MAX + 1 = %d\n", wrapped);
    return 0;
}
