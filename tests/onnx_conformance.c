/* onnx_conformance.c - runs the ONNX project's conformance data (Debian's
 * libonnx-testdata: data/node, data/pytorch-converted, data/pytorch-operator,
 * data/simple) through mn_onnx_load on the CPU backend and on Vulkan, and
 * compares every output with the expected one.
 *
 *   onnx_conformance [--data DIR] [--backends cpu,vulkan] [--expected FILE]
 *                    [--write-expected FILE] [--filter TEXT] [--vulkan-subset N]
 *                    [--reasons] [--quiet]
 *
 * Per test: model.onnx is imported with every input of test_data_set_0
 * given as a hint (mn_onnx_input.hint: the value is used only where the
 * model needs it at import, a shape operand say; the input otherwise stays a
 * run-time input and is fed), a session is built per backend, the inputs
 * are fed, the model runs, and each output is compared with output_k.pb:
 * the same dtype and shape, floats within |got - want| <= atol + rtol |want|
 * (rtol 1e-3, atol 1e-7: the ONNX backend tests' defaults; NaN must be NaN,
 * infinities equal), integers and booleans exactly.
 * Each test is pass, fail (with the first difference) or unsupported (the
 * importer's message: one item per operator, attribute or dtype it cannot
 * honour). A test whose outputs were all computed at import (constant
 * folding) is marked "folded".
 *
 * With --expected, every (test, backend) pair listed there must pass: a
 * regression makes the exit status 1; passes not in the list are reported
 * ("new") and --write-expected writes the updated list. --vulkan-subset N
 * runs Vulkan only on every N-th test that passes on the CPU (and on the
 * listed ones it selects), to bound the time on lavapipe.
 *
 * Does not: download the "real" model tests (data/real holds only URLs).
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "meganeura_onnx.h"

#define RTOL 1e-3
#define ATOL 1e-7
#define MAX_IO 32

enum { ST_NONE = 0, ST_PASS, ST_FAIL, ST_UNSUP };
static const char *st_name[] = {"-", "pass", "fail", "unsupported"};

typedef struct {
    char name[160];
    int st[2];       /* cpu, vulkan */
    bool folded;
    char why[2][320];
} result;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* sorted names of dir's entries (files or folders) starting with prefix */
static int list_dir(const char *dir, const char *prefix, char ***out) {
    DIR *d = opendir(dir);
    *out = NULL;
    if (!d) return 0;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            *out = realloc(*out, (size_t)cap * sizeof **out);
        }
        (*out)[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(*out, (size_t)n, sizeof **out, cmp_str);
    return n;
}

static void free_list(char **l, int n) {
    for (int i = 0; i < n; i++) free(l[i]);
    free(l);
}

/* numbered files prefix_0.pb, prefix_1.pb, ... in order */
static int read_numbered(const char *dir, const char *prefix, mn_onnx_tensor *ts, char *err, size_t cap) {
    int n = 0;
    for (; n < MAX_IO; n++) {
        char p[1400];
        snprintf(p, sizeof p, "%s/%s_%d.pb", dir, prefix, n);
        struct stat sb;
        if (stat(p, &sb) != 0) break;
        if (mn_onnx_tensor_read(&ts[n], p, err, cap)) {
            for (int k = 0; k < n; k++) mn_onnx_tensor_free(&ts[k]);
            return -1;
        }
    }
    return n;
}

