// kairs-llama: the small llama.cpp program of kleidiai-rs's `llama` test phase.
//
//   kairs-llama make-model OUT.gguf [--seed S] [--odd]   a llama-architecture model, F32, fixed-seed weights
//   kairs-llama quantize IN.gguf OUT.gguf TYPE      TYPE: q4_0 | q8_0 | f16 (llama_model_quantize, pure) | q4_0-mixed (not pure)
//   kairs-llama run MODEL.gguf OUT.bin [--threads N] [--prompt P] [--gen G] [--mark]
//
// `run` loads the model (no mmap: the weights live in the backend's buffers),
// evaluates a fixed sequence of P token ids in one batch with logits at every
// position, then generates G tokens greedily, one decode each. OUT.bin holds
// the token ids and every logit (see write_result); stdout gets one summary
// line per fact ("key value ..."), which the xtask `llama` phase reads.
// `--mark` brackets the prompt and the generation with a stat() of
// /kleidiai-mark/{begin,end}/{prompt,gen}, for instruction counting under qemu.
#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"
#include "llama.h"

#include <sys/stat.h>

#include <malloc.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(KAIRS_TRACE_KAI)
extern "C" uint64_t kairs_trace_counts[];
extern "C" const int kairs_trace_n;
extern "C" const char * const kairs_trace_names[];
#endif
#if defined(KAIRS_TRACE_RS)
// The kleidiai-rs shim's record of the kernels it ran (kleidiai-capi/ggml).
extern "C" void ggml_kleidiai_rs_report(FILE * out);
#endif

