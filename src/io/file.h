/* file.h - opening, reading and atomically replacing files whose paths and
 * contents may be hostile.
 *
 * Reading: io_open_read never blocks on the path (a FIFO, a terminal or a
 * device is refused without waiting for a writer), accepts regular files
 * only, and tells what the path is when it refuses it. Every reader in src/
 * opens files through it.
 *
 * Writing: io_atomic_* write a temporary file "<path>.tmp.<pid>.XXXXXX" in
 * the folder of path, fsync it and rename it over path, then fsync the
 * folder. A save never replaces anything but a regular file: a directory,
 * FIFO, socket, device node or symbolic link at path is refused with an
 * error naming the path and its kind (symbolic links are not followed
 * either: pass the file they point to). Temporary files of earlier saves of
 * the same path whose writer process is gone (killed during a save) are
 * removed when the next save starts.
 *
 * Messages quote paths escaped and shortened in the middle (text.h), so the
 * reason after them is never cut off.
 *
 * Does not: interpret contents; lock files against concurrent writers.
 */
#ifndef MN_IO_FILE_H
#define MN_IO_FILE_H

#include <sys/types.h>

#include "core/common.h"

/* What a file mode is, for messages: "a directory", "a FIFO", "a character
 * device", "a block device", "a socket", "a symbolic link", "a regular file". */
const char *io_kind(mode_t mode);

/* Opens path read-only (O_NONBLOCK|O_CLOEXEC|O_NOCTTY, so nothing blocks),
 * refuses anything but a regular file, then clears O_NONBLOCK. *size gets the
 * file's size. On failure: MN_E_IO, *fd = -1 and err says
 * "cannot read 'PATH': REASON" (or "'PATH' is a FIFO, not a regular file"). */
mn_status io_open_read(const char *path, int *fd, uint64_t *size, char *err, size_t cap);
/* The same as a stdio stream ("rb"); NULL with errno set on failure. */
FILE *io_fopen_read(const char *path);
/* Reads exactly n bytes at offset off (short reads and EINTR retried); a file
 * that ends early is an error ("ends at byte N: it changed while being read"). */
mn_status io_read_at(int fd, uint64_t off, void *dst, size_t n, const char *path, char *err, size_t cap);

/* MN_OK when a save may replace path: nothing is there, or a regular file.
 * Otherwise MN_E_IO naming path and its kind (symbolic links included). */
mn_status io_check_save_target(const char *path, char *err, size_t cap);
/* io_check_save_target, then a trial: creates and removes a temporary file
 * in the folder of path, so a missing or read-only folder shows up before
 * hours of work are spent on something that cannot be saved. */
mn_status io_probe_save_path(const char *path, char *err, size_t cap);

/* Age in seconds a dead writer's temporary file must reach before a later
 * save removes it (guards writers on other hosts of a shared folder). */
#define IO_STALE_TEMP_SECONDS 60
/* Removes the temporary files "<path>.tmp.<pid>.XXXXXX" in the folder of
 * path that are regular files owned by this user, whose pid names no running
 * process and that were last modified IO_STALE_TEMP_SECONDS or more ago.
 * Best effort: errors are ignored. Returns the number removed. */
int io_clean_stale_temps(const char *path);

typedef struct io_atomic {
    const char *path; /* the caller's string; must outlive the writer */
    char *tmp;        /* the temporary file's path, owned */
    FILE *fp;
    bool failed;      /* a write failed: commit refuses */
} io_atomic;

/* Checks the target, removes stale temporary files, creates the temporary
 * file with the mode of the file it will replace (0644 for a new file). */
mn_status io_atomic_open(io_atomic *w, const char *path, char *err, size_t cap);
/* Appends n bytes. On failure the writer is marked failed; call abort. */
mn_status io_atomic_write(io_atomic *w, const void *p, uint64_t n, char *err, size_t cap);
/* Flushes, fsyncs, checks the target again and renames the temporary file
 * over path; fsyncs the folder. Always releases w; on failure the temporary
 * file is removed and path is as it was. */
mn_status io_atomic_commit(io_atomic *w, char *err, size_t cap);
/* Removes the temporary file and releases w; accepts a released writer. */
void io_atomic_abort(io_atomic *w);

#endif
