/* resnet.c - torchvision's ResNet (18/34/50/101/152 and narrower or
 * shallower variants of the same code) built through the public API, for
 * training (batch norms on batch statistics), evaluation (running
 * statistics) and inference with every batch norm folded into its conv.
 *
 * Layout (NCHW; torchvision.models.resnet, v1.5):
 *   x = maxpool3x3/2(relu(bn1(conv1_7x7/2(pixels))))          // (B,w,H/4,W/4)
 *   stage i = 1..4, planes p = w << (i-1), blocks layers[i-1]; block j:
 *     basic:      y = bn2(conv2_3x3(relu(bn1(conv1_3x3/s(x)))))
 *     bottleneck: y = bn3(conv3_1x1(relu(bn2(conv2_3x3/s(relu(bn1(conv1_1x1(x))))))))   // 4p channels
 *     x = relu(y + (downsample(x) or x)), s = 2 for j = 0 of stages 2-4;
 *     downsample = bn(conv_1x1/s) on block 0 when the shape changes
 *   logits = fc(mean over H, W of x)                            // (B,classes)
 *
 * Does not: include anything below meganeura.h, decode images (image.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model.h"

typedef struct resnet {
    mn_resnet_config c;
    mn_resnet_options o;
} resnet;

static const struct {
    int depth;
    mn_resnet_block block;
    int layers[4];
} presets[] = {
    {18, MN_RESNET_BASIC, {2, 2, 2, 2}},       {34, MN_RESNET_BASIC, {3, 4, 6, 3}},
    {50, MN_RESNET_BOTTLENECK, {3, 4, 6, 3}},  {101, MN_RESNET_BOTTLENECK, {3, 4, 23, 3}},
    {152, MN_RESNET_BOTTLENECK, {3, 8, 36, 3}},
};

static void defaults(mn_resnet_config *c) {
    memset(c, 0, sizeof *c);
    c->width = 64;
    c->num_classes = 1000;
    c->in_channels = 3;
    c->bn_eps = 1e-5f;
    c->bn_momentum = 0.1f;
}

mn_status mn_resnet_config_preset(mn_resnet_config *out, int depth, char *err, size_t errcap) {
    if (!out) return MN_E_INVALID;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (presets[i].depth == depth) {
            defaults(out);
            out->block = presets[i].block;
            memcpy(out->layers, presets[i].layers, sizeof out->layers);
            return MN_OK;
        }
    hf_fmt(err, errcap, "resnet: no preset of depth %d (18, 34, 50, 101, 152)", depth);
    return MN_E_INVALID;
}

static bool has(const mn_hf_checkpoint *c, const char *name, mn_safetensors_tensor *t) {
    mn_safetensors_tensor dummy;
    return mn_hf_checkpoint_find(c, name, t ? t : &dummy) == MN_OK;
}

mn_status mn_resnet_config_from_checkpoint(mn_resnet_config *out, const mn_hf_checkpoint *c, char *err,
                                           size_t errcap) {
    if (!out || !c) {
        hf_fmt(err, errcap, "resnet_config_from_checkpoint: %s is NULL", out ? "checkpoint" : "out");
        return MN_E_INVALID;
    }
    mn_resnet_config r;
    defaults(&r);
    mn_safetensors_tensor t;
    if (!has(c, "conv1.weight", &t) || t.rank != 4 || t.shape[2] != 7 || t.shape[3] != 7) {
        hf_fmt(err, errcap, "resnet: the checkpoint is not a torchvision ResNet: conv1.weight [width, channels, 7, 7] %s",
               has(c, "conv1.weight", NULL) ? "has another shape" : "is missing");
        return MN_E_FORMAT;
    }
    r.width = t.shape[0];
    r.in_channels = t.shape[1];
    r.block = has(c, "layer1.0.conv3.weight", NULL) ? MN_RESNET_BOTTLENECK : MN_RESNET_BASIC;
    for (int i = 0; i < 4; i++) {
        int n = 0;
        char nm[64];
        for (;;) {
            snprintf(nm, sizeof nm, "layer%d.%d.conv1.weight", i + 1, n);
            if (!has(c, nm, NULL) || n == MN_RESNET_MAX_BLOCKS + 1) break;
            n++;
        }
        if (n < 1 || n > MN_RESNET_MAX_BLOCKS) {
            hf_fmt(err, errcap, "resnet: the checkpoint has %s blocks in layer%d (need 1 to %d: layer%d.0.conv1.weight ...)",
                   n ? "too many" : "no", i + 1, MN_RESNET_MAX_BLOCKS, i + 1);
            return MN_E_FORMAT;
        }
        r.layers[i] = n;
    }
    const int64_t feat = (r.width << 3) * (r.block == MN_RESNET_BOTTLENECK ? 4 : 1);
    if (!has(c, "fc.weight", &t) || t.rank != 2 || t.shape[1] != feat) {
        hf_fmt(err, errcap, "resnet: fc.weight [classes, %lld] %s", (long long)feat,
               has(c, "fc.weight", NULL) ? "has another shape" : "is missing");
        return MN_E_FORMAT;
    }
    r.num_classes = t.shape[0];
    *out = r;
    return MN_OK;
}

mn_resnet_options mn_resnet_default_options(void) {
    mn_resnet_options o;
    memset(&o, 0, sizeof o);
    o.kind = MN_RESNET_TRAIN;
    o.batch = 1;
    o.height = o.width = 224;
    return o;
}

/* ---- building --------------------------------------------------------------- */

