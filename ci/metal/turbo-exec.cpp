// The Metal turbo functions of the applied tree (ggml-metal/kernels/polykv-turbo.h, rewritten by
// `polykv-forge metal-check` and compiled through the model of <metal_stdlib> in
// ci/metal/include) executed on the CPU against the C reference of ggml-base on the same inputs:
//   encoder   quantize_<type> (scalar tiers) against quantize_row_<type>_ref: equal bytes;
//   reader4   dequantize_<type>_t4 (rotated domain, the flash-attention reader), rotated back by
//             the C code, against dequantize_row_<type>: equal values (bit for bit);
//   reader16  dequantize_<type> (true space, GET_ROWS/CPY) against dequantize_row_<type>: within
//             1e-5 of the group's largest value (another summation order);
//   rotation  polykv_turbo_rotate_group against ggml_turbo_rotate/unrotate: equal values.
// Prints one line per check and type and exits 1 on any difference. Built with
// -ffp-contract=off, as the C reference is (ggml-turbo-exact.h).
#include "ggml.h"
#include "ggml-turbo.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include <metal_stdlib>
using namespace metal;

// in a namespace of its own: the C header above declares blocks of the same names
namespace msl {
#include "polykv-turbo.h"
}

// --- inputs ---------------------------------------------------------------------------------

static uint64_t g_state = 0x9E3779B97F4A7C15ull;

static uint64_t next_u64() {
    uint64_t z = (g_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30))*0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27))*0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float uniform() { return (float) ((next_u64() >> 40)*(1.0/16777216.0)); }

static float gauss() {
    const float u1 = uniform() + 1e-7f;
    const float u2 = uniform();
    return sqrtf(-2.0f*logf(u1))*cosf(6.28318530718f*u2);
}

// the groups of one type: Gaussian groups at many scales, outliers, special values, and groups
// whose rotated values sit on codebook thresholds
static std::vector<float> make_groups(int g, int * n_groups) {
    std::vector<float> x;
    auto group = [&](auto fill) {
        const size_t at = x.size();
        x.resize(at + g);
        for (int i = 0; i < g; ++i) {
            x[at + i] = fill(i);
        }
    };
    const float scales[] = { 1e-20f, 1e-6f, 1e-3f, 1.0f, 7.5f, 1e2f, 1e4f, 1e10f, 1e19f };
    for (float s : scales) {
        for (int r = 0; r < 32; ++r) {
            group([&](int) { return s*gauss(); });
        }
    }
    for (int r = 0; r < 32; ++r) {
        const int at = (int) (next_u64() % g);
        group([&](int i) { return i == at ? 40.0f*gauss() : gauss(); });
    }
    group([&](int) { return 0.0f; });
    group([&](int) { return -0.0f; });
    group([&](int) { return 0.25f; });
    group([&](int) { return 3e5f; });                        // corrected norm beyond fp16's range
    group([&](int i) { return i == 3 ? INFINITY : 1.0f; });
    group([&](int i) { return i == 5 ? -INFINITY : 1.0f; });
    group([&](int i) { return i == 7 ? NAN : 1.0f; });
    for (int h = 0; h < 8; ++h) {
        group([&](int i) { return i == h*7 % g ? 1.0f + h : 0.0f; });
        group([&](int i) { return i == h*7 % g ? 1.0f : i == (h*13 + 5) % g ? 1.0f : 0.0f; });
        group([&](int i) { return i == h % g ? 1.0f : i == (h + g/2) % g ? -1.0f : 0.0f; });
    }
    *n_groups = (int) (x.size()/g);
    return x;
}

// --- the Metal functions by type --------------------------------------------------------------

struct metal_fns {
    void (*quantize)(const float *, void *);                  // null for the trellis-coded tiers
    void (*deq_t4)(const void *, short, float4 &);
    void (*deq_16)(const void *, short, float4x4 &);
};

