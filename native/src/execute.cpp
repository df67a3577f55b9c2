#include "execute.h"

#include <utility>

#include "runs.h"
#include "validate.h"


namespace sam3d {

std::string compute_message(ggml_status st) {
    return std::string("graph compute returned ") + ggml_status_to_string(st) +
           " (its uploads were completed before returning, with the session's other outstanding work)";
}

ggml_status run_blocking(Session & s, const sam3d_call & c) {
    for (size_t i = 0; i < c.n_uploads; ++i) {
        const sam3d_upload & u = c.uploads[i];
        s.ggml.tensor_set(u.tensor, u.src, u.offset, u.size);
    }
    if (c.graph != nullptr) {
        const ggml_status st = s.ggml.graph_compute(s.backend, c.graph);
        if (st != GGML_STATUS_SUCCESS) {
            return st;  // ggml_backend_graph_compute has synchronized: nothing is outstanding
        }
    }
    for (size_t i = 0; i < c.n_downloads; ++i) {
        const sam3d_download & d = c.downloads[i];
        s.ggml.tensor_get(d.tensor, d.dst, d.offset, d.size);
    }
    return GGML_STATUS_SUCCESS;
}

namespace {


// The descriptors [first, last) of runs [begin, end).
std::pair<size_t, size_t> descriptors(const std::vector<Run> & runs, size_t begin, size_t end) {
    return begin < end ? std::make_pair(runs[begin].first, runs[end - 1].last) : std::make_pair(size_t{0}, size_t{0});
}

// Lays out `runs` of descriptors `d` from staging offset *at (a copying call) or at the first
// descriptor's host pointer (zero-copy); each descriptor's host bytes into ptrs.
template <class D, class P>
void lay_out_runs(Session & s, const D * d, std::vector<Run> & runs, uint8_t * region, size_t * at,
                  std::vector<P> & ptrs, ggml_tensor ** span) {
    for (Run & r : runs) {
        const uintptr_t begin = device_address(d[r.first].tensor, d[r.first].offset);
        r.host = region != nullptr ? region + *at : static_cast<uint8_t *>(const_cast<void *>(host_of(d[r.first])));
        for (size_t i = r.first; i < r.last; ++i) {
            const uintptr_t here = device_address(d[i].tensor, d[i].offset);
            ptrs[i] = region != nullptr ? r.host + (here - begin) : static_cast<P>(const_cast<void *>(host_of(d[i])));
        }
        if (r.last - r.first > 1) {
            make_span(*span, d[r.first].tensor, d[r.first].offset, r.bytes);
            r.tensor = *span;
            r.offset = 0;
            *span += 1;
        } else {
            r.tensor = const_cast<ggml_tensor *>(d[r.first].tensor);
            r.offset = d[r.first].offset;
        }
        *at += align_up(r.bytes, s.alignment);
    }
}

}  // namespace

void lay_out(Session & s, const sam3d_call & c, uint8_t * region, std::vector<ggml_tensor> & spans) {
    s.up_ptrs.resize(c.n_uploads);  // capacities reserved before submission
    s.down_ptrs.resize(c.n_downloads);
    spans.resize(spanning_runs(s));
    ggml_tensor * span = spans.data();
    size_t at = 0;
    lay_out_runs(s, c.uploads, s.up_runs, region, &at, s.up_ptrs, &span);
    lay_out_runs(s, c.downloads, s.down_runs, region, &at, s.down_ptrs, &span);
}

size_t piece_end(const Session & s, const std::vector<Run> & runs, size_t r) {
    size_t bytes = 0;  // at most the bound (rule 3): no overflow
    do {
        bytes += align_up(runs[r].bytes, s.alignment);
        ++r;
    } while (r < runs.size() && bytes < s.piece_bytes);
    return r;
}

void stage_inputs(Session & s, const sam3d_call & c, size_t begin, size_t end) {
    s.spans.clear();  // capacity reserved before submission
    const auto [first, last] = descriptors(s.up_runs, begin, end);
    for (size_t i = first; i < last; ++i) {
        s.spans.push_back({const_cast<uint8_t *>(s.up_ptrs[i]), c.uploads[i].src, c.uploads[i].size});
    }
    s.copier->copy(s.spans.data(), s.spans.size());
}

void enqueue_uploads(Session & s, size_t begin, size_t end) {
    for (size_t k = begin; k < end; ++k) {
        const Run & r = s.up_runs[k];
        s.ggml.tensor_set_async(s.backend, r.tensor, r.host, r.offset, r.bytes);
    }
}

ggml_status enqueue_graph(Session & s, const sam3d_call & c) {
    return c.graph != nullptr ? s.ggml.graph_compute_async(s.backend, c.graph) : GGML_STATUS_SUCCESS;
}

void enqueue_downloads(Session & s, ggml_backend_t backend, size_t begin, size_t end) {
    for (size_t k = begin; k < end; ++k) {
        const Run & r = s.down_runs[k];
        s.ggml.tensor_get_async(backend, r.tensor, r.host, r.offset, r.bytes);
    }
}

void copy_outputs(Session & s, const sam3d_call & c, size_t begin, size_t end) {
    s.spans.clear();  // capacity reserved before submission
    const auto [first, last] = descriptors(s.down_runs, begin, end);
    for (size_t i = first; i < last; ++i) {
        s.spans.push_back({c.downloads[i].dst, s.down_ptrs[i], c.downloads[i].size});
    }
    s.copier->copy(s.spans.data(), s.spans.size());
}

}  // namespace sam3d
