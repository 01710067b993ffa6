/* bundle.c - inference bundles of sessions (docs/BUNDLE.md): writing one
 * from an inference session, creating a session from one.
 *
 * Sections (io/bundle.h is the container):
 *   info      "MNIN", u32 version (1), u32 count (<= 256), then per entry
 *             u16 key length (1..255), key, u32 value length (<= 64 KiB),
 *             value: meganeura.version, meganeura.backend, meganeura.device,
 *             meganeura.precision and the session's own metadata (mn_session_set_meta),
 *             UTF-8, keys without control characters, no key twice
 *   graph     the user's graph (graph/serial.h)
 *   weights   a safetensors file of every parameter (F32)
 *   kernels   optional: "MNKS", u32 version (1), u16 length + the compiler
 *             identity, u32 vendor, device, driver and API version of the
 *             exporting device, u16 length + its name, u32 count
 *             (<= 65536), then per kernel, keys strictly increasing: key[32]
 *             (SHA-256 of compiler identity and GLSL, as the on-disk SPIR-V
 *             cache), u32 GLSL bytes (1..16 MiB), u32 SPIR-V words
 *             (5..2^24), the GLSL, zeros to a multiple of 4, the words
 *   pipeline  optional: the exporting device's VkPipelineCache data as the
 *             driver wrote it (its own header first; <= 64 MiB)
 * Every section is checked before the session is made: a bundle that fails
 * any check makes no session and changes nothing.
 *
 * Does not: generate or compile kernels (the backend does; vk_bundle.c is
 * its side), parse safetensors (io/safetensors.c).
 */
#include "core/wire.h"
#include "graph/serial.h"
#include "io/bundle.h"
#include "io/safetensors.h"
#include "io/text.h"
#include "session/bundle.h"
#include "session/session.h"

#define INFO_MAGIC "MNIN"
#define INFO_VERSION 1u
#define INFO_MAX 256
#define INFO_MAX_VALUE (64u << 10)
#define KS_MAGIC "MNKS"
#define KS_VERSION 1u
#define KS_MAX 65536
#define KS_MAX_SRC (16u << 20)
#define KS_MAX_WORDS (1u << 24)
#define KS_MAX_ID 1023
#define PIPELINE_MAX ((uint64_t)64 << 20)
#define INFO_LIMIT ((uint64_t)32 << 20)
#define KERNELS_LIMIT ((uint64_t)1 << 32)

static const char *const KNOWN[] = {"info", "graph", "weights", "kernels", "pipeline"};

/* ---- info ----------------------------------------------------------------- */

typedef struct info {
    char **kv; /* 2 * n strings */
    int n;
} info;

static void info_free(info *in) {
    for (int i = 0; i < 2 * in->n; i++) free(in->kv[i]);
    free(in->kv);
    memset(in, 0, sizeof *in);
}

static void info_encode(mn_wbuf *w, const char *const *kv, int n) {
    wb_put(w, INFO_MAGIC, 4);
    wb_u32(w, INFO_VERSION);
    wb_u32(w, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        const size_t kl = strlen(kv[2 * i]), vl = strlen(kv[2 * i + 1]);
        wb_u16(w, (uint16_t)kl);
        wb_put(w, kv[2 * i], kl);
        wb_u32(w, (uint32_t)vl);
        wb_put(w, kv[2 * i + 1], vl);
    }
}

