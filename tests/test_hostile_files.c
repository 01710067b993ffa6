/* test_hostile_files.c - no file or path can hang, clobber or poison (issue 7).
 *
 * Usage (ctest runs all three):
 *   test_hostile_files                    library checks
 *   test_hostile_files MEGANEURA          the same hostile files through the program
 *   test_hostile_files --device [MEGANEURA]  device nodes (mknod): exits 77 with SKIP
 *                                            when mknod is not permitted
 *
 * Library: the escaping rule and strict number parsing; st_load,
 * mn_session_load, mn_checkpoint_meta, mnist_load and
 * mn_session_create_from_bundle on a FIFO (must not
 * hang: an alarm fails the test), a directory, a socket, /dev/null, a 5000-byte
 * path; saves (st_save_atomic, mn_session_save, mn_session_export_bundle,
 * mnist_convert) onto a FIFO,
 * directory, socket, symbolic link (refused: links are not followed) and
 * device node, which must all stay as they were; removal of temporary files
 * of killed saves (a real SIGKILL during a save) and what is kept; the header
 * read before the data (bytes counted through an st_reader; 3 GB sparse
 * files); checkpoints with NaN/Inf, with hostile meganeura.step /
 * meganeura.next_lr, with escape sequences in names; the step counter at 2^53.
 *
 * Program: the same through `meganeura` (fork/exec with a time limit):
 * inspect/eval/--data/eval --bundle/export on a FIFO, --checkpoint and export
 * --out on a FIFO, --checkpoint on a FIFO/directory/link/device
 * refused before any data is read, --data /dev/zero, a long path keeps its
 * reason, escape sequences never reach the output, eval exits non-zero on a
 * NaN checkpoint, on non-finite logits and on a step of 2^63-1, stale
 * temporary files are cleaned by `train`, a 3 GB sparse file is not read.
 *
 * Does not: need MNIST (a tiny synthetic cache is written) or network.
 * Everything lives in a mkdtemp folder under /tmp, removed at the end.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "io/file.h"
#include "io/mnist.h"
#include "io/safetensors.h"
#include "io/text.h"
#ifdef MN_HAVE_ONNX
#include "meganeura_onnx.h"
#endif

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* mknod is XSI; declared here so the test builds under plain POSIX. */
int mknod(const char *path, mode_t mode, dev_t dev);

static char g_dir[64];
static const char *g_cli;

static const char *path_in(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", g_dir, name);
    return buf;
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[4096];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static bool contains(const char *hay, const char *needle) { return hay && strstr(hay, needle) != NULL; }

/* No byte a terminal acts on: C0 controls other than newline, DEL, C1. */
static bool plain_text(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p < 0x20 && *p != '\n') || *p == 0x7F) return false;
        if (p[0] == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F) return false;
    }
    return true;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot create %s", path);
    if (!f) return;
    CHECK(fwrite(data, 1, n, f) == n);
    CHECK(fclose(f) == 0);
}

static mode_t kind_of(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0 ? (sb.st_mode & S_IFMT) : 0;
}

static int count_temps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strstr(de->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

/* A pid that names no process: a child that has exited and been reaped. */
static pid_t dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
    return p;
}

static void set_old(const char *path) {
    struct timespec ts[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    CHECK(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW) == 0);
}

static void make_fifo(const char *p) { CHECK_MSG(mkfifo(p, 0644) == 0, "mkfifo %s: %s", p, strerror(errno)); }

static void make_socket(const char *p) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    CHECK(strlen(p) < sizeof a.sun_path);
    memcpy(a.sun_path, p, strlen(p) < sizeof a.sun_path ? strlen(p) : sizeof a.sun_path - 1);
    CHECK_MSG(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0, "socket %s: %s", p, strerror(errno));
    if (fd >= 0) close(fd); /* the socket file stays */
}

/* A path of about n bytes under g_dir (components of 200 bytes). */
static char *long_path(size_t n) {
    char *p = malloc(n + 300);
    size_t o = (size_t)snprintf(p, n + 300, "%s", g_dir);
    while (o < n) {
        p[o++] = '/';
        for (int i = 0; i < 200; i++) p[o++] = 'd';
    }
    strcpy(p + o, "/end.safetensors");
    return p;
}

/* Fails the test instead of hanging on a FIFO. */
static void on_alarm(int sig) {
    (void)sig;
    static const char m[] = "FAIL test_hostile_files: a read blocked for 20 s (FIFO?)\n";
    ssize_t r = write(2, m, sizeof m - 1);
    (void)r;
    _exit(1);
}

/* ---- a small model and its checkpoint ------------------------------------------ */

#define B 4
#define IN 3
#define OUT 2

static mn_graph *tiny_graph(void) {
    mn_graph *g;
    mn_tensor x, y, w, b, lg, loss;
    mn_init k = {MN_INIT_KAIMING_UNIFORM, 0, 0}, z = {MN_INIT_ZEROS, 0, 0};
    mn_graph_create(&g);
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){B, IN});
    st = st ? st : mn_graph_input(g, &y, "y", MN_I32, 1, (int64_t[]){B});
    st = st ? st : mn_graph_param(g, &w, "w", 2, (int64_t[]){IN, OUT}, k);
    st = st ? st : mn_graph_param(g, &b, "b", 1, (int64_t[]){OUT}, z);
    st = st ? st : mn_matmul(g, &lg, x, w);
    st = st ? st : mn_add(g, &lg, lg, b);
    st = st ? st : mn_cross_entropy(g, &loss, lg, y);
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    return g;
}

static mn_session *tiny_session(const mn_graph *g, bool training) {
    mn_session_options so = mn_session_default_options();
    so.mode = training ? MN_MODE_TRAINING : MN_MODE_INFERENCE;
    so.optim = mn_optimizer_default(MN_OPTIM_ADAM);
    mn_session *s = NULL;
    CHECK_OK(mn_session_create(&s, g, &so), mn_session_error(s));
    return s;
}

static void tiny_step(mn_session *s) {
    float x[B * IN] = {1, 2, 3, -1, 0, 1, 2, 2, 2, 0, 0, 1};
    int32_t y[B] = {0, 1, 1, 0};
    CHECK_OK(mn_session_set_input(s, "x", x, sizeof x), mn_session_error(s));
    CHECK_OK(mn_session_set_input(s, "y", y, sizeof y), mn_session_error(s));
    CHECK_OK(mn_session_step(s), mn_session_error(s));
}

