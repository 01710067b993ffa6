/* image.c - PNG and JPEG decoding (libpng, libjpeg-turbo) into 8-bit RGB,
 * PIL-compatible bilinear resizing and torchvision's ImageNet evaluation
 * transform.
 *
 * Images are hostile input: the size is checked from the header before any
 * pixel buffer is allocated, the decoders read from memory with bounds
 * (libpng through a read callback that fails past the end, libjpeg through
 * jpeg_mem_src), their errors come back through longjmp as a message, and
 * a JPEG decoder warning (truncated data, a corrupt Huffman code) is an
 * error too, so a cut file is never half grey.
 *
 * Resizing follows PIL's Image.resize(BILINEAR), which is what torchvision's
 * Resize does on PIL images: per output pixel a triangle filter of support
 * max(scale, 1) centred at (i + 0.5) * scale, its weights normalised to sum
 * 1 and turned into 22-bit fixed point; the horizontal pass runs first over
 * the rows the vertical pass needs, each pass rounding to 8 bits.
 *
 * Does not: colour management (ICC profiles are ignored, as by PIL's
 * convert), EXIF orientation (PIL does not apply it either), CMYK JPEGs.
 */
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h> /* needs stdio.h first */
#include <png.h>

#include "models/hf_util.h"
#include "models/image.h"

void mn_image_free(mn_image *im) {
    if (!im) return;
    free(im->rgb);
    memset(im, 0, sizeof *im);
}

static mn_status size_ok(int64_t w, int64_t h, int64_t max_pixels, const char *what, char *err, size_t cap) {
    if (w < 1 || h < 1 || w > MN_IMAGE_MAX_SIDE || h > MN_IMAGE_MAX_SIDE || w * h > max_pixels) {
        hf_fmt(err, cap, "%s: the image is %lld x %lld: sides must be 1 to %d and at most %lld pixels in all", what,
               (long long)w, (long long)h, MN_IMAGE_MAX_SIDE, (long long)max_pixels);
        return MN_E_FORMAT;
    }
    return MN_OK;
}

/* ---- PNG ---------------------------------------------------------------------- */

typedef struct png_ctx {
    const uint8_t *data;
    size_t len, at;
    char msg[200];
    uint8_t *rgb;
    png_bytep *rows;
} png_ctx;

static void png_on_error(png_structp p, png_const_charp msg) {
    png_ctx *c = png_get_error_ptr(p);
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    png_longjmp(p, 1);
}

static void png_on_warning(png_structp p, png_const_charp msg) { (void)p, (void)msg; /* ancillary problems */ }

static void png_read_mem(png_structp p, png_bytep dst, png_size_t n) {
    png_ctx *c = png_get_io_ptr(p);
    if (n > c->len - c->at) png_error(p, "the file ends inside the image data (truncated)");
    memcpy(dst, c->data + c->at, n);
    c->at += n;
}