static mn_status src_add(mn_model *m, const char *name, int rank, const int64_t *shape) {
    return model_list_add(m, &m->src, &m->nsrc, &m->capsrc, name, rank, shape, MN_NONE);
}

/* conv (no bias) + batch norm, or the folded conv with a bias. */
static mn_status conv_bn(mb *b, const resnet *r, mn_tensor *out, mn_tensor x, const char *conv, const char *bn,
                         int64_t cin, int64_t cout, int k, int stride, int pad) {
    mn_model *m = b->m;
    const mn_resnet_config *c = &r->c;
    mb_where(b, "%s", conv);
    /* torchvision: kaiming_normal_(mode="fan_out", nonlinearity="relu") */
    const mn_init kn = {MN_INIT_NORMAL, 0, sqrtf(2.0f / (float)(cout * k * k))};
    const mn_init one = {MN_INIT_CONSTANT, 1, 0}, zero = {MN_INIT_ZEROS, 0, 0};
    const mn_conv2d_params p = {{stride, stride}, {pad, pad}, {1, 1}, 1};
    mn_tensor w, bias = MN_NONE, gw, gb, rm, rv, y;
    MB_TRY(mb_paramf(b, &w, conv, "weight", 4, MB_S(cout, cin, k, k), kn));
    if (r->o.kind == MN_RESNET_FOLDED) {
        MB_TRY(mb_paramf(b, &bias, conv, "bias", 1, MB_S(cout), zero));
        char nm[300];
        static const char *const leaves[] = {"weight", "bias", "running_mean", "running_var"};
        snprintf(nm, sizeof nm, "%s.weight", conv);
        MB_TRY(src_add(m, nm, 4, MB_S(cout, cin, k, k)));
        for (int i = 0; i < 4; i++) {
            snprintf(nm, sizeof nm, "%s.%s", bn, leaves[i]);
            MB_TRY(src_add(m, nm, 1, MB_S(cout)));
        }
        if (m->nfolds == m->capfolds) {
            int cap = m->capfolds ? 2 * m->capfolds : 64;
            model_fold *f = realloc(m->folds, (size_t)cap * sizeof *f);
            if (!f) {
                model_set_err(m, "resnet: out of memory");
                return MN_E_NOMEM;
            }
            m->folds = f;
            m->capfolds = cap;
        }
        model_fold *f = &m->folds[m->nfolds];
        memset(f, 0, sizeof *f);
        f->conv = strdup(conv);
        f->bn = strdup(bn);
        if (!f->conv || !f->bn) {
            free(f->conv), free(f->bn);
            model_set_err(m, "resnet: out of memory");
            return MN_E_NOMEM;
        }
        f->out_ch = cout;
        f->per_ch = cin * k * k;
        f->w = w;
        f->b = bias;
        m->nfolds++;
        return mb_ok(b, mn_conv2d(b->g, out, x, w, bias, &p));
    }
    MB_TRY(mb_ok(b, mn_conv2d(b->g, &y, x, w, MN_NONE, &p)));
    mb_where(b, "%s", bn);
    MB_TRY(mb_paramf(b, &gw, bn, "weight", 1, MB_S(cout), one));
    MB_TRY(mb_paramf(b, &gb, bn, "bias", 1, MB_S(cout), zero));
    MB_TRY(mb_paramf(b, &rm, bn, "running_mean", 1, MB_S(cout), zero));
    MB_TRY(mb_paramf(b, &rv, bn, "running_var", 1, MB_S(cout), one));
    return mb_ok(b, mn_batch_norm2d(b->g, out, y, gw, gb, rm, rv, c->bn_momentum, c->bn_eps,
                                    r->o.kind == MN_RESNET_TRAIN));
}

