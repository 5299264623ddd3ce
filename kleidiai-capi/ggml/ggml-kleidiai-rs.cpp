// kleidiai-rs as ggml-cpu's KleidiAI extra buffer type.
//
// Defines ggml_backend_cpu_kleidiai_buffer_type(), the entry point ggml-cpu
// calls when built with GGML_USE_CPU_KLEIDIAI, on top of kleidiai-capi
// (kleidiai_rs.h, "ggml's threads"): weights are repacked by kleidiai-rs
// into the buffer (only the packed bytes the kernels read; each tensor's
// handle holds what they are), MUL_MAT (and GET_ROWS of repacked weights)
// run through it on ggml's own threads, and every op it declines stays with
// ggml's CPU code. Compiled into the ggml-cpu target by kleidiai-rs.cmake, with
// llama.cpp's own KleidiAI code (GGML_CPU_KLEIDIAI) off.
//
// What it accepts mirrors ggml's own KleidiAI path (ggml-cpu/kleidiai):
// MUL_MAT with 2-D Q4_0, Q8_0 or F32 weights in this buffer, F32 activations
// and output, when a kernel runs on this CPU (GGML_KLEIDIAI_SME honoured),
// and MUL_MAT of F16 weights outside it with more than one activation row on
// SME2 (packed per call, as ggml's path does).

#include "ggml-backend-impl.h"
#include "ggml-cpu-impl.h"
#include "ggml-cpu.h"
#include "ggml-impl.h"
#include "kleidiai/kleidiai.h"
#include "kleidiai_rs.h"
#include "traits.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

namespace {

// GGML_KLEIDIAI_SME (-1 automatic, 0 off, N cap) and ggml's chunks per
// thread (GGML_KLEIDIAI_CHUNK_MULTIPLIER), read once like ggml reads them.
int g_sme = -1;
int g_chunk_multiplier = 4;
bool g_trace = false;
const char * g_f16_kernel = nullptr;  // ggml's F16 kernel when it runs here

void init_settings() {
    static std::once_flag once;
    std::call_once(once, [] {
        const char * warning = nullptr;
        if (kairs_ggml_sme_setting(&g_sme, &warning) != KAIRS_OK) {
            g_sme = -1;
        }
        if (warning) {
            GGML_LOG_WARN("%s\n", warning);
        }
        if (const char * m = std::getenv("GGML_KLEIDIAI_CHUNK_MULTIPLIER")) {
            char * end = nullptr;
            const long v = std::strtol(m, &end, 10);
            if (end != m && *end == '\0' && v > 0 && v <= 1 << 20) {
                g_chunk_multiplier = (int) v;
            } else {
                GGML_LOG_WARN("kleidiai-rs: invalid GGML_KLEIDIAI_CHUNK_MULTIPLIER='%s'\n", m);
            }
        }
        g_trace = std::getenv("GGML_KLEIDIAI_RS_TRACE") != nullptr;
        if (kairs_ggml_f16_kernel(g_sme, &g_f16_kernel) != KAIRS_OK) {
            g_f16_kernel = nullptr;
        }
        GGML_LOG_INFO("kleidiai-rs: %s, GGML_KLEIDIAI_SME %s%d\n", kairs_version(),
                      g_sme < 0 ? "automatic " : "", g_sme < 0 ? 1 : g_sme);
    });
}

// Kernels run, counted per name when GGML_KLEIDIAI_RS_TRACE is set
// (ggml_kleidiai_rs_report prints them).
struct kernel_count {
    std::atomic<const char *> name{ nullptr };
    std::atomic<uint64_t>     count{ 0 };
};
kernel_count g_counts[64];

void count_kernel(const char * name) {
    for (auto & c : g_counts) {
        const char * cur = c.name.load();
        if (cur == nullptr) {
            const char * expected = nullptr;
            if (c.name.compare_exchange_strong(expected, name) || expected == name) {
                c.count++;
                return;
            }
            cur = expected;
        }
        if (cur == name) {
            c.count++;
            return;
        }
    }
}

kairs_desc desc_of(const ggml_tensor * t) {
    kairs_desc d;
    d.type = (int32_t) t->type;
    for (int i = 0; i < 4; ++i) {
        d.ne[i] = t->ne[i];
        d.nb[i] = t->nb[i];
    }
    return d;
}

bool kairs_type(ggml_type t) {
    return t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q8_0 || t == GGML_TYPE_F32;
}

// Bytes the packed weights of `t` take, or 0 when kleidiai-rs declines them.
size_t packed_size(const ggml_tensor * t) {
    size_t size = 0;
    if (!kairs_type(t->type) || kairs_ggml_packed_size((int32_t) t->type, t->ne, g_sme, &size) != KAIRS_OK) {
        return 0;
    }
    return size;
}

void barrier(void * tp) {
    ggml_barrier((ggml_threadpool *) tp);
}

void chunk_set(void * tp, int v) {
    ggml_threadpool_chunk_set((ggml_threadpool *) tp, v);
}

int chunk_add(void * tp, int v) {
    return ggml_threadpool_chunk_add((ggml_threadpool *) tp, v);
}

// One weight tensor of the buffer: its kleidiai-rs handle, or none when the
// weights were kept as they are (ggml's own code then computes with them).
class weight_traits : public ggml::cpu::tensor_traits {
  public:
    kairs_ggml_weights * w = nullptr;

