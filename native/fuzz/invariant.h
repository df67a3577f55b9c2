// How the fuzz target checks an invariant and reports a violation, for every part of it
// (fuzz_capi.cpp lists them): a violation prints "invariant violated" with its name and what was
// seen, then aborts, so libFuzzer keeps the input (CTest's Fuzz.* match that text).
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace fuzz {

[[noreturn]] inline void violated(const char * invariant, const std::string & detail) {
    std::fprintf(stderr, "sam3d_fuzz_capi: invariant violated: %s\n  %s\n", invariant, detail.c_str());
    std::fflush(stderr);
    std::abort();
}

// `detail` is evaluated only on a violation.
#define CHECK(cond, invariant, detail)     \
    do {                                   \
        if (!(cond)) {                     \
            violated(invariant, (detail)); \
        }                                  \
    } while (0)

inline std::string str(size_t v) { return std::to_string(v); }

// The byte loops of the checks are not coverage-instrumented: their comparisons say nothing
// about the core and would only slow libFuzzer down.
#define NO_COVERAGE __attribute__((no_sanitize("coverage")))

}  // namespace fuzz
