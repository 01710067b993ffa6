/* hf_checkpoint.c - Hugging Face checkpoints: one model.safetensors or a
 * sharded folder (model.safetensors.index.json + shards), and loading them
 * into a session by parameter name.
 *
 * Does: open every shard's header (mn_safetensors_open: regular files,
 * bounded reads), check the index against the shards (every disagreement
 * listed), keep a name-sorted table of the tensors, and load parameters one
 * tensor at a time after checking the whole list (missing, unexpected,
 * mis-shaped, unsupported dtypes: one message naming all of them).
 *
 * Does not: memory-map files, load anything it was not asked for, or write
 * checkpoints.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "models/hf_checkpoint.h"
#include "models/hf_util.h"

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define INDEX_MAX_BYTES ((size_t)256 << 20)
/* Entries listed per kind in a message before "and N more". */
#define LIST_MAX 1000

typedef struct ck_entry {
    const char *name; /* owned by the shard's handle */
    int shard;
} ck_entry;

struct mn_hf_checkpoint {
    char *path;
    int nshards;
    mn_safetensors **shards;
    char **shard_paths;
    int n;
    ck_entry *e; /* sorted by name */
    hf_str err;
};

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const ck_entry *)a)->name, ((const ck_entry *)b)->name);
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static const ck_entry *lookup(const mn_hf_checkpoint *c, const char *name) {
    ck_entry key = {name, 0};
    return c->n ? bsearch(&key, c->e, (size_t)c->n, sizeof *c->e, cmp_entry) : NULL;
}

static void set_err(mn_hf_checkpoint *c, const char *fmt, ...) HF_PRINTF(2, 3);
static void set_err(mn_hf_checkpoint *c, const char *fmt, ...) {
    c->err.n = 0;
    c->err.oom = false;
    if (c->err.p) c->err.p[0] = 0;
    va_list ap;
    va_start(ap, fmt);
    char buf[2048];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    hf_str_add(&c->err, "%s", buf);
}

static char *join(const char *dir, const char *file) {
    size_t n = strlen(dir) + strlen(file) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, file);
    return p;
}

/* ---- the index ----------------------------------------------------------- */

static int cmp_pair(const void *a, const void *b) {
    return strcmp(*((char *const *)a), *((char *const *)b));
}

void hf_index_free(hf_index *x) {
    if (!x) return;
    for (int i = 0; i < x->n; i++) {
        free(x->names ? x->names[i] : NULL);
        free(x->files ? x->files[i] : NULL);
    }
    free(x->names);
    free(x->files);
    memset(x, 0, sizeof *x);
}

static bool plain_file_name(const char *f) {
    size_t n = strlen(f), suf = strlen(".safetensors");
    if (n <= suf || strcmp(f + n - suf, ".safetensors") != 0) return false;
    return !strchr(f, '/') && !strchr(f, '\\');
}

mn_status hf_index_parse(hf_index *out, const char *json, size_t len, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!out) return MN_E_INVALID;
    memset(out, 0, sizeof *out);
    if (!json && len) return MN_E_INVALID;
    if (json && hf_json_bad_string(json, len)) {
        hf_fmt(err, cap, "a string holds a control character or \\u0000");
        return MN_E_FORMAT;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json ? json : "", len, &end, false);
    if (!root) {
        hf_fmt(err, cap, "not valid JSON");
        return MN_E_FORMAT;
    }
    mn_status st = MN_E_FORMAT;
    char eb[160], fb[160];
    const char *dup = hf_json_duplicate_key(root);
    const cJSON *wm = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    int n = 0;
    if (dup) {
        hf_fmt(err, cap, "key '%s' occurs twice", mn_escape(eb, sizeof eb, dup));
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        hf_fmt(err, cap, "the top level must be an object, got %s", hf_json_kind(root));
        goto done;
    }
    if (!cJSON_IsObject(wm)) {
        hf_fmt(err, cap, "weight_map must be an object, got %s", hf_json_kind(wm));
        goto done;
    }
    for (const cJSON *v = wm->child; v; v = v->next) {
        if (++n > HF_INDEX_MAX_ENTRIES) {
            hf_fmt(err, cap, "weight_map lists more than %d tensors", HF_INDEX_MAX_ENTRIES);
            goto done;
        }
        if (!cJSON_IsString(v) || !v->valuestring) {
            hf_fmt(err, cap, "weight_map['%s'] must be a file name, got %s", mn_escape(eb, sizeof eb, v->string),
                   hf_json_kind(v));
            goto done;
        }
        if (!plain_file_name(v->valuestring)) {
            hf_fmt(err, cap, "weight_map['%s'] = '%s': a shard must be a plain file name ending in .safetensors",
                   mn_escape(eb, sizeof eb, v->string), mn_escape(fb, sizeof fb, v->valuestring));
            goto done;
        }
    }
    st = MN_E_NOMEM;
    out->names = calloc((size_t)n + 1, sizeof *out->names);
    out->files = calloc((size_t)n + 1, sizeof *out->files);
    char **pairs = calloc((size_t)n * 2 + 2, sizeof *pairs);
    if (!out->names || !out->files || !pairs) {
        free(pairs);
        hf_fmt(err, cap, "out of memory for %d index entries", n);
        goto done;
    }
    int k = 0;
    for (const cJSON *v = wm->child; v; v = v->next, k++) {
        pairs[2 * k] = v->string;
        pairs[2 * k + 1] = v->valuestring;
    }
    qsort(pairs, (size_t)n, 2 * sizeof *pairs, cmp_pair);
    for (k = 0; k < n; k++) {
        out->names[k] = strdup(pairs[2 * k]);
        out->files[k] = strdup(pairs[2 * k + 1]);
        out->n = k + 1;
        if (!out->names[k] || !out->files[k]) {
            free(pairs);
            hf_fmt(err, cap, "out of memory for %d index entries", n);
            goto done;
        }
    }
    free(pairs);
    st = MN_OK;
