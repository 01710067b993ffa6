/* test_bundle.c - inference bundles on the CPU backend (docs/BUNDLE.md):
 * the graph section round trip over every op case built through the public
 * constructors, a session's bundle reloaded bit for bit (and written again
 * byte for byte), training from a bundle, and hostile files: cut at every
 * byte, wrong magic or version, damaged checksums, unknown or missing
 * sections, and hand-encoded graph sections with cycles, forward
 * references, absurd shapes, names that break the rules, ops no
 * constructor makes and attributes no constructor writes; weights that do
 * not fit the graph; malformed kernel sections. Then the fuzz corpus
 * (tests/fuzz/corpus_bundle) and mutated bundles through the fuzz target.
 *
 * `test_bundle --write-seeds DIR` writes the fuzzer's seed corpus.
 * Does not: run Vulkan (test_vk_bundle.c does).
 */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/sha256.h"
#include "core/wire.h"
#include "graph/attrs.h"
#include "graph/pointwise.h"
#include "graph/serial.h"
#include "io/bundle.h"
#include "io/safetensors.h"
#include "op_cases.h"
#include "session/bundle.h"
#include "session/session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_dir[64];

static void path_in(char *buf, size_t cap, const char *name) { mn_fmt(buf, cap, "%s/%s", g_dir, name); }

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)len + 1);
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) free(b), b = NULL;
    fclose(f);
    *n = b ? (size_t)len : 0;
    return b;
}

static void spit(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(p, 1, n, f) == n);
    if (f) fclose(f);
}

static char *dump_of(const mn_graph *g) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    mn_graph_dump(g, f);
    fclose(f);
    return buf;
}

/* status and message of the bundle bytes b (every section checked, no session) */
static mn_status check_mem(const uint8_t *b, size_t n, char *err, size_t cap) {
    err[0] = 0;
    return session_bundle_mem(NULL, b, n, NULL, 0, err, cap);
}

#define EXPECT_REFUSED(st, err, word)                                                                              \
    do {                                                                                                           \
        CHECK_MSG((st) != MN_OK, "accepted, expected a refusal mentioning '%s'", word);                             \
        CHECK_MSG(strstr(err, word) != NULL, "message '%s' does not mention '%s'", err, word);                     \
    } while (0)

/* ---- 1. every op case through the graph section ------------------------------ */

static void test_op_cases(void) {
    int round = 0, refused = 0;
    for (size_t k = 0; k < MN_ARRAY_LEN(cases); k++) {
        gc c;
        mn_tensor y;
        if (build_case(&cases[k], &c, &y) != MN_OK) {
            CHECK_MSG(0, "case %s does not build", cases[k].name);
            mn_graph_destroy(c.g);
            continue;
        }
        mn_graph_output(c.g, y, "y");
        mn_wbuf w = {0};
        char err[512];
        mn_status st = graph_serialize(c.g, &w, err, sizeof err);
        bool all_allowed = true;
        for (int32_t i = 0; i < c.g->n; i++) all_allowed &= graph_serial_op_allowed(c.g->nodes[i].op);
        if (st == MN_E_UNSUPPORTED) { /* a case built with an internal op (reduce_to, conv2d_bwd_weight) or a cast */
            CHECK_MSG(!all_allowed, "case %s refused: %s", cases[k].name, err);
            refused++;
        } else if (st != MN_OK) {
            CHECK_MSG(0, "case %s: %s", cases[k].name, err);
        } else {
            mn_graph *g2 = NULL;
            st = graph_deserialize(&g2, w.p, w.n, err, sizeof err);
            CHECK_MSG(st == MN_OK, "case %s: read back: %s", cases[k].name, err);
            if (!st) {
                char *a = dump_of(c.g), *b = dump_of(g2);
                CHECK_MSG(strcmp(a, b) == 0, "case %s: the graph read back differs:\n%s\n---\n%s", cases[k].name, a, b);
                mn_wbuf w2 = {0};
                CHECK(graph_serialize(g2, &w2, err, sizeof err) == MN_OK && w2.n == w.n && !memcmp(w2.p, w.p, w.n));
                /* the node-level fields a dump does not show */
                for (int32_t i = 0; i < c.g->n; i++) {
                    const node *p = &c.g->nodes[i], *q = &g2->nodes[i];
                    CHECK_MSG(p->flags == q->flags && p->init.kind == q->init.kind && (p->op != OP_PARAM || p->lr_mult == q->lr_mult) &&
                                  !memcmp(p->ip, q->ip, sizeof p->ip) && !memcmp(p->fp, q->fp, sizeof p->fp),
                              "case %s node %d (%s): flags %x/%x init %d/%d lr %g/%g", cases[k].name, i,
                              op_table[p->op].name, p->flags, q->flags, p->init.kind, q->init.kind, p->lr_mult,
                              q->lr_mult);
                    if (p->op == OP_CONST) CHECK(!memcmp(p->data, q->data, (size_t)node_numel(p) * 4));
                }
                free(a), free(b);
                wb_free(&w2);
                round++;
            }
            mn_graph_destroy(g2);
        }
        wb_free(&w);
        mn_graph_destroy(c.g);
    }
    printf("  op cases: %d round trips, %d refused (internal ops; cast: bundles hold no 16-bit graphs yet)\n",
           round, refused);
    CHECK(round >= 100 && refused == 3);
    { /* a 16-bit input: refused when written (a bundle the reader would refuse) */
        mn_graph *g;
        mn_tensor x, y;
        char err[256] = "";
        mn_wbuf w = {0};
        CHECK_OK(mn_graph_create(&g), "create");
        CHECK_OK(mn_graph_input(g, &x, "x", MN_F16, 1, (const int64_t[]){3}), mn_graph_error(g));
        CHECK_OK(mn_scale(g, &y, x, 2.0f), mn_graph_error(g));
        CHECK_OK(mn_graph_output(g, y, "y"), mn_graph_error(g));
        CHECK(graph_serialize(g, &w, err, sizeof err) == MN_E_UNSUPPORTED);
        CHECK_MSG(strstr(err, "dtype f16") != NULL, "message: %s", err);
        wb_free(&w);
        mn_graph_destroy(g);
    }
    /* what autodiff and the optimizer add is never written */
    gc c;
    mn_tensor y;
    CHECK(build_case(&cases[0], &c, &y) == MN_OK);
    mn_session_options o = mn_session_default_options();
    o.mode = MN_MODE_TRAINING;
    mn_session *s;
    CHECK(mn_session_create(&s, c.g, &o) == MN_OK);
    mn_wbuf w = {0};
    char err[512];
    mn_status st = graph_serialize(s->g, &w, err, sizeof err);
    EXPECT_REFUSED(st, err, "not by a public constructor");
    CHECK(mn_session_export_bundle(s, "/nonexistent/x.mnb") == MN_E_STATE);
    CHECK(strstr(mn_session_error(s), "inference session") != NULL);
    wb_free(&w);
    mn_session_destroy(s);
    /* a plan-only session (the kernel-count tools) holds no values to write */
    o.mode = MN_MODE_INFERENCE;
    session_internal_options io = {.plan_only = true};
    CHECK(session_create_ex(&s, c.g, &o, &io) == MN_OK);
    CHECK(mn_session_export_bundle(s, "/nonexistent/x.mnb") == MN_E_STATE);
    mn_session_destroy(s);
    mn_graph_destroy(c.g);
}

