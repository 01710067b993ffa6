/* fuzz_tokenizer.c - libFuzzer target for the tokenizer.json loader and the
 * encoder/decoder it configures.
 *
 * Does: loads arbitrary bytes as tokenizer.json (mn_tokenizer_load_json). A
 * refusal must leave *out NULL with a message. When the file loads, a few
 * fixed strings (spaces, digits, emoji, special-token look-alikes, and
 * invalid UTF-8, which must be refused) and the input's own tail are encoded
 * with each flag, and the ids decoded back, checking what the API promises:
 * every id of a plain encode has a token string and is below the vocabulary
 * size, sizing calls agree with filling calls, decoded text is valid UTF-8 and
 * cut buffers are terminated. Arbitrary ids taken from the input are decoded
 * too. A broken promise aborts (MN_ASSERT), which libFuzzer reports.
 *
 * Does not: compare with the tokenizers library (tests/test_tokenizer.c does,
 * on fixtures). tests/test_tokenizer.c replays tests/fuzz/corpus_tokenizer
 * through this function.
 * Build: clang -fsanitize=fuzzer,address,undefined (cmake -DMN_FUZZ=ON).
 */
#include "io/text.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fz_quiet(mn_log_level level, const char *msg, void *user) {
    (void)level;
    (void)msg;
    (void)user;
}

static void fz_decode(mn_tokenizer *t, const int32_t *ids, size_t n) {
    for (unsigned flags = 0; flags <= MN_TOKENIZE_SKIP_SPECIAL; flags += MN_TOKENIZE_SKIP_SPECIAL) {
        size_t len = 0, len2 = 0;
        mn_status s = mn_tokenizer_decode(t, NULL, 0, &len, ids, n, flags);
        MN_ASSERT(s == MN_OK || s == MN_E_NOMEM);
        if (s != MN_OK) continue;
        char *out = malloc(len + 1);
        MN_ASSERT(out);
        s = mn_tokenizer_decode(t, out, len + 1, &len2, ids, n, flags);
        MN_ASSERT(s == MN_OK && len2 == len && out[len] == 0);
        MN_ASSERT(io_utf8_valid(out, len));
        char small[5];
        s = mn_tokenizer_decode(t, small, sizeof small, &len2, ids, n, flags);
        MN_ASSERT(s == MN_OK && len2 == len);
        MN_ASSERT(strlen(small) <= 4 && memcmp(small, out, strlen(small)) == 0);
        free(out);
    }
}

static void fz_encode(mn_tokenizer *t, const char *text, size_t len) {
    static const unsigned flag_sets[] = {0, MN_TOKENIZE_ADD_SPECIAL, MN_TOKENIZE_SPECIAL_AS_TEXT};
    int32_t vocab = mn_tokenizer_vocab_size(t);
    for (size_t f = 0; f < MN_ARRAY_LEN(flag_sets); f++) {
        size_t n = 0, n2 = 0;
        mn_status s = mn_tokenizer_encode(t, NULL, 0, &n, text, len, flag_sets[f]);
        bool utf8 = io_utf8_valid(text, len);
        if (!utf8) MN_ASSERT(s == MN_E_INVALID);
        if (s != MN_OK) {
            MN_ASSERT(mn_tokenizer_error(t)[0] != 0);
            continue;
        }
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        MN_ASSERT(ids);
        s = mn_tokenizer_encode(t, ids, n, &n2, text, len, flag_sets[f]);
        MN_ASSERT(s == MN_OK && n2 == n);
        for (size_t i = 0; i < n; i++) {
            MN_ASSERT(ids[i] >= 0 && ids[i] < vocab);
            if (flag_sets[f] != MN_TOKENIZE_ADD_SPECIAL) MN_ASSERT(mn_tokenizer_id_to_token(t, ids[i]) != NULL);
        }
        fz_decode(t, ids, n);
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const texts[] = {
        "",
        "Hello world, it's 2024! I'm fine; we'll see.",
        "  a\t\tb\n\n c \r\n  ",
        "\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80 e\xcc\x81 \xe1\xa0\x8e \xd9\xa3\xd9\xa4 12345",
        "<|im_start|>user\n<|im_end|><s></s>[CLS]<unk> <|endoftext|>",
        "\xff\xfe broken",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    };
    mn_set_log(fz_quiet, NULL);
    mn_tokenizer *t = (mn_tokenizer *)&t;
    char err[512];
    err[0] = 'x';
    mn_status s = mn_tokenizer_load_json(&t, (const char *)data, size, err, sizeof err);
    if (s != MN_OK) {
        MN_ASSERT(t == NULL && err[0] != 0 && strlen(err) < sizeof err);
        mn_set_log(NULL, NULL);
        return 0;
    }
    MN_ASSERT(t != NULL && mn_tokenizer_vocab_size(t) >= 0);
    for (size_t i = 0; i < MN_ARRAY_LEN(texts); i++) fz_encode(t, texts[i], strlen(texts[i]));
    /* The input's last bytes as text, and as ids. */
    size_t tail = size < 64 ? size : 64;
    fz_encode(t, (const char *)data + size - tail, tail);
    int32_t ids[16];
    size_t n = 0;
    for (size_t i = 0; i + 4 <= tail && n < MN_ARRAY_LEN(ids); i += 4) {
        uint32_t v;
        memcpy(&v, data + size - tail + i, 4);
        ids[n++] = (int32_t)(v % 70000u) - 5;
    }
    fz_decode(t, ids, n);
    int32_t id;
    for (size_t i = 0; i < MN_ARRAY_LEN(texts); i++)
        if (mn_tokenizer_token_to_id(t, &id, texts[i]) == MN_OK) MN_ASSERT(id >= 0 && id < mn_tokenizer_vocab_size(t));
    mn_tokenizer_destroy(t);
    mn_set_log(NULL, NULL);
    return 0;
}
