// The kernel names the Metal host code asks for, for every op with a turbo operand that its
// supports_op accepts. Built by `polykv-forge metal-check` on any OS from the applied tree's
// host sources (ggml-metal-device.cpp, ggml-metal-polykv.cpp, ggml-metal-tuning.cpp), linked
// with ggml-base; the Objective-C side (ggml-metal-device.m) is replaced by the stubs below,
// which record every function name a pipeline is built for instead of building it. The same
// name builders run as on a Mac, so the lint compares the names the host really constructs with
// the kernels' host_name list. Output, one line per name:
//   name <kernel> <op>        a kernel the host asks for (must exist exactly once)
//   accepted <op>             an op supports_op accepts
//   refused <op>              an op it refuses (runs on another backend; a view must never be)
#include "ggml.h"
#include "ggml-metal-device.h"
#include "ggml-metal-polykv.h"
#include "ggml-metal-tuning.h"
#include "ggml-turbo.h"

#include <cstdio>
#include <cstring>
#include <set>
#include <utility>
#include <string>

// --- stubs of ggml-metal-device.m -----------------------------------------------------------

static std::set<std::string> g_requested;

struct ggml_metal_cv { int unused; };
static ggml_metal_cv g_cv;

ggml_metal_cv_t ggml_metal_cv_init(void) { return &g_cv; }
void ggml_metal_cv_free(ggml_metal_cv_t) {}
void ggml_metal_cv_set_int16(ggml_metal_cv_t, int16_t, int32_t) {}
void ggml_metal_cv_set_int32(ggml_metal_cv_t, int32_t, int32_t) {}
void ggml_metal_cv_set_bool(ggml_metal_cv_t, bool, int32_t) {}
void ggml_metal_pipeline_free(ggml_metal_pipeline_t) {}
int ggml_metal_pipeline_max_theads_per_threadgroup(struct ggml_metal_pipeline_with_params) { return 1024; }

struct ggml_metal_pipeline_with_params ggml_metal_library_get_pipeline(ggml_metal_library_t, const char *) {
    struct ggml_metal_pipeline_with_params res = {};
    return res;
}

struct ggml_metal_pipeline_with_params ggml_metal_library_compile_pipeline(ggml_metal_library_t, const char * base, const char *, ggml_metal_cv_t) {
    g_requested.insert(base);
    struct ggml_metal_pipeline_with_params res = {};
    return res;
}

ggml_metal_device_t ggml_metal_library_get_device(ggml_metal_library_t) { return nullptr; }
const struct ggml_metal_device_props * ggml_metal_device_get_props(ggml_metal_device_t) { return nullptr; }
ggml_metal_device_t ggml_metal_device_init(int, int) { return nullptr; }
void ggml_metal_device_free(ggml_metal_device_t) {}

void ggml_metal_encoder_set_pipeline(ggml_metal_encoder_t, struct ggml_metal_pipeline_with_params) {}
void ggml_metal_encoder_set_bytes(ggml_metal_encoder_t, void *, size_t, int) {}
void ggml_metal_encoder_set_buffer(ggml_metal_encoder_t, struct ggml_metal_buffer_id, int) {}
void ggml_metal_encoder_dispatch_threadgroups(ggml_metal_encoder_t, int, int, int, int, int, int) {}

// --- the driver -----------------------------------------------------------------------------

static void report(const char * what, const std::string & op) {
    for (const std::string & n : g_requested) {
        printf("name %s %s\n", n.c_str(), op.c_str());
    }
    g_requested.clear();
    printf("%s %s\n", what, op.c_str());
}

static std::string describe(const char * op, ggml_type a, ggml_type b, int64_t d = 0) {
    char buf[128];
    if (d) {
        snprintf(buf, sizeof(buf), "%s:%s:%s:d%lld", op, ggml_type_name(a), ggml_type_name(b), (long long) d);
    } else {
        snprintf(buf, sizeof(buf), "%s:%s:%s", op, ggml_type_name(a), ggml_type_name(b));
    }
    return buf;
}

