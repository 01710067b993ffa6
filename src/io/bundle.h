/* bundle.h - the container of inference bundles (docs/BUNDLE.md): one file
 * of tagged sections, each with its size and SHA-256, behind a versioned
 * header.
 *
 *   header (64 bytes)  "MNBUNDLE", u32 version (1), u32 section count n
 *                      (1..BUNDLE_MAX_SECTIONS), u64 file size, SHA-256 of
 *                      the section table, u64 0
 *   table (64 * n)     per section: tag (8 bytes: 1..8 of [a-z0-9_], NUL
 *                      padded), u64 offset, u64 size, SHA-256 of its bytes,
 *                      u64 0
 *   sections           in table order, each at the next multiple of 64
 *                      after the one before (zero padding between), the
 *                      first right after the table, the file ending with the
 *                      last: the layout is canonical, nothing hides in gaps
 * Integers are little endian on every host (a bundle travels).
 *
 * Reading checks the header, the table and its checksum against the file's
 * size before any section is read; a section is read only when asked for,
 * with bounded reads, and its checksum checked before it is handed out.
 * Writing is atomic (io/file.h): a failed write leaves the old file.
 *
 * Does not: know what the sections hold (src/session/bundle.c does),
 * decide which tags a bundle must have.
 */
#ifndef MN_IO_BUNDLE_H
#define MN_IO_BUNDLE_H

#include "core/common.h"
#include "core/sha256.h"

#define BUNDLE_MAGIC "MNBUNDLE"
#define BUNDLE_VERSION 1u
#define BUNDLE_MAX_SECTIONS 16
#define BUNDLE_HEADER 64
#define BUNDLE_ENTRY 64
#define BUNDLE_ALIGN 64

typedef struct bundle_section {
    char tag[9];
    uint64_t offset, size;
    unsigned char sha[MN_SHA256_BYTES];
} bundle_section;

/* Where the bytes come from: read() fills dst with exactly n bytes at off
 * (off + n <= size), or fails with a message. */
typedef struct bundle_source {
    mn_status (*read)(void *ctx, uint64_t off, void *dst, size_t n, char *err, size_t cap);
    void *ctx;
    uint64_t size;
} bundle_source;

typedef struct bundle_file {
    bundle_source src;
    int fd; /* bundle_open's file, or -1 */
    char shown[200]; /* the path, escaped, for messages */
    int n;
    bundle_section sec[BUNDLE_MAX_SECTIONS];
} bundle_file;

/* Opens path (a regular file, io_open_read) and checks header and table.
 * On failure the file is closed and err names the path and the problem. */
mn_status bundle_open(bundle_file *b, const char *path, char *err, size_t cap);
/* The same over bytes in memory (buf must outlive b; the fuzzer's way in). */
mn_status bundle_open_mem(bundle_file *b, const uint8_t *buf, size_t len, char *err, size_t cap);
void bundle_close(bundle_file *b); /* accepts a closed or zeroed one */
/* The section tagged tag, or NULL. */
const bundle_section *bundle_find(const bundle_file *b, const char *tag);
/* Reads the section tagged tag into *data (malloc'ed, free it; one spare
 * byte, NUL, after the n bytes) after checking its SHA-256. max bounds its
 * size (MN_E_FORMAT above). MN_E_NOT_FOUND (with a message) if absent. */
mn_status bundle_read(bundle_file *b, const char *tag, uint64_t max, uint8_t **data, size_t *n, char *err, size_t cap);

/* ---- writing ---- */

/* Appends n bytes to a section being written. */
typedef mn_status (*bundle_put)(void *sink, const void *p, uint64_t n, char *err, size_t cap);
/* One section to write: bytes in memory (data, size), or emit(), which
 * puts the section's bytes and is called twice (sizes and checksums first,
 * then the file): it must put the same bytes both times. */
typedef struct bundle_part {
    const char *tag;
    const void *data;
    uint64_t size;
    mn_status (*emit)(void *ctx, bundle_put put, void *sink, char *err, size_t cap);
    void *ctx;
} bundle_part;

/* Writes the parts to path atomically (io_atomic_*). */
mn_status bundle_write(const char *path, const bundle_part *parts, int n, char *err, size_t cap);

#endif