static mn_status info_decode(info *out, const uint8_t *p, size_t n, char *err, size_t cap) {
    memset(out, 0, sizeof *out);
    mn_rbuf r = rb_of(p, n);
    const uint8_t *magic = rb_take(&r, 4);
    const uint32_t version = rb_u32(&r), count = rb_u32(&r);
    if (r.bad || memcmp(magic, INFO_MAGIC, 4) != 0) return mn_fmt(err, cap, "info section: no \"MNIN\" header"), MN_E_FORMAT;
    if (version != INFO_VERSION)
        return mn_fmt(err, cap, "info section: version %u (this library reads %u)", version, INFO_VERSION), MN_E_FORMAT;
    if (count > INFO_MAX || count > rb_left(&r) / 6)
        return mn_fmt(err, cap, "info section: %u entries (at most %d)", count, INFO_MAX), MN_E_FORMAT;
    out->kv = calloc(2 * (size_t)count + 1, sizeof *out->kv);
    if (!out->kv) return mn_fmt(err, cap, "info section: out of memory"), MN_E_NOMEM;
    mn_status st = MN_OK;
    for (uint32_t i = 0; i < count && !st; i++) {
        const size_t kl = rb_u16(&r);
        const uint8_t *k = rb_take(&r, kl);
        const size_t vl = rb_u32(&r);
        const uint8_t *v = vl <= INFO_MAX_VALUE ? rb_take(&r, vl) : NULL;
        if (r.bad || !v || kl < 1 || kl > MN_MAX_NAME) {
            st = MN_E_FORMAT;
            mn_fmt(err, cap, "info section: entry %u is cut short or has a key of %zu bytes / a value of %zu", i, kl, vl);
            break;
        }
        bool ok = io_utf8_valid((const char *)k, kl) && io_utf8_valid((const char *)v, vl) && !memchr(v, 0, vl);
        for (size_t j = 0; ok && j < kl; j++) ok = k[j] >= 0x20 && k[j] != 0x7f;
        char *ks = malloc(kl + 1), *vs = malloc(vl + 1);
        out->kv[2 * i] = ks, out->kv[2 * i + 1] = vs;
        out->n = (int)i + 1;
        if (!ks || !vs) {
            st = MN_E_NOMEM;
            mn_fmt(err, cap, "info section: out of memory");
            break;
        }
        memcpy(ks, k, kl), ks[kl] = 0;
        memcpy(vs, v, vl), vs[vl] = 0;
        for (uint32_t j = 0; ok && j < i; j++) ok = strcmp(out->kv[2 * j], ks) != 0;
        if (!ok) {
            st = MN_E_FORMAT;
            char shown[IO_ESC_NAME];
            mn_fmt(err, cap, "info section: entry %u ('%s'): not UTF-8, a control character in the key, a NUL in the "
                   "value, or a key seen before", i, io_esc(shown, sizeof shown, ks));
        }
    }
    if (!st && rb_left(&r)) st = MN_E_FORMAT, mn_fmt(err, cap, "info section: %zu bytes after the last entry", rb_left(&r));
    if (st) info_free(out);
    return st;
}

/* ---- kernels -------------------------------------------------------------- */

static void kernels_encode(mn_wbuf *w, const kernel_set *ks) {
    wb_put(w, KS_MAGIC, 4);
    wb_u32(w, KS_VERSION);
    const size_t idl = strlen(ks->compiler_id), nl = strnlen(ks->device_name, sizeof ks->device_name);
    wb_u16(w, (uint16_t)idl);
    wb_put(w, ks->compiler_id, idl);
    wb_u32(w, ks->vendor_id);
    wb_u32(w, ks->device_id);
    wb_u32(w, ks->driver_version);
    wb_u32(w, ks->api_version);
    wb_u16(w, (uint16_t)nl);
    wb_put(w, ks->device_name, nl);
    wb_u32(w, (uint32_t)ks->n);
    for (int i = 0; i < ks->n; i++) {
        const kernel_entry *e = &ks->k[i];
        const size_t sl = strlen(e->src);
        wb_put(w, e->key, 32);
        wb_u32(w, (uint32_t)sl);
        wb_u32(w, (uint32_t)e->nwords);
        wb_put(w, e->src, sl);
        wb_put(w, NULL, (4 - sl % 4) % 4); /* the words start at a multiple of 4 from the GLSL */
        for (size_t k = 0; k < e->nwords; k++) wb_u32(w, e->words[k]);
    }
}

static mn_status ks_fail(char *err, size_t cap, const char *fmt, ...) MN_PRINTF(3, 4);
static mn_status ks_fail(char *err, size_t cap, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    mn_vfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mn_fmt(err, cap, "kernels section: %s", msg);
    return MN_E_FORMAT;
}

