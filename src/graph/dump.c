/* dump.c - the textual dump of a graph (mn_graph_dump, MEGANEURA_DUMP=graph):
 * one line per node with its op, inputs, dtype, shape, name and the
 * attributes the op has.
 *
 * Does not: parse dumps back.
 */
#include <inttypes.h>
#include <string.h>

#include "graph/attrs.h"
#include "graph/graph.h"

/* The op's parameters, only where the op has them (graph_dump_node). */
static void dump_attrs(const node *n, FILE *f) {
    switch (n->op) {
    case OP_MATMUL: {
        const mn_matmul_attrs a = matmul_attrs_of(n);
        if (a.trans_a || a.trans_b) fprintf(f, " trans=%d,%d", a.trans_a, a.trans_b);
        break;
    }
    case OP_SUM: case OP_MEAN: case OP_MAX: case OP_MAX_BWD: {
        const mn_reduce_attrs a = reduce_attrs_of(n);
        if (a.axis == MN_ALL_AXES) fprintf(f, " axis=all");
        else fprintf(f, " axis=%lld keepdim=%d", (long long)a.axis, a.keepdim);
        break;
    }
    case OP_PERMUTE:
        fprintf(f, " perm=");
        for (int i = 0; i < n->rank; i++) fprintf(f, i ? ",%lld" : "%lld", (long long)permute_axis(n, i));
        break;
    case OP_SCALE: fprintf(f, " %.9g", scale_factor(n)); break;
    case OP_CLIP_COEF: fprintf(f, " %.9g", clip_norm(n)); break;
    case OP_CONV2D: case OP_CONV2D_BWD_INPUT: case OP_CONV2D_BWD_WEIGHT: {
        const mn_conv_attrs a = conv_attrs_of(n);
        fprintf(f, " stride=%lld,%lld pad=%lld,%lld dilation=%lld,%lld groups=%lld", (long long)a.stride[0],
                (long long)a.stride[1], (long long)a.pad[0], (long long)a.pad[1], (long long)a.dilation[0],
                (long long)a.dilation[1], (long long)a.groups);
        if (n->op == OP_CONV2D_BWD_WEIGHT && wgrad_chunk_of(n)) fprintf(f, " k_chunk=%lld", (long long)wgrad_chunk_of(n));
        break;
    }
    case OP_MAXPOOL2D: case OP_MAXPOOL2D_BWD: case OP_AVGPOOL2D: case OP_AVGPOOL2D_BWD: {
        static const char *div[] = {"valid", "area", "none"};
        const mn_pool_attrs a = pool_attrs_of(n);
        fprintf(f, " kernel=%lld,%lld stride=%lld,%lld pad=%lld,%lld", (long long)a.kernel[0], (long long)a.kernel[1],
                (long long)a.stride[0], (long long)a.stride[1], (long long)a.pad[0], (long long)a.pad[1]);
        if (n->op == OP_AVGPOOL2D || n->op == OP_AVGPOOL2D_BWD)
            fprintf(f, " divisor=%s", a.divisor >= 0 && a.divisor <= 2 ? div[a.divisor] : "?");
        break;
    }
    case OP_UNARY_BWD: fprintf(f, " of=%s", op_table[bwd_of(n)].name); break;
    case OP_SLICE: {
        const mn_slice_attrs a = slice_attrs_of(n);
        fprintf(f, " axis=%lld start=%lld length=%lld", (long long)a.axis, (long long)a.start, (long long)a.length);
        break;
    }
    case OP_PAD: {
        const mn_pad_attrs a = pad_attrs_of(n);
        fprintf(f, " pad=");
        for (int i = 0; i < n->rank; i++)
            fprintf(f, i ? ",%lld:%lld" : "%lld:%lld", (long long)a.before[i], (long long)a.after[i]);
        break;
    }
    case OP_CONCAT: fprintf(f, " axis=%lld", (long long)concat_axis(n)); break;
    case OP_UPSAMPLE_NEAREST2D: {
        const mn_upsample_attrs a = upsample_attrs_of(n);
        fprintf(f, " scale=%lld,%lld", (long long)a.scale[0], (long long)a.scale[1]);
        break;
    }
    case OP_EMA_UPDATE: {
        const mn_ema_attrs a = ema_attrs_of(n);
        fprintf(f, " momentum=%.9g scale=%.9g", a.momentum, a.scale);
        break;
    }
    case OP_CROSS_ENTROPY_DENSE_BWD: fprintf(f, " wrt=%s", ce_dense_wrt_targets(n) ? "targets" : "logits"); break;
    case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_BWD: case OP_CE_ROWS: {
        const mn_ce_attrs a = ce_attrs_of(n);
        if (a.use_ignore) fprintf(f, " ignore_index=%lld", (long long)a.ignore_index);
        if (a.smoothing != 0) fprintf(f, " smoothing=%.9g", a.smoothing);
        break;
    }
    case OP_SUMSQ:
        if (sumsq_block(n)) fprintf(f, " block=%lld", (long long)sumsq_block(n));
        break;
    case OP_CE_COUNT: fprintf(f, " ignore_index=%lld", (long long)ce_attrs_of(n).ignore_index); break;
    case OP_RMS_NORM: case OP_RMS_NORM_BWD: case OP_LAYER_NORM_BWD: fprintf(f, " eps=%.9g", norm_attrs_of(n).eps); break;
    case OP_LAYER_NORM: {
        const mn_norm_attrs a = norm_attrs_of(n);
        fprintf(f, " eps=%.9g%s%s", a.eps, a.weight ? " weight" : "", a.bias ? " bias" : "");
        break;
    }
    case OP_RMS_NORM_BWD_W: case OP_LAYER_NORM_BWD_W:
        fprintf(f, " eps=%.9g block=%lld", norm_attrs_of(n).eps, (long long)norm_block(n));
        break;
    case OP_CLAMP: case OP_POW: case OP_PW_BWD: {
        const op_id of = n->op == OP_PW_BWD ? bwd_of(n) : n->op;
        const mn_pw_attrs a = pw_attrs_of(n);
        if (n->op == OP_PW_BWD) fprintf(f, " of=%s", op_table[of].name);
        if (of == OP_CLAMP) fprintf(f, " min=%.9g max=%.9g", a.min, a.max);
        if (of == OP_POW) fprintf(f, " p=%.9g", a.exponent);
        break;
    }
    case OP_DROPOUT: {
        const mn_dropout_attrs a = dropout_attrs_of(n);
        fprintf(f, " p=%.9g seed=%llu", a.p, (unsigned long long)a.seed);
        break;
    }
    case OP_SGD_UPDATE: {
        const mn_optim_attrs a = optim_attrs_of(n);
        fprintf(f, " lr_mult=%.9g momentum=%.9g wd=%.9g nesterov=%d%s", a.lr_mult, a.beta1, a.weight_decay, a.variant,
                a.gated ? " skip_nonfinite" : "");
        break;
    }
    case OP_ADAM_UPDATE: {
        const mn_optim_attrs a = optim_attrs_of(n);
        fprintf(f, " lr_mult=%.9g betas=%.9g,%.9g eps=%.9g wd=%.9g decoupled=%d%s", a.lr_mult, a.beta1, a.beta2,
                a.eps, a.weight_decay, a.variant, a.gated ? " skip_nonfinite" : "");
        break;
    }
    case OP_STEP_GATE: fprintf(f, " clip=%.9g%s", clip_norm(n), step_gate_scaled(n) ? " scaled" : ""); break;
    case OP_ROPE: {
        const mn_rope_attrs a = rope_attrs_of(n);
        fprintf(f, " theta=%.9g offset=%lld%s", a.theta, (long long)a.offset, a.inverse ? " inverse" : "");
        break;
    }
    case OP_ATTENTION: case OP_ATTENTION_LSE: case OP_ATTENTION_BWD_Q: case OP_ATTENTION_BWD_KV: {
        const mn_attention_attrs a = attention_attrs_of(n);
        fprintf(f, " causal=%lld window=%lld scale=%.9g", (long long)a.causal, (long long)a.window, a.scale);
        if (n->op == OP_ATTENTION_BWD_KV) fprintf(f, " wrt=%s", a.wrt == 2 ? "kv" : a.wrt ? "v" : "k");
        break;
    }
    default: break;
    }
}

