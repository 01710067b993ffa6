/* vk_codegen.c - the common part of code generation: define helpers, the
 * per-op generator table, buffer/offset conventions, source assembly. */
#include "backend/vulkan/vk_codegen.h"

typedef struct {
    const char *name, *text;
} vk_embedded;
extern const vk_embedded vk_embedded_templates[];

static const vk_gen_fn gen_table[OP_COUNT] = {
#define MN_OP(E, name, lo, hi, bwd, fl, wr, fu) [OP_##E] = vkgen_##name,
#include "graph/ops.def"
#undef MN_OP
};
_Static_assert(MN_ARRAY_LEN(gen_table) == OP_COUNT, "one Vulkan generator per op");

static void vk_vappend(vk_kernel *k, const char *fmt, va_list ap) {
    if (k->overflow) return;
    size_t room = sizeof k->defines - k->dlen;
    int r = vsnprintf(k->defines + k->dlen, room, fmt, ap);
    if (r < 0 || (size_t)r >= room) {
        k->overflow = true;
        k->defines[k->dlen] = 0;
        return;
    }
    k->dlen += (size_t)r;
}

static void vk_append(vk_kernel *k, const char *fmt, ...) MN_PRINTF(2, 3);
static void vk_append(vk_kernel *k, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vk_vappend(k, fmt, ap);
    va_end(ap);
}

void vk_def(vk_kernel *k, const char *name, const char *fmt, ...) {
    va_list ap;
    vk_append(k, "#define %s ", name);
    va_start(ap, fmt);
    vk_vappend(k, fmt, ap);
    va_end(ap);
    vk_append(k, "\n");
}

void vk_line(vk_kernel *k, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vk_vappend(k, fmt, ap);
    va_end(ap);
    vk_append(k, "\n");
}

void vk_launch_1d(vk_kernel *k, const vk_caps *caps, uint64_t n, uint32_t local) {
    uint64_t groups = (n + local - 1) / local;
    if (groups == 0) groups = 1;
    uint64_t gx = groups, gy = 1, maxx = caps->max_groups[0] ? caps->max_groups[0] : 65535;
    while (gx > maxx) {
        gy *= 2;
        gx = (groups + gy - 1) / gy;
    }
    k->local[0] = local, k->local[1] = 1, k->local[2] = 1;
    k->groups[0] = (uint32_t)gx, k->groups[1] = (uint32_t)gy, k->groups[2] = 1;
    vk_def_u(k, "NTHREADS", gx * gy * local);
}

void vk_def_u(vk_kernel *k, const char *name, uint64_t v) {
    vk_def(k, name, "%llu%s", (unsigned long long)v, vk_usfx(k));
}

void vk_def_i(vk_kernel *k, const char *name, int64_t v) {
    /* a negative value in parentheses: NAME is used inside expressions */
    vk_def(k, name, v < 0 ? "(%lld%s)" : "%lld%s", (long long)v, vk_isfx(k));
}

mn_status vk_index_width(vk_kernel *k, const mn_graph *g, int32_t id, const int32_t *opnd, int nopnd,
                         const vk_caps *caps, char *err, size_t cap) {
    const node *n = &g->nodes[id];
    int32_t big = -1;
    for (int j = 0; j < nopnd; j++)
        if (node_numel(&g->nodes[opnd[j]]) > vk_index_max(caps) &&
            (big < 0 || node_numel(&g->nodes[opnd[j]]) > node_numel(&g->nodes[big])))
            big = opnd[j];
    k->idx64 = false;
    if (big < 0) return MN_OK;
    const node *t = &g->nodes[big];
    char shape[96];
    shape_str(shape, sizeof shape, t->rank, t->shape);
    const char *what = big == id ? "its output" : t->name ? t->name : op_table[t->op].name;
    if (node_numel(t) > VK_INDEX64_MAX) {
        mn_fmt(err, cap, "vulkan codegen: %s (%%%d): %s (%%%d) %s has %lld elements, more than the %lld a kernel "
               "indexes", op_table[n->op].name, id, what, big, shape, (long long)node_numel(t),
               (long long)VK_INDEX64_MAX);
        return MN_E_UNSUPPORTED;
    }
    if (!caps->int64) {
        mn_fmt(err, cap, "vulkan codegen: %s (%%%d): %s (%%%d) %s has %lld elements, more than the %lld of "
               "32-bit indexing, and the device has no 64-bit integers in shaders (shaderInt64) for 64-bit "
               "indexing; a smaller tensor (split the batch) avoids it", op_table[n->op].name, id, what, big, shape,
               (long long)node_numel(t), (long long)vk_index_max(caps));
        return MN_E_UNSUPPORTED;
    }
    k->idx64 = true;
    vk_def(k, "MN_IDX64", "1");
    return MN_OK;
}