/* How a copy of a checkpoint is changed by rewrite(). */
typedef struct edit {
    const char *key, *val;      /* metadata key set to val (added if absent) */
    const char *tensor;         /* tensor whose first count values become value */
    float value;
    int count;
    const char *rename_from, *rename_to;
} edit;

/* Copies checkpoint src to dst with e applied. */
static void rewrite(const char *src, const char *dst, edit e) {
    st_file f;
    char err[1024];
    CHECK_OK(st_load(&f, src, err, sizeof err), err);
    st_entry *en = calloc((size_t)f.n + 1, sizeof *en);
    uint8_t **copies = calloc((size_t)f.n + 1, sizeof *copies);
    for (int i = 0; i < f.n; i++) {
        const st_tensor *t = &f.tensors[i];
        uint64_t n = t->end - t->begin;
        copies[i] = malloc(n + 1);
        memcpy(copies[i], f.data + t->begin, n);
        if (e.tensor && !strcmp(t->name, e.tensor))
            for (int k = 0; k < e.count && (uint64_t)(k + 1) * 4 <= n; k++) memcpy(copies[i] + 4 * k, &e.value, 4);
        const char *name = e.rename_from && !strcmp(t->name, e.rename_from) ? e.rename_to : t->name;
        en[i] = (st_entry){name, t->dtype, t->rank, t->shape, copies[i], n};
    }
    const char **kv = calloc(2 * (size_t)f.nmeta + 2, sizeof *kv);
    int nm = 0;
    bool set = false;
    for (int i = 0; i < f.nmeta; i++) {
        kv[2 * nm] = f.meta_keys[i];
        kv[2 * nm + 1] = e.key && !strcmp(e.key, f.meta_keys[i]) ? (set = true, e.val) : f.meta_vals[i];
        nm++;
    }
    if (e.key && !set) {
        kv[2 * nm] = e.key;
        kv[2 * nm + 1] = e.val;
        nm++;
    }
    CHECK_OK(st_save_atomic(dst, en, f.n, kv, nm, err, sizeof err), err);
    for (int i = 0; i < f.n; i++) free(copies[i]);
    free(copies);
    free(en);
    free(kv);
    st_free(&f);
}

/* ---- escaping and numbers ------------------------------------------------------- */

static void test_escape(void) {
    char b[IO_ESC_NAME];
    CHECK(!strcmp(io_esc(b, sizeof b, "plain name.1"), "plain name.1"));
    CHECK(!strcmp(io_esc(b, sizeof b, "a\x1b[31mb"), "a\\x1B[31mb"));
    CHECK(!strcmp(io_esc(b, sizeof b, "bel\x07\x7f"), "bel\\x07\\x7F"));
    CHECK(!strcmp(io_esc(b, sizeof b, "\xC2\x9B" "2J"), "\\xC2\\x9B2J"));          /* C1 CSI */
    CHECK(!strcmp(io_esc(b, sizeof b, "x\xE2\x80\xAEy"), "x\\xE2\\x80\\xAEy"));   /* RLO */
    CHECK(!strcmp(io_esc(b, sizeof b, "\xE2\x81\xA6i"), "\\xE2\\x81\\xA6i"));     /* LRI */
    CHECK(!strcmp(io_esc(b, sizeof b, "caf\xC3\xA9 \xE2\x82\xAC"), "caf\xC3\xA9 \xE2\x82\xAC")); /* kept */
    CHECK(!strcmp(io_esc(b, sizeof b, "bad\xC3"), "bad\\xC3"));                     /* truncated UTF-8 */
    CHECK(!strcmp(io_esc(b, sizeof b, "\xED\xA0\x80"), "\\xED\\xA0\\x80"));         /* surrogate */
    CHECK(!strcmp(io_esc(b, sizeof b, NULL), "(null)"));
    CHECK(io_esc_len("a\x1b") == 5);
    /* too long: both ends stay, the middle becomes "..." */
    char lng[600];
    memset(lng, 'm', sizeof lng - 1);
    lng[sizeof lng - 1] = 0;
    memcpy(lng, "HEAD", 4);
    memcpy(lng + sizeof lng - 5, "TAIL", 4);
    char small[40];
    io_esc(small, sizeof small, lng);
    CHECK_MSG(strlen(small) == sizeof small - 1 && !strncmp(small, "HEAD", 4) && contains(small, "...") &&
                  !strcmp(small + strlen(small) - 4, "TAIL"),
              "middle cut: '%s'", small);
    /* escapes are never split by the cut */
    char esc_long[300];
    for (int i = 0; i < 299; i++) esc_long[i] = (char)0x1b;
    esc_long[299] = 0;
    io_esc(small, sizeof small, esc_long);
    CHECK_MSG(plain_text(small) && strlen(small) < sizeof small, "'%s'", small);
    size_t l = strlen(small);
    CHECK(l >= 4 && !strcmp(small + l - 4, "\\x1B") && !strncmp(small, "\\x1B", 4));
    char tiny[8];
    CHECK(strlen(io_esc(tiny, sizeof tiny, "abcdefghijk")) == 7);
    /* io_put_esc writes the full escaped form */
    char *txt = NULL;
    size_t tl = 0;
    FILE *ms = open_memstream(&txt, &tl);
    io_put_esc(ms, "k\x1b]0;title\x07");
    fclose(ms);
    CHECK(txt && !strcmp(txt, "k\\x1B]0;title\\x07"));
    free(txt);
}

static void test_numbers(void) {
    static const struct {
        const char *s;
        bool ok;
        uint64_t v;
    } u[] = {{"0", true, 0},      {"7", true, 7},        {"9007199254740992", true, 9007199254740992ull},
             {"", false, 0},      {"+5", false, 0},      {" 5", false, 0},
             {"5 ", false, 0},    {"-1", false, 0},      {"05", false, 0},
             {"0x5", false, 0},   {"1e3", false, 0},     {"9007199254740993", false, 0},
             {"9223372036854775807", false, 0},          {"18446744073709551616", false, 0},
             {"5\n", false, 0},   {"\xD9\xA5", false, 0} /* Arabic-Indic five */};
    for (size_t i = 0; i < MN_ARRAY_LEN(u); i++) {
        uint64_t v = 12345;
        bool ok = io_parse_uint(u[i].s, MN_CHECKPOINT_MAX_STEP, &v);
        CHECK_MSG(ok == u[i].ok && (!ok || v == u[i].v), "io_parse_uint('%s') = %d", u[i].s, ok);
        if (!ok) CHECK(v == 12345);
    }
    static const struct {
        const char *s;
        bool ok;
    } r[] = {{"0.005", true}, {"5", true},     {"-1.5e-05", true}, {"1E+3", true},  {"0", true},
             {"", false},     {"nan", false},  {"inf", false},     {"-inf", false}, {"1e999", false},
             {"+1", false},   {" 1", false},   {"1 ", false},      {"0x1p3", false}, {".5", false},
             {"5.", false},   {"1e", false},   {"--1", false}};
    for (size_t i = 0; i < MN_ARRAY_LEN(r); i++) {
        double d;
        CHECK_MSG(io_parse_real(r[i].s, &d) == r[i].ok, "io_parse_real('%s')", r[i].s);
    }
}

