/* checkpoint.c - session checkpoints in safetensors.
 *
 * Saved: every parameter (its graph name), every optimizer state tensor
 * ("optim.<kind>.<slot>.<param>") of a training session, and metadata:
 * format, meganeura.version, meganeura.step, meganeura.optimizer,
 * meganeura.lr_schedule, meganeura.next_lr, with dynamic loss scaling
 * meganeura.loss_scale and meganeura.loss_scale_good (the finite steps since
 * the scale last changed), plus the user's keys. Not saved:
 * the state tensors of mn_graph_state (KV caches: scratch of a decode).
 * Loading validates the whole file against the session before changing
 * anything, so a failed load leaves the session as it was: names, dtypes and
 * shapes; the numeric metadata, strictly (meganeura.step: digits only, at
 * most MN_CHECKPOINT_MAX_STEP; meganeura.next_lr: a finite number >= 0); and
 * the values: a tensor holding NaN or infinity is refused, naming it and
 * counting them. Names and paths in messages are escaped (io/text.h).
 *
 * Does not: parse the format (io/safetensors.c does) or open files itself
 * (io/file.h: FIFOs, devices and links are refused there).
 */
#include <inttypes.h>

#include "io/file.h"
#include "io/safetensors.h"
#include "io/text.h"
#include "optim/optim.h"
#include "session/session.h"

/* Parameters, and the optimizer's state in training sessions; other state
 * tensors (mn_graph_state: KV caches) are scratch, never saved. */
static bool saved_node(const mn_session *s, const node *n) {
    return n->op == OP_PARAM ||
           (n->op == OP_STATE && (n->flags & NODE_F_OPTIM) && s->opt.mode == MN_MODE_TRAINING);
}

mn_status mn_session_save(mn_session *s, const char *path) {
    if (!s) return MN_E_INVALID;
    if (s->dead || s->iopt.plan_only) return MN_E_STATE;
    if (!path || !*path) {
        mn_fmt(s->err, sizeof s->err, "save: empty path");
        return MN_E_INVALID;
    }
    mn_graph *g = s->g;
    int n = 0;
    for (int32_t i = 0; i < g->n; i++) n += saved_node(s, &g->nodes[i]);
    st_entry *e = calloc((size_t)n + 1, sizeof *e);
    float **bufs = calloc((size_t)n + 1, sizeof *bufs);
    mn_status st = MN_OK;
    if (!e || !bufs) {
        st = MN_E_NOMEM;
        goto done;
    }
    int k = 0;
    for (int32_t i = 0; i < g->n; i++) {
        const node *nd = &g->nodes[i];
        if (!saved_node(s, nd)) continue;
        size_t cnt = (size_t)node_numel(nd);
        if (!(bufs[k] = malloc(cnt * 4 + 1))) {
            st = MN_E_NOMEM;
            goto done;
        }
        if ((st = session_read_f32(s, i, bufs[k], cnt))) goto done;
        e[k] = (st_entry){nd->name, "F32", nd->rank, nd->shape, bufs[k], cnt * 4};
        k++;
    }
    char step[32], lr[32], scale[32], good[32];
    snprintf(step, sizeof step, "%" PRId64, s->step);
    snprintf(lr, sizeof lr, "%.9g", (double)mn_session_lr(s));
    snprintf(scale, sizeof scale, "%.9g", (double)s->ls_scale);
    snprintf(good, sizeof good, "%" PRId64, s->ls_good);
    bool training = s->opt.mode == MN_MODE_TRAINING;
    const char *fixed[] = {
        "format", "pt",
        "meganeura.version", MN_VERSION_STRING,
        "meganeura.step", step,
        "meganeura.optimizer", training ? optim_kind_name(s->opt.optim.kind) : "none",
        "meganeura.lr_schedule", s->opt.optim.schedule == MN_LR_WARMUP_COSINE ? "warmup_cosine" : "constant",
        "meganeura.next_lr", lr,
        "meganeura.loss_scale", scale, /* the last two: only with loss scaling */
        "meganeura.loss_scale_good", good,
    };
    int nfixed = (int)MN_ARRAY_LEN(fixed) / 2 - (s->ls_input == MN_NONE ? 2 : 0), nmeta = nfixed + s->nmeta;
    const char **kv = malloc((size_t)nmeta * 2 * sizeof *kv);
    if (!kv) {
        st = MN_E_NOMEM;
        goto done;
    }
    memcpy(kv, fixed, (size_t)nfixed * 2 * sizeof *kv);
    for (int i = 0; i < 2 * s->nmeta; i++) kv[2 * nfixed + i] = s->meta[i];
    st = st_save_atomic(path, e, k, kv, nmeta, s->err, sizeof s->err);
    free(kv);
done:
    if (st == MN_E_NOMEM) {
        char shown[IO_ESC_PATH];
        mn_fmt(s->err, sizeof s->err, "save '%s': out of memory", io_esc(shown, sizeof shown, path));
    }
    for (int i = 0; bufs && i < n; i++) free(bufs[i]);
    free(bufs);
    free(e);
    return st;
}

