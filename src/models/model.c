/* model.c - the mn_model handle shared by the ResNet, U-Net, action-expert
 * and Whisper builders, the builder helpers (parameters registered under
 * their checkpoint names, PyTorch's layers with PyTorch's default
 * initialisation) and loading: plain (mn_hf_load over the parameter list)
 * or with batch norms folded into convolutions.
 *
 * Does not: know any architecture.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model.h"

mn_model *model_new(model_kind k, const char *name, mn_graph *g) {
    mn_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->kind = k;
    m->name = name;
    m->g = g;
    return m;
}

void model_set_err(mn_model *m, const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    hf_str_free(&m->err);
    hf_str_add(&m->err, "%s", buf);
}

static const char *kind_name(model_kind k) {
    switch (k) {
    case MODEL_RESNET: return "a ResNet";
    case MODEL_UNET: return "a U-Net";
    case MODEL_VLA: return "an action expert";
    case MODEL_WHISPER: return "a Whisper model";
    }
    return "a model";
}

mn_status model_check(mn_model *m, model_kind k, const char *what) {
    if (!m) return MN_E_INVALID;
    if (m->dead) {
        if (!m->err.n) model_set_err(m, "%s: the model failed to build", what);
        return MN_E_STATE;
    }
    if (k && m->kind != k) {
        model_set_err(m, "%s: the model is %s, not %s", what, kind_name(m->kind), kind_name(k));
        return MN_E_STATE;
    }
    return MN_OK;
}

mn_status model_add_ignore(mn_model *m, const char *pattern) {
    if (m->nignore == (int)(sizeof m->ignore / sizeof m->ignore[0])) return MN_E_INVALID;
    if (!(m->ignore[m->nignore] = strdup(pattern))) return MN_E_NOMEM;
    m->nignore++;
    return MN_OK;
}

void model_name(mn_model *m, const char *name, mn_tensor t) {
    if (m->nnamed == (int)(sizeof m->named / sizeof m->named[0])) return;
    snprintf(m->named[m->nnamed].name, sizeof m->named[0].name, "%s", name);
    m->named[m->nnamed++].t = t;
}

mn_tensor mn_model_tensor(const mn_model *m, const char *name) {
    for (int i = 0; m && name && i < m->nnamed; i++)
        if (!strcmp(m->named[i].name, name)) return m->named[i].t;
    return MN_NONE;
}

mn_status model_list_add(mn_model *m, mn_hf_param **list, int *n, int *cap, const char *name, int rank,
                         const int64_t *shape, mn_tensor t) {
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 64;
        mn_hf_param *p = realloc(*list, (size_t)c * sizeof *p);
        if (!p) {
            model_set_err(m, "%s: out of memory", m->name);
            return MN_E_NOMEM;
        }
        *list = p;
        *cap = c;
    }
    char *nm = strdup(name);
    if (!nm) {
        model_set_err(m, "%s: out of memory", m->name);
        return MN_E_NOMEM;
    }
    mn_hf_param *p = &(*list)[(*n)++];
    memset(p, 0, sizeof *p);
    p->name = nm;
    p->rank = rank;
    for (int d = 0; d < rank; d++) p->shape[d] = shape[d];
    p->tensor = t;
    return MN_OK;
}

/* ---- the builder ------------------------------------------------------------- */

void mb_init(mb *b, mn_model *m, bool (*freeze)(const char *, void *), void *user) {
    memset(b, 0, sizeof *b);
    b->m = m;
    b->g = m->g;
    b->freeze = freeze;
    b->freeze_user = user;
    snprintf(b->where, sizeof b->where, "the inputs");
}

void mb_where(mb *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->where, sizeof b->where, fmt, ap);
    va_end(ap);
}

mn_status mb_ok(mb *b, mn_status st) {
    if (st && !b->m->err.n) model_set_err(b->m, "%s: building %s: %s", b->m->name, b->where, mn_graph_error(b->g));
    return st;
}

mn_status mb_param(mb *b, mn_tensor *out, const char *name, int rank, const int64_t *shape, mn_init init) {
    mn_model *m = b->m;
    MB_TRY(mb_ok(b, mn_graph_param(b->g, out, name, rank, shape, init)));
    if (b->freeze && b->freeze(name, b->freeze_user)) MB_TRY(mb_ok(b, mn_graph_param_freeze(b->g, *out, true)));
    return model_list_add(m, &m->params, &m->nparams, &m->capparams, name, rank, shape, *out);
}

mn_status mb_paramf(mb *b, mn_tensor *out, const char *prefix, const char *leaf, int rank, const int64_t *shape,
                    mn_init init) {
    char nm[256];
    if (snprintf(nm, sizeof nm, "%s%s%s", prefix, *prefix ? "." : "", leaf) >= (int)sizeof nm) {
        model_set_err(b->m, "%s: parameter name %s.%s is too long", b->m->name, prefix, leaf);
        return MN_E_INVALID;
    }
    return mb_param(b, out, nm, rank, shape, init);
}

