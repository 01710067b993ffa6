/* test_session_errors.c - bad input to a session gets a clear error and loses
 * nothing: creation failures (NULLs, no loss, bad optimizer settings, an
 * unavailable backend) give a dead session that refuses every call; inputs,
 * outputs and parameters check names and sizes; checkpoints check names,
 * shapes and file integrity before changing anything, and a failed save
 * leaves the previous file byte-identical.
 *
 * Does not: check numerics of training (test_gradcheck.c, the kernel tests).
 * Files live in a mkdtemp folder under /tmp, removed at the end.
 */
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "io/safetensors.h"
#include "session/session.h"

#define S(...) (const int64_t[]){__VA_ARGS__}

static bool has(const char *hay, const char *needle) { return strstr(hay ? hay : "", needle) != NULL; }
#define CHECK_HAS(hay, needle) CHECK_MSG(has((hay), (needle)), "message \"%s\" lacks \"%s\"", (hay), (needle))
/* Status and message of one failing call on session s. */
#define CHECK_FAILS(s, call, want, needle)                                                         \
    do {                                                                                           \
        mn_status st_ = (call);                                                                    \
        CHECK_MSG(st_ == (want), "%s -> %s, want %s (%s)", #call, mn_status_str(st_),              \
                  mn_status_str(want), mn_session_error(s));                                       \
        const char *needle_ = (needle);                                                            \
        if (needle_) CHECK_HAS(mn_session_error(s), needle_);                                      \
    } while (0)

static char g_dir[64]; /* the temporary folder */

static const char *tpath(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", g_dir, name);
    return buf;
}

/* ---- files ------------------------------------------------------------------ */

/* Whole file into a malloc'd buffer (NULL if missing). */
static unsigned char *file_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
            *len = fread(buf, 1, (size_t)n, f);
            if (*len != (size_t)n) {
                free(buf);
                buf = NULL;
            }
        }
    }
    fclose(f);
    return buf;
}

