/* test_vk_hazard_sync.c - the Vulkan backend's barriers under the Khronos
 * synchronisation validation (MEGANEURA_VALIDATE=sync, set here).
 *
 * Real training steps (a CNN with batch norm - its running statistics are
 * updated in place - under SGD with momentum and clipping; an MLP under
 * AdamW, whose moments are updated in place), a forward run after them (a
 * second recorded command buffer), readbacks, and an input written twice
 * before a step (two copies of the same bytes in one upload):
 *   - with the planned barriers the layer reports nothing at all: each
 *     dispatch binds exactly its tensors' bytes, so it does not cry wolf;
 *   - with MEGANEURA_FAULT_NO_BARRIERS=1 (no barrier between dispatches) it
 *     reports read-after-write hazards: it does see missing barriers (on
 *     lavapipe, which runs dispatches in order, no result would show them);
 *   - with MEGANEURA_FAULT_NO_BARRIERS=host (none around uploads, readbacks
 *     and at the ends of a step) it reports hazards too: the layer's check
 *     between submitted command buffers is on (VK_LAYER_ENABLES, set here).
 * SKIP (exit 77, TH_SKIP) without a Vulkan device or without the validation
 * layer; a failure instead under MN_REQUIRE_VULKAN=1 (`make test`).
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { B = 4 };

static int g_hazards, g_raw, g_other;
static void on_log(mn_log_level level, const char *msg, void *user) {
    if (level > MN_LOG_WARN || strstr(msg, "vulkan validation reported")) return; /* the count at close */
    if (strstr(msg, "SYNC-HAZARD")) {
        g_hazards++;
        g_raw += strstr(msg, "READ-AFTER-WRITE") != NULL;
    } else {
        g_other++;
        fprintf(stderr, "log: %.300s\n", msg);
    }
}

static mn_graph *cnn(void) {
    mn_graph *g;
    mn_tensor x, lab, w, gw, gb, rm, rv, h, fw, flat, logits, loss;
    mn_init ku = {MN_INIT_KAIMING_UNIFORM, 0, 0}, zero = {MN_INIT_ZEROS, 0, 0}, one = {MN_INIT_CONSTANT, 1, 0};
    mn_conv2d_params cp = {{1, 1}, {1, 1}, {1, 1}, 1};
    mn_graph_create(&g);
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 4, (int64_t[]){B, 2, 4, 4});
    st = st ? st : mn_graph_input(g, &lab, "labels", MN_I32, 1, (int64_t[]){B});
    st = st ? st : mn_graph_param(g, &w, "conv.w", 4, (int64_t[]){4, 2, 3, 3}, ku);
    st = st ? st : mn_graph_param(g, &gw, "bn.w", 1, (int64_t[]){4}, one);
    st = st ? st : mn_graph_param(g, &gb, "bn.b", 1, (int64_t[]){4}, zero);
    st = st ? st : mn_graph_param(g, &rm, "bn.rm", 1, (int64_t[]){4}, zero);
    st = st ? st : mn_graph_param(g, &rv, "bn.rv", 1, (int64_t[]){4}, one);
    st = st ? st : mn_conv2d(g, &h, x, w, MN_NONE, &cp);
    st = st ? st : mn_batch_norm2d(g, &h, h, gw, gb, rm, rv, 0.1f, 1e-5f, true);
    st = st ? st : mn_relu(g, &h, h);
    st = st ? st : mn_reshape(g, &flat, h, 2, (int64_t[]){B, 64});
    st = st ? st : mn_graph_param(g, &fw, "fc.w", 2, (int64_t[]){64, 3}, ku);
    st = st ? st : mn_matmul(g, &logits, flat, fw);
    st = st ? st : mn_cross_entropy(g, &loss, logits, lab);
    st = st ? st : mn_graph_output(g, logits, "logits");
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    return g;
}

static mn_graph *mlp(void) {
    mn_graph *g;
    mn_tensor x, lab, w1, b1, w2, h, logits, loss;
    mn_init xu = {MN_INIT_XAVIER_UNIFORM, 0, 0}, zero = {MN_INIT_ZEROS, 0, 0};
    mn_graph_create(&g);
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){B, 32});
    st = st ? st : mn_graph_input(g, &lab, "labels", MN_I32, 1, (int64_t[]){B});
    st = st ? st : mn_graph_param(g, &w1, "w1", 2, (int64_t[]){32, 16}, xu);
    st = st ? st : mn_graph_param(g, &b1, "b1", 1, (int64_t[]){16}, zero);
    st = st ? st : mn_graph_param(g, &w2, "w2", 2, (int64_t[]){16, 3}, xu);
    st = st ? st : mn_matmul(g, &h, x, w1);
    st = st ? st : mn_add(g, &h, h, b1);
    st = st ? st : mn_gelu(g, &h, h);
    st = st ? st : mn_matmul(g, &logits, h, w2);
    st = st ? st : mn_cross_entropy(g, &loss, logits, lab);
    st = st ? st : mn_graph_output(g, logits, "logits");
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    return g;
}

