/* ckpt_diff.c - compares two checkpoints tensor by tensor (a tool of the
 * data-parallel CLI tests, tests/cli_dist.sh):
 *
 *   ckpt_diff A.safetensors B.safetensors [--abs X] [--rel X]
 *
 * Both must hold the same tensor names and shapes and the same
 * "meganeura.step"; prints the largest absolute difference and the largest
 * relative L2 error (||a - b|| / ||b|| per tensor) and exits 1 when either
 * exceeds its bound (default --abs 1e-6, no --rel bound), 2 on bad use.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meganeura.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ckpt_diff A.safetensors B.safetensors [--abs X] [--rel X]\n");
        return 2;
    }
    double abs_tol = 1e-6, rel_tol = INFINITY;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--abs") == 0) abs_tol = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--rel") == 0) rel_tol = atof(argv[i + 1]);
        else return fprintf(stderr, "ckpt_diff: unknown option %s\n", argv[i]), 2;
    }
    char err[1024];
    mn_safetensors *a, *b;
    if (mn_safetensors_open(&a, argv[1], err, sizeof err)) return fprintf(stderr, "ckpt_diff: %s\n", err), 1;
    if (mn_safetensors_open(&b, argv[2], err, sizeof err)) return fprintf(stderr, "ckpt_diff: %s\n", err), 1;
    int bad = 0;
    const char *sa = mn_safetensors_meta(a, "meganeura.step"), *sb = mn_safetensors_meta(b, "meganeura.step");
    if (!sa || !sb || strcmp(sa, sb)) {
        fprintf(stderr, "ckpt_diff: meganeura.step %s vs %s\n", sa ? sa : "(none)", sb ? sb : "(none)");
        bad = 1;
    }
    if (mn_safetensors_count(a) != mn_safetensors_count(b)) {
        fprintf(stderr, "ckpt_diff: %d vs %d tensors\n", mn_safetensors_count(a), mn_safetensors_count(b));
        bad = 1;
    }
    double max_abs = 0, max_rel = 0;
    const char *worst = "";
    for (int i = 0; i < mn_safetensors_count(a) && !bad; i++) {
        mn_safetensors_tensor ta, tb;
        mn_safetensors_tensor_at(a, i, &ta);
        if (mn_safetensors_find(b, ta.name, &tb) || ta.rank != tb.rank ||
            memcmp(ta.shape, tb.shape, sizeof(int64_t) * (size_t)ta.rank)) {
            fprintf(stderr, "ckpt_diff: %s: missing or another shape in %s\n", ta.name, argv[2]);
            bad = 1;
            break;
        }
        size_t n = 1;
        for (int d = 0; d < ta.rank; d++) n *= (size_t)ta.shape[d];
        float *va = malloc(n * sizeof *va + 1), *vb = malloc(n * sizeof *vb + 1);
        if (!va || !vb || mn_safetensors_read_f32(a, ta.name, va, n) || mn_safetensors_read_f32(b, ta.name, vb, n)) {
            fprintf(stderr, "ckpt_diff: cannot read %s\n", ta.name);
            bad = 1;
        } else {
            double num = 0, den = 0;
            for (size_t k = 0; k < n; k++) {
                const double d = (double)va[k] - (double)vb[k];
                if (!(fabs(d) <= max_abs)) max_abs = fabs(d), worst = ta.name;
                num += d * d;
                den += (double)vb[k] * vb[k];
            }
            const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
            if (rel > max_rel) max_rel = rel;
        }
        free(va);
        free(vb);
    }
    printf("ckpt_diff: %d tensors, max |a - b| %.3g (%s), max rel L2 %.3g\n", mn_safetensors_count(a), max_abs,
           worst, max_rel);
    if (!bad && !(max_abs <= abs_tol)) printf("ckpt_diff: max |a - b| above %g\n", abs_tol), bad = 1;
    if (!bad && !(max_rel <= rel_tol)) printf("ckpt_diff: rel L2 above %g\n", rel_tol), bad = 1;
    mn_safetensors_close(a);
    mn_safetensors_close(b);
    return bad;
}