static mn_status block(mb *b, const resnet *r, mn_tensor *x, int stage, int j, int64_t *inplanes) {
    const bool bottle = r->c.block == MN_RESNET_BOTTLENECK;
    const int64_t planes = r->c.width << stage, outc = planes * (bottle ? 4 : 1);
    const int stride = j == 0 && stage > 0 ? 2 : 1;
    char pre[64], cv[96], bn[96];
    snprintf(pre, sizeof pre, "layer%d.%d", stage + 1, j);
#define UNIT(n) (snprintf(cv, sizeof cv, "%s.conv%d", pre, n), snprintf(bn, sizeof bn, "%s.bn%d", pre, n))
    mn_tensor y, idn = *x;
    if (bottle) {
        UNIT(1);
        MB_TRY(conv_bn(b, r, &y, *x, cv, bn, *inplanes, planes, 1, 1, 0));
        MB_TRY(mb_ok(b, mn_relu(b->g, &y, y)));
        UNIT(2);
        MB_TRY(conv_bn(b, r, &y, y, cv, bn, planes, planes, 3, stride, 1));
        MB_TRY(mb_ok(b, mn_relu(b->g, &y, y)));
        UNIT(3);
        MB_TRY(conv_bn(b, r, &y, y, cv, bn, planes, outc, 1, 1, 0));
    } else {
        UNIT(1);
        MB_TRY(conv_bn(b, r, &y, *x, cv, bn, *inplanes, planes, 3, stride, 1));
        MB_TRY(mb_ok(b, mn_relu(b->g, &y, y)));
        UNIT(2);
        MB_TRY(conv_bn(b, r, &y, y, cv, bn, planes, outc, 3, 1, 1));
    }
#undef UNIT
    if (j == 0 && (stride != 1 || *inplanes != outc)) {
        snprintf(cv, sizeof cv, "%s.downsample.0", pre);
        snprintf(bn, sizeof bn, "%s.downsample.1", pre);
        MB_TRY(conv_bn(b, r, &idn, *x, cv, bn, *inplanes, outc, 1, stride, 0));
    }
    mb_where(b, "%s (the residual)", pre);
    MB_TRY(mb_ok(b, mn_add(b->g, &y, y, idn)));
    MB_TRY(mb_ok(b, mn_relu(b->g, x, y)));
    *inplanes = outc;
    return MN_OK;
}

static mn_status build(mn_model *m, resnet *r) {
    const mn_resnet_config *c = &r->c;
    const mn_resnet_options *o = &r->o;
    mb b;
    mb_init(&b, m, o->freeze, o->freeze_user);
    mn_tensor x, labels = MN_NONE, h, logits, loss;
    MB_TRY(mb_ok(&b, mn_graph_input(b.g, &x, "pixels", MN_F32, 4, MB_S(o->batch, c->in_channels, o->height, o->width))));
    if (o->kind == MN_RESNET_TRAIN) MB_TRY(mb_ok(&b, mn_graph_input(b.g, &labels, "labels", MN_I32, 1, MB_S(o->batch))));
    MB_TRY(conv_bn(&b, r, &h, x, "conv1", "bn1", c->in_channels, c->width, 7, 2, 3));
    mb_where(&b, "the stem's pooling");
    MB_TRY(mb_ok(&b, mn_relu(b.g, &h, h)));
    const mn_pool2d_params mp = {{3, 3}, {2, 2}, {1, 1}};
    MB_TRY(mb_ok(&b, mn_max_pool2d(b.g, &h, h, &mp)));
    int64_t inplanes = c->width;
    for (int s = 0; s < 4; s++)
        for (int j = 0; j < c->layers[s]; j++) MB_TRY(block(&b, r, &h, s, j, &inplanes));
    mb_where(&b, "the head (avgpool, fc)");
    MB_TRY(mb_ok(&b, mn_global_avg_pool(b.g, &h, h)));
    MB_TRY(mb_ok(&b, mn_reshape(b.g, &h, h, 2, MB_S(o->batch, inplanes))));
    MB_TRY(mb_linear(&b, &logits, h, "fc", c->num_classes, inplanes, true));
    if (o->kind == MN_RESNET_FOLDED) {
        MB_TRY(src_add(m, "fc.weight", 2, MB_S(c->num_classes, inplanes)));
        MB_TRY(src_add(m, "fc.bias", 1, MB_S(c->num_classes)));
    }
    MB_TRY(mb_ok(&b, mn_graph_output(b.g, logits, "logits")));
    model_name(m, "pixels", x);
    model_name(m, "logits", logits);
    if (o->kind == MN_RESNET_TRAIN) {
        mb_where(&b, "the loss");
        MB_TRY(mb_ok(&b, mn_cross_entropy(b.g, &loss, logits, labels)));
        MB_TRY(mb_ok(&b, mn_graph_loss(b.g, loss)));
        model_name(m, "labels", labels);
        model_name(m, "loss", loss);
    }
    return MN_OK;
}