static mn_status decode_png(mn_image *out, const uint8_t *data, size_t len, int64_t max_pixels, char *err, size_t cap) {
    png_ctx ctx = {data, len, 0, "", NULL, NULL};
    png_ctx *volatile c = &ctx;
    png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, c, png_on_error, png_on_warning);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    if (!p || !info) {
        png_destroy_read_struct(p ? &p : NULL, NULL, NULL);
        hf_fmt(err, cap, "png: out of memory");
        return MN_E_NOMEM;
    }
    mn_status st = MN_OK;
    if (setjmp(png_jmpbuf(p))) {
        hf_fmt(err, cap, "png: %s", c->msg[0] ? c->msg : "the file is corrupt");
        st = MN_E_FORMAT;
        goto done;
    }
    png_set_read_fn(p, c, png_read_mem);
    png_set_user_limits(p, MN_IMAGE_MAX_SIDE, MN_IMAGE_MAX_SIDE);
    png_set_chunk_malloc_max(p, (png_alloc_size_t)64 << 20);
    png_read_info(p, info);
    png_uint_32 w, h;
    int depth, color, interlace;
    png_get_IHDR(p, info, &w, &h, &depth, &color, &interlace, NULL, NULL);
    if ((st = size_ok(w, h, max_pixels, "png", err, cap))) goto done;
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(p);
    if (!(color & PNG_COLOR_MASK_COLOR) && depth < 8) png_set_expand_gray_1_2_4_to_8(p);
    if (depth == 16) png_set_strip_16(p);
    if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(p);
    if (!(color & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(p);
    png_set_interlace_handling(p);
    png_read_update_info(p, info);
    if (png_get_rowbytes(p, info) != (size_t)w * 3) {
        hf_fmt(err, cap, "png: colour type %d at %d bits does not convert to 8-bit RGB", color, depth);
        st = MN_E_UNSUPPORTED;
        goto done;
    }
    c->rgb = malloc((size_t)w * h * 3);
    c->rows = malloc((size_t)h * sizeof *c->rows);
    if (!c->rgb || !c->rows) {
        hf_fmt(err, cap, "png: out of memory for %u x %u pixels", (unsigned)w, (unsigned)h);
        st = MN_E_NOMEM;
        goto done;
    }
    for (png_uint_32 y = 0; y < h; y++) c->rows[y] = c->rgb + (size_t)y * w * 3;
    png_read_image(p, c->rows);
    out->width = w;
    out->height = h;
    out->rgb = c->rgb;
    c->rgb = NULL;
done:
    free(c->rgb);
    free(c->rows);
    png_destroy_read_struct(&p, &info, NULL);
    return st;
}

/* ---- JPEG --------------------------------------------------------------------- */

typedef struct jpeg_ctx {
    struct jpeg_error_mgr pub; /* first: libjpeg hands back this pointer */
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
    uint8_t *rgb;
} jpeg_ctx;

static void jpeg_on_error(j_common_ptr j) {
    jpeg_ctx *c = (jpeg_ctx *)j->err;
    c->pub.format_message(j, c->msg);
    longjmp(c->jb, 1);
}

/* A warning (msg_level -1: corrupt or truncated data) is an error; trace
 * messages (>= 0) are ignored. */
static void jpeg_on_message(j_common_ptr j, int level) {
    if (level < 0) jpeg_on_error(j);
}

static const char *jpeg_space(J_COLOR_SPACE s) {
    switch (s) {
    case JCS_CMYK: return "CMYK";
    case JCS_YCCK: return "YCCK";
    default: return "an unsupported colour space";
    }
}

static mn_status decode_jpeg(mn_image *out, const uint8_t *data, size_t len, int64_t max_pixels, char *err,
                             size_t cap) {
    struct jpeg_decompress_struct cinfo;
    jpeg_ctx ctx;
    jpeg_ctx *volatile c = &ctx;
    memset(&ctx, 0, sizeof ctx);
    cinfo.err = jpeg_std_error(&c->pub);
    c->pub.error_exit = jpeg_on_error;
    c->pub.emit_message = jpeg_on_message;
    mn_status st = MN_OK;
    if (setjmp(c->jb)) {
        hf_fmt(err, cap, "jpeg: %s", c->msg[0] ? c->msg : "the file is corrupt");
        st = MN_E_FORMAT;
        goto done;
    }
    jpeg_create_decompress(&cinfo);
    if (len > (size_t)0xffffffffu) {
        hf_fmt(err, cap, "jpeg: the file is larger than 4 GiB");
        st = MN_E_FORMAT;
        goto done;
    }
    jpeg_mem_src(&cinfo, data, (unsigned long)len);
    jpeg_read_header(&cinfo, TRUE);
    if ((st = size_ok(cinfo.image_width, cinfo.image_height, max_pixels, "jpeg", err, cap))) goto done;
    if (cinfo.jpeg_color_space != JCS_GRAYSCALE && cinfo.jpeg_color_space != JCS_YCbCr &&
        cinfo.jpeg_color_space != JCS_RGB) {
        hf_fmt(err, cap, "jpeg: the image is in %s; only grey, YCbCr and RGB JPEGs are read",
               jpeg_space(cinfo.jpeg_color_space));
        st = MN_E_UNSUPPORTED;
        goto done;
    }
    cinfo.out_color_space = JCS_RGB;
    cinfo.mem->max_memory_to_use = (long)1 << 30;
    jpeg_start_decompress(&cinfo);
    const size_t w = cinfo.output_width, h = cinfo.output_height;
    if (cinfo.output_components != 3) {
        hf_fmt(err, cap, "jpeg: decoded to %d components, not RGB", cinfo.output_components);
        st = MN_E_UNSUPPORTED;
        goto done;
    }
    if (!(c->rgb = malloc(w * h * 3))) {
        hf_fmt(err, cap, "jpeg: out of memory for %zu x %zu pixels", w, h);
        st = MN_E_NOMEM;
        goto done;
    }
    while (cinfo.output_scanline < h) {
        JSAMPROW row = c->rgb + (size_t)cinfo.output_scanline * w * 3;
        if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) {
            hf_fmt(err, cap, "jpeg: the image data end early (truncated)");
            st = MN_E_FORMAT;
            goto done;
        }
    }
    jpeg_finish_decompress(&cinfo);
    out->width = (int64_t)w;
    out->height = (int64_t)h;
    out->rgb = c->rgb;
    c->rgb = NULL;
done:
    free(c->rgb);
    jpeg_destroy_decompress(&cinfo);
    return st;
}

