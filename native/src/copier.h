// The staged path's host copies (docs/contract.md, rule 2, "Copy threads"): caller memory to
// pinned staging and back, split over the caller's thread and a few worker threads the session
// starts at creation. No GGML call, no allocation per copy; used with the session locked.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

namespace sam3d {

// One host copy of a call: `size` bytes from `src` to `dst` (a staged input or output).
struct Span {
    void * dst;
    const void * src;
    size_t size;
};

class Copier {
public:
    // A copy is cut into parts of at least this many bytes: below it, handing a part to another
    // thread costs more than it copies (docs/contract.md, rule 2, "Copy threads"; measured
    // against 256 KiB).
    static constexpr size_t kMinPartBytes = size_t(64) << 10;
    // At most this many parts per participant: enough that a participant the machine does not
    // run (a preempted virtual processor) leaves its share to the others (docs/benchmark.md,
    // "The staged tail").
    static constexpr unsigned kPartsPerThread = 4;

    // `threads`: participants, the caller's thread included (1: every copy on the caller's
    // thread, no worker). A worker that cannot be started leaves fewer participants.
    explicit Copier(unsigned threads);
    ~Copier();
    Copier(const Copier &) = delete;
    Copier & operator=(const Copier &) = delete;

    // The participants the session has (the caller's thread and its started workers).
    unsigned threads() const { return 1 + started_; }
    // How many parts a copy of `bytes` is cut into: one per kMinPartBytes, at least one, at
    // most kPartsPerThread per participant (one with a single participant).
    unsigned parts(size_t bytes) const;
    // Copies spans[0, n), their bytes (the sizes' sum) cut into parts(bytes) contiguous parts
    // of about equal size (edges on 64-byte offsets of the run, not of the addresses). The
    // participants claim parts one at a time, in order, the caller's thread among them, so a
    // worker that does not run claims none. Returns when every part is copied: what the workers
    // wrote is visible to the caller (and to what it calls next, GGML included).
    void copy(const Span * spans, size_t n);

    // Copies the bytes [begin, end) of the concatenation of spans[0, n).
    static void copy_part(const Span * spans, size_t n, size_t begin, size_t end);

    // The bytes participant `k` has copied since creation (0: the caller's thread, k: the k-th
    // started worker; 0 beyond threads()), for the seam (sam3d_testing_copied_bytes).
    uint64_t copied(unsigned k) const;
    // The seam's sam3d_testing_hold_copy_threads: held workers claim no part (the caller's thread
    // copies every one, as where the machine runs none of them); a held caller claims none and
    // waits for the workers' (with at least one worker).
    void hold(bool workers, bool caller) {
        workers_held_.store(workers, std::memory_order_relaxed);
        caller_held_ = caller;
    }

private:
    struct Worker {
        std::thread thread;
        std::atomic<uint64_t> copied{0};  // bytes of the parts it copied
    };
    void run(Worker & w);
    // Claims and copies parts of the copy of `generation` until none is left; the bytes copied.
    size_t claim_parts(uint64_t generation);

    std::unique_ptr<Worker[]> workers_;
    unsigned started_ = 0;
    // The copy in progress, written before `next_` names its generation: its spans and bytes.
    const Span * spans_ = nullptr;
    size_t n_ = 0;
    size_t bytes_ = 0;
    // The copy in progress: its generation (bits 32-63), its parts (16-31) and its next unclaimed
    // part (0-15; parts() is at most kPartsPerThread x 64 threads). A claim is a compare-exchange
    // of the whole, so a worker that looks late at a finished copy claims nothing of it.
    std::atomic<uint64_t> next_{0};
    std::atomic<uint64_t> posted_{0};   // the generation posted last, which wakes the workers
    std::atomic<unsigned> done_{0};     // parts of the copy in progress copied
    std::atomic<bool> workers_held_{false};
    bool caller_held_ = false;  // read and written with the session locked
    std::atomic<uint64_t> caller_copied_{0};  // bytes of the parts the caller's thread copied
    std::mutex mutex_;  // guards sleepers_, and stop_'s store, with `wake_`
    std::condition_variable wake_;
    unsigned sleepers_ = 0;
    std::atomic<bool> stop_{false};  // also read by spinning workers, without the lock
};

}  // namespace sam3d