static bool file_write(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

/* ---- models ------------------------------------------------------------------- */

#define BATCH 4

/* x [4,3] -> relu(x @ w1 + b1) [4,H] -> @ w2 + b2 -> "logits" [4,2], plus a
 * parameter [2] named `extra` if not NULL; cross_entropy with i32 labels [4]
 * as the loss (if with_loss). */
static mn_graph *mlp(int64_t hidden, const char *extra, bool with_loss) {
    mn_graph *g = NULL;
    if (mn_graph_create(&g)) return NULL;
    mn_tensor x, y, w1, b1, w2, b2, e, t, logits, loss;
    mn_init xu = {MN_INIT_XAVIER_UNIFORM, 0, 0}, u = {MN_INIT_UNIFORM, -0.1f, 0.1f};
    mn_status st = MN_OK;
    if (!st) st = mn_graph_input(g, &x, "x", MN_F32, 2, S(BATCH, 3));
    if (!st) st = mn_graph_input(g, &y, "labels", MN_I32, 1, S(BATCH));
    if (!st) st = mn_graph_param(g, &w1, "w1", 2, S(3, hidden), xu);
    if (!st) st = mn_graph_param(g, &b1, "b1", 1, S(hidden), u);
    if (!st) st = mn_graph_param(g, &w2, "w2", 2, S(hidden, 2), xu);
    if (!st) st = mn_graph_param(g, &b2, "b2", 1, S(2), u);
    if (!st) st = mn_matmul(g, &t, x, w1);
    if (!st) st = mn_add(g, &t, t, b1);
    if (!st) st = mn_relu(g, &t, t);
    if (!st) st = mn_matmul(g, &t, t, w2);
    if (!st) st = mn_add(g, &logits, t, b2);
    if (!st && extra) st = mn_graph_param(g, &e, extra, 1, S(2), u);
    if (!st && extra) st = mn_add(g, &logits, logits, e);
    if (!st) st = mn_graph_output(g, logits, "logits");
    if (!st && with_loss) st = mn_cross_entropy(g, &loss, logits, y);
    if (!st && with_loss) st = mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    if (st) {
        mn_graph_destroy(g);
        return NULL;
    }
    return g;
}

static mn_session *open_session(const mn_graph *g, mn_mode mode, mn_optim_kind kind, uint64_t seed) {
    mn_session_options o = mn_session_default_options();
    o.mode = mode;
    o.optim = mn_optimizer_default(kind);
    o.optim.lr = 0.05f;
    o.seed = seed;
    mn_session *s = NULL;
    mn_status st = mn_session_create(&s, g, &o);
    CHECK_OK(st, mn_session_error(s));
    if (st) {
        mn_session_destroy(s);
        return NULL;
    }
    return s;
}

static void feed(mn_session *s) {
    static const float x[BATCH * 3] = {0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.5f, -2.0f, 1.0f, 0.0f, 0.3f, 0.7f, -0.9f};
    static const int32_t y[BATCH] = {0, 1, 1, 0};
    CHECK_OK(mn_session_set_input(s, "x", x, sizeof x), mn_session_error(s));
    CHECK_OK(mn_session_set_input(s, "labels", y, sizeof y), mn_session_error(s));
}

/* All parameters of the model, concatenated (caller frees). */
static const char *const k_params[] = {"w1", "b1", "w2", "b2"};
static float *snapshot(mn_session *s, size_t *count) {
    size_t total = 0, n[4];
    for (int i = 0; i < 4; i++) {
        n[i] = 0;
        CHECK_OK(mn_session_numel(s, k_params[i], &n[i]), mn_session_error(s));
        total += n[i];
    }
    float *v = calloc(total + 1, sizeof *v);
    if (!v) return NULL;
    size_t at = 0;
    for (int i = 0; i < 4; i++) {
        CHECK_OK(mn_session_get_param(s, k_params[i], v + at, n[i]), mn_session_error(s));
        at += n[i];
    }
    *count = total;
    return v;
}

static bool same_floats(const float *a, size_t na, const float *b, size_t nb) {
    return a && b && na == nb && memcmp(a, b, na * sizeof *a) == 0;
}

/* Checks that s's parameters equal the snapshot (v, n). */
#define CHECK_PARAMS(s, v, n)                                                                      \
    do {                                                                                           \
        size_t n2_ = 0;                                                                            \
        float *v2_ = snapshot((s), &n2_);                                                          \
        CHECK_MSG(same_floats((v), (n), v2_, n2_), "parameters differ from the snapshot");         \
        free(v2_);                                                                                 \
    } while (0)

/* Every element of the named optimizer state tensor is zero (f32 session). */
static bool state_is_zero(mn_session *s, const char *name) {
    int32_t id = graph_find(s->g, name);
    if (id == MN_NONE) return false;
    size_t cnt = (size_t)node_numel(&s->g->nodes[id]);
    float *v = malloc(cnt * sizeof *v);
    bool zero = v && session_read_node(s, id, v, cnt * sizeof *v) == MN_OK;
    for (size_t i = 0; zero && i < cnt; i++) zero = v[i] == 0.0f;
    free(v);
    return zero;
}

/* ---- creation ------------------------------------------------------------------ */

/* A dead session refuses every call, keeps its first message and never crashes. */
static void check_dead(mn_session *s, const char *why) {
    char path[256];
    float f = 0, buf[64] = {0};
    size_t n = 0;
    CHECK(s != NULL);
    if (!s) return;
    CHECK_HAS(mn_session_error(s), why);
    CHECK(mn_session_set_input(s, "x", buf, 48) < 0);
    CHECK(mn_session_step(s) < 0);
    CHECK(mn_session_run(s) < 0);
    CHECK(mn_session_loss(s, &f) < 0);
    CHECK(mn_session_output(s, "logits", buf, 32) < 0);
    CHECK(mn_session_numel(s, "x", &n) < 0);
    CHECK(mn_session_get_param(s, "b2", buf, 2) < 0);
    CHECK(mn_session_set_param(s, "b2", buf, 2) < 0);
    CHECK(mn_session_set_meta(s, "k", "v") < 0);
    CHECK(mn_session_save(s, tpath(path, sizeof path, "dead.ckpt")) < 0);
    CHECK(!file_exists(path));
    CHECK(mn_session_load(s, path) < 0);
    CHECK(mn_session_memory(s, NULL, NULL) < 0);
    CHECK(mn_session_dump(s, "schedule", stdout) < 0);
    CHECK(mn_session_dump(s, "memplan", stdout) < 0);
    CHECK(mn_session_step_count(s) == 0);
    CHECK(mn_session_lr(s) == 0.0f);
    /* the reason is still there after all those calls */
    CHECK_HAS(mn_session_error(s), why);
}

typedef struct bad_optim {
    const char *setting; /* the message must name it */
    void (*apply)(mn_optimizer *o);
} bad_optim;

static void neg_lr(mn_optimizer *o) { o->lr = -0.1f; }
static void nan_lr(mn_optimizer *o) { o->lr = NAN; }
static void beta1_one(mn_optimizer *o) { o->beta1 = 1.0f; }
static void beta2_big(mn_optimizer *o) { o->beta2 = 1.5f; }
static void neg_eps(mn_optimizer *o) { o->eps = -1e-8f; }
static void neg_wd(mn_optimizer *o) { o->weight_decay = -0.01f; }
static void neg_clip(mn_optimizer *o) { o->clip_norm = -1.0f; }
static void momentum_one(mn_optimizer *o) { o->kind = MN_OPTIM_SGD, o->momentum = 1.0f; }
static void nesterov_nomom(mn_optimizer *o) { o->kind = MN_OPTIM_SGD, o->momentum = 0.0f, o->nesterov = true; }
static void cosine_eq(mn_optimizer *o) { o->schedule = MN_LR_WARMUP_COSINE, o->warmup_steps = 10, o->total_steps = 10; }
static void cosine_lt(mn_optimizer *o) { o->schedule = MN_LR_WARMUP_COSINE, o->warmup_steps = 10, o->total_steps = 5; }
static void cosine_neg(mn_optimizer *o) { o->schedule = MN_LR_WARMUP_COSINE, o->warmup_steps = -1, o->total_steps = 5; }
static void cosine_minlr(mn_optimizer *o) { o->schedule = MN_LR_WARMUP_COSINE, o->total_steps = 5, o->min_lr = 1.0f; }
static void bad_kind(mn_optimizer *o) { o->kind = (mn_optim_kind)7; }
static void bad_sched(mn_optimizer *o) { o->schedule = (mn_lr_schedule)9; }

static void test_create_errors(void) {
    mn_graph *g = mlp(8, NULL, true), *noloss = mlp(8, NULL, false), *empty = NULL;
    CHECK_OK(mn_graph_create(&empty), "create");
    if (!g || !noloss || !empty) goto out;
    mn_session_options o = mn_session_default_options();
    mn_session *s = NULL;

    CHECK(mn_session_create(NULL, g, &o) == MN_E_INVALID);

    s = NULL;
    CHECK(mn_session_create(&s, NULL, &o) == MN_E_INVALID);
    check_dead(s, "NULL");
    mn_session_destroy(s);

    s = NULL;
    CHECK(mn_session_create(&s, g, NULL) == MN_E_INVALID);
    check_dead(s, "NULL");
    mn_session_destroy(s);

    s = NULL;
    CHECK(mn_session_create(&s, empty, &o) == MN_E_INVALID);
    check_dead(s, "empty");
    mn_session_destroy(s);

    /* training needs a loss; inference does not */
    o.mode = MN_MODE_TRAINING;
    s = NULL;
    CHECK(mn_session_create(&s, noloss, &o) == MN_E_STATE);
    check_dead(s, "loss");
    mn_session_destroy(s);
    o.mode = MN_MODE_INFERENCE;
    s = NULL;
    CHECK_OK(mn_session_create(&s, noloss, &o), mn_session_error(s));
    mn_session_destroy(s);

    /* optimizer settings: checked in training mode, naming the setting */
    static const bad_optim bad[] = {
        {"lr", neg_lr},           {"lr", nan_lr},          {"beta1", beta1_one},  {"beta2", beta2_big},
        {"eps", neg_eps},         {"weight_decay", neg_wd}, {"clip_norm", neg_clip}, {"momentum", momentum_one},
        {"nesterov", nesterov_nomom}, {"total_steps", cosine_eq}, {"warmup_steps", cosine_lt},
        {"warmup_steps", cosine_neg}, {"min_lr", cosine_minlr}, {"kind", bad_kind}, {"schedule", bad_sched},
    };
    for (size_t i = 0; i < MN_ARRAY_LEN(bad); i++) {
        mn_session_options ob = mn_session_default_options();
        ob.mode = MN_MODE_TRAINING;
        bad[i].apply(&ob.optim);
        s = NULL;
        mn_status st = mn_session_create(&s, g, &ob);
        CHECK_MSG(st == MN_E_INVALID, "optimizer case %zu (%s): %s (%s)", i, bad[i].setting, mn_status_str(st),
                  mn_session_error(s));
        CHECK_MSG(has(mn_session_error(s), bad[i].setting), "optimizer case %zu: \"%s\" lacks \"%s\"", i,
                  mn_session_error(s), bad[i].setting);
        if (i == 0) check_dead(s, "lr");
        mn_session_destroy(s);
        /* an inference session ignores the optimizer */
        ob.mode = MN_MODE_INFERENCE;
        s = NULL;
        CHECK_OK(mn_session_create(&s, g, &ob), mn_session_error(s));
        mn_session_destroy(s);
    }
    /* the valid edges are accepted */
    {
        mn_session_options ok = mn_session_default_options();
        ok.mode = MN_MODE_TRAINING;
        ok.optim = mn_optimizer_default(MN_OPTIM_SGD);
        ok.optim.momentum = 0.9f;
        ok.optim.nesterov = true;
        ok.optim.schedule = MN_LR_WARMUP_COSINE;
        ok.optim.warmup_steps = 0;
        ok.optim.total_steps = 1;
        s = NULL;
        CHECK_OK(mn_session_create(&s, g, &ok), mn_session_error(s));
        mn_session_destroy(s);
    }

    /* backends and modes */
    o = mn_session_default_options();
    o.backend = MN_BACKEND_VULKAN;
    s = NULL;
#ifndef MN_HAVE_VULKAN
    /* a build without the backend says so and points at the cpu */
    CHECK(mn_session_create(&s, g, &o) == MN_E_UNSUPPORTED);
    check_dead(s, "vulkan");
    CHECK_HAS(mn_session_error(s), "cpu");
#else
    /* with the backend: a session, or (no device) an error with a message */
    if (mn_session_create(&s, g, &o) != MN_OK) {
        CHECK(mn_session_error(s)[0] != 0);
        check_dead(s, "");
    }
#endif
    mn_session_destroy(s);
    o.backend = (mn_backend_kind)42;
    s = NULL;
    CHECK(mn_session_create(&s, g, &o) == MN_E_INVALID);
    check_dead(s, "backend");
    mn_session_destroy(s);
    o = mn_session_default_options();
    o.mode = (mn_mode)5;
    s = NULL;
    CHECK(mn_session_create(&s, g, &o) == MN_E_INVALID);
    check_dead(s, "mode");
    mn_session_destroy(s);
out:
    mn_graph_destroy(empty);
    mn_graph_destroy(noloss);
    mn_graph_destroy(g);
}

/* The session copies the graph: destroying or changing it afterwards is fine. */
static void test_graph_independent(void) {
    mn_graph *g = mlp(8, NULL, true);
    if (!g) return;
    mn_session *s = open_session(g, MN_MODE_TRAINING, MN_OPTIM_ADAM, 1);
    mn_tensor t;
    CHECK_OK(mn_graph_scalar(g, &t, 1.0f), mn_graph_error(g));
    mn_graph_destroy(g);
    if (!s) return;
    feed(s);
    CHECK_OK(mn_session_step(s), mn_session_error(s));
    float loss = NAN;
    CHECK_OK(mn_session_loss(s, &loss), mn_session_error(s));
    CHECK(isfinite(loss));
    mn_session_destroy(s);
}

/* ---- inputs, outputs, parameters ------------------------------------------------- */

static void test_io_errors(void) {
    mn_graph *g = mlp(8, NULL, true);
    if (!g) return;
    mn_session *inf = open_session(g, MN_MODE_INFERENCE, MN_OPTIM_ADAMW, 3);
    mn_session *tr = open_session(g, MN_MODE_TRAINING, MN_OPTIM_ADAMW, 3);
    mn_graph_destroy(g);
    if (!inf || !tr) goto out;
    float x[BATCH * 3] = {0}, logits[BATCH * 2], f = 0;
    size_t n = 0;

    /* set_input */
    CHECK_FAILS(inf, mn_session_set_input(inf, "nope", x, sizeof x), MN_E_NOT_FOUND, "'nope'");
    CHECK_FAILS(inf, mn_session_set_input(inf, NULL, x, sizeof x), MN_E_NOT_FOUND, "(null)");
    CHECK_FAILS(inf, mn_session_set_input(inf, "w1", x, sizeof x), MN_E_NOT_FOUND, "'w1'");      /* a param */
    CHECK_FAILS(inf, mn_session_set_input(inf, "logits", x, 32), MN_E_NOT_FOUND, "'logits'");    /* an output */
    CHECK_FAILS(tr, mn_session_set_input(tr, "__hyper", x, 16), MN_E_NOT_FOUND, "__hyper");      /* internal */
    CHECK_FAILS(inf, mn_session_set_input(inf, "x", x, sizeof x - 4), MN_E_SHAPE, "'x'");
    CHECK_HAS(mn_session_error(inf), "[4,3]");
    CHECK_HAS(mn_session_error(inf), "44");
    CHECK_HAS(mn_session_error(inf), "48");
    CHECK_FAILS(inf, mn_session_set_input(inf, "labels", x, 8), MN_E_SHAPE, "i32 [4]");
    CHECK_FAILS(inf, mn_session_set_input(inf, "x", NULL, sizeof x), MN_E_INVALID, "NULL");
    CHECK_FAILS(inf, mn_session_set_input(inf, "x", x, 0), MN_E_SHAPE, "'x'");

    /* step, loss, run */
    CHECK_FAILS(inf, mn_session_step(inf), MN_E_STATE, "inference");
    CHECK(mn_session_step_count(inf) == 0);
    CHECK_FAILS(inf, mn_session_loss(inf, &f), MN_E_STATE, "loss");
    CHECK_FAILS(tr, mn_session_loss(tr, &f), MN_E_STATE, "loss");
    CHECK_FAILS(inf, mn_session_loss(inf, NULL), MN_E_INVALID, "NULL");
    feed(inf);
    feed(tr);
    CHECK_OK(mn_session_run(inf), mn_session_error(inf));
    f = NAN;
    CHECK_OK(mn_session_loss(inf, &f), mn_session_error(inf));
    CHECK(isfinite(f) && f > 0);

    /* output */
    CHECK_FAILS(inf, mn_session_output(inf, "logits", logits, sizeof logits + 4), MN_E_SHAPE, "'logits'");
    CHECK_HAS(mn_session_error(inf), "[4,2]");
    CHECK_FAILS(inf, mn_session_output(inf, "logits", logits, 4), MN_E_SHAPE, "32 bytes");
    CHECK_FAILS(inf, mn_session_output(inf, "nope", logits, sizeof logits), MN_E_NOT_FOUND, "'nope'");
    CHECK_FAILS(inf, mn_session_output(inf, NULL, logits, sizeof logits), MN_E_NOT_FOUND, "(null)");
    CHECK_FAILS(inf, mn_session_output(inf, "x", x, sizeof x), MN_E_NOT_FOUND, "'x'"); /* not an output */
    CHECK_FAILS(inf, mn_session_output(inf, "logits", NULL, sizeof logits), MN_E_INVALID, "NULL");
    CHECK_OK(mn_session_output(inf, "logits", logits, sizeof logits), mn_session_error(inf));

    /* numel */
    CHECK_OK(mn_session_numel(inf, "x", &n), mn_session_error(inf));
    CHECK(n == 12);
    CHECK_OK(mn_session_numel(inf, "logits", &n), mn_session_error(inf));
    CHECK(n == 8);
    CHECK_FAILS(inf, mn_session_numel(inf, "nope", &n), MN_E_NOT_FOUND, "'nope'");
    CHECK_FAILS(inf, mn_session_numel(inf, "x", NULL), MN_E_INVALID, "NULL");

    /* labels out of range are data, not a crash: those rows count as 0 */
    static const int32_t odd[BATCH] = {-1, 7, 0, 1};
    CHECK_OK(mn_session_set_input(inf, "labels", odd, sizeof odd), mn_session_error(inf));
    CHECK_OK(mn_session_run(inf), mn_session_error(inf));
    CHECK_OK(mn_session_loss(inf, &f), mn_session_error(inf));
    CHECK(isfinite(f));
    feed(inf);

    /* get_param / set_param: names, counts, NULLs; a failed set changes nothing */
    size_t pn0 = 0;
    float *before = snapshot(inf, &pn0);
    float w1[24], big[25] = {0};
    CHECK_FAILS(inf, mn_session_get_param(inf, "nope", w1, 24), MN_E_NOT_FOUND, "'nope'");
    CHECK_FAILS(inf, mn_session_get_param(inf, "x", w1, 12), MN_E_NOT_FOUND, "'x'"); /* an input */
    CHECK_FAILS(inf, mn_session_get_param(inf, NULL, w1, 24), MN_E_NOT_FOUND, "(null)");
    CHECK_FAILS(inf, mn_session_get_param(inf, "w1", w1, 23), MN_E_SHAPE, "'w1'");
    CHECK_HAS(mn_session_error(inf), "[3,8]");
    CHECK_HAS(mn_session_error(inf), "23");
    CHECK_FAILS(inf, mn_session_get_param(inf, "w1", NULL, 24), MN_E_INVALID, "NULL");
    CHECK_FAILS(inf, mn_session_set_param(inf, "nope", w1, 24), MN_E_NOT_FOUND, "'nope'");
    CHECK_FAILS(inf, mn_session_set_param(inf, "w1", big, 25), MN_E_SHAPE, "[3,8]");
    CHECK_FAILS(inf, mn_session_set_param(inf, "w1", big, 0), MN_E_SHAPE, "'w1'");
    CHECK_FAILS(inf, mn_session_set_param(inf, "w1", NULL, 24), MN_E_INVALID, "NULL");
    CHECK_FAILS(tr, mn_session_set_param(tr, "optim.adamw.m.w1", big, 24), MN_E_NOT_FOUND, "optim.adamw.m.w1");
    CHECK_PARAMS(inf, before, pn0);
    free(before);
    /* round trip */
    for (int i = 0; i < 24; i++) big[i] = (float)i * 0.125f - 1.0f;
    CHECK_OK(mn_session_set_param(inf, "w1", big, 24), mn_session_error(inf));
    CHECK_OK(mn_session_get_param(inf, "w1", w1, 24), mn_session_error(inf));
    CHECK(memcmp(w1, big, sizeof w1) == 0);

    /* still usable after all those errors */
    CHECK_OK(mn_session_run(inf), mn_session_error(inf));
    CHECK_OK(mn_session_step(tr), mn_session_error(tr));
    CHECK_OK(mn_session_loss(tr, &f), mn_session_error(tr));
    CHECK(mn_session_step_count(tr) == 1);
    size_t peak = 0, sum = 0;
    CHECK_OK(mn_session_memory(tr, &peak, &sum), mn_session_error(tr));
    CHECK(peak > 0 && sum > 0); /* peak may exceed sum by arena alignment */
    CHECK(mn_session_memory(NULL, &peak, &sum) < 0);
    /* NULL session */
    CHECK(mn_session_step(NULL) == MN_E_INVALID);
    CHECK(mn_session_run(NULL) == MN_E_INVALID);
    CHECK(mn_session_set_input(NULL, "x", x, sizeof x) == MN_E_INVALID);
    CHECK(mn_session_get_param(NULL, "w1", w1, 24) == MN_E_INVALID);
    CHECK(mn_session_save(NULL, "/tmp/x") == MN_E_INVALID);
    CHECK(mn_session_load(NULL, "/tmp/x") == MN_E_INVALID);
    CHECK(mn_session_set_meta(NULL, "k", "v") == MN_E_INVALID);
    CHECK(mn_session_step_count(NULL) == 0);
    CHECK(mn_session_lr(NULL) == 0.0f);
out:
    mn_session_destroy(tr);
    mn_session_destroy(inf);
}

/* ---- checkpoints ------------------------------------------------------------------- */

static void test_checkpoints(void) {
    char pa[256], pbig[256], pextra[256], ptrunc[256], pmiss[256], pnodir[256], pinf[256], pjunk[256];
    tpath(pa, sizeof pa, "a.ckpt");
    tpath(pbig, sizeof pbig, "big.ckpt");
    tpath(pextra, sizeof pextra, "extra.ckpt");
    tpath(ptrunc, sizeof ptrunc, "trunc.ckpt");
    tpath(pmiss, sizeof pmiss, "missing.ckpt");
    tpath(pnodir, sizeof pnodir, "no/such/dir/x.ckpt");
    tpath(pinf, sizeof pinf, "inf.ckpt");
    tpath(pjunk, sizeof pjunk, "junk.ckpt");
    mn_graph *g = mlp(8, NULL, true), *g16 = mlp(16, NULL, true), *gx = mlp(8, "extra", true);
    mn_session *a = NULL, *b = NULL, *inf = NULL, *c = NULL, *sgd = NULL, *s16 = NULL, *sx = NULL;
    float *va = NULL, *vb = NULL, *vi = NULL;
    unsigned char *bytes = NULL;
    size_t na = 0, nb = 0, ni = 0, len = 0;
    if (!g || !g16 || !gx) goto out;
    a = open_session(g, MN_MODE_TRAINING, MN_OPTIM_ADAMW, 1);
    b = open_session(g, MN_MODE_TRAINING, MN_OPTIM_ADAMW, 2);
    inf = open_session(g, MN_MODE_INFERENCE, MN_OPTIM_ADAMW, 3);
    c = open_session(g, MN_MODE_TRAINING, MN_OPTIM_ADAMW, 4);
    sgd = open_session(g, MN_MODE_TRAINING, MN_OPTIM_SGD, 5);
    s16 = open_session(g16, MN_MODE_INFERENCE, MN_OPTIM_ADAMW, 6);
    sx = open_session(gx, MN_MODE_INFERENCE, MN_OPTIM_ADAMW, 7);
    if (!a || !b || !inf || !c || !sgd || !s16 || !sx) goto out;

    /* 1. round trip of a training session: parameters, optimizer state, step */
    feed(a);
    feed(b);
    CHECK_OK(mn_session_step(b), mn_session_error(b)); /* b has a loss and a step of its own */
    for (int i = 0; i < 3; i++) CHECK_OK(mn_session_step(a), mn_session_error(a));
    CHECK_OK(mn_session_set_meta(a, "run", "first"), mn_session_error(a));
    CHECK_OK(mn_session_set_meta(a, "run", "alpha"), mn_session_error(a)); /* replaces */
    CHECK_OK(mn_session_set_meta(a, "note", "ünïcode ✓"), mn_session_error(a));
    CHECK_OK(mn_session_save(a, pa), mn_session_error(a));
    va = snapshot(a, &na);
    vb = snapshot(b, &nb);
    CHECK(!same_floats(va, na, vb, nb)); /* different seeds */
    CHECK_OK(mn_session_load(b, pa), mn_session_error(b));
    CHECK_PARAMS(b, va, na);
    CHECK(mn_session_step_count(b) == 3);
    CHECK(mn_session_lr(b) == mn_session_lr(a));
    float loss = 0;
    CHECK_FAILS(b, mn_session_loss(b, &loss), MN_E_STATE, "loss"); /* a load forgets the last loss */
    /* the optimizer state came along: one more step agrees exactly */
    CHECK_OK(mn_session_step(a), mn_session_error(a));
    CHECK_OK(mn_session_step(b), mn_session_error(b));
    free(vb);
    vb = snapshot(b, &nb);
    CHECK_PARAMS(a, vb, nb);
    CHECK(mn_session_step_count(b) == 4);

    /* 2. metadata */
    char val[64], err[256];
    CHECK_OK(mn_checkpoint_meta(pa, "run", val, sizeof val, err, sizeof err), err);
    CHECK(strcmp(val, "alpha") == 0);
    CHECK_OK(mn_checkpoint_meta(pa, "note", val, sizeof val, err, sizeof err), err);
    CHECK(strcmp(val, "ünïcode ✓") == 0);
    CHECK_OK(mn_checkpoint_meta(pa, "meganeura.step", val, sizeof val, err, sizeof err), err);
    CHECK(strcmp(val, "3") == 0);
    CHECK_OK(mn_checkpoint_meta(pa, "meganeura.optimizer", val, sizeof val, err, sizeof err), err);
    CHECK(strcmp(val, "adamw") == 0);
    CHECK(mn_checkpoint_meta(pa, "nope", val, sizeof val, err, sizeof err) == MN_E_NOT_FOUND);
    CHECK_HAS(err, "'nope'");
    CHECK_HAS(err, pa);
    CHECK(mn_checkpoint_meta(pa, "nope", val, sizeof val, NULL, 0) == MN_E_NOT_FOUND);
    CHECK(mn_checkpoint_meta(pmiss, "run", val, sizeof val, err, sizeof err) == MN_E_IO);
    CHECK_HAS(err, pmiss);
    CHECK(mn_checkpoint_meta(pa, "run", val, 3, err, sizeof err) == MN_E_INVALID); /* "alpha" does not fit */
    CHECK(mn_checkpoint_meta(NULL, "run", val, sizeof val, err, sizeof err) == MN_E_INVALID);
    CHECK(mn_checkpoint_meta(pa, NULL, val, sizeof val, err, sizeof err) == MN_E_INVALID);
    CHECK(mn_checkpoint_meta(pa, "run", NULL, sizeof val, err, sizeof err) == MN_E_INVALID);
    CHECK_FAILS(a, mn_session_set_meta(a, "meganeura.step", "99"), MN_E_INVALID, "meganeura.step");
    CHECK_HAS(mn_session_error(a), "reserved");
    CHECK_FAILS(a, mn_session_set_meta(a, "meganeura.custom", "x"), MN_E_INVALID, "reserved");
    CHECK_FAILS(a, mn_session_set_meta(a, "format", "np"), MN_E_INVALID, "reserved");
    CHECK_FAILS(a, mn_session_set_meta(a, "", "x"), MN_E_INVALID, "key");
    CHECK_FAILS(a, mn_session_set_meta(a, NULL, "x"), MN_E_INVALID, "key");
    CHECK_FAILS(a, mn_session_set_meta(a, "k", NULL), MN_E_INVALID, "value");
    /* metadata must be UTF-8 (safetensors headers are JSON): refused now, not
     * at every later save */
    CHECK_FAILS(a, mn_session_set_meta(a, "bad", "\xff\xfe"), MN_E_INVALID, "UTF-8");
    CHECK_FAILS(a, mn_session_set_meta(a, "\xc3", "v"), MN_E_INVALID, "UTF-8");
    char pa2[256];
    CHECK_OK(mn_session_save(a, tpath(pa2, sizeof pa2, "a2.ckpt")), mn_session_error(a));
    CHECK_OK(mn_checkpoint_meta(pa2, "meganeura.step", val, sizeof val, err, sizeof err), err);
    CHECK(strcmp(val, "4") == 0);

    /* 3. a file missing on disk, a directory, junk, NULL */
    free(vb);
    vb = snapshot(b, &nb);
    int64_t step_b = mn_session_step_count(b);
    CHECK_FAILS(b, mn_session_load(b, pmiss), MN_E_IO, pmiss);
    CHECK_FAILS(b, mn_session_load(b, g_dir), MN_E_IO, g_dir);
    CHECK(file_write(pjunk, "definitely not a checkpoint", 27));
    CHECK_FAILS(b, mn_session_load(b, pjunk), MN_E_FORMAT, pjunk);
    CHECK_FAILS(b, mn_session_load(b, NULL), MN_E_INVALID, NULL);
    CHECK_FAILS(b, mn_session_save(b, NULL), MN_E_INVALID, NULL);
    CHECK_FAILS(b, mn_session_save(b, ""), MN_E_INVALID, "path");
    CHECK_PARAMS(b, vb, nb);

    /* 4. a different model (hidden 16 vs 8): shape error naming the parameter
     *    and both shapes; nothing changes */
    CHECK_OK(mn_session_save(s16, pbig), mn_session_error(s16));
    CHECK_FAILS(b, mn_session_load(b, pbig), MN_E_SHAPE, "'w1'");
    CHECK_HAS(mn_session_error(b), "[3,16]");
    CHECK_HAS(mn_session_error(b), "[3,8]");
    CHECK_HAS(mn_session_error(b), pbig);
    CHECK_PARAMS(b, vb, nb);
    CHECK(mn_session_step_count(b) == step_b);
    CHECK_FAILS(s16, mn_session_load(s16, pa), MN_E_SHAPE, "'w1'"); /* and the other way round */

    /* 5. a checkpoint with an extra tensor the model lacks */
    CHECK_OK(mn_session_save(sx, pextra), mn_session_error(sx));
    CHECK_FAILS(b, mn_session_load(b, pextra), MN_E_NOT_FOUND, "'extra'");
    CHECK_PARAMS(b, vb, nb);
    /* and the model with the extra parameter misses it in a plain checkpoint */
    CHECK_FAILS(sx, mn_session_load(sx, pa), MN_E_NOT_FOUND, "'extra'");

    /* 6. another optimizer's state */
    CHECK_FAILS(sgd, mn_session_load(sgd, pa), MN_E_NOT_FOUND, "optim.adamw");
    CHECK_HAS(mn_session_error(sgd), "optimizer");

    /* 7. a truncated file: a format error, nothing changes */
    bytes = file_read(pa, &len);
    CHECK(bytes != NULL && len > 16);
    if (bytes) {
        CHECK(file_write(ptrunc, bytes, len / 2));
        CHECK_FAILS(b, mn_session_load(b, ptrunc), MN_E_FORMAT, ptrunc);
        CHECK_PARAMS(b, vb, nb);
        CHECK(mn_session_step_count(b) == step_b);
        CHECK(file_write(ptrunc, bytes, 5)); /* shorter than the length prefix */
        CHECK_FAILS(b, mn_session_load(b, ptrunc), MN_E_FORMAT, ptrunc);
        CHECK(file_write(ptrunc, bytes, len - 1)); /* one byte short of the data */
        CHECK_FAILS(b, mn_session_load(b, ptrunc), MN_E_FORMAT, ptrunc);
        CHECK_PARAMS(b, vb, nb);
    }

    /* 8. saving into a folder that does not exist: an I/O error naming the
     *    path; the checkpoint elsewhere is untouched */
    CHECK_FAILS(b, mn_session_save(b, pnodir), MN_E_IO, pnodir);
    {
        size_t len2 = 0;
        unsigned char *again = file_read(pa, &len2);
        CHECK(bytes && again && len2 == len && memcmp(again, bytes, len) == 0);
        free(again);
    }
    CHECK(!file_exists(pnodir));

    /* 9. an inference session loads a training checkpoint (parameters only) */
    {
        mn_session *i2 = open_session(g, MN_MODE_INFERENCE, MN_OPTIM_ADAMW, 9);
        if (i2) {
            CHECK_OK(mn_session_load(i2, pa), mn_session_error(i2));
            CHECK_PARAMS(i2, va, na); /* a's parameters at save time */
            CHECK(mn_session_step_count(i2) == 0);
            feed(i2);
            CHECK_OK(mn_session_run(i2), mn_session_error(i2));
            /* its own checkpoint has no optimizer state */
            CHECK_OK(mn_session_save(i2, pinf), mn_session_error(i2));
            CHECK_OK(mn_checkpoint_meta(pinf, "meganeura.optimizer", val, sizeof val, err, sizeof err), err);
            CHECK(strcmp(val, "none") == 0);
            mn_session_destroy(i2);
        }
    }

    /* 10. a training session loads an inference checkpoint: parameters, zero
     *     optimizer state, step 0 */
    vi = snapshot(inf, &ni);
    CHECK_OK(mn_session_save(inf, pinf), mn_session_error(inf));
    CHECK(mn_session_step_count(b) > 0);
    CHECK(!state_is_zero(b, "optim.adamw.m.w1"));
    CHECK_OK(mn_session_load(b, pinf), mn_session_error(b));
    CHECK_PARAMS(b, vi, ni);
    CHECK(mn_session_step_count(b) == 0);
    static const char *const states[] = {"optim.adamw.m.w1", "optim.adamw.v.w1", "optim.adamw.m.b1",
                                         "optim.adamw.v.b1", "optim.adamw.m.w2", "optim.adamw.v.w2",
                                         "optim.adamw.m.b2", "optim.adamw.v.b2"};
    for (size_t i = 0; i < MN_ARRAY_LEN(states); i++)
        CHECK_MSG(state_is_zero(b, states[i]), "state %s is not zero after loading an inference checkpoint", states[i]);
    /* and it now trains exactly like a fresh session from the same parameters */
    CHECK_OK(mn_session_load(c, pinf), mn_session_error(c));
    feed(c);
    CHECK_OK(mn_session_step(b), mn_session_error(b));
    CHECK_OK(mn_session_step(c), mn_session_error(c));
    free(vb);
    vb = snapshot(b, &nb);
    CHECK_PARAMS(c, vb, nb);
    CHECK(mn_session_step_count(b) == 1 && mn_session_step_count(c) == 1);
    /* an SGD session loads it as well (no state to match) */
    CHECK_OK(mn_session_load(sgd, pinf), mn_session_error(sgd));
    CHECK_PARAMS(sgd, vi, ni);

out:
    free(bytes);
    free(va);
    free(vb);
    free(vi);
    mn_session_destroy(sx);
    mn_session_destroy(s16);
    mn_session_destroy(sgd);
    mn_session_destroy(c);
    mn_session_destroy(inf);
    mn_session_destroy(b);
    mn_session_destroy(a);
    mn_graph_destroy(gx);
    mn_graph_destroy(g16);
    mn_graph_destroy(g);
}

/* Names are checked when declared, so a checkpoint never fails on a name
 * after training (issue 7): a parameter may not be named like optimizer
 * state ("optim." is reserved), and every name the graph accepts - the
 * longest, multi-byte UTF-8, quotes, backslashes - goes through save and
 * load in every mode, optimizer state included (its names are longer than
 * the parameter's). */
static void test_reserved_names(void) {
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "create");
    if (!g) return;
    mn_tensor p;
    mn_init u = {MN_INIT_UNIFORM, -0.1f, 0.1f};
    CHECK(mn_graph_param(g, &p, "optim.temperature", 1, S(2), u) == MN_E_INVALID);
    CHECK_HAS(mn_graph_error(g), "optim.temperature");
    CHECK_HAS(mn_graph_error(g), "reserved");
    CHECK(mn_graph_param(g, &p, "optim.adamw.m.w1", 1, S(2), u) == MN_E_INVALID);
    CHECK(mn_graph_input(g, &p, "__metadata__", MN_F32, 1, S(2)) == MN_E_INVALID);
    mn_graph_destroy(g);

    char longest[MN_MAX_NAME + 1];
    memset(longest, 'n', MN_MAX_NAME);
    longest[MN_MAX_NAME] = 0;
    static const char odd[] = "temp\xC3\xA9rature \"q\" \\ \xE2\x88\x9E";
    for (int which = 0; which < 2; which++) {
        const char *name = which ? odd : longest;
        char pt[256], pi[256];
        tpath(pt, sizeof pt, which ? "odd_train.ckpt" : "long_train.ckpt");
        tpath(pi, sizeof pi, which ? "odd_inf.ckpt" : "long_inf.ckpt");
        g = mlp(8, name, true);
        if (!g) return;
        mn_session *tr = open_session(g, MN_MODE_TRAINING, MN_OPTIM_ADAM, 1);
        mn_session *tr2 = open_session(g, MN_MODE_TRAINING, MN_OPTIM_ADAM, 2);
        mn_session *inf = open_session(g, MN_MODE_INFERENCE, MN_OPTIM_ADAM, 3);
        mn_graph_destroy(g);
        if (tr && tr2 && inf) {
            float t[2] = {0}, want[2] = {0};
            char state[512];
            snprintf(state, sizeof state, "optim.adam.m.%s", name);
            feed(tr);
            CHECK_OK(mn_session_step(tr), mn_session_error(tr));
            CHECK_OK(mn_session_step(tr), mn_session_error(tr));
            CHECK(!state_is_zero(tr, state));
            CHECK_OK(mn_session_save(tr, pt), mn_session_error(tr));
            CHECK_OK(mn_session_save(inf, pi), mn_session_error(inf));
            CHECK_OK(mn_session_get_param(tr, name, want, 2), mn_session_error(tr));
            CHECK_OK(mn_session_load(inf, pt), mn_session_error(inf));
            CHECK_OK(mn_session_get_param(inf, name, t, 2), mn_session_error(inf));
            CHECK(memcmp(t, want, sizeof t) == 0);
            CHECK_OK(mn_session_load(tr2, pt), mn_session_error(tr2));
            CHECK(mn_session_step_count(tr2) == 2);
            CHECK(!state_is_zero(tr2, state));
            CHECK_OK(mn_session_load(tr, pi), mn_session_error(tr));
            CHECK(mn_session_step_count(tr) == 0);
            CHECK(state_is_zero(tr, state));
        }
        mn_session_destroy(inf);
        mn_session_destroy(tr2);
        mn_session_destroy(tr);
    }
}

