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

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. */
#define KAIRS_OK 0
#define KAIRS_ERR_INVALID (-1)     /* bad argument: shape, stride, type, null pointer */
#define KAIRS_ERR_UNSUPPORTED (-2) /* no kernel runs here, or packed for another CPU/vector length */
#define KAIRS_ERR_LAYOUT (-3)      /* packed data does not fit the kernel or is corrupted */
#define KAIRS_ERR_BUFFER (-4)      /* a buffer is too small */
#define KAIRS_ERR_OVERFLOW (-5)    /* a size does not fit in size_t */
#define KAIRS_ERR_INTERNAL (-6)    /* a bug in kleidiai-rs (caught; please report) */

/* Tensor types: ggml's enum ggml_type values. */
#define KAIRS_TYPE_F32 0
#define KAIRS_TYPE_F16 1
#define KAIRS_TYPE_Q4_0 2
#define KAIRS_TYPE_Q8_0 8

/* CPU feature bits of kairs_cpu_features(). */
#define KAIRS_FEAT_NEON (1u << 0)
#define KAIRS_FEAT_FP16 (1u << 1)
#define KAIRS_FEAT_BF16 (1u << 2)
#define KAIRS_FEAT_DOTPROD (1u << 3)
#define KAIRS_FEAT_I8MM (1u << 4)
#define KAIRS_FEAT_SVE (1u << 5)
#define KAIRS_FEAT_SVE2 (1u << 6)
#define KAIRS_FEAT_SVE2P1 (1u << 7)
#define KAIRS_FEAT_SME (1u << 8)
#define KAIRS_FEAT_SME2 (1u << 9)
#define KAIRS_FEAT_SME2P1 (1u << 10)

/* A ggml tensor's shape: ne[0] values per row, ne[1] rows, ne[2], ne[3]
 * batches; nb[] byte strides (nb[0] must be the element or block size). */
typedef struct kairs_desc {
    int32_t type;
    int64_t ne[4];
    size_t nb[4];
} kairs_desc;

/* The CPU features in use (detected, minus KLEIDIAI_DISABLE). */
uint32_t kairs_cpu_features(void);
/* SME streaming vector length in bytes (0: no SME). */
uint32_t kairs_sme_vector_bytes(void);
/* Version of kleidiai-rs and of the KleidiAI it carries, e.g. "0.1.0 (KleidiAI 1.30.0)". */
const char* kairs_version(void);
/* Why the last call on this thread failed ("" after a success). Valid until
 * the next call on this thread. */
const char* kairs_last_error(void);

/* Bytes kairs_repack needs for weights `src0` (type F32, F16, Q4_0 or Q8_0;
 * ne[0] = k, ne[1] = n; only F16 may have ne[2] > 1). */
int kairs_repack_size(const kairs_desc* src0, const void* data, size_t data_size, size_t* size);
/* Repacks `src0` into `dst` (64-byte aligned, at least kairs_repack_size
 * bytes). `hybrid` != 0 lets mul_mat run SME and non-SME kernels at once
 * when it gets more threads than the SME cap (results then depend on the
 * thread count). */
int kairs_repack(const kairs_desc* src0, const void* data, size_t data_size, void* dst, size_t dst_size, int hybrid);
/* Full check of repacked weights, payload checksums included. */
int kairs_verify(const void* packed, size_t packed_size);
/* The kernel serving `m` rows for these weights, or "reference" (no
 * KleidiAI kernel: for F16 weights with m = 1 that means ggml's own F16 path,
 * see kairs_mul_mat). */
int kairs_kernel_name(const void* packed, size_t packed_size, int64_t m, const char** name);
/* Upper bound of the scratch memory one mul_mat of `m` rows uses (it is
 * allocated internally and reused per thread). */
int kairs_work_size(const void* packed, size_t packed_size, int64_t m, size_t* size);
/* dst = src1 x weights^T with ggml's mul_mat semantics: src1 F32 [k, m,
 * ne12], dst F32 [n, m, ne12]; F16 weights broadcast over batches. Like
 * ggml's KleidiAI path, F16 weights with m = 1 are not served here
 * (KAIRS_ERR_UNSUPPORTED): run ggml's own F16 path for them. */
int kairs_mul_mat(const void* packed, size_t packed_size, const kairs_desc* src1, const void* src1_data,
                  size_t src1_size, const kairs_desc* dst, void* dst_data, size_t dst_size, int n_threads);
/* Weight rows `rows` as f32 (ggml get_rows): n_rows x k floats into dst. */
int kairs_get_rows(const void* packed, size_t packed_size, const int64_t* rows, size_t n_rows, float* dst,
                   size_t dst_floats);

/* ---- ggml's threads --------------------------------------------------------
 * ggml's KleidiAI extra buffer type run by ggml's own threads (the shim in
 * kleidiai-capi/ggml/ uses these): weights repacked once into ggml's buffer
 * and viewed by a handle; each thread of a graph node calls
 * kairs_ggml_mul_mat with its ith/nth and ggml's barrier and chunk counter,
 * so no thread pool of kleidiai-rs runs inside ggml's. Kernel choice,
 * SME thread cap, hybrid SME + NEON runs, LHS row split and column chunks
 * follow ggml's own KleidiAI path (kleidiai::ggml::ThreadedWeights).
 * `sme` arguments: -1 automatic (SME when present, capped at 1 thread),
 * 0 no SME kernels, N at most N threads on SME kernels (GGML_KLEIDIAI_SME). */