int main() {
    struct ggml_init_params ip = { 64*1024*1024, nullptr, true };
    ggml_context * ctx = ggml_init(ip);
    ggml_metal_library_t lib = nullptr;
    ggml_metal_encoder_t enc = nullptr;
    const ggml_metal_buffer_id none = {};

    std::set<ggml_type> turbo;
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        if (ggml_is_turbo((ggml_type) t)) {
            turbo.insert((ggml_type) t);
        }
    }

    for (ggml_type t : turbo) {
        const int64_t g = ggml_blck_size(t);

        // the views a graph takes of the cache: no kernel, and never refused (a refused view
        // would move the cache to another backend)
        {
            ggml_tensor * cache = ggml_new_tensor_3d(ctx, t, 2*g, 16, 2);
            ggml_tensor * views[] = {
                ggml_view_3d(ctx, cache, g, 8, 2, cache->nb[1], cache->nb[2], 0),
                ggml_reshape_2d(ctx, cache, 2*g, 32),
                ggml_permute(ctx, cache, 0, 2, 1, 3),
                ggml_transpose(ctx, ggml_reshape_2d(ctx, cache, 2*g, 32)),
            };
            for (ggml_tensor * v : views) {
                const bool ok = ggml_metal_polykv_supports_op(v, true);
                report(ok ? "accepted" : "refused", std::string("view:") + ggml_op_name(v->op) + ":" + ggml_type_name(t));
            }
        }

        for (ggml_type idx : { GGML_TYPE_I64, GGML_TYPE_I32 }) {
            ggml_tensor * dst = ggml_new_tensor_2d(ctx, t, 2*g, 16);
            ggml_tensor * src = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 2*g, 4);
            ggml_tensor * ids = ggml_new_tensor_1d(ctx, idx, 4);
            ggml_tensor * op  = ggml_set_rows(ctx, dst, src, ids);
            const bool ok = ggml_metal_polykv_supports_op(op, true);
            if (ok) {
                ggml_metal_library_get_pipeline_set_rows(lib, op);
            }
            report(ok ? "accepted" : "refused", describe("set_rows", t, idx));
        }

        // f32 -> turbo, turbo -> f32 and f16
        const std::pair<ggml_type, ggml_type> copies[] = {
            { GGML_TYPE_F32, t }, { t, GGML_TYPE_F32 }, { t, GGML_TYPE_F16 },
        };
        for (const auto & c : copies) {
            ggml_tensor * src = ggml_new_tensor_2d(ctx, c.first, 2*g, 4);
            ggml_tensor * dst = ggml_new_tensor_2d(ctx, c.second, 2*g, 4);
            ggml_tensor * op  = ggml_cpy(ctx, src, dst);
            const bool ok = ggml_metal_polykv_supports_op(op, true);
            if (ok) {
                ggml_metal_library_get_pipeline_cpy(lib, src->type, dst->type);
            }
            report(ok ? "accepted" : "refused", describe("cpy", c.first, c.second));
        }

        {
            ggml_tensor * src = ggml_new_tensor_2d(ctx, t, 2*g, 8);
            ggml_tensor * ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 3);
            ggml_tensor * op  = ggml_get_rows(ctx, src, ids);
            const bool ok = ggml_metal_polykv_supports_op(op, true);
            if (ok) {
                ggml_metal_library_get_pipeline_get_rows(lib, src->type);
            }
            report(ok ? "accepted" : "refused", describe("get_rows", t, GGML_TYPE_I32));
        }
    }

    // flash attention: every head dim the fork names and every K, V among the turbo types and
    // the other types a turbo cache is paired with
    std::set<ggml_type> kv = turbo;
    kv.insert(GGML_TYPE_F16);
    kv.insert(GGML_TYPE_Q8_0);
    kv.insert(GGML_TYPE_Q4_0);
    for (int64_t d : { 64, 128, 256, 512 }) {
        for (ggml_type tk : kv) {
            for (ggml_type tv : kv) {
                if (!ggml_is_turbo(tk) && !ggml_is_turbo(tv)) {
                    continue;
                }
                if ((d % ggml_blck_size(tk)) != 0 || (d % ggml_blck_size(tv)) != 0) {
                    continue;
                }
                ggml_tensor * q    = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, d, 1, 4);
                ggml_tensor * k    = ggml_new_tensor_3d(ctx, tk, d, 256, 2);
                ggml_tensor * v    = ggml_new_tensor_3d(ctx, tv, d, 256, 2);
                ggml_tensor * mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, 256, 1);
                ggml_tensor * op   = ggml_flash_attn_ext(ctx, q, k, v, mask, 0.125f, 0.0f, 0.0f);
                const bool ok = ggml_metal_polykv_supports_op(op, true);
                if (ok) {
                    // as ggml_metal_op_flash_attn_ext encodes it: the vec kernel, the baseline
                    // configuration, the rotations around it
                    const int ne = ggml_metal_tuning::fa_vec_baseline_ne((int) d, (int) d);
                    ggml_metal_library_get_pipeline_flash_attn_ext_vec(lib, op, true, false, false, false, false, false,
                            1, ne, 1, 32, false, (int32_t) (k->nb[1]/k->nb[0]), (int32_t) (v->nb[1]/v->nb[0]));
                    ggml_metal_library_get_pipeline_flash_attn_ext_vec_reduce(lib, op, (int32_t) d, 32);
                    if (ggml_metal_polykv_fa_extra_q(op) > 0) {
                        ggml_metal_polykv_fa_rotate_q(lib, enc, op, none, none);
                    }
                    if (ggml_metal_polykv_fa_rotates_out(op)) {
                        ggml_metal_polykv_fa_unrotate_out(lib, enc, op, none);
                    }
                }
                report(ok ? "accepted" : "refused", describe("flash_attn_ext", tk, tv, d));
            }
        }
    }

    ggml_free(ctx);
    return 0;
}
