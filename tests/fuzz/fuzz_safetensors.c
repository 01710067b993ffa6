/* fuzz_safetensors.c - libFuzzer target for the safetensors reader.
 *
 * Does: st_parse on arbitrary bytes, then, when accepted, checks the
 * invariants st_parse promises (ranges inside the data section, sorted and
 * disjoint, sizes that agree, names UTF-8 and findable) and lists the file to
 * /dev/null. The same bytes go through st_read (what st_load runs) via an
 * in-memory reader that counts and bounds what is read: it must agree with
 * st_parse, read nothing before the length field and header are checked,
 * and never more than the header plus the bytes the tensors claim. Names and
 * metadata values go through the escaping (io_esc: the result holds no
 * control byte and fits) and the strict number parsers (an accepted integer
 * prints back as the same text). A broken invariant aborts, so libFuzzer
 * reports it as a crash.
 *
 * Does not: touch the file system beyond /dev/null (st_load and
 * st_save_atomic are covered by tests/test_safetensors.c and
 * tests/test_hostile_files.c).
 * Build: clang -fsanitize=fuzzer,address,undefined; run with run_fuzz.sh.
 */
#include <inttypes.h>
#include <math.h>

#include "io/safetensors.h"
#include "io/text.h"

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

/* The escaped form of s holds no byte a terminal acts on and fits cap. */
static void check_escape(const char *s) {
    static const size_t caps[] = {8, 24, IO_ESC_NAME};
    for (size_t c = 0; c < MN_ARRAY_LEN(caps); c++) {
        char buf[IO_ESC_NAME];
        io_esc(buf, caps[c], s);
        size_t n = strlen(buf);
        MN_ASSERT(n < caps[c]);
        if (io_esc_len(s) < caps[c]) MN_ASSERT(n == io_esc_len(s));
        for (size_t i = 0; i < n; i++) {
            unsigned char b = (unsigned char)buf[i];
            MN_ASSERT(b >= 0x20 && b != 0x7F);
            if (b == 0xC2 && i + 1 < n) MN_ASSERT((unsigned char)buf[i + 1] > 0x9F); /* no C1 */
        }
        MN_ASSERT(st_utf8_valid(buf, n));
    }
}

static void check_numbers(const char *s) {
    uint64_t v;
    if (io_parse_uint(s, UINT64_MAX, &v)) {
        char back[24];
        snprintf(back, sizeof back, "%" PRIu64, v);
        MN_ASSERT(strcmp(back, s) == 0); /* canonical: prints back the same */
    }
    double d;
    if (io_parse_real(s, &d)) MN_ASSERT(isfinite(d));
}

typedef struct mem_source {
    const uint8_t *data;
    uint64_t size, bytes_read, furthest;
} mem_source;

static mn_status mem_read(void *ctx, uint64_t off, void *dst, size_t n, char *err, size_t cap) {
    mem_source *m = ctx;
    MN_ASSERT(off <= m->size && n <= m->size - off); /* st_read never asks past the size */
    memcpy(dst, m->data + off, n);
    m->bytes_read += n;
    if (off + n > m->furthest) m->furthest = off + n;
    (void)err;
    (void)cap;
    return MN_OK;
}

/* st_read of the same bytes agrees with st_parse (status p, file f) and
 * reads only what it must. */
static void check_reader(const uint8_t *data, size_t size, mn_status p, const st_file *f) {
    uint64_t hlen = 0;
    for (int i = 7; size >= 8 && i >= 0; i--) hlen = hlen << 8 | data[i];
    for (int with_data = 0; with_data < 2; with_data++) {
        mem_source m = {data, size, 0, 0};
        st_reader r = {mem_read, &m, size, "fuzz"};
        st_file g;
        char err[512];
        mn_status s = st_read(&g, &r, with_data, err, sizeof err);
        MN_ASSERT(s == p);
        if (s != MN_OK) {
            MN_ASSERT(err[0] != 0 && g.n == 0 && g.tensors == NULL && g.owned == NULL);
            /* a rejected header: at most the length field and the header read */
            MN_ASSERT(m.furthest <= 8 || (hlen <= ST_MAX_HEADER_BYTES && m.furthest <= 8 + hlen));
        } else {
            MN_ASSERT(g.n == f->n && g.nmeta == f->nmeta);
            uint64_t need = 0;
            for (int i = 0; i < g.n; i++) {
                MN_ASSERT(!strcmp(g.tensors[i].name, f->tensors[i].name));
                MN_ASSERT(g.tensors[i].begin == f->tensors[i].begin && g.tensors[i].end == f->tensors[i].end);
                if (g.tensors[i].end > need) need = g.tensors[i].end;
            }
            MN_ASSERT(m.bytes_read == 8 + hlen + (with_data ? need : 0));
            if (with_data) {
                MN_ASSERT(g.data_len == need);
                if (need) MN_ASSERT(memcmp(g.data, f->data, (size_t)need) == 0);
                check_invariants(&g);
            } else {
                MN_ASSERT(g.data == NULL && g.data_len == 0);
            }
        }
        st_free(&g);
    }
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
        for (int i = 0; i < f.n; i++) check_escape(f.tensors[i].name);
        for (int i = 0; i < f.nmeta; i++) {
            check_escape(f.meta_keys[i]);
            check_escape(f.meta_vals[i]);
            check_numbers(f.meta_vals[i]);
        }
    } else {
        MN_ASSERT(err[0] != 0 && f.n == 0 && f.tensors == NULL);
    }
    check_reader(data, size, s, &f);
    st_free(&f);
    st_free(&f);
    /* the raw bytes as a string, too (up to the first NUL) */
    char *str = malloc(size + 1);
    if (str) {
        memcpy(str, data, size);
        str[size] = 0;
        check_escape(str);
        check_numbers(str);
        free(str);
    }
    return 0;
}