/* ---- reading hostile paths --------------------------------------------------------- */

/* Every reader refuses path with MN_E_IO and a message holding want. */
static void expect_unreadable(const char *path, const char *want, const char *ckpt_ok) {
    char err[1024] = "", val[64];
    st_file f;
    mn_status s = st_load(&f, path, err, sizeof err);
    CHECK_MSG(s == MN_E_IO && contains(err, want), "st_load %s: %s (%s)", path, mn_status_str(s), err);
    CHECK_MSG(strlen(err) < 600, "message too long: %zu", strlen(err));
    s = st_load_header(&f, path, err, sizeof err);
    CHECK_MSG(s == MN_E_IO && contains(err, want), "st_load_header %s: %s (%s)", path, mn_status_str(s), err);
    s = mn_checkpoint_meta(path, "model", val, sizeof val, err, sizeof err);
    CHECK_MSG(s == MN_E_IO && contains(err, want), "mn_checkpoint_meta %s: %s (%s)", path, mn_status_str(s), err);
    mnist_data d;
    s = mnist_load(&d, path, err, sizeof err);
    const char *mwant = !strcmp(want, strerror(ENOENT)) ? "does not exist" : want; /* its own hint */
    CHECK_MSG(s == MN_E_IO && contains(err, mwant), "mnist_load %s: %s (%s)", path, mn_status_str(s), err);
    mn_graph *g = tiny_graph();
    mn_session *ss = tiny_session(g, true);
    tiny_step(ss);
    s = mn_session_load(ss, path);
    CHECK_MSG(s == MN_E_IO && contains(mn_session_error(ss), want), "mn_session_load %s: %s (%s)", path,
              mn_status_str(s), mn_session_error(ss));
    CHECK(mn_session_step_count(ss) == 1); /* unchanged */
    if (ckpt_ok) CHECK_OK(mn_session_load(ss, ckpt_ok), mn_session_error(ss)); /* still usable */
    mn_session_destroy(ss);
    mn_graph_destroy(g);
    mn_session_options bo = mn_session_default_options();
    s = mn_session_create_from_bundle(&ss, path, &bo);
    CHECK_MSG(s == MN_E_IO && contains(mn_session_error(ss), want), "mn_session_create_from_bundle %s: %s (%s)",
              path, mn_status_str(s), mn_session_error(ss));
    mn_session_destroy(ss);
    FILE *fp = io_fopen_read(path);
    CHECK_MSG(fp == NULL, "io_fopen_read %s opened it", path);
    if (fp) fclose(fp);
#ifdef MN_HAVE_ONNX
    mn_graph *og = NULL;
    mn_onnx *om = NULL;
    mn_graph_create(&og);
    s = mn_onnx_load(&om, og, path, NULL, err, sizeof err);
    CHECK_MSG(s == MN_E_IO && om == NULL && contains(err, want), "mn_onnx_load %s: %s (%s)", path, mn_status_str(s), err);
    mn_graph_destroy(og);
    mn_onnx_tensor ot;
    s = mn_onnx_tensor_read(&ot, path, err, sizeof err);
    CHECK_MSG(s == MN_E_IO && contains(err, want), "mn_onnx_tensor_read %s: %s (%s)", path, mn_status_str(s), err);
#endif
}

static void test_read_hostile(const char *ckpt) {
    char p[512];
    signal(SIGALRM, on_alarm);
    alarm(20);
    expect_unreadable(path_in(p, sizeof p, "fifo"), "it is a FIFO, not a regular file", ckpt);
    alarm(0);
    expect_unreadable(path_in(p, sizeof p, "sock"), "it is a socket", ckpt);
    expect_unreadable(g_dir, "it is a directory", ckpt);
    expect_unreadable("/dev/null", "it is a character device", ckpt);
    expect_unreadable("/dev/zero", "it is a character device", ckpt);
    expect_unreadable(path_in(p, sizeof p, "missing"), strerror(ENOENT), ckpt);
    char *lp = long_path(5000);
    expect_unreadable(lp, strerror(ENAMETOOLONG), ckpt);
    char err[1024];
    st_file f;
    st_load(&f, lp, err, sizeof err);
    CHECK_MSG(contains(err, "...") && contains(err, "end.safetensors") && contains(err, g_dir), "%s", err);
    free(lp);
    /* a symbolic link to a checkpoint is read through (reading is harmless) */
    path_in(p, sizeof p, "link-to-ckpt");
    CHECK(symlink(ckpt, p) == 0);
    char val[64];
    CHECK_OK(mn_checkpoint_meta(p, "meganeura.step", val, sizeof val, err, sizeof err), err);
    unlink(p);
}

/* ---- saving onto hostile paths ------------------------------------------------------ */

/* Every writer refuses path (MN_E_IO, message holding want) and leaves it of
 * kind `kind`; no temporary file stays behind. */
static void expect_unwritable(const char *path, const char *want, mode_t kind) {
    char err[1024] = "";
    float v[2] = {1, 2};
    int64_t sh[1] = {2};
    st_entry e = {"w", "F32", 1, sh, v, sizeof v};
    mn_status s = st_save_atomic(path, &e, 1, NULL, 0, err, sizeof err);
    CHECK_MSG(s == MN_E_IO && contains(err, want), "st_save_atomic %s: %s (%s)", path, mn_status_str(s), err);
    CHECK_MSG(kind_of(path) == kind, "st_save_atomic changed %s", path);
    s = mn_checkpoint_check_path(path, err, sizeof err);
    CHECK_MSG(s == MN_E_IO && contains(err, want), "check_path %s: %s (%s)", path, mn_status_str(s), err);
    mn_graph *g = tiny_graph();
    mn_session *ss = tiny_session(g, true);
    s = mn_session_save(ss, path);
    CHECK_MSG(s == MN_E_IO && contains(mn_session_error(ss), want), "mn_session_save %s: %s (%s)", path,
              mn_status_str(s), mn_session_error(ss));
    CHECK_MSG(kind_of(path) == kind, "mn_session_save changed %s", path);
    mn_session_destroy(ss);
    ss = tiny_session(g, false); /* a bundle comes from an inference session */
    s = mn_session_export_bundle(ss, path);
    CHECK_MSG(s == MN_E_IO && contains(mn_session_error(ss), want), "mn_session_export_bundle %s: %s (%s)", path,
              mn_status_str(s), mn_session_error(ss));
    CHECK_MSG(kind_of(path) == kind, "mn_session_export_bundle changed %s", path);
    mn_session_destroy(ss);
    mn_graph_destroy(g);
    CHECK(count_temps(g_dir) == 0);
}

