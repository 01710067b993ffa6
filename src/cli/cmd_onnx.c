/* cmd_onnx.c - `meganeura onnx-run MODEL.onnx`: imports an ONNX model
 * (include/meganeura_onnx.h), runs it once on a backend and prints every
 * output; with the model's test data (a test_data_set_N folder of
 * input_K.pb / output_K.pb, the layout of the ONNX conformance data) it
 * compares the outputs as the conformance runner does.
 *
 * Inputs come from --input NAME=FILE.pb, from --data DIR (by position), or
 * are made up: uniform values in [-1, 1) for floats, zeros for integers and
 * booleans (a seed makes them repeatable).
 *
 * Does not: train (the library does: a loss on mn_onnx_output_at's tensor),
 * or write outputs to files.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/cmd_onnx.h"
#include "cli/messages.h"
#include "meganeura.h"

#ifdef MN_HAVE_ONNX
#include "meganeura_onnx.h"

#define MAX_IO 64
#define RTOL 1e-3
#define ATOL 1e-7

static void help_onnx(FILE *f) {
    fprintf(f, "Usage: meganeura onnx-run MODEL.onnx [options]\n"
               "\n"
               "Imports an ONNX model, runs it once and prints each output's shape, range,\n"
               "mean and first values. Everything the importer cannot honour (operators,\n"
               "attributes, dtypes, opsets, dynamic shapes) is listed in one error.\n"
               "\n"
               "Options:\n"
               "  --input NAME=FILE.pb  the value of a graph input (a serialized TensorProto)\n"
               "  --data DIR            inputs from DIR/input_K.pb (by position); outputs are\n"
               "                        compared with DIR/output_K.pb (|got - want| <= 1e-7 +\n"
               "                        1e-3 |want|), exit status 1 if one differs\n"
               "  --dim NAME=N          the size of a symbolic dimension (repeatable)\n"
               "  --default-dim N       the size of every other symbolic dimension\n"
               "  --backend cpu|vulkan  where to run (default cpu)\n"
               "  --seed N              seed of the made-up inputs (default 1)\n"
               "  -h, --help            show this help\n"
               "\n"
               "Inputs without a value get uniform values in [-1, 1) (floats) or zeros.\n");
}

static void print_shape(FILE *f, int rank, const int64_t *d) {
    fputc('[', f);
    for (int i = 0; i < rank; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)d[i]);
    fputc(']', f);
}

static int64_t numel(int rank, const int64_t *d) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= d[i];
    return n;
}

typedef struct {
    const char *name; /* NULL: by position */
    int position;
    mn_onnx_tensor t;
} given;

