/* fuzz_image.c - libFuzzer target for the image decoder of src/models
 * (PNG through libpng, JPEG through libjpeg-turbo) and what follows it in
 * `meganeura classify`: resizing and the ImageNet transform.
 *
 * Does: decodes every input with a limit of 2^20 pixels (so huge declared
 * sizes cost nothing); an accepted image must have sides within the limits
 * and its pixels are read in full; it is then resized and preprocessed at a
 * small size, whose values must be finite and within the normalised range.
 * A refusal must come with a message. A broken promise aborts, which
 * libFuzzer reports as a crash.
 *
 * Does not: touch the file system.
 * Run: build/fuzz/tests/fuzz_image -max_total_time=60 <copy of tests/fuzz/corpus_image>
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "models/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    mn_image im;
    if (image_decode_limited(&im, data, size, (int64_t)1 << 20, err, sizeof err) != MN_OK) {
        MN_ASSERT(err[0] != 0 && im.rgb == NULL);
        return 0;
    }
    MN_ASSERT(im.width >= 1 && im.height >= 1 && im.width * im.height <= ((int64_t)1 << 20) && im.rgb);
    unsigned sum = 0;
    for (int64_t i = 0; i < im.width * im.height * 3; i++) sum += im.rgb[i];
    (void)sum;
    float out[3 * 12 * 12];
    MN_ASSERT(mn_imagenet_preprocess(out, &im, 14, 12) == MN_OK);
    for (size_t i = 0; i < sizeof out / sizeof out[0]; i++) MN_ASSERT(isfinite(out[i]) && fabsf(out[i]) < 3);
    mn_image r;
    MN_ASSERT(mn_image_resize(&r, &im, 3, 5) == MN_OK && r.width == 3 && r.height == 5);
    mn_image_free(&r);
    mn_image_free(&im);
    return 0;
}