/* ---- 2. a session's bundle --------------------------------------------------- */

#define TB 4
#define TD 6
#define TO 5

/* A small model touching every kind of node a bundle holds: inputs (one an
 * output too), parameters (a frozen one, a learning-rate multiplier, each
 * initialiser kind), a constant, a state tensor, dropout, layer norm,
 * softmax, a loss. */
static mn_graph *toy_graph(void) {
    mn_graph *g;
    mn_graph_create(&g);
    mn_tensor x, t, w, b, gam, c, st, h, h2, h3, h4, p, loss;
    float cv[TO] = {1.5f, -2.0f, 0.25f, 1.0f, -0.5f};
    mn_status s = mn_graph_input(g, &x, "x", MN_F32, 2, S(TB, TD));
    s = s ? s : mn_graph_input(g, &t, "target", MN_F32, 2, S(TB, TO));
    s = s ? s : mn_graph_param(g, &w, "fc.weight", 2, S(TD, TO), (mn_init){MN_INIT_KAIMING_UNIFORM, 0, 0});
    s = s ? s : mn_graph_param(g, &b, "fc.bias", 1, S(TO), (mn_init){MN_INIT_CONSTANT, 0.125f, 0});
    s = s ? s : mn_graph_param(g, &gam, "norm.weight", 1, S(TO), (mn_init){MN_INIT_NORMAL, 1, 0.1f});
    s = s ? s : mn_graph_param_freeze(g, b, true);
    s = s ? s : mn_graph_param_lr_mult(g, gam, 0.5f);
    s = s ? s : mn_graph_constant(g, &c, 1, S(TO), cv);
    s = s ? s : mn_graph_state(g, &st, "scratch", 2, S(2, 3));
    s = s ? s : mn_matmul(g, &h, x, w);
    s = s ? s : mn_add(g, &h, h, b);
    s = s ? s : mn_mul(g, &h2, h, c);
    s = s ? s : mn_dropout(g, &h3, h2, 0.25f, 77);
    s = s ? s : mn_layer_norm(g, &h4, h3, gam, MN_NONE, 1e-5f);
    s = s ? s : mn_softmax(g, &p, h4);
    s = s ? s : mn_mse(g, &loss, p, t);
    s = s ? s : mn_graph_output(g, p, "probs");
    s = s ? s : mn_graph_output(g, x, "x");
    s = s ? s : mn_graph_loss(g, loss);
    CHECK_MSG(s == MN_OK, "toy graph: %s", mn_graph_error(g));
    return g;
}

static float toy_x[TB * TD], toy_t[TB * TO];

static void toy_inputs(mn_session *s) {
    for (int i = 0; i < TB * TD; i++) toy_x[i] = (float)((i * 37 % 11) - 5) / 4.0f;
    for (int i = 0; i < TB * TO; i++) toy_t[i] = (float)(i % TO == 2);
    CHECK_OK(mn_session_set_input(s, "x", toy_x, sizeof toy_x), mn_session_error(s));
    CHECK_OK(mn_session_set_input(s, "target", toy_t, sizeof toy_t), mn_session_error(s));
}

/* The toy model's bundle at dir/name (parameters set away from their
 * initial values, metadata "model" = "toy"); its probabilities in probs. */