done:
    cJSON_Delete(root);
    if (st) hf_index_free(out);
    return st;
}

/* ---- opening --------------------------------------------------------------- */

void mn_hf_checkpoint_close(mn_hf_checkpoint *c) {
    if (!c) return;
    for (int i = 0; i < c->nshards; i++) {
        mn_safetensors_close(c->shards[i]);
        free(c->shard_paths[i]);
    }
    free(c->shards);
    free(c->shard_paths);
    free(c->e);
    free(c->path);
    hf_str_free(&c->err);
    free(c);
}

static mn_status add_shard(mn_hf_checkpoint *c, const char *path, char *err, size_t cap) {
    mn_safetensors **s = realloc(c->shards, (size_t)(c->nshards + 1) * sizeof *s);
    if (s) c->shards = s;
    char **p = realloc(c->shard_paths, (size_t)(c->nshards + 1) * sizeof *p);
    if (p) c->shard_paths = p;
    char *dup = strdup(path);
    if (!s || !p || !dup) {
        free(dup);
        hf_fmt(err, cap, "out of memory");
        return MN_E_NOMEM;
    }
    mn_status st = mn_safetensors_open(&c->shards[c->nshards], path, err, cap);
    if (st) {
        free(dup);
        return st;
    }
    c->shard_paths[c->nshards++] = dup;
    return MN_OK;
}

static mn_status open_single(mn_hf_checkpoint *c, const char *file, char *err, size_t cap) {
    mn_status st = add_shard(c, file, err, cap);
    if (st) return st;
    const int n = mn_safetensors_count(c->shards[0]);
    if (!(c->e = calloc((size_t)n + 1, sizeof *c->e))) {
        hf_fmt(err, cap, "out of memory");
        return MN_E_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        mn_safetensors_tensor t;
        mn_safetensors_tensor_at(c->shards[0], i, &t);
        c->e[i] = (ck_entry){t.name, 0};
    }
    c->n = n;
    qsort(c->e, (size_t)n, sizeof *c->e, cmp_entry);
    return MN_OK;
}

