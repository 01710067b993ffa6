/* session.h - internal view of a session, for tests and tools that need more
 * than the public API: node-level access, the f64 CPU mode used by gradient
 * checks, planner-less runs, forward+backward without an optimizer.
 *
 * Does not: add anything to the public contract; mn_session_* stays the API.
 */
#ifndef MN_SESSION_H
#define MN_SESSION_H

#include "backend/backend.h"
#include "graph/graph.h"
#include "memplan/memplan.h"
#include "kir/kir.h"
#include "schedule/schedule.h"

typedef struct session_internal_options {
    bool f64;        /* CPU: store and compute float tensors as double */
    bool no_reuse;   /* memory plan without reuse or in-place (reference runs) */
    bool grads_only; /* training: autodiff but no optimizer; parameter gradients
                        stay readable through session_grad_of() */
    uint64_t header_limit; /* checkpoint header limit in bytes; 0: the safetensors
                              limit (ST_MAX_HEADER_BYTES); tests lower it */
    /* Plan only: build up to the kernel and memory plans of the session's
     * backend (its fusion, MEGANEURA_FUSION honoured) without opening a
     * device, allocating or initialising anything; the memory plan uses
     * chunks of plan_chunk bytes (0: none) in place of the device's
     * binding limit. Such a session answers dumps and memory queries only
     * (tests and tools counting dispatches of full-size models). */
    bool plan_only;
    uint64_t plan_chunk;
    const kernel_set *kernels; /* precompiled kernels (a bundle), used while the session is built */
} session_internal_options;

struct mn_device {
    mn_backend_kind kind;
    const backend_vtable *be;
    void *impl; /* the backend's shared device, NULL for cpu */
    int refs;   /* the opener's reference + one per session */
    bool dead;
    char err[512];
};
/* Drops one reference; frees at zero. */
void device_release(mn_device *d);

/* A forward subsequence that mn_session_run_outputs executes: the nodes
 * some outputs need. Kept for the session's life because a backend may
 * record a node list once and key it by its address (Vulkan: at most 4
 * lists, of which step and run take 2). */
#define SESSION_MAX_SUBSETS 2
typedef struct session_subset {
    int32_t *outs; /* the requested output nodes, sorted */
    int nouts;
    int32_t *list; /* the nodes to execute, a subsequence of sched.fwd */
    int32_t n;
    bool has_loss;
} session_subset;
/* Frees the subsets (mn_session_destroy). */
void session_subsets_free(mn_session *s);

struct mn_session {
    char err[512];
    /* host time of the build phases, ms (MEGANEURA_PROFILE prints them):
     * graph passes (copy, autodiff, optimizer, liveness), schedule, device
     * open, kernel groups, memory plan, backend, parameter values computed,
     * values written (and buffers filled) */
    double phase_ms[8];
    bool dead; /* creation failed or the backend lost its device */
    mn_session_options opt;
    session_internal_options iopt;
    mn_graph *g;       /* owned copy, extended by autodiff and optim */
    int32_t nuser;     /* nodes of the user's graph (ids below this are the user's) */
    int32_t *grads;    /* per user node: its gradient node (training) or NULL */
    int32_t hyper;     /* "__hyper" input or MN_NONE */
    int32_t gate;      /* STEP_GATE read after each step (non-finite check) or MN_NONE */
    /* dynamic loss scaling (mn_loss_scale; ls_input MN_NONE when off): the
     * "__loss_scale" input autodiff seeds the backward pass with, the
     * settings with their defaults filled in, the next step's scale, the
     * finite steps since it last changed, the overflows skipped */
    int32_t ls_input;
    mn_loss_scale ls;
    float ls_scale;
    int64_t ls_good, ls_overflows;
    schedule sched;
    kir kernels; /* the kernel plan over sched (identity where the backend does not fuse) */
    memplan plan;
    program prog; /* what the backend was built from; outlives it */
    const backend_vtable *be;
    void *bk;
    mn_device *device; /* shared device (a reference held), or NULL */
    int64_t step;
    bool have_loss; /* the loss holds a value (after step or run) */
    char **meta;    /* user metadata: key, value pairs */
    int nmeta;
    session_subset subsets[SESSION_MAX_SUBSETS]; /* mn_session_run_outputs (run_outputs.c) */
    int nsubsets;
    uint8_t *host_bound; /* per node: bound to a host buffer (vulkan_host.c), or NULL */
    mn_graph *user;      /* inference sessions: the user's graph as given (an exported bundle's) */
    struct session_dist *dist; /* data-parallel steps (dist.c), NULL for one process */
};

mn_status session_create_ex(mn_session **out, const mn_graph *g, const mn_session_options *opt,
                            const session_internal_options *iopt);
/* Node ids below are node indices of s->g; a handle of the user's graph
 * (mn_tensor, tests) is accepted too: its tag bits are dropped (graph.h).
 * Raw access to a node's storage (f32 or f64 per the session mode). */
mn_status session_read_node(mn_session *s, int32_t id, void *dst, size_t bytes);
mn_status session_write_node(mn_session *s, int32_t id, const void *src, size_t bytes);
/* Float nodes as f32 host values (converted in f64 mode); i32 nodes raw. */
mn_status session_write_f32(mn_session *s, int32_t id, const void *src, size_t count);
mn_status session_read_f32(mn_session *s, int32_t id, void *dst, size_t count);
/* Loads the parameters (and, in training sessions, the optimizer state) of
 * a parsed safetensors file into s after checking all of it against s
 * (names, dtypes, shapes, metadata, no NaN or infinity); path names it in
 * messages. mn_session_load reads the file; bundles pass their weights. */
struct st_file;
mn_status session_load_tensors(mn_session *s, const struct st_file *f, const char *path);
/* Gradient node of a user node (grads_only or training sessions), MN_NONE if none. */
int32_t session_grad_of(const mn_session *s, int32_t id);
/* Upper bound of the JSON header of this session's checkpoints (bytes). */
uint64_t session_header_bound(const mn_session *s);
/* Initial values of every parameter, state and input (init.c): the last
 * build step. */
mn_status session_init_values(mn_session *s);
/* Data-parallel training (dist.c, mn_session_options.dist). validate: the
 * options; mark: flags the gradient roots NODE_F_SYNC (after autodiff and
 * optim, before kernels are planned); build: buckets, the handshake with
 * the other ranks, the communication thread (after the backend exists);
 * step: executes the step's order with the all-reduce between the backward
 * pass and the updates (mn_session_step, instead of one execute). */
typedef struct session_dist session_dist;
mn_status session_dist_validate(mn_session *s, char *err, size_t cap);
mn_status session_dist_mark(mn_session *s);
mn_status session_dist_build(mn_session *s);
mn_status session_dist_step(mn_session *s);
void session_dist_free(session_dist *x);
/* Executes the whole order without touching step/hyper (grads_only sessions). */
mn_status session_forward_backward(mn_session *s);

#endif