static mn_status load_fail(mn_session *s, mn_status st, const char *path, const char *fmt, ...) MN_PRINTF(4, 5);
static mn_status load_fail(mn_session *s, mn_status st, const char *path, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    mn_vfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char shown[IO_ESC_PATH];
    mn_fmt(s->err, sizeof s->err, "load '%s': %s", io_esc(shown, sizeof shown, path), msg);
    return st;
}

static bool shape_eq(const st_tensor *t, const node *n) {
    if (t->rank != n->rank) return false;
    for (int i = 0; i < n->rank; i++)
        if (t->shape[i] != n->shape[i]) return false;
    return true;
}

mn_status mn_session_load(mn_session *s, const char *path) {
    if (!s) return MN_E_INVALID;
    if (s->dead || s->iopt.plan_only) return MN_E_STATE;
    if (!path) return load_fail(s, MN_E_INVALID, "(null)", "no path");
    st_file f;
    memset(&f, 0, sizeof f);
    mn_status st = st_load(&f, path, s->err, sizeof s->err);
    if (st) return st;
    st = session_load_tensors(s, &f, path);
    st_free(&f);
    return st;
}

mn_status session_load_tensors(mn_session *s, const struct st_file *fp, const char *path) {
    const st_file f = *fp; /* read only: the caller frees it */
    mn_status st = MN_OK;
    mn_graph *g = s->g;
    bool training = s->opt.mode == MN_MODE_TRAINING;
    char sa[IO_ESC_NAME > 96 ? IO_ESC_NAME : 96], sb[96];
    /* the file's tensor of each node, -1 if none (one hash lookup per file
     * tensor: loading stays linear in the number of tensors) */
    int *tensor_of = malloc((size_t)g->n * sizeof *tensor_of + 1);
    if (!tensor_of) return load_fail(s, MN_E_NOMEM, path, "out of memory");
    for (int32_t i = 0; i < g->n; i++) tensor_of[i] = -1;
    /* 1. every tensor in the file belongs to the session (optimizer state
     *    is skipped by inference sessions) */
    int nstate_file = 0;
    for (int i = 0; i < f.n; i++) {
        const st_tensor *t = &f.tensors[i];
        /* a name of this model decides by its node (a parameter may itself be
         * called "optim.something"); otherwise the prefix says optimizer state */
        int32_t id = graph_find(g, t->name);
        if (id != MN_NONE) tensor_of[id] = i;
        bool is_state = id != MN_NONE ? g->nodes[id].op == OP_STATE : strncmp(t->name, "optim.", 6) == 0;
        nstate_file += is_state;
        if (is_state && !training) continue;
        if (id == MN_NONE || !saved_node(s, &g->nodes[id])) {
            st = load_fail(s, MN_E_NOT_FOUND, path, "tensor '%s' is not a %s of this model%s", io_esc(sa, sizeof sa, t->name),
                           is_state ? "optimizer state tensor" : "parameter",
                           is_state ? " (saved with another optimizer?)" : "");
            goto done;
        }
    }
    /* 2. every parameter (and, if the file has any, every state tensor) is in
     *    the file with the right dtype and shape */
    bool with_state = training && nstate_file > 0;
    int nstate_model = 0;
    for (int32_t i = 0; i < g->n; i++) nstate_model += saved_node(s, &g->nodes[i]) && g->nodes[i].op == OP_STATE;
    for (int32_t i = 0; i < g->n; i++) {
        const node *n = &g->nodes[i];
        if (!saved_node(s, n) || (n->op == OP_STATE && !with_state)) continue;
        const st_tensor *t = tensor_of[i] >= 0 ? &f.tensors[tensor_of[i]] : NULL;
        if (!t) {
            st = load_fail(s, MN_E_NOT_FOUND, path, "%s '%s' is missing from the checkpoint",
                           n->op == OP_PARAM ? "parameter" : "optimizer state", io_esc(sa, sizeof sa, n->name));
            goto done;
        }
        if (strcmp(t->dtype, "F32") != 0) {
            st = load_fail(s, MN_E_DTYPE, path, "'%s' has dtype %s, expected F32", io_esc(sa, sizeof sa, n->name), t->dtype);
            goto done;
        }
        if (!shape_eq(t, n)) {
            char nm[IO_ESC_NAME];
            st = load_fail(s, MN_E_SHAPE, path, "'%s' has shape %s in the file, the model has %s",
                           io_esc(nm, sizeof nm, n->name), shape_str(sa, sizeof sa, t->rank, t->shape),
                           shape_str(sb, sizeof sb, n->rank, n->shape));
            goto done;
        }
    }
    /* 3. the numeric metadata, strictly; a step count is needed with state */
    uint64_t step = 0;
    const char *sv = st_meta(&f, "meganeura.step");
    if ((sv || with_state) && (!sv || !io_parse_uint(sv, MN_CHECKPOINT_MAX_STEP, &step))) {
        st = load_fail(s, MN_E_FORMAT, path,
                       "metadata meganeura.step is %s%s%s (need a step count: digits only, at most %" PRIu64 ")",
                       sv ? "'" : "missing", sv ? io_esc(sa, sizeof sa, sv) : "", sv ? "'" : "",
                       (uint64_t)MN_CHECKPOINT_MAX_STEP);
        goto done;
    }
    const char *lv = st_meta(&f, "meganeura.next_lr");
    double lr;
    if (lv && (!io_parse_real(lv, &lr) || lr < 0)) {
        st = load_fail(s, MN_E_FORMAT, path, "metadata meganeura.next_lr is '%s' (need a finite number >= 0)",
                       io_esc(sa, sizeof sa, lv));
        goto done;
    }
    /* the loss scale's state, in a session that scales (others ignore it) */
    const char *scv = st_meta(&f, "meganeura.loss_scale"), *gdv = st_meta(&f, "meganeura.loss_scale_good");
    double scale = s->ls_scale;
    uint64_t good = (uint64_t)s->ls_good;
    if (s->ls_input != MN_NONE && with_state && scv) {
        int e;
        if (!io_parse_real(scv, &scale) || scale < 1 || scale > 18446744073709551616.0 || frexp(scale, &e) != 0.5) {
            st = load_fail(s, MN_E_FORMAT, path, "metadata meganeura.loss_scale is '%s' (need a power of two in "
                           "[1, 2^64])", io_esc(sa, sizeof sa, scv));
            goto done;
        }
        good = 0;
        if (gdv && !io_parse_uint(gdv, MN_CHECKPOINT_MAX_STEP, &good)) {
            st = load_fail(s, MN_E_FORMAT, path, "metadata meganeura.loss_scale_good is '%s' (need a step count)",
                           io_esc(sa, sizeof sa, gdv));
            goto done;
        }
    }
    /* 4. no NaN or infinity in what will be loaded */
    for (int32_t i = 0; i < g->n; i++) {
        const node *n = &g->nodes[i];
        if (!saved_node(s, n) || (n->op == OP_STATE && !with_state)) continue;
        const st_tensor *t = st_find(&f, n->name);
        size_t cnt = (size_t)node_numel(n), nan = 0, inf = 0, first = 0;
        for (size_t k = 0; k < cnt; k++) {
            uint32_t u;
            memcpy(&u, f.data + t->begin + 4 * k, 4);
            if ((u & 0x7F800000u) != 0x7F800000u) continue;
            if (!nan && !inf) first = k;
            if (u & 0x007FFFFFu) nan++;
            else inf++;
        }
        if (nan || inf) {
            st = load_fail(s, MN_E_FORMAT, path,
                           "tensor '%s' holds %zu NaN and %zu infinite values of %zu (the first at element %zu): "
                           "the run that saved it diverged",
                           io_esc(sa, sizeof sa, n->name), nan, inf, cnt, first);
            goto done;
        }
    }
    /* 5. all checks passed: copy */
    for (int32_t i = 0; i < g->n; i++) {
        const node *n = &g->nodes[i];
        if (!saved_node(s, n)) continue;
        if (n->op == OP_STATE && !with_state) {
            size_t bytes = (size_t)node_numel(n) * (s->iopt.f64 ? 8 : 4);
            float *z = calloc(1, bytes + 1);
            if (!z) {
                st = load_fail(s, MN_E_NOMEM, path, "out of memory");
                goto done;
            }
            st = session_write_node(s, i, z, bytes);
            free(z);
            if (st) goto done;
            continue;
        }
        const st_tensor *t = &f.tensors[tensor_of[i]]; /* present: checked in 2. */
        size_t cnt = (size_t)node_numel(n);
        float *buf = malloc(cnt * 4 + 1);
        if (!buf) {
            st = load_fail(s, MN_E_NOMEM, path, "out of memory");
            goto done;
        }
        memcpy(buf, f.data + t->begin, cnt * 4); /* little-endian hosts only (checked at build) */
        st = session_write_f32(s, i, buf, cnt);
        free(buf);
        if (st) goto done;
    }
    /* the step count comes back with the optimizer state, or alone for a
     * model that has no optimizer state (every parameter frozen) */
    if (training) s->step = with_state || nstate_model == 0 ? (int64_t)step : 0;
    s->ls_scale = (float)scale;
    s->ls_good = (int64_t)good;
    s->have_loss = false;
done:
    free(tensor_of);
    return st;
}