static void write_toy(const char *name, float probs[TB * TO]) {
    mn_graph *g = toy_graph();
    mn_session_options o = mn_session_default_options();
    mn_session *s;
    CHECK_OK(mn_session_create(&s, g, &o), mn_session_error(s));
    float w[TD * TO];
    for (int i = 0; i < TD * TO; i++) w[i] = (float)((i * 13 % 7) - 3) / 5.0f;
    CHECK_OK(mn_session_set_param(s, "fc.weight", w, TD * TO), mn_session_error(s));
    CHECK_OK(mn_session_set_meta(s, "model", "toy"), mn_session_error(s));
    toy_inputs(s);
    CHECK_OK(mn_session_run(s), mn_session_error(s));
    CHECK_OK(mn_session_output(s, "probs", probs, TB * TO * 4), mn_session_error(s));
    char p[128];
    path_in(p, sizeof p, name);
    CHECK_OK(mn_session_export_bundle(s, p), mn_session_error(s));
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

static void test_session_bundle(void) {
    float ref[TB * TO], got[TB * TO];
    write_toy("toy.mnb", ref);
    char a[128], b[128];
    path_in(a, sizeof a, "toy.mnb");
    path_in(b, sizeof b, "again.mnb");
    mn_session_options o = mn_session_default_options();
    mn_session *s;
    CHECK_OK(mn_session_create_from_bundle(&s, a, &o), mn_session_error(s));
    toy_inputs(s);
    CHECK_OK(mn_session_run(s), mn_session_error(s));
    CHECK_OK(mn_session_output(s, "probs", got, sizeof got), mn_session_error(s));
    CHECK_MSG(!memcmp(ref, got, sizeof ref), "the bundle's session computes other bits");
    float xs[TB * TD];
    CHECK_OK(mn_session_output(s, "x", xs, sizeof xs), mn_session_error(s));
    CHECK(!memcmp(xs, toy_x, sizeof xs));
    mn_kernel_stats ks;
    CHECK(mn_session_kernel_stats(s, &ks) == MN_OK && ks.compiled == 0 && ks.cached == 0 && ks.bundled == 0);
    /* written again from the bundle's session: the same bytes */
    CHECK_OK(mn_session_export_bundle(s, b), mn_session_error(s));
    size_t na, nb;
    uint8_t *ba = slurp(a, &na), *bb = slurp(b, &nb);
    CHECK_MSG(ba && bb && na == nb && !memcmp(ba, bb, na), "the bundle written again differs (%zu vs %zu bytes)", na, nb);
    free(ba), free(bb);
    mn_session_destroy(s);
    /* a training session from it starts at the bundle's weights */
    o.mode = MN_MODE_TRAINING;
    o.optim = mn_optimizer_default(MN_OPTIM_SGD);
    o.optim.lr = 0.1f;
    CHECK_OK(mn_session_create_from_bundle(&s, a, &o), mn_session_error(s));
    float w[TD * TO], bias[TO];
    CHECK_OK(mn_session_get_param(s, "fc.weight", w, TD * TO), mn_session_error(s));
    CHECK(w[1] == (float)((13 % 7) - 3) / 5.0f);
    toy_inputs(s);
    CHECK_OK(mn_session_step(s), mn_session_error(s));
    CHECK_OK(mn_session_get_param(s, "fc.bias", bias, TO), mn_session_error(s));
    CHECK(bias[0] == 0.125f); /* frozen */
    mn_session_destroy(s);
    /* no path, a folder, a missing file: a dead session that says why */
    o = mn_session_default_options();
    CHECK(mn_session_create_from_bundle(&s, NULL, &o) == MN_E_INVALID && s && strstr(mn_session_error(s), "NULL"));
    mn_session_destroy(s);
    CHECK(mn_session_create_from_bundle(&s, g_dir, &o) != MN_OK && strstr(mn_session_error(s), "directory"));
    CHECK(mn_session_run(s) == MN_E_STATE);
    mn_session_destroy(s);
    path_in(b, sizeof b, "missing.mnb");
    CHECK(mn_session_create_from_bundle(&s, b, &o) == MN_E_IO);
    mn_session_destroy(s);
    CHECK(mn_session_create_from_bundle(NULL, a, &o) == MN_E_INVALID);
    /* metadata a bundle cannot hold is refused at export, not at load */
    mn_graph *g = toy_graph();
    CHECK_OK(mn_session_create(&s, g, &o), mn_session_error(s));
    char *big = malloc((64u << 10) + 2);
    memset(big, 'v', (64u << 10) + 1);
    big[(64u << 10) + 1] = 0;
    CHECK_OK(mn_session_set_meta(s, "notes", big), mn_session_error(s));
    path_in(b, sizeof b, "big-meta.mnb");
    CHECK(mn_session_export_bundle(s, b) == MN_E_UNSUPPORTED && strstr(mn_session_error(s), "'notes'"));
    struct stat sb;
    CHECK(stat(b, &sb) != 0); /* nothing written */
    free(big);
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

/* ---- 3. hostile containers --------------------------------------------------- */

/* The sections of bundle bytes (tags and copies). */
typedef struct parts {
    int n;
    char tag[BUNDLE_MAX_SECTIONS][9];
    uint8_t *data[BUNDLE_MAX_SECTIONS];
    size_t size[BUNDLE_MAX_SECTIONS];
} parts;

static void parts_of(parts *p, const uint8_t *b, size_t n) {
    memset(p, 0, sizeof *p);
    bundle_file bf;
    char err[512];
    CHECK_OK(bundle_open_mem(&bf, b, n, err, sizeof err), err);
    for (int i = 0; i < bf.n; i++) {
        snprintf(p->tag[i], 9, "%s", bf.sec[i].tag);
        CHECK_OK(bundle_read(&bf, bf.sec[i].tag, UINT64_MAX, &p->data[i], &p->size[i], err, sizeof err), err);
    }
    p->n = bf.n;
    bundle_close(&bf);
}

static void parts_free(parts *p) {
    for (int i = 0; i < p->n; i++) free(p->data[i]);
    p->n = 0;
}

static int parts_find(const parts *p, const char *tag) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->tag[i], tag)) return i;
    return -1;
}

/* Writes p as a bundle with valid checksums; returns its bytes. */
static uint8_t *parts_write(const parts *p, size_t *n) {
    bundle_part bp[BUNDLE_MAX_SECTIONS];
    for (int i = 0; i < p->n; i++) bp[i] = (bundle_part){p->tag[i], p->data[i], p->size[i], NULL, NULL};
    char path[128], err[512];
    path_in(path, sizeof path, "parts.mnb");
    CHECK_OK(bundle_write(path, bp, p->n, err, sizeof err), err);
    return slurp(path, n);
}

/* Replaces section tag's bytes (a copy of d) or, with d NULL, removes it. */
static void parts_set(parts *p, const char *tag, const void *d, size_t n) {
    int i = parts_find(p, tag);
    if (!d) {
        if (i < 0) return;
        free(p->data[i]);
        for (int j = i; j + 1 < p->n; j++) {
            memcpy(p->tag[j], p->tag[j + 1], 9);
            p->data[j] = p->data[j + 1], p->size[j] = p->size[j + 1];
        }
        p->n--;
        return;
    }
    if (i < 0) {
        i = p->n++;
        snprintf(p->tag[i], 9, "%s", tag);
    } else {
        free(p->data[i]);
    }
    p->data[i] = malloc(n + 1);
    memcpy(p->data[i], d, n);
    p->size[i] = n;
}

