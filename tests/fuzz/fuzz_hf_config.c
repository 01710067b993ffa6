/* fuzz_hf_config.c - libFuzzer target for the Hugging Face JSON readers of
 * src/models: config.json (mn_llama_config_parse) and
 * model.safetensors.index.json (hf_index_parse).
 *
 * Does: both parsers on every input. An accepted config must satisfy what
 * the parser promises (sizes in range, heads dividing, head_dim even, RoPE
 * parameters sane, finite positive inverse frequencies), and a small one is
 * built into a graph whose parameter count must match the formula. An
 * accepted index must hold sorted, unique tensor names and plain shard file
 * names. A broken promise aborts, so libFuzzer reports it as a crash.
 *
 * Does not: touch the file system.
 * Build: clang -fsanitize=fuzzer,address,undefined (cmake -DMN_FUZZ=ON);
 * run: build/fuzz/tests/fuzz_hf_config -max_total_time=60 <copy of
 * tests/fuzz/corpus_hf_config> -dict=tests/fuzz/hf_config.dict
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "models/hf_checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_config(const mn_llama_config *c) {
    const int64_t M = MN_LLAMA_MAX_SIZE;
    MN_ASSERT(c->vocab_size >= 1 && c->vocab_size <= M && c->hidden_size >= 1 && c->hidden_size <= M);
    MN_ASSERT(c->num_hidden_layers >= 1 && c->num_hidden_layers <= MN_LLAMA_MAX_LAYERS);
    MN_ASSERT(c->num_attention_heads >= 1 && c->num_key_value_heads >= 1);
    MN_ASSERT(c->num_attention_heads % c->num_key_value_heads == 0);
    MN_ASSERT(c->head_dim >= 2 && c->head_dim % 2 == 0 && c->num_attention_heads * c->head_dim <= M);
    MN_ASSERT(c->intermediate_size >= 1 && c->intermediate_size <= M);
    MN_ASSERT(c->rms_norm_eps > 0 && c->rms_norm_eps <= 1 && c->rope_theta > 1 && isfinite(c->rope_theta));
    MN_ASSERT(c->n_eos >= 0 && c->n_eos <= MN_LLAMA_MAX_EOS);
    MN_ASSERT(memchr(c->dtype, 0, sizeof c->dtype));
    if (c->rope_scaling == MN_ROPE_SCALING_LLAMA3)
        MN_ASSERT(c->rope_high_freq_factor > c->rope_low_freq_factor && c->rope_low_freq_factor > 0 &&
                  c->rope_factor > 0 && c->rope_original_max_position_embeddings >= 1);
    if (c->head_dim <= 4096) {
        float inv[2048];
        MN_ASSERT(mn_llama_inv_freq(inv, c) == MN_OK);
        for (int64_t i = 0; i < c->head_dim / 2; i++) MN_ASSERT(isfinite(inv[i]) && inv[i] >= 0);
    }
    const int64_t H = c->hidden_size, q = c->num_attention_heads * c->head_dim,
                  kv = c->num_key_value_heads * c->head_dim, I = c->intermediate_size, V = c->vocab_size;
    const int64_t want = c->num_hidden_layers * (2 * H * q + 2 * H * kv + 3 * H * I + 2 * H) + H +
                         V * H * (c->tie_word_embeddings ? 1 : 2);
    MN_ASSERT(want > 0 && want <= MN_LLAMA_MAX_PARAMS);
    if (want > ((int64_t)1 << 22) || c->head_dim > 4096) return;
    mn_graph *g = NULL;
    mn_llama *m = NULL;
    mn_llama_options o = mn_llama_default_options();
    o.kind = MN_LLAMA_FORWARD;
    o.seq_len = 1;
    MN_ASSERT(mn_graph_create(&g) == MN_OK);
    if (c->max_position_embeddings >= 1 && mn_llama_create(&m, g, c, &o) == MN_OK)
        MN_ASSERT(mn_llama_numel(m) == want);
    mn_llama_destroy(m);
    mn_graph_destroy(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    mn_llama_config c;
    if (mn_llama_config_parse(&c, (const char *)data, size, err, sizeof err) == MN_OK) check_config(&c);
    else MN_ASSERT(strncmp(err, "config.json: ", 13) == 0);
    hf_index x;
    if (hf_index_parse(&x, (const char *)data, size, err, sizeof err) == MN_OK) {
        for (int i = 0; i < x.n; i++) {
            MN_ASSERT(i == 0 || strcmp(x.names[i - 1], x.names[i]) < 0);
            MN_ASSERT(x.files[i][0] && !strchr(x.files[i], '/') && !strchr(x.files[i], '\\'));
        }
        hf_index_free(&x);
    }
    return 0;
}