/* ---- entry points --------------------------------------------------------------- */

mn_status image_decode_limited(mn_image *out, const void *data, size_t len, int64_t max_pixels, char *err,
                               size_t errcap) {
    if (err && errcap) err[0] = 0;
    if (!out || (!data && len)) {
        hf_fmt(err, errcap, "image_decode: %s is NULL", out ? "data" : "out");
        return MN_E_INVALID;
    }
    memset(out, 0, sizeof *out);
    if (max_pixels > MN_IMAGE_MAX_PIXELS) max_pixels = MN_IMAGE_MAX_PIXELS;
    const uint8_t *d = data;
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len >= 8 && memcmp(d, png_sig, 8) == 0) return decode_png(out, d, len, max_pixels, err, errcap);
    if (len >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff) return decode_jpeg(out, d, len, max_pixels, err, errcap);
    hf_fmt(err, errcap, "image: %s (%zu bytes; a PNG starts with \\x89PNG, a JPEG with \\xFF\\xD8\\xFF)",
           len == 0 ? "the file is empty" : "neither a PNG nor a JPEG file", len);
    return MN_E_FORMAT;
}

mn_status mn_image_decode(mn_image *out, const void *data, size_t len, char *err, size_t errcap) {
    return image_decode_limited(out, data, len, MN_IMAGE_MAX_PIXELS, err, errcap);
}

mn_status mn_image_load(mn_image *out, const char *path, char *err, size_t errcap) {
    if (err && errcap) err[0] = 0;
    if (!out || !path) {
        hf_fmt(err, errcap, "image_load: %s is NULL", out ? "path" : "out");
        return MN_E_INVALID;
    }
    memset(out, 0, sizeof *out);
    char *buf = NULL, e[512], pb[200];
    size_t n = 0;
    mn_status st = mn_read_file(&buf, &n, path, (size_t)256 << 20, e, sizeof e);
    if (st) {
        hf_fmt(err, errcap, "%s", e);
        return st;
    }
    st = mn_image_decode(out, buf, n, e, sizeof e);
    free(buf);
    if (st) hf_fmt(err, errcap, "'%s': %s", mn_escape(pb, sizeof pb, path), e);
    return st;
}

/* ---- resizing (PIL's bilinear) ------------------------------------------------------ */

#define PREC 22 /* PIL's PRECISION_BITS: 32 - 8 - 2 */

typedef struct coeffs {
    int ksize;
    int *bounds; /* per output: first input, count */
    int32_t *k;  /* per output: ksize fixed-point weights */
} coeffs;

static double triangle(double x) {
    x = fabs(x);
    return x < 1 ? 1 - x : 0;
}

static bool precompute(coeffs *c, int64_t in_size, int64_t out_size) {
    const double scale = (double)in_size / (double)out_size;
    const double fscale = scale < 1 ? 1 : scale, support = fscale; /* the triangle's support is 1 */
    c->ksize = (int)ceil(support) * 2 + 1;
    c->bounds = malloc((size_t)out_size * 2 * sizeof *c->bounds);
    c->k = calloc((size_t)out_size * (size_t)c->ksize, sizeof *c->k);
    double *w = malloc((size_t)c->ksize * sizeof *w);
    if (!c->bounds || !c->k || !w) {
        free(w);
        return false;
    }
    for (int64_t o = 0; o < out_size; o++) {
        const double center = ((double)o + 0.5) * scale, ss = 1.0 / fscale;
        int64_t lo = (int64_t)(center - support + 0.5), hi = (int64_t)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in_size) hi = in_size;
        int n = (int)(hi - lo);
        if (n > c->ksize) n = c->ksize;
        double total = 0;
        for (int x = 0; x < n; x++) total += w[x] = triangle(((double)(x + lo) - center + 0.5) * ss);
        for (int x = 0; x < n; x++) {
            const double v = total != 0 ? w[x] / total : w[x];
            c->k[o * c->ksize + x] = (int32_t)(v < 0 ? -0.5 + v * (1 << PREC) : 0.5 + v * (1 << PREC));
        }
        c->bounds[2 * o] = (int)lo;
        c->bounds[2 * o + 1] = n;
    }
    free(w);
    return true;
}