/* Two steps (the first after writing the input twice), a forward run, and
 * readbacks of the logits and a parameter. */
static void train(const mn_graph *g, mn_device *dev, mn_optimizer opt, size_t nx) {
    mn_session_options o = mn_session_default_options();
    o.backend = MN_BACKEND_VULKAN;
    o.mode = MN_MODE_TRAINING;
    o.optim = opt;
    o.device = dev;
    mn_session *s = NULL;
    CHECK_OK(mn_session_create(&s, g, &o), mn_session_error(s));
    float *x = malloc(nx * sizeof *x), logits[B * 3], p[16];
    int32_t lab[B] = {0, 1, 2, 1};
    CHECK(x != NULL);
    if (!x) return;
    for (size_t i = 0; i < nx; i++) x[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    for (int step = 0; step < 2; step++) {
        CHECK_OK(mn_session_set_input(s, "x", x, nx * sizeof *x), mn_session_error(s));
        if (step == 0) { /* the same bytes again before the step: two copies, in order */
            x[0] = 0.25f;
            CHECK_OK(mn_session_set_input(s, "x", x, nx * sizeof *x), mn_session_error(s));
        }
        CHECK_OK(mn_session_set_input(s, "labels", lab, sizeof lab), mn_session_error(s));
        CHECK_OK(mn_session_step(s), mn_session_error(s));
    }
    CHECK_OK(mn_session_run(s), mn_session_error(s));
    CHECK_OK(mn_session_output(s, "logits", logits, sizeof logits), mn_session_error(s));
    float loss = 0;
    CHECK_OK(mn_session_loss(s, &loss), mn_session_error(s));
    CHECK_MSG(loss > 0 && loss < 10, "loss %g", (double)loss);
    bool sgd = opt.kind == MN_OPTIM_SGD;
    CHECK_OK(mn_session_get_param(s, sgd ? "bn.rm" : "b1", p, sgd ? 4 : 16), mn_session_error(s));
    mn_session_destroy(s);
    free(x);
}

static void both_models(mn_device *dev) {
    mn_graph *c = cnn(), *m = mlp();
    mn_optimizer sgd = mn_optimizer_default(MN_OPTIM_SGD);
    sgd.lr = 0.05f, sgd.momentum = 0.9f, sgd.nesterov = true, sgd.clip_norm = 1.0f;
    mn_optimizer adamw = mn_optimizer_default(MN_OPTIM_ADAMW);
    adamw.lr = 0.01f;
    train(c, dev, sgd, B * 2 * 4 * 4);
    train(m, dev, adamw, B * 32);
    mn_graph_destroy(c);
    mn_graph_destroy(m);
}

int main(void) {
    setenv("MEGANEURA_VALIDATE", "sync", 1);
    setenv("VK_LAYER_ENABLES", "VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT", 1);
    unsetenv("MEGANEURA_FAULT_NO_BARRIERS");
    mn_set_log(on_log, NULL);
    mn_device *dev = NULL;
    if (mn_device_open(&dev, MN_BACKEND_VULKAN) != MN_OK) {
        const char *req = getenv("MN_REQUIRE_VULKAN");
        const bool required = req && strcmp(req, "1") == 0;
        printf("%s: no Vulkan device with synchronisation validation: %s\n", required ? "FAIL" : "SKIP",
               mn_device_error(dev));
        mn_device_close(dev);
        return required ? 1 : TH_SKIP;
    }
    g_other = 0;
    both_models(dev);
    CHECK_MSG(g_hazards == 0 && g_other == 0, "with barriers: %d hazards and %d other messages reported", g_hazards,
              g_other);
    printf("with barriers: %d hazards, %d other messages\n", g_hazards, g_other);

    setenv("MEGANEURA_FAULT_NO_BARRIERS", "1", 1);
    g_hazards = g_raw = g_other = 0;
    both_models(dev);
    unsetenv("MEGANEURA_FAULT_NO_BARRIERS");
    CHECK_MSG(g_raw > 0, "without barriers the validation reported %d hazards, %d read-after-write", g_hazards, g_raw);
    CHECK_MSG(g_other == 0, "without barriers: %d messages other than hazards", g_other);
    printf("without barriers: %d hazards (%d read-after-write)\n", g_hazards, g_raw);

    setenv("MEGANEURA_FAULT_NO_BARRIERS", "host", 1);
    g_hazards = g_raw = g_other = 0;
    both_models(dev);
    unsetenv("MEGANEURA_FAULT_NO_BARRIERS");
    CHECK_MSG(g_hazards > 0, "without the host-side barriers the validation reported no hazard");
    CHECK_MSG(g_other == 0, "without the host-side barriers: %d messages other than hazards", g_other);
    printf("without the host-side barriers: %d hazards\n", g_hazards);
    mn_device_close(dev);
    mn_set_log(NULL, NULL);
    return th_finish("test_vk_hazard_sync");
}
