// Round trips through the core on every backend: values, sizes, views, on/off identity.
#include "rig.h"

using rig::Kind;
using rig::Rig;

class Transfers : public testing::TestWithParam<Kind> {};

// Rule 2 + identity: the same inputs give byte-identical outputs with batching on and off,
// and the graph really ran (out = 2 * a + b).
TEST_P(Transfers, ScaleAddIsByteIdenticalOnAndOff) {
    Rig r(GetParam());
    RIG_REQUIRE(r);
    const int64_t n = 1000;
    ggml_tensor * a = r.f32(n, "a");
    ggml_tensor * b = r.f32(n, "b");
    ggml_tensor * out = ggml_add(r.ctx(), ggml_scale(r.ctx(), a, 2.0f), b);
    ggml_set_name(out, "out");
    ggml_cgraph * g = ggml_new_graph(r.ctx());
    ggml_build_forward_expand(g, out);
    r.alloc();
    const std::vector<float> va = rig::ramp(n, 1.0f), vb = rig::ramp(n, 5.0f);
    std::vector<float> on(n, -1.0f), off(n, -1.0f);
    for (sam3d_batching mode : {SAM3D_BATCHING_ON, SAM3D_BATCHING_OFF}) {
        sam3d_session * s = r.session(mode);
        sam3d_upload ups[] = {rig::up(a, va.data(), n * 4), rig::up(b, vb.data(), n * 4)};
        std::vector<float> & dst = mode == SAM3D_BATCHING_ON ? on : off;
        sam3d_download downs[] = {rig::down(out, dst.data(), n * 4)};
        sam3d_call c{ups, 2, g, downs, 1, false};
        ASSERT_EQ(sam3d_session_run(s, &c), SAM3D_OK) << sam3d_last_error();
    }
    for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(off[i], 2.0f * va[i] + vb[i]) << "at " << i;
    }
    EXPECT_EQ(0, std::memcmp(on.data(), off.data(), n * 4));
}

INSTANTIATE_TEST_SUITE_P(Backends, Transfers, testing::ValuesIn(rig::kinds()), rig::param_name);
