/* fuzz_safetensors.c - libFuzzer target for the safetensors reader.
 *
 * Does: st_parse on arbitrary bytes, then, when accepted, checks the
 * invariants st_parse promises (ranges inside the data section, sorted and
 * disjoint, sizes that agree, names UTF-8 and findable) and lists the file to
 * /dev/null. A broken invariant aborts, so libFuzzer reports it as a crash.
 *
 * Does not: touch the file system beyond /dev/null (st_load and
 * st_save_atomic are covered by tests/test_safetensors.c).
 * Build: clang -fsanitize=fuzzer,address,undefined; run with run_fuzz.sh.
 */
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_invariants(const st_file *f) {
    uint64_t prev_end = 0;
    for (int i = 0; i < f->n; i++) {
        const st_tensor *t = &f->tensors[i];
        MN_ASSERT(t->name && st_utf8_valid(t->name, strlen(t->name)));
        MN_ASSERT(t->begin <= t->end && t->end <= f->data_len);
        MN_ASSERT(i == 0 || t->begin >= f->tensors[i - 1].begin);
        MN_ASSERT(t->begin >= prev_end); /* disjoint, empty ranges included */
        if (t->end > prev_end) prev_end = t->end;
        MN_ASSERT(t->rank >= 0 && t->rank <= ST_MAX_RANK);
        MN_ASSERT(t->elem_size == st_dtype_size(t->dtype));
        uint64_t numel = 1;
        for (int d = 0; d < t->rank; d++) {
            MN_ASSERT(t->shape[d] >= 0);
            numel *= (uint64_t)t->shape[d]; /* may wrap; only compared when no dim is 0 */
        }
        if (t->end > t->begin) MN_ASSERT(numel * t->elem_size == t->end - t->begin);
        MN_ASSERT(st_find(f, t->name) != NULL);
        volatile uint8_t sink = 0; /* touch the first and last byte: ASan checks the range */
        if (t->end > t->begin) sink ^= f->data[t->begin] ^ f->data[t->end - 1];
        (void)sink;
    }
    for (int i = 0; i < f->nmeta; i++) MN_ASSERT(st_meta(f, f->meta_keys[i]) == f->meta_vals[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *devnull;
    if (!devnull) devnull = fopen("/dev/null", "w");
    st_file f;
    char err[512];
    mn_status s = st_parse(&f, data, size, err, sizeof err);
    if (s == MN_OK) {
        check_invariants(&f);
        if (devnull) st_print_summary(&f, devnull);
    } else {
        MN_ASSERT(err[0] != 0 && f.n == 0 && f.tensors == NULL);
    }
    st_free(&f);
    st_free(&f);
    return 0;
}
