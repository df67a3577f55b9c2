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
    // Below this many bytes per participant a copy does not hand a part to another thread: that
    // costs more than it copies (docs/contract.md, rule 2, "Copy threads"; measured against 256 KiB).
    static constexpr size_t kMinPartBytes = size_t(64) << 10;

    // `threads`: participants, the caller's thread included (1: every copy on the caller's
    // thread, no worker). A worker that cannot be started leaves fewer participants.
    explicit Copier(unsigned threads);
    ~Copier();
    Copier(const Copier &) = delete;
    Copier & operator=(const Copier &) = delete;

    // The participants the session has (the caller's thread and its started workers).
    unsigned threads() const { return 1 + started_; }
    // How many participants a copy of `bytes` uses: one per kMinPartBytes, at most threads().
    unsigned parts(size_t bytes) const;
    // Copies spans[0, n), their bytes (the sizes' sum) split into parts(bytes)
    // contiguous parts of about equal size (edges on 64-byte offsets of the run, not of the
    // addresses); part 0 on the caller's thread. Returns when every
    // byte is copied: what the workers wrote is visible to the caller (and to what it calls
    // next, GGML included).
    void copy(const Span * spans, size_t n);

    // Copies the bytes [begin, end) of the concatenation of spans[0, n).
    static void copy_part(const Span * spans, size_t n, size_t begin, size_t end);

    // The bytes participant `k` has copied since creation (0: the caller's thread, k: the k-th
    // started worker; 0 beyond threads()), for the seam (sam3d_testing_copied_bytes).
    uint64_t copied(unsigned k) const;

private:
    struct Worker {
        std::thread thread;
        std::atomic<uint64_t> posted{0};  // the generation of the part posted to it
        std::atomic<uint64_t> done{0};    // the generation of the part it finished
        size_t begin = 0, end = 0;        // its part, written before `posted`
        std::atomic<uint64_t> copied{0};  // bytes of the parts it copied
    };
    void run(Worker & w);

    std::unique_ptr<Worker[]> workers_;
    unsigned started_ = 0;
    const Span * spans_ = nullptr;  // the copy in progress, written before a part is posted
    size_t n_ = 0;
    uint64_t generation_ = 0;
    std::atomic<uint64_t> caller_copied_{0};  // bytes of the parts the caller's thread copied
    std::mutex mutex_;  // guards sleepers_, and stop_'s store, with `wake_`
    std::condition_variable wake_;
    unsigned sleepers_ = 0;
    std::atomic<bool> stop_{false};  // also read by spinning workers, without the lock
};

}  // namespace sam3d
