#include "execute.h"


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

void lay_out(Session & s, const sam3d_call & c, uint8_t * region) {
    const bool copying = region != nullptr;
    s.up_ptrs.resize(c.n_uploads);  // capacity reserved before submission
    s.down_ptrs.resize(c.n_downloads);
    size_t at = 0;
    for (size_t i = 0; i < c.n_uploads; ++i) {
        s.up_ptrs[i] = copying ? region + at : static_cast<const uint8_t *>(c.uploads[i].src);
        at += align_up(c.uploads[i].size, s.alignment);
    }
    for (size_t i = 0; i < c.n_downloads; ++i) {
        s.down_ptrs[i] = copying ? region + at : static_cast<uint8_t *>(c.downloads[i].dst);
        at += align_up(c.downloads[i].size, s.alignment);
    }
}

namespace {

template <class D>
size_t piece_end(const Session & s, const D * d, size_t n, size_t i) {
    size_t bytes = 0;  // at most the bound (rule 3): no overflow
    do {
        bytes += align_up(d[i].size, s.alignment);
        ++i;
    } while (i < n && bytes < s.piece_bytes);
    return i;
}

}  // namespace

size_t upload_piece_end(const Session & s, const sam3d_call & c, size_t i) {
    return piece_end(s, c.uploads, c.n_uploads, i);
}

size_t download_piece_end(const Session & s, const sam3d_call & c, size_t i) {
    return piece_end(s, c.downloads, c.n_downloads, i);
}

void stage_inputs(Session & s, const sam3d_call & c, size_t begin, size_t end) {
    s.spans.clear();  // capacity reserved before submission
    for (size_t i = begin; i < end; ++i) {
        s.spans.push_back({const_cast<uint8_t *>(s.up_ptrs[i]), c.uploads[i].src, c.uploads[i].size});
    }
    s.copier->copy(s.spans.data(), s.spans.size());
}

void enqueue_uploads(Session & s, const sam3d_call & c, size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
        const sam3d_upload & u = c.uploads[i];
        s.ggml.tensor_set_async(s.backend, u.tensor, s.up_ptrs[i], u.offset, u.size);
    }
}

ggml_status enqueue_graph(Session & s, const sam3d_call & c) {
    return c.graph != nullptr ? s.ggml.graph_compute_async(s.backend, c.graph) : GGML_STATUS_SUCCESS;
}

void enqueue_downloads(Session & s, const sam3d_call & c, size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
        const sam3d_download & d = c.downloads[i];
        s.ggml.tensor_get_async(s.backend, d.tensor, s.down_ptrs[i], d.offset, d.size);
    }
}

void copy_outputs(Session & s, const sam3d_call & c, size_t begin, size_t end) {
    s.spans.clear();  // capacity reserved before submission
    for (size_t i = begin; i < end; ++i) {
        s.spans.push_back({c.downloads[i].dst, s.down_ptrs[i], c.downloads[i].size});
    }
    s.copier->copy(s.spans.data(), s.spans.size());
}

}  // namespace sam3d
