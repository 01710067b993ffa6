/* test_optim.c - optimizer updates, clipping, schedules, LR multipliers and
 * frozen parameters against a direct reimplementation in this file.
 *
 * Model: two parameters p [5] and q [3], loss = 0.5*sum((p - t)^2) +
 * 0.5*sum((q - u)^2), so the gradients are p - t and q - u. Each case runs a
 * few steps in a session and the same steps here in double, then compares.
 * Also: a loss that is a parameter (or a view of one) reports its value
 * before the step's update.
 */
#include <math.h>
#include <string.h>

#include "harness.h"

#define NP 5
#define NQ 3
#define STEPS 6

static const float T[NP] = {0.5f, -1.0f, 2.0f, 0.0f, 3.0f};
static const float U[NQ] = {-2.0f, 1.0f, 0.25f};
static const float P0[NP] = {1.0f, 2.0f, -1.0f, 0.5f, -3.0f};
static const float Q0[NQ] = {0.3f, -0.7f, 1.1f};

typedef struct ref {
    double p[NP + NQ], m[NP + NQ], v[NP + NQ];
} ref;

/* One step of the reference optimizer over all NP+NQ values. */
static void ref_step(ref *r, const mn_optimizer *o, int64_t t, double lr, const double *mult,
                     const bool *frozen) {
    double g[NP + NQ], sq = 0;
    for (int i = 0; i < NP + NQ; i++) {
        g[i] = r->p[i] - (i < NP ? T[i] : U[i - NP]);
        if (!frozen[i]) sq += g[i] * g[i];
    }
    double clip = 1.0;
    if (o->clip_norm > 0) {
        double c = o->clip_norm / (sqrt(sq) + 1e-6);
        clip = c < 1 ? c : 1;
    }
    for (int i = 0; i < NP + NQ; i++) {
        if (frozen[i]) continue;
        double gi = g[i] * clip, a = lr * mult[i];
        if (o->kind == MN_OPTIM_SGD) {
            gi += o->weight_decay * r->p[i];
            r->m[i] = o->momentum * r->m[i] + gi;
            double d = o->momentum > 0 ? (o->nesterov ? gi + o->momentum * r->m[i] : r->m[i]) : gi;
            r->p[i] -= a * d;
        } else {
            if (o->kind == MN_OPTIM_ADAM) gi += o->weight_decay * r->p[i];
            else r->p[i] *= 1 - a * o->weight_decay;
            r->m[i] = o->beta1 * r->m[i] + (1 - o->beta1) * gi;
            r->v[i] = o->beta2 * r->v[i] + (1 - o->beta2) * gi * gi;
            double mh = r->m[i] / (1 - pow(o->beta1, (double)(t + 1)));
            double vh = r->v[i] / (1 - pow(o->beta2, (double)(t + 1)));
            r->p[i] -= a * mh / (sqrt(vh) + o->eps);
        }
    }
}

static double ref_lr(const mn_optimizer *o, int64_t t) {
    if (o->schedule == MN_LR_CONSTANT) return o->lr;
    if (t < o->warmup_steps) return o->lr * (double)(t + 1) / (double)o->warmup_steps;
    double prog = (double)(t - o->warmup_steps) / (double)(o->total_steps - o->warmup_steps);
    if (prog > 1) prog = 1;
    return o->min_lr + (o->lr - o->min_lr) * 0.5 * (1 + cos(3.14159265358979323846 * prog));
}