static void test_hostile_container(void) {
    char a[128], err[512];
    path_in(a, sizeof a, "toy.mnb");
    size_t n;
    uint8_t *b = slurp(a, &n);
    CHECK(b && n > 256);
    if (!b) return;
    CHECK_OK(check_mem(b, n, err, sizeof err), err);
    /* cut at every byte */
    int cuts = 0;
    for (size_t len = 0; len < n; len++) {
        mn_status st = check_mem(b, len, err, sizeof err);
        cuts += st == MN_E_FORMAT && err[0];
        if (st != MN_E_FORMAT) CHECK_MSG(0, "cut at %zu: %s (%s)", len, mn_status_str(st), err);
    }
    CHECK(cuts == (int)n);
    uint8_t *m = malloc(n + 1);
    /* a byte appended */
    memcpy(m, b, n);
    m[n] = 0;
    EXPECT_REFUSED(check_mem(m, n + 1, err, sizeof err), err, "appended");
    /* magic, version */
    memcpy(m, b, n);
    m[0] = 'X';
    EXPECT_REFUSED(check_mem(m, n, err, sizeof err), err, "not an inference bundle");
    memcpy(m, b, n);
    le32_put(m + 8, 2);
    EXPECT_REFUSED(check_mem(m, n, err, sizeof err), err, "format version 2");
    /* the table's checksum, and each section's */
    memcpy(m, b, n);
    m[BUNDLE_HEADER + 20] ^= 1;
    EXPECT_REFUSED(check_mem(m, n, err, sizeof err), err, "section table's SHA-256");
    bundle_file bf;
    CHECK_OK(bundle_open_mem(&bf, b, n, err, sizeof err), err);
    for (int i = 0; i < bf.n; i++) {
        memcpy(m, b, n);
        m[bf.sec[i].offset + bf.sec[i].size / 2] ^= 0x40;
        EXPECT_REFUSED(check_mem(m, n, err, sizeof err), err, "SHA-256 does not match");
        CHECK(strstr(err, bf.sec[i].tag) != NULL);
        if (i + 1 < bf.n && bf.sec[i + 1].offset > bf.sec[i].offset + bf.sec[i].size) { /* the padding */
            memcpy(m, b, n);
            m[bf.sec[i + 1].offset - 1] = 1;
            EXPECT_REFUSED(check_mem(m, n, err, sizeof err), err, "padding");
        }
    }
    bundle_close(&bf);
    /* sections: unknown, missing, a pipeline without kernels, a bad tag */
    parts p;
    parts_of(&p, b, n);
    size_t n2;
    parts_set(&p, "extra", "x", 1);
    uint8_t *b2 = parts_write(&p, &n2);
    EXPECT_REFUSED(check_mem(b2, n2, err, sizeof err), err, "unknown section 'extra'");
    free(b2);
    parts_set(&p, "extra", NULL, 0);
    parts_set(&p, "pipeline", "0123456789abcdef0123456789abcdef", 32);
    b2 = parts_write(&p, &n2);
    EXPECT_REFUSED(check_mem(b2, n2, err, sizeof err), err, "pipeline section without kernels");
    free(b2);
    parts_set(&p, "pipeline", NULL, 0);
    parts_set(&p, "weights", NULL, 0);
    b2 = parts_write(&p, &n2);
    EXPECT_REFUSED(check_mem(b2, n2, err, sizeof err), err, "no 'weights' section");
    free(b2);
    parts_free(&p);
    memcpy(m, b, n);
    m[BUNDLE_HEADER] = 'A'; /* tags are lower case (and the checksum now fails first) */
    EXPECT_REFUSED(check_mem(m, n, err, sizeof err), err, "SHA-256");
    /* the same refusals through a file */
    char c[128];
    path_in(c, sizeof c, "cut.mnb");
    spit(c, b, n / 2);
    mn_session *s;
    mn_session_options o = mn_session_default_options();
    CHECK(mn_session_create_from_bundle(&s, c, &o) == MN_E_FORMAT && strstr(mn_session_error(s), "cut.mnb"));
    mn_session_destroy(s);
    free(m);
    free(b);
}

/* ---- 4. hand-encoded graph sections ------------------------------------------ */

typedef struct rec {
    const char *op;
    int dtype, rank, nin;
    unsigned flags;
    int64_t shape[4];
    uint32_t in[6];
    int64_t ip[8];
    double fp[6];
    const char *name;
    int namelen; /* -1: strlen(name) */
    int init;
    float a, b, lr;
    const float *data;
    size_t ndata;
} rec;

static void enc(mn_wbuf *w, const rec *r) {
    wb_u8(w, (uint8_t)strlen(r->op));
    wb_put(w, r->op, strlen(r->op));
    wb_u8(w, (uint8_t)r->dtype);
    wb_u8(w, (uint8_t)r->rank);
    wb_u8(w, (uint8_t)r->nin);
    wb_u8(w, (uint8_t)r->flags);
    for (int d = 0; d < r->rank; d++) wb_u64(w, d < 4 ? (uint64_t)r->shape[d] : 1);
    for (int k = 0; k < r->nin; k++) wb_u32(w, r->in[k]);
    for (int k = 0; k < 8; k++) wb_u64(w, (uint64_t)r->ip[k]);
    for (int k = 0; k < 6; k++) wb_f64(w, r->fp[k]);
    const size_t nl = r->name ? (r->namelen >= 0 ? (size_t)r->namelen : strlen(r->name)) : 0;
    wb_u16(w, (uint16_t)nl);
    wb_put(w, r->name, nl);
    if (!strcmp(r->op, "param")) {
        wb_u8(w, (uint8_t)r->init);
        wb_f32(w, r->a);
        wb_f32(w, r->b);
        wb_f32(w, r->lr);
    }
    for (size_t k = 0; k < r->ndata; k++) wb_f32(w, r->data[k]);
}

static void enc_graph(mn_wbuf *w, const rec *r, int n, uint32_t loss) {
    *w = (mn_wbuf){0};
    wb_put(w, "MNGR", 4);
    wb_u32(w, 1);
    wb_u32(w, (uint32_t)n);
    wb_u32(w, loss);
    wb_u32(w, 0);
    for (int i = 0; i < n; i++) enc(w, &r[i]);
}

