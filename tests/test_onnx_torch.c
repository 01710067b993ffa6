/* test_onnx_torch.c - models exported from PyTorch (torch.onnx.export)
 * import and match PyTorch: forward and every gradient of a cross-entropy
 * loss added on the imported logits, on the CPU and on Vulkan.
 *
 * Fixtures: tests/fixtures/onnx/<model>/ (written by
 * tests/fixtures/gen_onnx.py on a machine with PyTorch: a tiny ResNet-18 and
 * a tiny Llama-style decoder) or $MN_ONNX_FIXTURES. Each holds model.onnx,
 * test_data_set_0/{input_K,output_0}.pb (the float64 oracle's logits) and
 * train/{labels,loss,grad.<initializer>}.pb. Gates: logits rel L2 <= 1e-5,
 * loss relative 1e-5, every gradient rel L2 <= 1e-4 (test_onnx checks that
 * batch-norm statistics get none).
 *
 * The same checker first runs on a fixture written here, in the same layout:
 * an MLP (Gemm, Relu, Gemm with transB) whose loss and gradients are
 * computed by hand in double, so the fixture path is tested without PyTorch.
 * The PyTorch fixtures are committed; without them the test fails.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "meganeura_onnx.h"
#include "onnx_build.h"
#include "session/session.h"

#define TOL_FWD 1e-5
#define TOL_LOSS 1e-5
#define TOL_GRAD 1e-4
#define MAX_IO 8

static char g_err[1 << 16];

/* snprintf into a path buffer; a path too long for it is a failure */
#define PATHF(buf, ...)                                                                            \
    do {                                                                                           \
        if (snprintf((buf), sizeof(buf), __VA_ARGS__) >= (int)sizeof(buf)) {                      \
            CHECK_MSG(0, "path too long");                                                         \
            (buf)[0] = 0;                                                                          \
        }                                                                                          \
    } while (0)

