/* test_image.c - PNG/JPEG decoding, PIL's bilinear resize and torchvision's
 * ImageNet transform against PIL (tests/fixtures/images, written by
 * tests/fixtures/gen_images.py), hostile images, and the image fuzzer's
 * corpus (tests/fuzz/corpus_image) replayed; with the torchvision output of
 * gen_workloads.py (tests/fixtures/workloads/images), against it too.
 *
 * Checks: every fixture image decodes to exactly PIL's convert("RGB")
 * pixels; the transform (Resize S, CenterCrop C, ToTensor, Normalize) gives
 * exactly the reference floats for shrinking, shrinking onto the crop and
 * enlarging; each hostile file (empty, truncated, bad CRC, huge or zero
 * sides, garbage, CMYK, text) is refused with a message saying why, and a
 * directory or FIFO is refused without blocking.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llama_util.h"
#include "models/image.h"

static char fix[1024];
static mn_safetensors *g_tv; /* torchvision's own transform (gen_workloads.py), when present */

static void check_good(mn_safetensors *ref, const char *name) {
    char path[1200], err[512], key[256];
    snprintf(path, sizeof path, "%s/images/%s", fix, name);
    mn_image im;
    mn_status st = mn_image_load(&im, path, err, sizeof err);
    CHECK_OK(st, err);
    if (st) return;
    snprintf(key, sizeof key, "%s.rgb", name);
    mn_safetensors_tensor t;
    CHECK_OK(mn_safetensors_find(ref, key, &t), key);
    CHECK_MSG(t.rank == 3 && t.shape[0] == im.height && t.shape[1] == im.width && t.shape[2] == 3,
              "%s: decoded %lld x %lld, PIL says %lld x %lld", name, (long long)im.width, (long long)im.height,
              (long long)t.shape[1], (long long)t.shape[0]);
    const size_t n = (size_t)(im.width * im.height * 3);
    float *rgb = malloc(n * sizeof *rgb);
    if (t.rank == 3 && t.shape[0] == im.height && t.shape[1] == im.width &&
        mn_safetensors_read_f32(ref, key, rgb, n) == MN_OK) {
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += rgb[i] != (float)im.rgb[i];
        CHECK_MSG(bad == 0, "%s: %zu of %zu samples differ from PIL's", name, bad, n);
    }
    free(rgb);
    static const int sizes[][2] = {{32, 24}, {20, 20}, {48, 40}};
    for (int k = 0; k < 3; k++) {
        const int S = sizes[k][0], C = sizes[k][1];
        const size_t m = (size_t)(3 * C * C);
        float *ours = malloc(m * sizeof *ours), *want = malloc(m * sizeof *want);
        snprintf(key, sizeof key, "%s.pre.%d.%d", name, S, C);
        CHECK_OK(mn_imagenet_preprocess(ours, &im, S, C), name);
        CHECK_OK(mn_safetensors_read_f32(ref, key, want, m), mn_safetensors_error(ref));
        size_t bad = 0;
        double worst = 0;
        for (size_t i = 0; i < m; i++)
            if (ours[i] != want[i]) {
                bad++;
                if (fabs((double)ours[i] - want[i]) > worst) worst = fabs((double)ours[i] - want[i]);
            }
        CHECK_MSG(bad == 0, "%s: Resize(%d) CenterCrop(%d): %zu of %zu values differ from torchvision's (max %g)", name,
                  S, C, bad, m, worst);
        if (g_tv) {
            CHECK_OK(mn_safetensors_read_f32(g_tv, key, want, m), mn_safetensors_error(g_tv));
            bad = 0;
            for (size_t i = 0; i < m; i++) bad += ours[i] != want[i];
            CHECK_MSG(bad == 0, "%s: Resize(%d) CenterCrop(%d): %zu of %zu values differ from torchvision itself", name,
                      S, C, bad, m);
        }
        free(ours);
        free(want);
    }
    mn_image_free(&im);
}

static void check_hostile(const char *name, const char *words) {
    char path[1200], err[512];
    snprintf(path, sizeof path, "%s/images/%s", fix, name);
    mn_image im = {7, 7, (uint8_t *)1};
    mn_status st = mn_image_load(&im, path, err, sizeof err);
    CHECK_MSG(st != MN_OK, "%s was accepted", name);
    CHECK_MSG(im.rgb == NULL && im.width == 0, "%s: a refused image left pixels behind", name);
    CHECK_MSG(strstr(err, words) != NULL, "%s: the message '%s' does not say '%s'", name, err, words);
    CHECK_MSG(strstr(err, name) != NULL, "%s: the message '%s' does not name the file", name, err);
    if (st == MN_OK) mn_image_free(&im);
}