#define NOLOSS 0xffffffffu
/* x [2,3], w [3,4] (param "w"), y = x @ w (output "y") */
#define REC_X {.op = "input", .dtype = 0, .rank = 2, .shape = {2, 3}, .name = "x", .namelen = -1}
#define REC_W {.op = "param", .rank = 2, .shape = {3, 4}, .name = "w", .namelen = -1, .init = MN_INIT_ZEROS, .lr = 1}
#define REC_Y {.op = "matmul", .rank = 2, .nin = 2, .flags = 1, .shape = {2, 4}, .in = {0, 1}, .name = "y", .namelen = -1}

/* Decodes r[0..n) and expects a refusal naming `word`. */
static void expect_graph(const rec *r, int n, uint32_t loss, const char *word) {
    mn_wbuf w;
    enc_graph(&w, r, n, loss);
    mn_graph *g = (mn_graph *)1;
    char err[512] = "";
    mn_status st = graph_deserialize(&g, w.p, w.n, err, sizeof err);
    if (!word) {
        CHECK_MSG(st == MN_OK, "valid graph refused: %s", err);
    } else {
        EXPECT_REFUSED(st, err, word);
        CHECK(g == NULL);
    }
    mn_graph_destroy(st ? NULL : g);
    wb_free(&w);
}