mn_status mn_checkpoint_meta(const char *path, const char *key, char *dst, size_t cap, char *err,
                             size_t errcap) {
    char local[256];
    if (!err) err = local, errcap = sizeof local;
    if (!path || !key || !dst || !cap) {
        mn_fmt(err, errcap, "checkpoint_meta: NULL argument");
        return MN_E_INVALID;
    }
    st_file f;
    memset(&f, 0, sizeof f);
    mn_status st = st_load_header(&f, path, err, errcap); /* the tensor bytes are not needed */
    if (st) return st;
    char shown[IO_ESC_PATH], k[IO_ESC_NAME];
    const char *v = st_meta(&f, key);
    if (!v) {
        mn_fmt(err, errcap, "'%s': no metadata key '%s'", io_esc(shown, sizeof shown, path), io_esc(k, sizeof k, key));
        st = MN_E_NOT_FOUND;
    } else if (strlen(v) >= cap) {
        mn_fmt(err, errcap, "'%s': metadata '%s' longer than the buffer", io_esc(shown, sizeof shown, path),
               io_esc(k, sizeof k, key));
        st = MN_E_INVALID;
    } else {
        memcpy(dst, v, strlen(v) + 1);
    }
    st_free(&f);
    return st;
}

mn_status mn_checkpoint_check_path(const char *path, char *err, size_t errcap) {
    char local[256];
    if (!err) err = local, errcap = sizeof local;
    return io_probe_save_path(path, err, errcap);
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c assumes a little-endian host (safetensors is little-endian)"
#endif