static uint8_t clip8(int64_t v) {
    v >>= PREC;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

mn_status mn_image_resize(mn_image *out, const mn_image *in, int64_t width, int64_t height) {
    if (!out || !in || !in->rgb || in->width < 1 || in->height < 1) return MN_E_INVALID;
    if (width < 1 || height < 1 || width > MN_IMAGE_MAX_SIDE || height > MN_IMAGE_MAX_SIDE ||
        width * height > MN_IMAGE_MAX_PIXELS)
        return MN_E_INVALID;
    memset(out, 0, sizeof *out);
    const int64_t W = in->width, H = in->height;
    coeffs ch = {0, NULL, NULL}, cv = {0, NULL, NULL};
    uint8_t *tmp = NULL, *dst = NULL;
    mn_status st = MN_E_NOMEM;
    if (!precompute(&ch, W, width) || !precompute(&cv, H, height)) goto done;
    /* rows of the input the vertical pass reads */
    const int64_t y0 = cv.bounds[0], y1 = cv.bounds[2 * (height - 1)] + cv.bounds[2 * (height - 1) + 1];
    const int64_t th = width == W ? H : y1 - y0, toff = width == W ? 0 : y0;
    const uint8_t *src = in->rgb;
    if (width != W) { /* horizontal pass over rows y0 .. y1-1 */
        if (!(tmp = malloc((size_t)(th * width * 3)))) goto done;
        for (int64_t y = 0; y < th; y++) {
            const uint8_t *row = in->rgb + (size_t)((y + y0) * W * 3);
            for (int64_t x = 0; x < width; x++) {
                const int lo = ch.bounds[2 * x], n = ch.bounds[2 * x + 1];
                const int32_t *k = ch.k + x * ch.ksize;
                int64_t s0 = 1 << (PREC - 1), s1 = s0, s2 = s0;
                for (int i = 0; i < n; i++) {
                    const uint8_t *p = row + (size_t)(lo + i) * 3;
                    s0 += (int64_t)p[0] * k[i], s1 += (int64_t)p[1] * k[i], s2 += (int64_t)p[2] * k[i];
                }
                uint8_t *q = tmp + (size_t)((y * width + x) * 3);
                q[0] = clip8(s0), q[1] = clip8(s1), q[2] = clip8(s2);
            }
        }
        src = tmp;
    }
    if (!(dst = malloc((size_t)(width * height * 3)))) goto done;
    if (height != H) {
        for (int64_t y = 0; y < height; y++) {
            const int lo = cv.bounds[2 * y] - (int)toff, n = cv.bounds[2 * y + 1];
            const int32_t *k = cv.k + y * cv.ksize;
            for (int64_t x = 0; x < width; x++) {
                int64_t s0 = 1 << (PREC - 1), s1 = s0, s2 = s0;
                for (int i = 0; i < n; i++) {
                    const uint8_t *p = src + (size_t)(((lo + i) * width + x) * 3);
                    s0 += (int64_t)p[0] * k[i], s1 += (int64_t)p[1] * k[i], s2 += (int64_t)p[2] * k[i];
                }
                uint8_t *q = dst + (size_t)((y * width + x) * 3);
                q[0] = clip8(s0), q[1] = clip8(s1), q[2] = clip8(s2);
            }
        }
    } else {
        memcpy(dst, src + (size_t)(toff * width * 3), (size_t)(width * height * 3));
    }
    out->width = width;
    out->height = height;
    out->rgb = dst;
    dst = NULL;
    st = MN_OK;
done:
    free(ch.bounds), free(ch.k), free(cv.bounds), free(cv.k), free(tmp), free(dst);
    return st;
}

mn_status mn_imagenet_preprocess(float *out, const mn_image *im, int64_t resize, int64_t crop) {
    if (!out || !im || !im->rgb || im->width < 1 || im->height < 1 || resize < 1 || crop < 1 || crop > resize ||
        resize > MN_IMAGE_MAX_SIDE)
        return MN_E_INVALID;
    const int64_t w = im->width, h = im->height;
    const int64_t sh = w <= h ? w : h, lg = w <= h ? h : w;
    const int64_t nl = (int64_t)((double)(resize * lg) / (double)sh); /* Python's int(resize * long / short) */
    const int64_t nw = w <= h ? resize : nl, nh = w <= h ? nl : resize;
    if (nl > MN_IMAGE_MAX_SIDE || nw * nh > MN_IMAGE_MAX_PIXELS) return MN_E_INVALID;
    mn_image r;
    mn_status st = mn_image_resize(&r, im, nw, nh);
    if (st) return st;
    /* torchvision: int(round((size - crop) / 2.0)), round half to even */
    const int64_t top = (int64_t)nearbyint((double)(nh - crop) / 2.0), left = (int64_t)nearbyint((double)(nw - crop) / 2.0);
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
    for (int ch = 0; ch < 3; ch++)
        for (int64_t y = 0; y < crop; y++)
            for (int64_t x = 0; x < crop; x++) {
                const float v = (float)r.rgb[((top + y) * nw + left + x) * 3 + ch] / 255.0f;
                out[(ch * crop + y) * crop + x] = (v - mean[ch]) / stdv[ch];
            }
    mn_image_free(&r);
    return MN_OK;
}
