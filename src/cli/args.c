/* args.c - command-line option parsing (see args.h). */
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/messages.h"

bool is_help(const char *a) { return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0; }

bool flag_value(args *a, const char *name, const char **val) {
    const char *arg = a->argv[a->i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0) return false;
    if (arg[n] == '=') {
        *val = arg + n + 1;
        a->i++;
        return true;
    }
    if (arg[n] != 0) return false;
    if (a->i + 1 >= a->argc) {
        a->status = usage_error(a->cmd, "option '%s' needs a value", name);
        return true;
    }
    *val = a->argv[a->i + 1];
    a->i += 2;
    return true;
}

bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != 0 || errno != 0 || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool parse_real(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != 0 || errno != 0 || !isfinite(v) || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool parse_u64(const char *s, uint64_t *out) {
    if (s[0] < '0' || s[0] > '9') return false; /* strtoull accepts "-1" */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != 0 || errno != 0) return false;
    *out = v;
    return true;
}

bool parse_backend(const char *s, mn_backend_kind *out) {
    if (strcmp(s, "cpu") == 0) *out = MN_BACKEND_CPU;
    else if (strcmp(s, "vulkan") == 0) *out = MN_BACKEND_VULKAN;
    else return false;
    return true;
}