static void run_case(const char *name, mn_optimizer o, float qmult, bool qfrozen) {
    mn_graph *g;
    mn_tensor p, q, t, u, dp, dq, sp, sq, lp, lq, loss;
    mn_init z = {MN_INIT_ZEROS, 0, 0};
    int64_t np = NP, nq = NQ;
    CHECK_OK(mn_graph_create(&g), "");
    mn_status st = mn_graph_param(g, &p, "p", 1, &np, z);
    st = st ? st : mn_graph_param(g, &q, "q", 1, &nq, z);
    st = st ? st : mn_graph_constant(g, &t, 1, &np, T);
    st = st ? st : mn_graph_constant(g, &u, 1, &nq, U);
    st = st ? st : mn_sub(g, &dp, p, t);
    st = st ? st : mn_sub(g, &dq, q, u);
    st = st ? st : mn_mul(g, &sp, dp, dp);
    st = st ? st : mn_mul(g, &sq, dq, dq);
    st = st ? st : mn_sum(g, &lp, sp, MN_ALL_AXES, false);
    st = st ? st : mn_sum(g, &lq, sq, MN_ALL_AXES, false);
    st = st ? st : mn_add(g, &loss, lp, lq);
    st = st ? st : mn_scale(g, &loss, loss, 0.5f);
    st = st ? st : mn_graph_loss(g, loss);
    st = st ? st : mn_graph_param_lr_mult(g, q, qmult);
    st = st ? st : mn_graph_param_freeze(g, q, qfrozen);
    CHECK_OK(st, mn_graph_error(g));

    mn_session_options so = mn_session_default_options();
    so.mode = MN_MODE_TRAINING;
    so.optim = o;
    mn_session *s = NULL;
    CHECK_OK(mn_session_create(&s, g, &so), mn_session_error(s));
    CHECK_OK(mn_session_set_param(s, "p", P0, NP), mn_session_error(s));
    CHECK_OK(mn_session_set_param(s, "q", Q0, NQ), mn_session_error(s));

    ref r;
    memset(&r, 0, sizeof r);
    double mult[NP + NQ];
    bool frozen[NP + NQ];
    for (int i = 0; i < NP + NQ; i++) {
        r.p[i] = i < NP ? P0[i] : Q0[i - NP];
        mult[i] = i < NP ? 1.0 : qmult;
        frozen[i] = i >= NP && qfrozen;
    }
    double worst = 0;
    for (int64_t k = 0; k < STEPS; k++) {
        double lr = ref_lr(&o, k);
        CHECK_NEAR(mn_session_lr(s), lr, 1e-6 * fabs(lr) + 1e-12);
        CHECK_OK(mn_session_step(s), mn_session_error(s));
        ref_step(&r, &o, k, lr, mult, frozen);
        float pv[NP], qv[NQ];
        CHECK_OK(mn_session_get_param(s, "p", pv, NP), mn_session_error(s));
        CHECK_OK(mn_session_get_param(s, "q", qv, NQ), mn_session_error(s));
        for (int i = 0; i < NP + NQ; i++) {
            double got = i < NP ? pv[i] : qv[i - NP], err = fabs(got - r.p[i]);
            if (err > worst) worst = err;
            CHECK_MSG(err <= 2e-5 * (1 + fabs(r.p[i])), "%s step %lld value %d: got %.8g, expected %.8g", name,
                      (long long)k, i, got, r.p[i]);
        }
    }
    CHECK(mn_session_step_count(s) == STEPS);
    if (qfrozen) { /* a frozen parameter keeps its value and has no optimizer state */
        float qv[NQ];
        mn_session_get_param(s, "q", qv, NQ);
        CHECK(memcmp(qv, Q0, sizeof qv) == 0);
        size_t cnt;
        CHECK(mn_session_numel(s, "optim.adamw.m.q", &cnt) == MN_E_NOT_FOUND);
    }
    printf("  %-34s max |diff| %.2e over %d steps\n", name, worst, STEPS);
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

/* The loss is the parameter itself (or a view of it): the loss a step
 * reports is the value before its update (found by fuzz_graph). */
static void loss_is_param(bool view) {
    mn_graph *g;
    mn_tensor p, l;
    mn_init c = {MN_INIT_CONSTANT, 3.0f, 0};
    mn_graph_create(&g);
    CHECK_OK(mn_graph_param(g, &p, "p", 1, (const int64_t[]){1}, c), mn_graph_error(g));
    l = p;
    if (view) CHECK_OK(mn_reshape(g, &l, p, 0, NULL), mn_graph_error(g));
    CHECK_OK(mn_graph_loss(g, l), mn_graph_error(g));
    mn_session_options so = mn_session_default_options();
    so.mode = MN_MODE_TRAINING;
    so.optim = mn_optimizer_default(MN_OPTIM_SGD);
    so.optim.lr = 0.5f;
    mn_session *s = NULL;
    CHECK_OK(mn_session_create(&s, g, &so), mn_session_error(s));
    float loss = 0, pv = 0;
    for (int k = 0; k < 2; k++) { /* d loss / d p = 1: p goes 3 -> 2.5 -> 2 */
        CHECK_OK(mn_session_step(s), mn_session_error(s));
        CHECK_OK(mn_session_loss(s, &loss), mn_session_error(s));
        CHECK_OK(mn_session_get_param(s, "p", &pv, 1), mn_session_error(s));
        CHECK_MSG(loss == 3.0f - 0.5f * (float)k && pv == 2.5f - 0.5f * (float)k,
                  "loss %s p: step %d reports loss %g (want %g), p is %g", view ? "= a view of" : "=", k,
                  (double)loss, 3.0 - 0.5 * k, (double)pv);
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

int main(void) {
    loss_is_param(false);
    loss_is_param(true);
    mn_optimizer o = mn_optimizer_default(MN_OPTIM_SGD);
    o.lr = 0.1f;
    run_case("sgd", o, 1, false);
    o.momentum = 0.9f;
    run_case("sgd momentum", o, 1, false);
    o.nesterov = true;
    o.weight_decay = 0.05f;
    run_case("sgd nesterov + weight decay", o, 1, false);

    o = mn_optimizer_default(MN_OPTIM_ADAM);
    o.lr = 0.05f;
    run_case("adam", o, 1, false);
    o.weight_decay = 0.1f;
    run_case("adam + L2 weight decay", o, 1, false);
    o = mn_optimizer_default(MN_OPTIM_ADAMW);
    o.lr = 0.05f;
    o.weight_decay = 0.1f;
    run_case("adamw (decoupled weight decay)", o, 1, false);
    run_case("adamw, q lr multiplier 0.25", o, 0.25f, false);
    run_case("adamw, q frozen", o, 1, true);
    o.clip_norm = 0.5f;
    run_case("adamw + global-norm clipping", o, 1, false);
    o = mn_optimizer_default(MN_OPTIM_SGD);
    o.lr = 0.2f;
    o.momentum = 0.5f;
    o.clip_norm = 1.0f;
    run_case("sgd + global-norm clipping", o, 1, false);
    o = mn_optimizer_default(MN_OPTIM_ADAMW);
    o.lr = 0.1f;
    o.schedule = MN_LR_WARMUP_COSINE;
    o.warmup_steps = 2;
    o.total_steps = 5; /* STEPS runs one past the end: min_lr afterwards */
    o.min_lr = 0.01f;
    run_case("adamw + warm-up cosine schedule", o, 1, false);
    return th_finish("test_optim");
}
