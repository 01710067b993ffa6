/* fuzz_graph.c - libFuzzer target: random graphs built and run through the
 * public API (meganeura.h only, like a user program) on the CPU backend.
 *
 * Does: reads the fuzzer's bytes as a small program. A 16-byte header holds
 * the session settings (mode, optimizer, schedule, clipping, seed, data mix)
 * and four "vocabulary" dimensions that most shapes draw from (so operands
 * often fit). Then one instruction per opcode byte, each calling one API
 * function with operands and attributes read from the following bytes: every
 * graph constructor of meganeura.h (sources, markers, every op, the
 * composites, mn_fold_batch_norm), with hostile values mixed in (handles
 * that are absent, made up or another graph's, NULL pointers, negative/huge
 * sizes, bad axes, NaN/Inf floats, odd names). Operands are picked from the
 * handles the API returned (recent ones first; i32 ones where labels, ids or
 * positions go). Training programs without a loss get mean(last tensor).
 * Opcode 0xFF ends the program; the bytes after it drive the session (set
 * inputs of right or wrong sizes, step, run, loss, outputs, parameters,
 * save/load round trips through a file in /dev/shm or /tmp, loads into
 * another model, dumps, a second session on a shared device); with no such
 * bytes a default script runs. Header bit 0x20 runs the differential check
 * instead: the graph again with every tensor pinned as an output (no buffer
 * reuse, no dead code) must give bit-identical outputs, loss and parameters.
 * Every status may be an error; what the API promises is checked and a
 * broken promise aborts (a crash for libFuzzer, a failure for the replay
 * test): a failing constructor leaves the graph unchanged with a message, a
 * successful one returns a valid tensor; session creation fails only for the
 * documented reasons; step/run on a created session succeed (or report a
 * non-finite step, which under the skip policy changes no parameter and no
 * step count); reads of the right size succeed; a checkpoint just saved
 * loads back and restores the parameters bit for bit. MN_ASSERT aborts, so
 * an internal invariant broken is a crash too. MN_FUZZ_TRACE=1 prints every
 * call, its status and the graph (for reading a crash).
 *
 * Does not: use internal headers, run the Vulkan backend, or build sessions
 * for graphs with big tensors (the gate below keeps each run fast; a graph
 * over the gate is still built, checked and dumped).
 * Build: clang -fsanitize=fuzzer,address,undefined (-DMN_FUZZ=ON); run with
 * tests/fuzz/run_fuzz.sh; tests/test_fuzz_graph_corpus.c replays the corpus.
 */
#define _GNU_SOURCE /* fopencookie: a FILE that counts the lines of a graph dump */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "meganeura.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input, for writing regression inputs by hand (MN_FUZZ_TRACE shows
 * what a file does). Header bytes:
 *   h[0]  flags: 0x01 run a session, 0x02 training, 0x04 save/load (default
 *         script), 0x08 dumps, 0x10 no automatic loss, 0x20 differential
 *         check, 0x40 refused sessions, 0x80 graph dump
 *   h[1]  optimizer: kind = bits 0-1 (3: AdamW, or unknown with 0x80),
 *         0x04 nesterov, 0x08 clipping (norm from h[5]), 0x10 warm-up cosine
 *         (0x40: an unknown schedule); h[2] lr, h[3] momentum/beta1,
 *         h[4] weight decay (odd) or eps (even): pick_f bytes, 0 = default
 *   h[6]  warm-up steps (bits 0-2), total steps (bits 3-5), 0x40 min_lr
 *   h[7]  seed of parameters and data; h[8] the default script's execs
 *         (1 + bits 0-1; bit 2+k set: exec k is a run, not a step), the
 *         non-finite policy (bits 4-5)
 *   h[9..12] the dimension vocabulary (1 + h % 8); h[13] 0xFD..0xFF bad
 *         backend/mode; h[14] data specials (bits 0-1), save/load variants;
 *         h[15] dump variants, 0x80 edit the graph after session_create
 * Then instructions, opcode % FZ_NOPS: 0-2 f32 input, 3 i32 input, 4-5
 * param, 6 constant, 7 scalar, 8 state, 9 output, 10 loss, 11 lr_mult or
 * freeze (opcode / FZ_NOPS odd), 12 fold_batch_norm, 13 query (may make the
 * next call get g or out NULL), 14 param shaped for a tensor, 15 + k: case k
 * of op_compute (an odd opcode / FZ_NOPS also marks the result an output).
 * 0xFF ends the program; session actions follow (run_session). */
#define FZ_HEADER 16
#define FZ_MAX_INSNS 48
#define FZ_MAX_NODES 400            /* session gate: nodes of the user graph */
#define FZ_MAX_NUMEL 2048           /* session gate: elements of any tensor */
#define FZ_MAX_TOTAL (1 << 15)      /* session gate: elements of all tensors */
#define FZ_MAX_DATA 4096            /* largest constant / fold_batch_norm buffer */
#define FZ_MAX_TRACK 32
#define FZ_MAX_POOL 256             /* tensor handles the program can refer to */
#define FZ_COUNT_LIMIT 160          /* graphs up to this many nodes are counted after each call */
#define FZ_MAX_SESSION_ACTIONS 24
#define FZ_NOPS (15 + 31) /* opcodes: 15 source/marker/misc + 31 op_compute cases */

/* A broken API promise: report and abort (libFuzzer: crash; replay: failure). */
#define FZ_BUG(...)                                                                                \
    do {                                                                                           \
        fprintf(stderr, "fuzz_graph: API promise broken: ");                                       \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)
#define FZ_EXPECT(c, ...)                                                                          \
    do {                                                                                           \
        if (!(c)) FZ_BUG(__VA_ARGS__);                                                             \
    } while (0)

typedef struct named {
    char *name;
    mn_tensor t;
    mn_dtype dt;
    int64_t numel;
} named;

typedef struct fz {
    const uint8_t *p;
    size_t n, i;
    uint8_t h[FZ_HEADER];
    uint64_t rng;
    int specials; /* 0..3: how often data holds NaN/Inf/huge values */
    mn_graph *g;
    int32_t count;  /* nodes of g (from its dump), -1 if not known */
    mn_tensor pool[FZ_MAX_POOL]; /* the handles the API returned, oldest first */
    uint8_t pool_i32[FZ_MAX_POOL]; /* holds i32 (labels, ids, positions) */
    uint8_t pool_param[FZ_MAX_POOL]; /* a parameter or a reshape of one (its storage) */
    int npool;
    mn_graph *g2;       /* another graph: its handle is foreign to g */
    mn_tensor foreign;
    int64_t vocab[4];
    bool null_graph, null_out; /* the next constructor gets g = NULL / out = NULL */
    named inputs[FZ_MAX_TRACK], params[FZ_MAX_TRACK], outputs[FZ_MAX_TRACK];
    int ninputs, nparams, noutputs;
    bool has_loss, has_dropout, has_state;
    mn_nonfinite policy; /* of the sessions being run */
    FILE *devnull;
    char path[64];
} fz;

/* ---- reading the bytes ------------------------------------------------------ */

static bool more(const fz *z) { return z->i < z->n; }
static uint8_t u8(fz *z) { return z->i < z->n ? z->p[z->i++] : 0; }

