/* C test of the kleidiai-rs C ABI, built against include/kleidiai_rs.h and
 * libkleidiai_capi.a and run under qemu for every CPU model by `xtask test`.
 * Exit status 0 when every check passed; each check prints one line. */
#include "kleidiai_rs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
static int checks = 0;

#define CHECK(cond, ...)                   \
    do {                                   \
        checks++;                          \
        if (!(cond)) {                     \
            failures++;                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);           \
            printf(" [%s]\n", kairs_last_error()); \
        }                                  \
    } while (0)

static uint32_t rng = 12345;
static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}
static float frand(void) { return (float)(next() % 2001) / 1000.0f - 1.0f; }

/* IEEE half -> float (for the reference). */
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    bits = sign | ((exp + 112) << 23) | (man << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

enum { N = 24, K = 64, M = 5 };

/* ggml block_q4_0: f16 scale then 16 bytes (value j low nibble, j+16 high). */
static void make_q4_0(uint8_t* w, float* deq) {
    for (int r = 0; r < N; r++) {
        for (int b = 0; b < K / 32; b++) {
            uint8_t* blk = w + (r * (K / 32) + b) * 18;
            uint16_t d = 0x2e66; /* ~0.1 */
            memcpy(blk, &d, 2);
            for (int j = 0; j < 16; j++) {
                uint8_t lo = next() & 15, hi = next() & 15;
                blk[2 + j] = (uint8_t)(lo | (hi << 4));
                deq[r * K + b * 32 + j] = half_to_float(d) * (float)(lo - 8);
                deq[r * K + b * 32 + j + 16] = half_to_float(d) * (float)(hi - 8);
            }
        }
    }
}

static kairs_desc desc(int type, int64_t ne0, int64_t ne1, size_t esize_or_block, size_t row_bytes) {
    kairs_desc d;
    d.type = type;
    d.ne[0] = ne0;
    d.ne[1] = ne1;
    d.ne[2] = 1;
    d.ne[3] = 1;
    d.nb[0] = esize_or_block;
    d.nb[1] = row_bytes;
    d.nb[2] = row_bytes * (size_t)ne1;
    d.nb[3] = d.nb[2];
    return d;
}

static void run_type(int type) {
    static uint8_t wq[N * (K / 32) * 18];
    static float wf[N * K], deq[N * K], x[M * K], y[M * N], rows_out[3 * K];
    const void* wdata;
    size_t wsize;
    kairs_desc d0;
    if (type == KAIRS_TYPE_Q4_0) {
        make_q4_0(wq, deq);
        wdata = wq;
        wsize = sizeof(wq);
        d0 = desc(type, K, N, 18, (K / 32) * 18);
    } else {
        for (int i = 0; i < N * K; i++) deq[i] = wf[i] = frand();
        wdata = wf;
        wsize = sizeof(wf);
        d0 = desc(type, K, N, 4, K * 4);
    }
    const char* tname = type == KAIRS_TYPE_Q4_0 ? "Q4_0" : "F32";

    size_t size = 0;
    int st = kairs_repack_size(&d0, wdata, wsize, &size);
    if (st == KAIRS_ERR_UNSUPPORTED) {
        /* No kernel for this type on this CPU: say so, check it is an error with a reason. */
        printf("SKIP %s: no kernel on this CPU (%s)\n", tname, kairs_last_error());
        CHECK(strlen(kairs_last_error()) > 0, "%s: unsupported without a reason", tname);
        return;
    }
    CHECK(st == KAIRS_OK && size > 0, "%s: repack_size -> %d", tname, st);
    void* packed = aligned_alloc(64, (size + 63) / 64 * 64);
    CHECK(kairs_repack(&d0, wdata, wsize, packed, size, 0) == KAIRS_OK, "%s: repack", tname);
    CHECK(kairs_repack(&d0, wdata, wsize, packed, size - 1, 0) == KAIRS_ERR_BUFFER, "%s: short repack buffer", tname);
    CHECK(kairs_verify(packed, size) == KAIRS_OK, "%s: verify", tname);

    const char* name = NULL;
    CHECK(kairs_kernel_name(packed, size, M, &name) == KAIRS_OK && name, "%s: kernel name", tname);
    printf("%s: kernel for m=%d: %s\n", tname, M, name ? name : "?");
    size_t work = 0;
    CHECK(kairs_work_size(packed, size, M, &work) == KAIRS_OK && work > 0, "%s: work size", tname);

    for (int i = 0; i < M * K; i++) x[i] = frand();
    kairs_desc d1 = desc(KAIRS_TYPE_F32, K, M, 4, K * 4);
    kairs_desc dd = desc(KAIRS_TYPE_F32, N, M, 4, N * 4);
    for (int threads = 1; threads <= 2; threads++) {
        memset(y, 0, sizeof(y));
        st = kairs_mul_mat(packed, size, &d1, x, sizeof(x), &dd, y, sizeof(y), threads);
        CHECK(st == KAIRS_OK, "%s: mul_mat with %d threads -> %d", tname, threads, st);
        double worst = 0;
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++) {
                double want = 0, mag = 1;
                for (int p = 0; p < K; p++) {
                    want += (double)x[i * K + p] * deq[j * K + p];
                    mag += fabs((double)x[i * K + p] * deq[j * K + p]);
                }
                double err = fabs(y[i * N + j] - want);
                /* Q4_0 quantises the activations to int8: 1.5% of the magnitude. */
                double tol = (type == KAIRS_TYPE_Q4_0 ? 1.5e-2 : 1e-5) * mag;
                if (err > tol) CHECK(0, "%s: y[%d][%d] = %f, want %f", tname, i, j, y[i * N + j], want);
                if (err > worst) worst = err;
            }
        }
        printf("%s: mul_mat %d thread(s): max |err| %.3g\n", tname, threads, worst);
    }

    int64_t rows[3] = {0, N - 1, 7};
    CHECK(kairs_get_rows(packed, size, rows, 3, rows_out, 3 * K) == KAIRS_OK, "%s: get_rows", tname);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < K; c++)
            if (rows_out[r * K + c] != deq[rows[r] * K + c])
                CHECK(0, "%s: get_rows row %lld col %d", tname, (long long)rows[r], c);

    /* Bad input: every one an error with a message, nothing written out of bounds. */
    int64_t bad_row = N;
    CHECK(kairs_get_rows(packed, size, &bad_row, 1, rows_out, K) == KAIRS_ERR_RANGE, "%s: row out of range", tname);
    CHECK(kairs_get_rows(packed, size, rows, 3, rows_out, 2 * K) == KAIRS_ERR_BUFFER, "%s: short get_rows out", tname);
    CHECK(kairs_mul_mat(packed, size, NULL, x, sizeof(x), &dd, y, sizeof(y), 1) == KAIRS_ERR_INVALID, "%s: NULL desc", tname);
    CHECK(kairs_mul_mat(packed, size, &d1, x, sizeof(x), &dd, y, sizeof(y) - 4, 1) == KAIRS_ERR_BUFFER, "%s: short dst", tname);
    kairs_desc d1bad = d1;
    d1bad.ne[0] = K / 2;
    d1bad.nb[1] = K * 2;
    CHECK(kairs_mul_mat(packed, size, &d1bad, x, sizeof(x), &dd, y, sizeof(y), 1) == KAIRS_ERR_SHAPE, "%s: wrong k", tname);
    kairs_desc d1strided = d1;
    d1strided.nb[0] = 8; /* non-contiguous rows */
    CHECK(kairs_mul_mat(packed, size, &d1strided, x, sizeof(x), &dd, y, sizeof(y), 1) == KAIRS_ERR_SHAPE,
          "%s: non-contiguous rows", tname);
    CHECK(kairs_mul_mat(packed, size - 1, &d1, x, sizeof(x), &dd, y, sizeof(y), 1) == KAIRS_ERR_FILE_TRUNCATED,
          "%s: truncated packed", tname);
    ((uint8_t*)packed)[size / 2] ^= 0x10;
    CHECK(kairs_verify(packed, size) == KAIRS_ERR_FILE_CHECKSUM, "%s: tampered payload caught by verify", tname);
    ((uint8_t*)packed)[size / 2] ^= 0x10;
    ((uint8_t*)packed)[20] ^= 0x01; /* container header */
    CHECK(kairs_mul_mat(packed, size, &d1, x, sizeof(x), &dd, y, sizeof(y), 1) == KAIRS_ERR_FILE_CHECKSUM,
          "%s: tampered header", tname);
    free(packed);
}

int main(void) {
    printf("kleidiai-rs %s, features 0x%x, SME vector %u bytes\n", kairs_version(), kairs_cpu_features(),
           kairs_sme_vector_bytes());
    CHECK(kairs_cpu_features() == 0 || (kairs_cpu_features() & KAIRS_FEAT_NEON), "NEON when anything");

    /* Weights whose row length is not whole Q4_0 blocks. */
    static uint8_t w[4 * 18];
    kairs_desc bad = desc(KAIRS_TYPE_Q4_0, 48, 1, 18, 36);
    size_t size;
    CHECK(kairs_repack_size(&bad, w, sizeof(w), &size) == KAIRS_ERR_SHAPE, "k = 48 Q4_0 rejected");
    kairs_desc other = desc(3 /* Q4_1: not supported */, 32, 1, 20, 20);
    CHECK(kairs_repack_size(&other, w, sizeof(w), &size) == KAIRS_ERR_TYPE, "unsupported ggml type rejected");
    CHECK(kairs_repack_size(NULL, w, sizeof(w), &size) == KAIRS_ERR_INVALID, "NULL src0 rejected");

    run_type(KAIRS_TYPE_Q4_0);
    run_type(KAIRS_TYPE_F32);

    printf("capi_test: %d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