#define POLYKV_READ_FNS(NAME)                                                                     \
    static void d4_##NAME(const void * b, short il, float4 & r) {                                 \
        msl::dequantize_##NAME##_t4<float4>((const msl::block_##NAME *) b, il, r);                \
    }                                                                                             \
    static void d16_##NAME(const void * b, short il, float4x4 & r) {                              \
        msl::dequantize_##NAME<float4x4>((const msl::block_##NAME *) b, il, r);                   \
    }
#define POLYKV_FNS(NAME)                                                                          \
    POLYKV_READ_FNS(NAME)                                                                         \
    static void q_##NAME(const float * x, void * y) { msl::quantize_##NAME(x, *(msl::block_##NAME *) y); }
POLYKV_FNS(turbo2)
POLYKV_FNS(turbo3)
POLYKV_FNS(turbo4)
POLYKV_FNS(turbo2_g64)
POLYKV_FNS(turbo3_g64)
POLYKV_FNS(turbo4_g64)
POLYKV_READ_FNS(tcq2)
POLYKV_READ_FNS(tcq3)
POLYKV_READ_FNS(tcq4)
POLYKV_READ_FNS(tcq2_g64)
POLYKV_READ_FNS(tcq3_g64)
POLYKV_READ_FNS(tcq4_g64)

static metal_fns fns_of(ggml_type t) {
    switch (t) {
        case GGML_TYPE_TURBO2:     return { q_turbo2,     d4_turbo2,     d16_turbo2 };
        case GGML_TYPE_TURBO3:     return { q_turbo3,     d4_turbo3,     d16_turbo3 };
        case GGML_TYPE_TURBO4:     return { q_turbo4,     d4_turbo4,     d16_turbo4 };
        case GGML_TYPE_TURBO2_G64: return { q_turbo2_g64, d4_turbo2_g64, d16_turbo2_g64 };
        case GGML_TYPE_TURBO3_G64: return { q_turbo3_g64, d4_turbo3_g64, d16_turbo3_g64 };
        case GGML_TYPE_TURBO4_G64: return { q_turbo4_g64, d4_turbo4_g64, d16_turbo4_g64 };
        case GGML_TYPE_TCQ2:       return { nullptr,      d4_tcq2,       d16_tcq2 };
        case GGML_TYPE_TCQ3:       return { nullptr,      d4_tcq3,       d16_tcq3 };
        case GGML_TYPE_TCQ4:       return { nullptr,      d4_tcq4,       d16_tcq4 };
        case GGML_TYPE_TCQ2_G64:   return { nullptr,      d4_tcq2_g64,   d16_tcq2_g64 };
        case GGML_TYPE_TCQ3_G64:   return { nullptr,      d4_tcq3_g64,   d16_tcq3_g64 };
        case GGML_TYPE_TCQ4_G64:   return { nullptr,      d4_tcq4_g64,   d16_tcq4_g64 };
        default:                   return { nullptr,      nullptr,       nullptr };
    }
}

static bool same_value(float a, float b) {
    return (std::isnan(a) && std::isnan(b)) || memcmp(&a, &b, sizeof(a)) == 0;
}

