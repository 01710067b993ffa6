/* file.c - hostile-path-safe opening, reading and atomic replacement.
 *
 * Does: the rules of file.h. Reading stats the path before opening it, so a
 * device or FIFO is never even opened (their open can block or have side
 * effects), then opens with O_NONBLOCK and checks again with fstat (the path
 * may change in between). Writing checks the target with lstat both before
 * the temporary file is made and just before the rename.
 *
 * Does not: close the check-then-rename window completely (POSIX has no
 * "rename only over a regular file"); the second check keeps it small, and
 * rename never writes into what it replaces.
 */
#include "io/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/text.h"

const char *io_kind(mode_t m) {
    if (S_ISREG(m)) return "a regular file";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symbolic link";
    return "not a regular file";
}

/* ---- reading ------------------------------------------------------------- */

/* Opens a regular file; returns the fd or -1 with errno set (EINVAL-like
 * codes are replaced by a kind in *kind when the path is not a regular file). */
static int open_regular(const char *path, uint64_t *size, const char **kind) {
    *kind = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) return -1;
    if (!S_ISREG(sb.st_mode)) {
        *kind = io_kind(sb.st_mode);
        errno = S_ISDIR(sb.st_mode) ? EISDIR : EINVAL;
        return -1;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return -1;
    int e = 0;
    if (fstat(fd, &sb) != 0) e = errno;
    else if (!S_ISREG(sb.st_mode)) { /* replaced between stat and open */
        *kind = io_kind(sb.st_mode);
        e = S_ISDIR(sb.st_mode) ? EISDIR : EINVAL;
    } else {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) e = errno;
    }
    if (e) {
        close(fd);
        errno = e;
        return -1;
    }
    *size = (uint64_t)sb.st_size;
    return fd;
}

mn_status io_open_read(const char *path, int *fd, uint64_t *size, char *err, size_t cap) {
    *fd = -1;
    *size = 0;
    char shown[IO_ESC_PATH];
    if (!path) {
        mn_fmt(err, cap, "cannot read a file: the path is NULL");
        errno = EINVAL;
        return MN_E_INVALID;
    }
    const char *kind;
    uint64_t sz = 0;
    int f = open_regular(path, &sz, &kind);
    if (f < 0) {
        int e = errno;
        if (kind)
            mn_fmt(err, cap, "cannot read '%s': it is %s, not a regular file", io_esc(shown, sizeof shown, path), kind);
        else
            mn_fmt(err, cap, "cannot read '%s': %s", io_esc(shown, sizeof shown, path), strerror(e));
        errno = e;
        return MN_E_IO;
    }
    *fd = f;
    *size = sz;
    return MN_OK;
}

FILE *io_fopen_read(const char *path) {
    const char *kind;
    uint64_t size;
    int fd = path ? open_regular(path, &size, &kind) : -1;
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

mn_status io_read_at(int fd, uint64_t off, void *dst, size_t n, const char *path, char *err, size_t cap) {
    char shown[IO_ESC_PATH];
    uint8_t *b = dst;
    size_t done = 0;
    while (done < n) {
        size_t chunk = n - done > ((size_t)1 << 30) ? (size_t)1 << 30 : n - done;
        if (off + done > (uint64_t)INT64_MAX) {
            mn_fmt(err, cap, "cannot read '%s': offset %llu is out of range", io_esc(shown, sizeof shown, path),
                   (unsigned long long)(off + done));
            return MN_E_IO;
        }
        ssize_t got = pread(fd, b + done, chunk, (off_t)(off + done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            mn_fmt(err, cap, "cannot read '%s': %s", io_esc(shown, sizeof shown, path), strerror(errno));
            return MN_E_IO;
        }
        if (got == 0) {
            mn_fmt(err, cap, "cannot read '%s': it ends at byte %llu, before byte %llu: it changed while being read",
                   io_esc(shown, sizeof shown, path), (unsigned long long)(off + done),
                   (unsigned long long)(off + n));
            return MN_E_IO;
        }
        done += (size_t)got;
    }
    return MN_OK;
}

/* ---- checking a save target ------------------------------------------------ */

mn_status io_check_save_target(const char *path, char *err, size_t cap) {
    char shown[IO_ESC_PATH];
    if (!path || !*path) {
        mn_fmt(err, cap, "cannot save: the path is %s", path ? "empty" : "NULL");
        return MN_E_INVALID;
    }
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT) return MN_OK; /* a new file (a missing folder shows up later) */
        mn_fmt(err, cap, "cannot save to '%s': %s", io_esc(shown, sizeof shown, path), strerror(errno));
        return MN_E_IO;
    }
    if (S_ISREG(sb.st_mode)) return MN_OK;
    if (S_ISLNK(sb.st_mode)) {
        char target[PATH_MAX], tshown[IO_ESC_PATH];
        ssize_t n = readlink(path, target, sizeof target - 1);
        target[n > 0 ? n : 0] = 0;
        mn_fmt(err, cap,
               "refusing to save to '%s': it is a symbolic link (to '%s'); saves do not follow links, "
               "pass the file it points to",
               io_esc(shown, sizeof shown, path), io_esc(tshown, sizeof tshown, target));
        return MN_E_IO;
    }
    mn_fmt(err, cap, "refusing to save to '%s': it is %s; a save only ever replaces a regular file",
           io_esc(shown, sizeof shown, path), io_kind(sb.st_mode));
    return MN_E_IO;
}

