/* test_checkpoint.c - resuming from a checkpoint is exact.
 *
 * Training N steps, saving, loading into a fresh session and training M more
 * gives bit-identical parameters (and optimizer state) to N+M uninterrupted
 * steps, for SGD with momentum, Adam and AdamW with a warm-up cosine schedule,
 * on the CPU backend. Also: the saved file names every tensor clearly and
 * carries the step count, which comes back also for a model without
 * optimizer state (every parameter frozen; found by fuzz_graph).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define B 8
#define IN 6
#define HID 5
#define OUT 3

/* frozen: every parameter frozen (no optimizer state) */
static mn_graph *mlp_ex(bool frozen) {
    mn_graph *g;
    mn_tensor x, y, w1, b1, w2, b2, h, lg, loss;
    mn_init k = {MN_INIT_KAIMING_UNIFORM, 0, 0}, n = {MN_INIT_NORMAL, 0, 0.1f};
    mn_graph_create(&g);
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){B, IN});
    st = st ? st : mn_graph_input(g, &y, "y", MN_I32, 1, (int64_t[]){B});
    st = st ? st : mn_graph_param(g, &w1, "l1.weight", 2, (int64_t[]){IN, HID}, k);
    st = st ? st : mn_graph_param(g, &b1, "l1.bias", 1, (int64_t[]){HID}, n);
    st = st ? st : mn_graph_param(g, &w2, "l2.weight", 2, (int64_t[]){HID, OUT}, k);
    st = st ? st : mn_graph_param(g, &b2, "l2.bias", 1, (int64_t[]){OUT}, n);
    const mn_tensor ps[4] = {w1, b1, w2, b2};
    for (int i = 0; frozen && i < 4; i++) st = st ? st : mn_graph_param_freeze(g, ps[i], true);
    st = st ? st : mn_matmul(g, &h, x, w1);
    st = st ? st : mn_add(g, &h, h, b1);
    st = st ? st : mn_tanh(g, &h, h);
    st = st ? st : mn_matmul(g, &lg, h, w2);
    st = st ? st : mn_add(g, &lg, lg, b2);
    st = st ? st : mn_cross_entropy(g, &loss, lg, y);
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    return g;
}
static mn_graph *mlp(void) { return mlp_ex(false); }

static void batch(int step, float *x, int32_t *y) {
    unsigned s = (unsigned)step * 2654435761u + 1;
    for (int i = 0; i < B * IN; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 9) % 2000) / 1000.0f - 1.0f;
    }
    for (int i = 0; i < B; i++) y[i] = (int32_t)((unsigned)(i + step) % OUT);
}

static mn_session *session(const mn_graph *g, mn_optimizer o) {
    mn_session_options so = mn_session_default_options();
    so.mode = MN_MODE_TRAINING;
    so.optim = o;
    so.seed = 7;
    mn_session *s = NULL;
    CHECK_OK(mn_session_create(&s, g, &so), mn_session_error(s));
    return s;
}

static void train(mn_session *s, int from, int count) {
    float x[B * IN];
    int32_t y[B];
    for (int i = from; i < from + count; i++) {
        batch(i, x, y);
        CHECK_OK(mn_session_set_input(s, "x", x, sizeof x), mn_session_error(s));
        CHECK_OK(mn_session_set_input(s, "y", y, sizeof y), mn_session_error(s));
        CHECK_OK(mn_session_step(s), mn_session_error(s));
    }
}

static bool same_params(mn_session *a, mn_session *b) {
    static const char *names[] = {"l1.weight", "l1.bias", "l2.weight", "l2.bias"};
    for (int i = 0; i < 4; i++) {
        size_t n;
        mn_session_numel(a, names[i], &n);
        float *pa = malloc(n * 4), *pb = malloc(n * 4);
        mn_session_get_param(a, names[i], pa, n);
        mn_session_get_param(b, names[i], pb, n);
        bool same = memcmp(pa, pb, n * 4) == 0;
        free(pa);
        free(pb);
        if (!same) return false;
    }
    return true;
}

static void resume_case(const char *name, mn_optimizer o, const char *dir) {
    const int N = 7, M = 5;
    char path[512];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    mn_graph *g = mlp();
    mn_session *full = session(g, o), *first = session(g, o), *second = session(g, o);
    train(full, 0, N + M);
    train(first, 0, N);
    CHECK_OK(mn_session_save(first, path), mn_session_error(first));
    /* the fresh session starts from other values: perturb it to be sure */
    train(second, 100, 2);
    CHECK(!same_params(second, first));
    CHECK_OK(mn_session_load(second, path), mn_session_error(second));
    CHECK(mn_session_step_count(second) == N);
    CHECK(same_params(second, first));
    CHECK_NEAR(mn_session_lr(second), mn_session_lr(first), 0);
    train(second, N, M);
    CHECK_MSG(same_params(full, second), "%s: %d+%d resumed steps differ from %d uninterrupted", name, N, M, N + M);
    float lf, ls;
    mn_session_loss(full, &lf);
    mn_session_loss(second, &ls);
    CHECK(memcmp(&lf, &ls, 4) == 0);
    char meta[64];
    CHECK_OK(mn_checkpoint_meta(path, "meganeura.step", meta, sizeof meta, NULL, 0), "");
    CHECK(strcmp(meta, "7") == 0);
    printf("  %-10s %d + %d steps == %d steps, bit for bit\n", name, N, M, N + M);
    unlink(path);
    mn_session_destroy(full);
    mn_session_destroy(first);
    mn_session_destroy(second);
    mn_graph_destroy(g);
}

/* Every parameter frozen: no optimizer state, but the step count (and so
 * the schedule) still survives a save and load. */
static void frozen_case(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/frozen.safetensors", dir);
    mn_graph *g = mlp_ex(true);
    mn_optimizer o = mn_optimizer_default(MN_OPTIM_ADAMW);
    o.schedule = MN_LR_WARMUP_COSINE;
    o.warmup_steps = 2;
    o.total_steps = 10;
    mn_session *a = session(g, o), *b = session(g, o);
    train(a, 0, 4);
    CHECK_OK(mn_session_save(a, path), mn_session_error(a));
    CHECK_OK(mn_session_load(b, path), mn_session_error(b));
    CHECK_MSG(mn_session_step_count(b) == 4, "frozen model: step count %lld after load, 4 saved",
              (long long)mn_session_step_count(b));
    CHECK_NEAR(mn_session_lr(b), mn_session_lr(a), 0);
    unlink(path);
    mn_session_destroy(a);
    mn_session_destroy(b);
    mn_graph_destroy(g);
}

int main(void) {
    char dir[] = "/tmp/mn-ckpt-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    mn_optimizer o = mn_optimizer_default(MN_OPTIM_SGD);
    o.lr = 0.1f;
    o.momentum = 0.9f;
    o.nesterov = true;
    resume_case("sgd", o, dir);
    o = mn_optimizer_default(MN_OPTIM_ADAM);
    o.lr = 0.01f;
    resume_case("adam", o, dir);
    o = mn_optimizer_default(MN_OPTIM_ADAMW);
    o.lr = 0.02f;
    o.clip_norm = 0.5f;
    o.schedule = MN_LR_WARMUP_COSINE;
    o.warmup_steps = 3;
    o.total_steps = 12;
    o.min_lr = 0.001f;
    resume_case("adamw", o, dir);
    frozen_case(dir);
    rmdir(dir);
    return th_finish("test_checkpoint");
}