static void test_save_hostile(void) {
    char p[512], q[512], err[1024];
    expect_unwritable(path_in(p, sizeof p, "fifo"), "it is a FIFO", S_IFIFO);
    expect_unwritable(path_in(p, sizeof p, "sock"), "it is a socket", S_IFSOCK);
    path_in(p, sizeof p, "adir");
    CHECK(mkdir(p, 0755) == 0);
    expect_unwritable(p, "it is a directory", S_IFDIR);
    /* symbolic links are refused, never followed or replaced: the target
     * stays as it was, and a dangling link creates nothing */
    path_in(q, sizeof q, "target.bin");
    write_file(q, "keep", 4);
    path_in(p, sizeof p, "link");
    CHECK(symlink(q, p) == 0);
    expect_unwritable(p, "it is a symbolic link", S_IFLNK);
    CHECK(kind_of(q) == S_IFREG);
    struct stat sb;
    CHECK(stat(q, &sb) == 0 && sb.st_size == 4);
    char *lk = strrchr(q, '/') + 1;
    st_save_atomic(p, NULL, 0, NULL, 0, err, sizeof err);
    CHECK_MSG(contains(err, lk), "the message names the link's target: %s", err);
    path_in(p, sizeof p, "dangling");
    path_in(q, sizeof q, "nowhere.bin");
    CHECK(symlink(q, p) == 0);
    expect_unwritable(p, "it is a symbolic link", S_IFLNK);
    CHECK(kind_of(q) == 0);
    /* mnist_convert's output goes through the same writer */
    path_in(p, sizeof p, "fifo");
    CHECK(mnist_convert(g_dir, p, NULL, err, sizeof err) != MN_OK);
    /* the converter fails on the missing JSON first; the writer is checked via
     * st_save_atomic above, and the FIFO is still a FIFO */
    CHECK(kind_of(p) == S_IFIFO);
    /* a missing folder is reported up front */
    path_in(p, sizeof p, "no/such/dir/x.safetensors");
    CHECK(mn_checkpoint_check_path(p, err, sizeof err) == MN_E_IO && contains(err, "folder does not exist"));
    path_in(p, sizeof p, "fresh.safetensors");
    CHECK_OK(mn_checkpoint_check_path(p, err, sizeof err), err);
    CHECK(kind_of(p) == 0 && count_temps(g_dir) == 0); /* the probe leaves nothing */
    /* a long path: the reason survives */
    char *lp = long_path(5000);
    mn_graph *g = tiny_graph();
    mn_session *ss = tiny_session(g, true);
    CHECK(mn_session_save(ss, lp) != MN_OK);
    CHECK_MSG(contains(mn_session_error(ss), strerror(ENAMETOOLONG)), "%s", mn_session_error(ss));
    mn_session_destroy(ss);
    mn_graph_destroy(g);
    free(lp);
}

/* Device nodes: returns false (SKIP) when mknod is not permitted. */
static bool test_device_nodes(void) {
    char p[512], err[1024];
    struct stat null_sb;
    CHECK(stat("/dev/null", &null_sb) == 0);
    path_in(p, sizeof p, "null-node");
    if (mknod(p, S_IFCHR | 0666, null_sb.st_rdev) != 0) {
        if (errno == EPERM) return false;
        CHECK_MSG(0, "mknod %s: %s", p, strerror(errno));
        return true;
    }
    expect_unwritable(p, "it is a character device", S_IFCHR);
    struct stat sb;
    CHECK(stat(p, &sb) == 0 && S_ISCHR(sb.st_mode) && sb.st_rdev == null_sb.st_rdev);
    expect_unreadable(p, "it is a character device", NULL);
    CHECK(mn_checkpoint_check_path(p, err, sizeof err) == MN_E_IO && contains(err, p));
    return true;
}

/* ---- temporary files of killed saves -------------------------------------------------- */

static void touch(const char *path, bool old) {
    write_file(path, "x", 1);
    if (old) set_old(path);
}