static mn_status kernels_decode(kernel_set *ks, const uint8_t *p, size_t n, char *err, size_t cap) {
    memset(ks, 0, sizeof *ks);
    mn_rbuf r = rb_of(p, n);
    const uint8_t *magic = rb_take(&r, 4);
    const uint32_t version = rb_u32(&r);
    if (r.bad || memcmp(magic, KS_MAGIC, 4) != 0) return ks_fail(err, cap, "no \"MNKS\" header");
    if (version != KS_VERSION) return ks_fail(err, cap, "version %u (this library reads %u)", version, KS_VERSION);
    const size_t idl = rb_u16(&r);
    const uint8_t *id = rb_take(&r, idl);
    ks->vendor_id = rb_u32(&r), ks->device_id = rb_u32(&r);
    ks->driver_version = rb_u32(&r), ks->api_version = rb_u32(&r);
    const size_t nl = rb_u16(&r);
    const uint8_t *name = rb_take(&r, nl);
    const uint32_t count = rb_u32(&r);
    if (r.bad) return ks_fail(err, cap, "cut short in its header");
    if (idl < 1 || idl > KS_MAX_ID || memchr(id, 0, idl) || !io_utf8_valid((const char *)id, idl))
        return ks_fail(err, cap, "the compiler identity is empty, longer than %d bytes or not UTF-8", KS_MAX_ID);
    if (nl >= sizeof ks->device_name || memchr(name, 0, nl) || !io_utf8_valid((const char *)name, nl))
        return ks_fail(err, cap, "the device name is longer than 255 bytes or not UTF-8");
    if (count > KS_MAX || count > rb_left(&r) / 60) return ks_fail(err, cap, "%u kernels (at most %d)", count, KS_MAX);
    memcpy(ks->device_name, name, nl);
    ks->compiler_id = malloc(idl + 1);
    ks->k = calloc((size_t)count + 1, sizeof *ks->k);
    mn_status st = MN_OK;
    if (!ks->compiler_id || !ks->k) st = MN_E_NOMEM, mn_fmt(err, cap, "kernels section: out of memory");
    else memcpy(ks->compiler_id, id, idl), ks->compiler_id[idl] = 0;
    for (uint32_t i = 0; i < count && !st; i++) {
        kernel_entry *e = &ks->k[i];
        const uint8_t *key = rb_take(&r, 32);
        const uint32_t sl = rb_u32(&r), nw = rb_u32(&r);
        if (r.bad) {
            st = ks_fail(err, cap, "cut short at kernel %u", i);
            break;
        }
        if (sl < 1 || sl > KS_MAX_SRC || nw < 5 || nw > KS_MAX_WORDS) {
            st = ks_fail(err, cap, "kernel %u: %u bytes of GLSL (1..%u) or %u SPIR-V words (5..%u)", i, sl, KS_MAX_SRC,
                         nw, KS_MAX_WORDS);
            break;
        }
        const uint8_t *src = rb_take(&r, sl), *pad = rb_take(&r, (4 - sl % 4) % 4);
        const uint8_t *words = r.bad || nw > rb_left(&r) / 4 ? (r.bad = true, NULL) : rb_take(&r, (size_t)nw * 4);
        if (r.bad) {
            st = ks_fail(err, cap, "cut short in kernel %u", i);
            break;
        }
        if (i && memcmp(key, ks->k[i - 1].key, 32) <= 0) {
            st = ks_fail(err, cap, "kernel %u: keys are not in increasing order (or one appears twice)", i);
            break;
        }
        if (memchr(src, 0, sl) || le32_get(words) != 0x07230203u || memcmp(pad, "\0\0\0", (4 - sl % 4) % 4) != 0) {
            st = ks_fail(err, cap, "kernel %u: a NUL in the GLSL, padding that is not 0, or no SPIR-V magic", i);
            break;
        }
        memcpy(e->key, key, 32);
        e->src = malloc((size_t)sl + 1);
        e->words = malloc((size_t)nw * 4);
        ks->n = (int)i + 1;
        if (!e->src || !e->words) {
            st = MN_E_NOMEM, mn_fmt(err, cap, "kernels section: out of memory");
            break;
        }
        memcpy(e->src, src, sl), e->src[sl] = 0;
        for (uint32_t k = 0; k < nw; k++) e->words[k] = le32_get(words + 4 * k);
        e->nwords = nw;
    }
    if (!st && rb_left(&r)) st = ks_fail(err, cap, "%zu bytes after the last kernel", rb_left(&r));
    if (st) kernel_set_free(ks);
    return st;
}

/* ---- export --------------------------------------------------------------- */

typedef struct weights_src {
    st_entry *e;
    int n;
    const char *path;
    const char *const *meta;
    int nmeta;
} weights_src;