    ~weight_traits() override { kairs_ggml_close(w); }

    bool work_size(int /*n_threads*/, const ggml_tensor * op, size_t & size) override {
        if (w == nullptr || op->op != GGML_OP_MUL_MAT) {
            return false;
        }
        return kairs_ggml_work_size(w, op->src[1]->ne[1], &size) == KAIRS_OK;
    }

    bool compute_forward(ggml_compute_params * params, ggml_tensor * op) override {
        if (w == nullptr) {
            return false;
        }
        if (op->op == GGML_OP_MUL_MAT) {
            const ggml_tensor * src1 = op->src[1];
            if (g_trace && params->ith == 0) {
                // Thread 0's kernel, and the last thread's when a hybrid run differs.
                const char * first = nullptr;
                const char * last  = nullptr;
                if (kairs_ggml_kernel(w, src1->ne[1], 0, params->nth, &first) == KAIRS_OK) {
                    count_kernel(first);
                }
                if (kairs_ggml_kernel(w, src1->ne[1], params->nth - 1, params->nth, &last) == KAIRS_OK &&
                    last != first) {
                    count_kernel(last);
                }
            }
            // The tensors' own arrays, valid for the bytes they span (ggml_nbytes).
            const kairs_ggml_team team = { params->ith, params->nth, ggml_is_numa() ? 1 : g_chunk_multiplier,
                                           barrier,     chunk_set,   chunk_add,
                                           params->threadpool };
            if (kairs_ggml_mul_mat_nb(w, src1->type, src1->ne, src1->nb, src1->data, op->type, op->ne, op->nb,
                                      op->data, params->wdata, params->wsize, &team) != KAIRS_OK) {
                // Weights this buffer accepted: an error is a bug (ggml asserts likewise).
                GGML_ABORT("kleidiai-rs: %s: %s", op->name, kairs_last_error());
            }
            return true;
        }
        if (op->op == GGML_OP_GET_ROWS) {
            const ggml_tensor * rows = op->src[1];
            GGML_ASSERT(rows->type == GGML_TYPE_I32 && ggml_is_contiguous(rows));
            if (kairs_ggml_get_rows(w, (const int32_t *) rows->data, (size_t) ggml_nelements(rows), op->data,
                                    ggml_nbytes(op), op->nb[1], params->ith, params->nth) != KAIRS_OK) {
                GGML_ABORT("kleidiai-rs: %s: %s", op->name, kairs_last_error());
            }
            return true;
        }
        return false;
    }
};

// F16 weights outside the buffer, packed per call (see kairs_ggml_f16_*).
class f16_traits : public ggml::cpu::tensor_traits {
  public:
    bool work_size(int /*n_threads*/, const ggml_tensor * op, size_t & size) override {
        const kairs_desc d0 = desc_of(op->src[0]), d1 = desc_of(op->src[1]);
        return op->op == GGML_OP_MUL_MAT && kairs_ggml_f16_work_size(&d0, &d1, g_sme, &size) == KAIRS_OK;
    }

