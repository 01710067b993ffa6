/* image.h - internal entry of the image decoder (image.c) for its fuzz
 * target and tests: decoding with a pixel limit lower than the public one.
 *
 * Does not: add anything else to mn_image_decode.
 */
#ifndef MN_MODELS_IMAGE_H
#define MN_MODELS_IMAGE_H

#include "meganeura_models.h"

/* mn_image_decode with at most max_pixels pixels (<= MN_IMAGE_MAX_PIXELS). */
mn_status image_decode_limited(mn_image *out, const void *data, size_t len, int64_t max_pixels, char *err,
                               size_t errcap);

#endif