/* A model whose checkpoints could not be written - the header over the
 * safetensors limit - is refused at creation, and so is metadata that would
 * push it over (the limit lowered for the test); the bound is never below a
 * real header. */
static void test_header_limit(void) {
    mn_graph *g = mlp(8, NULL, true);
    if (!g) return;
    mn_session_options o = mn_session_default_options();
    o.mode = MN_MODE_TRAINING;
    mn_session *s = NULL;
    CHECK_OK(mn_session_create(&s, g, &o), mn_session_error(s));
    uint64_t bound = s ? session_header_bound(s) : 0;
    char p[256];
    tpath(p, sizeof p, "bound.ckpt");
    if (s) {
        CHECK_OK(mn_session_save(s, p), mn_session_error(s));
        size_t len = 0;
        unsigned char *buf = file_read(p, &len);
        uint64_t hlen = 0;
        for (int i = 7; buf && len >= 8 && i >= 0; i--) hlen = (hlen << 8) | buf[i];
        CHECK_MSG(buf && hlen > 0 && hlen <= bound, "header %llu bytes, bound %llu", (unsigned long long)hlen,
                  (unsigned long long)bound);
        /* tight: a few bytes per tensor (12: 4 parameters, 8 Adam slots) */
        CHECK_MSG(bound < hlen + 512 + 12 * 24, "bound %llu for a %llu-byte header", (unsigned long long)bound,
                  (unsigned long long)hlen);
        free(buf);
    }
    mn_session_destroy(s);
    session_internal_options io = {.header_limit = bound - 1};
    s = NULL;
    CHECK(session_create_ex(&s, g, &o, &io) == MN_E_INVALID);
    CHECK_HAS(mn_session_error(s), "safetensors header");
    mn_session_destroy(s);
    io.header_limit = bound + 100;
    s = NULL;
    CHECK_OK(session_create_ex(&s, g, &o, &io), mn_session_error(s));
    if (s) {
        CHECK_OK(mn_session_set_meta(s, "k", "0123456789"), mn_session_error(s));  /* 6 * 11 + 8 = 74 */
        CHECK_FAILS(s, mn_session_set_meta(s, "k2", "0123456789"), MN_E_INVALID, "header"); /* 74 + 80 > 100 */
        CHECK_OK(mn_session_set_meta(s, "k", "01234"), mn_session_error(s)); /* replacing frees room */
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

/* Checkpoints written directly with the safetensors writer, to reach the
 * loader's checks that a session's own saves never trigger. */
typedef struct craft {
    bool state;        /* write optimizer state (AdamW m and v) */
    bool drop_v;       /* ...but leave out the v tensors */
    const char *step;  /* meganeura.step, or NULL for none */
    bool w1_f16;       /* write w1 as F16 */
} craft;

static mn_status write_craft(const char *path, const craft *c) {
    static const char *const names[] = {"w1", "b1", "w2", "b2"};
    static const int64_t shapes[4][2] = {{3, 8}, {8, 0}, {8, 2}, {2, 0}};
    static const int ranks[4] = {2, 1, 2, 1};
    static float vals[24], half[12];
    char sn[12][40];
    st_entry e[12];
    int n = 0;
    for (int i = 0; i < 24; i++) vals[i] = 0.5f;
    for (int i = 0; i < 4; i++) {
        uint64_t cnt = (uint64_t)(shapes[i][0] * (ranks[i] == 2 ? shapes[i][1] : 1));
        bool f16 = i == 0 && c->w1_f16;
        e[n++] = (st_entry){names[i], f16 ? "F16" : "F32", ranks[i], shapes[i], f16 ? (const void *)half : vals,
                            cnt * (f16 ? 2 : 4)};
        for (int k = 0; c->state && k < (c->drop_v ? 1 : 2); k++) {
            snprintf(sn[n], sizeof sn[n], "optim.adamw.%s.%s", k ? "v" : "m", names[i]);
            e[n] = (st_entry){sn[n], "F32", ranks[i], shapes[i], vals, cnt * 4};
            n++;
        }
    }
    const char *kv[4] = {"format", "pt", "meganeura.step", c->step};
    char err[256];
    return st_save_atomic(path, e, n, kv, c->step ? 2 : 1, err, sizeof err);
}

static void test_crafted_checkpoints(void) {
    char path[256];
    tpath(path, sizeof path, "crafted.ckpt");
    mn_graph *g = mlp(8, NULL, true);
    if (!g) return;
    mn_session *s = open_session(g, MN_MODE_TRAINING, MN_OPTIM_ADAMW, 1);
    mn_graph_destroy(g);
    if (!s) return;
    feed(s);
    CHECK_OK(mn_session_step(s), mn_session_error(s));
    size_t n0 = 0;
    float *v0 = snapshot(s, &n0);
    static const struct {
        craft c;
        mn_status want;
        const char *needle;
    } bad[] = {
        {{true, false, NULL, false}, MN_E_FORMAT, "meganeura.step"},
        {{true, false, "-3", false}, MN_E_FORMAT, "'-3'"},
        {{true, false, "12abc", false}, MN_E_FORMAT, "meganeura.step"},
        {{true, false, "99999999999999999999999", false}, MN_E_FORMAT, "meganeura.step"},
        {{true, true, "5", false}, MN_E_NOT_FOUND, "optim.adamw.v."},
        {{false, false, NULL, true}, MN_E_DTYPE, "F16"},
    };
    for (size_t i = 0; i < MN_ARRAY_LEN(bad); i++) {
        CHECK_OK(write_craft(path, &bad[i].c), "write_craft");
        mn_status st = mn_session_load(s, path);
        CHECK_MSG(st == bad[i].want, "crafted case %zu: %s, want %s (%s)", i, mn_status_str(st),
                  mn_status_str(bad[i].want), mn_session_error(s));
        CHECK_MSG(has(mn_session_error(s), bad[i].needle), "crafted case %zu: \"%s\" lacks \"%s\"", i,
                  mn_session_error(s), bad[i].needle);
        CHECK_PARAMS(s, v0, n0);
        CHECK(mn_session_step_count(s) == 1);
    }
    /* the good ones: with state and a step, and without either */
    craft full = {true, false, "7", false};
    CHECK_OK(write_craft(path, &full), "write_craft");
    CHECK_OK(mn_session_load(s, path), mn_session_error(s));
    CHECK(mn_session_step_count(s) == 7);
    float w1[24];
    CHECK_OK(mn_session_get_param(s, "w1", w1, 24), mn_session_error(s));
    CHECK(w1[0] == 0.5f && w1[23] == 0.5f);
    CHECK(!state_is_zero(s, "optim.adamw.v.b2"));
    craft plain = {false, false, NULL, false};
    CHECK_OK(write_craft(path, &plain), "write_craft");
    CHECK_OK(mn_session_load(s, path), mn_session_error(s));
    CHECK(mn_session_step_count(s) == 0);
    CHECK(state_is_zero(s, "optim.adamw.v.b2"));
    free(v0);
    mn_session_destroy(s);
}

/* Sources that are also outputs (an input echoed back, a parameter read out)
 * build, run, train and read back. */
static void test_source_outputs(void) {
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "create");
    if (!g) return;
    mn_tensor x, w, l;
    mn_init u = {MN_INIT_UNIFORM, -1, 1};
    CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 1, S(2)), mn_graph_error(g));
    CHECK_OK(mn_graph_output(g, x, NULL), mn_graph_error(g));
    mn_session *only = open_session(g, MN_MODE_INFERENCE, MN_OPTIM_ADAMW, 1); /* every node an output */
    if (only) {
        float in[2] = {1.5f, -2.0f}, out[2] = {0};
        CHECK_OK(mn_session_set_input(only, "x", in, sizeof in), mn_session_error(only));
        CHECK_OK(mn_session_run(only), mn_session_error(only));
        CHECK_OK(mn_session_output(only, "x", out, sizeof out), mn_session_error(only));
        CHECK(out[0] == 1.5f && out[1] == -2.0f);
        mn_session_destroy(only);
    }
    CHECK_OK(mn_graph_param(g, &w, "w", 1, S(2), u), mn_graph_error(g));
    CHECK_OK(mn_graph_output(g, w, NULL), mn_graph_error(g));
    CHECK_OK(mn_mse(g, &l, x, w), mn_graph_error(g));
    CHECK_OK(mn_graph_loss(g, l), mn_graph_error(g));
    CHECK_OK(mn_graph_output(g, l, "loss"), mn_graph_error(g));
    for (int mode = 0; mode < 2; mode++) {
        mn_session *s = open_session(g, mode ? MN_MODE_TRAINING : MN_MODE_INFERENCE, MN_OPTIM_SGD, 1);
        if (!s) continue;
        float in[2] = {1, 2}, wv[2], pv[2], lv = 0;
        CHECK_OK(mn_session_set_input(s, "x", in, sizeof in), mn_session_error(s));
        CHECK_OK(mode ? mn_session_step(s) : mn_session_run(s), mn_session_error(s));
        CHECK_OK(mn_session_output(s, "w", wv, sizeof wv), mn_session_error(s));
        CHECK_OK(mn_session_get_param(s, "w", pv, 2), mn_session_error(s));
        CHECK(memcmp(wv, pv, sizeof wv) == 0);
        CHECK_OK(mn_session_output(s, "loss", &lv, sizeof lv), mn_session_error(s));
        CHECK(isfinite(lv));
        mn_session_destroy(s);
    }
    mn_graph_destroy(g);
}

