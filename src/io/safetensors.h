/* safetensors.h - reading and writing the safetensors format.
 *
 * Layout: 8-byte little-endian header length N, N bytes of JSON (parsed with
 * cJSON), then the data section. Every size, offset and name is checked
 * against the buffer before use: a corrupt or hostile file gives a clear
 * error, never an out-of-bounds access. Loading reads the 8-byte length and
 * the header first and checks them; only then the bytes the tensors claim
 * (never the whole of a huge or garbage file). Files are opened with
 * io_open_read (io/file.h): FIFOs and devices are refused, never waited on.
 * Writing is atomic (io_atomic_*): a temporary file in the same folder,
 * fsync, rename, fsync of the folder; on any failure the previous file at
 * that path is untouched, and only a regular file is ever replaced.
 *
 * Does not: know about graphs or sessions (the session maps names to tensors).
 */
#ifndef MN_IO_SAFETENSORS_H
#define MN_IO_SAFETENSORS_H

#include "core/common.h"

#define ST_MAX_RANK 8

typedef struct st_tensor {
    char *name;        /* valid UTF-8, NUL-terminated, owned */
    char dtype[12];    /* as written in the file: "F32", "BF16", "I32", ... */
    size_t elem_size;  /* bytes per element */
    int rank;
    int64_t shape[ST_MAX_RANK];
    uint64_t begin, end; /* byte range relative to the data section, begin <= end <= data_len */
} st_tensor;

typedef struct st_file {
    st_tensor *tensors; /* sorted by begin offset */
    int n;
    char **meta_keys; /* "__metadata__" entries, owned */
    char **meta_vals;
    int nmeta;
    const uint8_t *data; /* the data section (st_parse), or its first data_len bytes (st_load) */
    uint64_t data_len;   /* st_parse: the whole data section; st_load: up to the furthest tensor end */
    uint8_t *owned;      /* the data read by st_load */
} st_file;

/* Parses buf[0..len); buf must outlive *out (st_parse does not copy the data). */
mn_status st_parse(st_file *out, const uint8_t *buf, size_t len, char *err, size_t cap);
/* Where st_read gets bytes: read() fills dst with exactly n bytes at offset
 * off of a source of size bytes, or returns an error (message in err). */
typedef struct st_reader {
    mn_status (*read)(void *ctx, uint64_t off, void *dst, size_t n, char *err, size_t cap);
    void *ctx;
    uint64_t size;
    const char *name; /* shown in messages (a path) */
} st_reader;
/* Reads the length field, then the header (at most ST_MAX_HEADER_BYTES),
 * validates it against the size, and only then, with with_data, the tensor
 * bytes (up to the furthest tensor end). Errors name r->name. */
mn_status st_read(st_file *out, const st_reader *r, bool with_data, char *err, size_t cap);
/* st_read of a file opened with io_open_read; errors name the path. */
mn_status st_load(st_file *out, const char *path, char *err, size_t cap);
/* The same without the tensor bytes: metadata and the tensor table only
 * (data NULL, data_len 0). */
mn_status st_load_header(st_file *out, const char *path, char *err, size_t cap);
void st_free(st_file *f); /* accepts a zeroed or already-freed st_file */
const st_tensor *st_find(const st_file *f, const char *name);
const char *st_meta(const st_file *f, const char *key);

typedef struct st_entry {
    const char *name;
    const char *dtype; /* "F32", "I32", ... */
    int rank;
    const int64_t *shape;
    const void *data;
    uint64_t bytes; /* must equal numel * elem size */
} st_entry;

/* meta_kv: nmeta (key, value) pairs as 2*nmeta strings. */
mn_status st_save_atomic(const char *path, const st_entry *e, int n, const char *const *meta_kv,
                         int nmeta, char *err, size_t cap);
/* The same file's bytes handed to put(sink, ...) in order (an inference
 * bundle's weights section); `what` names it in messages. Validates as
 * st_save_atomic does before putting anything. */
typedef mn_status (*st_put)(void *sink, const void *p, uint64_t n, char *err, size_t cap);
mn_status st_write(st_put put, void *sink, const char *what, const st_entry *e, int n, const char *const *meta_kv,
                   int nmeta, char *err, size_t cap);

/* Human-readable listing for `meganeura inspect`: metadata, then one line per
 * tensor (name, dtype, shape, bytes), then totals. Names and metadata are
 * escaped (io_esc): no file can send control sequences to the terminal. */
void st_print_summary(const st_file *f, FILE *out);

/* ---- additions (helpers shared by the parser, the writer and the tests) ---- */

/* Largest JSON header st_parse accepts and st_save_atomic writes (100 MiB). */
#define ST_MAX_HEADER_BYTES (100u * 1024u * 1024u)
/* Offsets and dimensions are JSON numbers (doubles): both sides require < 2^53. */
#define ST_MAX_JSON_INT 9007199254740992.0

/* Bytes per element of a safetensors dtype name ("F32" -> 4); 0 if unknown. */
size_t st_dtype_size(const char *dtype);
/* Strict UTF-8 check (io_utf8_valid): rejects overlong forms, surrogates
 * (U+D800..U+DFFF), code points above U+10FFFF and truncated sequences. */
bool st_utf8_valid(const char *s, size_t n);

#endif
