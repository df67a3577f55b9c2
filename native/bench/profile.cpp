// The transfer profile (native/bench/profiles/*.json, written by sam3d/core/profile.py): per
// graph, upload and download sizes in bytes (F32 tensors), a replay op, whether the graph is
// the synchronous image encoder, and which uploads take an earlier graph's download. Also the
// SHA-256 (OpenSSL EVP) the driver hashes the profile file and the outputs with.
#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "bench.h"

namespace sam3d_bench {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
    if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
        die(1, "OpenSSL EVP_DigestInit_ex(sha256) failed");
    }
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::update(const void * p, size_t n) {
    if (EVP_DigestUpdate(ctx_, p, n) != 1) {
        die(1, "OpenSSL EVP_DigestUpdate failed");
    }
}

std::string Sha256::hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_DigestFinal_ex(ctx_, md, &n) != 1) {
        die(1, "OpenSSL EVP_DigestFinal_ex failed");
    }
    static const char * digits = "0123456789abcdef";
    std::string s;
    for (unsigned int i = 0; i < n; ++i) {
        s += digits[md[i] >> 4];
        s += digits[md[i] & 15];
    }
    return s;
}

Profile load_profile(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        die(1, "cannot read the profile " + path + ": check --profile");
    }
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    Profile p;
    p.path = path;
    {
        Sha256 h;
        h.update(text.data(), text.size());
        p.sha256 = h.hex();
    }
    json j;
    try {
        j = json::parse(text);
        p.name = j.at("name").get<std::string>();
        p.version = j.at("version").get<int>();
        std::map<std::string, size_t> index;
        for (const json & g : j.at("graphs")) {
            GraphSpec s;
            s.name = g.at("name").get<std::string>();
            const std::string where = path + ": graph " + s.name;
            s.op = g.at("op").get<std::string>();
            if (s.op != "scale_add" && s.op != "add") {
                die(1, where + ": op '" + s.op + "' is not scale_add or add");
            }
            s.synchronous = g.at("synchronous").get<bool>();
            s.uploads = g.at("uploads").get<std::vector<size_t>>();
            s.downloads = g.at("downloads").get<std::vector<size_t>>();
            if (s.uploads.empty() || s.downloads.empty()) {
                die(1, where + ": needs at least one upload and one download");
            }
            for (size_t b : s.uploads) {
                if (b == 0 || b % kElement) die(1, where + ": upload of " + std::to_string(b) + " bytes is not a positive multiple of 4 (F32)");
            }
            for (size_t b : s.downloads) {
                if (b == 0 || b % kElement) die(1, where + ": download of " + std::to_string(b) + " bytes is not a positive multiple of 4 (F32)");
            }
            for (const json & d : g.at("depends_on_downloads")) {
                Dep dep{d.at("upload").get<size_t>(), 0, d.at("download").get<size_t>()};
                const std::string src = d.at("graph").get<std::string>();
                auto it = index.find(src);
                if (it == index.end()) die(1, where + ": depends on '" + src + "', which is not an earlier graph");
                dep.graph = it->second;
                if (dep.upload >= s.uploads.size() || dep.download >= p.graphs[dep.graph].downloads.size() ||
                    s.uploads[dep.upload] != p.graphs[dep.graph].downloads[dep.download]) {
                    die(1, where + ": dependency on " + src + " names a missing upload/download or sizes differ");
                }
                if (s.feeder(dep.upload) != nullptr) {
                    die(1, where + ": upload " + std::to_string(dep.upload) + " is fed twice: give each upload at most one dependency");
                }
                s.deps.push_back(dep);
            }
            index[s.name] = p.graphs.size();
            p.n_uploads += s.uploads.size();
            p.n_downloads += s.downloads.size();
            for (size_t b : s.uploads) p.upload_bytes += b;
            for (size_t b : s.downloads) p.download_bytes += b;
            p.graphs.push_back(std::move(s));
        }
    } catch (const json::exception & e) {
        die(1, path + ": not a transfer profile: " + e.what());
    }
    if (p.graphs.empty()) {
        die(1, path + ": no graphs");
    }
    p.order.resize(p.graphs.size());
    for (size_t g = 0; g < p.order.size(); ++g) p.order[g] = g;
    return p;
}

std::vector<size_t> level_order(const Profile & p) {
    const size_t ng = p.graphs.size();
    std::vector<size_t> level(ng, 1), order(ng);
    for (size_t g = 0; g < ng; ++g) {
        for (const Dep & x : p.graphs[g].deps) level[g] = std::max(level[g], level[x.graph] + 1);
        order[g] = g;
    }
    for (size_t from = 0; from < ng;) {
        size_t to = from;
        while (to < ng && !p.graphs[to].synchronous) ++to;
        std::stable_sort(order.begin() + static_cast<std::ptrdiff_t>(from), order.begin() + static_cast<std::ptrdiff_t>(to),
                         [&](size_t a, size_t b) { return level[a] < level[b]; });
        from = to + 1;
    }
    return order;
}

}  // namespace sam3d_bench