mn_status mb_linear(mb *b, mn_tensor *out, mn_tensor x, const char *prefix, int64_t out_f, int64_t in_f, bool bias) {
    const float bound = 1.0f / sqrtf((float)in_f);
    const mn_init u = {MN_INIT_UNIFORM, -bound, bound};
    mn_tensor w, bb, y;
    MB_TRY(mb_paramf(b, &w, prefix, "weight", 2, MB_S(out_f, in_f), u));
    MB_TRY(mb_ok(b, mn_matmul_ex(b->g, &y, x, w, false, true)));
    if (bias) {
        MB_TRY(mb_paramf(b, &bb, prefix, "bias", 1, MB_S(out_f), u));
        MB_TRY(mb_ok(b, mn_add(b->g, &y, y, bb)));
    }
    *out = y;
    return MN_OK;
}

mn_status mb_conv2d(mb *b, mn_tensor *out, mn_tensor x, const char *prefix, int64_t in_c, int64_t out_c, int k,
                    int stride, int pad, bool bias) {
    const float bound = 1.0f / sqrtf((float)(in_c * k * k));
    const mn_init u = {MN_INIT_UNIFORM, -bound, bound};
    mn_tensor w, bb = MN_NONE;
    MB_TRY(mb_paramf(b, &w, prefix, "weight", 4, MB_S(out_c, in_c, k, k), u));
    if (bias) MB_TRY(mb_paramf(b, &bb, prefix, "bias", 1, MB_S(out_c), u));
    const mn_conv2d_params p = {{stride, stride}, {pad, pad}, {1, 1}, 1};
    return mb_ok(b, mn_conv2d(b->g, out, x, w, bb, &p));
}

mn_status mb_layer_norm(mb *b, mn_tensor *out, mn_tensor x, const char *prefix, int64_t d, float eps) {
    mn_tensor w, bb;
    MB_TRY(mb_paramf(b, &w, prefix, "weight", 1, MB_S(d), (mn_init){MN_INIT_CONSTANT, 1, 0}));
    MB_TRY(mb_paramf(b, &bb, prefix, "bias", 1, MB_S(d), (mn_init){MN_INIT_ZEROS, 0, 0}));
    return mb_ok(b, mn_layer_norm(b->g, out, x, w, bb, eps));
}

mn_status mb_group_norm(mb *b, mn_tensor *out, mn_tensor x, const char *prefix, int groups, int64_t c, float eps) {
    mn_tensor w, bb;
    MB_TRY(mb_paramf(b, &w, prefix, "weight", 1, MB_S(c), (mn_init){MN_INIT_CONSTANT, 1, 0}));
    MB_TRY(mb_paramf(b, &bb, prefix, "bias", 1, MB_S(c), (mn_init){MN_INIT_ZEROS, 0, 0}));
    return mb_ok(b, mn_group_norm(b->g, out, x, groups, w, bb, eps));
}

/* ---- the public handle ---------------------------------------------------------- */

void mn_model_destroy(mn_model *m) {
    if (!m) return;
    for (int i = 0; i < m->nparams; i++) free((char *)m->params[i].name);
    for (int i = 0; i < m->nsrc; i++) free((char *)m->src[i].name);
    for (int i = 0; i < m->nfolds; i++) free(m->folds[i].conv), free(m->folds[i].bn);
    for (int i = 0; i < m->nignore; i++) free(m->ignore[i]);
    free(m->params);
    free(m->src);
    free(m->folds);
    if (m->free_impl) m->free_impl(m->impl);
    hf_str_free(&m->err);
    free(m);
}

const char *mn_model_error(const mn_model *m) {
    if (!m) return "model: NULL handle";
    return m->err.p ? m->err.p : "";
}

int mn_model_param_count(const mn_model *m) { return m ? m->nparams : 0; }
const mn_hf_param *mn_model_params(const mn_model *m) { return m ? m->params : NULL; }

int64_t mn_model_numel(const mn_model *m) {
    int64_t total = 0;
    for (int i = 0; m && i < m->nparams; i++) {
        int64_t n = 1;
        for (int d = 0; d < m->params[i].rank; d++) n *= m->params[i].shape[d];
        total += n;
    }
    return total;
}

float *model_read(mn_model *m, mn_hf_checkpoint *c, const char *name, size_t count) {
    float *v = malloc((count ? count : 1) * sizeof *v);
    if (!v) {
        model_set_err(m, "%s: out of memory reading %s", m->name, name);
        return NULL;
    }
    if (mn_hf_checkpoint_read_f32(c, name, v, count)) {
        model_set_err(m, "%s", mn_hf_checkpoint_error(c));
        free(v);
        return NULL;
    }
    return v;
}