/* Opaque: repacked weights viewed in caller memory. */
typedef struct kairs_ggml_weights kairs_ggml_weights;

/* ggml's threads of one graph node. Contract: every thread of the node calls
 * with the same arguments and its own ith; barrier returns when all nth
 * threads reached it and publishes their writes (ggml_barrier); chunk_add is
 * an atomic fetch-and-add returning the value before, on a counter the node
 * shares, chunk_set stores to it (ggml_threadpool_chunk_add / _set). */
typedef struct kairs_ggml_team {
    int ith;
    int nth;
    int chunk_multiplier; /* chunks per thread: 4 in ggml (GGML_KLEIDIAI_CHUNK_MULTIPLIER), 1 on NUMA */
    void (*barrier)(void* ctx);
    void (*chunk_set)(void* ctx, int value);
    int (*chunk_add)(void* ctx, int delta);
    void* ctx;
} kairs_ggml_team;

/* GGML_KLEIDIAI_SME read the way ggml reads it: *setting = -1 (unset or
 * invalid), 0 or N; *warning (if warning is not NULL) = NULL, or the text to
 * log for an invalid value (ggml warns and uses the automatic cap). */
int kairs_ggml_sme_setting(int* setting, const char** warning);
/* Bytes kairs_ggml_repack writes for 2-D weights of ggml type `type` (Q4_0,
 * Q8_0 or F32) and sizes ne[4], from the shape alone. An error means these
 * weights are not taken (type, shape, or no kernel on this CPU): leave them
 * to ggml's own code. */
int kairs_ggml_packed_size(int32_t type, const int64_t ne[4], int sme, size_t* size);
/* Repacks `src0` (contiguous rows) into `dst` (64-byte aligned, at least
 * kairs_ggml_packed_size bytes, not overlapping `data`); *written = bytes written. */
int kairs_ggml_repack(const kairs_desc* src0, const void* data, size_t data_size, int sme, void* dst, size_t dst_size,
                      size_t* written);
/* Opens a handle on `size` repacked bytes at `packed` (as kairs_ggml_repack
 * wrote them, for weights of ggml type `type`), resolving the kernels for this
 * CPU. The bytes must stay valid and unchanged until kairs_ggml_close. */
int kairs_ggml_open(const void* packed, size_t size, int32_t type, int sme, kairs_ggml_weights** out);
/* Closes a handle (NULL is ignored). */
void kairs_ggml_close(kairs_ggml_weights* w);
/* ggml's work size of mul_mat with `m` activation rows (the same for every
 * thread count). */
int kairs_ggml_work_size(const kairs_ggml_weights* w, int64_t m, size_t* size);
/* The kernel thread ith of nth runs for `m` rows (static string). */
int kairs_ggml_kernel(const kairs_ggml_weights* w, int64_t m, int ith, int nth, const char** name);
/* Thread team->ith's part of ggml mul_mat: dst = src1 x weights^T, src1 F32
 * [k, m, ne12], dst F32 [n, m, ne12]; `work` at least kairs_ggml_work_size
 * bytes. Every thread of the node calls it (team contract above); src1, dst
 * and work must not overlap, and nobody else uses dst and work during the
 * call. All checks happen before the first barrier, and an error still
 * takes part in every barrier, so all threads return. */
int kairs_ggml_mul_mat(const kairs_ggml_weights* w, const kairs_desc* src1, const void* src1_data, size_t src1_size,
                       const kairs_desc* dst, void* dst_data, size_t dst_size, void* work, size_t work_size,
                       const kairs_ggml_team* team);
/* Thread ith of nth's share of ggml get_rows (rows split as ggml splits
 * them): dst row i, at i * dst_row_stride bytes, = weight row rows[i] as f32,
 * from the first packed layout. */
int kairs_ggml_get_rows(const kairs_ggml_weights* w, const int32_t* rows, size_t n_rows, void* dst, size_t dst_size,
                        size_t dst_row_stride, int ith, int nth);

/* F16 weights stay outside ggml's KleidiAI buffer; with more than one
 * activation row on SME2 ggml's path packs them per call for its bf16 kernel
 * (kleidiai::ggml::F16PerCall): thread 0 transposes and packs the weights
 * into the work buffer while every thread packs its LHS rows, a barrier, then
 * ggml's static column split. */

/* The kernel of ggml's F16 table when it runs here with `sme` (static
 * string); an error when none does (ggml's own code computes F16 weights). */
int kairs_ggml_f16_kernel(int sme, const char** name);
/* 1 when ggml's KleidiAI path takes this F16 mul_mat (and so does this one):
 * F16 weights `src0`, F32 activations `src1` with more than one row, batches
 * contiguous in both, a kernel here; else 0. */
int kairs_ggml_f16_accepts(const kairs_desc* src0, const kairs_desc* src1, int sme);
/* The work buffer one such mul_mat needs. */
int kairs_ggml_f16_work_size(const kairs_desc* src0, const kairs_desc* src1, int sme, size_t* size);
/* Thread team->ith's part of it, as kairs_ggml_mul_mat (same team contract;
 * src0, src1, dst and work must not overlap). */
int kairs_ggml_f16_mul_mat(const kairs_desc* src0, const void* src0_data, size_t src0_size, const kairs_desc* src1,
                           const void* src1_data, size_t src1_size, const kairs_desc* dst, void* dst_data,
                           size_t dst_size, void* work, size_t work_size, const kairs_ggml_team* team, int sme);

#ifdef __cplusplus
}
#endif

#endif /* KLEIDIAI_RS_H */
