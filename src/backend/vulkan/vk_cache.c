/* vk_cache.c - keys, file format and checks of the on-disk kernel caches
 * (see vk_cache.h for the layout and the rules).
 *
 * File layouts (integers in host byte order: a cache belongs to one machine):
 *   spirv/<key>.spv       "MNSV", u32 format (2), key[32], u32 word count n,
 *                         SHA-256 of the words [32], n words
 *   pipelines-<key>.bin   "MNPC", u32 format (1), key[32], u64 byte count n,
 *                         SHA-256 of the data [32], n bytes of driver data
 * Format 1 of the SPIR-V cache (a 64-bit FNV key, no checksum, file names of
 * 16 hex digits) and the raw pipelines-<uuid>.bin files are never opened:
 * their names are not the names of any key.
 *
 * Does not: compile, talk to the device, evict files.
 */
#include "backend/vulkan/vk_cache.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/file.h"

#define SPV_MAGIC "MNSV"
#define SPV_FORMAT 2u
#define SPV_HEADER 76
#define SPV_MAX_WORDS (1u << 24)
#define PC_MAGIC "MNPC"
#define PC_FORMAT 1u
#define PC_HEADER 80
#define PC_MAX_BYTES ((uint64_t)64 << 20)

static int mkdir_p(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            *p = '/';
            return -1;
        }
        *p = '/';
    }
    return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

const char *vk_cache_dir(char *buf, size_t cap) {
    const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int r;
    if (x && *x) r = snprintf(buf, cap, "%s/meganeura", x);
    else if (home && *home) r = snprintf(buf, cap, "%s/.cache/meganeura", home);
    else return NULL;
    if (r < 0 || (size_t)r >= cap) return NULL; /* a cut path would name another folder */
    return mkdir_p(buf) == 0 ? buf : NULL;
}

/* ---- keys ---------------------------------------------------------------- */

/* A field of a key: its length, then its bytes, so that no two different
 * field lists hash the same byte stream. */
static void key_field(mn_sha256_ctx *c, const void *p, size_t n) {
    uint64_t len = n;
    mn_sha256_update(c, &len, sizeof len);
    mn_sha256_update(c, p, n);
}

void vk_spirv_key(vk_cache_key *key, const char *compiler_id, const char *source) {
    mn_sha256_ctx c;
    mn_sha256_init(&c);
    static const char tag[] = "meganeura spirv cache 2";
    key_field(&c, tag, sizeof tag - 1);
    key_field(&c, compiler_id, strlen(compiler_id));
    key_field(&c, source, strlen(source));
    mn_sha256_final(&c, key->b);
}

void vk_pipeline_key(vk_cache_key *key, const VkPhysicalDeviceProperties *p) {
    mn_sha256_ctx c;
    mn_sha256_init(&c);
    static const char tag[] = "meganeura pipeline cache 1";
    key_field(&c, tag, sizeof tag - 1);
    uint32_t ids[4] = {p->vendorID, p->deviceID, p->driverVersion, p->apiVersion};
    key_field(&c, ids, sizeof ids);
    key_field(&c, p->pipelineCacheUUID, VK_UUID_SIZE);
    key_field(&c, p->deviceName, strnlen(p->deviceName, VK_MAX_PHYSICAL_DEVICE_NAME_SIZE));
    mn_sha256_final(&c, key->b);
}

static bool key_path(char *path, size_t cap, const char *sub, const char *prefix, const vk_cache_key *key,
                     const char *ext) {
    char dir[1024], hex[2 * MN_SHA256_BYTES + 1];
    path[0] = 0;
    if (!vk_cache_dir(dir, sizeof dir)) return false;
    if (sub) {
        size_t n = strlen(dir);
        if (n + 1 + strlen(sub) >= sizeof dir) return false;
        snprintf(dir + n, sizeof dir - n, "/%s", sub);
        if (mkdir_p(dir) != 0) return false;
    }
    mn_sha256_hex(hex, key->b);
    int r = snprintf(path, cap, "%s/%s%s%s", dir, prefix, hex, ext);
    if (r < 0 || (size_t)r >= cap) {
        path[0] = 0;
        return false;
    }
    return true;
}

bool vk_spirv_path(char *path, size_t cap, const vk_cache_key *key) {
    return key_path(path, cap, "spirv", "", key, ".spv");
}

bool vk_pipeline_path(char *path, size_t cap, const VkPhysicalDeviceProperties *props) {
    vk_cache_key key;
    vk_pipeline_key(&key, props);
    return key_path(path, cap, NULL, "pipelines-", &key, ".bin");
}

/* ---- files --------------------------------------------------------------- */

/* The whole file if it is a regular file of hdr..hdr+max bytes; NULL
 * otherwise. *n = its size. */