/* Index entry of name, or -1. */
static int index_find(const hf_index *x, const char *name) {
    int lo = 0, hi = x->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, r = strcmp(x->names[mid], name);
        if (r == 0) return mid;
        if (r < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

typedef struct listing {
    hf_str s;
    int count;
} listing;

static void list_item(listing *l, const char *fmt, ...) HF_PRINTF(2, 3);
static void list_item(listing *l, const char *fmt, ...) {
    if (l->count++ >= LIST_MAX) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    hf_str_add(&l->s, "%s%s", l->count > 1 ? "; " : "", buf);
}

static void list_close(listing *l) {
    if (l->count > LIST_MAX) hf_str_add(&l->s, "; and %d more", l->count - LIST_MAX);
}

static mn_status open_sharded(mn_hf_checkpoint *c, const char *dir, const char *index_path, char *err, size_t cap) {
    char *text = NULL, msg[1024], pb[200];
    size_t len;
    mn_status st = mn_read_file(&text, &len, index_path, INDEX_MAX_BYTES, err, cap);
    if (st) return st;
    hf_index x;
    st = hf_index_parse(&x, text, len, msg, sizeof msg);
    free(text);
    if (st) {
        hf_fmt(err, cap, "'%s': %s", mn_escape(pb, sizeof pb, index_path), msg);
        return st;
    }
    /* the shards, each once, opened in name order */
    int *shard_of = calloc((size_t)x.n + 1, sizeof *shard_of);
    const char **files = calloc((size_t)x.n + 1, sizeof *files);
    if (!shard_of || !files) {
        free(shard_of);
        free(files);
        hf_index_free(&x);
        hf_fmt(err, cap, "out of memory");
        return MN_E_NOMEM;
    }
    for (int i = 0; i < x.n; i++) files[i] = x.files[i];
    qsort(files, (size_t)x.n, sizeof *files, cmp_cstr);
    int nfiles = 0;
    for (int i = 0; i < x.n; i++)
        if (!nfiles || strcmp(files[nfiles - 1], files[i]) != 0) files[nfiles++] = files[i];
    for (int i = 0; i < nfiles && !st; i++) {
        char *p = join(dir, files[i]);
        if (!p) st = MN_E_NOMEM, hf_fmt(err, cap, "out of memory");
        else st = add_shard(c, p, err, cap);
        free(p);
    }
    for (int i = 0; i < x.n && !st; i++) {
        const char **f = bsearch(&x.files[i], files, (size_t)nfiles, sizeof *files, cmp_cstr);
        shard_of[i] = (int)(f - files);
    }
    free(files);
    /* index vs shards */
    listing l = {{0}, 0};
    for (int i = 0; i < x.n && !st; i++) {
        char nb[160], fb[160];
        if (mn_safetensors_find(c->shards[shard_of[i]], x.names[i], NULL) != MN_OK)
            list_item(&l, "the index puts '%s' in '%s', which does not hold it", mn_escape(nb, sizeof nb, x.names[i]),
                      mn_escape(fb, sizeof fb, x.files[i]));
    }
    for (int s = 0; s < c->nshards && !st; s++) {
        const int n = mn_safetensors_count(c->shards[s]);
        for (int i = 0; i < n; i++) {
            mn_safetensors_tensor t;
            mn_safetensors_tensor_at(c->shards[s], i, &t);
            const int k = index_find(&x, t.name);
            char nb[160], fb[160], gb[160];
            const char *base = strrchr(c->shard_paths[s], '/') + 1;
            if (k < 0)
                list_item(&l, "'%s' holds '%s', which the index does not list", mn_escape(fb, sizeof fb, base),
                          mn_escape(nb, sizeof nb, t.name));
            else if (shard_of[k] != s)
                list_item(&l, "'%s' holds '%s', which the index puts in '%s'", mn_escape(fb, sizeof fb, base),
                          mn_escape(nb, sizeof nb, t.name), mn_escape(gb, sizeof gb, x.files[k]));
        }
    }
    if (!st && l.count) {
        list_close(&l);
        hf_fmt(err, cap, "'%s' and its shards disagree (%d): %s", mn_escape(pb, sizeof pb, index_path), l.count,
               l.s.p ? l.s.p : "");
        st = MN_E_FORMAT;
    }
    hf_str_free(&l.s);
    if (!st) {
        if (!(c->e = calloc((size_t)x.n + 1, sizeof *c->e))) {
            hf_fmt(err, cap, "out of memory");
            st = MN_E_NOMEM;
        } else {
            for (int i = 0; i < x.n; i++) { /* names owned by the shard handles */
                mn_safetensors_tensor t;
                mn_safetensors_find(c->shards[shard_of[i]], x.names[i], &t);
                c->e[i] = (ck_entry){t.name, shard_of[i]};
            }
            c->n = x.n; /* x is sorted by name, so c->e is too */
        }
    }
    free(shard_of);
    hf_index_free(&x);
    return st;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

mn_status mn_hf_checkpoint_open(mn_hf_checkpoint **out, const char *path, char *err, size_t errcap) {
    if (err && errcap) err[0] = 0;
    if (!out || !path) {
        hf_fmt(err, errcap, "hf_checkpoint_open: %s is NULL", out ? "path" : "out");
        return MN_E_INVALID;
    }
    *out = NULL;
    mn_hf_checkpoint *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(path))) {
        free(c);
        hf_fmt(err, errcap, "out of memory");
        return MN_E_NOMEM;
    }
    char pb[200];
    struct stat sb;
    mn_status st;
    if (stat(path, &sb) != 0) {
        hf_fmt(err, errcap, "cannot read '%s': %s", mn_escape(pb, sizeof pb, path), strerror(errno));
        st = MN_E_IO;
    } else if (S_ISDIR(sb.st_mode)) {
        char *single = join(path, SINGLE_NAME), *index = join(path, INDEX_NAME);
        struct stat s1, s2;
        if (!single || !index) hf_fmt(err, errcap, "out of memory"), st = MN_E_NOMEM;
        else if (lstat(single, &s1) == 0) st = open_single(c, single, err, errcap);
        else if (lstat(index, &s2) == 0) st = open_sharded(c, path, index, err, errcap);
        else {
            hf_fmt(err, errcap, "'%s' holds neither " SINGLE_NAME " nor " INDEX_NAME, mn_escape(pb, sizeof pb, path));
            st = MN_E_NOT_FOUND;
        }
        free(single);
        free(index);
    } else if (ends_with(path, ".index.json")) {
        char *dir = strdup(path);
        if (!dir) hf_fmt(err, errcap, "out of memory"), st = MN_E_NOMEM;
        else {
            char *slash = strrchr(dir, '/');
            if (slash) *slash = 0;
            st = open_sharded(c, slash ? (dir[0] ? dir : "/") : ".", path, err, errcap);
        }
        free(dir);
    } else {
        st = open_single(c, path, err, errcap);
    }
    if (st) {
        mn_hf_checkpoint_close(c);
        return st;
    }
    *out = c;
    return MN_OK;
}

const char *mn_hf_checkpoint_error(const mn_hf_checkpoint *c) {
    if (!c) return "hf_checkpoint: NULL handle";
    return c->err.p ? c->err.p : "";
}

int mn_hf_checkpoint_count(const mn_hf_checkpoint *c) { return c ? c->n : 0; }

mn_status mn_hf_checkpoint_tensor_at(const mn_hf_checkpoint *c, int i, mn_safetensors_tensor *out) {
    if (!c || !out || i < 0 || i >= c->n) return MN_E_INVALID;
    return mn_safetensors_find(c->shards[c->e[i].shard], c->e[i].name, out);
}

mn_status mn_hf_checkpoint_find(const mn_hf_checkpoint *c, const char *name, mn_safetensors_tensor *out) {
    if (!c || !name) return MN_E_INVALID;
    const ck_entry *e = lookup(c, name);
    if (!e) return MN_E_NOT_FOUND;
    return mn_safetensors_find(c->shards[e->shard], name, out);
}

mn_status mn_hf_checkpoint_read_f32(mn_hf_checkpoint *c, const char *name, float *dst, size_t count) {
    if (!c) return MN_E_INVALID;
    const ck_entry *e = name ? lookup(c, name) : NULL;
    if (!e) {
        char nb[160], pb[200];
        set_err(c, "'%s': no tensor named '%s'", mn_escape(pb, sizeof pb, c->path), mn_escape(nb, sizeof nb, name));
        return MN_E_NOT_FOUND;
    }
    mn_safetensors *f = c->shards[e->shard];
    mn_status st = mn_safetensors_read_f32(f, name, dst, count);
    if (st) set_err(c, "%s", mn_safetensors_error(f));
    return st;
}

/* ---- loading into a session -------------------------------------------------- */

static bool ignored(const char *name, const char *const *ignore) {
    for (; ignore && *ignore; ignore++) {
        const char *p = *ignore;
        if (p[0] == '*' ? (strlen(name) >= strlen(p + 1) && strcmp(name + strlen(name) - strlen(p + 1), p + 1) == 0)
                        : strcmp(name, p) == 0)
            return true;
    }
    return false;
}

static void shape_text(char *buf, size_t cap, int rank, const int64_t *shape) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int d = 0; d < rank && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

static bool convertible(const char *dtype) {
    return !strcmp(dtype, "F32") || !strcmp(dtype, "BF16") || !strcmp(dtype, "F16") || !strcmp(dtype, "F64");
}

mn_status mn_hf_load(mn_session *s, mn_hf_checkpoint *c, const mn_hf_param *params, int n,
                     const mn_hf_load_options *o) {
    if (!c) return MN_E_INVALID;
    const mn_hf_load_options none = {false, false, NULL, false};
    if (!o) o = &none;
    if ((!s && !o->check_only) || (!params && n) || n < 0) {
        set_err(c, "hf_load: %s", !params && n ? "bad parameter list" : "session is NULL");
        return MN_E_INVALID;
    }
    listing missing = {{0}, 0}, unexpected = {{0}, 0}, shaped = {{0}, 0}, typed = {{0}, 0};
    const char **names = calloc((size_t)n + 1, sizeof *names);
    if (!names) {
        set_err(c, "hf_load: out of memory");
        return MN_E_NOMEM;
    }
    size_t biggest = 0;
    for (int i = 0; i < n; i++) {
        const mn_hf_param *p = &params[i];
        char nb[160], sa[128], sb[128];
        names[i] = p->name ? p->name : "";
        mn_safetensors_tensor t;
        if (!p->name || mn_hf_checkpoint_find(c, p->name, &t) != MN_OK) {
            if (!o->allow_missing) list_item(&missing, "'%s'", mn_escape(nb, sizeof nb, names[i]));
            continue;
        }
        bool same = t.rank == p->rank;
        size_t numel = 1;
        for (int d = 0; d < p->rank; d++) {
            same = same && t.shape[d] == p->shape[d];
            numel *= (size_t)p->shape[d];
        }
        if (numel > biggest) biggest = numel;
        if (!same) {
            shape_text(sa, sizeof sa, t.rank, t.shape);
            shape_text(sb, sizeof sb, p->rank, p->shape);
            list_item(&shaped, "'%s' is %s in the checkpoint, %s in the model", mn_escape(nb, sizeof nb, p->name), sa,
                      sb);
        } else if (!convertible(t.dtype)) {
            list_item(&typed, "'%s' is %s", mn_escape(nb, sizeof nb, p->name), t.dtype);
        }
    }
    qsort(names, (size_t)n, sizeof *names, cmp_cstr);
    for (int i = 0; i < c->n && !o->allow_unexpected; i++) {
        const char *nm = c->e[i].name;
        char nb[160];
        if (!bsearch(&nm, names, (size_t)n, sizeof *names, cmp_cstr) && !ignored(nm, o->ignore))
            list_item(&unexpected, "'%s'", mn_escape(nb, sizeof nb, nm));
    }
    free(names);
    mn_status st = MN_OK;
    if (missing.count || unexpected.count || shaped.count || typed.count) {
        char pb[200];
        hf_str m = {0};
        hf_str_add(&m, "'%s' does not fit the model.", mn_escape(pb, sizeof pb, c->path));
        listing *ls[] = {&missing, &unexpected, &shaped, &typed};
        const char *what[] = {"Missing", "Unexpected", "Another shape", "Dtype not convertible to f32"};
        for (int k = 0; k < 4; k++) {
            if (!ls[k]->count) continue;
            list_close(ls[k]);
            hf_str_add(&m, " %s (%d): %s.", what[k], ls[k]->count, ls[k]->s.p ? ls[k]->s.p : "");
        }
        hf_str_free(&c->err);
        c->err = m;
        st = shaped.count ? MN_E_SHAPE : typed.count ? MN_E_DTYPE : MN_E_NOT_FOUND;
    }
    hf_str_free(&missing.s);
    hf_str_free(&unexpected.s);
    hf_str_free(&shaped.s);
    hf_str_free(&typed.s);
    if (st || o->check_only) return st;

    /* every check passed: read and write one tensor at a time */
    float *buf = malloc((biggest ? biggest : 1) * sizeof *buf);
    if (!buf) {
        set_err(c, "hf_load: out of memory for %zu values", biggest);
        return MN_E_NOMEM;
    }
    for (int i = 0; i < n && !st; i++) {
        const mn_hf_param *p = &params[i];
        if (mn_hf_checkpoint_find(c, p->name, NULL) != MN_OK) continue; /* allowed missing */
        size_t numel = 1;
        for (int d = 0; d < p->rank; d++) numel *= (size_t)p->shape[d];
        if ((st = mn_hf_checkpoint_read_f32(c, p->name, buf, numel))) break;
        if ((st = mn_session_set_param(s, p->name, buf, numel))) set_err(c, "hf_load: %s", mn_session_error(s));
    }
    free(buf);
    return st;
}