namespace {

// The model's shape: small enough for qemu, every weight dimension a
// multiple of 32 (Q4_0/Q8_0 blocks), grouped-query attention (2 KV heads).
struct Shape {
    int embd, head, head_kv, layer, ff, vocab;
};
constexpr Shape SHAPE = { 256, 4, 2, 4, 1024, 1000 };
// `make-model --odd`: dimensions that are multiples of 32 and of no power of
// two beyond 64 (n_embd 576 = 9 x 64, KV 192 = 3 x 64, n_ff 1504 = 47 x 32),
// 9 heads of 64, 3 KV heads, 2 layers: the kernels' k and n tails.
constexpr Shape ODD = { 576, 9, 3, 2, 1504, 1000 };
constexpr int N_CTX = 256;

[[noreturn]] void die(const std::string & msg) {
    std::fprintf(stderr, "kairs-llama: %s\n", msg.c_str());
    std::exit(1);
}

// splitmix64: a fixed, portable sequence.
struct Rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform in [-1, 1).
    float uniform() { return (float) ((double) (next() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }
};

void make_model(const char * path, uint64_t seed, const Shape & sh) {
    const int N_EMBD = sh.embd, N_HEAD = sh.head, N_HEAD_KV = sh.head_kv, N_LAYER = sh.layer, N_FF = sh.ff,
              N_VOCAB = sh.vocab;
    const int n_embd_kv = N_EMBD / N_HEAD * N_HEAD_KV;
    struct Spec {
        std::string name;
        int64_t cols, rows;  // ggml ne[0], ne[1] (rows = 1 for a 1-D tensor)
        float scale;         // weights uniform in [-scale, scale)
        bool ones;           // norm weights: all 1
    };
    std::vector<Spec> specs;
    const float lin_embd = std::sqrt(3.0f / N_EMBD), lin_ff = std::sqrt(3.0f / N_FF);
    specs.push_back({ "token_embd.weight", N_EMBD, N_VOCAB, 1.0f, false });
    for (int l = 0; l < N_LAYER; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        specs.push_back({ p + "attn_norm.weight", N_EMBD, 1, 0, true });
        specs.push_back({ p + "attn_q.weight", N_EMBD, N_EMBD, lin_embd, false });
        specs.push_back({ p + "attn_k.weight", N_EMBD, n_embd_kv, lin_embd, false });
        specs.push_back({ p + "attn_v.weight", N_EMBD, n_embd_kv, lin_embd, false });
        specs.push_back({ p + "attn_output.weight", N_EMBD, N_EMBD, lin_embd, false });
        specs.push_back({ p + "ffn_norm.weight", N_EMBD, 1, 0, true });
        specs.push_back({ p + "ffn_gate.weight", N_EMBD, N_FF, lin_embd, false });
        specs.push_back({ p + "ffn_up.weight", N_EMBD, N_FF, lin_embd, false });
        specs.push_back({ p + "ffn_down.weight", N_FF, N_EMBD, lin_ff, false });
    }
    specs.push_back({ "output_norm.weight", N_EMBD, 1, 0, true });
    // Logits with a spread of about 4: greedy choices far from ties.
    specs.push_back({ "output.weight", N_EMBD, N_VOCAB, 4.0f * lin_embd, false });

    size_t bytes = 0;
    for (const auto & s : specs) {
        bytes += (size_t) (s.cols * s.rows) * sizeof(float) + ggml_tensor_overhead();
    }
    ggml_init_params ip = { bytes + (1 << 20), nullptr, false };
    ggml_context * ctx = ggml_init(ip);
    gguf_context * g = gguf_init_empty();
    gguf_set_val_str(g, "general.architecture", "llama");
    gguf_set_val_str(g, "general.name", "kairs-random");
    gguf_set_val_u32(g, "general.file_type", 0);  // all F32
    gguf_set_val_u32(g, "llama.context_length", N_CTX);
    gguf_set_val_u32(g, "llama.embedding_length", N_EMBD);
    gguf_set_val_u32(g, "llama.block_count", N_LAYER);
    gguf_set_val_u32(g, "llama.feed_forward_length", N_FF);
    gguf_set_val_u32(g, "llama.attention.head_count", N_HEAD);
    gguf_set_val_u32(g, "llama.attention.head_count_kv", N_HEAD_KV);
    gguf_set_val_f32(g, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_set_val_u32(g, "llama.rope.dimension_count", N_EMBD / N_HEAD);
    gguf_set_val_f32(g, "llama.rope.freq_base", 10000.0f);
    gguf_set_val_u32(g, "llama.vocab_size", N_VOCAB);
    gguf_set_val_str(g, "tokenizer.ggml.model", "none");

    Rng rng{ seed };
    for (const auto & s : specs) {
        ggml_tensor * t = s.rows == 1 ? ggml_new_tensor_1d(ctx, GGML_TYPE_F32, s.cols)
                                      : ggml_new_tensor_2d(ctx, GGML_TYPE_F32, s.cols, s.rows);
        ggml_set_name(t, s.name.c_str());
        float * d = (float *) t->data;
        for (int64_t i = 0; i < s.cols * s.rows; ++i) {
            d[i] = s.ones ? 1.0f : s.scale * rng.uniform();
        }
        gguf_add_tensor(g, t);
    }
    if (!gguf_write_to_file(g, path, false)) {
        die(std::string("cannot write ") + path);
    }
    gguf_free(g);
    ggml_free(ctx);
    std::printf("model %s seed %llu n_embd %d n_layer %d n_ff %d n_vocab %d\n", path, (unsigned long long) seed,
                N_EMBD, N_LAYER, N_FF, N_VOCAB);
}

void quantize(const char * in, const char * out, const std::string & type) {
    llama_model_quantize_params p = llama_model_quantize_default_params();
    // q4_0-mixed: llama.cpp's own Q4_0 recipe (not pure): output.weight
    // becomes Q6_K, a type no KleidiAI path takes, so ggml's code runs it.
    p.pure = type != "q4_0-mixed";  // else every 2-D tensor of the one type
    if (type == "q4_0" || type == "q4_0-mixed") {
        p.ftype = LLAMA_FTYPE_MOSTLY_Q4_0;
    } else if (type == "q8_0") {
        p.ftype = LLAMA_FTYPE_MOSTLY_Q8_0;
    } else if (type == "f16") {
        p.ftype = LLAMA_FTYPE_MOSTLY_F16;
    } else {
        die("quantize: type must be q4_0, q4_0-mixed, q8_0 or f16, not " + type);
    }
    p.nthread = 1;
    if (llama_model_quantize(in, out, &p) != 0) {
        die(std::string("quantizing ") + in + " failed");
    }
    std::printf("quantized %s %s\n", out, type.c_str());
}

void mark(const char * what) {
    struct stat st;
    (void) stat(what, &st);  // seen by qemu's strace log; the path does not exist
}

long status_kb(const char * key) {
    FILE * f = std::fopen("/proc/self/status", "r");
    if (!f) {
        return -1;
    }
    char line[256];
    long v = -1;
    const size_t n = std::strlen(key);
    while (std::fgets(line, sizeof line, f)) {
        if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
            v = std::strtol(line + n + 1, nullptr, 10);
            break;
        }
    }
    std::fclose(f);
    return v;
}

// The C allocator's view of the process's memory (ggml's buffers included),
// which under qemu-user leaves out the emulator's own (VmRSS does not):
// bytes allocated and not freed (live), and bytes it holds from the system
// (held: live plus freed heap memory it keeps).
struct Heap {
    long live_kb, held_kb;
};

Heap heap_kb() {
    const struct mallinfo2 mi = mallinfo2();
    return { (long) ((mi.uordblks + mi.hblkhd) / 1024), (long) ((mi.arena + mi.hblkhd) / 1024) };
}

// llama.cpp's log: kept quiet, except the lines the summary reports (buffer
// sizes, KleidiAI choices, flash attention), echoed with KAIRS_LLAMA_VERBOSE=1.
void on_log(ggml_log_level level, const char * text, void *) {
    static const bool verbose = std::getenv("KAIRS_LLAMA_VERBOSE") != nullptr;
    if (verbose || level == GGML_LOG_LEVEL_ERROR) {
        std::fputs(text, stderr);
    }
    if (std::strstr(text, "buffer size") || std::strstr(text, "kleidiai") || std::strstr(text, "flash_attn")) {
        std::string s(text);
        while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) {
            s.pop_back();
        }
        std::printf("log %s\n", s.c_str());
    }
}

// Whether llama.cpp puts weight `w` in buffer type `buft`: the question its
// weight_buft_supported asks (the weight's op on a 512-row activation, the
// weight in an empty buffer of that type, the device's supports_op).
bool buft_takes(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft, ggml_tensor * w) {
    ggml_init_params params = { ggml_tensor_overhead() * 8, nullptr, true };
    ggml_context * ctx = ggml_init(params);
    ggml_tensor * op = nullptr;
    if (std::strcmp(w->name, "token_embd.weight") == 0) {
        op = ggml_get_rows(ctx, w, ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 512));
    } else {
        op = ggml_mul_mat(ctx, w, ggml_new_tensor_4d(ctx, GGML_TYPE_F32, w->ne[0], 512, w->ne[2], w->ne[3]));
    }
    w->buffer = ggml_backend_buft_alloc_buffer(buft, 0);
    const bool takes = ggml_backend_dev_supports_op(dev, op);
    ggml_backend_buffer_free(w->buffer);
    w->buffer = nullptr;
    ggml_free(ctx);
    return takes;
}

