// The C API: the session lock (rule 9) and no exception across the API; every refusal but a
// NULL session is validate.cpp's.
#include <mutex>

#include "calls.h"
#include "runs.h"
#include "session.h"

namespace {

// Runs `f` with the session's lock held; no exception crosses the C API: an allocation failure
// becomes SAM3D_ERR_OUT_OF_MEMORY naming `what` once the session's outstanding work completed
// (rule 5), any other exception SAM3D_ERR_INTERNAL.
template <typename F>
sam3d_status serialized(sam3d_session & s, const char * what, F && f) {
    try {
        std::lock_guard<std::mutex> lock(s.mutex);
        sam3d_status st = SAM3D_OK;
        try {
            st = f();
        } catch (const std::bad_alloc &) {
            sam3d::complete_outstanding(s);  // rule 5: what the message below says
            throw;
        }
        if (st == SAM3D_OK) {
            sam3d::clear_error();
        }
        return st;
    } catch (const std::bad_alloc &) {
        return sam3d::fail(SAM3D_ERR_OUT_OF_MEMORY, std::string(what) + ": out of host memory (the session's "
                                                                         "outstanding work was completed)");
    } catch (const std::exception & e) {
        return sam3d::fail(SAM3D_ERR_INTERNAL, std::string(what) + ": " + e.what());
    } catch (...) {
        return sam3d::fail(SAM3D_ERR_INTERNAL, std::string(what) + ": an exception that is not a std::exception");
    }
}

// The one refusal made before the lock: there is no session to lock (validate.cpp makes the rest).
sam3d_status no_session() { return sam3d::fail(SAM3D_ERR_INVALID_ARGUMENT, "session is NULL"); }

// Creation with the same guarantees (nothing is held yet, so no lock).
sam3d_status guarded_create(ggml_backend_t backend, const sam3d_session_options * options,
                            const sam3d_ggml_seam * seam, sam3d_session ** out) {
    try {
        const sam3d_status st = sam3d::create(backend, options, seam, out);
        if (st == SAM3D_OK) {
            sam3d::clear_error();
        }
        return st;
    } catch (const std::bad_alloc &) {
        return sam3d::fail(SAM3D_ERR_OUT_OF_MEMORY, "allocating the session");
    } catch (const std::exception & e) {
        return sam3d::fail(SAM3D_ERR_INTERNAL, std::string("creating the session: ") + e.what());
    } catch (...) {
        return sam3d::fail(SAM3D_ERR_INTERNAL, "creating the session: an exception that is not a std::exception");
    }
}

}  // namespace