bool vk_input_written(const node *n, int i) {
    /* input 0 of an aliasing op is the node's own storage: written through
     * the output binding */
    if (i == 0 && op_has(n->op, OPF_ALIAS)) return false;
    return op_writes_input(n->op, i);
}

/* Operands larger than one binding (memplan_pages): <op>_PAGES and
 * <op>_SHIFT (log2 of the elements per page), MN_NONUNIFORM when the device
 * indexes descriptor arrays non-uniformly. Checks that the kernel's
 * descriptors (one per page) fit the device. Nothing when none is paged. */
/* Packed 16-bit operands (NODE_F_PACK16): <op>_P16 = 1 (bf16) or 2 (f16),
 * so that preamble.glsl declares the binding as words and X<i>(i) unpacks
 * (Y_P16: the cast's kernel writes words, cast16.glsl; Y_S16: a fused
 * kernel stores its 16-bit values, k->store16). Never paged: the
 * session packs only what fits one binding. */
static mn_status pack_defines(vk_kernel *k, const mn_graph *g, const int32_t *opnd, int nopnd, const memplan *mp,
                              char *err, size_t cap) {
    for (int j = 0; j < nopnd; j++) {
        const node *t = &g->nodes[opnd[j]];
        if (!(t->flags & NODE_F_PACK16)) continue;
        if ((t->dtype != MN_BF16 && t->dtype != MN_F16) || (mp && memplan_pages(mp, opnd[j]))) {
            mn_fmt(err, cap, "vulkan codegen: %s (%%%d): packed operand %%%d is not an unpaged f16/bf16 tensor",
                   op_table[g->nodes[opnd[0]].op].name, (int)opnd[0], (int)opnd[j]);
            return MN_E_UNSUPPORTED;
        }
        char nm[16];
        if (j == 0) snprintf(nm, sizeof nm, k->store16 ? "Y_S16" : "Y_P16");
        else snprintf(nm, sizeof nm, "X%d_P16", j - 1);
        vk_def(k, nm, "%d", t->dtype == MN_BF16 ? 1 : 2);
    }
    return MN_OK;
}

