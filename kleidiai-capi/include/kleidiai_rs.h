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

// Status: bad argument without a code of its own (a null pointer,
// overlapping buffers).
#define KAIRS_ERR_INVALID -1

// Status: no kernel runs here, or packed for another CPU or vector length.
#define KAIRS_ERR_UNSUPPORTED -2

// Status: packed data does not fit the kernel or is corrupted.
#define KAIRS_ERR_LAYOUT -3

// Status: a buffer is too small (in elements or bytes).
#define KAIRS_ERR_BUFFER -4

// Status: a size does not fit in `size_t`.
#define KAIRS_ERR_OVERFLOW -5

// Status: a bug in kleidiai-rs, or KleidiAI disagreeing with it (a panic
// was caught, or a kernel and its packer disagree; please report it).
#define KAIRS_ERR_INTERNAL -6

// Status: shapes do not fit (a zero or mismatched dimension, a dimension
// not a multiple of what the kernel takes, strides that overlap or are
// not contiguous).
#define KAIRS_ERR_SHAPE -7

// Status: a buffer's address lacks the alignment it needs.
#define KAIRS_ERR_ALIGNMENT -8

// Status: a tensor type this call does not take (an unknown type id, or
// another element type than the operation needs).
#define KAIRS_ERR_TYPE -9

// Status: a value out of range (a row index, a thread index, a setting).
#define KAIRS_ERR_RANGE -10

// Status: repacked weights rejected for a reason without its own
// `KAIRS_ERR_FILE_*` code (a malformed header). Every file rejection is a
// code from `KAIRS_ERR_FILE` down to `KAIRS_ERR_FILE_LAYOUT`.
#define KAIRS_ERR_FILE -11

// Status: not repacked weights (wrong magic bytes, or too short).
#define KAIRS_ERR_FILE_MAGIC -12

// Status: repacked weights of a format version this build does not read.
#define KAIRS_ERR_FILE_VERSION -13

// Status: repacked with another KleidiAI release (layouts may differ: repack).
#define KAIRS_ERR_FILE_KLEIDIAI_VERSION -14

// Status: a checksum of the repacked weights does not match (corrupted or
// tampered).
#define KAIRS_ERR_FILE_CHECKSUM -15

// Status: repacked weights shorter than their header says.
#define KAIRS_ERR_FILE_TRUNCATED -16

// Status: bytes after the declared end of repacked weights.
#define KAIRS_ERR_FILE_TRAILING -17

// Status: a packed layout in the repacked weights does not fit its kernel,
// shape or payload size. (Weights packed for another vector length are
// `KAIRS_ERR_UNSUPPORTED`.)
#define KAIRS_ERR_FILE_LAYOUT -18

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

// Repacked weights viewed in caller memory (`kairs_ggml_weights` in C,
// opaque): the handle `kairs_ggml_repack` returns. It holds what the packed
// bytes are (kernels, shape, layouts, offsets); the caller's memory holds
// only the bytes the kernels read.
typedef struct kairs_ggml_weights kairs_ggml_weights;

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

// ggml's threads of one graph node (`kairs_ggml_team` in C). Contract:
// every thread of the node calls with the same arguments and its own `ith`;
// `barrier` returns when all `nth` threads reached it and publishes their
// writes (`ggml_barrier`); `chunk_add` is an atomic fetch-and-add returning
// the value before, on a counter the node shares, `chunk_set` stores to it
// (`ggml_threadpool_chunk_add` / `_set`).
typedef struct kairs_ggml_team {
    // This thread's index.
    int ith;
    // Threads.
    int nth;
    // ggml's chunks per thread (`GGML_KLEIDIAI_CHUNK_MULTIPLIER`, 4; 1 on NUMA).
    int chunk_multiplier;
    // `ggml_barrier`.
    void (*barrier)(void *ctx);
    // `ggml_threadpool_chunk_set`.
    void (*chunk_set)(void *ctx, int value);
    // `ggml_threadpool_chunk_add` (returns the value before the addition).
    int (*chunk_add)(void *ctx, int delta);
    // Passed to the three functions (ggml's threadpool).
    void *ctx;
} kairs_ggml_team;

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

