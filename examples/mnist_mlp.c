/* mnist_mlp.c - the MNIST MLP (784-128-10) with the public API only.
 *
 *   example_mnist_mlp [MNIST_FILE]
 *
 * Reads the MNIST cache file written by `make data` (format in docs/DATA.md),
 * trains two epochs with AdamW and prints the test accuracy. Without the file
 * it trains on a synthetic 10-class problem so the example still runs.
 * Exits non-zero if anything fails or if the model did not learn.
 */
#include <meganeura.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B 64
#define CHECK(call)                                                                       \
    do {                                                                                  \
        if ((call) != MN_OK) {                                                            \
            fprintf(stderr, "%s failed: %s\n", #call, g ? mn_graph_error(g) : "");        \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)
#define SCHECK(call)                                                                      \
    do {                                                                                  \
        if ((call) != MN_OK) {                                                            \
            fprintf(stderr, "%s failed: %s\n", #call, mn_session_error(s));               \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

/* Loads n images ([n,784] floats) and labels; returns the count or 0. */
static int load(const char *path, float **x, int32_t **y) {
    FILE *f = path ? fopen(path, "rb") : NULL;
    unsigned char hdr[20];
    if (!f || fread(hdr, 1, 20, f) != 20 || memcmp(hdr, "MNDS", 4) != 0) {
        if (f) fclose(f);
        return 0;
    }
    int n = hdr[8] | hdr[9] << 8 | hdr[10] << 16;
    unsigned char *px = malloc((size_t)n * 784), *lb = malloc((size_t)n);
    int ok = fread(px, 784, (size_t)n, f) == (size_t)n && fread(lb, 1, (size_t)n, f) == (size_t)n;
    fclose(f);
    *x = malloc((size_t)n * 784 * sizeof **x);
    *y = malloc((size_t)n * sizeof **y);
    for (size_t i = 0; ok && i < (size_t)n * 784; i++) (*x)[i] = px[i] / 255.0f;
    for (int i = 0; ok && i < n; i++) (*y)[i] = lb[i];
    free(px);
    free(lb);
    return ok ? n : 0;
}

/* Synthetic stand-in: class c lights up pixels [c*78, c*78+78) plus noise. */
static int synth(float **x, int32_t **y) {
    int n = 2000;
    *x = malloc((size_t)n * 784 * sizeof **x);
    *y = malloc((size_t)n * sizeof **y);
    unsigned r = 1;
    for (int i = 0; i < n; i++) {
        int c = (i / 5) % 10; /* not i % 10: every 5th image is held out */
        (*y)[i] = c;
        for (int j = 0; j < 784; j++) {
            r = r * 1103515245u + 12345u;
            (*x)[i * 784 + j] = (j / 78 == c ? 0.8f : 0.0f) + (float)((r >> 16) & 255) / 1024.0f;
        }
    }
    return n;
}

int main(int argc, char **argv) {
    float *x = NULL;
    int32_t *y = NULL;
    int n = load(argc > 1 ? argv[1] : getenv("MEGANEURA_MNIST"), &x, &y);
    const char *what = "MNIST";
    if (!n) n = synth(&x, &y), what = "synthetic data";

    /* the graph: logits = relu(x @ w1 + b1) @ w2 + b2, loss = cross-entropy */
    mn_graph *g = NULL;
    CHECK(mn_graph_create(&g));
    mn_tensor in, labels, w1, b1, w2, b2, h, logits, loss;
    mn_init kaiming = {MN_INIT_KAIMING_UNIFORM, 0, 0}, zeros = {MN_INIT_ZEROS, 0, 0};
    CHECK(mn_graph_input(g, &in, "x", MN_F32, 2, (int64_t[]){B, 784}));
    CHECK(mn_graph_input(g, &labels, "labels", MN_I32, 1, (int64_t[]){B}));
    CHECK(mn_graph_param(g, &w1, "fc1.weight", 2, (int64_t[]){784, 128}, kaiming));
    CHECK(mn_graph_param(g, &b1, "fc1.bias", 1, (int64_t[]){128}, zeros));
    CHECK(mn_graph_param(g, &w2, "fc2.weight", 2, (int64_t[]){128, 10}, kaiming));
    CHECK(mn_graph_param(g, &b2, "fc2.bias", 1, (int64_t[]){10}, zeros));
    CHECK(mn_matmul(g, &h, in, w1));
    CHECK(mn_add(g, &h, h, b1));
    CHECK(mn_relu(g, &h, h));
    CHECK(mn_matmul(g, &logits, h, w2));
    CHECK(mn_add(g, &logits, logits, b2));
    CHECK(mn_cross_entropy(g, &loss, logits, labels));
    CHECK(mn_graph_output(g, logits, "logits"));
    CHECK(mn_graph_loss(g, loss));

    /* a training session on the CPU backend with AdamW */
    mn_session_options opt = mn_session_default_options();
    opt.mode = MN_MODE_TRAINING;
    opt.optim = mn_optimizer_default(MN_OPTIM_ADAMW);
    opt.seed = 42;
    mn_session *s = NULL;
    mn_status st = mn_session_create(&s, g, &opt);
    mn_graph_destroy(g); /* the session keeps its own copy */
    g = NULL;
    if (st) {
        fprintf(stderr, "session: %s\n", mn_session_error(s));
        mn_session_destroy(s);
        return 1;
    }

    int ntrain = n * 4 / 5, ntest = n - ntrain, correct = 0, total = 0;
    float first = 0, last = 0;
    for (int epoch = 0; epoch < 2; epoch++)
        for (int b = 0; b + B <= ntrain; b += B) {
            float bx[B * 784];
            int32_t by[B];
            for (int i = 0; i < B; i++) {
                /* a fixed shuffle of the training half (7919 is coprime to its size);
                 * k skips every 5th image: those are the held-out set */
                int k = (int)(((long)(b + i) * 7919) % ntrain) * 5 / 4;
                memcpy(bx + i * 784, x + (size_t)k * 784, sizeof(float) * 784);
                by[i] = y[k];
            }
            SCHECK(mn_session_set_input(s, "x", bx, sizeof bx));
            SCHECK(mn_session_set_input(s, "labels", by, sizeof by));
            SCHECK(mn_session_step(s));
            SCHECK(mn_session_loss(s, &last));
            if (epoch == 0 && b == 0) first = last;
        }
    /* test: forward only, argmax of the logits */
    for (int b = 0; b + B <= ntest; b += B) {
        float bx[B * 784], lg[B * 10];
        int32_t by[B];
        for (int i = 0; i < B; i++) {
            int k = (b + i) * 5 + 4;
            k %= n;
            memcpy(bx + i * 784, x + (size_t)k * 784, sizeof(float) * 784);
            by[i] = y[k];
        }
        SCHECK(mn_session_set_input(s, "x", bx, sizeof bx));
        SCHECK(mn_session_set_input(s, "labels", by, sizeof by));
        SCHECK(mn_session_run(s));
        SCHECK(mn_session_output(s, "logits", lg, sizeof lg));
        for (int i = 0; i < B; i++) {
            int best = 0;
            for (int c = 1; c < 10; c++)
                if (lg[i * 10 + c] > lg[i * 10 + best]) best = c;
            correct += best == by[i];
            total++;
        }
    }
    printf("%s: loss %.4f -> %.4f, held-out accuracy %.2f%% (%d/%d)\n", what, first, last,
           100.0 * correct / total, correct, total);
    mn_session_destroy(s);
    free(x);
    free(y);
    return (last < first && correct * 10 > total * 8) ? 0 : 1;
}
