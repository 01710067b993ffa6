/* bench_bundle.c - what an inference bundle saves when a session starts:
 * session build time with cold kernel caches (shaderc compiles every
 * kernel), with warm caches, and from the bundle with empty caches and the
 * compiler forbidden (MEGANEURA_FAULT_NO_SHADERC), on the Vulkan backend.
 *
 *   meganeura_bench_bundle [--model mlp|cnn] [--config FILE.json [--seq T]] [--dir DIR]
 *
 * --model builds the MNIST MLP (784-128-10) or CNN of `meganeura train
 * mnist` at batch 64; --config a Llama decoding graph of that config.json
 * (random weights; T tokens per run, default 1, KV caches of 256 rows).
 * Every build uses its own empty $XDG_CACHE_HOME under DIR (default a
 * folder under /tmp, removed at the end), so "cold" is cold wherever it
 * runs. Prints one JSON line per measurement (ms, kernels compiled / from
 * the cache / from the bundle, bundle bytes) and checks that the bundle's
 * session computes the exporting session's bits.
 *
 * Does not: measure the first run's pipeline compilation by the driver
 * beyond what session creation does (Vulkan creates pipelines there).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "meganeura.h"
#include "meganeura_models.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void die(const char *what, const char *msg) {
    fprintf(stderr, "bench_bundle: %s: %s\n", what, msg);
    exit(1);
}

#define TRY(call, g)                                                                                               \
    do {                                                                                                           \
        if ((call) != MN_OK) die(#call, mn_graph_error(g));                                                        \
    } while (0)

static mn_graph *mnist(bool cnn) {
    mn_graph *g;
    mn_graph_create(&g);
    const int64_t B = 64;
    mn_tensor x, h, w, b, t;
    const mn_init ku = {MN_INIT_KAIMING_UNIFORM, 0, 0}, z = {MN_INIT_ZEROS, 0, 0};
    TRY(mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){B, 784}), g);
    if (cnn) {
        const mn_conv2d_params cp = {.padding = {1, 1}};
        const mn_pool2d_params pp = {.kernel = {2, 2}};
        TRY(mn_reshape(g, &h, x, 4, (int64_t[]){B, 1, 28, 28}), g);
        int64_t cin = 1;
        const int64_t couts[2] = {8, 16};
        for (int l = 0; l < 2; l++) {
            char wn[32], bn[32];
            snprintf(wn, sizeof wn, "conv%d.weight", l + 1);
            snprintf(bn, sizeof bn, "conv%d.bias", l + 1);
            TRY(mn_graph_param(g, &w, wn, 4, (int64_t[]){couts[l], cin, 3, 3}, ku), g);
            TRY(mn_graph_param(g, &b, bn, 1, (int64_t[]){couts[l]}, z), g);
            TRY(mn_conv2d(g, &t, h, w, b, &cp), g);
            TRY(mn_relu(g, &t, t), g);
            TRY(mn_max_pool2d(g, &h, t, &pp), g);
            cin = couts[l];
        }
        TRY(mn_reshape(g, &h, h, 2, (int64_t[]){B, 784}), g);
        TRY(mn_graph_param(g, &w, "fc.weight", 2, (int64_t[]){784, 10}, ku), g);
        TRY(mn_graph_param(g, &b, "fc.bias", 1, (int64_t[]){10}, z), g);
    } else {
        TRY(mn_graph_param(g, &w, "fc1.weight", 2, (int64_t[]){784, 128}, ku), g);
        TRY(mn_graph_param(g, &b, "fc1.bias", 1, (int64_t[]){128}, z), g);
        TRY(mn_matmul(g, &h, x, w), g);
        TRY(mn_add(g, &h, h, b), g);
        TRY(mn_relu(g, &h, h), g);
        TRY(mn_graph_param(g, &w, "fc2.weight", 2, (int64_t[]){128, 10}, ku), g);
        TRY(mn_graph_param(g, &b, "fc2.bias", 1, (int64_t[]){10}, z), g);
    }
    TRY(mn_matmul(g, &t, h, w), g);
    TRY(mn_add(g, &t, t, b), g);
    TRY(mn_graph_output(g, t, "logits"), g);
    return g;
}

static mn_graph *llama(const char *config, int64_t seq) {
    char err[512];
    mn_llama_config c;
    if (mn_llama_config_load(&c, config, err, sizeof err)) die(config, err);
    mn_llama_options o = mn_llama_default_options();
    o.kind = MN_LLAMA_DECODE;
    o.seq_len = seq;
    o.max_seq = 256;
    mn_graph *g;
    mn_graph_create(&g);
    mn_llama *m;
    if (mn_llama_create(&m, g, &c, &o)) die("mn_llama_create", mn_llama_error(m));
    mn_llama_destroy(m);
    return g;
}

static char g_root[256];

/* A fresh, empty cache folder as $XDG_CACHE_HOME. */
static void fresh_cache(const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_root, name);
    mkdir(p, 0755);
    setenv("XDG_CACHE_HOME", p, 1);
}