extern "C" {

sam3d_session_options sam3d_session_default_options(void) {
    sam3d_session_options o{};
    o.struct_size = sizeof o;
    o.batching = SAM3D_BATCHING_FROM_ENV;
    return o;
}

sam3d_ggml_seam sam3d_testing_default_seam(void) {
    sam3d_ggml_seam s{};
    s.perf_logger = -1;
    s.drain_before_compute = -1;
    return s;
}

sam3d_status sam3d_session_create(ggml_backend_t backend, const sam3d_session_options * options,
                                  sam3d_session ** out) {
    return guarded_create(backend, options, nullptr, out);
}

sam3d_status sam3d_testing_session_create(ggml_backend_t backend, const sam3d_session_options * options,
                                          const sam3d_ggml_seam * seam, sam3d_session ** out) {
    return guarded_create(backend, options, seam, out);
}

void sam3d_testing_fail_allocation(sam3d_session * session, uint64_t n) {
    if (session != nullptr) {
        std::lock_guard<std::mutex> lock(session->mutex);
        session->alloc.arm(n);
    }
}

uint64_t sam3d_testing_allocations(sam3d_session * session) {
    if (session == nullptr) {
        return 0;
    }
    std::lock_guard<std::mutex> lock(session->mutex);
    return session->alloc.count();
}

void sam3d_session_free(sam3d_session * session) {
    if (session != nullptr) {
        sam3d::close(*session);
        delete session;
    }
}

sam3d_status sam3d_session_run(sam3d_session * session, const sam3d_call * call) {
    if (session == nullptr) {
        return no_session();
    }
    return serialized(*session, "bookkeeping for the call", [&] { return sam3d::run_locked(*session, call); });
}

sam3d_status sam3d_session_reserve(sam3d_session * session, const sam3d_slot_request * requests, size_t n,
                                   void ** slots) {
    if (session == nullptr) {
        return no_session();
    }
    return serialized(*session, "slots of the reservation",
                      [&] { return sam3d::reserve_locked(*session, requests, n, slots); });
}

bool sam3d_session_reservation_pinned(const sam3d_session * session) {
    if (session == nullptr) {
        return false;
    }
    std::lock_guard<std::mutex> lock(session->mutex);
    return sam3d::reservation_pinned(*session);
}

sam3d_status sam3d_session_submit(sam3d_session * session, const sam3d_call * call, unsigned flags,
                                  sam3d_ticket * ticket) {
    if (session == nullptr) {
        if (ticket != nullptr) {
            *ticket = 0;
        }
        return no_session();
    }
    return serialized(*session, "bookkeeping for the call",
                      [&] { return sam3d::submit_locked(*session, call, flags, ticket); });
}

sam3d_status sam3d_session_wait(sam3d_session * session, sam3d_ticket ticket) {
    if (session == nullptr) {
        return no_session();
    }
    return serialized(*session, "waiting for the call", [&] { return sam3d::wait_locked(*session, ticket); });
}

sam3d_status sam3d_session_release(sam3d_session * session, sam3d_ticket ticket) {
    if (session == nullptr) {
        return no_session();
    }
    return serialized(*session, "releasing kept slots", [&] { return sam3d::release_locked(*session, ticket); });
}

sam3d_status sam3d_session_add_area(sam3d_session * session, const struct ggml_tensor * area) {
    if (session == nullptr) {
        return no_session();
    }
    return serialized(*session, "declaring the area", [&] { return sam3d::add_area(*session, area); });
}

sam3d_status sam3d_session_remove_area(sam3d_session * session, const struct ggml_tensor * area) {
    if (session == nullptr) {
        return no_session();
    }
    return serialized(*session, "withdrawing the area", [&] { return sam3d::remove_area(*session, area); });
}

size_t sam3d_session_areas(sam3d_session * session) {
    if (session == nullptr) {
        return 0;
    }
    std::lock_guard<std::mutex> lock(session->mutex);
    return session->areas.size();
}

size_t sam3d_session_outstanding(sam3d_session * session) {
    if (session == nullptr) {
        return 0;
    }
    std::lock_guard<std::mutex> lock(session->mutex);
    return sam3d::outstanding(*session);
}

size_t sam3d_session_staging_in_flight(sam3d_session * session) {
    if (session == nullptr) {
        return 0;
    }
    std::lock_guard<std::mutex> lock(session->mutex);
    return sam3d::staging_in_flight(*session);
}

bool sam3d_session_batching(const sam3d_session * session) { return session != nullptr && session->batching; }

sam3d_fallback sam3d_session_static_fallback(const sam3d_session * session) {
    return session ? session->static_fallback : SAM3D_FALLBACK_COUNT;
}

unsigned sam3d_testing_copied_bytes(sam3d_session * session, uint64_t * bytes, unsigned n) {
    if (session == nullptr) {
        return 0;
    }
    std::lock_guard<std::mutex> lock(session->mutex);
    const unsigned threads = session->copier->threads();
    for (unsigned k = 0; k < n && k < threads && bytes != nullptr; ++k) {
        bytes[k] = session->copier->copied(k);
    }
    return threads;
}

unsigned sam3d_testing_copy_parts(sam3d_session * session, size_t bytes) {
    return session ? session->copier->parts(bytes) : 0;
}

void sam3d_testing_hold_copy_threads(sam3d_session * session, sam3d_testing_hold held) {
    if (session != nullptr) {
        std::lock_guard<std::mutex> lock(session->mutex);
        session->copier->hold(held == SAM3D_TESTING_HOLD_WORKERS, held == SAM3D_TESTING_HOLD_CALLER);
    }
}

unsigned sam3d_session_copy_threads(const sam3d_session * session) {
    return session ? session->copier->threads() : 1;
}

bool sam3d_session_duplex(const sam3d_session * session) { return session != nullptr && session->second != nullptr; }

size_t sam3d_session_staging_alignment(const sam3d_session * session) { return session ? session->alignment : 0; }

sam3d_status sam3d_session_counters(sam3d_session * session, sam3d_counters * out) {
    if (session == nullptr || out == nullptr) {
        return sam3d::fail(SAM3D_ERR_INVALID_ARGUMENT, session == nullptr ? "session is NULL" : "out is NULL");
    }
    sam3d_counters snapshot{};
    {
        std::lock_guard<std::mutex> lock(session->mutex);
        snapshot = session->counters;
    }
    // A query: on success the thread's last error stays the last failed call's.
    return sam3d::write_extensible(snapshot, out, "counters");
}

void sam3d_session_reset_counters(sam3d_session * session) {
    if (session == nullptr) {
        return;
    }
    std::lock_guard<std::mutex> lock(session->mutex);
    sam3d::reset_counters(*session);
}

const char * sam3d_last_error(void) { return sam3d::last_error(); }

const char * sam3d_status_name(sam3d_status status) {
    switch (status) {
        case SAM3D_OK: return "ok";
        case SAM3D_ERR_INVALID_ARGUMENT: return "invalid_argument";
        case SAM3D_ERR_NULL_TENSOR: return "null_tensor";
        case SAM3D_ERR_NULL_POINTER: return "null_pointer";
        case SAM3D_ERR_UNALLOCATED_TENSOR: return "unallocated_tensor";
        case SAM3D_ERR_FOREIGN_TENSOR: return "foreign_tensor";
        case SAM3D_ERR_EXTENT: return "extent";
        case SAM3D_ERR_NOT_CONTIGUOUS: return "not_contiguous";
        case SAM3D_ERR_OVERLAPPING_UPLOADS: return "overlapping_uploads";
        case SAM3D_ERR_OVERLAPPING_OUTPUTS: return "overlapping_outputs";
        case SAM3D_ERR_BAD_ENV: return "bad_env";
        case SAM3D_ERR_COMPUTE: return "compute";
        case SAM3D_ERR_OUT_OF_MEMORY: return "out_of_memory";
        case SAM3D_ERR_INTERNAL: return "internal";
    }
    return "unknown_status";
}

const char * sam3d_fallback_name(sam3d_fallback reason) {
    switch (reason) {
        case SAM3D_FALLBACK_NO_ASYNC_CAPS: return "no_async_caps";
        case SAM3D_FALLBACK_FOREIGN_HOST_BUFFER: return "foreign_host_buffer";
        case SAM3D_FALLBACK_OVERSIZED: return "oversized";
        case SAM3D_FALLBACK_PINNED_UNAVAILABLE: return "pinned_unavailable";
        case SAM3D_FALLBACK_COUNT: break;
    }
    return "none";
}

}  // extern "C"
