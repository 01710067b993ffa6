/* bench_build.c - how session building and checkpoints scale (never a unit test).
 *
 *   meganeura_bench_build [--nodes N] [--params N] [--ckpt N] [--dir PATH]
 *                         [--smollm N] [--resnet N] [--image S] [--shared-device]
 *                         [--backend cpu|vulkan]
 *
 * Three workloads on the CPU backend, each printed as one JSON object per line:
 *   chain   a chain of --nodes (default 100000) small ops: matmul with one of
 *           8 shared [16,16] weights, add of a bias, tanh, scale, repeated;
 *           time to record the graph, build an inference session and a
 *           training session (Adam; autodiff roughly triples the nodes), and
 *           one training step.
 *   params  --params (default 60000) named parameters of 4 values each,
 *           summed into the loss: time to declare them (each name is checked
 *           against all others) and to build a training session (Adam adds
 *           two named state tensors per parameter).
 *   ckpt    --ckpt (default 20000) named parameters in a training session:
 *           time to save a checkpoint and to load it back into a training
 *           session and into an inference session (file under --dir, default
 *           /tmp, removed afterwards).
 *   smollm  with --smollm N (default 0: skipped): N session builds of the
 *           SmolLM2-135M architecture (mn_llama_create, vocab 49152, hidden
 *           576, 30 layers, 9/3 heads, FFN 1536, tied embeddings; 134.5M
 *           parameters) for training (AdamW, batch 1 x 128) on --backend
 *           cpu | vulkan: time to record the graph and each build (the
 *           first Vulkan build may compile kernels; later ones find the
 *           caches warm). The threads used for parameter initialisation
 *           (MEGANEURA_THREADS) are printed as given ("" = the CPU count).
 *           --shared-device: one mn_device opened first (its time printed
 *           apart) serves every build, as in an application that keeps its
 *           device; else each build opens its own. MEGANEURA_PROFILE=1
 *           prints each build's phases; "kernels" lists each build's
 *           distinct kernels (pipelines; 0 on the cpu backend).
 *   resnet  with --resnet N (default 0: skipped): N training-session builds
 *           (SGD momentum 0.9) of ResNet-50 at batch 2, 64 x 64 images
 *           (--image S for S x S) on --backend; the first with an empty
 *           kernel cache (XDG_CACHE_HOME pointed at a new folder, removed
 *           afterwards: every kernel compiled), the others warm. Issue 10's
 *           cold-build target is this first number (<= 10 s on the 2-core
 *           machine with lavapipe, warm <= 1 s). Each build opens its own
 *           device unless --shared-device.
 * Results and the command line are recorded in docs/PERF.md ("Build and
 * checkpoint scaling"). Does not: measure kernels (bench.c does).
 */
