#include "copier.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace sam3d {

namespace {

// A worker keeps looking for its next part this long after finishing one before it sleeps: a
// call's pieces, and the next call's, come tens to hundreds of microseconds apart, and waking
// a sleeping thread costs about as much as copying its part. Measured on the H200 (docs/
// benchmark.md, "Staged copies"): 2 ms beat 300 us and 50 us.
constexpr auto kSpin = std::chrono::milliseconds(2);

inline void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

}  // namespace

Copier::Copier(unsigned threads) {
    if (threads <= 1) {
        return;
    }
    workers_.reset(new Worker[threads - 1]);
    for (unsigned i = 0; i + 1 < threads; ++i) {
        try {
            Worker & w = workers_[i];
            w.thread = std::thread([this, &w] { run(w); });
        } catch (...) {
            // std::system_error (no thread) or std::bad_alloc (no memory for its state): fewer
            // participants, the same copies, only slower; the started ones are joined by ~Copier.
            break;
        }
        started_ += 1;
    }
}

Copier::~Copier() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_.store(true, std::memory_order_relaxed);
    }
    wake_.notify_all();
    for (unsigned i = 0; i < started_; ++i) {
        workers_[i].thread.join();
    }
}

unsigned Copier::parts(size_t bytes) const {
    const size_t most = threads() == 1 ? 1 : size_t(kPartsPerThread) * threads();
    return static_cast<unsigned>(std::max<size_t>(1, std::min(most, bytes / kMinPartBytes)));
}

void Copier::copy_part(const Span * spans, size_t n, size_t begin, size_t end) {
    size_t at = 0;  // the offset of spans[i] in the concatenation
    for (size_t i = 0; i < n && at < end; at += spans[i].size, ++i) {
        const size_t lo = std::max(begin, at);
        const size_t hi = std::min(end, at + spans[i].size);
        if (lo < hi) {
            std::memcpy(static_cast<uint8_t *>(spans[i].dst) + (lo - at),
                        static_cast<const uint8_t *>(spans[i].src) + (lo - at), hi - lo);
        }
    }
}

size_t Copier::claim_parts(uint64_t generation) {
    size_t bytes = 0;
    uint64_t c = next_.load(std::memory_order_acquire);
    for (;;) {
        const unsigned parts = static_cast<unsigned>((c >> 16) & 0xffffu), k = static_cast<unsigned>(c & 0xffffu);
        if ((c >> 32) != (generation & 0xffffffffu) || k >= parts) {
            return bytes;  // another copy's, or every part claimed
        }
        if (!next_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
            continue;  // c holds what another participant left
        }
        // Part k of a copy not yet complete (its caller waits for this part): its spans and
        // bytes stay as the caller wrote them before posting. Part j starts at bytes / parts * j
        // rounded down to 64 bytes of the run; the last part takes the remainder.
        const auto edge = [&](unsigned j) { return j == parts ? bytes_ : (bytes_ / parts * j) & ~size_t(63); };
        copy_part(spans_, n_, edge(k), edge(k + 1));
        bytes += edge(k + 1) - edge(k);
        done_.fetch_add(1, std::memory_order_release);
        c += 1;
    }
}

void Copier::copy(const Span * spans, size_t n) {
    size_t bytes = 0;
    for (size_t i = 0; i < n; ++i) {
        bytes += spans[i].size;
    }
    const unsigned p = parts(bytes);
    if (p == 1) {
        copy_part(spans, n, 0, bytes);
        caller_copied_.fetch_add(bytes, std::memory_order_relaxed);
        return;
    }
    spans_ = spans;
    n_ = n;
    bytes_ = bytes;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t generation = posted_.load(std::memory_order_relaxed) + 1;
    next_.store((generation & 0xffffffffu) << 32 | uint64_t(p) << 16, std::memory_order_release);  // part 0 of p
    posted_.store(generation, std::memory_order_release);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (sleepers_ > 0) {
            wake_.notify_all();
        }
    }
    if (!caller_held_) {
        caller_copied_.fetch_add(claim_parts(generation), std::memory_order_relaxed);
    }
    // Every part is claimed: wait for the workers' claimed ones.
    for (unsigned spins = 0; done_.load(std::memory_order_acquire) != p; ++spins) {
        if (spins < 4096) {
            pause();
        } else {
            std::this_thread::yield();  // a worker was preempted inside its part: let it run
        }
    }
}

uint64_t Copier::copied(unsigned k) const {
    if (k == 0) {
        return caller_copied_.load(std::memory_order_relaxed);
    }
    return k < threads() ? workers_[k - 1].copied.load(std::memory_order_relaxed) : 0;
}

void Copier::run(Worker & w) {
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = posted_.load(std::memory_order_acquire);
        const auto until = std::chrono::steady_clock::now() + kSpin;
        for (unsigned spins = 0; g == seen; ++spins) {
            pause();
            if (spins % 64 == 63) {
                if (stop_.load(std::memory_order_relaxed) || std::chrono::steady_clock::now() >= until) {
                    break;
                }
                std::this_thread::yield();  // a machine with fewer cores than threads runs the caller
            }
            g = posted_.load(std::memory_order_acquire);
        }
        if (g == seen) {
            std::unique_lock<std::mutex> lock(mutex_);
            sleepers_ += 1;
            wake_.wait(lock, [&] {
                return stop_.load(std::memory_order_relaxed) || posted_.load(std::memory_order_acquire) != seen;
            });
            sleepers_ -= 1;
            g = posted_.load(std::memory_order_acquire);
            if (g == seen) {
                return;  // stopped
            }
        }
        seen = g;
        if (!workers_held_.load(std::memory_order_relaxed)) {
            w.copied.fetch_add(claim_parts(g), std::memory_order_relaxed);
        }
    }
}

}  // namespace sam3d