/* <path>.tmp.<pid>.XXXXXX, malloc'd; NULL when out of memory. */
static char *temp_template(const char *path) {
    size_t plen = strlen(path), cap = plen + 40;
    char *t = malloc(cap);
    if (t) snprintf(t, cap, "%s.tmp.%ld.XXXXXX", path, (long)getpid());
    return t;
}

/* Message for a failed mkstemp next to path. */
static void temp_error(char *err, size_t cap, const char *path, int e) {
    char shown[IO_ESC_PATH];
    mn_fmt(err, cap, "cannot create a temporary file for '%s': %s%s", io_esc(shown, sizeof shown, path),
           strerror(e), e == ENOENT ? " (its folder does not exist)" : "");
}

mn_status io_probe_save_path(const char *path, char *err, size_t cap) {
    mn_status st = io_check_save_target(path, err, cap);
    if (st) return st;
    char *tmp = temp_template(path);
    if (!tmp) {
        mn_fmt(err, cap, "out of memory checking a save path");
        return MN_E_NOMEM;
    }
    int fd = mkstemp(tmp);
    if (fd < 0) {
        temp_error(err, cap, path, errno);
        free(tmp);
        return MN_E_IO;
    }
    close(fd);
    unlink(tmp);
    free(tmp);
    return MN_OK;
}

/* ---- stale temporary files ------------------------------------------------- */

/* Does name (an entry of the folder) look like "<base>.tmp.<pid>.XXXXXX"?
 * Sets *pid. */
static bool temp_name_pid(const char *name, const char *base, size_t blen, long *pid) {
    if (strncmp(name, base, blen) != 0 || strncmp(name + blen, ".tmp.", 5) != 0) return false;
    const char *p = name + blen + 5;
    if (*p < '1' || *p > '9') return false;
    long v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (LONG_MAX - 9) / 10) return false;
        v = v * 10 + (*p - '0');
    }
    if (*p++ != '.') return false;
    for (int i = 0; i < 6; i++, p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))) return false;
    if (*p || v > INT_MAX) return false;
    *pid = v;
    return true;
}