static void test_stale_temps(void) {
    char dir[512], ck[600], p[1024], err[1024];
    path_in(dir, sizeof dir, "stale");
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(ck, sizeof ck, "%s/c.safetensors", dir);
    long dead = (long)dead_pid();
    float v[1] = {1};
    int64_t sh[1] = {1};
    st_entry e = {"w", "F32", 1, sh, v, sizeof v};

    /* A real kill -9 during a save: the child opens the temporary file,
     * writes, then is killed before the rename. */
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    pid_t child = fork();
    if (child == 0) {
        io_atomic w;
        char cerr[512];
        if (io_atomic_open(&w, ck, cerr, sizeof cerr) != MN_OK) _exit(3);
        io_atomic_write(&w, "partial", 7, cerr, sizeof cerr);
        fflush(w.fp);
        ssize_t r = write(pfd[1], "k", 1);
        (void)r;
        pause();
        _exit(0);
    }
    char c;
    CHECK(read(pfd[0], &c, 1) == 1);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(pfd[0]);
    close(pfd[1]);
    CHECK(count_temps(dir) == 1);
    /* a fresh file of a dead writer is kept (it may be a writer on another
     * host sharing the folder); once it is a minute old it goes */
    CHECK_OK(st_save_atomic(ck, &e, 1, NULL, 0, err, sizeof err), err);
    CHECK(count_temps(dir) == 1);
    DIR *d = opendir(dir);
    struct dirent *de;
    while ((de = readdir(d)))
        if (strstr(de->d_name, ".tmp.")) {
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            set_old(p);
        }
    closedir(d);

    /* what must be kept */
    snprintf(p, sizeof p, "%s/c.safetensors.tmp.%ld.AbC123", dir, (long)getpid()); /* a live writer */
    touch(p, true);
    snprintf(p, sizeof p, "%s/c.safetensors.tmp.1.AbC123", dir); /* init: alive */
    touch(p, true);
    snprintf(p, sizeof p, "%s/c.safetensors.tmp.%ld.AbC123", dir, dead); /* dead but fresh */
    touch(p, false);
    snprintf(p, sizeof p, "%s/other.safetensors.tmp.%ld.AbC123", dir, dead); /* another file's */
    touch(p, true);
    snprintf(p, sizeof p, "%s/c.safetensors.tmp.%ld.AbC", dir, dead); /* not our pattern */
    touch(p, true);
    snprintf(p, sizeof p, "%s/c.safetensors.tmp.%ld.AbC123x", dir, dead);
    touch(p, true);
    snprintf(p, sizeof p, "%s/c.safetensors.tmp.%ld.DiR123", dir, dead); /* a directory */
    CHECK(mkdir(p, 0755) == 0);
    set_old(p);
    snprintf(p, sizeof p, "%s/c.safetensors.tmp.%ld.LnK123", dir, dead); /* a link */
    CHECK(symlink("/etc/hostname", p) == 0);
    set_old(p);
    int kept = 8;
    if (geteuid() == 0) { /* another user's file */
        snprintf(p, sizeof p, "%s/c.safetensors.tmp.%ld.UiD123", dir, dead);
        touch(p, true);
        if (lchown(p, 65534, 65534) == 0) kept++;
        else unlink(p);
    }
    /* what must go: the killed save's file and another dead writer's */
    snprintf(p, sizeof p, "%s/c.safetensors.tmp.%ld.ZzZ999", dir, dead);
    touch(p, true);
    CHECK(count_temps(dir) == kept + 2);
    CHECK_OK(st_save_atomic(ck, &e, 1, NULL, 0, err, sizeof err), err);
    CHECK_MSG(count_temps(dir) == kept, "%d temporary files left, want %d", count_temps(dir), kept);
    CHECK(access(p, F_OK) != 0);
    CHECK(io_clean_stale_temps(ck) == 0);
    /* the temp name carries the writer's pid */
    io_atomic w;
    CHECK_OK(io_atomic_open(&w, ck, err, sizeof err), err);
    char want[64];
    snprintf(want, sizeof want, ".tmp.%ld.", (long)getpid());
    CHECK(w.tmp && contains(w.tmp, want));
    io_atomic_abort(&w);
    CHECK(count_temps(dir) == kept);
}

/* ---- the header before the data ------------------------------------------------------- */

typedef struct counting {
    int fd;
    uint64_t bytes;
} counting;

static mn_status count_read(void *ctx, uint64_t off, void *dst, size_t n, char *err, size_t cap) {
    counting *c = ctx;
    c->bytes += n;
    return io_read_at(c->fd, off, dst, n, "counted", err, cap);
}

/* st_read on path through a counting reader; returns bytes read. */
static uint64_t counted_load(const char *path, mn_status *st, st_file *f, char *err, size_t cap) {
    counting c = {open(path, O_RDONLY), 0};
    struct stat sb;
    fstat(c.fd, &sb);
    st_reader r = {count_read, &c, (uint64_t)sb.st_size, path};
    *st = st_read(f, &r, true, err, cap);
    close(c.fd);
    return c.bytes;
}

/* A sparse file: 8-byte length, header text, then zeros up to size. */
static void sparse_file(const char *path, uint64_t hlen_field, const char *hdr, uint64_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)(hlen_field >> (8 * i));
    CHECK(write(fd, len, 8) == 8);
    if (hdr) CHECK(write(fd, hdr, strlen(hdr)) == (ssize_t)strlen(hdr));
    CHECK(ftruncate(fd, (off_t)size) == 0);
    close(fd);
}

#define GIB3 (3ull << 30)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_header_first(void) {
    char p[512], err[1024];
    st_file f;
    mn_status st;
    const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    path_in(p, sizeof p, "huge-valid.safetensors");
    sparse_file(p, strlen(hdr), hdr, GIB3);
    double t0 = now_s();
    uint64_t n = counted_load(p, &st, &f, err, sizeof err);
    CHECK_OK(st, err);
    CHECK_MSG(n == 8 + strlen(hdr) + 16, "read %" PRIu64 " bytes of a 3 GB file, want %zu", n, 8 + strlen(hdr) + 16);
    CHECK(f.n == 1 && f.data_len == 16);
    st_free(&f);
    CHECK_OK(st_load(&f, p, err, sizeof err), err);
    st_free(&f);
    CHECK_MSG(now_s() - t0 < 5.0, "3 GB sparse file took %.1f s", now_s() - t0);

    /* garbage: an absurd length field, then a header that is not JSON */
    path_in(p, sizeof p, "huge-garbage.bin");
    sparse_file(p, 0x4141414141414141ull, "AAAAAAAA", GIB3);
    n = counted_load(p, &st, &f, err, sizeof err);
    CHECK_MSG(st == MN_E_FORMAT && contains(err, "limit") && n == 8, "%s, %" PRIu64 " bytes", err, n);
    char junk[1001];
    memset(junk, 'x', 1000);
    junk[1000] = 0;
    sparse_file(p, 1000, junk, GIB3);
    n = counted_load(p, &st, &f, err, sizeof err);
    CHECK_MSG(st == MN_E_FORMAT && contains(err, "JSON") && n == 8 + 1000, "%s, %" PRIu64 " bytes", err, n);
    sparse_file(p, 0, NULL, GIB3);
    t0 = now_s();
    CHECK(st_load(&f, p, err, sizeof err) == MN_E_FORMAT && contains(err, "JSON"));
    CHECK(mn_checkpoint_meta(p, "k", err, 8, err, sizeof err) == MN_E_FORMAT);
    CHECK_MSG(now_s() - t0 < 5.0, "3 GB garbage took %.1f s", now_s() - t0);
    /* the header-only reader never reads tensor bytes */
    path_in(p, sizeof p, "huge-valid.safetensors");
    counting c = {open(p, O_RDONLY), 0};
    st_reader r = {count_read, &c, GIB3, p};
    CHECK_OK(st_read(&f, &r, false, err, sizeof err), err);
    CHECK(c.bytes == 8 + strlen(hdr) && f.data == NULL && f.n == 1);
    st_free(&f);
    close(c.fd);
    /* a file shorter than its size said (it shrank): an error, not a crash */
    const char *hdr2 = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1024],\"data_offsets\":[0,4096]}}";
    path_in(p, sizeof p, "shrunk.safetensors");
    sparse_file(p, strlen(hdr2), hdr2, 8 + strlen(hdr2) + 100);
    c.fd = open(p, O_RDONLY);
    c.bytes = 0;
    r.size = 8 + strlen(hdr2) + 4096; /* claims more than is there */
    r.name = p;
    st = st_read(&f, &r, true, err, sizeof err);
    CHECK_MSG(st == MN_E_IO && contains(err, "changed while being read"), "%s", err);
    close(c.fd);
    unlink(p);
    path_in(p, sizeof p, "huge-valid.safetensors");
    unlink(p);
    path_in(p, sizeof p, "huge-garbage.bin");
    unlink(p);

    /* MNIST: header and size are checked before any pixel is read; run in a
     * child under a 1 GiB address-space limit (not under ASan), where reading
     * the 3 GB file whole would fail with "out of memory" */
    path_in(p, sizeof p, "huge-mnist.bin");
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    uint8_t h[MNIST_HEADER_BYTES] = {'M', 'N', 'D', 'S', 1, 0, 0, 0, 0xE8, 0x03, 0, 0, 28, 0, 0, 0, 28, 0, 0, 0};
    CHECK(write(fd, h, sizeof h) == (ssize_t)sizeof h);
    CHECK(ftruncate(fd, (off_t)GIB3) == 0);
    close(fd);
    pid_t child = fork();
    if (child == 0) {
        if (!UNDER_ASAN) {
            struct rlimit lim = {1ul << 30, 1ul << 30};
            setrlimit(RLIMIT_AS, &lim);
        }
        mnist_data d;
        char cerr[1024];
        mn_status s = mnist_load(&d, p, cerr, sizeof cerr);
        _exit(s == MN_E_FORMAT && contains(cerr, "expected 785020 for 1000 images") ? 0 : (fprintf(stderr, "%s\n", cerr), 1));
    }
    int status = 0;
    waitpid(child, &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "mnist_load of a 3 GB file (status %d)", status);
    unlink(p);
}