int cmd_onnx_run(int argc, char **argv) {
    const char *model = NULL, *data = NULL, *v;
    mn_backend_kind be = MN_BACKEND_CPU;
    uint64_t seed = 1;
    int64_t default_dim = 0;
    mn_onnx_dim dims[32];
    int ndims = 0;
    static given in[MAX_IO];
    int nin = 0;
    char err[4096];
    args a = {argc, argv, 1, "onnx-run", 0};
    int rc = 0;
    while (a.i < argc) {
        const char *arg = argv[a.i];
        if (is_help(arg)) {
            help_onnx(stdout);
            rc = 0;
            goto out;
        }
        if (flag_value(&a, "--input", &v)) {
            if (a.status) {
                rc = a.status;
                goto out;
            }
            const char *eq = strchr(v, '=');
            if (!eq || eq == v || !eq[1]) {
                rc = usage_error("onnx-run", "--input wants NAME=FILE.pb, got '%s'", show(v).s);
                goto out;
            }
            if (nin == MAX_IO) {
                rc = usage_error("onnx-run", "more than %d inputs", MAX_IO);
                goto out;
            }
            size_t nl = (size_t)(eq - v);
            char *name = malloc(nl + 1);
            if (!name) {
                rc = fail("out of memory");
                goto out;
            }
            memcpy(name, v, nl);
            name[nl] = 0;
            in[nin].name = name;
            if (mn_onnx_tensor_read(&in[nin].t, eq + 1, err, sizeof err)) {
                free(name);
                rc = fail("%s", err);
                goto out;
            }
            nin++;
        } else if (flag_value(&a, "--data", &v)) {
            if (a.status) {
                rc = a.status;
                goto out;
            }
            data = v;
        } else if (flag_value(&a, "--dim", &v)) {
            if (a.status) {
                rc = a.status;
                goto out;
            }
            const char *eq = strchr(v, '=');
            int64_t n;
            if (!eq || eq == v || !parse_int(eq + 1, 1, (int64_t)1 << 30, &n))
                {
                rc = usage_error("onnx-run", "--dim wants NAME=N (N >= 1), got '%s'", show(v).s);
                goto out;
            }
            if (ndims == 32) {
                rc = usage_error("onnx-run", "more than 32 --dim options");
                goto out;
            }
            char *name = malloc((size_t)(eq - v) + 1);
            if (!name) {
                rc = fail("out of memory");
                goto out;
            }
            memcpy(name, v, (size_t)(eq - v));
            name[eq - v] = 0;
            dims[ndims].name = name;
            dims[ndims++].value = n;
        } else if (flag_value(&a, "--default-dim", &v)) {
            if (a.status) {
                rc = a.status;
                goto out;
            }
            if (!parse_int(v, 1, (int64_t)1 << 30, &default_dim))
                {
                rc = usage_error("onnx-run", "--default-dim wants a size >= 1, got '%s'", show(v).s);
                goto out;
            }
        } else if (flag_value(&a, "--backend", &v)) {
            if (a.status) {
                rc = a.status;
                goto out;
            }
            if (!parse_backend(v, &be)) {
                rc = usage_error("onnx-run", "--backend is cpu or vulkan, got '%s'", show(v).s);
                goto out;
            }
        } else if (flag_value(&a, "--seed", &v)) {
            if (a.status) {
                rc = a.status;
                goto out;
            }
            if (!parse_u64(v, &seed)) {
                rc = usage_error("onnx-run", "--seed wants an unsigned integer, got '%s'", show(v).s);
                goto out;
            }
        } else if (arg[0] == '-' && arg[1]) {
            {
                rc = usage_error("onnx-run", "unknown option '%s'", show(arg).s);
                goto out;
            }
        } else {
            if (model) {
                rc = usage_error("onnx-run", "expected one model, got '%s' too", show(arg).s);
                goto out;
            }
            model = arg;
            a.i++;
        }
    }
    if (!model) {
                rc = usage_error("onnx-run", "expected a model file (MODEL.onnx)");
                goto out;
            }
    /* --data: input_K.pb by position */
    mn_onnx_tensor want[MAX_IO];
    int nwant = 0;
    if (data) {
        for (int k = 0; k < MAX_IO; k++) {
            char p[4096];
            struct stat sb;
            snprintf(p, sizeof p, "%s/input_%d.pb", data, k);
            if (stat(p, &sb) != 0) break;
            if (nin == MAX_IO) break;
            if (mn_onnx_tensor_read(&in[nin].t, p, err, sizeof err)) {
                rc = fail("%s", err);
                goto out;
            }
            in[nin].name = NULL;
            in[nin].position = k;
            nin++;
        }
        for (int k = 0; k < MAX_IO; k++) {
            char p[4096];
            struct stat sb;
            snprintf(p, sizeof p, "%s/output_%d.pb", data, k);
            if (stat(p, &sb) != 0) break;
            if (mn_onnx_tensor_read(&want[nwant], p, err, sizeof err)) {
                rc = fail("%s", err);
                goto out;
            }
            nwant++;
        }
        if (!nin && !nwant) {
            rc = fail("%s holds no input_K.pb or output_K.pb", show(data).s);
            goto out;
        }
    }
    mn_onnx_input opts[MAX_IO];
    for (int k = 0; k < nin; k++) {
        memset(&opts[k], 0, sizeof opts[k]);
        /* test data may name the input; --input always does */
        opts[k].name = in[k].name ? in[k].name : (in[k].t.name && in[k].t.name[0] ? in[k].t.name : NULL);
        opts[k].position = in[k].position;
        opts[k].rank = in[k].t.rank;
        opts[k].shape = in[k].t.shape;
        opts[k].value = in[k].t.data;
        opts[k].bytes = in[k].t.bytes;
        opts[k].hint = true;
    }
    mn_onnx_options o = mn_onnx_default_options();
    o.inputs = opts;
    o.n_inputs = nin;
    o.dims = dims;
    o.n_dims = ndims;
    o.default_dim = default_dim;
    mn_graph *g = NULL;
    mn_onnx *m = NULL;
    mn_session *s = NULL;
    char *msg = malloc(1 << 16);
    if (!msg || mn_graph_create(&g)) {
        free(msg);
        rc = fail("out of memory");
        goto out;
    }
    if (mn_onnx_load(&m, g, model, &o, msg, 1 << 16)) {
        rc = fail("%s", msg);
        goto done;
    }
    bool folded = true;
    for (int k = 0; k < mn_onnx_output_count(m); k++) {
        mn_onnx_io io;
        mn_onnx_output_at(m, k, &io);
        folded = folded && io.tensor == MN_NONE;
    }
    if (!folded) {
        mn_session_options so = mn_session_default_options();
        so.backend = be;
        if (mn_session_create(&s, g, &so)) {
            rc = fail("%s", s ? mn_session_error(s) : "session creation failed");
            goto done;
        }
        if (mn_onnx_init_session(m, s)) {
            rc = fail("%s", mn_onnx_error(m));
            goto done;
        }
    }
    uint64_t r = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (int i = 0; i < mn_onnx_input_count(m); i++) {
        mn_onnx_io io;
        mn_onnx_input_at(m, i, &io);
        const mn_onnx_tensor *t = NULL;
        for (int k = 0; k < nin; k++)
            if (opts[k].name ? strcmp(opts[k].name, io.name) == 0 : opts[k].position == io.position) t = &in[k].t;
        printf("input  %-24s %-8s ", show(io.name).s, mn_onnx_dtype_name(io.onnx_dtype));
        print_shape(stdout, io.rank, io.shape);
        int64_t n = numel(io.rank, io.shape);
        size_t es = mn_onnx_dtype_size(io.onnx_dtype);
        void *buf = NULL;
        if (t) printf("  (given)\n");
        else {
            printf("  (made up)\n");
            buf = calloc(1, (size_t)(n ? n : 1) * es);
            if (!buf) {
                rc = fail("out of memory");
                goto done;
            }
            if (io.onnx_dtype == MN_ONNX_FLOAT)
                for (int64_t k = 0; k < n; k++) {
                    r = r * 6364136223846793005ull + 1442695040888963407ull;
                    ((float *)buf)[k] = (float)((double)(r >> 40) * 0x1.0p-23 - 1.0);
                }
        }
        if (s && mn_onnx_set_input(m, s, io.name, t ? t->data : buf, t ? t->bytes : (size_t)n * es)) {
            free(buf);
            rc = fail("%s", mn_onnx_error(m));
            goto done;
        }
        free(buf);
    }
    if (s && mn_session_run(s)) {
        rc = fail("%s", mn_session_error(s));
        goto done;
    }
    int differ = 0;
    for (int k = 0; k < mn_onnx_output_count(m); k++) {
        mn_onnx_io io;
        mn_onnx_output_at(m, k, &io);
        int64_t n = numel(io.rank, io.shape);
        size_t es = mn_onnx_dtype_size(io.onnx_dtype);
        void *buf = malloc((size_t)(n ? n : 1) * es);
        if (!buf) {
            rc = fail("out of memory");
            goto done;
        }
        if (mn_onnx_get_output(m, s, io.name, buf, (size_t)n * es)) {
            free(buf);
            rc = fail("%s", mn_onnx_error(m));
            goto done;
        }
        printf("output %-24s %-8s ", show(io.name).s, mn_onnx_dtype_name(io.onnx_dtype));
        print_shape(stdout, io.rank, io.shape);
        double lo = INFINITY, hi = -INFINITY, sum = 0;
        for (int64_t e = 0; e < n; e++) {
            double x = mn_onnx_value(buf, io.onnx_dtype, e);
            lo = x < lo ? x : lo;
            hi = x > hi ? x : hi;
            sum += x;
        }
        printf("  min %.6g max %.6g mean %.6g%s\n       ", lo, hi, n ? sum / (double)n : 0.0,
               io.tensor == MN_NONE ? " (computed at import)" : "");
        for (int64_t e = 0; e < n && e < 8; e++) printf(" %.6g", mn_onnx_value(buf, io.onnx_dtype, e));
        printf("%s\n", n > 8 ? " ..." : "");
        if (k < nwant) {
            const mn_onnx_tensor *w = &want[k];
            bool ok = w->dtype == io.onnx_dtype && w->numel == n;
            int64_t bad = 0;
            for (int64_t e = 0; ok && e < n; e++) {
                double x = mn_onnx_value(buf, io.onnx_dtype, e), y = mn_onnx_value(w->data, w->dtype, e);
                bool same = (x != x && y != y) || x == y || fabs(x - y) <= ATOL + RTOL * fabs(y);
                if (x != x && y != y) same = true;
                else if (y != y && io.onnx_dtype != MN_ONNX_FLOAT && io.onnx_dtype != MN_ONNX_DOUBLE &&
                         io.onnx_dtype != MN_ONNX_FLOAT16)
                    same = memcmp((char *)buf + e * es, (char *)w->data + e * es, es) == 0;
                bad += !same;
            }
            if (!ok) printf("       differs from output_%d.pb: %s %lld elements there\n", k,
                            mn_onnx_dtype_name(w->dtype), (long long)w->numel);
            else if (bad) printf("       differs from output_%d.pb in %lld of %lld values\n", k, (long long)bad, (long long)n);
            else printf("       matches output_%d.pb\n", k);
            differ += !ok || bad;
        }
        free(buf);
    }
    if (differ) rc = fail("%d output%s differ from the test data", differ, differ == 1 ? "" : "s");
done:
    mn_session_destroy(s);
    mn_onnx_destroy(m);
    mn_graph_destroy(g);
    free(msg);
    for (int k = 0; k < nwant; k++) mn_onnx_tensor_free(&want[k]);
out:
    for (int k = 0; k < nin; k++) {
        free((char *)in[k].name);
        mn_onnx_tensor_free(&in[k].t);
    }
    for (int k = 0; k < ndims; k++) free((char *)dims[k].name);
    return rc;
}

#else

int cmd_onnx_run(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return fail("onnx-run: this build has no ONNX import (configure with -DMN_ONNX=ON)");
}

#endif