    bool compute_forward(ggml_compute_params * params, ggml_tensor * op) override {
        if (op->op != GGML_OP_MUL_MAT) {
            return false;
        }
        const ggml_tensor * src0 = op->src[0];
        const ggml_tensor * src1 = op->src[1];
        const kairs_desc d0 = desc_of(src0), d1 = desc_of(src1), dd = desc_of(op);
        const kairs_ggml_team team = { params->ith, params->nth, ggml_is_numa() ? 1 : g_chunk_multiplier,
                                       barrier,     chunk_set,   chunk_add,
                                       params->threadpool };
        if (g_trace && params->ith == 0) {
            count_kernel(g_f16_kernel);
        }
        if (kairs_ggml_f16_mul_mat(&d0, src0->data, ggml_nbytes(src0), &d1, src1->data, ggml_nbytes(src1), &dd,
                                   op->data, ggml_nbytes(op), params->wdata, params->wsize, &team,
                                   g_sme) != KAIRS_OK) {
            // The weights are ggml's own: its code can still compute them.
            GGML_LOG_DEBUG("kleidiai-rs: %s left to ggml's own code: %s\n", op->name, kairs_last_error());
            return false;
        }
        return true;
    }
};

f16_traits g_f16_traits;  // stateless; namespace scope, no guarded initialisation per call

// The buffer: ggml's aligned memory plus the traits of its tensors.
struct buffer_context {
    void *                                      data;
    std::vector<std::unique_ptr<weight_traits>> traits;
};

void buffer_free(ggml_backend_buffer_t buffer) {
    auto * ctx = (buffer_context *) buffer->context;
    ggml_aligned_free(ctx->data, buffer->size);
    delete ctx;
}

void * buffer_get_base(ggml_backend_buffer_t buffer) {
    return ((buffer_context *) buffer->context)->data;
}

ggml_status buffer_init_tensor(ggml_backend_buffer_t buffer, ggml_tensor * tensor) {
    auto * ctx = (buffer_context *) buffer->context;
    ctx->traits.push_back(std::make_unique<weight_traits>());
    tensor->extra = ctx->traits.back().get();
    return GGML_STATUS_SUCCESS;
}

// A handle needs its bytes unchanged: rewritten weights are ggml's own again.
void close_handle(ggml_tensor * tensor) {
    if (auto * traits = (weight_traits *) tensor->extra) {
        kairs_ggml_close(traits->w);
        traits->w = nullptr;
    }
}

void buffer_memset_tensor(ggml_backend_buffer_t, ggml_tensor * tensor, uint8_t value, size_t offset, size_t size) {
    close_handle(tensor);
    std::memset((char *) tensor->data + offset, value, size);
}

void buffer_set_tensor(ggml_backend_buffer_t buffer, ggml_tensor * tensor, const void * data, size_t offset,
                       size_t size) {
    GGML_ASSERT(offset == 0 && size == ggml_nbytes(tensor));
    auto *           traits = (weight_traits *) tensor->extra;
    const kairs_desc d      = desc_of(tensor);
    const size_t     room   = ggml_backend_buft_get_alloc_size(buffer->buft, tensor);
    close_handle(tensor);  // it views tensor->data, rewritten here
    // tensor->data receives the packed payloads only; the handle says what they are.
    if (packed_size(tensor) == 0 ||
        kairs_ggml_repack(&d, data, size, g_sme, tensor->data, room, &traits->w) != KAIRS_OK) {
        GGML_LOG_DEBUG("kleidiai-rs: %s kept for ggml's own code: %s\n", tensor->name, kairs_last_error());
        traits->w = nullptr;
        std::memcpy(tensor->data, data, size);
    }
}

void buffer_clear(ggml_backend_buffer_t buffer, uint8_t value) {
    auto * ctx = (buffer_context *) buffer->context;
    for (auto & t : ctx->traits) {
        kairs_ggml_close(t->w);
        t->w = nullptr;
    }
    std::memset(ctx->data, value, buffer->size);
}

const ggml_backend_buffer_i buffer_iface = {
    /* .free_buffer   = */ buffer_free,
    /* .get_base      = */ buffer_get_base,
    /* .init_tensor   = */ buffer_init_tensor,
    /* .memset_tensor = */ buffer_memset_tensor,
    /* .set_tensor    = */ buffer_set_tensor,
    /* .get_tensor    = */ nullptr,  // packed: not readable as ggml data (as ggml's KleidiAI buffer)
    /* .set_tensor_2d = */ nullptr,
    /* .get_tensor_2d = */ nullptr,
    /* .cpy_tensor    = */ nullptr,
    /* .clear         = */ buffer_clear,
    /* .reset         = */ nullptr,
};

const char * buft_get_name(ggml_backend_buffer_type_t) {
    return "CPU_KLEIDIAI_RS";
}

ggml_backend_buffer_t buft_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size) {
    void * data = ggml_aligned_malloc(size);
    if (data == nullptr) {
        GGML_LOG_ERROR("kleidiai-rs: cannot allocate %zu bytes\n", size);
        return nullptr;
    }
    return ggml_backend_buffer_init(buft, buffer_iface, new buffer_context{ data, {} }, size);
}

size_t buft_get_alignment(ggml_backend_buffer_type_t) {
    return 64;  // packed layouts start 64-byte aligned (ggml's own KleidiAI buffer: TENSOR_ALIGNMENT, 32)
}

