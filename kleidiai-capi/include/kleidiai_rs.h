/*
 * kleidiai_rs.h: C ABI of kleidiai-rs for ggml integrations.
 *
 * Link the static library libkleidiai_capi.a (built by `cargo build -p
 * kleidiai-capi --release --target aarch64-unknown-linux-gnu`) together with
 * -lpthread -ldl -lm.
 *
 * Every function returns KAIRS_OK (0) or a negative status; the reason is
 * kairs_last_error() on the same thread. No function aborts on bad input:
 * shapes, strides, sizes and packed data are checked before any kernel runs.
 *
 * Usage, as ggml's KleidiAI buffer type does it:
 *   1. size = kairs_repack_size(&desc, weights, weights_size, &size)
 *   2. kairs_repack(&desc, weights, weights_size, buffer, size, 0)   (buffer 64-byte aligned)
 *   3. per graph node: kairs_mul_mat(buffer, size, &src1, x, x_size, &dst, y, y_size, n_threads)
 *      or kairs_get_rows(buffer, size, rows, n_rows, out, out_floats)
 */

#ifndef KLEIDIAI_RS_H
#define KLEIDIAI_RS_H

/* Generated from kleidiai-capi/src by cbindgen (`cargo run -p xtask -- header`). Do not edit. */

#include <stddef.h>
#include <stdint.h>

// Status: success.
#define KAIRS_OK 0

// Status: bad argument (shape, stride, type, null pointer).
#define KAIRS_ERR_INVALID -1

// Status: no kernel runs here, or packed for another CPU or vector length.
#define KAIRS_ERR_UNSUPPORTED -2

// Status: packed data does not fit the kernel or is corrupted.
#define KAIRS_ERR_LAYOUT -3

// Status: a buffer is too small.
#define KAIRS_ERR_BUFFER -4

// Status: a size does not fit in `size_t`.
#define KAIRS_ERR_OVERFLOW -5

// Status: a bug in kleidiai-rs (a panic was caught; please report it).
#define KAIRS_ERR_INTERNAL -6

// Tensor type: ggml's `GGML_TYPE_F32`.
#define KAIRS_TYPE_F32 0

// Tensor type: ggml's `GGML_TYPE_F16`.
#define KAIRS_TYPE_F16 1

// Tensor type: ggml's `GGML_TYPE_Q4_0`.
#define KAIRS_TYPE_Q4_0 2

// Tensor type: ggml's `GGML_TYPE_Q8_0`.
#define KAIRS_TYPE_Q8_0 8

// CPU feature bit of [`kairs_cpu_features`]: Advanced SIMD.
#define KAIRS_FEAT_NEON (1 << 0)

// CPU feature bit: FEAT_FP16.
#define KAIRS_FEAT_FP16 (1 << 1)

// CPU feature bit: FEAT_BF16.
#define KAIRS_FEAT_BF16 (1 << 2)

// CPU feature bit: FEAT_DotProd.
#define KAIRS_FEAT_DOTPROD (1 << 3)

// CPU feature bit: FEAT_I8MM.
#define KAIRS_FEAT_I8MM (1 << 4)

// CPU feature bit: FEAT_SVE.
#define KAIRS_FEAT_SVE (1 << 5)

// CPU feature bit: FEAT_SVE2.
#define KAIRS_FEAT_SVE2 (1 << 6)

// CPU feature bit: FEAT_SVE2p1.
#define KAIRS_FEAT_SVE2P1 (1 << 7)

// CPU feature bit: FEAT_SME.
#define KAIRS_FEAT_SME (1 << 8)

// CPU feature bit: FEAT_SME2.
#define KAIRS_FEAT_SME2 (1 << 9)

// CPU feature bit: FEAT_SME2p1.
#define KAIRS_FEAT_SME2P1 (1 << 10)

