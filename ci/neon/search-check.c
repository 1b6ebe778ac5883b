// The turbo encoders alone (ggml-turbo.c, ggml-turbo-tcq.c of the applied tree), built for
// the host and for AArch64 by ci/neon-check: for each turbo type and six kinds of input,
// whether the SIMD Viterbi search (AVX2 or NEON) gives the portable search's bytes, and the
// FNV-1a hash of the codes. ci/neon-check runs it natively and under qemu-aarch64 and wants
// every line to say "same" and both runs to print the same hashes.
#include "ggml.h"
#include "ggml-turbo.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ggml-base's few symbols the encoders use
void ggml_log_internal(enum ggml_log_level level, const char * format, ...) {
    (void) level;
    (void) format;
}
size_t ggml_row_size(enum ggml_type type, int64_t ne) {
    return (size_t) (ne/ggml_turbo_group(type))*(2 + (size_t) ggml_turbo_group(type)*ggml_turbo_bits(type)/8);
}
const char * ggml_type_name(enum ggml_type type) {
    (void) type;
    return "turbo";
}

static uint32_t lcg(uint32_t * st) {
    *st = *st*1664525u + 1013904223u;
    return *st >> 20;
}

// inputs exact in float on every platform (no libm)
static void make_input(int kind, float * x, int64_t n, int64_t g) {
    uint32_t st = 7u + (uint32_t) kind;
    for (int64_t i = 0; i < n; ++i) {
        const float u = (float) ((int) (lcg(&st) + lcg(&st)) - 4096)/1024.0f;
        switch (kind) {
            case 0:  x[i] = u; break;
            case 1:  x[i] = u*1e7f; break;
            case 2:  x[i] = i % 10 == 0 ? 30.0f*u : u; break;
            case 3:  x[i] = i % g == (i/g) % g ? 1.0f + (float) (i/g) : 0.0f; break;
            case 4:  x[i] = i % g == (i/g) % g ? 1.0f + (float) (i/g) : i % g == ((i/g)*7 + 3) % g ? -0.5f : 0.0f; break;
            default: x[i] = 0.25f; break;
        }
    }
}

int main(void) {
    static const char * kinds[] = { "uniform-sum", "scale-1e7", "heavy-tailed", "one-spike", "two-spikes", "constant" };
    printf("search %s\n", ggml_turbo_tcq_search_name());
    int differ = 0;
    for (int t = GGML_TYPE_TURBO2; t <= GGML_TYPE_TCQ4_G64; ++t) {
        const enum ggml_type type = (enum ggml_type) t;
        if (!ggml_is_turbo(type)) {
            continue;
        }
        const int64_t g  = ggml_turbo_group(type);
        const int64_t n  = g*64;
        const size_t  rs = ggml_row_size(type, n);
        float   * x = malloc(sizeof(float)*n);
        uint8_t * a = calloc(rs, 1);
        uint8_t * b = calloc(rs, 1);
        for (int kind = 0; kind < 6; ++kind) {
            make_input(kind, x, n, g);
            ggml_turbo_quantize_row_ref(type, x, a, n);
            int same = 1;
            if (ggml_is_turbo_tcq(type)) {
                ggml_turbo_tcq_quantize_row_portable(type, x, b, n);
                same = memcmp(a, b, rs) == 0;
            }
            uint32_t h = 2166136261u;
            for (size_t i = 0; i < rs; ++i) {
                h = (h ^ a[i])*16777619u;
            }
            printf("type %d %-12s %s 0x%08x\n", t, kinds[kind], same ? "same" : "DIFFER", h);
            differ += !same;
        }
        free(x);
        free(a);
        free(b);
    }
    return differ == 0 ? 0 : 1;
}