size_t buft_get_alloc_size(ggml_backend_buffer_type_t, const ggml_tensor * tensor) {
    // Room for the raw weights too: they are kept when the repack is declined.
    return std::max(packed_size(tensor), ggml_nbytes(tensor));
}

class extra_buffer_type : public ggml::cpu::extra_buffer_type {
  public:
    ggml_backend_buffer_type_t buft = nullptr;

    // ggml's rules: MUL_MAT on 2-D Q4_0/Q8_0/F32 weights of this buffer, a
    // kernel for them here, host activations; Q4_0/Q8_0 with F32 (or I32)
    // 3-D activations, F32 with F32 activations and output. ggml's path
    // declines GET_ROWS (its kernel chain is empty for it), so does this.
    bool supports_op(ggml_backend_dev_t, const ggml_tensor * op) override {
        const ggml_tensor * src0 = op->src[0];
        const ggml_tensor * src1 = op->src[1];
        if (op->op != GGML_OP_MUL_MAT || !kairs_type(src0->type) || src0->buffer == nullptr ||
            src0->buffer->buft != buft || ggml_n_dims(src0) != 2 || src1->type != GGML_TYPE_F32 ||
            op->type != GGML_TYPE_F32) {
            return false;
        }
        // Loaded weights are taken (ggml asks on every graph): repacked ones
        // run here, ones kept as they are run ggml's own code (compute_forward
        // declines them). Weights still being placed answer from their shape.
        if (src0->extra == nullptr && packed_size(src0) == 0) {
            return false;
        }
        if (src1->buffer && !ggml_backend_buft_is_host(src1->buffer->buft)) {
            return false;
        }
        if (src0->type == GGML_TYPE_Q4_0 && src1->nb[1] != (size_t) src1->ne[0] * sizeof(float)) {
            // The SME2 kernel's LHS packer reads rows k floats apart: ggml's
            // path would compute these wrongly; ggml's own code computes them.
            GGML_LOG_DEBUG("kleidiai-rs: %s declined: activation rows not contiguous\n", op->name);
            return false;
        }
        return src0->type == GGML_TYPE_F32 || src1->ne[3] == 1;
    }

    ggml::cpu::tensor_traits * get_tensor_traits(const ggml_tensor * op) override {
        if (op->op != GGML_OP_MUL_MAT && op->op != GGML_OP_GET_ROWS) {
            return nullptr;  // most nodes of a graph: one test
        }
        if (op->src[0]->buffer && op->src[0]->buffer->buft == buft) {
            return (ggml::cpu::tensor_traits *) op->src[0]->extra;
        }
        // ggml's path: F16 weights anywhere, more than one activation row,
        // contiguous batches, a kernel here.
        if (op->op == GGML_OP_MUL_MAT && op->src[0]->type == GGML_TYPE_F16 && g_f16_kernel && op->src[1]->ne[1] > 1) {
            const kairs_desc d0 = desc_of(op->src[0]), d1 = desc_of(op->src[1]);
            if (kairs_ggml_f16_accepts(&d0, &d1, g_sme)) {
                return &g_f16_traits;
            }
        }
        return nullptr;
    }
};

}  // namespace

extern "C" void ggml_kleidiai_rs_report(FILE * out) {
    if (!g_trace) {
        std::fprintf(out, "kernel-report off (set GGML_KLEIDIAI_RS_TRACE=1)\n");
    }
    for (auto & c : g_counts) {
        if (const char * name = c.name.load()) {
            std::fprintf(out, "kernel %s %llu\n", name, (unsigned long long) c.count.load());
        }
    }
}

ggml_backend_buffer_type_t ggml_backend_cpu_kleidiai_buffer_type(void) {
    static extra_buffer_type          ctx;
    static ggml_backend_buffer_type   buft = {
        /* .iface   = */ {
                          /* .get_name         = */ buft_get_name,
                          /* .alloc_buffer     = */ buft_alloc_buffer,
                          /* .alloc_buffer_n   = */ nullptr,
                          /* .get_alignment    = */ buft_get_alignment,
                          /* .get_max_size     = */ nullptr,
                          /* .get_alloc_size   = */ buft_get_alloc_size,
                          /* .get_alloc_size_n = */ nullptr,
                          /* .is_host          = */ nullptr,
                          },
        /* .device  = */ ggml_backend_reg_dev_get(ggml_backend_cpu_reg(), 0),
        /* .context = */ &ctx,
    };
    init_settings();
    ctx.buft = &buft;
    return &buft;
}
