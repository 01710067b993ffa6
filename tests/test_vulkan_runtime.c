/* test_vulkan_runtime.c - the Vulkan runtime's own behaviour: the Chrome
 * trace (MEGANEURA_TRACE) and the profile, the kernel cache (a second build
 * compiles nothing), and a lost device (injected with
 * MEGANEURA_FAULT_DEVICE_LOST) answered by every later call with an error
 * that says so, never a crash.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static mn_graph *small_graph(void) {
    mn_graph *g;
    mn_tensor x, w, y, lab, loss;
    mn_graph_create(&g);
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){4, 3});
    st = st ? st : mn_graph_input(g, &lab, "labels", MN_I32, 1, (int64_t[]){4});
    st = st ? st : mn_graph_param(g, &w, "w", 2, (int64_t[]){3, 5}, (mn_init){MN_INIT_XAVIER_UNIFORM, 0, 0});
    st = st ? st : mn_matmul(g, &y, x, w);
    st = st ? st : mn_cross_entropy(g, &loss, y, lab);
    st = st ? st : mn_graph_output(g, y, "y");
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    return g;
}

static mn_session *train_session(const mn_graph *g) {
    mn_session_options o = mn_session_default_options();
    o.backend = MN_BACKEND_VULKAN;
    o.mode = MN_MODE_TRAINING;
    mn_session *s = NULL;
    CHECK_OK(mn_session_create(&s, g, &o), mn_session_error(s));
    return s;
}

static mn_status step(mn_session *s) {
    float x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    int32_t lab[4] = {0, 1, 2, 3};
    mn_status st = mn_session_set_input(s, "x", x, sizeof x);
    st = st ? st : mn_session_set_input(s, "labels", lab, sizeof lab);
    return st ? st : mn_session_step(s);
}

static void trace_test(const mn_graph *g) {
    char path[] = "/tmp/mn-trace-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    setenv("MEGANEURA_TRACE", path, 1);
    mn_session *s = train_session(g);
    for (int i = 0; i < 3; i++) CHECK_OK(step(s), mn_session_error(s));
    FILE *saved = stderr; /* the profile table goes to stderr; keep the test log short */
    stderr = fopen("/dev/null", "w");
    mn_session_destroy(s); /* writes the trace and prints the profile */
    fclose(stderr);
    stderr = saved;
    unsetenv("MEGANEURA_TRACE");
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f) return;
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    unlink(path);
    cJSON *j = cJSON_ParseWithLength(buf, n);
    CHECK_MSG(j != NULL, "the trace is not JSON: %.200s", buf);
    cJSON *ev = cJSON_GetObjectItem(j, "traceEvents");
    CHECK(cJSON_IsArray(ev));
    int count = cJSON_GetArraySize(ev), matmuls = 0;
    for (int i = 0; i < count; i++) {
        cJSON *e = cJSON_GetArrayItem(ev, i), *name = cJSON_GetObjectItem(e, "name"), *dur = cJSON_GetObjectItem(e, "dur");
        CHECK(cJSON_IsString(name) && cJSON_IsNumber(dur) && dur->valuedouble >= 0);
        if (cJSON_IsString(name) && strcmp(name->valuestring, "matmul") == 0) matmuls++;
    }
    CHECK_MSG(count >= 3 * 5, "trace has %d events for 3 steps", count);
    CHECK_MSG(matmuls >= 3, "trace has %d matmul events for 3 steps", matmuls);
    cJSON_Delete(j);
    free(buf);
}

static void device_lost_test(const mn_graph *g) {
    /* submission 1 uploads the constants at build, 2 is the first step
     * (which also copies the loss and the non-finite gate to the host: no
     * submission of its own): the third (the second step) reports a lost
     * device */
    setenv("MEGANEURA_FAULT_DEVICE_LOST", "3", 1);
    mn_session *s = train_session(g);
    unsetenv("MEGANEURA_FAULT_DEVICE_LOST");
    if (!s) return;
    mn_status first = step(s), second = step(s);
    CHECK_OK(first, mn_session_error(s));
    CHECK(second == MN_E_BACKEND);
    CHECK_MSG(strstr(mn_session_error(s), "VK_ERROR_DEVICE_LOST") != NULL, "message: %s", mn_session_error(s));
    /* every later call says so, none crashes */
    float y[20], l;
    CHECK(step(s) == MN_E_BACKEND);
    CHECK(mn_session_run(s) == MN_E_BACKEND);
    CHECK(mn_session_output(s, "y", y, sizeof y) == MN_E_BACKEND);
    CHECK_MSG(strstr(mn_session_error(s), "lost") != NULL, "message: %s", mn_session_error(s));
    CHECK(mn_session_loss(s, &l) != MN_OK);
    mn_session_destroy(s);
}

static void cache_test(const mn_graph *g) {
    /* builds from a filled cache compile nothing: compare against the CPU */
    mn_session *a = train_session(g), *b = train_session(g);
    mn_session_options o = mn_session_default_options();
    o.mode = MN_MODE_TRAINING;
    mn_session *c = NULL;
    CHECK_OK(mn_session_create(&c, g, &o), mn_session_error(c));
    CHECK_OK(step(b), mn_session_error(b));
    CHECK_OK(step(c), mn_session_error(c));
    float lb, lc;
    CHECK_OK(mn_session_loss(b, &lb), mn_session_error(b));
    CHECK_OK(mn_session_loss(c, &lc), mn_session_error(c));
    CHECK_NEAR(lb, lc, 1e-5);
    mn_session_destroy(a);
    mn_session_destroy(b);
    mn_session_destroy(c);
}

/* A parameter that no path to the loss uses gets no gradient and no update,
 * on both backends, and does not break the step. */
static void unused_param_test(void) {
    for (int be = 0; be < 2; be++) {
        mn_graph *g = small_graph();
        mn_tensor u;
        CHECK_OK(mn_graph_param(g, &u, "unused", 1, (int64_t[]){7}, (mn_init){MN_INIT_CONSTANT, 0.5f, 0}),
                 mn_graph_error(g));
        mn_session_options o = mn_session_default_options();
        o.backend = be ? MN_BACKEND_VULKAN : MN_BACKEND_CPU;
        o.mode = MN_MODE_TRAINING;
        mn_session *s = NULL;
        CHECK_OK(mn_session_create(&s, g, &o), mn_session_error(s));
        for (int i = 0; i < 3; i++) CHECK_OK(step(s), mn_session_error(s));
        float v[7];
        CHECK_OK(mn_session_get_param(s, "unused", v, 7), mn_session_error(s));
        for (int i = 0; i < 7; i++) CHECK(v[i] == 0.5f);
        mn_session_destroy(s);
        mn_graph_destroy(g);
    }
}

int main(void) {
    mn_device *probe = th_require_vulkan(); /* the sessions open their own */
    if (!probe) return th_finish("test_vulkan_runtime");
    mn_device_close(probe);
    unused_param_test();
    mn_graph *g = small_graph();
    trace_test(g);
    device_lost_test(g);
    cache_test(g);
    mn_graph_destroy(g);
    return th_finish("test_vulkan_runtime");
}