/* compares got (bytes in want's dtype) with want; a message on difference */
static bool compare(const void *got, const mn_onnx_tensor *want, char *why, size_t cap) {
    int dt = want->dtype;
    bool fl = dt == MN_ONNX_FLOAT || dt == MN_ONNX_DOUBLE || dt == MN_ONNX_FLOAT16 || dt == MN_ONNX_BFLOAT16;
    size_t es = mn_onnx_dtype_size(dt);
    int64_t bad = 0, first = -1;
    double worst = 0;
    for (int64_t k = 0; k < want->numel; k++) {
        bool ok;
        if (fl) {
            double a = mn_onnx_value(got, dt, k), b = mn_onnx_value(want->data, dt, k);
            if (b != b) ok = a != a;
            else if (isinf(b)) ok = a == b;
            else {
                double d = fabs(a - b);
                ok = d <= ATOL + RTOL * fabs(b);
                double rel = d / (fabs(b) + 1e-30);
                if (!ok && rel > worst) worst = rel;
            }
        } else ok = memcmp((const char *)got + k * es, (const char *)want->data + k * es, es) == 0;
        if (!ok) {
            if (first < 0) first = k;
            bad++;
        }
    }
    if (!bad) return true;
    if (fl)
        snprintf(why, cap, "%lld of %lld values differ (first at %lld: got %.9g, want %.9g; worst relative %.3g)",
                 (long long)bad, (long long)want->numel, (long long)first, mn_onnx_value(got, dt, first),
                 mn_onnx_value(want->data, dt, first), worst);
    else snprintf(why, cap, "%lld of %lld values differ (first at %lld)", (long long)bad, (long long)want->numel, (long long)first);
    return false;
}

/* the first item of an import error, on one line */
static void first_item(const char *msg, char *why, size_t cap) {
    const char *p = strstr(msg, ":\n  ");
    const char *s = p ? p + 4 : msg;
    size_t n = strcspn(s, "\n");
    if (n >= cap) n = cap - 1;
    memcpy(why, s, n);
    why[n] = 0;
}

typedef struct {
    mn_onnx_tensor in[MAX_IO], out[MAX_IO];
    int nin, nout;
} dataset;

static int run_backend(mn_onnx *m, mn_graph *g, mn_backend_kind be, mn_device *dev, const dataset *ds, char *why,
                       size_t cap) {
    bool folded = true;
    for (int k = 0; k < mn_onnx_output_count(m); k++) {
        mn_onnx_io io;
        mn_onnx_output_at(m, k, &io);
        if (io.tensor != MN_NONE) folded = false;
    }
    mn_session *s = NULL;
    if (!folded) {
        mn_session_options so = mn_session_default_options();
        so.backend = be;
        so.device = dev;
        if (mn_session_create(&s, g, &so)) {
            snprintf(why, cap, "session: %s", s ? mn_session_error(s) : "failed");
            mn_session_destroy(s);
            return ST_FAIL;
        }
        if (mn_onnx_init_session(m, s)) {
            snprintf(why, cap, "init: %s", mn_onnx_error(m));
            mn_session_destroy(s);
            return ST_FAIL;
        }
        for (int i = 0; i < mn_onnx_input_count(m); i++) {
            mn_onnx_io io;
            mn_onnx_input_at(m, i, &io);
            const mn_onnx_tensor *t = NULL;
            for (int k = 0; k < ds->nin; k++)
                if (ds->in[k].name[0] ? strcmp(ds->in[k].name, io.name) == 0 : k == io.position) t = &ds->in[k];
            if (!t) {
                snprintf(why, cap, "no test data for input '%s'", io.name);
                mn_session_destroy(s);
                return ST_FAIL;
            }
            if (mn_onnx_set_input(m, s, io.name, t->data, t->bytes)) {
                snprintf(why, cap, "set_input: %s", mn_onnx_error(m));
                mn_session_destroy(s);
                return ST_FAIL;
            }
        }
        if (mn_session_run(s)) {
            snprintf(why, cap, "run: %s", mn_session_error(s));
            mn_session_destroy(s);
            return ST_FAIL;
        }
    }
    int st = ST_PASS;
    if (mn_onnx_output_count(m) != ds->nout) {
        snprintf(why, cap, "%d outputs, the test data has %d", mn_onnx_output_count(m), ds->nout);
        st = ST_FAIL;
    }
    for (int k = 0; k < ds->nout && st == ST_PASS; k++) {
        mn_onnx_io io;
        mn_onnx_output_at(m, k, &io);
        mn_onnx_tensor wcopy = ds->out[k];
        const mn_onnx_tensor *w = &wcopy;
        /* onnx 1.12 stored expected bfloat16 outputs as their uint16 bits */
        if (io.onnx_dtype == MN_ONNX_BFLOAT16 && w->dtype == MN_ONNX_UINT16) wcopy.dtype = MN_ONNX_BFLOAT16;
        if (io.onnx_dtype != w->dtype) {
            snprintf(why, cap, "output %d: %s, the test data is %s", k, mn_onnx_dtype_name(io.onnx_dtype),
                     mn_onnx_dtype_name(w->dtype));
            st = ST_FAIL;
            break;
        }
        bool same = io.rank == w->rank;
        for (int i = 0; same && i < w->rank; i++) same = io.shape[i] == w->shape[i];
        if (!same) {
            snprintf(why, cap, "output %d: shape differs (rank %d vs %d)", k, io.rank, w->rank);
            st = ST_FAIL;
            break;
        }
        void *buf = malloc(w->bytes ? w->bytes : 1);
        if (mn_onnx_get_output(m, s, io.name, buf, w->bytes)) {
            snprintf(why, cap, "output %d: %s", k, mn_onnx_error(m));
            st = ST_FAIL;
        } else if (!compare(buf, w, why, cap)) {
            char tmp[320];
            snprintf(tmp, sizeof tmp, "output %d: %s", k, why);
            snprintf(why, cap, "%s", tmp);
            st = ST_FAIL;
        }
        free(buf);
    }
    mn_session_destroy(s);
    return st;
}

