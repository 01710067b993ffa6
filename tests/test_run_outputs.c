/* test_run_outputs.c - mn_session_run_outputs: only the nodes the named
 * outputs need run, side-effect appends on their path included, other
 * branches' appends not; unknown names, non-outputs and a third output set
 * refused. On the CPU and (when there is a device) Vulkan backends.
 *
 * Does not: test the Llama decode-step branch (test_llama_hf does).
 */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "llama_util.h"
#include "meganeura.h"

#define S(...) (const int64_t[]){__VA_ARGS__}

/* Two branches appending to one cache state [1,1,4,1] at pos: output "a"
 * appends xa, output "b" appends xb; each output is its updated cache + 0. */
static mn_graph *two_branches(void) {
    mn_graph *g = NULL;
    mn_graph_create(&g);
    mn_tensor cache, pos, xa, xb, za, zb, ca, cb, oa, ob;
    const float zero[4] = {0};
    CHECK_OK(mn_graph_state(g, &cache, "cache", 4, S(1, 1, 4, 1)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &pos, "pos", MN_I32, 1, S(1)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &xa, "xa", MN_F32, 4, S(1, 1, 1, 1)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &xb, "xb", MN_F32, 4, S(1, 1, 1, 1)), mn_graph_error(g));
    CHECK_OK(mn_graph_constant(g, &za, 4, S(1, 1, 4, 1), zero), mn_graph_error(g));
    CHECK_OK(mn_graph_constant(g, &zb, 4, S(1, 1, 4, 1), zero), mn_graph_error(g));
    CHECK_OK(mn_kv_append(g, &ca, cache, xa, pos), mn_graph_error(g));
    CHECK_OK(mn_kv_append(g, &cb, cache, xb, pos), mn_graph_error(g));
    CHECK_OK(mn_add(g, &oa, ca, za), mn_graph_error(g));
    CHECK_OK(mn_add(g, &ob, cb, zb), mn_graph_error(g));
    CHECK_OK(mn_graph_output(g, oa, "a"), mn_graph_error(g));
    CHECK_OK(mn_graph_output(g, ob, "b"), mn_graph_error(g));
    return g;
}

static void step(mn_session *s, int32_t pos, float xa, float xb, const char *out, const float want[4],
                 const char *bn) {
    float got[4] = {-1, -1, -1, -1};
    CHECK_OK(mn_session_set_input(s, "pos", &pos, sizeof pos), mn_session_error(s));
    CHECK_OK(mn_session_set_input(s, "xa", &xa, sizeof xa), mn_session_error(s));
    CHECK_OK(mn_session_set_input(s, "xb", &xb, sizeof xb), mn_session_error(s));
    CHECK_OK(mn_session_run_outputs(s, &out, 1), mn_session_error(s));
    CHECK_OK(mn_session_output(s, out, got, sizeof got), mn_session_error(s));
    CHECK_MSG(memcmp(got, want, sizeof got) == 0, "%s: run_outputs(%s) at pos %d: got %g %g %g %g, want %g %g %g %g",
              bn, out, pos, got[0], got[1], got[2], got[3], want[0], want[1], want[2], want[3]);
}

static void check(mn_backend_kind be, mn_device *dev) {
    const char *bn = be == MN_BACKEND_VULKAN ? "vulkan" : "cpu";
    mn_graph *g = two_branches();
    mn_session *s = lu_session(g, be, dev, MN_MODE_INFERENCE, NULL);
    if (!s) {
        mn_graph_destroy(g);
        return;
    }
    /* only branch a appends: row 0 = 1 */
    step(s, 0, 1, 2, "a", (const float[]){1, 0, 0, 0}, bn);
    /* only branch b: row 1 = 20, row 0 kept from a (b did not write it before) */
    step(s, 1, 10, 20, "b", (const float[]){1, 20, 0, 0}, bn);
    step(s, 2, 100, 200, "a", (const float[]){1, 20, 100, 0}, bn);
    step(s, 3, 1000, 2000, "b", (const float[]){1, 20, 100, 2000}, bn);
    /* errors */
    const char *bad[] = {"nope"}, *input[] = {"xa"}, *both[] = {"a", "b"};
    CHECK(mn_session_run_outputs(s, bad, 1) == MN_E_NOT_FOUND && strstr(mn_session_error(s), "nope"));
    CHECK(mn_session_run_outputs(s, input, 1) == MN_E_NOT_FOUND);
    CHECK(mn_session_run_outputs(s, both, 0) == MN_E_INVALID);
    CHECK(mn_session_run_outputs(s, NULL, 1) == MN_E_INVALID);
    CHECK(mn_session_run_outputs(s, both, 2) == MN_E_UNSUPPORTED && strstr(mn_session_error(s), "at most 2"));
    /* the session stays usable; a repeated set is not a new one */
    step(s, 0, 7, 8, "a", (const float[]){7, 20, 100, 2000}, bn);
    printf("  %-6s run_outputs: branches run apart, errors named\n", bn);
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

int main(void) {
    check(MN_BACKEND_CPU, NULL);
    mn_device *dev = lu_vulkan();
    if (dev) check(MN_BACKEND_VULKAN, dev);
    else printf("SKIP vulkan: no device\n");
    mn_device_close(dev);
    return th_finish("test_run_outputs");
}