/* ---- poisoned checkpoints -------------------------------------------------------------- */

static void expect_load_refused(const char *path, bool training, const char *want1, const char *want2) {
    mn_graph *g = tiny_graph();
    mn_session *s = tiny_session(g, training);
    float before[IN * OUT], after[IN * OUT];
    CHECK_OK(mn_session_get_param(s, "w", before, IN * OUT), mn_session_error(s));
    mn_status st = mn_session_load(s, path);
    const char *m = mn_session_error(s);
    CHECK_MSG(st == MN_E_FORMAT && contains(m, want1) && (!want2 || contains(m, want2)), "load %s: %s (%s)", path,
              mn_status_str(st), m);
    CHECK_MSG(plain_text(m), "raw control bytes in: %s", m);
    CHECK_OK(mn_session_get_param(s, "w", after, IN * OUT), mn_session_error(s));
    CHECK(!memcmp(before, after, sizeof before)); /* nothing loaded */
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

static void test_poisoned_checkpoints(const char *ck) {
    char p[512], err[1024];
    path_in(p, sizeof p, "poison.safetensors");
    float nan = NAN, inf = INFINITY;
    rewrite(ck, p, (edit){.tensor = "w", .value = nan, .count = 3});
    expect_load_refused(p, false, "tensor 'w' holds 3 NaN and 0 infinite values of 6", "diverged");
    expect_load_refused(p, true, "tensor 'w'", "NaN");
    rewrite(ck, p, (edit){.tensor = "b", .value = -inf, .count = 1});
    expect_load_refused(p, false, "tensor 'b' holds 0 NaN and 1 infinite", NULL);
    rewrite(ck, p, (edit){.tensor = "optim.adam.m.w", .value = nan, .count = 1});
    expect_load_refused(p, true, "optim.adam.m.w", "NaN");
    /* an inference session does not load optimizer state: NaN there is not its business */
    {
        mn_graph *g = tiny_graph();
        mn_session *s = tiny_session(g, false);
        CHECK_OK(mn_session_load(s, p), mn_session_error(s));
        mn_session_destroy(s);
        mn_graph_destroy(g);
    }
    /* inspect still lists a poisoned file (to look at it) */
    st_file f;
    CHECK_OK(st_load(&f, p, err, sizeof err), err);
    st_free(&f);

    /* strict numeric metadata */
    static const char *bad_steps[] = {"9223372036854775807", "", "+5", " 5", "5 ", "-1", "05", "0x10", "1e3",
                                      "9007199254740993", "18446744073709551616", "5\x1b[2J"};
    for (size_t i = 0; i < MN_ARRAY_LEN(bad_steps); i++) {
        rewrite(ck, p, (edit){.key = "meganeura.step", .val = bad_steps[i]});
        char want[128], shown[64];
        snprintf(want, sizeof want, "meganeura.step is '%s'", io_esc(shown, sizeof shown, bad_steps[i]));
        expect_load_refused(p, true, want, "digits only");
        expect_load_refused(p, false, want, NULL);
    }
    static const char *bad_lr[] = {"nan", "inf", "-0.5", "1e999", "", "0x1p-3", " 0.1"};
    for (size_t i = 0; i < MN_ARRAY_LEN(bad_lr); i++) {
        rewrite(ck, p, (edit){.key = "meganeura.next_lr", .val = bad_lr[i]});
        char want[128];
        snprintf(want, sizeof want, "meganeura.next_lr is '%s'", bad_lr[i]);
        expect_load_refused(p, true, want, NULL);
    }
    /* the largest step loads, and stepping on from it is fine (UBSan-clean) */
    rewrite(ck, p, (edit){.key = "meganeura.step", .val = "9007199254740992"});
    mn_graph *g = tiny_graph();
    mn_session *s = tiny_session(g, true);
    CHECK_OK(mn_session_load(s, p), mn_session_error(s));
    CHECK(mn_session_step_count(s) == 9007199254740992ll);
    tiny_step(s);
    CHECK(mn_session_step_count(s) == 9007199254740993ll);
    CHECK(isfinite(mn_session_lr(s)));
    mn_session_destroy(s);

    /* names with escape sequences are shown escaped */
    rewrite(ck, p, (edit){.rename_from = "b", .rename_to = "b\x1b]0;pwned\x07"});
    s = tiny_session(g, false);
    CHECK(mn_session_load(s, p) == MN_E_NOT_FOUND);
    CHECK_MSG(contains(mn_session_error(s), "b\\x1B]0;pwned\\x07") && plain_text(mn_session_error(s)), "%s",
              mn_session_error(s));
    mn_session_destroy(s);
    mn_graph_destroy(g);
    char val[64];
    CHECK(mn_checkpoint_meta(p, "no\x1b[1mkey", val, sizeof val, err, sizeof err) == MN_E_NOT_FOUND);
    CHECK_MSG(plain_text(err) && contains(err, "no\\x1B[1mkey"), "%s", err);
    unlink(p);
}

/* ---- the program -------------------------------------------------------------------------- */

typedef struct run_result {
    int rc; /* exit status, or -1 when killed */
    bool timed_out;
    double secs;
    char out[16384], err[16384];
} run_result;

static void slurp_into(const char *path, char *dst, size_t cap) {
    dst[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t n = fread(dst, 1, cap - 1, f);
    dst[n] = 0;
    fclose(f);
}

/* Runs the program with args (NULL-terminated) and a time limit; as_limit
 * > 0 caps its address space. */
static run_result *run(int timeout_s, unsigned long as_limit, const char *const *args) {
    static run_result r;
    memset(&r, 0, sizeof r);
    char out[512], err[512];
    path_in(out, sizeof out, "run.out");
    path_in(err, sizeof err, "run.err");
    const char *argv[32];
    int n = 0;
    argv[n++] = g_cli;
    for (; args[n - 1] && n < 31; n++) argv[n] = args[n - 1];
    argv[n] = NULL;
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(o, 1);
        dup2(e, 2);
        if (as_limit) {
            struct rlimit lim = {as_limit, as_limit};
            setrlimit(RLIMIT_AS, &lim);
        }
        execv(g_cli, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (now_s() - t0 > timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            r.timed_out = true;
            break;
        }
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    r.secs = now_s() - t0;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    slurp_into(out, r.out, sizeof r.out);
    slurp_into(err, r.err, sizeof r.err);
    return &r;
}

#define RUN(timeout, ...) run(timeout, 0, (const char *const[]){__VA_ARGS__, NULL})

/* The program failed (exit 1) within its time, said want on stderr, and
 * printed no control bytes anywhere. */
#define EXPECT_FAIL(r, want)                                                                                  \
    do {                                                                                                      \
        run_result *r_ = (r);                                                                                 \
        CHECK_MSG(!r_->timed_out && r_->rc == 1 && contains(r_->err, want),                                   \
                  "want exit 1 and '%s'; got %s%d after %.1f s: %s", want, r_->timed_out ? "TIMEOUT " : "",   \
                  r_->rc, r_->secs, r_->err);                                                                 \
        CHECK_MSG(plain_text(r_->err) && plain_text(r_->out), "control bytes in the output: %s", r_->err);   \
    } while (0)

/* A tiny MNIST cache: 801 images of digit 0 (800 train, 1 test). */
static void tiny_mnist(const char *path) {
    const uint32_t n = MNIST_TRAIN_PER_CLASS + 1;
    size_t len = MNIST_HEADER_BYTES + (size_t)n * (MNIST_PIXELS + 1);
    uint8_t *b = calloc(len, 1);
    memcpy(b, "MNDS", 4);
    uint32_t f[4] = {1, n, 28, 28};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++) b[4 + 4 * i + k] = (uint8_t)(f[i] >> (8 * k));
    for (size_t i = 0; i < (size_t)n * MNIST_PIXELS; i++) b[MNIST_HEADER_BYTES + i] = (uint8_t)(i * 7919 % 251);
    write_file(path, b, len);
    free(b);
}

static void test_cli(void) {
    char data[512], ck[512], p[512], q[512];
    path_in(data, sizeof data, "tiny-mnist.bin");
    tiny_mnist(data);
    path_in(ck, sizeof ck, "cli.safetensors");
    run_result *r = RUN(120, "train", "mnist", "--epochs", "1", "--data", data, "--checkpoint", ck);
    CHECK_MSG(r->rc == 0 && contains(r->out, "test accuracy"), "training on the tiny set: %d %s", r->rc, r->err);

    /* reading a FIFO: refused at once, never waited on */
    path_in(p, sizeof p, "fifo");
    EXPECT_FAIL(RUN(10, "inspect", p), "it is a FIFO");
#ifdef MN_HAVE_ONNX
    EXPECT_FAIL(RUN(10, "onnx-run", p), "it is a FIFO");
#endif
    EXPECT_FAIL(RUN(10, "eval", "mnist", "--checkpoint", p, "--data", data), "it is a FIFO");
    EXPECT_FAIL(RUN(10, "eval", "mnist", "--checkpoint", ck, "--data", p), "it is a FIFO");
    EXPECT_FAIL(RUN(10, "data", "mnist", "--check", "--data", p), "it is a FIFO");
    EXPECT_FAIL(RUN(10, "eval", "mnist", "--bundle", p, "--data", data), "it is a FIFO");
    path_in(q, sizeof q, "out.mnb");
    EXPECT_FAIL(RUN(10, "export", "--checkpoint", p, "--out", q), "it is a FIFO");
    CHECK(kind_of(q) == 0);
    EXPECT_FAIL(RUN(10, "export", "--checkpoint", ck, "--out", p), "it is a FIFO");
    CHECK(kind_of(p) == S_IFIFO);
    path_in(q, sizeof q, "fifo-out.safetensors");
    EXPECT_FAIL(RUN(10, "train", "mnist", "--epochs", "1", "--data", p, "--checkpoint", q), "it is a FIFO");
    /* --checkpoint on something that is not a regular file: refused before the
     * data is even read (the missing data file is not what is reported) */
    path_in(q, sizeof q, "missing-data.bin");
    EXPECT_FAIL(RUN(10, "train", "mnist", "--data", q, "--checkpoint", p), "refusing to save to");
    CHECK(kind_of(p) == S_IFIFO);
    path_in(p, sizeof p, "adir");
    EXPECT_FAIL(RUN(10, "train", "mnist", "--data", q, "--checkpoint", p), "it is a directory");
    path_in(p, sizeof p, "link");
    EXPECT_FAIL(RUN(10, "train", "mnist", "--data", q, "--checkpoint", p), "it is a symbolic link");
    CHECK(kind_of(p) == S_IFLNK);
    path_in(p, sizeof p, "no/such/dir/c.safetensors");
    EXPECT_FAIL(RUN(10, "train", "mnist", "--data", q, "--checkpoint", p), "folder does not exist");
    /* --data /dev/zero says what it is */
    r = RUN(10, "eval", "mnist", "--checkpoint", ck, "--data", "/dev/zero");
    EXPECT_FAIL(r, "it is a character device");
    CHECK(!contains(r->err, strerror(EISDIR)));
    /* a long path keeps its reason */
    char *lp = long_path(5000);
    r = RUN(10, "inspect", lp);
    EXPECT_FAIL(r, strerror(ENAMETOOLONG));
    CHECK(contains(r->err, "..."));
    EXPECT_FAIL(RUN(10, "eval", "mnist", "--checkpoint", ck, "--data", lp), strerror(ENAMETOOLONG));
    free(lp);

    /* escape sequences in names and metadata never reach the terminal */
    path_in(p, sizeof p, "evil.safetensors");
    rewrite(ck, p, (edit){.key = "model", .val = "\x1b]0;pwned\x07mlp"});
    r = RUN(10, "eval", "mnist", "--checkpoint", p, "--data", data);
    EXPECT_FAIL(r, "\\x1B]0;pwned\\x07mlp");
    rewrite(ck, p, (edit){.rename_from = "fc1.bias", .rename_to = "fc1.bias\x1b[2J\xC2\x9B" "31m"});
    r = RUN(10, "eval", "mnist", "--checkpoint", p, "--data", data);
    EXPECT_FAIL(r, "fc1.bias\\x1B[2J\\xC2\\x9B31m");
    r = RUN(10, "inspect", p);
    CHECK_MSG(r->rc == 0 && plain_text(r->out) && contains(r->out, "fc1.bias\\x1B[2J"), "%s", r->out);
    /* a NaN checkpoint: eval exits non-zero naming the tensor */
    rewrite(ck, p, (edit){.tensor = "fc2.weight", .value = NAN, .count = 5});
    EXPECT_FAIL(RUN(30, "eval", "mnist", "--checkpoint", p, "--data", data), "tensor 'fc2.weight' holds 5 NaN");
    /* finite parameters whose logits overflow: eval exits non-zero */
    rewrite(ck, p, (edit){.tensor = "fc2.bias", .value = 3e38f, .count = 10});
    rewrite(p, p, (edit){.tensor = "fc2.weight", .value = 3e38f, .count = 1280});
    EXPECT_FAIL(RUN(30, "eval", "mnist", "--checkpoint", p, "--data", data), "non-finite logit");
    /* a step of 2^63-1 is refused, not loaded */
    rewrite(ck, p, (edit){.key = "meganeura.step", .val = "9223372036854775807"});
    EXPECT_FAIL(RUN(30, "eval", "mnist", "--checkpoint", p, "--data", data), "meganeura.step is '9223372036854775807'");

    /* stale temporary files of a killed save go at the next save */
    char stale[700], live[700];
    snprintf(stale, sizeof stale, "%s.tmp.%ld.QwE123", ck, (long)dead_pid());
    snprintf(live, sizeof live, "%s.tmp.%ld.QwE123", ck, (long)getpid());
    touch(stale, true);
    touch(live, true);
    r = RUN(120, "train", "mnist", "--epochs", "1", "--data", data, "--checkpoint", ck);
    CHECK_MSG(r->rc == 0, "%s", r->err);
    CHECK_MSG(access(stale, F_OK) != 0, "the stale temporary file is still there");
    CHECK_MSG(access(live, F_OK) == 0, "a live writer's temporary file was removed");
    unlink(live);

    /* a 3 GB sparse file is not read whole: garbage fails at once, a valid
     * header with a 3 GB gap lists fine, even with 1 GiB of address space */
    path_in(p, sizeof p, "huge.safetensors");
    sparse_file(p, 0, NULL, GIB3);
    r = RUN(10, "inspect", p);
    EXPECT_FAIL(r, "header is not valid JSON");
    CHECK_MSG(r->secs < 5.0, "inspect of 3 GB of garbage took %.1f s", r->secs);
    const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    sparse_file(p, strlen(hdr), hdr, GIB3);
    r = run(10, UNDER_ASAN ? 0 : 1ul << 30, (const char *const[]){"inspect", p, NULL});
    CHECK_MSG(r->rc == 0 && contains(r->out, "1 tensor, 16 bytes"), "inspect of a 3 GB file: %d %s", r->rc, r->err);
    EXPECT_FAIL(RUN(10, "eval", "mnist", "--checkpoint", p, "--data", data), "no metadata key 'model'");
    unlink(p);
}

static bool test_cli_device(void) {
    char p[512], q[512];
    struct stat null_sb;
    CHECK(stat("/dev/null", &null_sb) == 0);
    path_in(p, sizeof p, "cli-null-node");
    if (mknod(p, S_IFCHR | 0666, null_sb.st_rdev) != 0) {
        if (errno == EPERM) return false;
        CHECK_MSG(0, "mknod %s: %s", p, strerror(errno));
        return true;
    }
    path_in(q, sizeof q, "missing-data.bin");
    EXPECT_FAIL(RUN(10, "train", "mnist", "--epochs", "1", "--data", q, "--checkpoint", p), "it is a character device");
    struct stat sb;
    CHECK_MSG(lstat(p, &sb) == 0 && S_ISCHR(sb.st_mode) && sb.st_rdev == null_sb.st_rdev, "%s was replaced", p);
    EXPECT_FAIL(RUN(10, "inspect", p), "it is a character device");
    return true;
}

int main(int argc, char **argv) {
    bool device = argc > 1 && !strcmp(argv[1], "--device");
    g_cli = argc > 1 + device ? argv[1 + device] : NULL;
    snprintf(g_dir, sizeof g_dir, "/tmp/mn-hostile-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    char p[512], ck[512];
    make_fifo(path_in(p, sizeof p, "fifo"));
    make_socket(path_in(p, sizeof p, "sock"));
    /* a good checkpoint of the tiny model (trained one step: state and step) */
    path_in(ck, sizeof ck, "good.safetensors");
    mn_graph *g = tiny_graph();
    mn_session *s = tiny_session(g, true);
    tiny_step(s);
    CHECK_OK(mn_session_save(s, ck), mn_session_error(s));
    mn_session_destroy(s);
    mn_graph_destroy(g);

    const char *name = "test_hostile_files";
    bool skipped = false;
    if (device) {
        name = "test_hostile_files --device";
        skipped = !test_device_nodes();
        if (!skipped && g_cli) skipped = !test_cli_device();
    } else if (g_cli) {
        name = "test_hostile_files (cli)";
        path_in(p, sizeof p, "adir");
        mkdir(p, 0755);
        path_in(p, sizeof p, "link");
        char t[512];
        CHECK(symlink(path_in(t, sizeof t, "target.bin"), p) == 0);
        test_cli();
    } else {
        test_escape();
        test_numbers();
        test_read_hostile(ck);
        test_save_hostile();
        test_stale_temps();
        test_header_first();
        test_poisoned_checkpoints(ck);
    }
    remove_tree(g_dir);
    if (skipped && th_failed == 0) {
        printf("SKIP %s: mknod is not permitted here (EPERM); device nodes not tested\n", name);
        return 77;
    }
    return th_finish(name);
}