static void run_test(const char *dir, const char *label, bool use[2], mn_device *dev, result *r) {
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", label);
    char model[1200], dsd[1200];
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    snprintf(dsd, sizeof dsd, "%s/test_data_set_0", dir);
    dataset ds;
    memset(&ds, 0, sizeof ds);
    char err[1024];
    ds.nin = read_numbered(dsd, "input", ds.in, err, sizeof err);
    ds.nout = ds.nin < 0 ? -1 : read_numbered(dsd, "output", ds.out, err, sizeof err);
    if (ds.nin < 0 || ds.nout < 0) {
        for (int b = 0; b < 2; b++) {
            r->st[b] = use[b] ? ST_UNSUP : ST_NONE;
            first_item(err, r->why[b], sizeof r->why[b]);
        }
        if (ds.nin > 0)
            for (int k = 0; k < ds.nin; k++) mn_onnx_tensor_free(&ds.in[k]);
        return;
    }
    mn_onnx_input opts[MAX_IO];
    for (int k = 0; k < ds.nin; k++) {
        memset(&opts[k], 0, sizeof opts[k]);
        opts[k].name = ds.in[k].name[0] ? ds.in[k].name : NULL;
        opts[k].position = k;
        opts[k].rank = ds.in[k].rank;
        opts[k].shape = ds.in[k].shape;
        opts[k].value = ds.in[k].data;
        opts[k].bytes = ds.in[k].bytes;
        opts[k].hint = true;
    }
    mn_onnx_options o = mn_onnx_default_options();
    o.inputs = opts;
    o.n_inputs = ds.nin;
    mn_graph *g = NULL;
    mn_onnx *m = NULL;
    mn_graph_create(&g);
    char *msg = malloc(1 << 16);
    mn_status st = mn_onnx_load(&m, g, model, &o, msg, 1 << 16);
    if (st) {
        for (int b = 0; b < 2; b++) {
            r->st[b] = use[b] ? (st == MN_E_UNSUPPORTED ? ST_UNSUP : ST_FAIL) : ST_NONE;
            first_item(msg, r->why[b], sizeof r->why[b]);
        }
    } else {
        r->folded = true;
        for (int k = 0; k < mn_onnx_output_count(m); k++) {
            mn_onnx_io io;
            mn_onnx_output_at(m, k, &io);
            if (io.tensor != MN_NONE) r->folded = false;
        }
        for (int b = 0; b < 2; b++)
            if (use[b])
                r->st[b] = run_backend(m, g, b ? MN_BACKEND_VULKAN : MN_BACKEND_CPU, b ? dev : NULL, &ds, r->why[b],
                                       sizeof r->why[b]);
    }
    free(msg);
    mn_onnx_destroy(m);
    mn_graph_destroy(g);
    for (int k = 0; k < ds.nin; k++) mn_onnx_tensor_free(&ds.in[k]);
    for (int k = 0; k < ds.nout; k++) mn_onnx_tensor_free(&ds.out[k]);
}