static mn_status check(mn_model *m, const mn_resnet_config *c, const mn_resnet_options *o) {
    for (int i = 0; i < 4; i++)
        if (c->layers[i] < 1 || c->layers[i] > MN_RESNET_MAX_BLOCKS) {
            model_set_err(m, "resnet: layers[%d] = %d: each stage needs 1 to %d blocks", i, c->layers[i],
                          MN_RESNET_MAX_BLOCKS);
            return MN_E_INVALID;
        }
    if ((c->block != MN_RESNET_BASIC && c->block != MN_RESNET_BOTTLENECK) || c->width < 1 ||
        c->width > MN_RESNET_MAX_WIDTH || c->num_classes < 1 || c->num_classes > (1 << 24) || c->in_channels < 1 ||
        c->in_channels > 4096 || !(c->bn_eps > 0) || !(c->bn_eps < 1) || !(c->bn_momentum >= 0) ||
        !(c->bn_momentum <= 1)) {
        model_set_err(m, "resnet: the config is not valid (block %d, width %lld in 1..%d, classes %lld, channels %lld, "
                         "bn eps %g in (0,1), momentum %g in [0,1])",
                      (int)c->block, (long long)c->width, MN_RESNET_MAX_WIDTH, (long long)c->num_classes,
                      (long long)c->in_channels, (double)c->bn_eps, (double)c->bn_momentum);
        return MN_E_INVALID;
    }
    if ((o->kind != MN_RESNET_TRAIN && o->kind != MN_RESNET_EVAL && o->kind != MN_RESNET_FOLDED) || o->batch < 1 ||
        o->batch > (1 << 20) || o->height < 1 || o->width < 1 || o->height > 1 << 16 || o->width > 1 << 16) {
        model_set_err(m, "resnet: options: kind %d, batch %lld, image %lld x %lld (batch and sides >= 1)", (int)o->kind,
                      (long long)o->batch, (long long)o->height, (long long)o->width);
        return MN_E_INVALID;
    }
    return MN_OK;
}

static void free_resnet(void *p) { free(p); }

mn_status mn_resnet_create(mn_model **out, mn_graph *g, const mn_resnet_config *c, const mn_resnet_options *o) {
    if (!out) return MN_E_INVALID;
    mn_model *m = model_new(MODEL_RESNET, "resnet", g);
    *out = m;
    if (!m) return MN_E_NOMEM;
    resnet *r = calloc(1, sizeof *r);
    mn_status st = MN_OK;
    if (!r) {
        model_set_err(m, "resnet: out of memory");
        st = MN_E_NOMEM;
    } else {
        m->impl = r;
        m->free_impl = free_resnet;
    }
    if (!st && (!g || !c)) {
        model_set_err(m, "resnet: %s is NULL", g ? "config" : "graph");
        st = MN_E_INVALID;
    }
    if (!st) {
        r->c = *c;
        r->o = o ? *o : mn_resnet_default_options();
        m->fold_eps = c->bn_eps;
        st = check(m, &r->c, &r->o);
        if (!st) st = model_add_ignore(m, "*.num_batches_tracked");
        if (!st) st = build(m, r);
    }
    m->dead = st != MN_OK;
    return st;
}