mn_status vk_paged_defines(vk_kernel *k, const mn_graph *g, const int32_t *opnd, int nopnd, const memplan *mp,
                           const vk_caps *caps, char *err, size_t cap) {
    const int32_t id = opnd[0];
    const node *n = &g->nodes[id];
    mn_status pst = pack_defines(k, g, opnd, nopnd, mp, err, cap);
    if (pst) return pst;
    if (!mp || !mp->chunk_bytes) return MN_OK;
    uint64_t total = 0, most = 0;
    int32_t big = -1;
    for (int j = 0; j < nopnd; j++) {
        int32_t t = opnd[j];
        uint64_t p = memplan_pages(mp, t);
        total += p ? p : 1;
        if (p > most) most = p, big = t;
    }
    if (big < 0) return MN_OK;
    const char *bname = g->nodes[big].name ? g->nodes[big].name : op_table[g->nodes[big].op].name;
    uint64_t chunk = mp->chunk_bytes, limit = caps->max_stage_buffers ? caps->max_stage_buffers : 32;
    if ((chunk & (chunk - 1)) != 0 || chunk < 8) {
        mn_fmt(err, cap, "vulkan codegen: %s (%%%d): '%s' (%%%d) spans %llu chunks of %llu bytes, not a power of two",
               op_table[n->op].name, id, bname, big, (unsigned long long)most, (unsigned long long)chunk);
        return MN_E_INVALID;
    }
    if (!caps->nonuniform && !caps->dynamic_index) {
        mn_fmt(err, cap, "vulkan codegen: %s (%%%d): '%s' (%%%d) spans %llu bindings of %llu bytes, and the device "
               "indexes no storage-buffer descriptor arrays (shaderStorageBufferArrayDynamicIndexing and "
               "shaderStorageBufferArrayNonUniformIndexing are both absent)",
               op_table[n->op].name, id, bname, big, (unsigned long long)most, (unsigned long long)chunk);
        return MN_E_UNSUPPORTED;
    }
    if (total > limit) {
        mn_fmt(err, cap, "vulkan codegen: %s (%%%d): its operands need %llu storage-buffer descriptors ('%s' (%%%d) "
               "alone spans %llu bindings of %llu bytes), more than the %llu the device allows one kernel; a larger "
               "MEGANEURA_VK_MAX_ALLOCATION (if it was lowered) or a smaller tensor avoids it",
               op_table[n->op].name, id, (unsigned long long)total, bname, big, (unsigned long long)most,
               (unsigned long long)chunk, (unsigned long long)limit);
        return MN_E_UNSUPPORTED;
    }
    int shift = 0;
    while (((uint64_t)4 << shift) < chunk) shift++; /* elements per page: chunk / 4 */
    for (int j = 0; j < nopnd; j++) {
        uint64_t p = memplan_pages(mp, opnd[j]);
        if (!p) continue;
        char op[16], nm[32];
        if (j == 0) snprintf(op, sizeof op, "Y");
        else snprintf(op, sizeof op, "X%d", j - 1);
        snprintf(nm, sizeof nm, "%s_PAGES", op);
        vk_def(k, nm, "%llu", (unsigned long long)p);
        snprintf(nm, sizeof nm, "%s_SHIFT", op);
        vk_def(k, nm, "%d", shift);
    }
    if (caps->nonuniform) vk_def(k, "MN_NONUNIFORM", "1");
    return MN_OK;
}

bool vk_gpu_tables(const vk_caps *caps) {
    const char *on = getenv("MEGANEURA_VK_GPU_TABLES");
    return !caps->cpu_device || (on && strcmp(on, "1") == 0);
}

bool vk_generic_on(void) {
    const char *off = getenv("MEGANEURA_VK_GENERIC");
    return !(off && strcmp(off, "0") == 0);
}

/* Drops the X<k>_N and NTHREADS defines of k (and Y_N, or makes it
 * pc.dim[0] when y_dim): a size-generic kernel reads no literal size. */
static bool strip_sizes(vk_kernel *k, bool y_dim) {
    char *out = malloc(k->dlen + 64);
    if (!out) return false;
    size_t at = 0;
    for (const char *l = k->defines; *l;) {
        const char *e = strchr(l, '\n');
        const size_t len = e ? (size_t)(e - l) + 1 : strlen(l);
        int xi;
        char c;
        if (!strncmp(l, "#define Y_N ", 12)) {
            if (y_dim) at += (size_t)sprintf(out + at, "#define Y_N pc.dim[0]\n");
        } else if (!strncmp(l, "#define NTHREADS ", 17) || (sscanf(l, "#define X%d_N%c", &xi, &c) == 2 && c == ' ')) {
        } else {
            memcpy(out + at, l, len);
            at += len;
        }
        l += len;
    }
    out[at] = 0;
    memcpy(k->defines, out, at + 1);
    k->dlen = at;
    free(out);
    k->generic = true;
    return true;
}