static void replay_corpus(void) {
    const char *corpus = getenv("MN_FUZZ_CORPUS");
    char dir[1200];
    snprintf(dir, sizeof dir, "%s_image", corpus ? corpus : "");
    DIR *d = corpus ? opendir(dir) : NULL;
    CHECK_MSG(d != NULL, "the image fuzz corpus %s is missing", dir);
    if (!d) return;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[1500], err[512], *buf = NULL;
        size_t len = 0;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (mn_read_file(&buf, &len, path, (size_t)1 << 24, err, sizeof err)) continue;
        mn_image im;
        if (image_decode_limited(&im, buf, len, (int64_t)1 << 20, err, sizeof err) == MN_OK) {
            float out[3 * 8 * 8];
            CHECK_OK(mn_imagenet_preprocess(out, &im, 8, 8), e->d_name);
            mn_image_free(&im);
        } else CHECK_MSG(err[0] != 0, "%s: refused without a message", e->d_name);
        free(buf);
        n++;
    }
    closedir(d);
    printf("image corpus: %d files replayed\n", n);
    CHECK(n >= 5);
}

int main(void) {
    lu_fixtures(fix, sizeof fix);
    char path[1200], err[512];
    snprintf(path, sizeof path, "%s/images/reference.safetensors", fix);
    mn_safetensors *ref = NULL;
    CHECK_OK(mn_safetensors_open(&ref, path, err, sizeof err), err);
    snprintf(path, sizeof path, "%s/workloads/images/torchvision.safetensors", fix);
    if (mn_safetensors_open(&g_tv, path, err, sizeof err) == MN_OK) printf("checking against %s too\n", path);
    static const char *good[] = {"rgb.png", "gray.png", "palette.png", "rgba.png", "rgb16.png",
                                 "interlaced.png", "q90.jpg", "progressive.jpg", "q95-444.jpg", "gray.jpg"};
    for (size_t i = 0; ref && i < sizeof good / sizeof good[0]; i++) check_good(ref, good[i]);
    mn_safetensors_close(ref);
    mn_safetensors_close(g_tv);

    check_hostile("hostile-empty.png", "empty");
    check_hostile("hostile-sig-only.png", "truncated");
    check_hostile("hostile-truncated.png", "truncated");
    check_hostile("hostile-bad-crc.png", "CRC");
    check_hostile("hostile-huge.png", "png:");
    check_hostile("hostile-zero-width.png", "png:");
    check_hostile("hostile-truncated.jpg", "Premature end");
    check_hostile("hostile-header-only.jpg", "jpeg:");
    check_hostile("hostile-garbage.jpg", "jpeg:");
    check_hostile("hostile-huge.jpg", "65000 x 65000");
    check_hostile("hostile-cmyk.jpg", "CMYK");
    check_hostile("hostile-text.png", "neither a PNG nor a JPEG");

    /* not regular files: refused at once */
    mn_image im;
    snprintf(path, sizeof path, "%s/images", fix);
    CHECK_MSG(mn_image_load(&im, path, err, sizeof err) != MN_OK && strstr(err, "directory"), "directory: %s", err);
    char fifo[] = "/tmp/mn-image-fifo-XXXXXX";
    int fd = mkstemp(fifo);
    close(fd);
    unlink(fifo);
    if (mkfifo(fifo, 0600) == 0) {
        CHECK_MSG(mn_image_load(&im, fifo, err, sizeof err) != MN_OK && strstr(err, "FIFO"), "fifo: %s", err);
        unlink(fifo);
    }
    /* the decoder's limit is checked before anything is allocated */
    snprintf(path, sizeof path, "%s/images/rgb.png", fix);
    char *buf = NULL;
    size_t len = 0;
    CHECK_OK(mn_read_file(&buf, &len, path, 1 << 20, err, sizeof err), err);
    CHECK_MSG(image_decode_limited(&im, buf, len, 100, err, sizeof err) == MN_E_FORMAT && strstr(err, "61 x 47"),
              "limit: %s", err);
    free(buf);

    /* resizing: identity, and to one pixel (PIL gives 102 104 107: each pass rounds) */
    uint8_t px[2 * 2 * 3] = {0, 0, 0, 255, 255, 255, 100, 100, 100, 50, 60, 70};
    mn_image small = {2, 2, px}, r;
    CHECK_OK(mn_image_resize(&r, &small, 2, 2), "resize");
    CHECK(memcmp(r.rgb, px, sizeof px) == 0);
    mn_image_free(&r);
    CHECK_OK(mn_image_resize(&r, &small, 1, 1), "resize");
    CHECK_MSG(r.rgb[0] == 102 && r.rgb[1] == 104 && r.rgb[2] == 107, "1x1: %d %d %d", r.rgb[0], r.rgb[1], r.rgb[2]);
    mn_image_free(&r);
    CHECK(mn_image_resize(&r, &small, 0, 3) == MN_E_INVALID);
    float out[3 * 4 * 4];
    CHECK(mn_imagenet_preprocess(out, &small, 4, 5) == MN_E_INVALID); /* crop > resize */

    replay_corpus();
    return th_finish("test_image");
}