int main() {
    int failures = 0;
    int checked  = 0;

    for (int ti = 0; ti < GGML_TYPE_COUNT; ++ti) {
        const ggml_type t = (ggml_type) ti;
        if (!ggml_is_turbo(t)) {
            continue;
        }
        const metal_fns f = fns_of(t);
        if (!f.deq_t4) {
            printf("type %s: no Metal functions in this harness\n", ggml_type_name(t));
            return 1;
        }
        const int    g  = ggml_turbo_group(t);
        const size_t bs = ggml_type_size(t);
        int n = 0;
        const std::vector<float> x = make_groups(g, &n);

        std::vector<uint8_t> ref((size_t) n*bs);
        ggml_turbo_quantize_row_ref(t, x.data(), ref.data(), (int64_t) n*g);
        std::vector<float> ref_f((size_t) n*g);
        ggml_turbo_dequantize_row(t, ref.data(), ref_f.data(), (int64_t) n*g);

        // encoder
        if (f.quantize) {
            std::vector<uint8_t> got((size_t) n*bs);
            for (int b = 0; b < n; ++b) {
                f.quantize(x.data() + (size_t) b*g, got.data() + (size_t) b*bs);
            }
            int differ = 0;
            for (int b = 0; b < n; ++b) {
                differ += memcmp(got.data() + (size_t) b*bs, ref.data() + (size_t) b*bs, bs) != 0;
            }
            printf("encoder  %-10s %3d groups: %d differ from quantize_row_%s_ref\n", ggml_type_name(t), n, differ, ggml_type_name(t));
            failures += differ > 0;
            checked++;
        }

        // rotated-domain reader, rotated back by the C code
        {
            int differ = 0;
            std::vector<float> y(g);
            for (int b = 0; b < n; ++b) {
                for (short il = 0; il < g/4; ++il) {
                    float4 r;
                    f.deq_t4(ref.data() + (size_t) b*bs, il, r);
                    for (int j = 0; j < 4; ++j) {
                        y[4*il + j] = r[j];
                    }
                }
                ggml_turbo_unrotate(y.data(), g);
                bool ok = true;
                for (int i = 0; i < g; ++i) {
                    ok = ok && same_value(y[i], ref_f[(size_t) b*g + i]);
                }
                differ += !ok;
            }
            printf("reader4  %-10s %3d groups: %d differ from dequantize_row_%s\n", ggml_type_name(t), n, differ, ggml_type_name(t));
            failures += differ > 0;
            checked++;
        }

        // true-space reader
        {
            int differ = 0;
            double worst = 0.0;
            for (int b = 0; b < n; ++b) {
                const float * c = ref_f.data() + (size_t) b*g;
                float amax = 0.0f;
                for (int i = 0; i < g; ++i) {
                    amax = std::isfinite(c[i]) ? fmaxf(amax, fabsf(c[i])) : amax;
                }
                bool ok = true;
                for (short il = 0; il < g/16; ++il) {
                    float4x4 r;
                    f.deq_16(ref.data() + (size_t) b*bs, il, r);
                    for (int j = 0; j < 16; ++j) {
                        const float got  = r[j/4][j%4];
                        const float want = c[16*il + j];
                        if (std::isnan(want) || std::isnan(got)) {
                            ok = ok && std::isnan(want) && std::isnan(got);
                            continue;
                        }
                        const double err = std::fabs((double) got - (double) want);
                        worst = err/(amax > 0.0f ? amax : 1.0f) > worst ? err/(amax > 0.0f ? amax : 1.0f) : worst;
                        ok = ok && err <= 1e-5*(double) amax;
                    }
                }
                differ += !ok;
            }
            printf("reader16 %-10s %3d groups: %d differ from dequantize_row_%s by more than 1e-5 of the group's largest value (worst %.2e)\n",
                   ggml_type_name(t), n, differ, ggml_type_name(t), worst);
            failures += differ > 0;
            checked++;
        }
    }

    // the rotation kernels' group transform
    for (int g : { 64, 128 }) {
        int n = 0;
        const std::vector<float> x = make_groups(g, &n);
        int differ = 0;
        for (int b = 0; b < n; ++b) {
            std::vector<float> a(x.begin() + (size_t) b*g, x.begin() + (size_t) (b + 1)*g);
            std::vector<float> c = a;
            std::vector<float> ai = a;
            std::vector<float> ci = a;
            if (g == 64) {
                msl::polykv_turbo_rotate_group<64, false>(a.data());
                msl::polykv_turbo_rotate_group<64, true>(ai.data());
            } else {
                msl::polykv_turbo_rotate_group<128, false>(a.data());
                msl::polykv_turbo_rotate_group<128, true>(ai.data());
            }
            ggml_turbo_rotate(c.data(), g);
            ggml_turbo_unrotate(ci.data(), g);
            bool ok = true;
            for (int i = 0; i < g; ++i) {
                ok = ok && same_value(a[i], c[i]) && same_value(ai[i], ci[i]);
            }
            differ += !ok;
        }
        printf("rotation g%-3d     %3d groups: %d differ from ggml_turbo_rotate/unrotate\n", g, n, differ);
        failures += differ > 0;
        checked++;
    }

    printf("%d checks, %d failed\n", checked, failures);
    return failures ? 1 : 0;
}