static mn_session *build(const mn_graph *g, const char *bundle, double *ms, mn_kernel_stats *k) {
    mn_session_options o = mn_session_default_options();
    o.backend = MN_BACKEND_VULKAN;
    mn_session *s = NULL;
    const double t0 = now_ms();
    mn_status st = bundle ? mn_session_create_from_bundle(&s, bundle, &o) : mn_session_create(&s, g, &o);
    *ms = now_ms() - t0;
    if (st) die(bundle ? "mn_session_create_from_bundle" : "mn_session_create", mn_session_error(s));
    mn_session_kernel_stats(s, k);
    return s;
}

static void line(const char *model, const char *what, double ms, const mn_kernel_stats *k, long long bytes) {
    printf("{\"bench\": \"bundle\", \"model\": \"%s\", \"build\": \"%s\", \"ms\": %.1f, \"compiled\": %d, "
           "\"cached\": %d, \"bundled\": %d, \"bundle_pipelines\": %s, \"bundle_bytes\": %lld}\n",
           model, what, ms, k->compiled, k->cached, k->bundled, k->bundle_pipelines ? "true" : "false", bytes);
    fflush(stdout);
}

/* The first output of g (logits) after a run with zero inputs. */
static float *outputs(mn_session *s, size_t *n) {
    const char *name = "logits";
    if (mn_session_numel(s, name, n)) die("numel logits", mn_session_error(s));
    if (mn_session_run(s)) die("run", mn_session_error(s));
    float *v = malloc(*n * 4);
    if (mn_session_output(s, name, v, *n * 4)) die("output", mn_session_error(s));
    return v;
}

static void rm_rf(const char *p) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
    if (system(cmd) != 0) fprintf(stderr, "bench_bundle: could not remove %s\n", p);
}

int main(int argc, char **argv) {
    const char *model = "mlp", *config = NULL, *dir = NULL;
    int64_t seq = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--config") && i + 1 < argc) config = argv[++i];
        else if (!strcmp(argv[i], "--seq") && i + 1 < argc) seq = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--model mlp|cnn] [--config FILE.json [--seq T]] [--dir DIR]\n", argv[0]);
            return 2;
        }
    }
    if (dir) snprintf(g_root, sizeof g_root, "%s", dir), mkdir(g_root, 0755);
    else if (!mkdtemp(strcpy(g_root, "/tmp/mn-bench-bundle-XXXXXX"))) die("mkdtemp", "failed");
    const char *name = config ? config : model;
    mn_graph *g = config ? llama(config, seq < 1 ? 1 : seq) : mnist(!strcmp(model, "cnn"));
    unsetenv("MEGANEURA_NO_KERNEL_CACHE");
    unsetenv("MEGANEURA_FAULT_NO_SHADERC");
    double ms;
    mn_kernel_stats k;
    /* cold: an empty cache, every kernel compiled */
    fresh_cache("cold");
    mn_session *s = build(g, NULL, &ms, &k);
    line(name, "cold", ms, &k, 0);
    mn_session_destroy(s);
    /* warm: the cache the cold build filled */
    s = build(g, NULL, &ms, &k);
    line(name, "warm", ms, &k, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/model.mnb", g_root);
    const double t0 = now_ms();
    if (mn_session_export_bundle(s, path)) die("export", mn_session_error(s));
    struct stat sb;
    stat(path, &sb);
    line(name, "export", now_ms() - t0, &k, (long long)sb.st_size);
    size_t n;
    float *ref = outputs(s, &n);
    mn_session_destroy(s);
    /* the bundle: empty caches, no compiler */
    fresh_cache("bundle");
    setenv("MEGANEURA_NO_KERNEL_CACHE", "1", 1);
    setenv("MEGANEURA_FAULT_NO_SHADERC", "1", 1);
    s = build(NULL, path, &ms, &k);
    line(name, "bundle", ms, &k, (long long)sb.st_size);
    size_t n2;
    float *got = outputs(s, &n2);
    const bool same = n == n2 && !memcmp(ref, got, n * 4);
    printf("{\"bench\": \"bundle\", \"model\": \"%s\", \"same_bits\": %s}\n", name, same ? "true" : "false");
    mn_session_destroy(s);
    free(ref), free(got);
    mn_graph_destroy(g);
    if (!dir) rm_rf(g_root);
    return same ? 0 : 1;
}
