/* A second, unprefixed copy of a few KleidiAI files, linked into the same
 * test binary as kleidiai-sys (as ggml or ONNX Runtime would bring their own).
 * This translation unit calls that copy through upstream's plain names. */
#include <stddef.h>
#include <stdint.h>

#include "kai/ukernels/matmul/matmul_clamp_f32_qai8dxp_qsi4cxp/kai_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod.h"
#include "kai/ukernels/matmul/pack/kai_lhs_quant_pack_qai8dxp_f32.h"
#include "kai/ukernels/matmul/pack/kai_rhs_pack_nxk_qsi4cxp_qs4cxs1s0.h"

/* Sizes of the two packed buffers the caller must provide. */
void second_copy_sizes(size_t m, size_t n, size_t k, size_t* lhs_size, size_t* rhs_size) {
    const size_t mr = kai_get_mr_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod();
    const size_t nr = kai_get_nr_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod();
    const size_t kr = kai_get_kr_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod();
    const size_t sr = kai_get_sr_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod();
    *lhs_size = kai_get_lhs_packed_size_lhs_quant_pack_qai8dxp_f32(m, k, mr, kr, sr);
    *rhs_size = kai_get_rhs_packed_size_rhs_pack_nxk_qsi4cxp_qs4cxs1s0(n, k, nr, kr, sr);
}

/* dst (m x n) = lhs (m x k) * W^T, W int4 (zero point 8) with per-row scales. */
void second_copy_matmul(
    size_t m, size_t n, size_t k, const float* lhs, const uint8_t* w, const float* scales, void* lhs_packed,
    void* rhs_packed, float* dst) {
    const size_t mr = kai_get_mr_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod();
    const size_t nr = kai_get_nr_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod();
    const size_t kr = kai_get_kr_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod();
    const size_t sr = kai_get_sr_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod();
    struct kai_rhs_pack_nxk_qsi4cxp_qs4cxs1s0_params params = {1, 8};
    kai_run_lhs_quant_pack_qai8dxp_f32(m, k, mr, kr, sr, 0, lhs, k * sizeof(float), lhs_packed);
    kai_run_rhs_pack_nxk_qsi4cxp_qs4cxs1s0(1, n, k, nr, kr, sr, w, NULL, scales, rhs_packed, 0, &params);
    kai_run_matmul_clamp_f32_qai8dxp1x4_qsi4cxp4x4_1x4_neon_dotprod(
        m, n, k, lhs_packed, rhs_packed, dst, n * sizeof(float), sizeof(float), -3.4e38f, 3.4e38f);
}