// The bytes the KleidiAI buffer type of this build (ggml's CPU_KLEIDIAI or
// kleidiai-rs's CPU_KLEIDIAI_RS) gives the model's weights: each 2-D weight
// its supports_op takes (as llama.cpp decides; on a CPU without kernels,
// none), aligned as the buffer aligns it: the packed weights' resident size,
// exactly (xtask checks it against llama.cpp's logged buffer size).
void packed_bytes(const char * model_path) {
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ggml_backend_reg_t reg = dev ? ggml_backend_dev_backend_reg(dev) : nullptr;
    auto get_extra = reg ? (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(
                               reg, "ggml_backend_dev_get_extra_bufts")
                         : nullptr;
    ggml_backend_buffer_type_t kai = nullptr;
    for (ggml_backend_buffer_type_t * b = get_extra ? get_extra(dev) : nullptr; b && *b; ++b) {
        if (std::strncmp(ggml_backend_buft_name(*b), "CPU_KLEIDIAI", 12) == 0) {
            kai = *b;
        }
    }
    if (!kai) {
        return;
    }
    ggml_context * meta = nullptr;
    gguf_init_params gp = { true, &meta };
    gguf_context * g = gguf_init_from_file(model_path, gp);
    if (!g) {
        die(std::string("cannot read ") + model_path);
    }
    const size_t align = ggml_backend_buft_get_alignment(kai);
    size_t packed = 0, raw = 0;
    for (ggml_tensor * t = ggml_get_first_tensor(meta); t; t = ggml_get_next_tensor(meta, t)) {
        if (ggml_n_dims(t) == 2 && buft_takes(dev, kai, t)) {
            packed += (ggml_backend_buft_get_alloc_size(kai, t) + align - 1) / align * align;
            raw += ggml_nbytes(t);
        }
    }
    std::printf("packed_bytes %s %zu raw_bytes %zu\n", ggml_backend_buft_name(kai), packed, raw);
    gguf_free(g);
    ggml_free(meta);
}

// OUT.bin: "KAIRSLLM", u32 version 1, u32 n_vocab, u32 n_prompt, u32 n_gen,
// i32 prompt[n_prompt], i32 generated[n_gen], then f32 logits: one row of
// n_vocab per prompt position, then one per generated token (the logits
// after decoding it). Little-endian (the guest's byte order).
void write_result(const char * path, int n_vocab, const std::vector<llama_token> & prompt,
                  const std::vector<llama_token> & gen, const std::vector<float> & logits) {
    FILE * f = std::fopen(path, "wb");
    if (!f) {
        die(std::string("cannot write ") + path);
    }
    const uint32_t head[4] = { 1, (uint32_t) n_vocab, (uint32_t) prompt.size(), (uint32_t) gen.size() };
    std::fwrite("KAIRSLLM", 1, 8, f);
    std::fwrite(head, sizeof head, 1, f);
    std::fwrite(prompt.data(), sizeof(llama_token), prompt.size(), f);
    std::fwrite(gen.data(), sizeof(llama_token), gen.size(), f);
    std::fwrite(logits.data(), sizeof(float), logits.size(), f);
    if (std::fclose(f) != 0) {
        die(std::string("writing ") + path + " failed");
    }
}

void run(const char * model_path, const char * out_path, int threads, int n_prompt, int n_gen, bool marks) {
    const long rss_before = status_kb("VmRSS");
    const Heap heap_before = heap_kb();
    llama_model_params mp = llama_model_default_params();
    mp.load_mode = LLAMA_LOAD_MODE_NONE;  // no mmap: RSS counts the loaded weights only
    const auto t0 = std::chrono::steady_clock::now();
    llama_model * model = llama_model_load_from_file(model_path, mp);
    if (!model) {
        die(std::string("cannot load ") + model_path);
    }
    const auto t1 = std::chrono::steady_clock::now();
    const long rss_model = status_kb("VmRSS");
    const Heap heap_model = heap_kb();
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = N_CTX;
    cp.n_batch = cp.n_ubatch = (uint32_t) n_prompt;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        die("cannot create a context");
    }

    Rng rng{ 12345 };
    std::vector<llama_token> prompt(n_prompt);
    for (auto & t : prompt) {
        t = (llama_token) (rng.next() % (uint64_t) n_vocab);
    }
    std::vector<float> logits;
    logits.reserve((size_t) (n_prompt + n_gen) * n_vocab);

    llama_batch batch = llama_batch_init(n_prompt, 0, 1);
    for (int i = 0; i < n_prompt; ++i) {
        batch.token[i] = prompt[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n_prompt;
    if (marks) {
        mark("/kleidiai-mark/begin/prompt");
    }
    const auto t2 = std::chrono::steady_clock::now();
    if (llama_decode(ctx, batch) != 0) {
        die("decoding the prompt failed");
    }
    const auto t3 = std::chrono::steady_clock::now();
    if (marks) {
        mark("/kleidiai-mark/end/prompt");
    }
    for (int i = 0; i < n_prompt; ++i) {
        const float * l = llama_get_logits_ith(ctx, i);
        logits.insert(logits.end(), l, l + n_vocab);
    }
    auto argmax = [&](const float * l) {
        int best = 0;
        for (int j = 1; j < n_vocab; ++j) {
            if (l[j] > l[best]) {
                best = j;
            }
        }
        return (llama_token) best;
    };
    std::vector<llama_token> gen;
    llama_token next = argmax(llama_get_logits_ith(ctx, n_prompt - 1));
    if (marks) {
        mark("/kleidiai-mark/begin/gen");
    }
    const auto t4 = std::chrono::steady_clock::now();
    for (int j = 0; j < n_gen; ++j) {
        gen.push_back(next);
        llama_batch one = llama_batch_get_one(&gen.back(), 1);
        if (llama_decode(ctx, one) != 0) {
            die("decoding a generated token failed");
        }
        const float * l = llama_get_logits_ith(ctx, -1);
        if (marks) {
            // Outside the window: the copy is the driver's, not the backend's.
            mark("/kleidiai-mark/end/gen");
        }
        logits.insert(logits.end(), l, l + n_vocab);
        next = argmax(l);
        if (marks && j + 1 < n_gen) {
            mark("/kleidiai-mark/begin/gen");
        }
    }
    const auto t5 = std::chrono::steady_clock::now();
    llama_batch_free(batch);
    write_result(out_path, n_vocab, prompt, gen, logits);

    auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    std::printf("tokens");
    for (auto t : gen) {
        std::printf(" %d", t);
    }
    std::printf("\n");
    std::printf("time load_ms %.1f prompt_ms_per_token %.3f gen_ms_per_token %.3f\n", ms(t0, t1),
                ms(t2, t3) / n_prompt, ms(t4, t5) / n_gen);
    // What loading the model added: live and held heap memory, and the
    // resident set (model_kb; under qemu-user the emulator's translation
    // cache too).
    std::printf("memory live_kb %ld held_kb %ld model_kb %ld rss_before_kb %ld rss_model_kb %ld hwm_kb %ld\n",
                heap_model.live_kb - heap_before.live_kb, heap_model.held_kb - heap_before.held_kb,
                rss_model - rss_before, rss_before, rss_model, status_kb("VmHWM"));
    std::printf("model_size_bytes %llu\n", (unsigned long long) llama_model_size(model));
    packed_bytes(model_path);
#if defined(KAIRS_TRACE_KAI)
    for (int i = 0; i < kairs_trace_n; ++i) {
        if (kairs_trace_counts[i]) {
            std::printf("kernel %s %llu\n", kairs_trace_names[i], (unsigned long long) kairs_trace_counts[i]);
        }
    }
#endif
#if defined(KAIRS_TRACE_RS)
    ggml_kleidiai_rs_report(stdout);
#endif
    llama_free(ctx);
    llama_model_free(model);
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2) {
        die("usage: kairs-llama make-model OUT [--seed S] [--odd] | quantize IN OUT TYPE | run MODEL OUT [--threads N] "
            "[--prompt P] [--gen G] [--mark]");
    }
    const std::string cmd = argv[1];
    llama_log_set(on_log, nullptr);
    llama_backend_init();
    if (cmd == "make-model" && argc >= 3) {
        uint64_t seed = 42;
        Shape sh = SHAPE;
        for (int i = 3; i < argc; ++i) {
            if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
                seed = std::strtoull(argv[++i], nullptr, 10);
            } else if (std::strcmp(argv[i], "--odd") == 0) {
                sh = ODD;
            } else {
                die(std::string("make-model: unknown argument ") + argv[i]);
            }
        }
        make_model(argv[2], seed, sh);
    } else if (cmd == "quantize" && argc == 5) {
        quantize(argv[2], argv[3], argv[4]);
    } else if (cmd == "run" && argc >= 4) {
        int threads = 1, n_prompt = 32, n_gen = 16;
        bool marks = false;
        for (int i = 4; i < argc; ++i) {
            const std::string a = argv[i];
            auto value = [&]() {
                if (i + 1 >= argc) {
                    die(a + " needs a value");
                }
                return std::atoi(argv[++i]);
            };
            if (a == "--threads") {
                threads = value();
            } else if (a == "--prompt") {
                n_prompt = value();
            } else if (a == "--gen") {
                n_gen = value();
            } else if (a == "--mark") {
                marks = true;
            } else {
                die("unknown option " + a);
            }
        }
        if (threads < 1 || n_prompt < 1 || n_gen < 1 || n_prompt + n_gen > N_CTX) {
            die("bad --threads/--prompt/--gen");
        }
        run(argv[2], argv[3], threads, n_prompt, n_gen, marks);
    } else {
        die("unknown command or wrong arguments: " + cmd);
    }
    llama_backend_free();
    return 0;
}