static double rel_l2(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int read_set(const char *dir, const char *prefix, mn_onnx_tensor *t) {
    int n = 0;
    for (; n < MAX_IO; n++) {
        char p[8192];
        struct stat sb;
        PATHF(p, "%s/%s_%d.pb", dir, prefix, n);
        if (stat(p, &sb) != 0) break;
        if (mn_onnx_tensor_read(&t[n], p, g_err, sizeof g_err)) {
            CHECK_MSG(0, "%s", g_err);
            break;
        }
    }
    return n;
}

static void check_fixture(const char *dir, mn_backend_kind be, mn_device *dev) {
    const char *bn = be == MN_BACKEND_VULKAN ? "vulkan" : "cpu";
    char p[8192], model[8192];
    PATHF(model, "%s/model.onnx", dir);
    PATHF(p, "%s/test_data_set_0", dir);
    mn_onnx_tensor in[MAX_IO], out[MAX_IO];
    memset(in, 0, sizeof in);
    memset(out, 0, sizeof out);
    int nin = read_set(p, "input", in), nout = read_set(p, "output", out);
    CHECK_MSG(nin >= 1 && nout >= 1, "%s: no test data", dir);
    mn_onnx_input oi[MAX_IO];
    for (int k = 0; k < nin; k++) {
        memset(&oi[k], 0, sizeof oi[k]);
        oi[k].name = in[k].name[0] ? in[k].name : NULL;
        oi[k].position = k;
        oi[k].hint = true;
        oi[k].value = in[k].data;
        oi[k].bytes = in[k].bytes;
    }
    mn_onnx_options o = mn_onnx_default_options();
    o.inputs = oi;
    o.n_inputs = nin;

    /* forward */
    mn_graph *g = NULL;
    mn_onnx *m = NULL;
    mn_graph_create(&g);
    mn_status st = mn_onnx_load(&m, g, model, &o, g_err, sizeof g_err);
    CHECK_OK(st, g_err);
    double e_fwd = INFINITY;
    if (!st && nout >= 1) {
        mn_session_options so = mn_session_default_options();
        so.backend = be;
        so.device = dev;
        mn_session *s = NULL;
        CHECK_OK(mn_session_create(&s, g, &so), s ? mn_session_error(s) : "");
        CHECK_OK(mn_onnx_init_session(m, s), mn_onnx_error(m));
        for (int i = 0; i < mn_onnx_input_count(m); i++) {
            mn_onnx_io io;
            mn_onnx_input_at(m, i, &io);
            for (int k = 0; k < nin; k++)
                if (in[k].name[0] ? strcmp(in[k].name, io.name) == 0 : k == io.position)
                    CHECK_OK(mn_onnx_set_input(m, s, io.name, in[k].data, in[k].bytes), mn_onnx_error(m));
        }
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        mn_onnx_io io;
        mn_onnx_output_at(m, 0, &io);
        float *y = malloc(out[0].bytes ? out[0].bytes : 1);
        CHECK(out[0].dtype == MN_ONNX_FLOAT);
        CHECK_OK(mn_onnx_get_output(m, s, io.name, y, out[0].bytes), mn_onnx_error(m));
        e_fwd = rel_l2(y, out[0].data, out[0].numel);
        CHECK_MSG(e_fwd <= TOL_FWD, "%s %s: logits rel L2 %.3g > %.0e", dir, bn, e_fwd, TOL_FWD);
        free(y);
        mn_session_destroy(s);
    }
    mn_onnx_destroy(m);
    mn_graph_destroy(g);

    /* training: a cross-entropy loss on the logits, every gradient */
    PATHF(p, "%s/train/labels.pb", dir);
    mn_onnx_tensor lab, lossref;
    struct stat sb;
    if (stat(p, &sb) != 0) {
        printf("  %-52s %-6s logits rel L2 %.2e (no training reference)\n", dir, bn, e_fwd);
        goto done;
    }
    CHECK_OK(mn_onnx_tensor_read(&lab, p, g_err, sizeof g_err), g_err);
    PATHF(p, "%s/train/loss.pb", dir);
    CHECK_OK(mn_onnx_tensor_read(&lossref, p, g_err, sizeof g_err), g_err);
    mn_graph_create(&g);
    m = NULL;
    st = mn_onnx_load(&m, g, model, &o, g_err, sizeof g_err);
    CHECK_OK(st, g_err);
    if (!st) {
        mn_onnx_io io;
        mn_onnx_output_at(m, 0, &io);
        int64_t C = io.shape[io.rank - 1], N = 1;
        for (int i = 0; i < io.rank - 1; i++) N *= io.shape[i];
        CHECK(lab.numel == N && lab.dtype == MN_ONNX_INT64);
        mn_tensor flat, labels, loss;
        CHECK_OK(mn_reshape(g, &flat, io.tensor, 2, (int64_t[]){N, C}), mn_graph_error(g));
        CHECK_OK(mn_graph_input(g, &labels, "labels", MN_I32, 1, (int64_t[]){N}), mn_graph_error(g));
        CHECK_OK(mn_cross_entropy(g, &loss, flat, labels), mn_graph_error(g));
        CHECK_OK(mn_graph_loss(g, loss), mn_graph_error(g));
        mn_session_options so = mn_session_default_options();
        so.backend = be;
        so.device = dev;
        so.mode = MN_MODE_TRAINING;
        session_internal_options iopt = {.grads_only = true};
        mn_session *s = NULL;
        st = session_create_ex(&s, g, &so, &iopt);
        CHECK_OK(st, s ? mn_session_error(s) : "");
        if (!st) {
            CHECK_OK(mn_onnx_init_session(m, s), mn_onnx_error(m));
            for (int i = 0; i < mn_onnx_input_count(m); i++) {
                mn_onnx_io ii;
                mn_onnx_input_at(m, i, &ii);
                for (int k = 0; k < nin; k++)
                    if (in[k].name[0] ? strcmp(in[k].name, ii.name) == 0 : k == ii.position)
                        CHECK_OK(mn_onnx_set_input(m, s, ii.name, in[k].data, in[k].bytes), mn_onnx_error(m));
            }
            int32_t *l32 = malloc((size_t)N * sizeof *l32);
            for (int64_t i = 0; i < N; i++) l32[i] = (int32_t)((int64_t *)lab.data)[i];
            CHECK_OK(mn_session_set_input(s, "labels", l32, (size_t)N * sizeof *l32), mn_session_error(s));
            free(l32);
            CHECK_OK(session_forward_backward(s), mn_session_error(s));
            float loss_v = NAN;
            CHECK_OK(mn_session_loss(s, &loss_v), mn_session_error(s));
            double want = lossref.dtype == MN_ONNX_DOUBLE ? *(double *)lossref.data : *(float *)lossref.data;
            double e_loss = fabs(loss_v - want) / fabs(want);
            CHECK_MSG(e_loss <= TOL_LOSS, "%s %s: loss %.9g, want %.9g", dir, bn, loss_v, want);
            /* every gradient of the reference */
            char td[8192];
            PATHF(td, "%s/train", dir);
            DIR *dd = opendir(td);
            int ngrad = 0;
            double worst = 0;
            char worst_name[256] = "";
            struct dirent *de;
            while (dd && (de = readdir(dd))) {
                size_t ln = strlen(de->d_name);
                if (strncmp(de->d_name, "grad.", 5) != 0 || ln < 9 || strcmp(de->d_name + ln - 3, ".pb")) continue;
                char name[256];
                PATHF(name, "%.*s", (int)(ln - 8), de->d_name + 5);
                PATHF(p, "%s/%s", td, de->d_name);
                mn_onnx_tensor gr;
                if (mn_onnx_tensor_read(&gr, p, g_err, sizeof g_err)) {
                    CHECK_MSG(0, "%s", g_err);
                    continue;
                }
                mn_tensor t;
                CHECK_MSG(mn_onnx_find(m, name, &t) == MN_OK, "%s: initializer %s is not in the graph", dir, name);
                int32_t gid = session_grad_of(s, t);
                CHECK_MSG(gid != MN_NONE, "%s %s: no gradient for %s", dir, bn, name);
                if (gid != MN_NONE && gr.dtype == MN_ONNX_FLOAT) {
                    float *ours = malloc((size_t)gr.numel * sizeof *ours);
                    CHECK_OK(session_read_f32(s, gid, ours, (size_t)gr.numel), mn_session_error(s));
                    double e = rel_l2(ours, gr.data, gr.numel);
                    CHECK_MSG(e <= TOL_GRAD, "%s %s: gradient of %s: rel L2 %.3g > %.0e", dir, bn, name, e, TOL_GRAD);
                    if (!(e <= worst)) {
                        worst = e;
                        snprintf(worst_name, sizeof worst_name, "%s", name);
                    }
                    free(ours);
                    ngrad++;
                }
                mn_onnx_tensor_free(&gr);
            }
            if (dd) closedir(dd);
            CHECK_MSG(ngrad >= 1, "%s: no gradients in the reference", dir);
            printf("  %-52s %-6s logits rel L2 %.2e, loss %.8f vs %.8f, %d gradients, worst rel L2 %.2e (%s)\n", dir,
                   bn, e_fwd, loss_v, want, ngrad, worst, worst_name);
        }
        mn_session_destroy(s);
    }
    mn_onnx_destroy(m);
    mn_graph_destroy(g);
    mn_onnx_tensor_free(&lab);
    mn_onnx_tensor_free(&lossref);
done:
    for (int k = 0; k < nin; k++) mn_onnx_tensor_free(&in[k]);
    for (int k = 0; k < nout; k++) mn_onnx_tensor_free(&out[k]);
}

/* ---- a fixture written here: an MLP with gradients by hand --------------------------- */

enum { NB = 4, NI = 3, NH = 5, NO = 2 };
static const float W1[NI * NH] = {0.5f, -0.2f, 0.1f, 0.3f, -0.4f, 0.2f, 0.7f, -0.1f, 0.05f, 0.6f, -0.3f, 0.4f, 0.25f, -0.5f, 0.15f};
static const float B1[NH] = {0.1f, -0.1f, 0.05f, 0.0f, 0.2f};
static const float W2[NO * NH] = {0.3f, -0.6f, 0.2f, 0.5f, -0.1f, -0.4f, 0.1f, 0.7f, -0.2f, 0.3f};
static const float B2[NO] = {0.05f, -0.05f};
static const float X[NB * NI] = {1.0f, -0.5f, 0.25f, 0.3f, 0.8f, -1.2f, -0.7f, 0.4f, 0.9f, 0.0f, 1.5f, -0.3f};
static const int64_t LAB[NB] = {0, 1, 1, 0};

static void write_pb(ob *b, const char *path, int dtype, int rank, const int64_t *dims, const void *data) {
    Onnx__TensorProto *t = ob_tensor(b, "", dtype, rank, dims, data, true);
    size_t len = protobuf_c_message_get_packed_size(&t->base);
    uint8_t *buf = malloc(len ? len : 1);
    protobuf_c_message_pack(&t->base, buf);
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f && fwrite(buf, 1, len, f) == len, "cannot write %s", path);
    if (f) fclose(f);
    free(buf);
}