static unsigned char *read_all(const char *path, size_t hdr, uint64_t max, size_t *n) {
    FILE *f = io_fopen_read(path); /* regular files only: a FIFO never blocks */
    if (!f) return NULL;
    unsigned char *buf = NULL;
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (len >= (long)hdr && (uint64_t)len <= hdr + max && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)len)) != NULL) {
        /* one byte more than the size: a file that grew meanwhile is refused */
        if (fread(buf, 1, (size_t)len, f) != (size_t)len || fgetc(f) != EOF) {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    *n = buf ? (size_t)len : 0;
    return buf;
}

/* Writes the parts to "<path>.tmp.<pid>" and renames it over path. */
static void write_all(const char *path, const void *hdr, size_t nhdr, const void *data, size_t n) {
    char tmp[1200];
    int r = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (r < 0 || (size_t)r >= sizeof tmp) return;
    FILE *f = fopen(tmp, "wb");
    if (!f) return;
    bool ok = fwrite(hdr, 1, nhdr, f) == nhdr && fwrite(data, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) unlink(tmp);
}

static bool digest_is(const unsigned char *want, const void *data, size_t n) {
    unsigned char d[MN_SHA256_BYTES];
    mn_sha256_digest(d, data, n);
    return memcmp(d, want, sizeof d) == 0;
}

static uint32_t get_u32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* ---- SPIR-V -------------------------------------------------------------- */

bool vk_spirv_load(const char *path, const vk_cache_key *key, uint32_t **words, size_t *nwords) {
    size_t len;
    unsigned char *f = read_all(path, SPV_HEADER, (uint64_t)SPV_MAX_WORDS * 4, &len);
    if (!f) return false;
    uint32_t n = get_u32(f + 40);
    const unsigned char *body = f + SPV_HEADER;
    bool ok = memcmp(f, SPV_MAGIC, 4) == 0 && get_u32(f + 4) == SPV_FORMAT &&
              memcmp(f + 8, key->b, MN_SHA256_BYTES) == 0 && n > 5 && n <= SPV_MAX_WORDS &&
              len == SPV_HEADER + (size_t)n * 4 && digest_is(f + 44, body, (size_t)n * 4);
    /* SPIR-V header: magic, version 1.0..1.6, generator, bound > 0, schema 0 */
    uint32_t *w = ok ? malloc((size_t)n * 4) : NULL;
    if (w) {
        memcpy(w, body, (size_t)n * 4);
        ok = w[0] == 0x07230203u && w[1] >= 0x00010000u && w[1] <= 0x00010600u && (w[1] & 0xff0000ffu) == 0 &&
             w[3] > 0 && w[4] == 0;
    }
    free(f);
    if (!ok || !w) {
        free(w);
        return false;
    }
    *words = w;
    *nwords = n;
    return true;
}

void vk_spirv_store(const char *path, const vk_cache_key *key, const uint32_t *words, size_t nwords) {
    if (!path[0] || nwords <= 5 || nwords > SPV_MAX_WORDS) return;
    unsigned char h[SPV_HEADER];
    uint32_t format = SPV_FORMAT, n = (uint32_t)nwords;
    memcpy(h, SPV_MAGIC, 4);
    memcpy(h + 4, &format, 4);
    memcpy(h + 8, key->b, MN_SHA256_BYTES);
    memcpy(h + 40, &n, 4);
    mn_sha256_digest(h + 44, words, nwords * 4);
    write_all(path, h, sizeof h, words, nwords * 4);
}

/* ---- pipeline cache data ------------------------------------------------- */

/* Is data the pipeline cache of this device? The header that
 * vkGetPipelineCacheData writes first: u32 header size (>= 32), u32 header
 * version (1), u32 vendor id, u32 device id, the cache UUID; little endian. */
static bool pipeline_header_ok(const unsigned char *d, size_t n, const VkPhysicalDeviceProperties *p) {
    if (n < 32) return false;
    uint32_t v[4];
    for (int i = 0; i < 4; i++)
        v[i] = (uint32_t)d[4 * i] | (uint32_t)d[4 * i + 1] << 8 | (uint32_t)d[4 * i + 2] << 16 |
               (uint32_t)d[4 * i + 3] << 24;
    return v[0] >= 32 && v[0] <= n && v[1] == VK_PIPELINE_CACHE_HEADER_VERSION_ONE && v[2] == p->vendorID &&
           v[3] == p->deviceID && memcmp(d + 16, p->pipelineCacheUUID, VK_UUID_SIZE) == 0;
}

bool vk_pipeline_data_fits(const void *data, size_t n, const VkPhysicalDeviceProperties *props) {
    return data && pipeline_header_ok(data, n, props);
}

void vk_pipeline_load(const char *path, const VkPhysicalDeviceProperties *props, void **data, size_t *n) {
    *data = NULL;
    *n = 0;
    if (!path[0]) return;
    size_t len;
    unsigned char *f = read_all(path, PC_HEADER, PC_MAX_BYTES, &len);
    if (!f) return;
    vk_cache_key key;
    vk_pipeline_key(&key, props);
    uint64_t count;
    memcpy(&count, f + 40, 8);
    const unsigned char *body = f + PC_HEADER;
    bool ok = memcmp(f, PC_MAGIC, 4) == 0 && get_u32(f + 4) == PC_FORMAT &&
              memcmp(f + 8, key.b, MN_SHA256_BYTES) == 0 && count == len - PC_HEADER &&
              digest_is(f + 48, body, (size_t)count) && pipeline_header_ok(body, (size_t)count, props);
    if (ok) {
        /* the payload moved to the front: one allocation is handed out */
        memmove(f, body, (size_t)count);
        *data = f;
        *n = (size_t)count;
    } else {
        free(f);
    }
}

void vk_pipeline_store(const char *path, const VkPhysicalDeviceProperties *props, const void *data, size_t n) {
    if (!path[0] || !n || n > PC_MAX_BYTES || !pipeline_header_ok(data, n, props)) return;
    unsigned char h[PC_HEADER];
    vk_cache_key key;
    vk_pipeline_key(&key, props);
    uint32_t format = PC_FORMAT;
    uint64_t count = n;
    memcpy(h, PC_MAGIC, 4);
    memcpy(h + 4, &format, 4);
    memcpy(h + 8, key.b, MN_SHA256_BYTES);
    memcpy(h + 40, &count, 8);
    mn_sha256_digest(h + 48, data, n);
    write_all(path, h, sizeof h, data, n);
}
