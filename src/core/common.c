/* common.c - assertions, strings, logging, RNGs (sequential and
 * counter-based), host thread count, status names. */
#include <pthread.h>
#include "core/common.h"

#include <math.h>
#include <time.h>
#include <unistd.h>

_Noreturn void mn_assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "meganeura: internal error: %s (%s:%d)\n", cond, file, line);
    abort();
}

char *mn_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void mn_vfmt(char *buf, size_t cap, const char *fmt, va_list ap) {
    if (!cap) return;
    int r = vsnprintf(buf, cap, fmt, ap);
    if (r < 0) buf[0] = 0;
}

void mn_fmt(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mn_vfmt(buf, cap, fmt, ap);
    va_end(ap);
}

static mn_log_fn g_log_fn;
static void *g_log_user;

void mn_set_log(mn_log_fn fn, void *user) {
    g_log_fn = fn;
    g_log_user = user;
}

void mn_logf(mn_log_level level, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    mn_vfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_log_fn) {
        g_log_fn(level, msg, g_log_user);
        return;
    }
    if (level <= MN_LOG_WARN) fprintf(stderr, "meganeura: %s: %s\n", level == MN_LOG_ERROR ? "error" : "warning", msg);
}

const char *mn_status_str(mn_status s) {
    switch (s) {
    case MN_OK: return "MN_OK";
    case MN_E_INVALID: return "MN_E_INVALID";
    case MN_E_SHAPE: return "MN_E_SHAPE";
    case MN_E_DTYPE: return "MN_E_DTYPE";
    case MN_E_NOMEM: return "MN_E_NOMEM";
    case MN_E_IO: return "MN_E_IO";
    case MN_E_FORMAT: return "MN_E_FORMAT";
    case MN_E_NOT_FOUND: return "MN_E_NOT_FOUND";
    case MN_E_UNSUPPORTED: return "MN_E_UNSUPPORTED";
    case MN_E_BACKEND: return "MN_E_BACKEND";
    case MN_E_STATE: return "MN_E_STATE";
    case MN_E_NONFINITE: return "MN_E_NONFINITE";
    case MN_E_DIST: return "MN_E_DIST";
    default: return "MN_E_UNKNOWN";
    }
}

const char *mn_dtype_name(mn_dtype dt) {
    switch (dt) {
    case MN_F32: return "f32";
    case MN_F16: return "f16";
    case MN_BF16: return "bf16";
    case MN_I32: return "i32";
    default: return "?";
    }
}

size_t mn_dtype_size(mn_dtype dt) {
    switch (dt) {
    case MN_F32: return 4;
    case MN_F16: return 2;
    case MN_BF16: return 2;
    case MN_I32: return 4;
    default: return 0;
    }
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void mn_rng_seed(mn_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t mn_rng_next(mn_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double mn_rng_uniform(mn_rng *r) { return (double)(mn_rng_next(r) >> 11) * 0x1.0p-53; }

double mn_rng_normal(mn_rng *r) {
    double u1 = mn_rng_uniform(r), u2 = mn_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void mn_ctr_normal2(uint64_t key, uint64_t p, float z[2]) {
    const float u1 = (float)((mn_ctr_bits(key, 2 * p) >> 40) + 1) * 0x1.0p-24f; /* (0, 1] */
    const float u2 = mn_ctr_uniform(key, 2 * p + 1);
    const float r = sqrtf(-2.0f * logf(u1)), t = 6.2831853f * u2;
    z[0] = r * cosf(t);
    z[1] = r * sinf(t);
}

int mn_thread_count(void) {
    const char *e = getenv("MEGANEURA_THREADS");
    if (e && *e) {
        char *end;
        long v = strtol(e, &end, 10);
        if (*end == 0 && v >= 1) return v > 256 ? 256 : (int)v;
        mn_logf(MN_LOG_WARN, "MEGANEURA_THREADS='%s' is not a positive integer; using the CPU count", e);
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 32 ? 32 : (int)n;
}

typedef struct copy_slice {
    unsigned char *dst;
    const unsigned char *src;
    size_t n;
} copy_slice;

static void *copy_run(void *arg) {
    const copy_slice *c = arg;
    memcpy(c->dst, c->src, c->n);
    return NULL;
}

void mn_copy(void *dst, const void *src, size_t n) {
    int t = n < MN_COPY_PARALLEL_MIN ? 1 : mn_thread_count();
    if (t > MN_COPY_THREADS) t = MN_COPY_THREADS;
    if ((size_t)t > n / ((size_t)4 << 20)) t = (int)(n / ((size_t)4 << 20));
    if (t <= 1) {
        memcpy(dst, src, n);
        return;
    }
    copy_slice sl[MN_COPY_THREADS];
    pthread_t th[MN_COPY_THREADS];
    bool started[MN_COPY_THREADS] = {false};
    const size_t per = (n / (size_t)t + 63) & ~(size_t)63; /* whole cache lines */
    for (int i = 0; i < t; i++) {
        const size_t off = (size_t)i * per < n ? (size_t)i * per : n;
        sl[i] = (copy_slice){(unsigned char *)dst + off, (const unsigned char *)src + off,
                             i + 1 == t || off + per > n ? n - off : per};
    }
    for (int i = 1; i < t; i++) started[i] = pthread_create(&th[i], NULL, copy_run, &sl[i]) == 0;
    copy_run(&sl[0]);
    for (int i = 1; i < t; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else copy_run(&sl[i]);
    }
}

uint64_t mn_hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

double mn_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}
