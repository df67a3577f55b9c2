// Races between the entry points that may run at once on one session (rule 9: the session
// serializes its calls and queries; the getters of values fixed at creation need no lock), two
// sessions on one backend, and sam3d_last_error per thread.
//
// Each test checks values that a missing lock breaks: every call's outputs byte-exact, counters
// that add up exactly (at the end, and in every snapshot taken during the race), and queries
// that only return what the racing thread's calls allow. cpu-tsan runs them under
// ThreadSanitizer, where any report fails the test; the other variants check the values.
// Worker threads record problems and never assert: the test asserts after joining them.
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cases.h"
#include "rig.h"

using rig::Kind;
using rig::Rig;

namespace {

constexpr int kCalls = 50;      // calls per racing thread
constexpr int64_t kN = 1024;    // floats per tensor of the workload

// The ways to make one call of the workload. The zero-copy ones use the session's (one)
// current reservation, so one thread per session takes them.
enum class Path { Run, Copying, CopyingQueued, ZeroCopy, ZeroCopyQueued, Kept };

const char * path_name(Path p) {
    switch (p) {
        case Path::Run: return "run";
        case Path::Copying: return "copying submit";
        case Path::CopyingQueued: return "copying queued submit";
        case Path::ZeroCopy: return "zero-copy submit";
        case Path::ZeroCopyQueued: return "zero-copy queued submit";
        case Path::Kept: return "kept zero-copy submit";
    }
    return "?";
}

const std::vector<Path> kSubmits = {Path::Copying, Path::CopyingQueued, Path::ZeroCopy, Path::ZeroCopyQueued,
                                    Path::Kept};
const std::vector<Path> kZeroCopy = {Path::ZeroCopy, Path::ZeroCopyQueued, Path::Kept};

// Inputs of call `i` of thread `id`: different for every thread and call.
std::vector<float> input_a(int64_t n, int id, int i) { return rig::ramp(n, static_cast<float>(1 + 1000 * id + i)); }
std::vector<float> input_b(int64_t n, int id, int i) { return rig::ramp(n, static_cast<float>(5 + 2 * i + id)); }

bool same_bytes(const std::vector<float> & x, const std::vector<float> & y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// The first problem a thread saw, and how many.
struct Tally {
    int bad = 0;
    std::string first;
    void check(const std::string & problem) {
        if (!problem.empty() && bad++ == 0) {
            first = problem;
        }
    }
};

// One call on path `p` with inputs a, b; "" when its status and outputs are right, else what was wrong.
std::string one_call(sam3d_session * s, const cases::ScaleAdd & w, Path p, const std::vector<float> & a,
                     const std::vector<float> & b) {
    const size_t bytes = a.size() * sizeof(float);
    std::vector<float> out(a.size(), -1.0f);
    sam3d_ticket t = 0;
    sam3d_status st = SAM3D_OK;
    switch (p) {
        case Path::Run:
            st = cases::run(s, w, a.data(), b.data(), out.data());
            break;
        case Path::Copying:
            st = cases::submit(s, w, a.data(), b.data(), out.data(), 0, nullptr);
            break;
        case Path::CopyingQueued:
            st = cases::submit(s, w, a.data(), b.data(), out.data(), SAM3D_SUBMIT_QUEUED, &t);
            if (st == SAM3D_OK) {
                st = sam3d_session_wait(s, t);
            }
            break;
        case Path::ZeroCopy:
        case Path::ZeroCopyQueued:
        case Path::Kept: {
            const unsigned flags = SAM3D_SUBMIT_ZERO_COPY | (p == Path::ZeroCopyQueued ? SAM3D_SUBMIT_QUEUED : 0u) |
                                   (p == Path::Kept ? SAM3D_SUBMIT_KEEP_SLOTS : 0u);
            const cases::Slots sl = cases::reserve_scale_add(s, w);
            if (sl.a == nullptr) {
                return std::string(path_name(p)) + ": reserve failed (" + sam3d_last_error() + ")";
            }
            // Only this thread reserves on `s` and the ring has room: pinned exactly when staged.
            if (sam3d_session_reservation_pinned(s) != cases::staged(s)) {
                return std::string(path_name(p)) + ": reservation_pinned is " +
                       (cases::staged(s) ? "false" : "true") + " right after this thread's reserve";
            }
            std::memcpy(sl.a, a.data(), bytes);
            std::memcpy(sl.b, b.data(), bytes);
            st = cases::submit_scale_add(s, w, sl, flags, &t);
            if (st == SAM3D_OK && p == Path::ZeroCopyQueued) {
                st = sam3d_session_wait(s, t);
            }
            if (st == SAM3D_OK) {
                out.assign(sl.out, sl.out + a.size());
            }
            if (st == SAM3D_OK && p == Path::Kept) {
                st = sam3d_session_release(s, t);
            }
            break;
        }
    }
    if (st != SAM3D_OK) {
        return std::string(path_name(p)) + ": " + sam3d_status_name(st) + " (" + sam3d_last_error() + ")";
    }
    if (!same_bytes(out, cases::expected(a, b))) {
        return std::string(path_name(p)) + ": outputs are not this call's";
    }
    return "";
}

// kCalls calls on `s` from thread `id`, call i on paths[i % paths.size()].
void drive(sam3d_session * s, const cases::ScaleAdd & w, int id, const std::vector<Path> & paths, Tally & tally) {
    for (int i = 0; i < kCalls; ++i) {
        tally.check(one_call(s, w, paths[i % paths.size()], input_a(w.n, id, i), input_b(w.n, id, i)));
    }
}

// The CPU backend computes with one thread here: the races under test are between callers of
// the core, and GGML's thread pool, whose spinning workers make every call slow on a loaded
// machine, runs under TSan in the rest of the suite.
void one_compute_thread(Rig & r) {
    if (!rig::is_gpu(r.kind())) {
        ggml_backend_cpu_set_n_threads(r.backend(), 1);
    }
}

// Runs `a` and `b` on two threads started together; returns once both are done.
void together(const std::function<void()> & a, const std::function<void()> & b) {
    std::atomic<int> ready{0};
    auto start = [&ready](const std::function<void()> & f) {
        return std::thread([&ready, &f] {
            ready.fetch_add(1);
            while (ready.load() < 2) {
                std::this_thread::yield();
            }
            f();
        });
    };
    std::thread ta = start(a);
    std::thread tb = start(b);
    ta.join();
    tb.join();
}

// Calls `f` until `done` is set, and once more after; returns how many times it ran.
int poll(const std::atomic<bool> & done, const std::function<void()> & f) {
    int n = 0;
    for (bool last = false; !last; ++n) {
        last = done.load();
        f();
    }
    return n;
}

// "" when snapshot k is what calls of the workload (`bytes` per tensor; 2 uploads and 1 download
// each, every one staged or fallen back, none rejected or failed) add up to; else what is off.
std::string inconsistent(const sam3d_counters & k, uint64_t bytes) {
    uint64_t fallbacks = 0;
    for (uint64_t f : k.fallbacks) {
        fallbacks += f;
    }
    const auto off = [&](const char * what, uint64_t got, uint64_t want) {
        return std::string(what) + " " + std::to_string(got) + " for " + std::to_string(k.calls) + " calls (want " +
               std::to_string(want) + ")";
    };
    if (k.rejected_calls + k.failed_calls != 0) return off("rejected + failed calls", k.rejected_calls + k.failed_calls, 0);
    if (k.async_uploads + k.sync_uploads != 2 * k.calls) return off("uploads", k.async_uploads + k.sync_uploads, 2 * k.calls);
    if (k.async_downloads + k.sync_downloads != k.calls) return off("downloads", k.async_downloads + k.sync_downloads, k.calls);
    if (k.bytes_uploaded != 2 * bytes * k.calls) return off("bytes_uploaded", k.bytes_uploaded, 2 * bytes * k.calls);
    if (k.bytes_downloaded != bytes * k.calls) return off("bytes_downloaded", k.bytes_downloaded, bytes * k.calls);
    if (k.pinned_batches + fallbacks != k.calls) return off("pinned_batches + fallbacks", k.pinned_batches + fallbacks, k.calls);
    return "";
}

// The counters of `s` after exactly `calls` successful calls of workload `w`, all on the
// session's one path: pinned staging when it stages, else its static fallback.
void expect_counted(Rig & r, sam3d_session * s, const cases::ScaleAdd & w, uint64_t calls) {
    const sam3d_counters k = r.counters(s);
    EXPECT_EQ(k.calls, calls);
    EXPECT_EQ(inconsistent(k, cases::Call::bytes(w)), "");
    const bool staged = cases::staged(s);
    EXPECT_EQ(k.pinned_batches, staged ? calls : 0u);
    EXPECT_EQ(k.async_uploads, staged ? 2 * calls : 0u);
    EXPECT_EQ(k.async_downloads, staged ? calls : 0u);
    cases::expect_fallbacks(k, staged ? SAM3D_FALLBACK_COUNT : sam3d_session_static_fallback(s), staged ? 0 : calls);
}

size_t align_up(size_t n, size_t a) { return a <= 1 ? n : (n + a - 1) / a * a; }

}  // namespace

class Concurrency : public testing::TestWithParam<Kind> {
   protected:
    // One session with batching on, on the workload's tensors.
    void SetUp() override {
        r_ = std::make_unique<Rig>(GetParam());
        if (!r_->ok()) {
            return;
        }
        one_compute_thread(*r_);
        w_ = cases::scale_add(*r_, kN);
        r_->alloc();
        s_ = r_->session(SAM3D_BATCHING_ON);
    }
    std::unique_ptr<Rig> r_;
    cases::ScaleAdd w_;
    sam3d_session * s_ = nullptr;
};

// run/run: two threads' calls on one session are each exact and counted once.
TEST_P(Concurrency, RunAgainstRun) {
    RIG_REQUIRE(*r_);
    Tally t0, t1;
    together([&] { drive(s_, w_, 0, {Path::Run}, t0); }, [&] { drive(s_, w_, 1, {Path::Run}, t1); });
    EXPECT_EQ(t0.bad, 0) << t0.first;
    EXPECT_EQ(t1.bad, 0) << t1.first;
    expect_counted(*r_, s_, w_, 2 * kCalls);
}

// run/submit: runs race every form of submit (copying, queued, zero-copy, kept); while the
// submitting thread holds ring regions, runs stage through free ones.
TEST_P(Concurrency, RunAgainstEverySubmit) {
    RIG_REQUIRE(*r_);
    Tally t0, t1;
    together([&] { drive(s_, w_, 0, {Path::Run}, t0); }, [&] { drive(s_, w_, 1, kSubmits, t1); });
    EXPECT_EQ(t0.bad, 0) << t0.first;
    EXPECT_EQ(t1.bad, 0) << t1.first;
    expect_counted(*r_, s_, w_, 2 * kCalls);
}

// submit/wait: one thread submits queued copying calls, another waits for each ticket and
// checks its outputs; nothing is outstanding or held afterwards.
TEST_P(Concurrency, QueuedSubmitOnOneThreadWaitOnAnother) {
    RIG_REQUIRE(*r_);
    std::vector<std::vector<float>> out(kCalls, std::vector<float>(kN, -1.0f));
    std::mutex m;
    std::deque<std::pair<int, sam3d_ticket>> handed;  // (call, ticket), submitted and not yet waited
    Tally submitter, waiter;
    together(
        [&] {
            for (int i = 0; i < kCalls; ++i) {
                const std::vector<float> a = input_a(kN, 0, i), b = input_b(kN, 0, i);
                sam3d_ticket t = 0;
                const sam3d_status st = cases::submit(s_, w_, a.data(), b.data(), out[i].data(), SAM3D_SUBMIT_QUEUED, &t);
                if (st != SAM3D_OK || t == 0) {
                    submitter.check("submit " + std::to_string(i) + ": " + sam3d_status_name(st) + " " + sam3d_last_error());
                    t = 0;
                }
                std::lock_guard<std::mutex> l(m);
                handed.emplace_back(i, t);
            }
        },
        [&] {
            for (int done = 0; done < kCalls;) {
                std::pair<int, sam3d_ticket> next{-1, 0};
                {
                    std::lock_guard<std::mutex> l(m);
                    if (!handed.empty()) {
                        next = handed.front();
                        handed.pop_front();
                    }
                }
                if (next.first < 0) {
                    std::this_thread::yield();
                    continue;
                }
                ++done;
                if (next.second == 0) {
                    continue;  // its submit failed (counted by the submitter)
                }
                const int i = next.first;
                const sam3d_status st = sam3d_session_wait(s_, next.second);
                if (st != SAM3D_OK) {
                    waiter.check("wait " + std::to_string(i) + ": " + sam3d_status_name(st) + " " + sam3d_last_error());
                } else if (!same_bytes(out[i], cases::expected(input_a(kN, 0, i), input_b(kN, 0, i)))) {
                    waiter.check("call " + std::to_string(i) + ": outputs are not its own after its wait");
                }
            }
        });
    EXPECT_EQ(submitter.bad, 0) << submitter.first;
    EXPECT_EQ(waiter.bad, 0) << waiter.first;
    EXPECT_EQ(sam3d_session_outstanding(s_), 0u);
    EXPECT_EQ(sam3d_session_staging_in_flight(s_), 0u) << "copying calls give their regions back at their wait";
    expect_counted(*r_, s_, w_, kCalls);
}

// reserve/submit: one thread reserves and submits zero-copy calls while another submits
// copying ones (queued and not); neither touches the other's slots or regions.
TEST_P(Concurrency, ReserveAgainstCopyingSubmit) {
    RIG_REQUIRE(*r_);
    Tally t0, t1;
    together([&] { drive(s_, w_, 0, kZeroCopy, t0); },
             [&] { drive(s_, w_, 1, {Path::CopyingQueued, Path::Copying}, t1); });
    EXPECT_EQ(t0.bad, 0) << t0.first;
    EXPECT_EQ(t1.bad, 0) << t1.first;
    expect_counted(*r_, s_, w_, 2 * kCalls);
}

// release/reserve: one thread makes kept calls and hands each ticket to another, which checks
// the kept output slot and releases it while the first thread goes on reserving. Kept slots
// stay intact until released; once all are released, the next reservation holds only itself.
TEST_P(Concurrency, ReleaseAgainstReserve) {
    RIG_REQUIRE(*r_);
    struct Kept {
        int call;
        sam3d_ticket ticket;
        const float * out;
    };
    std::mutex m;
    std::deque<Kept> handed;
    Tally keeper, releaser;
    together(
        [&] {
            for (int i = 0; i < kCalls; ++i) {
                const std::vector<float> a = input_a(kN, 0, i), b = input_b(kN, 0, i);
                const cases::Slots sl = cases::reserve_scale_add(s_, w_);
                Kept k{i, 0, sl.out};
                if (sl.a != nullptr) {
                    std::memcpy(sl.a, a.data(), kN * sizeof(float));
                    std::memcpy(sl.b, b.data(), kN * sizeof(float));
                    const sam3d_status st =
                        cases::submit_scale_add(s_, w_, sl, SAM3D_SUBMIT_ZERO_COPY | SAM3D_SUBMIT_KEEP_SLOTS, &k.ticket);
                    if (st != SAM3D_OK || k.ticket == 0) {
                        keeper.check("kept call " + std::to_string(i) + ": " + sam3d_status_name(st) + " " +
                                     sam3d_last_error());
                        k.ticket = 0;
                    }
                } else {
                    keeper.check("reserve " + std::to_string(i) + " failed");
                }
                std::lock_guard<std::mutex> l(m);
                handed.push_back(k);
            }
        },
        [&] {
            for (int done = 0; done < kCalls;) {
                Kept k{-1, 0, nullptr};
                {
                    std::lock_guard<std::mutex> l(m);
                    if (!handed.empty()) {
                        k = handed.front();
                        handed.pop_front();
                    }
                }
                if (k.call < 0) {
                    std::this_thread::yield();
                    continue;
                }
                ++done;
                if (k.ticket == 0) {
                    continue;
                }
                const std::vector<float> got(k.out, k.out + kN);
                if (!same_bytes(got, cases::expected(input_a(kN, 0, k.call), input_b(kN, 0, k.call)))) {
                    releaser.check("kept call " + std::to_string(k.call) + ": its output slot changed before its release");
                }
                if (sam3d_session_release(s_, k.ticket) != SAM3D_OK) {
                    releaser.check("release " + std::to_string(k.call) + ": " + sam3d_last_error());
                }
                if (sam3d_session_release(s_, k.ticket) != SAM3D_ERR_INVALID_ARGUMENT) {
                    releaser.check("release " + std::to_string(k.call) + " twice was accepted");
                }
            }
        });
    EXPECT_EQ(keeper.bad, 0) << keeper.first;
    EXPECT_EQ(releaser.bad, 0) << releaser.first;
    sam3d_slot_request one = {64};
    void * p = nullptr;
    ASSERT_EQ(sam3d_session_reserve(s_, &one, 1, &p), SAM3D_OK) << sam3d_last_error();
    EXPECT_EQ(sam3d_session_staging_in_flight(s_),
              cases::staged(s_) ? align_up(64, sam3d_session_staging_alignment(s_)) : 0u)
        << "every released kept region is given back at the next reservation";
    expect_counted(*r_, s_, w_, kCalls);
}

// counters/run: every snapshot taken while another thread runs calls adds up (the calls are
// counted whole), and the count never goes back.
TEST_P(Concurrency, CountersAgainstRun) {
    RIG_REQUIRE(*r_);
    std::atomic<bool> done{false};
    Tally runner, reader;
    together([&] { drive(s_, w_, 0, {Path::Run}, runner); done = true; },
             [&] {
                 uint64_t last = 0;
                 poll(done, [&] {
                     const sam3d_counters k = r_->counters(s_);
                     reader.check(inconsistent(k, cases::Call::bytes(w_)));
                     if (k.calls < last || k.calls > static_cast<uint64_t>(kCalls)) {
                         reader.check("calls went from " + std::to_string(last) + " to " + std::to_string(k.calls));
                     }
                     last = k.calls;
                 });
             });
    EXPECT_EQ(runner.bad, 0) << runner.first;
    EXPECT_EQ(reader.bad, 0) << reader.first;
    expect_counted(*r_, s_, w_, kCalls);
}

// reset_counters/submit: resets race queued submits; every snapshot after a reset adds up,
// and staging_bytes (never reset) is the ring's whole allocation or nothing yet.
TEST_P(Concurrency, ResetCountersAgainstSubmit) {
    RIG_REQUIRE(*r_);
    const uint64_t ring = cases::staged(s_) ? SAM3D_STAGING_BOUND_BYTES : 0;
    std::atomic<bool> done{false};
    Tally submitter, resetter;
    together([&] { drive(s_, w_, 0, {Path::CopyingQueued}, submitter); done = true; },
             [&] {
                 poll(done, [&] {
                     sam3d_session_reset_counters(s_);
                     const sam3d_counters k = r_->counters(s_);
                     resetter.check(inconsistent(k, cases::Call::bytes(w_)));
                     if (k.staging_bytes != 0 && k.staging_bytes != ring) {
                         resetter.check("staging_bytes " + std::to_string(k.staging_bytes) + " after a reset");
                     }
                 });
             });
    EXPECT_EQ(submitter.bad, 0) << submitter.first;
    EXPECT_EQ(resetter.bad, 0) << resetter.first;
    sam3d_session_reset_counters(s_);
    EXPECT_EQ(r_->counters(s_).staging_bytes, ring);
    EXPECT_EQ(one_call(s_, w_, Path::CopyingQueued, input_a(kN, 2, 0), input_b(kN, 2, 0)), "");
    expect_counted(*r_, s_, w_, 1);
}

// outstanding / staging_in_flight / reservation_pinned against zero-copy calls of another
// thread: they only ever return what that thread's one call at a time allows (at most one
// ticket outstanding; its one region of three slots held, or nothing before the first reserve).
TEST_P(Concurrency, QueriesAgainstSubmit) {
    RIG_REQUIRE(*r_);
    const bool staged = cases::staged(s_);
    const size_t region = staged ? 3 * align_up(cases::Call::bytes(w_), sam3d_session_staging_alignment(s_)) : 0;
    std::atomic<bool> done{false};
    Tally submitter, reader;
    together([&] { drive(s_, w_, 0, kZeroCopy, submitter); done = true; },
             [&] {
                 poll(done, [&] {
                     const size_t outstanding = sam3d_session_outstanding(s_);
                     const size_t in_flight = sam3d_session_staging_in_flight(s_);
                     const bool pinned = sam3d_session_reservation_pinned(s_);
                     if (outstanding > 1) {
                         reader.check("outstanding " + std::to_string(outstanding));
                     }
                     if (in_flight != 0 && in_flight != region) {
                         reader.check("staging_in_flight " + std::to_string(in_flight) + " (one region is " +
                                      std::to_string(region) + ")");
                     }
                     if (pinned && !staged) {
                         reader.check("a reservation is pinned on a session that does not stage");
                     }
                 });
             });
    EXPECT_EQ(submitter.bad, 0) << submitter.first;
    EXPECT_EQ(reader.bad, 0) << reader.first;
    EXPECT_EQ(sam3d_session_outstanding(s_), 0u);
    EXPECT_EQ(sam3d_session_staging_in_flight(s_), region) << "the last call's region is held until the next reserve";
    expect_counted(*r_, s_, w_, kCalls);
}

// The getters of values fixed at creation (batching, static fallback, staging alignment)
// against runs: always the creation-time values.
TEST_P(Concurrency, CreationGettersAgainstRun) {
    RIG_REQUIRE(*r_);
    const sam3d_fallback fallback = sam3d_session_static_fallback(s_);
    const size_t alignment = sam3d_session_staging_alignment(s_);
    EXPECT_EQ(fallback, GetParam() == Kind::Cpu ? SAM3D_FALLBACK_NO_ASYNC_CAPS : SAM3D_FALLBACK_COUNT);
    std::atomic<bool> done{false};
    Tally runner, reader;
    together([&] { drive(s_, w_, 0, {Path::Run}, runner); done = true; },
             [&] {
                 poll(done, [&] {
                     if (!sam3d_session_batching(s_) || sam3d_session_static_fallback(s_) != fallback ||
                         sam3d_session_staging_alignment(s_) != alignment) {
                         reader.check("a creation-time value changed during a run");
                     }
                 });
             });
    EXPECT_EQ(runner.bad, 0) << runner.first;
    EXPECT_EQ(reader.bad, 0) << reader.first;
    expect_counted(*r_, s_, w_, kCalls);
}

// sam3d_last_error is per thread: each thread's rejected calls leave its own message, and its
// successful calls clear only its own, while the other thread fails differently on the same
// session.
TEST_P(Concurrency, LastErrorIsPerThread) {
    RIG_REQUIRE(*r_);
    const char * where[2] = {nullptr, nullptr};
    Tally t[2];
    const auto thread = [&](int id) {
        where[id] = sam3d_last_error();
        for (int i = 0; i < kCalls; ++i) {
            const std::vector<float> a = input_a(kN, id, i), b = input_b(kN, id, i);
            std::vector<float> out(kN, -1.0f);
            cases::Call c(w_, a.data(), b.data(), out.data());
            // Thread 0: an upload of 0 bytes; thread 1: a download with no tensor.
            const std::string want = id == 0 ? "extent: uploads[1].size" : "null_tensor: downloads[0].tensor is NULL";
            if (id == 0) {
                c.ups[1].size = 0;
            } else {
                c.downs[0].tensor = nullptr;
            }
            const sam3d_status st = sam3d_session_run(s_, &c.call);
            const std::string msg = sam3d_last_error();
            if (st != (id == 0 ? SAM3D_ERR_EXTENT : SAM3D_ERR_NULL_TENSOR) || msg.rfind(want, 0) != 0) {
                t[id].check("rejected call " + std::to_string(i) + ": " + sam3d_status_name(st) + ", message '" + msg +
                            "' (want it to start with '" + want + "')");
            }
            t[id].check(one_call(s_, w_, Path::Run, a, b));
            if (std::string(sam3d_last_error()) != "") {
                t[id].check(std::string("after a successful call the message is '") + sam3d_last_error() + "'");
            }
        }
    };
    together([&] { thread(0); }, [&] { thread(1); });
    EXPECT_EQ(t[0].bad, 0) << t[0].first;
    EXPECT_EQ(t[1].bad, 0) << t[1].first;
    EXPECT_NE(where[0], where[1]) << "two threads share one message";
    const sam3d_counters k = r_->counters(s_);
    EXPECT_EQ(k.rejected_calls, 2u * kCalls);
    EXPECT_EQ(k.calls, 2u * kCalls);
    EXPECT_EQ(k.bytes_uploaded, 2u * kCalls * 2 * cases::Call::bytes(w_)) << "rejected calls count no bytes";
}

INSTANTIATE_TEST_SUITE_P(AllBackends, Concurrency, testing::ValuesIn(rig::kinds()), rig::param_name);

// Two sessions on one backend share no state of the core: each thread drives its own session
// (every path, zero-copy included) on its own tensors; outputs are exact and each session's
// counters are exactly its own calls. CPU backend only: GGML promises nothing for concurrent
// calls on one backend; the CPU backend's only mutable state is its work buffer, which this F32
// graph does not use (ggml_graph_plan gives F32 scale and add no work data).
class TwoSessions : public testing::TestWithParam<Kind> {};

TEST_P(TwoSessions, OnOneBackendRaceWithoutSharingState) {
    // Room for the tensors of two workloads and a second graph in the rig's context.
    Rig r(GetParam(), 64 + ggml_graph_overhead() / ggml_tensor_overhead() + 1);
    RIG_REQUIRE(r);
    one_compute_thread(r);
    const cases::ScaleAdd w0 = cases::scale_add(r, kN);
    const cases::ScaleAdd w1 = cases::scale_add(r, kN + 3);  // a size of its own: counted bytes tell the sessions apart
    r.alloc();
    sam3d_session * s0 = r.session(SAM3D_BATCHING_ON);
    sam3d_session * s1 = r.session(SAM3D_BATCHING_ON);
    std::vector<Path> every = kSubmits;
    every.push_back(Path::Run);
    Tally t0, t1;
    together([&] { drive(s0, w0, 0, every, t0); }, [&] { drive(s1, w1, 1, every, t1); });
    EXPECT_EQ(t0.bad, 0) << t0.first;
    EXPECT_EQ(t1.bad, 0) << t1.first;
    expect_counted(r, s0, w0, kCalls);
    expect_counted(r, s1, w1, kCalls);
}

INSTANTIATE_TEST_SUITE_P(CpuBackend, TwoSessions, testing::Values(Kind::Cpu, Kind::CpuStaged), rig::param_name);
