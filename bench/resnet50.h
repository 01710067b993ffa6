/* resnet50.h - torchvision's ResNet-50 (v1.5: the stride on the 3x3
 * convolution of a bottleneck) through the public API, for the benchmark
 * (bench.c) and the dispatch counts (tests/test_vk_kernel_counts.c).
 *
 * NCHW input "x" [B, 3, S, S], labels "labels" i32 [B], output "logits"
 * [B, classes], loss: cross-entropy. Names follow torchvision's state dict
 * (conv1.weight, bn1.weight, layer1.0.conv1.weight, layer1.0.downsample.0.
 * weight, fc.weight stored [in, out] here, ...). BatchNorm with momentum 0.1,
 * eps 1e-5; training = false uses the running statistics. At S = 224 and
 * 1000 classes it has torchvision's 25,557,032 trainable parameters.
 *
 * Does not: load torchvision weights (the layouts differ for fc), check
 * anything (the callers do).
 */
#ifndef MN_BENCH_RESNET50_H
#define MN_BENCH_RESNET50_H

#include <stdio.h>

#include "meganeura.h"

static mn_status rn50_conv_bn(mn_graph *g, mn_tensor *out, mn_tensor x, const char *conv, const char *bn, int cin,
                              int cout, int k, int stride, bool train, bool relu) {
    char n[96];
    mn_tensor w, gw, gb, rm, rv, y;
    mn_init kn = {MN_INIT_KAIMING_NORMAL, 0, 0}, one = {MN_INIT_CONSTANT, 1, 0}, zero = {MN_INIT_ZEROS, 0, 0};
    mn_conv2d_params p = {{stride, stride}, {k / 2, k / 2}, {1, 1}, 1};
    mn_status st;
    snprintf(n, sizeof n, "%s.weight", conv);
    if ((st = mn_graph_param(g, &w, n, 4, (int64_t[]){cout, cin, k, k}, kn))) return st;
    snprintf(n, sizeof n, "%s.weight", bn);
    if ((st = mn_graph_param(g, &gw, n, 1, (int64_t[]){cout}, one))) return st;
    snprintf(n, sizeof n, "%s.bias", bn);
    if ((st = mn_graph_param(g, &gb, n, 1, (int64_t[]){cout}, zero))) return st;
    snprintf(n, sizeof n, "%s.running_mean", bn);
    if ((st = mn_graph_param(g, &rm, n, 1, (int64_t[]){cout}, zero))) return st;
    snprintf(n, sizeof n, "%s.running_var", bn);
    if ((st = mn_graph_param(g, &rv, n, 1, (int64_t[]){cout}, one))) return st;
    if ((st = mn_conv2d(g, &y, x, w, MN_NONE, &p))) return st;
    if ((st = mn_batch_norm2d(g, &y, y, gw, gb, rm, rv, 0.1f, 1e-5f, train))) return st;
    if (relu && (st = mn_relu(g, &y, y))) return st;
    *out = y;
    return MN_OK;
}

/* One bottleneck: 1x1 (width), 3x3 (width, stride), 1x1 (4 * width), the
 * skip through a 1x1 convolution + BN where the shape changes. */
static mn_status rn50_block(mn_graph *g, mn_tensor *h, const char *name, int cin, int width, int stride, bool train) {
    char c[3][80], b[3][80], dc[80], db[80];
    for (int i = 0; i < 3; i++) {
        snprintf(c[i], sizeof c[i], "%s.conv%d", name, i + 1);
        snprintf(b[i], sizeof b[i], "%s.bn%d", name, i + 1);
    }
    snprintf(dc, sizeof dc, "%s.downsample.0", name);
    snprintf(db, sizeof db, "%s.downsample.1", name);
    mn_tensor y, skip = *h;
    mn_status st;
    if ((st = rn50_conv_bn(g, &y, *h, c[0], b[0], cin, width, 1, 1, train, true)) ||
        (st = rn50_conv_bn(g, &y, y, c[1], b[1], width, width, 3, stride, train, true)) ||
        (st = rn50_conv_bn(g, &y, y, c[2], b[2], width, 4 * width, 1, 1, train, false)))
        return st;
    if ((stride != 1 || cin != 4 * width) && (st = rn50_conv_bn(g, &skip, *h, dc, db, cin, 4 * width, 1, stride, train, false)))
        return st;
    if ((st = mn_add(g, &y, y, skip)) || (st = mn_relu(g, &y, y))) return st;
    *h = y;
    return MN_OK;
}

/* The whole network into g (inputs, parameters, output, loss). */
static mn_status resnet50_build(mn_graph *g, int64_t batch, int64_t size, int classes, bool train) {
    static const int blocks[4] = {3, 4, 6, 3}, widths[4] = {64, 128, 256, 512};
    mn_tensor x, lab, h, flat, fw, fb, logits, loss;
    mn_init ku = {MN_INIT_KAIMING_UNIFORM, 0, 0}, zero = {MN_INIT_ZEROS, 0, 0};
    mn_pool2d_params mp = {{3, 3}, {2, 2}, {1, 1}};
    mn_status st;
    if ((st = mn_graph_input(g, &x, "x", MN_F32, 4, (int64_t[]){batch, 3, size, size})) ||
        (st = mn_graph_input(g, &lab, "labels", MN_I32, 1, (int64_t[]){batch})) ||
        (st = rn50_conv_bn(g, &h, x, "conv1", "bn1", 3, 64, 7, 2, train, true)) ||
        (st = mn_max_pool2d(g, &h, h, &mp)))
        return st;
    /* conv1 is 7x7 with padding 3: k / 2 */
    int cin = 64;
    for (int l = 0; l < 4; l++)
        for (int i = 0; i < blocks[l]; i++) {
            char name[32];
            snprintf(name, sizeof name, "layer%d.%d", l + 1, i);
            if ((st = rn50_block(g, &h, name, cin, widths[l], i == 0 && l > 0 ? 2 : 1, train))) return st;
            cin = 4 * widths[l];
        }
    if ((st = mn_global_avg_pool(g, &h, h)) || (st = mn_reshape(g, &flat, h, 2, (int64_t[]){batch, cin})) ||
        (st = mn_graph_param(g, &fw, "fc.weight", 2, (int64_t[]){cin, classes}, ku)) ||
        (st = mn_graph_param(g, &fb, "fc.bias", 1, (int64_t[]){classes}, zero)) ||
        (st = mn_matmul(g, &logits, flat, fw)) || (st = mn_add(g, &logits, logits, fb)) ||
        (st = mn_cross_entropy(g, &loss, logits, lab)) || (st = mn_graph_output(g, logits, "logits")))
        return st;
    return mn_graph_loss(g, loss);
}

#endif