static uint64_t rnd(fz *z) { /* splitmix64: data values, not structure */
    uint64_t x = (z->rng += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static const int g_hostile_int[16] = {0, -1, -2, INT_MIN, INT_MAX, 1 << 20, 1 << 29, 1025,
                                      1024, 65536, 100, 3, -100, INT_MAX / 2, 7, 2};
static const int64_t g_hostile_i64[16] = {0, -1, INT64_MIN, INT64_MAX, (int64_t)1 << 40, ((int64_t)1 << 40) + 1,
                                          (int64_t)1 << 29, ((int64_t)1 << 29) + 1, -((int64_t)1 << 29),
                                          -((int64_t)1 << 29) - 1, (int64_t)1 << 62, -((int64_t)1 << 62), 2, 100,
                                          INT32_MAX, INT32_MIN};

/* lo .. lo+span-1 mostly, a hostile value for bytes >= 0xF0. */
static int pick_int(fz *z, int lo, int span) {
    uint8_t b = u8(z);
    return b < 0xF0 ? lo + b % span : g_hostile_int[b & 15];
}
static int64_t pick_i64(fz *z, int64_t lo, int span) {
    uint8_t b = u8(z);
    return b < 0xF0 ? lo + b % span : g_hostile_i64[b & 15];
}
static bool pick_bool(fz *z) { return u8(z) & 1; }

static float pick_f(fz *z) {
    static const float nice[24] = {0.0f, 1.0f, 0.5f, 2.0f, -1.0f, 0.1f, 1e-5f, 0.9f, 0.999f, 1e-3f, 3.0f, -0.5f,
                                   0.01f, 1e-8f, 0.25f, 10.0f, -2.0f, 0.75f, 4.0f, 1e4f, -3.0f, 0.3f, 1.5f, 0.05f};
    const float special[16] = {NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, FLT_MIN, 1e-45f, -0.0f,
                               1e30f, -1e30f, 1e-30f, 65504.0f, 1e10f, -1e10f, 0.99999994f, 1.0000001f};
    uint8_t b = u8(z);
    if (b < 0xA0) return nice[b % 24];
    if (b < 0xE0) return (float)(b - 0xA0) / 16.0f - 1.0f;
    return special[b & 15];
}

static int32_t rank_of(fz *z, mn_tensor t, int64_t shape[MN_MAX_RANK]) {
    int r = 0;
    int64_t s[MN_MAX_RANK];
    if (mn_tensor_shape(z->g, t, &r, s) != MN_OK) return -1;
    if (shape) memcpy(shape, s, sizeof s);
    return r;
}

/* A tensor handle: mostly a recent one, sometimes one that is not a handle
 * of g (absent, negative, huge, small integers, another graph's, the last
 * handle plus one). */
static mn_tensor pick(fz *z) {
    static const mn_tensor bad[8] = {MN_NONE, -2, INT32_MIN, INT32_MAX, 0, 1, 1 << 20, 0};
    uint8_t b = u8(z);
    if (b < 0xF0) return z->npool ? z->pool[z->npool - 1 - (int)(b % (unsigned)z->npool)] : MN_NONE;
    if ((b & 7) == 7) return z->foreign;
    if ((b & 15) == 8 && z->npool) return z->pool[z->npool - 1] + 1;
    return bad[b & 7];
}
static int pool_index(const fz *z, mn_tensor t) {
    for (int k = z->npool - 1; k >= 0; k--)
        if (z->pool[k] == t) return k;
    return -1;
}
static bool is_i32(const fz *z, mn_tensor t) {
    int k = pool_index(z, t);
    return k >= 0 && z->pool_i32[k];
}
static void add_pool(fz *z, mn_tensor t, bool i32) {
    if (z->npool >= FZ_MAX_POOL || pool_index(z, t) >= 0) return;
    z->pool_i32[z->npool] = i32;
    z->pool_param[z->npool] = 0;
    z->pool[z->npool++] = t;
}

/* A tensor of the wanted kind (i32 or f32), most recent first; any tensor
 * (pick) for bytes >= 0xF0 or when there is none of that kind. */
static mn_tensor pick_kind(fz *z, bool want_i32) {
    uint8_t b = z->i < z->n ? z->p[z->i] : 0;
    if (b >= 0xF0) return pick(z);
    int cand = 0;
    for (int k = 0; k < z->npool; k++) cand += z->pool_i32[k] == want_i32;
    if (!cand) return pick(z);
    z->i += z->i < z->n;
    int j = (int)(b % (unsigned)cand);
    for (int k = z->npool - 1; k >= 0; k--)
        if (z->pool_i32[k] == want_i32 && j-- == 0) return z->pool[k];
    return MN_NONE;
}
static mn_tensor pick_i32(fz *z) { return pick_kind(z, true); }
static mn_tensor pick_opt_i32(fz *z) {
    uint8_t b = z->i < z->n ? z->p[z->i] : 0;
    if (b >= 0xC0 && b < 0xF0) {
        z->i += z->i < z->n;
        return MN_NONE;
    }
    return pick_i32(z);
}

/* An optional tensor: MN_NONE for bytes >= 0xC0. */
static mn_tensor pick_opt(fz *z) {
    uint8_t b = u8(z);
    if (b >= 0xC0) return MN_NONE;
    return z->npool ? z->pool[z->npool - 1 - (int)(b % (unsigned)z->npool)] : MN_NONE;
}
/* -4..4 and MN_ALL_AXES, or hostile. */
static int pick_axis(fz *z) {
    static const int bad[8] = {INT_MIN, INT_MAX, 4, -5, 5, 126, 128, -128};
    uint8_t b = u8(z);
    if (b >= 0xF0) return bad[b & 7];
    int a = (int)(b % 10) - 4;
    return a == 5 ? MN_ALL_AXES : a;
}

static int64_t gen_dim(fz *z) {
    static const int64_t hd[16] = {1, 2, 3, 4, 5, 6, 7, 8, 16, 0, -1, -2, 1 << 20, (int64_t)1 << 40, INT64_MAX,
                                   INT64_MIN};
    uint8_t d = u8(z);
    switch (d >> 6) {
    case 0: case 1: return z->vocab[d & 3];
    case 2: {
        if (!z->npool) return z->vocab[d & 3];
        int64_t s[MN_MAX_RANK];
        int r = rank_of(z, z->pool[z->npool - 1 - (int)((d & 0x3f) % (unsigned)z->npool)], s);
        uint8_t a = u8(z);
        return r > 0 ? s[a % r] : 1;
    }
    default: return hd[d & 15];
    }
}

/* A shape in an exactly sized heap array (ASan sees any read past rank);
 * *rank may be out of range (then the array has min(max(rank,0), 8) dims). */
static int64_t *gen_shape(fz *z, int *rank) {
    static const int bad[8] = {-1, 5, 127, INT_MIN, INT_MAX, -4, 8, 6};
    uint8_t b = u8(z);
    int r = b < 0xF0 ? b % 5 : bad[b & 7];
    int nd = r < 0 ? 0 : r > 8 ? 8 : r;
    int64_t *s = malloc(sizeof *s * (size_t)(nd ? nd : 1));
    if (!s) abort();
    for (int i = 0; i < nd; i++) s[i] = gen_dim(z);
    *rank = r;
    return s;
}

/* A shape derived from x's: x's own, with one -1, merged dims, or another
 * tensor's; used by reshape and broadcast_to so that they often succeed. */
static int64_t *derived_shape(fz *z, mn_tensor x, int *rank) {
    uint8_t mode = u8(z) % 6;
    int64_t s[MN_MAX_RANK];
    int r = rank_of(z, mode == 4 ? pick(z) : x, s);
    if (mode >= 5 || r < 0) return gen_shape(z, rank);
    int64_t *d = malloc(sizeof *d * (size_t)(r ? r : 1));
    if (!d) abort();
    memcpy(d, s, sizeof *d * (size_t)r);
    *rank = r;
    if (mode == 1 && r > 0) d[u8(z) % r] = -1;
    if (mode == 2) { /* flatten: [-1] */
        *rank = 1;
        d[0] = -1;
    }
    if (mode == 3 && r >= 2) { /* merge two neighbours */
        int a = u8(z) % (r - 1);
        d[a] *= d[a + 1];
        for (int i = a + 1; i < r - 1; i++) d[i] = d[i + 1];
        *rank = r - 1;
    }
    if (mode == 4) { /* another tensor's shape, maybe with a leading 1 */
        if (r < MN_MAX_RANK && pick_bool(z)) {
            int64_t *e = malloc(sizeof *e * (size_t)(r + 1));
            if (!e) abort();
            e[0] = 1;
            memcpy(e + 1, d, sizeof *d * (size_t)r);
            free(d);
            d = e;
            *rank = r + 1;
        }
    }
    return d;
}

static const char *gen_name(fz *z, char *buf) { /* buf: 320 bytes */
    uint8_t b = u8(z);
    if (b < 0xF0) {
        snprintf(buf, 320, "t%u", b % 24u);
        return buf;
    }
    switch (b & 15) {
    case 0: return NULL;
    case 1: return "";
    case 2: return "__hyper";
    case 3: return "optim.adam.m.t0";
    case 4: return "optim.sgd.momentum.t1";
    case 5: memset(buf, 'n', 299), buf[299] = 0; return buf;
    case 6: memset(buf, 'n', 255), buf[255] = 0; return buf;
    case 7: return "bad\xff\xfeutf8";
    case 8: return "q\"uote\\back\nslash";
    case 9: return "meganeura.step";
    case 10: return "format";
    case 11: return "__metadata__";
    case 12: return "optim.adamw.v.t2";
    case 13: return "a/b:c d";
    case 14: return "\x01\x02";
    default: return "t0";
    }
}

/* ---- data ------------------------------------------------------------------- */

static float data_f(fz *z) {
    const float sp[8] = {NAN, INFINITY, -INFINITY, 0.0f, 1e30f, -1e30f, 1e-40f, -0.0f};
    uint64_t r = rnd(z);
    static const unsigned every[4] = {0, 64, 8, 1};
    if (z->specials && (r >> 40) % every[z->specials] == 0) return sp[(r >> 8) & 7];
    return (float)((double)(r >> 11) / 9007199254740992.0 * 4.0 - 2.0);
}
static int32_t data_i(fz *z) {
    static const int32_t sp[4] = {INT32_MIN, INT32_MAX, -100, 1 << 30};
    uint64_t r = rnd(z);
    if (z->specials && (r >> 40) % 16 == 0) return sp[(r >> 8) & 3];
    return (int32_t)((r >> 33) % 12) - 2; /* labels, ids, positions: -2..9 */
}
static void fill(fz *z, void *buf, size_t bytes, mn_dtype dt) {
    if (dt == MN_F16 || dt == MN_BF16) { /* 16-bit encodings of the data's floats */
        for (size_t k = 0; k + 2 <= bytes; k += 2) {
            const float v = data_f(z);
            uint32_t u;
            memcpy(&u, &v, 4);
            const uint16_t h = dt == MN_BF16 ? (uint16_t)(u >> 16) : (uint16_t)(u >> 13 ^ u);
            memcpy((char *)buf + k, &h, 2);
        }
        return;
    }
    for (size_t k = 0; k + 4 <= bytes; k += 4) {
        if (dt == MN_I32) {
            int32_t v = data_i(z);
            memcpy((char *)buf + k, &v, 4);
        } else {
            float v = data_f(z);
            memcpy((char *)buf + k, &v, 4);
        }
    }
}

/* Element count of a shape, -1 if invalid or beyond lim. */
static int64_t numel_of(int rank, const int64_t *s, int64_t lim) {
    if (rank < 0 || rank > MN_MAX_RANK) return -1;
    int64_t e = 1;
    for (int i = 0; i < rank; i++) {
        if (s[i] <= 0 || s[i] > lim || e > lim / s[i]) return -1;
        e *= s[i];
    }
    return e;
}

static void track(named *arr, int *n, const char *name, mn_tensor t, mn_dtype dt, int64_t numel) {
    if (*n >= FZ_MAX_TRACK || !name) return;
    arr[*n].name = strdup(name);
    if (!arr[*n].name) abort();
    arr[*n].t = t;
    arr[*n].dt = dt;
    arr[*n].numel = numel;
    (*n)++;
}

/* ---- the promises of a graph call ------------------------------------------- */

static bool g_trace; /* MN_FUZZ_TRACE set: print every call and its status */

/* Nodes of g, from its dump (one line per node); -1 above FZ_COUNT_LIMIT
 * (counting every call would dominate the run time of big graphs). */
static ssize_t count_lines(void *cookie, const char *buf, size_t len) {
    int32_t *n = cookie;
    for (size_t k = 0; k < len; k++) *n += buf[k] == '\n';
    return (ssize_t)len;
}
static int32_t node_count(fz *z) {
    int32_t n = 0;
    cookie_io_functions_t io = {NULL, count_lines, NULL, NULL};
    FILE *f = fopencookie(&n, "w", io);
    if (!f) abort();
    FZ_EXPECT(mn_graph_dump(z->g, f) == MN_OK, "graph_dump");
    fclose(f);
    return n;
}
static void refresh_count(fz *z) { z->count = z->count >= 0 && z->count <= FZ_COUNT_LIMIT ? node_count(z) : -1; }

static void check_tensor(fz *z, mn_tensor t, const char *what) {
    int r = -1;
    int64_t s[MN_MAX_RANK];
    FZ_EXPECT(t != MN_NONE, "%s: returned MN_NONE", what);
    FZ_EXPECT(mn_tensor_shape(z->g, t, &r, s) == MN_OK && r >= 0 && r <= MN_MAX_RANK, "%s: rank %d", what, r);
    uint64_t e = 1;
    for (int i = 0; i < r; i++) {
        FZ_EXPECT(s[i] >= 1 && s[i] <= ((int64_t)1 << 40), "%s: dim %d is %lld", what, i, (long long)s[i]);
        FZ_EXPECT(!__builtin_mul_overflow(e, (uint64_t)s[i], &e) && e <= ((uint64_t)1 << 40),
                  "%s: more than 2^40 elements", what);
    }
}

/* After a constructor: on failure the graph is unchanged and says why; on
 * success the outputs are tensors of the graph. */
static void after_call(fz *z, const char *what, mn_status st, int32_t before, const mn_tensor *outs, int nout,
                       bool had_graph) {
    refresh_count(z);
    if (g_trace)
        fprintf(stderr, "  %s%s%s -> %s %s (tensors %d -> %d)\n", what, had_graph ? "" : " [g NULL]",
                z->null_out ? " [out NULL]" : "", mn_status_str(st), st ? mn_graph_error(z->g) : "", before, z->count);
    FZ_EXPECT(st <= 0 && st >= MN_E_NONFINITE, "%s: status %d is not an mn_status", what, st);
    FZ_EXPECT(strlen(mn_status_str(st)) > 0, "%s: status name", what);
    const bool counted = before >= 0 && z->count >= 0;
    if (!had_graph) {
        FZ_EXPECT(st == MN_E_INVALID, "%s with g = NULL: %s", what, mn_status_str(st));
        FZ_EXPECT(!counted || z->count == before, "%s with g = NULL changed the graph", what);
        return;
    }
    if (z->null_out) FZ_EXPECT(st != MN_OK, "%s accepted out = NULL", what);
    if (st != MN_OK) {
        FZ_EXPECT(!counted || z->count == before, "%s failed (%s: %s) but the graph grew from %d to %d nodes", what,
                  mn_status_str(st), mn_graph_error(z->g), before, z->count);
        FZ_EXPECT(mn_graph_error(z->g)[0] != 0, "%s failed (%s) without a message", what, mn_status_str(st));
        return;
    }
    for (int k = 0; k < nout; k++) {
        check_tensor(z, outs[k], what);
        add_pool(z, outs[k], false);
    }
}

/* ---- instructions ------------------------------------------------------------ */

typedef mn_status (*op1_fn)(mn_graph *, mn_tensor *, mn_tensor);
typedef mn_status (*op2_fn)(mn_graph *, mn_tensor *, mn_tensor, mn_tensor);

static mn_status cast_f32(mn_graph *g, mn_tensor *o, mn_tensor x) { return mn_cast(g, o, x, MN_F32); }
static mn_status cast_f16(mn_graph *g, mn_tensor *o, mn_tensor x) { return mn_cast(g, o, x, MN_F16); }
static mn_status cast_bf16(mn_graph *g, mn_tensor *o, mn_tensor x) { return mn_cast(g, o, x, MN_BF16); }
static mn_status cast_i32(mn_graph *g, mn_tensor *o, mn_tensor x) { return mn_cast(g, o, x, MN_I32); } /* refused */

static const struct { const char *name; op1_fn fn; } g_unary[] = {
    {"neg", mn_neg}, {"exp", mn_exp}, {"log", mn_log}, {"sqrt", mn_sqrt}, {"rsqrt", mn_rsqrt},
    {"relu", mn_relu}, {"sigmoid", mn_sigmoid}, {"tanh", mn_tanh}, {"gelu", mn_gelu},
    {"gelu_tanh", mn_gelu_tanh}, {"silu", mn_silu}, {"stop_gradient", mn_stop_gradient},
    {"softmax", mn_softmax}, {"log_softmax", mn_log_softmax}, {"abs", mn_abs},
    {"global_avg_pool", mn_global_avg_pool}, {"upsample_nearest2x", mn_upsample_nearest2x},
    {"cast_f32", cast_f32}, {"cast_f16", cast_f16}, {"cast_bf16", cast_bf16}, {"cast_i32", cast_i32},
};
static const struct { const char *name; op2_fn fn; } g_binary[] = {
    {"add", mn_add}, {"sub", mn_sub}, {"mul", mn_mul}, {"div", mn_div}, {"matmul", mn_matmul},
    {"mse", mn_mse}, {"cross_entropy", mn_cross_entropy}, {"cross_entropy_dense", mn_cross_entropy_dense},
    {"swiglu", mn_swiglu}, {"geglu", mn_geglu}, {"l1_loss", mn_l1_loss},
    {"bce_with_logits", mn_bce_with_logits}, {"embedding", mn_embedding},
};

#define G (z->null_graph ? NULL : z->g)
#define OUT (z->null_out ? NULL : &out)

/* Sources. */
static void op_source(fz *z, int kind) {
    char nb[320];
    mn_tensor out = MN_NONE;
    int rank;
    const int32_t before = z->count;
    const bool hg = !z->null_graph;
    const char *name = kind == 3 || kind == 4 ? NULL : gen_name(z, nb);
    int64_t *shape = kind == 4 ? NULL : gen_shape(z, &rank);
    const int64_t *sh = shape;
    if (shape && rank > 0 && u8(z) == 0xEE) sh = NULL; /* hostile: NULL shape */
    mn_status st = MN_OK;
    const char *what = "source";
    switch (kind) {
    case 0: case 1: {
        mn_dtype dt = kind == 0 ? MN_F32 : MN_I32;
        uint8_t b = u8(z);
        if (b >= 0xF8) dt = (mn_dtype)((b & 1) ? MN_F16 : (b & 2) ? MN_BF16 : 9);
        what = "graph_input";
        st = mn_graph_input(G, OUT, name, dt, rank, sh);
        if (st == MN_OK && !z->null_out) {
            track(z->inputs, &z->ninputs, name, out, dt, numel_of(rank, sh, 1 << 30));
            if (dt == MN_I32 && pool_index(z, out) < 0) add_pool(z, out, true);
        }
        break;
    }
    case 2: {
        uint8_t b = u8(z);
        mn_init init = {(mn_init_kind)(b < 0xF8 ? b % 8 : (b & 1) ? -1 : 8 + (b & 6)), pick_f(z), pick_f(z)};
        what = "graph_param";
        st = mn_graph_param(G, OUT, name, rank, sh, init);
        if (st == MN_OK && !z->null_out) {
            track(z->params, &z->nparams, name, out, MN_F32, numel_of(rank, sh, 1 << 30));
            add_pool(z, out, false);
            z->pool_param[pool_index(z, out)] = 1;
        }
        break;
    }
    case 3: {
        what = "graph_constant";
        int64_t e = numel_of(rank, sh ? sh : shape, FZ_MAX_DATA);
        bool valid_dims = rank >= 0 && rank <= MN_MAX_RANK;
        for (int i = 0; valid_dims && i < rank; i++) valid_dims = shape[i] > 0;
        if (e < 0 && valid_dims && sh) { /* a valid shape too big for our buffer */
            free(shape);
            z->null_graph = z->null_out = false;
            return;
        }
        size_t cnt = e > 0 ? (size_t)e : 1;
        float *d = malloc(cnt * sizeof *d);
        if (!d) abort();
        fill(z, d, cnt * 4, MN_F32);
        st = mn_graph_constant(G, OUT, rank, sh, u8(z) == 0xEE ? NULL : d);
        free(d);
        break;
    }
    case 4:
        what = "graph_scalar";
        st = mn_graph_scalar(G, OUT, pick_f(z));
        break;
    case 5:
        what = "graph_state";
        st = mn_graph_state(G, OUT, name, rank, sh);
        z->has_state |= st == MN_OK;
        break;
    }
    free(shape);
    after_call(z, what, st, before, &out, !z->null_out, hg);
}

static void op_marker(fz *z, int kind) {
    char nb[320];
    const int32_t before = z->count;
    const bool hg = !z->null_graph;
    mn_tensor t = pick(z);
    mn_status st;
    const char *what;
    switch (kind) {
    case 0: {
        const char *name = gen_name(z, nb);
        what = "graph_output";
        st = mn_graph_output(G, t, name);
        if (st == MN_OK) {
            int64_t s[MN_MAX_RANK];
            int r = rank_of(z, t, s);
            /* the tensor may already carry a name (an input or param): track
             * the name it was given */
            bool dup = false;
            for (int k = 0; k < z->noutputs; k++) dup |= z->outputs[k].t == t;
            mn_dtype dt = MN_F32;
            (void)mn_tensor_dtype(z->g, t, &dt);
            if (!dup && name) track(z->outputs, &z->noutputs, name, t, dt, numel_of(r, s, 1 << 30));
        }
        break;
    }
    case 1:
        what = "graph_loss";
        st = mn_graph_loss(G, t);
        if (st == MN_OK) z->has_loss = true;
        break;
    case 2:
        what = "param_lr_mult";
        st = mn_graph_param_lr_mult(G, t, pick_f(z));
        break;
    default:
        what = "param_freeze";
        st = mn_graph_param_freeze(G, t, pick_bool(z));
        break;
    }
    after_call(z, what, st, before, NULL, 0, hg);
}

/* Marks t as an output under a fresh name (so that inference runs it). */
static void mark_output(fz *z, mn_tensor t) {
    char name[32];
    snprintf(name, sizeof name, "out%d", z->noutputs);
    int32_t before = z->count;
    mn_status st = mn_graph_output(z->g, t, name);
    after_call(z, "graph_output", st, before, NULL, 0, true);
    int64_t s[MN_MAX_RANK];
    int r = rank_of(z, t, s);
    mn_dtype dt = MN_F32;
    if (st == MN_OK) (void)mn_tensor_dtype(z->g, t, &dt);
    if (st == MN_OK) track(z->outputs, &z->noutputs, name, t, dt, numel_of(r, s, 1 << 30));
}

/* A parameter shaped for a role next to tensor x: x's shape, a vector of its
 * last or channel dim, a conv / transposed conv / conv1d / matmul weight for
 * it, an embedding table. Falls back to a generated shape. */
static void op_param_for(fz *z) {
    char nb[320];
    const int32_t before = z->count;
    mn_tensor x = pick_kind(z, false), out = MN_NONE;
    uint8_t role = u8(z) % 8, ib = u8(z);
    int64_t s[MN_MAX_RANK], o = gen_dim(z), k = 1 + u8(z) % 3, d[MN_MAX_RANK];
    int r = rank_of(z, x, s), rank = -1;
    const char *name = gen_name(z, nb);
    switch (role) {
    case 0: if (r >= 0) rank = r, memcpy(d, s, sizeof d); break;
    case 1: if (r >= 1) rank = 1, d[0] = s[r - 1]; break;
    case 2: if (r >= 2) rank = 1, d[0] = s[1]; break;
    case 3: if (r == 4) rank = 4, d[0] = o, d[1] = (ib & 0x10) ? 1 : s[1], d[2] = k, d[3] = k; break;
    case 4: if (r == 4) rank = 4, d[0] = s[1], d[1] = o, d[2] = k, d[3] = k; break;
    case 5: if (r >= 2) rank = 2, d[0] = s[r - 1], d[1] = o; break;
    case 6: if (r == 3) rank = 3, d[0] = o, d[1] = (ib & 0x10) ? 1 : s[1], d[2] = k; break;
    default: rank = 2, d[0] = gen_dim(z), d[1] = o; break;
    }
    mn_status st;
    mn_init init = {(mn_init_kind)(ib % 8), 0.5f, 1.0f};
    if (rank < 0) {
        int64_t *g = gen_shape(z, &rank);
        st = mn_graph_param(z->g, &out, name, rank, g, init);
        if (st == MN_OK) track(z->params, &z->nparams, name, out, MN_F32, numel_of(rank, g, 1 << 30));
        free(g);
    } else {
        int64_t *g = malloc(sizeof *g * (size_t)(rank ? rank : 1));
        if (!g) abort();
        memcpy(g, d, sizeof *g * (size_t)rank);
        st = mn_graph_param(z->g, &out, name, rank, g, init);
        if (st == MN_OK) track(z->params, &z->nparams, name, out, MN_F32, numel_of(rank, g, 1 << 30));
        free(g);
    }
    after_call(z, "graph_param (shaped for a role)", st, before, &out, st == MN_OK, true);
    if (st == MN_OK) z->pool_param[pool_index(z, out)] = 1;
}

static void op_compute(fz *z, uint8_t opc, bool auto_out) {
    mn_tensor out = MN_NONE, keep_kind = MN_NONE, view_of = MN_NONE;
    const int32_t before = z->count;
    const bool hg = !z->null_graph;
    mn_status st = MN_OK;
    const char *what = "?";
    switch (opc) {
    case 0: { /* unary table */
        uint8_t k = u8(z) % (uint8_t)(sizeof g_unary / sizeof g_unary[0]);
        what = g_unary[k].name;
        st = g_unary[k].fn(G, OUT, pick(z));
        break;
    }
    case 1: { /* binary table */
        uint8_t k = u8(z) % (uint8_t)(sizeof g_binary / sizeof g_binary[0]);
        what = g_binary[k].name;
        mn_tensor a = pick_kind(z, false);
        bool ids = g_binary[k].fn == mn_cross_entropy || g_binary[k].fn == mn_embedding;
        st = g_binary[k].fn(G, OUT, a, ids ? pick_i32(z) : pick(z));
        break;
    }
    case 2: {
        what = "matmul_ex";
        mn_tensor a = pick(z), b = pick(z);
        uint8_t f = u8(z);
        st = mn_matmul_ex(G, OUT, a, b, f & 1, f & 2);
        break;
    }
    case 3: {
        what = "scale";
        mn_tensor x = pick(z);
        st = mn_scale(G, OUT, x, pick_f(z));
        break;
    }
    case 4: { /* reductions */
        uint8_t k = u8(z) % 3;
        mn_tensor x = pick(z);
        int axis = pick_axis(z);
        bool keep = pick_bool(z);
        what = k == 0 ? "sum" : k == 1 ? "mean" : "max";
        st = (k == 0 ? mn_sum : k == 1 ? mn_mean : mn_max)(G, OUT, x, axis, keep);
        break;
    }
    case 5: {
        what = "reshape";
        mn_tensor x = pick(z);
        int r;
        int64_t *s = derived_shape(z, x, &r);
        st = mn_reshape(G, OUT, x, r, u8(z) == 0xEE ? NULL : s);
        free(s);
        keep_kind = x;
        view_of = x;
        break;
    }
    case 6: {
        what = "permute";
        mn_tensor x = pick(z);
        int r = rank_of(z, x, NULL);
        int n = r > 0 ? r : 1;
        int *perm = malloc(sizeof *perm * (size_t)n);
        if (!perm) abort();
        for (int i = 0; i < n; i++) perm[i] = i;
        uint8_t mode = u8(z);
        for (int i = 0; i < n; i++) {
            if (mode & 1) perm[i] = pick_int(z, -1, 6);
            else { /* a real permutation */
                int j = u8(z) % n, t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
        }
        st = mn_permute(G, OUT, x, mode == 0xEE ? NULL : perm);
        free(perm);
        keep_kind = x;
        break;
    }
    case 7: {
        what = "transpose";
        mn_tensor x = pick(z);
        int a = pick_axis(z);
        st = mn_transpose(G, OUT, x, a, pick_axis(z));
        keep_kind = x;
        break;
    }
    case 8: {
        what = "conv2d";
        mn_tensor x = pick(z), w = pick(z), b = pick_opt(z);
        mn_conv2d_params p = {{pick_int(z, 0, 3), pick_int(z, 0, 3)}, {pick_int(z, 0, 3), pick_int(z, 0, 3)},
                              {pick_int(z, 0, 3), pick_int(z, 0, 3)}, pick_int(z, 0, 4)};
        st = mn_conv2d(G, OUT, x, w, b, u8(z) == 0xEE ? NULL : &p);
        break;
    }
    case 9: case 10: {
        what = opc == 9 ? "max_pool2d" : "avg_pool2d";
        mn_tensor x = pick(z);
        mn_pool2d_params p = {{pick_int(z, 1, 4), pick_int(z, 1, 4)}, {pick_int(z, 0, 3), pick_int(z, 0, 3)},
                              {pick_int(z, 0, 2), pick_int(z, 0, 2)}};
        uint8_t f = u8(z);
        const mn_pool2d_params *pp = f == 0xEE ? NULL : &p;
        st = opc == 9 ? mn_max_pool2d(G, OUT, x, pp) : mn_avg_pool2d(G, OUT, x, pp, f & 1);
        break;
    }
    case 11: {
        what = "clamp";
        mn_tensor x = pick(z);
        float lo = pick_f(z);
        st = mn_clamp(G, OUT, x, lo, pick_f(z));
        break;
    }
    case 12: {
        what = "pow";
        mn_tensor x = pick(z);
        st = mn_pow(G, OUT, x, pick_f(z));
        break;
    }
    case 13: {
        what = "where";
        mn_tensor c = pick(z), a = pick(z);
        st = mn_where(G, OUT, c, a, pick(z));
        break;
    }
    case 14: {
        mn_tensor x = pick(z);
        float p = pick_f(z);
        uint64_t seed = (uint64_t)pick_i64(z, 0, 200);
        if (pick_bool(z)) {
            what = "dropout";
            st = mn_dropout(G, OUT, x, p, seed);
            z->has_dropout |= st == MN_OK;
        } else {
            what = "dropout_ex";
            st = mn_dropout_ex(G, OUT, x, p, seed, pick_i32(z));
            z->has_dropout |= st == MN_OK;
        }
        break;
    }
    case 15: {
        what = "cross_entropy_ex";
        mn_tensor lg = pick(z), lb = pick_i32(z);
        uint8_t f = u8(z);
        mn_cross_entropy_params p = {f & 2, pick_int(z, -2, 8), pick_f(z)};
        if (f & 4) p.ignore_index = -100;
        st = mn_cross_entropy_ex(G, OUT, lg, lb, (f & 1) ? NULL : &p);
        break;
    }
    case 16: {
        what = "rms_norm";
        mn_tensor x = pick(z), w = pick_opt(z);
        st = mn_rms_norm(G, OUT, x, w, pick_f(z));
        break;
    }
    case 17: {
        what = "layer_norm";
        mn_tensor x = pick(z), w = pick_opt(z), b = pick_opt(z);
        st = mn_layer_norm(G, OUT, x, w, b, pick_f(z));
        break;
    }
    case 18: {
        what = "group_norm";
        mn_tensor x = pick(z);
        int groups = pick_int(z, 0, 5);
        mn_tensor w = pick_opt(z), b = pick_opt(z);
        st = mn_group_norm(G, OUT, x, groups, w, b, pick_f(z));
        break;
    }
    case 19: {
        what = "slice";
        mn_tensor x = pick(z);
        int axis = pick_axis(z);
        int64_t start = pick_i64(z, -1, 6);
        st = mn_slice(G, OUT, x, axis, start, pick_i64(z, 0, 6));
        break;
    }
    case 20: {
        what = "pad";
        mn_tensor x = pick(z);
        int r = rank_of(z, x, NULL);
        int n = r > 0 ? r : 1;
        int64_t *b = malloc(sizeof *b * (size_t)n), *a = malloc(sizeof *a * (size_t)n);
        if (!a || !b) abort();
        for (int i = 0; i < n; i++) b[i] = pick_i64(z, 0, 3), a[i] = pick_i64(z, 0, 3);
        uint8_t f = u8(z);
        st = mn_pad(G, OUT, x, f == 0xEE ? NULL : b, f == 0xEF ? NULL : a);
        free(a);
        free(b);
        break;
    }
    case 21: {
        what = "concat";
        int n = pick_int(z, 0, 9);
        int cnt = n < 1 ? 1 : n > 16 ? 16 : n;
        if (n > 16) n = 16;
        mn_tensor *xs = malloc(sizeof *xs * (size_t)cnt);
        if (!xs) abort();
        for (int i = 0; i < cnt; i++) xs[i] = pick(z);
        int axis = pick_axis(z);
        st = mn_concat(G, OUT, u8(z) == 0xEE ? NULL : xs, n, axis);
        free(xs);
        break;
    }
    case 22: { /* several results */
        what = "split";
        z->null_out = false; /* outs is its own argument */
        mn_tensor x = pick(z);
        int axis = pick_axis(z);
        int n = pick_int(z, 0, 5);
        if (n > 16) n = 16;
        int cnt = n < 1 ? 1 : n;
        mn_tensor *outs = malloc(sizeof *outs * (size_t)cnt);
        int64_t *sizes = malloc(sizeof *sizes * (size_t)cnt);
        if (!outs || !sizes) abort();
        for (int i = 0; i < cnt; i++) sizes[i] = pick_i64(z, 1, 4);
        uint8_t f = u8(z);
        st = mn_split(G, f == 0xEE ? NULL : outs, x, axis, n, (f & 1) ? sizes : NULL);
        after_call(z, what, st, before, outs, st == MN_OK && f != 0xEE ? n : 0, hg);
        free(outs);
        free(sizes);
        return;
    }
    case 23: {
        what = "broadcast_to";
        mn_tensor x = pick(z);
        int r;
        int64_t *s = derived_shape(z, x, &r);
        st = mn_broadcast_to(G, OUT, x, r, u8(z) == 0xEE ? NULL : s);
        free(s);
        break;
    }
    case 24: {
        what = "upsample_nearest2d";
        mn_tensor x = pick(z);
        int sh = pick_int(z, 0, 4);
        st = mn_upsample_nearest2d(G, OUT, x, sh, pick_int(z, 0, 4));
        break;
    }
    case 25: {
        what = "conv1d";
        mn_tensor x = pick(z), w = pick(z), b = pick_opt(z);
        mn_conv1d_params p = {pick_int(z, 0, 3), pick_int(z, 0, 3), pick_int(z, 0, 3), pick_int(z, 0, 4)};
        st = mn_conv1d(G, OUT, x, w, b, u8(z) == 0xEE ? NULL : &p);
        break;
    }
    case 26: {
        what = "conv_transpose2d";
        mn_tensor x = pick(z), w = pick(z), b = pick_opt(z);
        mn_conv_transpose2d_params p = {{pick_int(z, 0, 3), pick_int(z, 0, 3)},
                                        {pick_int(z, 0, 3), pick_int(z, 0, 3)},
                                        {pick_int(z, 0, 2), pick_int(z, 0, 2)},
                                        {pick_int(z, 0, 3), pick_int(z, 0, 3)},
                                        pick_int(z, 0, 4)};
        st = mn_conv_transpose2d(G, OUT, x, w, b, u8(z) == 0xEE ? NULL : &p);
        break;
    }
    case 27: {
        what = "batch_norm2d";
        mn_tensor x = pick(z), w = pick_opt(z), b = pick_opt(z), rm = pick(z), rv = pick(z);
        float mom = pick_f(z), eps = pick_f(z);
        st = mn_batch_norm2d(G, OUT, x, w, b, rm, rv, mom, eps, pick_bool(z));
        break;
    }
    case 28: {
        what = "rope";
        mn_tensor x = pick(z), pos = pick_opt_i32(z);
        float theta = pick_f(z);
        st = mn_rope(G, OUT, x, pos, theta, pick_i64(z, -2, 8));
        break;
    }
    case 29: {
        what = "attention";
        mn_tensor q = pick(z), k = pick(z), v = pick(z), pos = pick_opt_i32(z);
        mn_attention_params p = {pick_bool(z), pick_i64(z, 0, 4), 0.0f};
        p.scale = pick_f(z);
        st = mn_attention(G, OUT, q, k, v, pos, u8(z) == 0xEE ? NULL : &p);
        break;
    }
    case 30: {
        what = "kv_append";
        mn_tensor c = pick(z), x = pick(z);
        st = mn_kv_append(G, OUT, c, x, pick_i32(z));
        break;
    }
    default: return;
    }
    after_call(z, what, st, before, &out, st == MN_OK && !z->null_out ? 1 : 0, hg);
    if (st != MN_OK || z->null_out || !hg) return;
    if (keep_kind != MN_NONE && is_i32(z, keep_kind)) z->pool_i32[pool_index(z, out)] = 1;
    if (view_of != MN_NONE && pool_index(z, view_of) >= 0 && z->pool_param[pool_index(z, view_of)])
        z->pool_param[pool_index(z, out)] = 1;
    if (auto_out) mark_output(z, out);
}

/* mn_fold_batch_norm: a host computation on buffers of the sizes given. */
static void op_fold(fz *z) {
    static const int64_t bad[4] = {0, -1, INT64_MIN, -3};
    uint8_t b = u8(z), c = u8(z), f = u8(z);
    int64_t oc = b < 0xF0 ? 1 + b % 8 : bad[b & 3];
    int64_t pc = c < 0xF0 ? 1 + c % 16 : bad[c & 3];
    if (b >= 0xF0 && c >= 0xF0 && (f & 0x80)) oc = INT64_MAX, pc = 2; /* overflow */
    size_t no = oc > 0 && oc < 64 ? (size_t)oc : 1, np = pc > 0 && pc < 64 ? (size_t)pc : 1;
    float *w = malloc(no * np * 4), *wo = malloc(no * np * 4), *bb = malloc(no * 4), *bo = malloc(no * 4);
    float *ga = malloc(no * 4), *be = malloc(no * 4), *me = malloc(no * 4), *va = malloc(no * 4);
    if (!w || !wo || !bb || !bo || !ga || !be || !me || !va) abort();
    fill(z, w, no * np * 4, MN_F32), fill(z, bb, no * 4, MN_F32), fill(z, ga, no * 4, MN_F32);
    fill(z, be, no * 4, MN_F32), fill(z, me, no * 4, MN_F32), fill(z, va, no * 4, MN_F32);
    float eps = pick_f(z);
    mn_status st = mn_fold_batch_norm((f & 1) ? w : wo, (f & 2) ? bb : bo, w, (f & 4) ? NULL : bb, oc, pc,
                                      (f & 8) ? NULL : ga, (f & 16) ? NULL : be, (f & 32) ? NULL : me, va, eps);
    FZ_EXPECT(st == MN_OK || st == MN_E_INVALID, "fold_batch_norm: %s", mn_status_str(st));
    if (f & 32) FZ_EXPECT(st == MN_E_INVALID, "fold_batch_norm accepted mean = NULL");
    free(w), free(wo), free(bb), free(bo), free(ga), free(be), free(me), free(va);
}

/* Queries: mn_tensor_shape with odd arguments, dumps, names. */
static void op_query(fz *z) {
    uint8_t k = u8(z);
    mn_tensor t = pick(z);
    int r = -7;
    int64_t s[MN_MAX_RANK];
    mn_status st;
    switch (k % 6) {
    case 0:
        st = mn_tensor_shape(z->g, t, &r, (k & 8) ? NULL : s);
        FZ_EXPECT(st == MN_OK || st == MN_E_INVALID, "tensor_shape: %s", mn_status_str(st));
        if (pool_index(z, t) >= 0) FZ_EXPECT(st == MN_OK, "tensor_shape(%d): %s", t, mn_status_str(st));
        if (t == MN_NONE || t == z->foreign) FZ_EXPECT(st == MN_E_INVALID, "tensor_shape(%d) accepted", t);
        break;
    case 1:
        FZ_EXPECT(mn_tensor_shape(z->g, t, NULL, s) == MN_E_INVALID, "tensor_shape with rank NULL");
        FZ_EXPECT(mn_tensor_shape(NULL, t, &r, s) == MN_E_INVALID, "tensor_shape with g NULL");
        break;
    case 2:
        FZ_EXPECT(mn_graph_dump(z->g, z->devnull) == MN_OK, "graph_dump");
        FZ_EXPECT(mn_graph_dump(NULL, z->devnull) == MN_E_INVALID, "graph_dump(NULL)");
        FZ_EXPECT(mn_graph_dump(z->g, NULL) == MN_E_INVALID, "graph_dump(f = NULL)");
        break;
    case 3:
        (void)strlen(mn_graph_error(z->g));
        (void)strlen(mn_graph_error(NULL));
        (void)strlen(mn_status_str((mn_status)(int8_t)k));
        (void)strlen(mn_dtype_name((mn_dtype)(int8_t)k));
        (void)mn_dtype_size((mn_dtype)(int8_t)k);
        break;
    case 4: /* tensors of one graph given to another */
    {
        mn_graph *h = NULL;
        mn_tensor o;
        FZ_EXPECT(mn_graph_create(&h) == MN_OK && h, "graph_create");
        FZ_EXPECT(mn_add(h, &o, t, t) != MN_OK, "add on an empty graph accepted tensor %d", t);
        mn_graph_destroy(h);
        mn_graph_destroy(NULL);
        FZ_EXPECT(mn_graph_create(NULL) == MN_E_INVALID, "graph_create(NULL)");
        break;
    }
    default:
        z->null_out = true; /* the next constructor gets out = NULL */
        if (k & 0x40) z->null_graph = true;
        return;
    }
}

/* ---- the session ----------------------------------------------------------- */

/* Sizes fit the gate: every tensor small, few in all. */
static bool session_gate(fz *z) {
    if (z->npool == 0 || node_count(z) > FZ_MAX_NODES) return false;
    int64_t total = 0;
    for (int k = 0; k < z->npool; k++) {
        int64_t s[MN_MAX_RANK];
        int r = rank_of(z, z->pool[k], s);
        int64_t e = numel_of(r, s, FZ_MAX_NUMEL);
        if (e < 0) return false;
        total += e;
    }
    return total <= FZ_MAX_TOTAL;
}

static mn_session_options session_options(fz *z, bool training) {
    static const int64_t steps[8] = {0, 1, 2, 3, 10, -1, INT64_MAX, INT64_MIN};
    const uint8_t *h = z->h;
    mn_session_options o = mn_session_default_options();
    o.mode = training ? MN_MODE_TRAINING : MN_MODE_INFERENCE;
    int kind = h[1] & 3;
    o.optim = mn_optimizer_default(kind == 3 ? MN_OPTIM_ADAMW : (mn_optim_kind)kind);
    if (kind == 3 && (h[1] & 0x80)) o.optim.kind = (mn_optim_kind)7; /* unknown */
    fz hz = {.p = h, .n = FZ_HEADER, .i = 2};
    if (h[2]) o.optim.lr = pick_f(&hz);
    else hz.i++;
    if (h[3]) {
        float m = pick_f(&hz);
        if (o.optim.kind == MN_OPTIM_SGD) o.optim.momentum = m;
        else o.optim.beta1 = m;
        o.optim.nesterov = h[1] & 0x04;
    } else hz.i++;
    if (h[4]) {
        float v = pick_f(&hz);
        if (h[4] & 1) o.optim.weight_decay = v;
        else o.optim.eps = v;
    } else hz.i++;
    if (h[1] & 0x08) o.optim.clip_norm = pick_f(&hz);
    if (h[1] & 0x10) {
        o.optim.schedule = (h[1] & 0x40) ? (mn_lr_schedule)5 : MN_LR_WARMUP_COSINE;
        o.optim.warmup_steps = steps[h[6] & 7];
        o.optim.total_steps = steps[(h[6] >> 3) & 7];
        o.optim.min_lr = (h[6] & 0x40) ? o.optim.lr / 2 : 0.0f;
    }
    o.seed = h[7];
    o.nonfinite = (mn_nonfinite)((h[8] >> 4) & 3);
    if (o.nonfinite == 3) o.nonfinite = (mn_nonfinite)(h[8] & 0x40 ? -1 : 7);
    if (h[13] == 0xFD) o.backend = MN_BACKEND_VULKAN;
    if (h[13] == 0xFE) o.backend = (mn_backend_kind)7;
    if (h[13] == 0xFF) o.mode = (mn_mode)3;
    return o;
}

static bool options_sane(const mn_session_options *o) {
    return o->backend == MN_BACKEND_CPU && (o->mode == MN_MODE_INFERENCE || o->mode == MN_MODE_TRAINING) &&
           o->nonfinite >= MN_NONFINITE_SKIP && o->nonfinite <= MN_NONFINITE_UNCHECKED;
}

/* Creation fails only for the documented reasons; returns the session or NULL. */
static mn_session *make_session(fz *z, const mn_session_options *o) {
    mn_session *s = NULL;
    z->policy = o->nonfinite;
    mn_status st = mn_session_create(&s, z->g, o);
    if (g_trace)
        fprintf(stderr, "  session_create(%s) -> %s %s\n", o->mode == MN_MODE_TRAINING ? "training" : "inference",
                mn_status_str(st), st ? mn_session_error(s) : "");
    FZ_EXPECT(s != NULL, "session_create gave no handle (%s)", mn_status_str(st));
    if (st == MN_OK) return s;
    const char *msg = mn_session_error(s);
    FZ_EXPECT(msg[0], "session_create failed (%s) without a message", mn_status_str(st));
    /* a graph whose every constructor succeeded must not fail in the
     * library's own stages: no shape/dtype errors, no backend complaints */
    FZ_EXPECT(st == MN_E_INVALID || st == MN_E_UNSUPPORTED || st == MN_E_STATE || st == MN_E_NOMEM,
              "session_create: %s: %s", mn_status_str(st), msg);
    FZ_EXPECT(strncmp(msg, "cpu:", 4) != 0 && !strstr(msg, "memory plan"), "session_create: internal error: %s",
              msg);
    if (st == MN_E_INVALID && options_sane(o) && o->mode == MN_MODE_INFERENCE &&
        !strstr(msg, "a checkpoint of this model needs a safetensors header"))
        FZ_BUG("session_create (inference, valid options): %s: %s", mn_status_str(st), msg);
    FZ_EXPECT(mn_session_step(s) == MN_E_STATE && mn_session_run(s) == MN_E_STATE, "a dead session ran");
    mn_session_destroy(s);
    return NULL;
}

static void set_inputs(fz *z, mn_session *s, bool exact_only, uint8_t how) {
    for (int k = 0; k < z->ninputs; k++) {
        const named *in = &z->inputs[k];
        if (in->numel < 0) continue;
        size_t bytes = (size_t)in->numel * mn_dtype_size(in->dt);
        int v = exact_only ? 0 : (how >> (k % 4 * 2)) & 3;
        if (v == 1) bytes = bytes >= 4 ? bytes - 4 : bytes + 1; /* a size no dtype makes */
        if (v == 2) bytes += 4;
        void *buf = malloc(bytes ? bytes : 1);
        if (!buf) abort();
        fill(z, buf, bytes, in->dt);
        mn_status st = mn_session_set_input(s, in->name, v == 3 ? NULL : buf, bytes);
        if (v == 0)
            FZ_EXPECT(st == MN_OK, "set_input '%s' (%zu bytes): %s: %s", in->name, bytes, mn_status_str(st),
                      mn_session_error(s));
        else FZ_EXPECT(st != MN_OK, "set_input '%s' accepted %zu bytes (want %lld) or NULL data", in->name, bytes,
                       (long long)in->numel * (long long)mn_dtype_size(in->dt));
        free(buf);
    }
    FZ_EXPECT(mn_session_set_input(s, "no such input", "abcd", 4) == MN_E_NOT_FOUND, "set_input of an unknown name");
    FZ_EXPECT(mn_session_set_input(s, NULL, "abcd", 4) != MN_OK, "set_input(NULL name)");
}

static float **get_params(fz *z, mn_session *s);
static void free_params(fz *z, float **v);

/* One step or run. A step succeeds or, with the non-finite check on, reports
 * MN_E_NONFINITE; a skipped step leaves the parameters and the step count
 * as they were. */
static void exec(fz *z, mn_session *s, bool training, bool step, bool *ran) {
    const bool checked = z->policy != MN_NONFINITE_UNCHECKED;
    float **before = step && training && z->policy == MN_NONFINITE_SKIP ? get_params(z, s) : NULL;
    const int64_t steps = mn_session_step_count(s);
    mn_status st = step ? mn_session_step(s) : mn_session_run(s);
    if (g_trace)
        fprintf(stderr, "  %s -> %s %s\n", step ? "step" : "run", mn_status_str(st), st ? mn_session_error(s) : "");
    if (step && !training) {
        FZ_EXPECT(st == MN_E_STATE, "step on an inference session: %s", mn_status_str(st));
        return;
    }
    if (step && checked && st == MN_E_NONFINITE) {
        FZ_EXPECT(mn_session_error(s)[0], "MN_E_NONFINITE without a message");
        const bool skip = z->policy == MN_NONFINITE_SKIP;
        FZ_EXPECT(mn_session_step_count(s) == steps + !skip, "step count %lld after a non-finite step (was %lld)",
                  (long long)mn_session_step_count(s), (long long)steps);
        if (skip) {
            float **after = get_params(z, s);
            for (int k = 0; k < z->nparams; k++)
                if (before[k])
                    FZ_EXPECT(memcmp(before[k], after[k], (size_t)z->params[k].numel * 4) == 0,
                              "param '%s' changed in a skipped (non-finite) step", z->params[k].name);
            free_params(z, after);
        }
    } else {
        FZ_EXPECT(st == MN_OK, "%s: %s: %s", step ? "step" : "run", mn_status_str(st), mn_session_error(s));
        if (step) FZ_EXPECT(mn_session_step_count(s) == steps + 1, "step count did not advance");
    }
    free_params(z, before);
    *ran = true;
    float loss = 0;
    st = mn_session_loss(s, &loss);
    FZ_EXPECT(z->has_loss ? st == MN_OK : st == MN_E_STATE, "loss after %s: %s: %s", step ? "step" : "run",
              mn_status_str(st), mn_session_error(s));
}

static void read_outputs(fz *z, mn_session *s, uint8_t how) {
    for (int k = 0; k < z->noutputs; k++) {
        const named *o = &z->outputs[k];
        if (o->numel < 0) continue;
        size_t bytes = (size_t)o->numel * mn_dtype_size(o->dt);
        int v = (how >> (k % 4 * 2)) & 3;
        if (v == 1) bytes = bytes >= 4 ? bytes - 4 : bytes + 1; /* a size no dtype makes */
        if (v == 2) bytes += 4;
        void *buf = malloc(bytes ? bytes : 1);
        if (!buf) abort();
        mn_status st = mn_session_output(s, o->name, v == 3 ? NULL : buf, bytes);
        if (v == 0) FZ_EXPECT(st == MN_OK, "output '%s': %s: %s", o->name, mn_status_str(st), mn_session_error(s));
        else FZ_EXPECT(st != MN_OK, "output '%s' accepted a wrong buffer", o->name);
        size_t ne = 0;
        FZ_EXPECT(mn_session_numel(s, o->name, &ne) == MN_OK && ne == (size_t)o->numel, "numel '%s'", o->name);
        free(buf);
    }
    FZ_EXPECT(mn_session_output(s, "no such output", NULL, 0) == MN_E_NOT_FOUND, "output of an unknown name");
}

/* Reads every tracked parameter into a fresh buffer (count floats each). */
static float **get_params(fz *z, mn_session *s) {
    float **v = calloc((size_t)z->nparams + 1, sizeof *v);
    if (!v) abort();
    for (int k = 0; k < z->nparams; k++) {
        const named *p = &z->params[k];
        if (p->numel < 0) continue;
        v[k] = malloc((size_t)p->numel * 4 + 1);
        if (!v[k]) abort();
        mn_status st = mn_session_get_param(s, p->name, v[k], (size_t)p->numel);
        FZ_EXPECT(st == MN_OK, "get_param '%s': %s: %s", p->name, mn_status_str(st), mn_session_error(s));
    }
    return v;
}
static void free_params(fz *z, float **v) {
    for (int k = 0; v && k < z->nparams; k++) free(v[k]);
    free(v);
}

static void params_io(fz *z, mn_session *s, uint8_t how) {
    for (int k = 0; k < z->nparams; k++) {
        const named *p = &z->params[k];
        if (p->numel < 0) continue;
        size_t cnt = (size_t)p->numel;
        int v = (how >> (k % 4 * 2)) & 3;
        if (v == 1) cnt = cnt - 1;
        if (v == 2) cnt++;
        float *buf = malloc(cnt * 4 + 1);
        if (!buf) abort();
        fill(z, buf, cnt * 4, MN_F32);
        mn_status st = (how & 0x80) ? mn_session_get_param(s, p->name, v == 3 ? NULL : buf, cnt)
                                    : mn_session_set_param(s, p->name, v == 3 ? NULL : buf, cnt);
        if (v == 0)
            FZ_EXPECT(st == MN_OK, "get/set_param '%s': %s: %s", p->name, mn_status_str(st), mn_session_error(s));
        else FZ_EXPECT(st != MN_OK, "get/set_param '%s' accepted a wrong buffer", p->name);
        free(buf);
    }
    float f;
    FZ_EXPECT(mn_session_get_param(s, "no such param", &f, 1) == MN_E_NOT_FOUND, "get_param of an unknown name");
}

/* Loads the checkpoint into sessions of a small fixed model whose parameter
 * names overlap the fuzzer's (t0, t1, t2) with other shapes: any status, a
 * message on failure, no crash. */
static void load_elsewhere(fz *z, uint8_t how) {
    static const int64_t s0[2] = {2, 1}, s1[2] = {3, 2}, s2[1] = {1};
    mn_graph *h = NULL;
    mn_tensor p0, p1, p2, l;
    mn_init init = {MN_INIT_CONSTANT, 0.25f, 0};
    FZ_EXPECT(mn_graph_create(&h) == MN_OK, "graph_create");
    mn_status st = mn_graph_param(h, &p0, (how & 8) ? "t0" : "t5", 2, s0, init);
    st = st ? st : mn_graph_param(h, &p1, "t1", 2, s1, init);
    st = st ? st : mn_graph_param(h, &p2, "t2", 1, s2, init);
    st = st ? st : mn_matmul(h, &l, p1, p0);
    st = st ? st : mn_mean(h, &l, l, MN_ALL_AXES, false);
    st = st ? st : mn_add(h, &l, l, p2);
    st = st ? st : mn_mean(h, &l, l, MN_ALL_AXES, false);
    st = st ? st : mn_graph_loss(h, l);
    FZ_EXPECT(st == MN_OK, "the fixed model: %s", mn_graph_error(h));
    for (int k = 0; k < 2; k++) {
        mn_session_options o = mn_session_default_options();
        o.mode = k ? MN_MODE_TRAINING : MN_MODE_INFERENCE;
        o.optim = mn_optimizer_default((mn_optim_kind)((how >> 4) % 3));
        mn_session *s = NULL;
        FZ_EXPECT(mn_session_create(&s, h, &o) == MN_OK, "the fixed model's session: %s", mn_session_error(s));
        st = mn_session_load(s, z->path);
        FZ_EXPECT(st == MN_OK || mn_session_error(s)[0], "load elsewhere failed (%s) without a message",
                  mn_status_str(st));
        if (k) FZ_EXPECT(mn_session_step(s) == MN_OK, "step after a load elsewhere: %s", mn_session_error(s));
        else FZ_EXPECT(mn_session_run(s) == MN_OK, "run after a load elsewhere: %s", mn_session_error(s));
        mn_session_destroy(s);
    }
    mn_graph_destroy(h);
}

/* Save, scramble the parameters, load: the saved values come back. */
static void save_load(fz *z, mn_session *s, uint8_t how) {
    if (how & 1) {
        static const char *keys[6] = {"note", "", "meganeura.step", "format", "bad\xff", "k\"q"};
        static const char *vals[4] = {"v", "", "bad\xc3", "line\nbreak \"q\" \\"};
        mn_status st = mn_session_set_meta(s, keys[(how >> 1) % 6], vals[(how >> 4) & 3]);
        FZ_EXPECT(st == MN_OK || st == MN_E_INVALID, "set_meta: %s", mn_status_str(st));
        FZ_EXPECT(mn_session_set_meta(s, NULL, "v") == MN_E_INVALID, "set_meta(NULL key)");
    }
    mn_status st = mn_session_save(s, z->path);
    if (g_trace) fprintf(stderr, "  save -> %s %s\n", mn_status_str(st), st ? mn_session_error(s) : "");
    if (st != MN_OK) {
        FZ_EXPECT(mn_session_error(s)[0], "save failed (%s) without a message", mn_status_str(st));
        return;
    }
    float **before = get_params(z, s);
    params_io(z, s, 0); /* scramble */
    int64_t steps = mn_session_step_count(s);
    st = mn_session_load(s, z->path);
    if (st == MN_E_FORMAT && strstr(mn_session_error(s), "the run that saved it diverged")) {
        /* loading refuses NaN and infinity: fine if something saved held
         * one (a parameter we can see, or optimizer state: steps that may
         * apply non-finite updates, or Adam's v overflowing f32 for huge
         * weights with L2 weight decay, all gradients finite) */
        bool nonfinite = z->policy != MN_NONFINITE_SKIP || strstr(mn_session_error(s), "tensor 'optim.");
        for (int k = 0; k < z->nparams; k++)
            for (int64_t i = 0; before[k] && i < z->params[k].numel; i++) nonfinite |= !isfinite(before[k][i]);
        FZ_EXPECT(nonfinite, "load refused finite values: %s", mn_session_error(s));
        free_params(z, before);
        return;
    }
    FZ_EXPECT(st == MN_OK, "load of the checkpoint just saved: %s: %s", mn_status_str(st), mn_session_error(s));
    float **after = get_params(z, s);
    for (int k = 0; k < z->nparams; k++)
        if (before[k])
            FZ_EXPECT(memcmp(before[k], after[k], (size_t)z->params[k].numel * 4) == 0,
                      "param '%s' differs after save + load", z->params[k].name);
    FZ_EXPECT(mn_session_step_count(s) == steps, "step count %lld after load, %lld saved",
              (long long)mn_session_step_count(s), (long long)steps);
    free_params(z, before);
    free_params(z, after);
    char val[64], err[128];
    static const size_t caps[4] = {64, 1, 2, 0};
    st = mn_checkpoint_meta(z->path, (how & 2) ? "meganeura.step" : "note", val, caps[(how >> 2) & 3], err, sizeof err);
    FZ_EXPECT(st == MN_OK || st == MN_E_NOT_FOUND || st == MN_E_INVALID, "checkpoint_meta: %s", mn_status_str(st));
    st = mn_checkpoint_meta(z->path, "format", val, sizeof val, NULL, 0);
    FZ_EXPECT(st == MN_OK && strcmp(val, "pt") == 0, "checkpoint_meta(format): %s", mn_status_str(st));
    if (how & 0x40) load_elsewhere(z, how);
}

/* Resuming is exact: save, take n steps, load, take the same n steps with
 * the same inputs: the parameters match bit for bit (optimizer state, step
 * count and schedule came back). Not for graphs with state tensors (KV
 * caches are scratch, not saved). */
static void resume_check(fz *z, mn_session *s, bool training, int n) {
    if (!training || z->has_state || mn_session_save(s, z->path) != MN_OK) return;
    const uint64_t rng = z->rng;
    bool ran = false;
    for (int k = 0; k < n; k++) {
        set_inputs(z, s, true, 0);
        exec(z, s, true, true, &ran);
    }
    float **first = get_params(z, s);
    const int64_t steps = mn_session_step_count(s);
    if (mn_session_load(s, z->path) == MN_OK) { /* refused if it holds NaN/inf */
        z->rng = rng;
        for (int k = 0; k < n; k++) {
            set_inputs(z, s, true, 0);
            exec(z, s, true, true, &ran);
        }
        float **again = get_params(z, s);
        FZ_EXPECT(mn_session_step_count(s) == steps, "step count %lld after resuming, %lld before",
                  (long long)mn_session_step_count(s), (long long)steps);
        for (int k = 0; k < z->nparams; k++)
            for (int64_t i = 0; first[k] && i < z->params[k].numel; i++)
                FZ_EXPECT(memcmp(&first[k][i], &again[k][i], 4) == 0 || (isnan(first[k][i]) && isnan(again[k][i])),
                          "param '%s'[%lld] is %.9g after %d steps, %.9g after a save, load and the same steps",
                          z->params[k].name, (long long)i, (double)first[k][i], n, (double)again[k][i]);
        free_params(z, again);
    }
    free_params(z, first);
}

static void dumps(fz *z, mn_session *s, uint8_t how) {
    static const char *what[5] = {"graph", "schedule", "memplan", "nonsense", NULL};
    mn_status st = mn_session_dump(s, what[how % 5], z->devnull);
    FZ_EXPECT((how % 5 < 3) == (st == MN_OK), "session_dump(%s): %s", what[how % 5] ? what[how % 5] : "NULL",
              mn_status_str(st));
    size_t peak = 0, sum = 0;
    FZ_EXPECT(mn_session_memory(s, &peak, &sum) == MN_OK, "session_memory");
    FZ_EXPECT(mn_session_memory(s, NULL, NULL) == MN_OK, "session_memory(NULL, NULL)");
    (void)mn_session_lr(s);
    (void)mn_session_step_count(s);
}

/* A second session of the other mode on a shared device, loading the first
 * one's checkpoint if there is one. */
static void second_session(fz *z, mn_session_options o, bool training, bool saved) {
    mn_device *d = NULL;
    mn_status st = mn_device_open(&d, MN_BACKEND_CPU);
    FZ_EXPECT(st == MN_OK && d, "device_open(cpu): %s", mn_status_str(st));
    o.device = d;
    o.mode = training ? MN_MODE_INFERENCE : MN_MODE_TRAINING;
    mn_session *a = make_session(z, &o), *b = make_session(z, &o);
    mn_device_close(d); /* the sessions keep it alive */
    bool ran = false;
    for (int k = 0; k < 2; k++) {
        mn_session *s = k ? b : a;
        if (!s) continue;
        if (saved) (void)mn_session_load(s, z->path);
        set_inputs(z, s, true, 0);
        exec(z, s, !training, !training, &ran);
        read_outputs(z, s, 0);
    }
    mn_session_destroy(a);
    mn_session_destroy(b);
}

/* Every tracked output and the loss (if any) after the steps/runs of
 * `pattern`, in one buffer: the observable result of a session. */
static float *observe(fz *z, mn_session *s, bool training, uint8_t pattern, size_t *len) {
    size_t n = 1;
    for (int k = 0; k < z->noutputs; k++) n += z->outputs[k].numel > 0 ? (size_t)z->outputs[k].numel : 0;
    for (int k = 0; k < z->nparams; k++) n += z->params[k].numel > 0 ? (size_t)z->params[k].numel : 0;
    float *v = calloc(n, sizeof *v);
    if (!v) abort();
    bool ran = false;
    set_inputs(z, s, true, 0);
    for (int k = 0; k < 1 + (pattern & 1); k++) exec(z, s, training, training && !(pattern & (2 << k)), &ran);
    size_t at = 1;
    if (z->has_loss) FZ_EXPECT(mn_session_loss(s, &v[0]) == MN_OK, "loss: %s", mn_session_error(s));
    for (int k = 0; k < z->noutputs; k++) {
        const named *o = &z->outputs[k];
        if (o->numel <= 0) continue;
        mn_status st = mn_session_output(s, o->name, v + at, (size_t)o->numel * mn_dtype_size(o->dt));
        FZ_EXPECT(st == MN_OK, "output '%s': %s: %s", o->name, mn_status_str(st), mn_session_error(s));
        at += (size_t)o->numel;
    }
    for (int k = 0; k < z->nparams; k++) {
        const named *p = &z->params[k];
        if (p->numel <= 0) continue;
        mn_status st = mn_session_get_param(s, p->name, v + at, (size_t)p->numel);
        FZ_EXPECT(st == MN_OK, "get_param '%s': %s: %s", p->name, mn_status_str(st), mn_session_error(s));
        at += (size_t)p->numel;
    }
    *len = at;
    return v;
}

/* Differential check of the scheduling and memory planning: the same graph
 * with every tensor pinned as an output (no buffer reuse, no dead code) must
 * compute bit-identical outputs, loss and updated parameters. */
static void differential(fz *z, bool training) {
    mn_session_options o = session_options(z, training);
    mn_session *a = make_session(z, &o);
    if (!a) return;
    const uint64_t rng = z->rng;
    const uint8_t pattern = z->h[8];
    size_t na, nb;
    float *va = observe(z, a, training, pattern, &na);
    mn_session_destroy(a);
    if (training && !(pattern & 1) && !z->has_dropout) {
        /* one training step's forward pass equals an inference run (the
         * parameters start equal; dropout is the only op that differs) */
        mn_session_options oi = o;
        oi.mode = MN_MODE_INFERENCE;
        mn_session *c = make_session(z, &oi);
        FZ_EXPECT(c != NULL, "an inference session of a graph that trains");
        size_t nc;
        z->rng = rng;
        float *vc = observe(z, c, false, 0, &nc);
        mn_session_destroy(c);
        z->policy = o.nonfinite;
        FZ_EXPECT(nc == na, "differential: %zu vs %zu values", na, nc);
        /* the loss, then each output but those that are a parameter's
         * storage (read after the step, they show its update) */
        for (int k = -1, at = 0; k < z->noutputs; k++) {
            size_t len = k < 0 ? 1 : z->outputs[k].numel > 0 ? (size_t)z->outputs[k].numel : 0;
            int pk = k < 0 ? -1 : pool_index(z, z->outputs[k].t);
            if (!(pk >= 0 && z->pool_param[pk]))
                for (size_t i = (size_t)at; i < (size_t)at + len; i++)
                    FZ_EXPECT(memcmp(&va[i], &vc[i], 4) == 0 || (isnan(va[i]) && isnan(vc[i])),
                              "differential: value %zu (%s) is %.9g in a training step, %.9g in an inference run", i,
                              k < 0 ? "the loss" : z->outputs[k].name, (double)va[i], (double)vc[i]);
            at += (int)len;
        }
        free(vc);
    }
    for (int k = 0; k < z->npool; k++) {
        char name[32];
        snprintf(name, sizeof name, "pin%d", k);
        if (mn_graph_output(z->g, z->pool[k], NULL) != MN_OK) (void)mn_graph_output(z->g, z->pool[k], name);
    }
    mn_session *b = NULL;
    mn_status st = mn_session_create(&b, z->g, &o);
    FZ_EXPECT(st == MN_OK, "session_create with every tensor an output: %s: %s (without: ok)", mn_status_str(st),
              mn_session_error(b));
    z->rng = rng;
    float *vb = observe(z, b, training, pattern, &nb);
    mn_session_destroy(b);
    FZ_EXPECT(na == nb, "differential: %zu vs %zu values", na, nb);
    for (size_t i = 0; i < na; i++)
        FZ_EXPECT(memcmp(&va[i], &vb[i], 4) == 0 || (isnan(va[i]) && isnan(vb[i])),
                  "differential: value %zu is %.9g with buffer reuse, %.9g with every tensor pinned", i,
                  (double)va[i], (double)vb[i]);
    free(va);
    free(vb);
}

static void run_session(fz *z) {
    const bool training = z->h[0] & 2;
    if (z->h[0] & 0x20) {
        differential(z, training);
        return;
    }
    mn_session_options o = session_options(z, training);
    mn_session *s = make_session(z, &o);
    if (!s) return;
    if ((z->h[15] & 0x80) && z->npool) { /* the session has its own copy: later graph edits do not reach it */
        mn_tensor t = MN_NONE;
        if (mn_neg(z->g, &t, z->pool[z->npool - 1]) == MN_OK && mn_graph_output(z->g, t, "late.out") == MN_OK) {
            size_t n = 0;
            FZ_EXPECT(mn_session_numel(s, "late.out", &n) == MN_E_NOT_FOUND,
                      "a graph edit after session_create reached the session");
        }
    }
    bool ran = false, saved = false;
    if (!more(z)) { /* the default script */
        set_inputs(z, s, true, 0);
        int n = 1 + (z->h[8] & 3);
        for (int k = 0; k < n; k++) exec(z, s, training, training && !(z->h[8] & (4 << k)), &ran);
        read_outputs(z, s, 0);
        if (z->h[0] & 4) {
            save_load(z, s, z->h[14]);
            saved = true;
        }
        if (z->h[0] & 8) dumps(z, s, z->h[15]);
    } else {
        for (int k = 0; k < FZ_MAX_SESSION_ACTIONS && more(z); k++) {
            uint8_t a = u8(z), arg = u8(z);
            switch (a % 11) {
            case 0: set_inputs(z, s, true, 0); break;
            case 1: set_inputs(z, s, false, arg); break;
            case 2: exec(z, s, training, true, &ran); break;
            case 3: exec(z, s, training, false, &ran); break;
            case 4: read_outputs(z, s, arg); break;
            case 5: params_io(z, s, arg); break;
            case 6: save_load(z, s, arg), saved = true; break;
            case 7: dumps(z, s, arg); break;
            case 8: {
                float l;
                mn_status st = mn_session_loss(s, arg & 1 ? NULL : &l);
                FZ_EXPECT(st != MN_OK || !(arg & 1), "loss(NULL) accepted");
                break;
            }
            case 9: second_session(z, o, training, saved); break;
            default: resume_check(z, s, training, 1 + arg % 3), saved = true; break;
            }
        }
    }
    mn_session_destroy(s);
    if (saved) unlink(z->path);
}

/* Options the library must refuse, on any graph. */
static void bad_sessions(fz *z) {
    mn_session *s = NULL;
    FZ_EXPECT(mn_session_create(NULL, z->g, NULL) == MN_E_INVALID, "session_create(NULL out)");
    mn_status st = mn_session_create(&s, NULL, NULL);
    FZ_EXPECT(st == MN_E_INVALID, "session_create(NULL graph): %s", mn_status_str(st));
    mn_session_destroy(s);
    mn_session_destroy(NULL);
    FZ_EXPECT(mn_session_step(NULL) == MN_E_INVALID && mn_session_run(NULL) == MN_E_INVALID, "step/run(NULL)");
    (void)strlen(mn_session_error(NULL));
}

/* ---- entry point -------------------------------------------------------------- */

static void quiet(mn_log_level level, const char *msg, void *user) {
    (void)level, (void)msg, (void)user;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *devnull;
    if (!devnull) {
        devnull = fopen("/dev/null", "w");
        if (!devnull) abort();
        mn_set_log(quiet, NULL);
        g_trace = getenv("MN_FUZZ_TRACE") != NULL;
    }
    fz zz, *z = &zz;
    memset(z, 0, sizeof *z);
    z->devnull = devnull;
    /* checkpoints on a tmpfs when there is one: a save syncs to disk */
    static const char *dir;
    if (!dir) dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(z->path, sizeof z->path, "%s/mn-fuzz-graph-%ld.safetensors", dir, (long)getpid());
    for (size_t k = 0; k < FZ_HEADER; k++) z->h[k] = k < size ? data[k] : 0;
    z->p = data;
    z->n = size;
    z->i = size < FZ_HEADER ? size : FZ_HEADER;
    z->rng = (uint64_t)z->h[7] * 0x100000001B3ull ^ z->h[14];
    z->specials = z->h[14] & 3;
    for (int k = 0; k < 4; k++) z->vocab[k] = 1 + z->h[9 + k] % 8;
    if (mn_graph_create(&z->g) != MN_OK || !z->g) abort();
    if (mn_graph_create(&z->g2) != MN_OK || !z->g2) abort();
    if (mn_graph_input(z->g2, &z->foreign, "foreign", MN_F32, 1, (const int64_t[]){2}) != MN_OK) abort();

    for (int k = 0; k < FZ_MAX_INSNS && more(z); k++) {
        uint8_t op = u8(z);
        if (op == 0xFF) break;
        switch (op % FZ_NOPS) {
        case 0: case 1: case 2: op_source(z, 0); break; /* f32 input */
        case 3: op_source(z, 1); break;                 /* i32 input */
        case 4: case 5: op_source(z, 2); break;         /* param */
        case 6: op_source(z, 3); break;                 /* constant */
        case 7: op_source(z, 4); break;                 /* scalar */
        case 8: op_source(z, 5); break;                 /* state */
        case 9: z->null_out = false, op_marker(z, 0); break;  /* output */
        case 10: z->null_out = false, op_marker(z, 1); break; /* loss */
        case 11: z->null_out = false, op_marker(z, 2 + (op / FZ_NOPS) % 2); break; /* lr_mult, freeze */
        case 12: op_fold(z); break;
        case 13: op_query(z); continue; /* may set null_out/null_graph for the next call */
        case 14: z->null_out = false, op_param_for(z); break;
        default: op_compute(z, (uint8_t)(op % FZ_NOPS - 15), (op / FZ_NOPS) & 1); break;
        }
        z->null_graph = z->null_out = false;
    }
    z->null_graph = z->null_out = false; /* a trailing query may have set them */

    /* training programs without a loss get one: the mean of the last f32
     * tensor (header bit 0x10 keeps them without) */
    if ((z->h[0] & 2) && !(z->h[0] & 0x10) && !z->has_loss && z->npool > 0) {
        int k = z->npool - 1;
        while (k > 0 && z->pool_i32[k]) k--;
        mn_tensor l = MN_NONE;
        int32_t before = z->count;
        mn_status st = mn_mean(z->g, &l, z->pool[k], MN_ALL_AXES, false);
        after_call(z, "mean (automatic loss)", st, before, &l, st == MN_OK, true);
        if (st == MN_OK) {
            before = z->count;
            st = mn_graph_loss(z->g, l);
            after_call(z, "graph_loss (automatic)", st, before, NULL, 0, true);
            z->has_loss = st == MN_OK;
        }
    }
    if ((z->h[0] & 0x80) && mn_graph_dump(z->g, devnull) != MN_OK) FZ_BUG("graph_dump");
    if (g_trace) mn_graph_dump(z->g, stderr);
    if (z->h[0] & 0x40) bad_sessions(z);
    if ((z->h[0] & 1) && session_gate(z)) run_session(z);
    else if (g_trace) fprintf(stderr, "  no session (%s)\n", z->h[0] & 1 ? "over the size gate" : "header bit 0 clear");

    mn_graph_destroy(z->g);
    mn_graph_destroy(z->g2);
    for (int k = 0; k < z->ninputs; k++) free(z->inputs[k].name);
    for (int k = 0; k < z->nparams; k++) free(z->params[k].name);
    for (int k = 0; k < z->noutputs; k++) free(z->outputs[k].name);
    return 0;
}