/* Folded batch norms: conv weight and the four batch-norm tensors of each
 * pair from the checkpoint, folded on the host (mn_fold_batch_norm, in
 * double), written as the graph's conv weight and bias. */
static mn_status load_folded(mn_model *m, mn_session *s, mn_hf_checkpoint *c) {
    mn_status st = MN_OK;
    for (int i = 0; i < m->nparams && !st; i++) { /* parameters that are not folded (fc) */
        bool folded = false;
        for (int f = 0; f < m->nfolds && !folded; f++)
            folded = m->params[i].tensor == m->folds[f].w || m->params[i].tensor == m->folds[f].b;
        if (folded) continue;
        size_t n = 1;
        for (int d = 0; d < m->params[i].rank; d++) n *= (size_t)m->params[i].shape[d];
        float *v = model_read(m, c, m->params[i].name, n);
        if (!v) return MN_E_FORMAT;
        if ((st = mn_session_set_param(s, m->params[i].name, v, n)))
            model_set_err(m, "%s_load: %s", m->name, mn_session_error(s));
        free(v);
    }
    for (int f = 0; f < m->nfolds && !st; f++) {
        const model_fold *fd = &m->folds[f];
        const size_t O = (size_t)fd->out_ch, K = (size_t)fd->per_ch;
        char nm[5][300];
        snprintf(nm[0], sizeof nm[0], "%s.weight", fd->conv);
        snprintf(nm[1], sizeof nm[1], "%s.weight", fd->bn);
        snprintf(nm[2], sizeof nm[2], "%s.bias", fd->bn);
        snprintf(nm[3], sizeof nm[3], "%s.running_mean", fd->bn);
        snprintf(nm[4], sizeof nm[4], "%s.running_var", fd->bn);
        float *w = model_read(m, c, nm[0], O * K), *v[4] = {NULL, NULL, NULL, NULL};
        bool good = w != NULL;
        for (int k = 0; k < 4 && good; k++) good = (v[k] = model_read(m, c, nm[k + 1], O)) != NULL;
        float *bias = good ? malloc(O * sizeof *bias) : NULL;
        if (good && !bias) model_set_err(m, "%s_load: out of memory", m->name);
        if (!good) st = MN_E_FORMAT;
        else if (!bias) st = MN_E_NOMEM;
        if (!st && mn_fold_batch_norm(w, bias, w, NULL, (int64_t)O, (int64_t)K, v[0], v[1], v[2], v[3], m->fold_eps)) {
            model_set_err(m, "%s_load: folding %s into %s: the statistics are not valid (a variance + eps <= 0?)",
                          m->name, fd->bn, fd->conv);
            st = MN_E_FORMAT;
        }
        char wn[300], bn[300];
        snprintf(wn, sizeof wn, "%s.weight", fd->conv);
        snprintf(bn, sizeof bn, "%s.bias", fd->conv);
        if (!st && ((st = mn_session_set_param(s, wn, w, O * K)) || (st = mn_session_set_param(s, bn, bias, O))))
            model_set_err(m, "%s_load: %s", m->name, mn_session_error(s));
        free(w);
        free(bias);
        for (int k = 0; k < 4; k++) free(v[k]);
    }
    return st;
}

mn_status mn_model_load(mn_model *m, mn_session *s, mn_hf_checkpoint *c, const mn_hf_load_options *o) {
    mn_status st = model_check(m, 0, "model_load");
    if (st) return st;
    if (!s || !c) {
        model_set_err(m, "%s_load: %s is NULL", m->name, s ? "checkpoint" : "session");
        return MN_E_INVALID;
    }
    mn_hf_load_options lo = o ? *o : (mn_hf_load_options){false, false, NULL, false};
    const char *ignore[72];
    int n = 0;
    for (int i = 0; i < m->nignore; i++) ignore[n++] = m->ignore[i];
    for (const char *const *p = o ? o->ignore : NULL; p && *p; p++) {
        if (n == 71) {
            model_set_err(m, "%s_load: more than 60 ignore entries", m->name);
            return MN_E_INVALID;
        }
        ignore[n++] = *p;
    }
    ignore[n] = NULL;
    lo.ignore = ignore;
    if (m->nfolds) { /* check the unfolded list against the file, then fold */
        if (lo.allow_missing) {
            model_set_err(m, "%s_load: a model with folded batch norms needs every tensor (allow_missing is not "
                             "supported)", m->name);
            return MN_E_INVALID;
        }
        lo.check_only = true;
        if ((st = mn_hf_load(NULL, c, m->src, m->nsrc, &lo))) {
            hf_str_free(&m->err);
            hf_str_add(&m->err, "%s", mn_hf_checkpoint_error(c));
            return st;
        }
        return load_folded(m, s, c);
    }
    if ((st = mn_hf_load(s, c, m->params, m->nparams, &lo))) {
        hf_str_free(&m->err);
        hf_str_add(&m->err, "%s", mn_hf_checkpoint_error(c));
    }
    return st;
}