static void test_hostile_graph(void) {
    rec base[3] = {REC_X, REC_W, REC_Y};
    expect_graph(base, 3, NOLOSS, NULL);
    /* the hand encoding is the library's: the format as documented */
    {
        mn_graph *g;
        mn_tensor x, w, y;
        mn_graph_create(&g);
        mn_graph_input(g, &x, "x", MN_F32, 2, S(2, 3));
        mn_graph_param(g, &w, "w", 2, S(3, 4), (mn_init){MN_INIT_ZEROS, 0, 0});
        mn_matmul(g, &y, x, w);
        mn_graph_output(g, y, "y");
        mn_wbuf a = {0}, b;
        char err[256];
        CHECK(graph_serialize(g, &a, err, sizeof err) == MN_OK);
        enc_graph(&b, base, 3, NOLOSS);
        CHECK_MSG(a.n == b.n && !memcmp(a.p, b.p, a.n), "graph_serialize differs from docs/BUNDLE.md's layout");
        wb_free(&a), wb_free(&b);
        mn_graph_destroy(g);
    }
    rec r[4];
#define VARIANT(idx, field, value, word)                                                                           \
    do {                                                                                                           \
        memcpy(r, base, sizeof base);                                                                              \
        r[idx].field = value;                                                                                      \
        expect_graph(r, 3, NOLOSS, word);                                                                          \
    } while (0)
    /* references: forward, to itself (a cycle has one of the two) */
    VARIANT(2, in[1], 2, "forward reference");
    VARIANT(2, in[0], 7, "forward reference");
    memcpy(r, base, sizeof base);
    r[1] = (rec)REC_Y;
    r[1].in[0] = 0, r[1].in[1] = 2;
    r[2] = (rec)REC_W;
    expect_graph(r, 3, NOLOSS, "forward reference");
    /* shapes */
    VARIANT(0, shape[0], (int64_t)1 << 21, "shape rule gives"); /* x grows, y's recorded shape is stale */
    memcpy(r, base, sizeof base);
    r[0].shape[0] = (int64_t)1 << 21, r[0].shape[1] = (int64_t)1 << 20;
    expect_graph(r, 1, NOLOSS, "too many elements");
    VARIANT(0, shape[1], 0, "must be >= 1");
    VARIANT(0, shape[1], -3, "must be >= 1");
    VARIANT(0, rank, 5, "rank 5");
    VARIANT(1, shape[0], 4, "inner dimensions");
    VARIANT(2, shape[1], 5, "shape rule gives");
    VARIANT(2, dtype, 3, "shape rule gives");
    /* names */
    VARIANT(1, name, "optim.w", "reserved");
    VARIANT(1, name, "__w", "reserved");
    VARIANT(1, name, "w\x1b[2J", "control character");
    VARIANT(1, name, "w\xff", "UTF-8");
    VARIANT(1, name, "x", "already used");
    VARIANT(2, name, "x", "already used");
    VARIANT(0, name, NULL, "empty name");
    VARIANT(2, name, NULL, "empty name");
    VARIANT(2, flags, 0, "named but not an output");
    memcpy(r, base, sizeof base);
    char nul[4] = {'w', 0, 'z', 0};
    r[1].name = nul, r[1].namelen = 3;
    expect_graph(r, 3, NOLOSS, "NUL");
    char longname[300];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    VARIANT(1, name, longname, "at most 255");
    /* ops a bundle may not hold, or that do not exist */
    VARIANT(2, op, "sgd_update", "not an op a bundle may hold");
    VARIANT(2, op, "unary_bwd", "not an op a bundle may hold");
    VARIANT(2, op, "step_gate", "not an op a bundle may hold");
    VARIANT(2, op, "bogus", "not an op a bundle may hold");
    VARIANT(2, op, "", "not an op a bundle may hold");
    VARIANT(2, nin, 3, "inputs");
    /* attributes no constructor writes */
    VARIANT(2, ip[0], 2, "flag");
    VARIANT(2, ip[5], 1, "does not use");
    VARIANT(2, fp[0], 0.5, "does not use");
    VARIANT(2, fp[3], -0.0, "does not use");
    VARIANT(0, ip[0], 1, "does not use");
    VARIANT(0, flags, 2, "only parameters");
    VARIANT(2, flags, 3, "only parameters"); /* an op (matmul) frozen: the graph could not keep it */
    VARIANT(0, flags, 4, "unknown flags");
    VARIANT(1, dtype, 3, "f32 only");
    VARIANT(0, dtype, 7, "dtype 7");
    VARIANT(1, init, 99, "unknown initializer");
    VARIANT(1, lr, -1.0f, "lr multiplier");
    {
        /* dropout: threshold of another probability; cross_entropy whose
         * rows are not ce_rows; rms_norm flags; rope's inverse; a reduce
         * whose axis is not the normalised one */
        rec d[4] = {REC_X, {.op = "dropout", .rank = 2, .nin = 1, .flags = 1, .shape = {2, 3}, .in = {0},
                            .ip = {5, pw_dropout_threshold(0.5f)}, .fp = {0.5}, .name = "d", .namelen = -1}};
        expect_graph(d, 2, NOLOSS, NULL);
        d[1].ip[1] += 1;
        expect_graph(d, 2, NOLOSS, "threshold");
        d[1].ip[1] -= 1, d[1].fp[0] = 0.1; /* not a float */
        expect_graph(d, 2, NOLOSS, "threshold");
        rec ce[4] = {{.op = "input", .rank = 2, .shape = {2, 3}, .name = "logits", .namelen = -1},
                     {.op = "input", .dtype = 3, .rank = 1, .shape = {2}, .name = "labels", .namelen = -1},
                     {.op = "param", .rank = 2, .shape = {2, 3}, .name = "rows", .namelen = -1, .lr = 1},
                     {.op = "cross_entropy", .rank = 0, .nin = 3, .in = {0, 1, 2}}};
        expect_graph(ce, 4, 3, "not the ce_rows node");
        ce[2] = (rec){.op = "ce_rows", .rank = 2, .nin = 2, .shape = {2, 3}, .in = {0, 1}};
        expect_graph(ce, 4, 3, NULL);
        ce[3].ip[1] = 4; /* an ignore_index without use_ignore_index */
        expect_graph(ce, 4, 3, "ignore_index");
        ce[3].ip[1] = 0;
        expect_graph(ce, 4, 2, "must be an f32 scalar"); /* the loss on [2,3] rows */
        expect_graph(ce, 4, 9, "the loss is node 9");
        rec rn[2] = {REC_X, {.op = "rms_norm", .rank = 2, .nin = 1, .flags = 1, .shape = {2, 3}, .in = {0},
                             .ip = {1}, .fp = {1e-5}, .name = "n", .namelen = -1}};
        expect_graph(rn, 2, NOLOSS, "weight/bias flags");
        rn[1].ip[0] = 0;
        expect_graph(rn, 2, NOLOSS, NULL);
        rec ro[2] = {{.op = "input", .rank = 2, .shape = {4, 2}, .name = "q", .namelen = -1},
                     {.op = "rope", .rank = 2, .nin = 1, .flags = 1, .shape = {4, 2}, .in = {0}, .ip = {0, 1},
                      .fp = {10000}, .name = "r", .namelen = -1}};
        expect_graph(ro, 2, NOLOSS, "inverse");
        rec sm[2] = {REC_X, {.op = "sum", .rank = 1, .nin = 1, .flags = 1, .shape = {2}, .in = {0}, .ip = {-1},
                             .name = "s", .namelen = -1}};
        expect_graph(sm, 2, NOLOSS, "library's form"); /* axis -1 becomes 1 */
        sm[1].ip[0] = 1;
        expect_graph(sm, 2, NOLOSS, NULL);
    }
    /* integers the constructors take as int; dimensions they check */
    {
        rec cv[3] = {{.op = "input", .rank = 4, .shape = {1, 1, 4, 4}, .name = "img", .namelen = -1},
                     {.op = "param", .rank = 4, .shape = {1, 1, 3, 3}, .name = "k", .namelen = -1, .lr = 1},
                     {.op = "conv2d", .rank = 4, .nin = 2, .flags = 1, .shape = {1, 1, 2, 2}, .in = {0, 1},
                      .ip = {1, 1, 0, 0, 1, 1, 1}, .name = "c", .namelen = -1}};
        expect_graph(cv, 3, NOLOSS, NULL);
        cv[2].ip[2] = 7021788018721685505; /* a padding near 2^63: overflowed the shape rule once (fuzzer) */
        expect_graph(cv, 3, NOLOSS, "constructor takes");
        cv[2].ip[2] = 0, cv[2].ip[6] = (int64_t)1 << 40;
        expect_graph(cv, 3, NOLOSS, "constructor takes");
        rec bc[2] = {{.op = "input", .rank = 2, .shape = {1, 3}, .name = "v", .namelen = -1},
                     {.op = "broadcast", .rank = 2, .nin = 1, .flags = 1, .shape = {4, 3}, .in = {0},
                      .name = "bv", .namelen = -1}};
        expect_graph(bc, 2, NOLOSS, NULL);
        bc[1].shape[0] = 0;
        expect_graph(bc, 2, NOLOSS, "dimension 0 is 0");
        bc[1].shape[0] = -4;
        expect_graph(bc, 2, NOLOSS, "dimension 0 is -4");
    }
    /* constants: values within the section */
    {
        float v[6] = {1, 2, 3, 4, 5, 6};
        rec k[1] = {{.op = "const", .rank = 2, .shape = {2, 3}, .data = v, .ndata = 6, .flags = 1, .name = "k",
                     .namelen = -1}};
        expect_graph(k, 1, NOLOSS, NULL);
        k[0].ndata = 5;
        expect_graph(k, 1, NOLOSS, "more than the section holds");
        k[0].ndata = 6, k[0].flags = 0;
        expect_graph(k, 1, NOLOSS, "named but not an output");
        k[0].shape[0] = (int64_t)1 << 40;
        expect_graph(k, 1, NOLOSS, "too many elements");
    }
    /* counts, versions, trailing bytes */
    mn_wbuf w;
    enc_graph(&w, base, 3, NOLOSS);
    char err[512];
    mn_graph *g;
    le32_put(w.p + 8, 1000000);
    EXPECT_REFUSED(graph_deserialize(&g, w.p, w.n, err, sizeof err), err, "nodes in");
    le32_put(w.p + 8, 3);
    EXPECT_REFUSED(graph_deserialize(&g, w.p, w.n - 1, err, sizeof err), err, "ends inside node 2");
    le32_put(w.p + 8, 2);
    EXPECT_REFUSED(graph_deserialize(&g, w.p, w.n, err, sizeof err), err, "after the last node");
    le32_put(w.p + 8, 3);
    le32_put(w.p + 4, 2);
    EXPECT_REFUSED(graph_deserialize(&g, w.p, w.n, err, sizeof err), err, "format version 2");
    le32_put(w.p + 4, 1);
    le32_put(w.p + 16, 1);
    EXPECT_REFUSED(graph_deserialize(&g, w.p, w.n, err, sizeof err), err, "reserved");
    le32_put(w.p + 16, 0);
    for (size_t len = 0; len < w.n; len++)
        CHECK(graph_deserialize(&g, w.p, len, err, sizeof err) == MN_E_FORMAT || len == 0);
    wb_free(&w);
#undef VARIANT
}