static void write_mlp_fixture(const char *dir) {
    char p[8192];
    mkdir(dir, 0755);
    PATHF(p, "%s/test_data_set_0", dir);
    mkdir(p, 0755);
    PATHF(p, "%s/train", dir);
    mkdir(p, 0755);
    ob b;
    ob_init(&b, 17);
    const int64_t xd[2] = {NB, NI}, yd[2] = {NB, NO}, w1d[2] = {NI, NH}, b1d[1] = {NH}, w2d[2] = {NO, NH}, b2d[1] = {NO};
    ob_input(&b, "x", 1, 2, xd);
    ob_output(&b, "logits", 1, 2, yd);
    ob_init_f32(&b, "fc1.weight", 2, w1d, W1);
    ob_init_f32(&b, "fc1.bias", 1, b1d, B1);
    ob_init_f32(&b, "fc2.weight", 2, w2d, W2);
    ob_init_f32(&b, "fc2.bias", 1, b2d, B2);
    ob_node(&b, "Gemm", "fc1", (const char *[]){"x", "fc1.weight", "fc1.bias", NULL}, (const char *[]){"h", NULL});
    ob_node(&b, "Relu", "act", (const char *[]){"h", NULL}, (const char *[]){"r", NULL});
    Onnx__NodeProto *n = ob_node(&b, "Gemm", "fc2", (const char *[]){"r", "fc2.weight", "fc2.bias", NULL},
                                 (const char *[]){"logits", NULL});
    ob_attr_int(&b, n, "transB", 1);
    size_t len;
    uint8_t *buf = ob_pack(&b, &len);
    PATHF(p, "%s/model.onnx", dir);
    FILE *f = fopen(p, "wb");
    CHECK(f && fwrite(buf, 1, len, f) == len);
    if (f) fclose(f);
    free(buf);
    /* forward and backward in double */
    double z1[NB][NH], h[NB][NH], z2[NB][NO], dz2[NB][NO], dz1[NB][NH], loss = 0;
    for (int i = 0; i < NB; i++) {
        for (int j = 0; j < NH; j++) {
            z1[i][j] = B1[j];
            for (int k = 0; k < NI; k++) z1[i][j] += (double)X[i * NI + k] * W1[k * NH + j];
            h[i][j] = z1[i][j] > 0 ? z1[i][j] : 0;
        }
        double mx = -INFINITY, se = 0;
        for (int o = 0; o < NO; o++) {
            z2[i][o] = B2[o];
            for (int j = 0; j < NH; j++) z2[i][o] += h[i][j] * W2[o * NH + j];
            mx = fmax(mx, z2[i][o]);
        }
        for (int o = 0; o < NO; o++) se += exp(z2[i][o] - mx);
        loss += (log(se) + mx - z2[i][LAB[i]]) / NB;
        for (int o = 0; o < NO; o++) dz2[i][o] = (exp(z2[i][o] - mx) / se - (o == LAB[i])) / NB;
        for (int j = 0; j < NH; j++) {
            double s = 0;
            for (int o = 0; o < NO; o++) s += dz2[i][o] * W2[o * NH + j];
            dz1[i][j] = z1[i][j] > 0 ? s : 0;
        }
    }
    float y[NB * NO], gw1[NI * NH] = {0}, gb1[NH] = {0}, gw2[NO * NH] = {0}, gb2[NO] = {0};
    for (int i = 0; i < NB; i++) {
        for (int o = 0; o < NO; o++) {
            y[i * NO + o] = (float)z2[i][o];
            gb2[o] += (float)dz2[i][o];
            for (int j = 0; j < NH; j++) gw2[o * NH + j] += (float)(dz2[i][o] * h[i][j]);
        }
        for (int j = 0; j < NH; j++) {
            gb1[j] += (float)dz1[i][j];
            for (int k = 0; k < NI; k++) gw1[k * NH + j] += (float)(X[i * NI + k] * dz1[i][j]);
        }
    }
    PATHF(p, "%s/test_data_set_0/input_0.pb", dir);
    write_pb(&b, p, 1, 2, xd, X);
    PATHF(p, "%s/test_data_set_0/output_0.pb", dir);
    write_pb(&b, p, 1, 2, yd, y);
    const int64_t nd[1] = {NB};
    PATHF(p, "%s/train/labels.pb", dir);
    write_pb(&b, p, 7, 1, nd, LAB);
    PATHF(p, "%s/train/loss.pb", dir);
    write_pb(&b, p, 11, 0, NULL, &loss);
    PATHF(p, "%s/train/grad.fc1.weight.pb", dir);
    write_pb(&b, p, 1, 2, w1d, gw1);
    PATHF(p, "%s/train/grad.fc1.bias.pb", dir);
    write_pb(&b, p, 1, 1, b1d, gb1);
    PATHF(p, "%s/train/grad.fc2.weight.pb", dir);
    write_pb(&b, p, 1, 2, w2d, gw2);
    PATHF(p, "%s/train/grad.fc2.bias.pb", dir);
    write_pb(&b, p, 1, 1, b2d, gb2);
    ob_free(&b);
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char p[8192];
        PATHF(p, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(p);
        else unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

int main(void) {
    char tmp[256];
    PATHF(tmp, "%s/mn_onnx_fixture_%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    write_mlp_fixture(tmp);
    mn_device *dev = th_require_vulkan();
    check_fixture(tmp, MN_BACKEND_CPU, NULL);
    if (dev) check_fixture(tmp, MN_BACKEND_VULKAN, dev);
    remove_tree(tmp);

    const char *root = getenv("MN_ONNX_FIXTURES");
    char def[4096];
    if (!root) {
        PATHF(def, "%s/../fixtures/onnx", getenv("MN_TEST_DATA") ? getenv("MN_TEST_DATA") : "tests/data");
        root = def;
    }
    DIR *d = opendir(root);
    int found = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char p[4096], mp[4200];
        PATHF(p, "%s/%s", root, de->d_name);
        PATHF(mp, "%s/model.onnx", p);
        struct stat sb;
        if (stat(mp, &sb) != 0) continue;
        found++;
        check_fixture(p, MN_BACKEND_CPU, NULL);
        if (dev) check_fixture(p, MN_BACKEND_VULKAN, dev);
    }
    if (d) closedir(d);
    mn_device_close(dev);
    /* the fixtures are committed (tests/fixtures/onnx): none is a failure */
    CHECK_MSG(found >= 2, "%d PyTorch fixtures in %s, want resnet18-tiny and llama-tiny "
              "(tests/fixtures/gen_onnx.py writes them)", found, root);
    return th_finish("test_onnx_torch");
}
