/* optim.h - appends optimizer updates to a differentiated graph.
 *
 * For every trainable parameter with a gradient: persistent state nodes
 * (OP_STATE, zero-initialised, named "optim.<kind>.<slot>.<param>"), and one
 * update op (SGD_UPDATE / ADAM_UPDATE) that writes the parameter and its state
 * in place. Gradient clipping by global norm adds SUMSQ per gradient, their
 * sum and a CLIP_COEF node that every update multiplies its gradient by; the
 * non-finite check (mn_session_options.nonfinite) adds the same sum and a
 * STEP_GATE node instead, which also carries the clip coefficient.
 * Learning-rate schedules run on the host: optim_lr() gives the rate for a
 * step, which the session writes into the "__hyper" input before each step.
 *
 * Does not: differentiate (autodiff/), execute (backends).
 */
#ifndef MN_OPTIM_H
#define MN_OPTIM_H

#include "graph/graph.h"

#define OPTIM_HYPER_NAME "__hyper"
/* the loss scale input of a session with dynamic loss scaling (f32, the loss's shape) */
#define LOSS_SCALE_NAME "__loss_scale"

/* grads: per node id (as returned by autodiff_build for the nodes before it).
 * nf other than UNCHECKED: a STEP_GATE of the loss and the gradients' sum of
 * squares (flagged NODE_F_READ, its id in *gate, else MN_NONE) feeds every
 * update as its clip input; with SKIP the updates (ip[1]) and the batch-norm
 * EMA updates (moved after the gate) write nothing on a non-finite step.
 * scale: the loss-scale input the gradients were seeded with (autodiff), or
 * MN_NONE; the gate then divides its coefficient by it (needs nf = SKIP). */
mn_status optim_build(mn_graph *g, const int32_t *grads, int32_t ngrads, const mn_optimizer *o, mn_nonfinite nf,
                      int32_t scale, int32_t *gate);
/* Checks the settings; message into err. */
mn_status optim_validate(const mn_optimizer *o, char *err, size_t cap);
/* Learning rate of step t (0-based: the step about to be taken). */
double optim_lr(const mn_optimizer *o, int64_t t);
/* Fills hyper[4] for step t (0-based). */
void optim_hyper(const mn_optimizer *o, int64_t t, float hyper[4]);
const char *optim_kind_name(mn_optim_kind k);

#endif