bool vk_hoist_sizes(vk_kernel *k) {
    if (!k->tmpl || k->generic || k->idx64 || k->overflow || strstr(k->defines, "_PAGES") || !vk_generic_on())
        return false;
    /* a generator that made its kernel size-generic (pc.dim set): the
     * element-count defines go (its template reads none) */
    if (k->ndims) return strip_sizes(k, false);
    if (strcmp(k->tmpl, "eltwise") != 0 && strcmp(k->tmpl, "ema_update") != 0) return false;
    /* every input at the output's index, and one literal element count */
    unsigned long long yn = 0;
    bool have_y = false;
    for (const char *l = k->defines; *l;) {
        const char *e = strchr(l, '\n');
        const size_t len = e ? (size_t)(e - l) : strlen(l);
        int ix;
        char want[48];
        if (sscanf(l, "#define IX%d(", &ix) == 1 &&
            ((size_t)snprintf(want, sizeof want, "#define IX%d(i) (i)", ix) != len || strncmp(l, want, len) != 0))
            return false;
        if (!strncmp(l, "#define Y_N ", 12)) {
            char *end;
            yn = strtoull(l + 12, &end, 10);
            if (end == l + 12 || *end != 'u' || end + 1 != l + len || yn > UINT32_MAX) return false;
            have_y = true;
        }
        l += len + (e != NULL);
    }
    if (!have_y || !strip_sizes(k, true)) return false;
    k->dims[0] = (uint32_t)yn;
    k->ndims = 1;
    return true;
}

void vk_kernel_clear(vk_kernel *k) {
    free(k->code);
    memset(k, 0, sizeof *k);
}

static mn_status codegen_node(vk_kernel *k, const mn_graph *g, int32_t id, const int32_t *given, int heads_in,
                              bool heads_out, int32_t saved, const memplan *mp, const vk_caps *caps, char *err,
                              size_t cap) {
    const node *n = &g->nodes[id];
    memset(k, 0, sizeof *k); /* k->code of an earlier kernel is its owner's to free (vk_kernel_clear) */
    k->heads_in = heads_in;
    k->heads_out = heads_out;
    /* 32-bit index arithmetic unless an operand has more than index_max
     * elements (the one check of that limit) */
    int32_t opnd[2 + NODE_MAX_IN] = {id};
    for (int i = 0; i < n->nin; i++) opnd[1 + i] = n->in[i];
    if (given)
        for (int i = 0; i <= n->nin; i++) opnd[i] = given[i];
    int nopnd = 1 + n->nin;
    if (saved != MN_NONE) {
        if (n->nin >= NODE_MAX_IN) {
            mn_fmt(err, cap, "vulkan codegen: %s (%%%d): no binding left for the saved %%%d", op_table[n->op].name,
                   id, (int)saved);
            return MN_E_UNSUPPORTED;
        }
        opnd[nopnd++] = saved;
        k->saved_in = 1 + n->nin;
    }
    mn_status st0 = op_has(n->op, OPF_SOURCE) || n->op == OP_RESHAPE
                        ? MN_OK /* nothing dispatched, nothing indexed */
                        : vk_index_width(k, g, id, opnd, nopnd, caps, err, cap);
    if (st0) return st0;
    k->local[0] = k->local[1] = k->local[2] = 1;
    k->groups[0] = k->groups[1] = k->groups[2] = 1;
    vk_def_u(k, "Y_N", (uint64_t)node_numel(n));
    for (int i = 0; i + 1 < nopnd; i++) {
        char nm[24];
        snprintf(nm, sizeof nm, "X%d_ACCESS", i);
        vk_def(k, nm, "%s", i >= n->nin || vk_input_written(n, i) ? "" : "readonly");
        snprintf(nm, sizeof nm, "X%d_N", i);
        vk_def_u(k, nm, (uint64_t)node_numel(&g->nodes[opnd[1 + i]]));
    }
    if ((n->flags & NODE_F_PACK16) && n->op != OP_CAST && n->op != OP_RESHAPE) { /* a view writes nothing */
        mn_fmt(err, cap, "vulkan codegen: %s (%%%d): only a cast writes a packed 16-bit tensor", op_table[n->op].name,
               id);
        return MN_E_UNSUPPORTED;
    }
    if ((st0 = vk_paged_defines(k, g, opnd, nopnd, mp, caps, err, cap))) return st0;
    mn_status st = gen_table[n->op](k, g, n, caps, err, cap);
    if (st) return st;
    if (k->saved_in && !k->saved_done) {
        mn_fmt(err, cap, "vulkan codegen: %s (%%%d): its kernel cannot write %s (%%%d) beside its output",
               op_table[n->op].name, id, op_table[g->nodes[saved].op].name, (int)saved);
        return MN_E_UNSUPPORTED;
    }
    if (k->overflow) {
        mn_fmt(err, cap, "vulkan codegen: %s (%%%d): specialisation text too long", op_table[n->op].name, id);
        return MN_E_UNSUPPORTED;
    }
    return MN_OK;
}