// A ggml tensor's shape (`kairs_desc` in C): `ne[0]` values per row,
// `ne[1]` rows, `ne[2]`, `ne[3]` batches; `nb[]` byte strides (`nb[0]` must
// be the element or block size). C names its fields `type`, `ne`, `nb`:
typedef struct kairs_desc {
    // ggml type id (`KAIRS_TYPE_*`); `type` in C.
    int32_t type;
    // Sizes.
    int64_t ne[4];
    // Byte strides.
    size_t nb[4];
} kairs_desc;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// The CPU features in use (detected, minus `KLEIDIAI_DISABLE`), as
// `KAIRS_FEAT_*` bits.
uint32_t kairs_cpu_features(void);

// SME streaming vector length in bytes (0: no SME).
uint32_t kairs_sme_vector_bytes(void);

// Version of kleidiai-rs and of the KleidiAI it carries, e.g.
// `"0.1.0 (KleidiAI 1.30.0)"`.
const char *kairs_version(void);

// Why the last call on this thread failed (`""` after a success). Valid
// until the next call on this thread.
const char *kairs_last_error(void);

// Bytes [`kairs_repack`] needs for weights `src0` (type F32, F16, Q4_0 or
// Q8_0; `ne[0]` = k, `ne[1]` = n; only F16 may have `ne[2]` > 1).
//
// # Safety
// `src0` points to a valid descriptor, `data` to `data_size` readable bytes,
// `size` to a writable `size_t` (each may be NULL: an error).
int kairs_repack_size(const struct kairs_desc *src0, const void *data, size_t data_size, size_t *size);

// Repacks `src0` into `dst` (64-byte aligned, at least
// [`kairs_repack_size`] bytes). `hybrid` != 0 lets mul_mat run SME and
// non-SME kernels at once when it gets more threads than the SME cap
// (results then depend on the thread count).
//
// # Safety
// As [`kairs_repack_size`]; `dst` points to `dst_size` writable bytes.
int kairs_repack(const struct kairs_desc *src0,
                 const void *data,
                 size_t data_size,
                 void *dst,
                 size_t dst_size,
                 int hybrid);

// Full check of repacked weights, payload checksums included.
//
// # Safety
// `packed` points to `packed_size` readable bytes.
int kairs_verify(const void *packed, size_t packed_size);

// The kernel serving `m` rows for these weights, or `"reference"` (no
// KleidiAI kernel: for F16 weights with m = 1 that means ggml's own F16
// path, see [`kairs_mul_mat`]).
//
// # Safety
// `packed` points to `packed_size` readable bytes; `name` is writable.
int kairs_kernel_name(const void *packed, size_t packed_size, int64_t m, const char **name);

// Upper bound of the scratch memory one mul_mat of `m` rows uses (it is
// allocated internally and reused per thread).
//
// # Safety
// `packed` points to `packed_size` readable bytes; `size` is writable.
int kairs_work_size(const void *packed, size_t packed_size, int64_t m, size_t *size);

// dst = src1 x weights^T with ggml's mul_mat semantics: src1 F32
// [k, m, ne12], dst F32 [n, m, ne12]; F16 weights broadcast over batches.
// Like ggml's KleidiAI path, F16 weights with m = 1 are not served here
// (`KAIRS_ERR_UNSUPPORTED`): run ggml's own F16 path for them.
//
// # Safety
// Every pointer valid for its size (reads for inputs, writes for `dst_data`).
int kairs_mul_mat(const void *packed,
                  size_t packed_size,
                  const struct kairs_desc *src1,
                  const void *src1_data,
                  size_t src1_size,
                  const struct kairs_desc *dst,
                  void *dst_data,
                  size_t dst_size,
                  int n_threads);

// Weight rows `rows` as f32 (ggml get_rows): `n_rows` x k floats into
// `dst`.
//
// # Safety
// `packed` readable for `packed_size` bytes, `rows` for `n_rows` values,
// `dst` writable for `dst_floats` floats.
int kairs_get_rows(const void *packed,
                   size_t packed_size,
                   const int64_t *rows,
                   size_t n_rows,
                   float *dst,
                   size_t dst_floats);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* KLEIDIAI_RS_H */