#include <meganeura.h>
#include <meganeura_models.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_cache.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void die(const char *what, const char *msg) {
    fprintf(stderr, "bench_build: %s: %s\n", what, msg);
    exit(1);
}
#define G(call)                                                                                    \
    do {                                                                                           \
        if ((call) != MN_OK) die(#call, mn_graph_error(g));                                        \
    } while (0)
#define S(s, call)                                                                                 \
    do {                                                                                           \
        if ((call) != MN_OK) die(#call, mn_session_error(s));                                      \
    } while (0)

static mn_session *session(const mn_graph *g, mn_mode mode, double *ms) {
    mn_session_options o = mn_session_default_options();
    o.backend = MN_BACKEND_CPU;
    o.mode = mode;
    o.optim = mn_optimizer_default(MN_OPTIM_ADAM);
    mn_session *s = NULL;
    double t0 = now_ms();
    if (mn_session_create(&s, g, &o)) die("mn_session_create", mn_session_error(s));
    *ms = now_ms() - t0;
    return s;
}

static void bench_chain(int nodes) {
    enum { B = 4, D = 16, NW = 8 };
    mn_graph *g;
    mn_tensor x, w[NW], b, t, loss;
    mn_init ku = {MN_INIT_KAIMING_UNIFORM, 0, 0}, z = {MN_INIT_ZEROS, 0, 0};
    double t0 = now_ms();
    if (mn_graph_create(&g)) die("graph", "out of memory");
    G(mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){B, D}));
    for (int i = 0; i < NW; i++) {
        char name[32];
        snprintf(name, sizeof name, "w%d", i);
        G(mn_graph_param(g, &w[i], name, 2, (int64_t[]){D, D}, ku));
    }
    G(mn_graph_param(g, &b, "b", 1, (int64_t[]){D}, z));
    t = x;
    int made = NW + 2;
    for (int k = 0; made + 2 < nodes; k++, made++) {
        switch (k % 4) {
        case 0: G(mn_matmul(g, &t, t, w[(k / 4) % NW])); break;
        case 1: G(mn_add(g, &t, t, b)); break;
        case 2: G(mn_tanh(g, &t, t)); break;
        default: G(mn_scale(g, &t, t, 1.5f)); break;
        }
    }
    G(mn_mean(g, &loss, t, MN_ALL_AXES, false));
    G(mn_graph_loss(g, loss));
    double graph_ms = now_ms() - t0, inf_ms, train_ms;
    mn_session *si = session(g, MN_MODE_INFERENCE, &inf_ms);
    mn_session_destroy(si);
    mn_session *s = session(g, MN_MODE_TRAINING, &train_ms);
    float xv[B * D];
    for (int i = 0; i < B * D; i++) xv[i] = (float)(i % 7) / 7.0f - 0.5f;
    S(s, mn_session_set_input(s, "x", xv, sizeof xv));
    t0 = now_ms();
    S(s, mn_session_step(s));
    double step_ms = now_ms() - t0;
    size_t peak = 0, sum = 0;
    S(s, mn_session_memory(s, &peak, &sum));
    printf("{\"bench\":\"chain\",\"nodes\":%d,\"graph_ms\":%.1f,\"session_infer_ms\":%.1f,\"session_train_ms\":%.1f,"
           "\"step_ms\":%.1f,\"peak_bytes\":%zu,\"sum_bytes\":%zu}\n",
           nodes, graph_ms, inf_ms, train_ms, step_ms, peak, sum);
    fflush(stdout);
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

/* n parameters [4] named "layer.<i>.weight", summed into a mean. */
static mn_graph *many_params(int n, double *ms) {
    mn_graph *g;
    mn_tensor p, acc = MN_NONE, loss;
    mn_init u = {MN_INIT_UNIFORM, -1, 1};
    double t0 = now_ms();
    if (mn_graph_create(&g)) die("graph", "out of memory");
    for (int i = 0; i < n; i++) {
        char name[48];
        snprintf(name, sizeof name, "layer.%d.weight", i);
        G(mn_graph_param(g, &p, name, 1, (int64_t[]){4}, u));
        if (acc == MN_NONE) acc = p;
        else G(mn_add(g, &acc, acc, p));
    }
    G(mn_mean(g, &loss, acc, MN_ALL_AXES, false));
    G(mn_graph_loss(g, loss));
    *ms = now_ms() - t0;
    return g;
}

static void bench_params(int n) {
    double graph_ms, train_ms;
    mn_graph *g = many_params(n, &graph_ms);
    mn_session *s = session(g, MN_MODE_TRAINING, &train_ms);
    printf("{\"bench\":\"params\",\"params\":%d,\"graph_ms\":%.1f,\"session_train_ms\":%.1f}\n", n, graph_ms,
           train_ms);
    fflush(stdout);
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

static void bench_ckpt(int n, const char *dir) {
    double graph_ms, train_ms, inf_ms;
    mn_graph *g = many_params(n, &graph_ms);
    mn_session *s = session(g, MN_MODE_TRAINING, &train_ms);
    char path[4096];
    snprintf(path, sizeof path, "%s/mn-bench-build-%ld.safetensors", dir, (long)getpid());
    S(s, mn_session_step(s));
    double t0 = now_ms();
    S(s, mn_session_save(s, path));
    double save_ms = now_ms() - t0;
    t0 = now_ms();
    S(s, mn_session_load(s, path));
    double load_ms = now_ms() - t0;
    mn_session *si = session(g, MN_MODE_INFERENCE, &inf_ms);
    t0 = now_ms();
    S(si, mn_session_load(si, path));
    double load_inf_ms = now_ms() - t0;
    unlink(path);
    printf("{\"bench\":\"ckpt\",\"params\":%d,\"save_ms\":%.1f,\"load_train_ms\":%.1f,\"load_infer_ms\":%.1f}\n", n,
           save_ms, load_ms, load_inf_ms);
    fflush(stdout);
    mn_session_destroy(si);
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

/* reps training-session builds of g with optimizer opt: prints each build's
 * time ("session_train_ms") and distinct kernels ("kernels": pipelines, 0
 * on the cpu backend), closing the JSON object the caller opened. */
static void train_builds(const mn_graph *g, int reps, mn_backend_kind backend, mn_device *dev, mn_optimizer opt) {
    int kernels[16] = {0};
    printf("\"session_train_ms\":[");
    for (int r = 0; r < reps; r++) {
        mn_session_options o = mn_session_default_options();
        o.backend = backend;
        o.mode = MN_MODE_TRAINING;
        o.optim = opt;
        o.device = dev;
        mn_session *s = NULL;
        const double t0 = now_ms();
        if (mn_session_create(&s, g, &o)) die("mn_session_create", mn_session_error(s));
        printf("%s%.1f", r ? "," : "", now_ms() - t0);
        fflush(stdout);
        mn_kernel_stats ks = {0};
        mn_session_kernel_stats(s, &ks);
        if (r < 16) kernels[r] = ks.compiled + ks.cached + ks.bundled;
        mn_session_destroy(s);
    }
    printf("],\"kernels\":[");
    for (int r = 0; r < reps && r < 16; r++) printf("%s%d", r ? "," : "", kernels[r]);
    printf("]}\n");
    fflush(stdout);
}

/* shared: one device opened first and given to every session (what an
 * application holding the device does); else each session opens its own */
static void bench_smollm(int reps, mn_backend_kind backend, bool shared) {
    static const char cfg[] =
        "{\"vocab_size\":49152,\"hidden_size\":576,\"num_hidden_layers\":30,\"num_attention_heads\":9,"
        "\"num_key_value_heads\":3,\"intermediate_size\":1536,\"max_position_embeddings\":8192,"
        "\"rms_norm_eps\":1e-5,\"rope_theta\":100000,\"tie_word_embeddings\":true,"
        "\"initializer_range\":0.041666666666666664}";
    mn_llama_config c;
    char err[512];
    if (mn_llama_config_parse(&c, cfg, sizeof cfg - 1, err, sizeof err)) die("mn_llama_config_parse", err);
    mn_graph *g;
    mn_llama *m;
    double t0 = now_ms();
    if (mn_graph_create(&g)) die("graph", "out of memory");
    mn_llama_options lo = mn_llama_default_options(); /* TRAIN, batch 1, seq_len 128 */
    if (mn_llama_create(&m, g, &c, &lo)) die("mn_llama_create", mn_llama_error(m));
    double graph_ms = now_ms() - t0;
    const char *th = getenv("MEGANEURA_THREADS");
    mn_device *dev = NULL;
    double dev_ms = 0;
    if (shared) {
        t0 = now_ms();
        if (mn_device_open(&dev, backend)) die("mn_device_open", "failed");
        dev_ms = now_ms() - t0;
    }
    printf("{\"bench\":\"smollm\",\"backend\":\"%s\",\"params\":%lld,\"threads\":\"%s\",\"graph_ms\":%.1f,"
           "\"shared_device\":%s,\"device_open_ms\":%.1f,",
           backend == MN_BACKEND_VULKAN ? "vulkan" : "cpu", (long long)mn_llama_numel(m), th ? th : "", graph_ms,
           shared ? "true" : "false", dev_ms);
    train_builds(g, reps, backend, dev, mn_optimizer_default(MN_OPTIM_ADAMW));
    mn_device_close(dev);
    mn_llama_destroy(m);
    mn_graph_destroy(g);
}

static void bench_resnet(int reps, int64_t image, mn_backend_kind backend, bool shared) {
    mn_resnet_config c;
    mn_resnet_config_preset(&c, 50, NULL, 0);
    mn_resnet_options ro = mn_resnet_default_options();
    ro.batch = 2;
    ro.height = ro.width = image;
    mn_graph *g;
    mn_model *m = NULL;
    double t0 = now_ms();
    if (mn_graph_create(&g)) die("graph", "out of memory");
    if (mn_resnet_create(&m, g, &c, &ro)) die("mn_resnet_create", mn_model_error(m));
    const double graph_ms = now_ms() - t0;
    bench_cache cache;
    if (!bench_cache_enter(&cache)) die("mkdtemp", "cannot create a cache folder");
    mn_device *dev = NULL;
    double dev_ms = 0;
    if (shared) {
        t0 = now_ms();
        if (mn_device_open(&dev, backend)) die("mn_device_open", "failed");
        dev_ms = now_ms() - t0;
    }
    printf("{\"bench\":\"resnet50\",\"backend\":\"%s\",\"batch\":2,\"image\":%lld,\"params\":%lld,"
           "\"graph_ms\":%.1f,\"shared_device\":%s,\"device_open_ms\":%.1f,",
           backend == MN_BACKEND_VULKAN ? "vulkan" : "cpu", (long long)image, (long long)mn_model_numel(m), graph_ms,
           shared ? "true" : "false", dev_ms);
    mn_optimizer opt = mn_optimizer_default(MN_OPTIM_SGD);
    opt.momentum = 0.9f;
    train_builds(g, reps, backend, dev, opt);
    mn_device_close(dev);
    bench_cache_leave(&cache);
    mn_model_destroy(m);
    mn_graph_destroy(g);
}

int main(int argc, char **argv) {
    int nodes = 100000, params = 60000, ckpt = 20000, smollm = 0, resnet = 0;
    int64_t image = 64;
    bool shared = false;
    mn_backend_kind backend = MN_BACKEND_CPU;
    const char *dir = "/tmp";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--nodes") && i + 1 < argc) nodes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--params") && i + 1 < argc) params = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ckpt") && i + 1 < argc) ckpt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--smollm") && i + 1 < argc) smollm = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--resnet") && i + 1 < argc) resnet = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--image") && i + 1 < argc) image = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--shared-device")) shared = true;
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc && !strcmp(argv[i + 1], "cpu"))
            backend = MN_BACKEND_CPU, i++;
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc && !strcmp(argv[i + 1], "vulkan"))
            backend = MN_BACKEND_VULKAN, i++;
        else {
            fprintf(stderr, "usage: %s [--nodes N] [--params N] [--ckpt N] [--dir PATH] [--smollm N] "
                    "[--resnet N] [--image S] [--shared-device] [--backend cpu|vulkan] (0 skips a workload)\n",
                    argv[0]);
            return 2;
        }
    }
    if (nodes < 0 || params < 0 || ckpt < 0 || smollm < 0 || resnet < 0 || image < 32 || image > 1024) {
        fprintf(stderr, "bench_build: counts must be >= 0, --image 32..1024\n");
        return 2;
    }
    if (nodes > 0) bench_chain(nodes < 16 ? 16 : nodes);
    if (params > 0) bench_params(params);
    if (ckpt > 0) bench_ckpt(ckpt, dir);
    if (smollm > 0) bench_smollm(smollm, backend, shared);
    if (resnet > 0) bench_resnet(resnet, image, backend, shared);
    return 0;
}