int io_clean_stale_temps(const char *path) {
    if (!path || !*path) return 0;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t blen = strlen(base);
    if (!blen) return 0;
    char *dir = slash ? mn_strdup(path) : mn_strdup(".");
    if (!dir) return 0;
    if (slash) dir[slash == path ? 1 : (size_t)(slash - path)] = 0;
    DIR *d = opendir(dir);
    free(dir);
    if (!d) return 0;
    int dfd = dirfd(d), removed = 0;
    time_t now = time(NULL);
    struct dirent *de;
    while ((de = readdir(d))) {
        long pid;
        if (!temp_name_pid(de->d_name, base, blen, &pid)) continue;
        if (pid == (long)getpid()) continue; /* ours: a save in progress */
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* the writer may live */
        struct stat sb;
        if (fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (!S_ISREG(sb.st_mode) || sb.st_uid != geteuid()) continue;
        if (now - sb.st_mtime < IO_STALE_TEMP_SECONDS) continue;
        if (unlinkat(dfd, de->d_name, 0) == 0) removed++;
    }
    closedir(d);
    return removed;
}

/* ---- atomic replacement ---------------------------------------------------- */

mn_status io_atomic_open(io_atomic *w, const char *path, char *err, size_t cap) {
    memset(w, 0, sizeof *w);
    mn_status st = io_check_save_target(path, err, cap);
    if (st) return st;
    io_clean_stale_temps(path);
    char shown[IO_ESC_PATH];
    w->path = path;
    w->tmp = temp_template(path);
    if (!w->tmp) {
        mn_fmt(err, cap, "out of memory saving '%s'", io_esc(shown, sizeof shown, path));
        return MN_E_NOMEM;
    }
    int fd = mkstemp(w->tmp);
    if (fd < 0) {
        temp_error(err, cap, path, errno);
        free(w->tmp);
        memset(w, 0, sizeof *w);
        return MN_E_IO;
    }
    /* mkstemp makes 0600; keep the mode of the file being replaced, else 0644. */
    struct stat sb;
    mode_t mode = lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? (sb.st_mode & 07777) : 0644;
    const char *step = "set the mode of the temporary file for";
    if (fchmod(fd, mode) == 0) {
        step = "open a stream on the temporary file for";
        w->fp = fdopen(fd, "wb");
    }
    if (!w->fp) {
        int e = errno;
        close(fd);
        unlink(w->tmp);
        free(w->tmp);
        memset(w, 0, sizeof *w);
        mn_fmt(err, cap, "cannot %s '%s': %s", step, io_esc(shown, sizeof shown, path), strerror(e));
        return MN_E_IO;
    }
    return MN_OK;
}

mn_status io_atomic_write(io_atomic *w, const void *p, uint64_t n, char *err, size_t cap) {
    const uint8_t *b = p;
    if (w->failed || !w->fp) return MN_E_IO;
    while (n) {
        size_t chunk = n > ((uint64_t)1 << 30) ? (size_t)1 << 30 : (size_t)n;
        errno = 0;
        if (fwrite(b, 1, chunk, w->fp) != chunk) {
            char shown[IO_ESC_PATH];
            mn_fmt(err, cap, "cannot write '%s': %s", io_esc(shown, sizeof shown, w->path),
                   strerror(errno ? errno : EIO));
            w->failed = true;
            return MN_E_IO;
        }
        b += chunk;
        n -= chunk;
    }
    return MN_OK;
}

void io_atomic_abort(io_atomic *w) {
    if (!w) return;
    if (w->fp) fclose(w->fp);
    if (w->tmp) unlink(w->tmp);
    free(w->tmp);
    memset(w, 0, sizeof *w);
}

/* fsync of the folder holding path. Returns 0 or an errno value. */
static int fsync_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? mn_strdup(path) : mn_strdup(".");
    if (!dir) return ENOMEM;
    if (slash) dir[slash == path ? 1 : (size_t)(slash - path)] = 0;
    int rc = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) rc = errno;
    else {
        /* EINVAL: this file system cannot sync a folder; nothing more to do. */
        if (fsync(fd) != 0 && errno != EINVAL) rc = errno;
        if (close(fd) != 0 && !rc) rc = errno;
    }
    free(dir);
    return rc;
}

mn_status io_atomic_commit(io_atomic *w, char *err, size_t cap) {
    if (w->failed || !w->fp) {
        io_atomic_abort(w);
        return MN_E_IO;
    }
    char shown[IO_ESC_PATH];
    const char *step = "flush";
    int e = 0;
    errno = 0;
    if (fflush(w->fp) != 0) e = errno ? errno : EIO;
    if (!e) {
        step = "fsync";
        if (fsync(fileno(w->fp)) != 0) e = errno;
    }
    if (!e) step = "close";
    int rc = fclose(w->fp);
    w->fp = NULL; /* the stream is gone even when fclose fails */
    if (!e && rc != 0) e = errno ? errno : EIO;
    if (e) {
        mn_fmt(err, cap, "cannot %s '%s': %s", step, io_esc(shown, sizeof shown, w->path), strerror(e));
        io_atomic_abort(w);
        return MN_E_IO;
    }
    /* The path may have changed while the file was written. */
    mn_status st = io_check_save_target(w->path, err, cap);
    if (st) {
        io_atomic_abort(w);
        return st;
    }
    if (rename(w->tmp, w->path) != 0) {
        e = errno;
        mn_fmt(err, cap, "cannot rename the temporary file over '%s': %s", io_esc(shown, sizeof shown, w->path),
               strerror(e));
        io_atomic_abort(w);
        return MN_E_IO;
    }
    free(w->tmp);
    w->tmp = NULL;
    rc = fsync_parent(w->path);
    if (rc) {
        mn_fmt(err, cap, "'%s' was replaced but syncing its folder failed: %s", io_esc(shown, sizeof shown, w->path),
               strerror(rc));
        memset(w, 0, sizeof *w);
        return MN_E_IO;
    }
    memset(w, 0, sizeof *w);
    return MN_OK;
}