// Full check of repacked weights, payload checksums included. Here and in
// every call taking `packed`, `packed_size` is the size
// [`kairs_repack_size`] reported: more bytes are refused
// (`KAIRS_ERR_FILE_TRAILING`), fewer too (`KAIRS_ERR_FILE_TRUNCATED`).
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

// Reads GGML_KLEIDIAI_SME the way ggml reads it: `*setting` = -1 (unset or
// invalid), 0 or N; `*warning` (if `warning` is not NULL) = NULL, or the text
// to log for an invalid value (ggml warns and uses the automatic cap).
//
// # Safety
// `setting` is writable; `warning` NULL or writable.
int kairs_ggml_sme_setting(int *setting, const char **warning);

// Bytes `kairs_ggml_repack` writes for 2-D weights of ggml type `type` (Q4_0,
// Q8_0 or F32) and sizes `ne[4]`, from the shape alone: the packed payloads
// only (each layout starting 64-byte aligned), what the kernels read; what
// they are stays in the handle. An error means these weights are not taken
// (type, shape, or no kernel on this CPU): leave them to ggml's own code.
// `sme`: -1 automatic (SME when present, capped at 1 thread), 0 no SME
// kernels, N at most N threads on SME kernels (GGML_KLEIDIAI_SME).
//
// # Safety
// `ne` points to 4 values, `size` is writable.
int kairs_ggml_packed_size(int32_t type_, const int64_t *ne, int sme, size_t *size);

// Repacks `src0` (contiguous rows of ggml type `src0->type`) into `dst` and
// returns in `*out` the handle that views it, its kernels resolved for this
// CPU (`*out` is NULL after an error). `dst` receives only the packed
// payloads, the first `kairs_ggml_packed_size` bytes (bytes after them are not
// touched); it must be 64-byte aligned, hold at least that size and not
// overlap `data`, all checked (with the type, the shape and that a kernel
// runs here) before anything is packed or written. The identity of the bytes comes from this
// call, not from the bytes: the handle alone says what they are.
//
// # Safety
// `src0` valid, `data` readable for `data_size` bytes during the call, `out`
// writable; `dst` readable and writable for `dst_size` bytes from this call
// until `kairs_ggml_close` of the handle, and neither written nor freed by
// anyone else in that time (after an error: only during the call).
int kairs_ggml_repack(const struct kairs_desc *src0,
                      const void *data,
                      size_t data_size,
                      int sme,
                      void *dst,
                      size_t dst_size,
                      struct kairs_ggml_weights **out);

// Closes a handle (NULL is ignored).
//
// # Safety
// `w` is NULL or an open handle, not used afterwards.
void kairs_ggml_close(struct kairs_ggml_weights *w);

// ggml's work size of mul_mat with `m` activation rows (the same for every
// thread count).
//
// # Safety
// `w` an open handle, `size` writable.
int kairs_ggml_work_size(const struct kairs_ggml_weights *w, int64_t m, size_t *size);

// The kernel thread `ith` of `nth` runs for `m` rows (static string).
//
// # Safety
// `w` an open handle, `name` writable.
int kairs_ggml_kernel(const struct kairs_ggml_weights *w, int64_t m, int ith, int nth, const char **name);

// Thread `team->ith`'s part of ggml mul_mat: dst = src1 x weights^T, src1 F32
// [k, m, ne12, ne13], dst F32 [n, m, ne12, ne13] (the weights broadcast over
// both batch dimensions); `work` at least `kairs_ggml_work_size`
// bytes. Every thread of the node calls it (the contract of
// `kairs_ggml_team`); src1, dst and work must not overlap, and nobody else uses
// dst and work during the call. All checks happen before the first barrier, and
// an error still takes part in every barrier, so all threads return.
//
// # Safety
// As documented there: every pointer valid for its size, `team` the
// calling ggml thread's, all threads of the node calling with the same
// arguments.
int kairs_ggml_mul_mat(const struct kairs_ggml_weights *w,
                       const struct kairs_desc *src1,
                       const void *src1_data,
                       size_t src1_size,
                       const struct kairs_desc *dst,
                       void *dst_data,
                       size_t dst_size,
                       void *work,
                       size_t work_size,
                       const struct kairs_ggml_team *team);