mn_status vk_codegen_node(vk_kernel *k, const mn_graph *g, int32_t id, const memplan *mp, const vk_caps *caps,
                          char *err, size_t cap) {
    return codegen_node(k, g, id, NULL, 0, false, MN_NONE, mp, caps, err, cap);
}

mn_status vk_codegen_heads(vk_kernel *k, const mn_graph *g, int32_t id, const int32_t *opnd, int heads_in,
                           bool heads_out, const memplan *mp, const vk_caps *caps, char *err, size_t cap) {
    return codegen_node(k, g, id, opnd, heads_in, heads_out, MN_NONE, mp, caps, err, cap);
}

mn_status vk_codegen_saving(vk_kernel *k, const mn_graph *g, int32_t id, const int32_t *opnd, int heads_in,
                            bool heads_out, int32_t saved, const memplan *mp, const vk_caps *caps, char *err,
                            size_t cap) {
    return codegen_node(k, g, id, opnd, heads_in, heads_out, saved, mp, caps, err, cap);
}

/* The generator alone: the caller set k's index width (vk_index_width) for
 * the whole kernel (a fused group's). */
mn_status vk_codegen_op(vk_kernel *k, const mn_graph *g, int32_t id, const vk_caps *caps, char *err, size_t cap) {
    const node *n = &g->nodes[id];
    return gen_table[n->op](k, g, n, caps, err, cap);
}

mn_status vk_loop_fail(const mn_graph *g, const node *n, const vk_caps *caps, uint64_t iterations, char *err,
                       size_t cap) {
    char shape[96];
    shape_str(shape, sizeof shape, n->rank, n->shape);
    mn_fmt(err, cap, "vulkan codegen: %s (%%%d) -> %s: its kernel needs %llu loop iterations per invocation, more "
           "than the driver's shader loop limit of %u (lavapipe ends longer loops silently); run this node's "
           "shape on the CPU backend or split it", op_table[n->op].name, (int)(n - g->nodes), shape,
           (unsigned long long)iterations, caps->loop_limit);
    return MN_E_UNSUPPORTED;
}

const char *vk_template(const char *name) {
    for (const vk_embedded *e = vk_embedded_templates; e->name; e++)
        if (strcmp(e->name, name) == 0) return e->text;
    return NULL;
}

#define VK_INT64_EXT "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n"

char *vk_codegen_source(const vk_kernel *k) {
    const char *pre = vk_template("preamble"), *math = vk_template("mathlib");
    const char *body = k->tmpl ? vk_template(k->tmpl) : NULL, *lib = k->lib ? vk_template(k->lib) : "";
    if (!pre || !math || !body || !lib) return NULL;
    char head[160];
    snprintf(head, sizeof head, "#define LOCAL_X %u\n#define LOCAL_Y %u\n#define LOCAL_Z %u\n", k->local[0],
             k->local[1], k->local[2]);
    const char *code = k->code ? k->code : "";
    size_t n = strlen(head) + k->dlen + strlen(pre) + strlen(math) + strlen(code) + strlen(lib) + strlen(body) + sizeof VK_INT64_EXT + 64;
    char *s = malloc(n);
    if (!s) return NULL;
    /* #version must come first: it is cut out of the preamble and put first,
     * then the workgroup size and the node's defines, then the rest */
    snprintf(s, n, "%s", "");
    size_t at = 0;
    const char *ver = strstr(pre, "#version");
    const char *ver_end = ver ? strchr(ver, '\n') : NULL;
    if (!ver || !ver_end) {
        free(s);
        return NULL;
    }
    at += (size_t)snprintf(s + at, n - at, "%.*s", (int)(ver_end - ver + 1), ver);
    /* 64-bit literals in the defines need the extension before them */
    if (k->idx64) at += (size_t)snprintf(s + at, n - at, "%s", VK_INT64_EXT);
    at += (size_t)snprintf(s + at, n - at, "%s%s", head, k->defines);
    at += (size_t)snprintf(s + at, n - at, "%s\n%s\n%s%s%s", ver_end + 1, math, code, lib, body);
    return s;
}
