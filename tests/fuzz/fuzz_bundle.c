/* fuzz_bundle.c - libFuzzer target for the inference-bundle reader
 * (src/io/bundle.c, src/session/bundle.c, src/graph/serial.c).
 *
 * Does: the first byte picks how the rest is read:
 *   0  a bundle file as it is: the container's checks (magic, version,
 *      sizes, the table and its SHA-256, every section's SHA-256), then every
 *      section decoded (info, graph, weights, kernels, pipeline data);
 *   1  the same with every checksum recomputed first (and the size field
 *      set), so mutations inside sections reach their decoders instead of
 *      stopping at a checksum;
 *   2  a graph section alone.
 * A bundle that is accepted and whose tensors are small becomes a CPU
 * inference session, which runs (inputs zero) and must run; a graph section
 * that is accepted must encode back to the very same bytes (the format is
 * canonical: what is read is what was written), and the graph a bundle's
 * session keeps must dump exactly as the decoded one. A rejected input must
 * come with a message. A broken promise or an MN_ASSERT aborts, so
 * libFuzzer reports it.
 *
 * Does not: write files, run Vulkan (the fuzz build has no Vulkan backend;
 * the kernels section is still decoded and checked).
 * Build: clang -fsanitize=fuzzer,address,undefined (-DMN_FUZZ=ON); run with
 * tests/fuzz/run_fuzz.sh; tests/test_bundle.c replays tests/fuzz/corpus_bundle.
 */
#include "core/sha256.h"
#include "core/wire.h"
#include "graph/serial.h"
#include "io/bundle.h"
#include "session/bundle.h"
#include "session/session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Sessions only for bundles whose tensors hold at most this much. */
#define FUZZ_MAX_BYTES (8u << 20)

/* A graph dump as a string (malloc'ed). */
static char *dump_of(const mn_graph *g) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    MN_ASSERT(f);
    mn_graph_dump(g, f);
    fclose(f);
    return buf;
}

/* The session of an accepted bundle: runs, and keeps the graph decoded. */
static void exercise(mn_session *s, const uint8_t *data, size_t size) {
    MN_ASSERT(!s->dead && s->user);
    /* the graph again, straight from the bytes: the session holds the same */
    bundle_file bf;
    char err[512];
    MN_ASSERT(bundle_open_mem(&bf, data, size, err, sizeof err) == MN_OK);
    uint8_t *p;
    size_t n;
    MN_ASSERT(bundle_read(&bf, "graph", UINT64_MAX, &p, &n, err, sizeof err) == MN_OK);
    mn_graph *g;
    MN_ASSERT(graph_deserialize(&g, p, n, err, sizeof err) == MN_OK);
    char *a = dump_of(g), *b = dump_of(s->user);
    MN_ASSERT(strcmp(a, b) == 0);
    free(a), free(b), free(p);
    mn_graph_destroy(g);
    bundle_close(&bf);
    for (int32_t i = 0; i < s->nuser; i++) {
        const node *nd = &s->g->nodes[i];
        if (nd->op != OP_INPUT) continue;
        const size_t bytes = (size_t)node_numel(nd) * 4;
        void *z = calloc(1, bytes + 1);
        MN_ASSERT(z);
        MN_ASSERT(mn_session_set_input(s, nd->name, z, bytes) == MN_OK);
        free(z);
    }
    MN_ASSERT(mn_session_run(s) == MN_OK);
}

/* data as a bundle, checksums fixed first when fix is set. */
static void read_bundle(const uint8_t *data, size_t size, bool fix) {
    uint8_t *copy = NULL;
    if (fix && size >= BUNDLE_HEADER) {
        copy = malloc(size);
        MN_ASSERT(copy);
        memcpy(copy, data, size);
        le64_put(copy + 16, size);
        const uint32_t n = le32_get(copy + 12);
        if (n >= 1 && n <= BUNDLE_MAX_SECTIONS && size >= BUNDLE_HEADER + (uint64_t)n * BUNDLE_ENTRY) {
            for (uint32_t i = 0; i < n; i++) {
                uint8_t *e = copy + BUNDLE_HEADER + (size_t)i * BUNDLE_ENTRY;
                const uint64_t off = le64_get(e + 8), len = le64_get(e + 16);
                if (off <= size && len <= size - off) mn_sha256_digest(e + 24, copy + off, (size_t)len);
            }
            mn_sha256_digest(copy + 24, copy + BUNDLE_HEADER, (size_t)n * BUNDLE_ENTRY);
        }
        data = copy;
    }
    mn_session_options opt = mn_session_default_options();
    mn_session *s = NULL;
    char err[512] = "";
    mn_status st = session_bundle_mem(&s, data, size, &opt, FUZZ_MAX_BYTES, err, sizeof err);
    if (st) MN_ASSERT(err[0] != 0);
    else if (s) exercise(s, data, size);
    mn_session_destroy(s);
    free(copy);
}

/* data as a graph section: accepted bytes encode back to themselves. */
static void read_graph(const uint8_t *data, size_t size) {
    mn_graph *g = NULL;
    char err[512] = "";
    mn_status st = graph_deserialize(&g, data, size, err, sizeof err);
    if (st) {
        MN_ASSERT(err[0] != 0 && g == NULL);
        return;
    }
    mn_wbuf w = {0};
    MN_ASSERT(graph_serialize(g, &w, err, sizeof err) == MN_OK);
    MN_ASSERT(w.n == size && memcmp(w.p, data, size) == 0);
    wb_free(&w);
    uint64_t total = 0;
    for (int32_t i = 0; i < g->n && total <= FUZZ_MAX_BYTES; i++) total += (uint64_t)node_numel(&g->nodes[i]) * 4;
    if (total <= FUZZ_MAX_BYTES) { /* a graph the rules accepted makes a session (parameters initialised) */
        mn_session_options opt = mn_session_default_options();
        mn_session *s = NULL;
        st = mn_session_create(&s, g, &opt);
        MN_ASSERT(st == MN_OK || (s && mn_session_error(s)[0]));
        if (!st) MN_ASSERT(mn_session_run(s) == MN_OK);
        mn_session_destroy(s);
    }
    mn_graph_destroy(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool quiet;
    if (!quiet) mn_set_log(NULL, NULL), quiet = true;
    if (size < 1) return 0;
    switch (data[0] % 3) {
    case 0: read_bundle(data + 1, size - 1, false); break;
    case 1: read_bundle(data + 1, size - 1, true); break;
    default: read_graph(data + 1, size - 1); break;
    }
    return 0;
}