static mn_status emit_weights(void *ctx, bundle_put put, void *sink, char *err, size_t cap) {
    const weights_src *w = ctx;
    return st_write(put, sink, w->path, w->e, w->n, w->meta, w->nmeta, err, cap);
}

static mn_status sfail(mn_session *s, mn_status st, const char *fmt, ...) MN_PRINTF(3, 4);
static mn_status sfail(mn_session *s, mn_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mn_vfmt(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return st;
}

mn_status mn_session_export_bundle(mn_session *s, const char *path) {
    if (!s) return MN_E_INVALID;
    if (s->dead || s->iopt.plan_only) return MN_E_STATE; /* a plan-only session holds no values */
    char shown[IO_ESC_PATH];
    if (!path || !*path) return sfail(s, MN_E_INVALID, "export_bundle: empty path");
    io_esc(shown, sizeof shown, path);
    if (s->opt.mode != MN_MODE_INFERENCE || !s->user)
        return sfail(s, MN_E_STATE, "export_bundle '%s': a bundle is written from an inference session (create one "
                     "from the same graph and mn_session_load the checkpoint)", shown);
    mn_wbuf gw = {0}, iw = {0}, kw = {0};
    kernel_set ks = {0};
    int np = 0;
    for (int32_t i = 0; i < s->nuser; i++) np += s->g->nodes[i].op == OP_PARAM;
    st_entry *e = calloc((size_t)np + 1, sizeof *e);
    float **bufs = calloc((size_t)np + 1, sizeof *bufs);
    const char **kv = NULL;
    char err[512] = "";
    mn_status st = e && bufs ? MN_OK : MN_E_NOMEM;
    /* the graph as the user built it */
    if (!st && (st = graph_serialize(s->user, &gw, err, sizeof err))) goto done;
    /* the parameters as they are now */
    for (int32_t i = 0, k = 0; !st && i < s->nuser; i++) {
        const node *n = &s->g->nodes[i];
        if (n->op != OP_PARAM) continue;
        const size_t cnt = (size_t)node_numel(n);
        if (!(bufs[k] = malloc(cnt * 4 + 1))) st = MN_E_NOMEM;
        else if ((st = session_read_f32(s, i, bufs[k], cnt))) {
            mn_fmt(err, sizeof err, "reading '%s': %s", n->name, s->err);
            goto done;
        }
        else e[k] = (st_entry){n->name, "F32", n->rank, n->shape, bufs[k], cnt * 4}, k++;
    }
    /* the backend's kernels and pipeline-cache data */
    if (!st && s->be->export_kernels && (st = s->be->export_kernels(s->bk, &ks, err, sizeof err))) goto done;
    /* nothing the reader would refuse: the session's metadata and kernels within the sections' limits */
    if (!st && 4 + s->nmeta > INFO_MAX) {
        mn_fmt(err, sizeof err, "%d metadata entries (a bundle holds at most %d)", s->nmeta, INFO_MAX - 4);
        st = MN_E_UNSUPPORTED;
    }
    for (int i = 0; !st && i < s->nmeta; i++)
        if (strlen(s->meta[2 * i]) > MN_MAX_NAME || strlen(s->meta[2 * i + 1]) > INFO_MAX_VALUE) {
            char k[IO_ESC_NAME];
            mn_fmt(err, sizeof err, "metadata '%s': a bundle holds keys of at most %d bytes and values of at most %u",
                   io_esc(k, sizeof k, s->meta[2 * i]), MN_MAX_NAME, INFO_MAX_VALUE);
            st = MN_E_UNSUPPORTED;
        }
    if (!st && ks.n > KS_MAX) st = MN_E_UNSUPPORTED, mn_fmt(err, sizeof err, "%d kernels (at most %d)", ks.n, KS_MAX);
    for (int i = 0; !st && i < ks.n; i++)
        if (strlen(ks.k[i].src) > KS_MAX_SRC || ks.k[i].nwords > KS_MAX_WORDS)
            st = MN_E_UNSUPPORTED, mn_fmt(err, sizeof err, "a kernel of %zu bytes of GLSL and %zu SPIR-V words (at "
                                          "most %u and %u)", strlen(ks.k[i].src), ks.k[i].nwords, KS_MAX_SRC,
                                          KS_MAX_WORDS);
    if (!st && ks.pipeline_bytes > PIPELINE_MAX) { /* optional: dropped rather than refused */
        free(ks.pipeline);
        ks.pipeline = NULL, ks.pipeline_bytes = 0;
    }
    if (!st) {
        const int nkv = 4 + s->nmeta;
        if (!(kv = malloc(2 * (size_t)nkv * sizeof *kv))) {
            st = MN_E_NOMEM;
        } else {
            kv[0] = "meganeura.version", kv[1] = MN_VERSION_STRING;
            kv[2] = "meganeura.backend", kv[3] = s->be->name;
            kv[4] = "meganeura.device", kv[5] = ks.compiler_id ? ks.device_name : "cpu";
            kv[6] = "meganeura.precision", kv[7] = mn_precision_name(s->opt.precision);
            for (int i = 0; i < 2 * s->nmeta; i++) kv[8 + i] = s->meta[i];
            info_encode(&iw, kv, nkv);
        }
        if (ks.n) kernels_encode(&kw, &ks);
        if (gw.oom || iw.oom || kw.oom) st = MN_E_NOMEM;
    }
    if (!st) {
        static const char *const wmeta[] = {"format", "pt", "meganeura.version", MN_VERSION_STRING};
        weights_src ws = {e, np, path, wmeta, 2};
        bundle_part parts[5];
        int n = 0;
        parts[n++] = (bundle_part){"info", iw.p, iw.n, NULL, NULL};
        parts[n++] = (bundle_part){"graph", gw.p, gw.n, NULL, NULL};
        parts[n++] = (bundle_part){"weights", NULL, 0, emit_weights, &ws};
        if (ks.n) parts[n++] = (bundle_part){"kernels", kw.p, kw.n, NULL, NULL};
        if (ks.n && ks.pipeline_bytes) parts[n++] = (bundle_part){"pipeline", ks.pipeline, ks.pipeline_bytes, NULL, NULL};
        st = bundle_write(path, parts, n, err, sizeof err);
    }
done:
    if (st == MN_E_NOMEM && !err[0]) mn_fmt(err, sizeof err, "out of memory");
    if (st) sfail(s, st, "export_bundle '%s': %s", shown, err);
    for (int i = 0; bufs && i < np; i++) free(bufs[i]);
    free(bufs);
    free(e);
    free(kv);
    wb_free(&gw);
    wb_free(&iw);
    wb_free(&kw);
    kernel_set_free(&ks);
    return st;
}

/* ---- reading -------------------------------------------------------------- */

/* What a bundle holds, every section checked (bundle_load). */
typedef struct bundle_contents {
    info info;
    mn_graph *g;
    uint8_t *wbuf; /* the weights section; wf points into it */
    size_t wlen;
    st_file wf;
    kernel_set ks;
} bundle_contents;

static void contents_free(bundle_contents *c) {
    info_free(&c->info);
    mn_graph_destroy(c->g);
    st_free(&c->wf);
    free(c->wbuf);
    kernel_set_free(&c->ks);
    memset(c, 0, sizeof *c);
}

/* Every parameter of g is in the weights, F32 and of its shape, before a
 * session allocates anything for them (a graph cannot claim more parameter
 * bytes than the file holds). mn_session_load's checks follow later. */
static mn_status weights_cover(const mn_graph *g, const st_file *wf, char *err, size_t cap) {
    char nm[IO_ESC_NAME], sa[96], sb[96];
    for (int32_t i = 0; i < g->n; i++) {
        const node *n = &g->nodes[i];
        if (n->op != OP_PARAM) continue;
        const st_tensor *t = st_find(wf, n->name);
        bool same = t && strcmp(t->dtype, "F32") == 0 && t->rank == n->rank;
        for (int d = 0; same && d < n->rank; d++) same = t->shape[d] == n->shape[d];
        if (!same) {
            if (t) shape_str(sb, sizeof sb, t->rank <= MN_MAX_RANK ? t->rank : MN_MAX_RANK, t->shape);
            mn_fmt(err, cap, "weights section: parameter '%s' %s is %s%s%s", io_esc(nm, sizeof nm, n->name),
                   shape_str(sa, sizeof sa, n->rank, n->shape), t ? t->dtype : "missing", t ? " " : "", t ? sb : "");
            return t ? MN_E_SHAPE : MN_E_NOT_FOUND;
        }
    }
    return MN_OK;
}

/* Reads and checks every section of an open bundle. */
static mn_status contents_read(bundle_contents *c, bundle_file *bf, bool want_kernels, char *err, size_t cap) {
    memset(c, 0, sizeof *c);
    char e[512];
    for (int i = 0; i < bf->n; i++) {
        bool known = false;
        for (size_t k = 0; k < MN_ARRAY_LEN(KNOWN); k++) known |= strcmp(bf->sec[i].tag, KNOWN[k]) == 0;
        if (!known) {
            mn_fmt(err, cap, "bundle '%s': unknown section '%s' (written by a newer meganeura?)", bf->shown,
                   bf->sec[i].tag);
            return MN_E_FORMAT;
        }
    }
    uint8_t *p = NULL;
    size_t n = 0;
    mn_status st = bundle_read(bf, "info", INFO_LIMIT, &p, &n, err, cap);
    if (!st && (st = info_decode(&c->info, p, n, e, sizeof e))) mn_fmt(err, cap, "bundle '%s': %s", bf->shown, e);
    free(p);
    if (!st && !(st = bundle_read(bf, "graph", UINT64_MAX, &p, &n, err, cap))) {
        if ((st = graph_deserialize(&c->g, p, n, e, sizeof e))) mn_fmt(err, cap, "bundle '%s': %s", bf->shown, e);
        free(p);
    }
    if (!st && !(st = bundle_read(bf, "weights", UINT64_MAX, &c->wbuf, &c->wlen, err, cap))) {
        if ((st = st_parse(&c->wf, c->wbuf, c->wlen, e, sizeof e)))
            mn_fmt(err, cap, "bundle '%s': weights section: %s", bf->shown, e);
        else if ((st = weights_cover(c->g, &c->wf, e, sizeof e)))
            mn_fmt(err, cap, "bundle '%s': %s", bf->shown, e);
    }
    /* the kernels only for a backend that compiles them (and the checks the
     * fuzzer wants: want_kernels) */
    if (!st && want_kernels && bundle_find(bf, "kernels") &&
        !(st = bundle_read(bf, "kernels", KERNELS_LIMIT, &p, &n, err, cap))) {
        if ((st = kernels_decode(&c->ks, p, n, e, sizeof e))) mn_fmt(err, cap, "bundle '%s': %s", bf->shown, e);
        free(p);
    }
    if (!st && want_kernels && bundle_find(bf, "pipeline")) {
        if (!bundle_find(bf, "kernels")) {
            mn_fmt(err, cap, "bundle '%s': a pipeline section without kernels", bf->shown);
            st = MN_E_FORMAT;
        } else if (!(st = bundle_read(bf, "pipeline", PIPELINE_MAX, &p, &n, err, cap))) {
            c->ks.pipeline = p, c->ks.pipeline_bytes = n;
        }
    }
    if (st) contents_free(c);
    return st;
}

/* A dead session holding msg (what mn_session_create gives on failure). */
static mn_status dead_session(mn_session **out, const mn_session_options *opt, mn_status st, const char *msg) {
    mn_session_options o = opt ? *opt : mn_session_default_options();
    session_create_ex(out, NULL, &o, NULL);
    if (*out) mn_fmt((*out)->err, sizeof (*out)->err, "%s", msg);
    return st;
}

static mn_status create_from_contents(mn_session **out, bundle_contents *c, const char *path,
                                       const mn_session_options *opt) {
    session_internal_options io = {0};
    io.kernels = c->ks.n ? &c->ks : NULL;
    mn_status st = session_create_ex(out, c->g, opt, &io);
    if (st) return st;
    mn_session *s = *out;
    if ((st = session_load_tensors(s, &c->wf, path))) {
        s->dead = true;
        return st;
    }
    /* the exporter's own metadata travels on (later checkpoints, bundles) */
    for (int i = 0; i < c->info.n; i++) {
        const char *k = c->info.kv[2 * i];
        if (strncmp(k, "meganeura.", 10) != 0 && (st = mn_session_set_meta(s, k, c->info.kv[2 * i + 1]))) {
            s->dead = true;
            return st;
        }
    }
    return MN_OK;
}

mn_status mn_session_create_from_bundle(mn_session **out, const char *path, const mn_session_options *opt) {
    if (!out) return MN_E_INVALID;
    *out = NULL;
    char err[512];
    if (!path || !opt) return dead_session(out, opt, MN_E_INVALID, "create_from_bundle: path and options must not be NULL");
    bundle_file bf;
    mn_status st = bundle_open(&bf, path, err, sizeof err);
    if (st) return dead_session(out, opt, st, err);
    bundle_contents c;
    st = contents_read(&c, &bf, opt->backend != MN_BACKEND_CPU, err, sizeof err);
    bundle_close(&bf);
    if (st) return dead_session(out, opt, st, err);
    st = create_from_contents(out, &c, path, opt);
    contents_free(&c);
    return st;
}

mn_status session_bundle_mem(mn_session **out, const uint8_t *buf, size_t len, const mn_session_options *opt,
                             uint64_t max_bytes, char *err, size_t cap) {
    if (out) *out = NULL;
    bundle_file bf;
    mn_status st = bundle_open_mem(&bf, buf, len, err, cap);
    if (st) return st;
    bundle_contents c;
    st = contents_read(&c, &bf, true, err, cap);
    bundle_close(&bf);
    if (st) return st;
    uint64_t total = 0; /* every tensor's bytes, a bound of what a session could hold */
    for (int32_t i = 0; i < c.g->n && total <= max_bytes; i++) total += (uint64_t)node_numel(&c.g->nodes[i]) * 4;
    if (out && opt && total <= max_bytes && (st = create_from_contents(out, &c, "(memory)", opt)) && *out)
        mn_fmt(err, cap, "%s", mn_session_error(*out));
    contents_free(&c);
    return st;
}

mn_status bundle_print_summary(const char *path, FILE *f, char *err, size_t cap) {
    bundle_file bf;
    mn_status st = bundle_open(&bf, path, err, cap);
    if (st) return st;
    bundle_contents c;
    st = contents_read(&c, &bf, true, err, cap);
    if (st) {
        bundle_close(&bf);
        return st;
    }
    fprintf(f, "inference bundle, format %u, %d sections:\n", BUNDLE_VERSION, bf.n);
    for (int i = 0; i < bf.n; i++)
        fprintf(f, "  %-8s %12llu bytes at %llu\n", bf.sec[i].tag, (unsigned long long)bf.sec[i].size,
                (unsigned long long)bf.sec[i].offset);
    bundle_close(&bf);
    for (int i = 0; i < c.info.n; i++) {
        fprintf(f, "  ");
        io_put_esc(f, c.info.kv[2 * i]);
        fprintf(f, " = ");
        io_put_esc(f, c.info.kv[2 * i + 1]);
        fprintf(f, "\n");
    }
    int64_t nparams = 0, nvalues = 0;
    char sb[96];
    fprintf(f, "  graph: %d nodes\n", (int)c.g->n);
    for (int32_t i = 0; i < c.g->n; i++) {
        const node *n = &c.g->nodes[i];
        if (n->op == OP_PARAM) nparams++, nvalues += node_numel(n);
        if (n->op != OP_INPUT && !(n->flags & NODE_F_OUTPUT)) continue;
        fprintf(f, "    %s ", n->op == OP_INPUT ? "input " : "output");
        io_put_esc(f, n->name);
        fprintf(f, " %s %s\n", mn_dtype_name(n->dtype), shape_str(sb, sizeof sb, n->rank, n->shape));
    }
    fprintf(f, "  weights: %lld parameters, %lld values\n", (long long)nparams, (long long)nvalues);
    if (c.ks.compiler_id) {
        fprintf(f, "  kernels: %d SPIR-V binaries for ", c.ks.n);
        io_put_esc(f, c.ks.device_name);
        fprintf(f, " (vendor 0x%x, device 0x%x); compiler ", c.ks.vendor_id, c.ks.device_id);
        io_put_esc(f, c.ks.compiler_id);
        fprintf(f, "\n");
    }
    if (c.ks.pipeline_bytes) fprintf(f, "  pipeline cache: %zu bytes\n", c.ks.pipeline_bytes);
    contents_free(&c);
    return MN_OK;
}

mn_status mn_session_kernel_stats(const mn_session *s, mn_kernel_stats *out) {
    if (!s || !out) return MN_E_INVALID;
    memset(out, 0, sizeof *out);
    if (s->dead) return MN_E_STATE;
    if (s->be->kernel_stats && s->bk) s->be->kernel_stats(s->bk, out);
    return MN_OK;
}