/* ---- the expected list ---------------------------------------------------------------- */

typedef struct {
    char name[160];
    bool be[2];
} expect;

static int read_expected(const char *path, expect **out) {
    FILE *f = fopen(path, "r");
    *out = NULL;
    if (!f) return -1;
    int n = 0, cap = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char name[160], a[32] = "", b[32] = "";
        if (sscanf(line, "%159s %31s %31s", name, a, b) < 1) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            *out = realloc(*out, (size_t)cap * sizeof **out);
        }
        expect *e = &(*out)[n++];
        memset(e, 0, sizeof *e);
        snprintf(e->name, sizeof e->name, "%s", name);
        e->be[0] = !strcmp(a, "cpu") || !strcmp(b, "cpu");
        e->be[1] = !strcmp(a, "vulkan") || !strcmp(b, "vulkan");
    }
    fclose(f);
    return n;
}

static const expect *find_expect(const expect *e, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(e[i].name, name) == 0) return &e[i];
    return NULL;
}

static void usage(void) {
    fprintf(stderr, "usage: onnx_conformance [--data DIR] [--backends cpu,vulkan] [--expected FILE]\n"
                    "                        [--write-expected FILE] [--filter TEXT] [--vulkan-subset N]\n"
                    "                        [--reasons] [--quiet]\n");
}

