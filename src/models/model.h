/* model.h - what the builders of src/models (ResNet, U-Net, action expert,
 * Whisper) share: the mn_model handle (error message, the parameter list in
 * Hugging Face / torchvision names, the inputs and outputs by name) and a
 * small builder context that records ops through the public API and names
 * the part being built in every error.
 *
 * Written against meganeura.h like a user program: nothing below the public
 * API is included.
 *
 * Does not: know any architecture (each model's file does), read files
 * (hf_checkpoint.c does).
 */
#ifndef MN_MODELS_MODEL_H
#define MN_MODELS_MODEL_H

#include <stdarg.h>

#include "models/hf_util.h"

/* The four kinds of mn_model. */
typedef enum model_kind { MODEL_RESNET = 1, MODEL_UNET, MODEL_VLA, MODEL_WHISPER } model_kind;

/* A batch norm folded into the convolution before it (MN_RESNET_FOLDED):
 * the checkpoint's conv weight and batch-norm tensors become the graph's
 * conv weight and bias. Names owned. */
typedef struct model_fold {
    char *conv;     /* "layer1.0.conv1" */
    char *bn;       /* "layer1.0.bn1" */
    int64_t out_ch, per_ch;
    mn_tensor w, b; /* graph parameters: <conv>.weight, <conv>.bias */
} model_fold;

struct mn_model {
    model_kind kind;
    bool dead;
    hf_str err;
    const char *name; /* "resnet", ... for messages */
    mn_graph *g;      /* the graph it was built into (borrowed) */
    /* loadable parameters, in creation order (names owned) */
    mn_hf_param *params;
    int nparams, capparams;
    /* what a checkpoint must hold when folding batch norms (names owned):
     * the unfolded parameter list; empty otherwise */
    mn_hf_param *src;
    int nsrc, capsrc;
    model_fold *folds;
    int nfolds, capfolds;
    float fold_eps;
    /* checkpoint names skipped silently ("*suffix" patterns; owned) */
    char *ignore[8];
    int nignore;
    /* named tensors of the graph (inputs, outputs, the loss) */
    struct {
        char name[32];
        mn_tensor t;
    } named[16];
    int nnamed;
    /* the model's own state, freed by free_impl */
    void *impl;
    void (*free_impl)(void *impl);
};

/* A new live handle of kind k (NULL when out of memory). */
mn_model *model_new(model_kind k, const char *name, mn_graph *g);
void model_set_err(mn_model *m, const char *fmt, ...) HF_PRINTF(2, 3);
/* MN_OK if m is a live model of kind k (else an error naming what); k 0: any. */
mn_status model_check(mn_model *m, model_kind k, const char *what);
mn_status model_add_ignore(mn_model *m, const char *pattern);
/* Records t under name for mn_model_tensor (at most 16; longer names are cut). */
void model_name(mn_model *m, const char *name, mn_tensor t);
/* Appends to a parameter list (names copied). */
mn_status model_list_add(mn_model *m, mn_hf_param **list, int *n, int *cap, const char *name, int rank,
                         const int64_t *shape, mn_tensor t);

/* The builder: records into m->g, names the part in messages. */
typedef struct mb {
    mn_model *m;
    mn_graph *g;
    char where[160]; /* the part being built */
    bool (*freeze)(const char *name, void *user);
    void *freeze_user;
} mb;

void mb_init(mb *b, mn_model *m, bool (*freeze)(const char *, void *), void *user);
void mb_where(mb *b, const char *fmt, ...) HF_PRINTF(2, 3);
/* Passes st through; on failure records "<model>: building <where>: <graph error>". */
mn_status mb_ok(mb *b, mn_status st);
/* A parameter named `name`, registered for loading. */
mn_status mb_param(mb *b, mn_tensor *out, const char *name, int rank, const int64_t *shape, mn_init init);
/* A registered parameter name built from a prefix: "<prefix>.<leaf>". */
mn_status mb_paramf(mb *b, mn_tensor *out, const char *prefix, const char *leaf, int rank, const int64_t *shape,
                    mn_init init);
/* PyTorch's nn.Linear: weight [out,in], bias [out] (bias false: none),
 * y = x W^T + b over the last axis of x (rank 2 or 3); fresh values as
 * PyTorch's default (U(-1/sqrt(in), 1/sqrt(in)) for both). */
mn_status mb_linear(mb *b, mn_tensor *out, mn_tensor x, const char *prefix, int64_t out_f, int64_t in_f, bool bias);
/* nn.Conv2d: weight [out, in/groups, k, k] (+ bias [out]); PyTorch's default init. */
mn_status mb_conv2d(mb *b, mn_tensor *out, mn_tensor x, const char *prefix, int64_t in_c, int64_t out_c, int k,
                    int stride, int pad, bool bias);
/* nn.LayerNorm(d): weight 1, bias 0. */
mn_status mb_layer_norm(mb *b, mn_tensor *out, mn_tensor x, const char *prefix, int64_t d, float eps);
/* nn.GroupNorm(groups, c) over [N,C,H,W]. */
mn_status mb_group_norm(mb *b, mn_tensor *out, mn_tensor x, const char *prefix, int groups, int64_t c, float eps);

#define MB_TRY(x)                                                                                                      \
    do {                                                                                                               \
        mn_status st_ = (x);                                                                                           \
        if (st_) return st_;                                                                                           \
    } while (0)
#define MB_S(...) (const int64_t[]){__VA_ARGS__}

/* Reads checkpoint tensor `name` (count floats) into a malloc'd buffer;
 * NULL and an error in m on failure. */
float *model_read(mn_model *m, mn_hf_checkpoint *c, const char *name, size_t count);

#endif