void graph_dump_node(const mn_graph *g, int32_t id, FILE *f) {
    const node *n = &g->nodes[id];
    char sb[96];
    fprintf(f, "%%%d = %s", id, op_table[n->op].name);
    if (n->nin) {
        fputc('(', f);
        for (int i = 0; i < n->nin; i++) fprintf(f, i ? ", %%%d" : "%%%d", n->in[i]);
        fputc(')', f);
    }
    fprintf(f, " : %s%s", mn_dtype_name(n->dtype), shape_str(sb, sizeof sb, n->rank, n->shape));
    if (n->name) fprintf(f, " \"%s\"", n->name);
    dump_attrs(n, f);
    if (n->op == OP_PARAM) {
        static const char *kinds[] = {"zeros", "constant", "uniform", "normal", "xavier_uniform",
                                      "xavier_normal", "kaiming_uniform", "kaiming_normal"};
        fprintf(f, " init=%s(%.9g,%.9g)", kinds[n->init.kind], (double)n->init.a, (double)n->init.b);
        if (n->lr_mult != 1.0f) fprintf(f, " lr_mult=%.9g", (double)n->lr_mult);
        if (n->flags & NODE_F_FROZEN) fprintf(f, " frozen");
    }
    if (n->flags & NODE_F_ROUND_BF16) fprintf(f, " operands=bf16");
    if (n->flags & NODE_F_ROUND_F16) fprintf(f, " operands=f16");
    if (n->flags & NODE_F_PACK16) fprintf(f, " packed16");
    if (n->flags & NODE_F_OUTPUT) fprintf(f, " output");
    if (n->flags & NODE_F_LOSS) fprintf(f, " loss");
    fputc('\n', f);
}

mn_status mn_graph_dump(const mn_graph *g, FILE *f) {
    if (!g || !f) return MN_E_INVALID;
    for (int32_t i = 0; i < g->n; i++) graph_dump_node(g, i, f);
    return MN_OK;
}