int main(int argc, char **argv) {
    const char *data = "/usr/share/libonnx-testdata/data", *expected = NULL, *write = NULL, *filter = NULL;
    bool use[2] = {true, true}, reasons = false, quiet = false;
    int subset = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--data") && v) data = argv[++i];
        else if (!strcmp(a, "--expected") && v) expected = argv[++i];
        else if (!strcmp(a, "--write-expected") && v) write = argv[++i];
        else if (!strcmp(a, "--filter") && v) filter = argv[++i];
        else if (!strcmp(a, "--vulkan-subset") && v) subset = atoi(argv[++i]);
        else if (!strcmp(a, "--backends") && v) {
            use[0] = strstr(v, "cpu") != NULL;
            use[1] = strstr(v, "vulkan") != NULL;
            i++;
        } else if (!strcmp(a, "--reasons")) reasons = true;
        else if (!strcmp(a, "--quiet")) quiet = true;
        else {
            usage();
            return 2;
        }
    }
    if (subset < 1) subset = 1;
    struct stat sb;
    if (stat(data, &sb) != 0) {
        fprintf(stderr, "onnx_conformance: no test data at %s (Debian: apt-get install libonnx-testdata)\n", data);
        return 77;
    }
    expect *exp = NULL;
    int nexp = 0;
    if (expected && (nexp = read_expected(expected, &exp)) < 0) {
        fprintf(stderr, "onnx_conformance: cannot read %s\n", expected);
        return 2;
    }
    mn_device *dev = NULL;
    if (use[1] && mn_device_open(&dev, MN_BACKEND_VULKAN)) {
        fprintf(stderr, "onnx_conformance: no Vulkan device (%s): CPU only\n", dev ? mn_device_error(dev) : "?");
        mn_device_close(dev);
        dev = NULL;
        use[1] = false;
        if (getenv("MN_REQUIRE_VULKAN") && !strcmp(getenv("MN_REQUIRE_VULKAN"), "1")) {
            fprintf(stderr, "onnx_conformance: MN_REQUIRE_VULKAN=1: failing\n");
            return 1;
        }
    }
    static const char *suites[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};
    result *res = NULL;
    int nres = 0, cap = 0;
    int count[2][4] = {{0}}, folded = 0, regress = 0, fresh = 0, cpu_pass_seen = 0;
    clock_t t0 = clock();
    struct timespec w0, w1;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    for (size_t s = 0; s < sizeof suites / sizeof *suites; s++) {
        char sd[1024];
        snprintf(sd, sizeof sd, "%s/%s", data, suites[s]);
        char **tests;
        int nt = list_dir(sd, "test_", &tests);
        for (int t = 0; t < nt; t++) {
            char label[160], dir[1300], model[1400];
            snprintf(label, sizeof label, "%s/%s", suites[s], tests[t]);
            if (filter && !strstr(label, filter)) continue;
            snprintf(dir, sizeof dir, "%s/%s", sd, tests[t]);
            snprintf(model, sizeof model, "%s/model.onnx", dir);
            if (stat(model, &sb) != 0) continue;
            const expect *e = find_expect(exp, nexp, label);
            /* Vulkan on every subset-th CPU pass, and on listed Vulkan passes among those */
            bool u[2] = {use[0], use[1]};
            result r;
            if (u[1] && subset > 1) {
                bool u0[2] = {true, false};
                run_test(dir, label, u0, NULL, &r);
                bool sel = r.st[0] == ST_PASS && (cpu_pass_seen++ % subset) == 0;
                u[1] = sel;
                if (!use[0]) r.st[0] = ST_NONE;
                if (u[1]) {
                    result rv;
                    bool u1[2] = {false, true};
                    run_test(dir, label, u1, dev, &rv);
                    r.st[1] = rv.st[1];
                    memcpy(r.why[1], rv.why[1], sizeof r.why[1]);
                }
            } else run_test(dir, label, u, dev, &r);
            if (nres == cap) {
                cap = cap ? cap * 2 : 512;
                res = realloc(res, (size_t)cap * sizeof *res);
            }
            res[nres++] = r;
            for (int b = 0; b < 2; b++) {
                count[b][r.st[b]]++;
                if (e && e->be[b] && r.st[b] != ST_NONE && r.st[b] != ST_PASS) {
                    printf("REGRESSION %s %s: %s: %s\n", label, b ? "vulkan" : "cpu", st_name[r.st[b]], r.why[b]);
                    regress++;
                }
                if (r.st[b] == ST_PASS && (!e || !e->be[b])) fresh++;
            }
            if (r.folded && (r.st[0] == ST_PASS || r.st[1] == ST_PASS)) folded++;
            if (!quiet) {
                printf("%-70s cpu=%-11s vulkan=%-11s%s", label, st_name[r.st[0]], st_name[r.st[1]],
                       r.folded && (r.st[0] == ST_PASS || r.st[1] == ST_PASS) ? " folded" : "");
                int b = r.st[0] != ST_PASS && r.st[0] != ST_NONE ? 0 : r.st[1] != ST_PASS && r.st[1] != ST_NONE ? 1 : -1;
                if (b >= 0) printf("  (%s) %s", b ? "vulkan" : "cpu", r.why[b]);
                printf("\n");
            }
        }
        free_list(tests, nt);
    }
    clock_gettime(CLOCK_MONOTONIC, &w1);
    double wall = (double)(w1.tv_sec - w0.tv_sec) + 1e-9 * (double)(w1.tv_nsec - w0.tv_nsec);
    if (reasons) {
        /* unsupported reasons by their first words (the op type) */
        printf("\nunsupported, by operator:\n");
        char (*keys)[64] = calloc((size_t)nres + 1, sizeof *keys);
        int *cnt = calloc((size_t)nres + 1, sizeof *cnt), nk = 0;
        for (int i = 0; i < nres; i++) {
            if (res[i].st[0] != ST_UNSUP) continue;
            char k[64];
            sscanf(res[i].why[0], "%63s", k);
            int j = 0;
            while (j < nk && strcmp(keys[j], k)) j++;
            if (j == nk) snprintf(keys[nk++], 64, "%s", k);
            cnt[j]++;
        }
        for (int pass = 0; pass < nk; pass++) {
            int best = -1;
            for (int j = 0; j < nk; j++)
                if (cnt[j] > 0 && (best < 0 || cnt[j] > cnt[best])) best = j;
            if (best < 0) break;
            printf("  %4d %s\n", cnt[best], keys[best]);
            cnt[best] = -cnt[best];
        }
        free(keys);
        free(cnt);
    }
    printf("\nonnx conformance: %d tests (%s)\n", nres, data);
    for (int b = 0; b < 2; b++)
        if (use[b])
            printf("  %-6s pass %d, fail %d, unsupported %d, not run %d\n", b ? "vulkan" : "cpu", count[b][ST_PASS],
                   count[b][ST_FAIL], count[b][ST_UNSUP], count[b][ST_NONE]);
    printf("  passes computed entirely at import (folded): %d\n", folded);
    for (size_t su = 0; su < sizeof suites / sizeof *suites; su++) {
        int tot = 0, pc = 0, pv = 0, fc = 0, uc = 0;
        size_t ln = strlen(suites[su]);
        for (int i = 0; i < nres; i++) {
            if (strncmp(res[i].name, suites[su], ln) != 0 || res[i].name[ln] != '/') continue;
            tot++;
            pc += res[i].st[0] == ST_PASS;
            pv += res[i].st[1] == ST_PASS;
            fc += res[i].st[0] == ST_FAIL;
            uc += res[i].st[0] == ST_UNSUP;
        }
        if (tot) printf("  %-18s %4d tests: cpu pass %d, fail %d, unsupported %d; vulkan pass %d\n", suites[su], tot, pc, fc, uc, pv);
    }
    printf("  %.1f s wall, %.1f s CPU\n", wall, (double)(clock() - t0) / CLOCKS_PER_SEC);
    if (expected) printf("  against %s: %d regression%s, %d new pass%s\n", expected, regress, regress == 1 ? "" : "s",
                         fresh, fresh == 1 ? "" : "es");
    if (write) {
        FILE *f = fopen(write, "w");
        if (!f) {
            fprintf(stderr, "onnx_conformance: cannot write %s\n", write);
            return 2;
        }
        fprintf(f, "# ONNX conformance tests that must keep passing (tests/onnx_conformance.c):\n"
                   "# <suite>/<test> followed by the backends it passes on. Regenerate with\n"
                   "#   build/release/tests/onnx_conformance --expected tests/onnx/expected.txt \\\n"
                   "#       --write-expected tests/onnx/expected.txt\n");
        for (int i = 0; i < nexp; i++) {
            bool ran = false;
            for (int j = 0; j < nres && !ran; j++) ran = strcmp(res[j].name, exp[i].name) == 0;
            if (!ran) fprintf(f, "%s%s%s\n", exp[i].name, exp[i].be[0] ? " cpu" : "", exp[i].be[1] ? " vulkan" : "");
        }
        for (int i = 0; i < nres; i++) {
            const expect *e = find_expect(exp, nexp, res[i].name);
            bool be[2];
            for (int b = 0; b < 2; b++) be[b] = res[i].st[b] == ST_PASS || (res[i].st[b] == ST_NONE && e && e->be[b]);
            if (be[0] || be[1]) fprintf(f, "%s%s%s\n", res[i].name, be[0] ? " cpu" : "", be[1] ? " vulkan" : "");
        }
        fclose(f);
    }
    free(res);
    free(exp);
    mn_device_close(dev);
    return regress ? 1 : 0;
}