/* ---- 5. weights and kernels that do not fit ---------------------------------- */

static mn_status put_wbuf(void *sink, const void *p, uint64_t n, char *err, size_t cap) {
    (void)err, (void)cap;
    wb_put(sink, p, (size_t)n);
    return MN_OK;
}

/* A kernels section of count kernels (keys key0, key1, key1...) holding
 * srclen bytes of "void main(){}" and nwords words starting with magic. */
static void enc_kernels(mn_wbuf *k, uint32_t count, uint8_t key0, uint8_t key1, uint32_t srclen, uint32_t nwords,
                        uint32_t magic) {
    static const uint32_t words[5] = {0x07230203u, 0x00010300u, 0, 1, 0};
    wb_free(k);
    wb_put(k, "MNKS", 4), wb_u32(k, 1), wb_u16(k, 3), wb_put(k, "cid", 3);
    for (int q = 0; q < 4; q++) wb_u32(k, (uint32_t)q);
    wb_u16(k, 4), wb_put(k, "gpu0", 4), wb_u32(k, count);
    for (uint32_t j = 0; j < count; j++) {
        uint8_t key[32] = {j ? key1 : key0};
        wb_put(k, key, 32), wb_u32(k, srclen), wb_u32(k, nwords), wb_put(k, "void main(){}", srclen);
        wb_put(k, NULL, (4 - srclen % 4) % 4);
        for (uint32_t q = 0; q < nwords; q++) wb_u32(k, q ? words[q % 5] : magic);
    }
}

/* The toy bundle with section tag replaced by d[0..n); its status and message. */
static mn_status with_section(const char *tag, const void *d, size_t n, char *err, size_t cap) {
    char a[128];
    path_in(a, sizeof a, "toy.mnb");
    size_t bn, n2;
    uint8_t *b = slurp(a, &bn);
    parts p;
    parts_of(&p, b, bn);
    parts_set(&p, tag, d, n);
    uint8_t *b2 = parts_write(&p, &n2);
    mn_status st = check_mem(b2, n2, err, cap);
    if (!st) { /* the checks that come with the session */
        mn_session *s = NULL;
        mn_session_options o = mn_session_default_options();
        st = session_bundle_mem(&s, b2, n2, &o, UINT64_MAX, err, cap);
        mn_session_destroy(s);
    }
    parts_free(&p);
    free(b), free(b2);
    return st;
}

static void test_hostile_weights_kernels(void) {
    char err[512];
    float w[TD * TO] = {0}, bias[TO] = {0}, gam[TO] = {0};
    st_entry e[4] = {{"fc.weight", "F32", 2, S(TD, TO), w, sizeof w},
                     {"fc.bias", "F32", 1, S(TO), bias, sizeof bias},
                     {"norm.weight", "F32", 1, S(TO), gam, sizeof gam},
                     {"stray", "F32", 1, S(TO), gam, sizeof gam}};
    mn_wbuf sw = {0};
#define WEIGHTS(n) (wb_free(&sw), st_write(put_wbuf, &sw, "w", e, n, NULL, 0, err, sizeof err))
    WEIGHTS(3);
    CHECK_OK(with_section("weights", sw.p, sw.n, err, sizeof err), err);
    WEIGHTS(2);
    EXPECT_REFUSED(with_section("weights", sw.p, sw.n, err, sizeof err), err, "'norm.weight' [5] is missing");
    WEIGHTS(4);
    EXPECT_REFUSED(with_section("weights", sw.p, sw.n, err, sizeof err), err, "'stray' is not a parameter");
    e[1].rank = 2, e[1].shape = S(1, TO);
    WEIGHTS(3);
    EXPECT_REFUSED(with_section("weights", sw.p, sw.n, err, sizeof err), err, "is F32 [1,5]");
    e[1].rank = 1, e[1].shape = S(TO);
    e[1].dtype = "I32";
    WEIGHTS(3);
    EXPECT_REFUSED(with_section("weights", sw.p, sw.n, err, sizeof err), err, "is I32");
    e[1].dtype = "F32";
    w[3] = NAN;
    WEIGHTS(3);
    EXPECT_REFUSED(with_section("weights", sw.p, sw.n, err, sizeof err), err, "NaN");
    EXPECT_REFUSED(with_section("weights", "garbage!", 8, err, sizeof err), err, "weights");
    wb_free(&sw);
#undef WEIGHTS
    /* a kernels section: valid, then broken field by field */
    mn_wbuf k = {0};
#define KS(count, key0, key1, srclen, nwords, magic) enc_kernels(&k, count, key0, key1, srclen, nwords, magic)
    KS(2, 1, 2, 13, 5, 0x07230203u);
    CHECK_OK(with_section("kernels", k.p, k.n, err, sizeof err), err);
    KS(2, 2, 2, 13, 5, 0x07230203u);
    EXPECT_REFUSED(with_section("kernels", k.p, k.n, err, sizeof err), err, "increasing order");
    KS(2, 3, 2, 13, 5, 0x07230203u);
    EXPECT_REFUSED(with_section("kernels", k.p, k.n, err, sizeof err), err, "increasing order");
    KS(1, 1, 2, 13, 4, 0x07230203u);
    EXPECT_REFUSED(with_section("kernels", k.p, k.n, err, sizeof err), err, "SPIR-V words");
    KS(1, 1, 2, 13, 5, 0x03022307u);
    EXPECT_REFUSED(with_section("kernels", k.p, k.n, err, sizeof err), err, "no SPIR-V magic");
    KS(1, 1, 2, 0, 5, 0x07230203u);
    EXPECT_REFUSED(with_section("kernels", k.p, k.n, err, sizeof err), err, "bytes of GLSL");
    KS(1, 1, 2, 13, 5, 0x07230203u);
    le32_put(k.p + 4 + 4 + 2 + 3 + 16 + 2 + 4, 1000); /* the count */
    EXPECT_REFUSED(with_section("kernels", k.p, k.n, err, sizeof err), err, "1000 kernels");
    KS(1, 1, 2, 13, 5, 0x07230203u);
    k.p[79 + 13] = 1; /* the padding after the GLSL */
    EXPECT_REFUSED(with_section("kernels", k.p, k.n, err, sizeof err), err, "padding");
    KS(1, 1, 2, 13, 5, 0x07230203u);
    wb_u8(&k, 0);
    EXPECT_REFUSED(with_section("kernels", k.p, k.n, err, sizeof err), err, "after the last kernel");
    KS(1, 1, 2, 13, 5, 0x07230203u);
    for (size_t len = 0; len < k.n; len++)
        CHECK(with_section("kernels", k.p, len, err, sizeof err) == MN_E_FORMAT && strstr(err, "kernels section"));
    wb_free(&k);
#undef KS
    /* info: a key twice, a control character */
    mn_wbuf in = {0};
    wb_put(&in, "MNIN", 4), wb_u32(&in, 1), wb_u32(&in, 2);
    for (int j = 0; j < 2; j++) wb_u16(&in, 1), wb_put(&in, "k", 1), wb_u32(&in, 1), wb_put(&in, "v", 1);
    EXPECT_REFUSED(with_section("info", in.p, in.n, err, sizeof err), err, "a key seen before");
    in.p[12 + 2] = '\n';
    EXPECT_REFUSED(with_section("info", in.p, in.n, err, sizeof err), err, "control character");
    wb_free(&in);
}

