#include "execute.h"

#include <cstring>

namespace sam3d {

std::string compute_message(ggml_status st) {
    return std::string("graph compute returned ") + ggml_status_to_string(st) +
           " (its uploads were completed before returning, with the session's other outstanding work)";
}

sam3d_status run_sync(Session & s, const sam3d_call & c, ggml_status * compute) {
    complete_all(s);  // the synchronous path may not overtake queued work
    const uint64_t t0 = now_ns();
    for (size_t i = 0; i < c.n_uploads; ++i) {
        const sam3d_upload & u = c.uploads[i];
        s.ggml.tensor_set(u.tensor, u.src, u.offset, u.size);
    }
    if (c.graph != nullptr) {
        const ggml_status st = s.ggml.graph_compute(s.backend, c.graph);
        if (st != GGML_STATUS_SUCCESS) {
            // ggml_backend_graph_compute has synchronized: nothing is outstanding.
            s.counters.sync_path_ns += now_ns() - t0;
            if (compute != nullptr) {
                *compute = st;
            }
            return fail(SAM3D_ERR_COMPUTE, std::string("graph compute returned ") + ggml_status_to_string(st));
        }
    }
    for (size_t i = 0; i < c.n_downloads; ++i) {
        const sam3d_download & d = c.downloads[i];
        s.ggml.tensor_get(d.tensor, d.dst, d.offset, d.size);
    }
    s.counters.sync_path_ns += now_ns() - t0;
    s.counters.sync_uploads += c.n_uploads;
    s.counters.sync_downloads += c.n_downloads;
    return SAM3D_OK;
}

namespace {

// Rule 5: completes everything the session submitted, whatever happened.
void drain(Session & s) {
    const uint64_t t0 = now_ns();
    s.ggml.synchronize(s.backend);
    mark_all_done(s);
    s.counters.synchronize_ns += now_ns() - t0;
}

// A6: a staged call's uploads may not overtake the outstanding queued graphs. GGML's Vulkan
// backend with a dedicated transfer queue orders a graph after the uploads submitted before it
// but no upload after an earlier graph; its event_wait makes the transfer queue wait for the
// event (elsewhere one in-order queue already orders them and the wait only restates it).
void order_uploads(Session & s, const sam3d_call & c, bool completed_here) {
    if (completed_here) {
        complete_all(s);  // a call completed on return first completes outstanding queued work
        return;
    }
    const Call * newest = nullptr;  // s.calls is in submission order
    for (const Call & o : s.calls) {
        newest = o.done() ? newest : &o;
    }
    if (newest == nullptr || c.n_uploads == 0) {
        return;
    }
    if (newest->event != nullptr) {
        // The calls before it complete before it: their graphs and downloads share one queue.
        // Enqueuing the wait is host time enqueuing (rule 8), counted with the call's enqueue.
        const uint64_t t0 = now_ns();
        try {
            s.ggml.event_wait(s.backend, newest->event);
        } catch (...) {
            drain(s);  // rule 5: the outstanding calls complete before the exception leaves
            throw;
        }
        s.counters.enqueue_ns += now_ns() - t0;
    } else if (s.events) {
        complete_all(s);  // its event could not be created: nothing to wait on
    }
}

}  // namespace

sam3d_status execute_staged(Session & s, const sam3d_call & c, uint8_t * region, Call * queued) {
    const bool copying = region != nullptr;
    order_uploads(s, c, queued == nullptr);
    s.up_ptrs.resize(c.n_uploads);      // capacity reserved by the caller
    s.down_ptrs.resize(c.n_downloads);
    // Layout (rule 2): inputs, then outputs, at aligned offsets of the region; or the slots.
    size_t at = 0;
    for (size_t i = 0; i < c.n_uploads; ++i) {
        s.up_ptrs[i] = copying ? region + at : static_cast<const uint8_t *>(c.uploads[i].src);
        at += align_up(c.uploads[i].size, s.alignment);
    }
    for (size_t i = 0; i < c.n_downloads; ++i) {
        s.down_ptrs[i] = copying ? region + at : static_cast<uint8_t *>(c.downloads[i].dst);
        at += align_up(c.downloads[i].size, s.alignment);
    }
    uint64_t t = now_ns();
    if (copying) {
        for (size_t i = 0; i < c.n_uploads; ++i) {
            std::memcpy(const_cast<uint8_t *>(s.up_ptrs[i]), c.uploads[i].src, c.uploads[i].size);
        }
        const uint64_t t2 = now_ns();
        s.counters.copy_ns += t2 - t;
        t = t2;
    }
    try {
        for (size_t i = 0; i < c.n_uploads; ++i) {
            const sam3d_upload & u = c.uploads[i];
            s.ggml.tensor_set_async(s.backend, u.tensor, s.up_ptrs[i], u.offset, u.size);
        }
        if (c.graph != nullptr) {
            if (s.perf_logger && s.drain_before_compute) {
                // Rule 7: GGML_VK_PERF_LOGGER's query-pool reset asserts that no transfer context
                // is open (GGML_ASSERT(ctx->compute_ctx.expired())); diagnostic runs only.
                s.counters.enqueue_ns += now_ns() - t;
                drain(s);
                t = now_ns();
            }
            const ggml_status st = s.ggml.graph_compute_async(s.backend, c.graph);
            if (st != GGML_STATUS_SUCCESS) {
                s.counters.enqueue_ns += now_ns() - t;
                drain(s);  // rule 5: nothing of the session stays outstanding
                if (queued != nullptr) {
                    queued->status = SAM3D_ERR_COMPUTE;
                    queued->compute_status = st;
                    queued->state = Call::State::Complete;
                }
                return fail(SAM3D_ERR_COMPUTE, compute_message(st));
            }
        }
        for (size_t i = 0; i < c.n_downloads; ++i) {
            const sam3d_download & d = c.downloads[i];
            s.ggml.tensor_get_async(s.backend, d.tensor, s.down_ptrs[i], d.offset, d.size);
        }
        if (queued != nullptr) {
            if (queued->event != nullptr) {
                s.ggml.event_record(queued->event, s.backend);
            }
            s.counters.enqueue_ns += now_ns() - t;
            queued->state = Call::State::InFlight;
            if (copying) {
                s.alloc.reserve(queued->copies, c.n_downloads);  // reserved before submission: no allocation
                for (size_t i = 0; i < c.n_downloads; ++i) {
                    queued->copies.push_back({c.downloads[i].dst, s.down_ptrs[i], c.downloads[i].size});
                }
            }
        } else {
            s.counters.enqueue_ns += now_ns() - t;
            drain(s);
            if (copying) {
                t = now_ns();
                for (size_t i = 0; i < c.n_downloads; ++i) {
                    std::memcpy(c.downloads[i].dst, s.down_ptrs[i], c.downloads[i].size);
                }
                s.counters.copy_ns += now_ns() - t;
            }
        }
    } catch (...) {
        drain(s);  // rule 5, for an exception from a GGML entry point too
        throw;
    }
    s.counters.async_uploads += c.n_uploads;
    s.counters.async_downloads += c.n_downloads;
    return SAM3D_OK;
}

}  // namespace sam3d