// [`kairs_ggml_mul_mat`] with src1 and dst given by ggml's own arrays
// (a tensor's `type`, `ne`, `nb` and `data`, read where the tensor keeps
// them: no descriptor is built) and valid for the bytes their `ne`/`nb`
// span (`ggml_nbytes`), which the caller vouches for instead of passing
// sizes. The same checks and errors, on those spans; the shim's call.
//
// # Safety
// As [`kairs_ggml_mul_mat`], with `src1_ne`/`dst_ne` pointing to 4 sizes,
// `src1_nb`/`dst_nb` to 4 strides, and src1 and dst valid for the bytes
// those span.
int kairs_ggml_mul_mat_nb(const struct kairs_ggml_weights *w,
                          int32_t src1_type,
                          const int64_t *src1_ne,
                          const size_t *src1_nb,
                          const void *src1_data,
                          int32_t dst_type,
                          const int64_t *dst_ne,
                          const size_t *dst_nb,
                          void *dst_data,
                          void *work,
                          size_t work_size,
                          const struct kairs_ggml_team *team);

// Thread `ith` of `nth`'s share of ggml get_rows (rows split as ggml splits
// them): dst row i, at `i * dst_row_stride` bytes, = weight row `rows[i]` as
// f32, from the first packed layout.
//
// # Safety
// `w` an open handle; `rows` readable for `n_rows` values; `dst` writable
// for `dst_size` bytes, rows of this thread's share written by it alone.
int kairs_ggml_get_rows(const struct kairs_ggml_weights *w,
                        const int32_t *rows,
                        size_t n_rows,
                        void *dst,
                        size_t dst_size,
                        size_t dst_row_stride,
                        int ith,
                        int nth);

// F16 weights stay outside ggml's KleidiAI buffer; with more than one
// activation row on SME2 ggml's path packs them per call for its bf16 kernel
// (`kleidiai::ggml::F16PerCall`): thread 0 transposes and packs the weights
// into the work buffer while every thread packs its LHS rows, a barrier, then
// ggml's static column split.
//
// This returns the kernel of ggml's F16 table when it runs here with `sme`
// (static string); an error when none does (ggml's own code computes F16
// weights).
//
// # Safety
// `name` is writable.
int kairs_ggml_f16_kernel(int sme, const char **name);

// 1 when ggml's KleidiAI path takes this F16 mul_mat (and so does this one):
// F16 weights `src0`, F32 activations `src1` with more than one row, batches
// contiguous in both, a kernel here; else 0.
//
// # Safety
// `src0` and `src1` valid descriptors.
int kairs_ggml_f16_accepts(const struct kairs_desc *src0, const struct kairs_desc *src1, int sme);

// The work buffer one F16 mul_mat (`kairs_ggml_f16_mul_mat`) needs.
//
// # Safety
// `src0`, `src1` valid descriptors, `size` writable.
int kairs_ggml_f16_work_size(const struct kairs_desc *src0,
                             const struct kairs_desc *src1,
                             int sme,
                             size_t *size);

// Thread `team->ith`'s part of an F16 mul_mat, as `kairs_ggml_mul_mat` (same
// team contract; src0, src1, dst and work must not overlap).
//
// # Safety
// As `kairs_ggml_mul_mat`, with `src0_data` readable for `src0_size` bytes.
int kairs_ggml_f16_mul_mat(const struct kairs_desc *src0,
                           const void *src0_data,
                           size_t src0_size,
                           const struct kairs_desc *src1,
                           const void *src1_data,
                           size_t src1_size,
                           const struct kairs_desc *dst,
                           void *dst_data,
                           size_t dst_size,
                           void *work,
                           size_t work_size,
                           const struct kairs_ggml_team *team,
                           int sme);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* KLEIDIAI_RS_H */