/* A save that fails half-way (the file size limit) leaves the old checkpoint
 * byte-identical and no temporary file behind. */
static void test_failed_save(void) {
    char dir[128], path[256];
    snprintf(dir, sizeof dir, "%s/fsize", g_dir);
    CHECK(mkdir(dir, 0700) == 0);
    snprintf(path, sizeof path, "%s/model.ckpt", dir);
    mn_graph *g = mlp(64, NULL, true);
    if (!g) return;
    mn_session *s = open_session(g, MN_MODE_TRAINING, MN_OPTIM_ADAM, 1);
    mn_graph_destroy(g);
    if (!s) return;
    feed(s);
    CHECK_OK(mn_session_step(s), mn_session_error(s));
    CHECK_OK(mn_session_save(s, path), mn_session_error(s));
    size_t len = 0, len2 = 0;
    unsigned char *old = file_read(path, &len);
    CHECK_MSG(old && len > 2048, "the checkpoint (%zu bytes) must exceed the 1 KiB limit", len);
    CHECK_OK(mn_session_step(s), mn_session_error(s)); /* new values to save */

    struct rlimit saved;
    CHECK(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    struct rlimit lim = saved;
    lim.rlim_cur = 1024;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    mn_status st = mn_session_save(s, path);
    CHECK(setrlimit(RLIMIT_FSIZE, &saved) == 0);
    signal(SIGXFSZ, prev);

    CHECK_MSG(st == MN_E_IO, "save over the size limit -> %s (%s)", mn_status_str(st), mn_session_error(s));
    CHECK_HAS(mn_session_error(s), path);
    unsigned char *now = file_read(path, &len2);
    CHECK(old && now && len2 == len && memcmp(old, now, len) == 0);
    CHECK_MSG(dir_entries(dir) == 1, "%d entries in %s (a temporary file left behind?)", dir_entries(dir), dir);
    /* the session is fine and the next save works */
    CHECK_OK(mn_session_save(s, path), mn_session_error(s));
    CHECK_OK(mn_checkpoint_meta(path, "meganeura.step", (char[8]){0}, 8, NULL, 0), "meta");
    free(now);
    free(old);
    mn_session_destroy(s);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/mn-session-errors-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_create_errors();
    test_graph_independent();
    test_io_errors();
    test_checkpoints();
    test_crafted_checkpoints();
    test_source_outputs();
    test_reserved_names();
    test_header_limit();
    test_failed_save();
    char sub[128];
    snprintf(sub, sizeof sub, "%s/fsize", g_dir);
    remove_dir(sub);
    remove_dir(g_dir);
    return th_finish("test_session_errors");
}