/* ---- 6. the fuzz corpus and mutations through the fuzz target ----------------- */

static int replay_corpus(const char *dir) {
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (!d) return 0;
    int files = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        size_t n;
        uint8_t *b = slurp(p, &n);
        if (!b) continue;
        LLVMFuzzerTestOneInput(b, n);
        free(b);
        files++;
    }
    closedir(d);
    return files;
}

static void mutations(void) {
    char a[128];
    path_in(a, sizeof a, "toy.mnb");
    size_t n;
    uint8_t *b = slurp(a, &n);
    if (!b) return;
    uint8_t *m = malloc(n + 1);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int k = 0; k < 300; k++) {
        m[0] = (uint8_t)(k % 2); /* as is, or with the checksums fixed */
        memcpy(m + 1, b, n);
        for (int j = 0; j < 1 + k % 4; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            m[1 + x % n] ^= (uint8_t)(1u << (x >> 40) % 8);
        }
        LLVMFuzzerTestOneInput(m, n + 1);
    }
    th_passed++;
    free(m);
    free(b);
}

/* The seed corpus: bundles (read as is and with checksums fixed) and graph
 * sections of op cases. */
static int write_seeds(const char *dir) {
    char a[128], p[4096];
    float probs[TB * TO];
    write_toy("toy.mnb", probs);
    path_in(a, sizeof a, "toy.mnb");
    size_t n;
    uint8_t *b = slurp(a, &n);
    if (!b) return 1;
    uint8_t *m = malloc(n + 1);
    for (int mode = 0; mode < 2; mode++) {
        m[0] = (uint8_t)mode;
        memcpy(m + 1, b, n);
        snprintf(p, sizeof p, "%s/seed-toy-%s", dir, mode ? "fixed" : "plain");
        spit(p, m, n + 1);
    }
    /* with a (made up) kernels section and pipeline data */
    parts pt;
    parts_of(&pt, b, n);
    mn_wbuf kw = {0};
    enc_kernels(&kw, 2, 1, 2, 13, 5, 0x07230203u);
    parts_set(&pt, "kernels", kw.p, kw.n);
    parts_set(&pt, "pipeline", "0123456789abcdef0123456789abcdef", 32);
    size_t n2;
    uint8_t *b2 = parts_write(&pt, &n2);
    m = realloc(m, n2 + 1);
    m[0] = 1;
    memcpy(m + 1, b2, n2);
    snprintf(p, sizeof p, "%s/seed-toy-kernels", dir);
    spit(p, m, n2 + 1);
    free(b2);
    wb_free(&kw);
    parts_free(&pt);
    free(m);
    free(b);
    const char *want[] = {"conv2d_groups_stride_bias", "attn_cache_pos", "layer_norm", "ce_ignore_smooth",
                          "embedding_dup_oob", "batch_norm2d_train", "concat7_chain", "conv_transpose2d_bias",
                          "dropout_counter", "permute", "avgpool_pad_include", "pad_rank4"};
    for (size_t k = 0; k < MN_ARRAY_LEN(cases); k++) {
        bool take = false;
        for (size_t j = 0; j < MN_ARRAY_LEN(want); j++) take |= !strcmp(cases[k].name, want[j]);
        if (!take) continue;
        gc c;
        mn_tensor y;
        build_case(&cases[k], &c, &y);
        mn_graph_output(c.g, y, "y");
        mn_wbuf w = {0};
        wb_u8(&w, 2);
        char err[256];
        CHECK_OK(graph_serialize(c.g, &w, err, sizeof err), err);
        snprintf(p, sizeof p, "%s/seed-graph-%s", dir, cases[k].name);
        spit(p, w.p, w.n);
        wb_free(&w);
        mn_graph_destroy(c.g);
    }
    return th_finish("test_bundle --write-seeds");
}

static void cleanup(void) {
    DIR *d = opendir(g_dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char p[128];
        path_in(p, sizeof p, de->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(g_dir);
}

int main(int argc, char **argv) {
    snprintf(g_dir, sizeof g_dir, "/tmp/mn-test-bundle-XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    mn_set_log(NULL, NULL);
    if (argc == 3 && !strcmp(argv[1], "--write-seeds")) {
        int rc = write_seeds(argv[2]);
        cleanup();
        return rc;
    }
    test_op_cases();
    test_session_bundle();
    test_hostile_container();
    test_hostile_graph();
    test_hostile_weights_kernels();
#ifdef MN_BUNDLE_CORPUS
    int files = replay_corpus(MN_BUNDLE_CORPUS);
    CHECK_MSG(files > 0, "corpus %s is empty", MN_BUNDLE_CORPUS);
    printf("  %d corpus files replayed\n", files);
#endif
    mutations();
    cleanup();
    return th_finish("test_bundle");
}
