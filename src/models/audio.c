/* audio.c - WAV reading, resampling and Whisper's log-mel spectrogram.
 *
 * WAV files are hostile input: every chunk size is checked against the
 * file, the format must be PCM (8, 16, 24 or 32 bits) or IEEE float (32 or
 * 64 bits), plain or WAVE_FORMAT_EXTENSIBLE, with a block alignment that
 * agrees with channels and bits; a data chunk that claims more bytes than
 * the file holds is refused as truncated (but 0xFFFFFFFF, a streaming
 * writer's placeholder, means "to the end"); float samples that are not
 * finite or lie beyond +-MN_WAV_FLOAT_MAX (1e6: no recording is that loud,
 * and such values overflow f32 once channels are summed, resampled or
 * squared in the spectrogram) are refused. Channels are averaged into one; integer samples are scaled as
 * soundfile does (x / 2^(bits-1); 8-bit: (x - 128) / 128).
 *
 * The log-mel spectrogram is Hugging Face's WhisperFeatureExtractor (16 kHz,
 * 30 s = 480000 samples, zero-padded or cut; n_fft 400, hop 160, a periodic
 * Hann window, centred frames with reflect padding, the power spectrum, 80
 * Slaney-normalised triangular mel filters on the Slaney mel scale from 0
 * to 8 kHz, log10 of max(1e-10, mel), floored at its maximum - 8, then
 * (x + 4) / 4; the last frame dropped: [80, 3000]) computed in double with
 * FFTW's real DFT, rounded to f32 once.
 *
 * Does not: other containers or codecs, long-form audio (only the first 30
 * s are features), dithering.
 */
#include <fftw3.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/hf_util.h"

void mn_audio_free(mn_audio *a) {
    if (!a) return;
    free(a->pcm);
    memset(a, 0, sizeof *a);
}

#define MN_WAV_FLOAT_MAX 1e6

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

mn_status mn_wav_decode(mn_audio *out, const void *data, size_t len, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!out || (!data && len)) {
        hf_fmt(err, cap, "wav_decode: %s is NULL", out ? "data" : "out");
        return MN_E_INVALID;
    }
    memset(out, 0, sizeof *out);
    const uint8_t *d = data;
    if (len < 12 || memcmp(d, "RIFF", 4) || memcmp(d + 8, "WAVE", 4)) {
        hf_fmt(err, cap, "wav: not a RIFF/WAVE file (%zu bytes; it must start with RIFF....WAVE)", len);
        return MN_E_FORMAT;
    }
    size_t at = 12;
    bool have_fmt = false;
    unsigned fmt = 0, channels = 0, bits = 0, align = 0;
    uint32_t rate = 0;
    const uint8_t *samples = NULL;
    size_t nbytes = 0;
    while (at + 8 <= len) {
        const uint8_t *c = d + at;
        const uint32_t size = le32(c + 4);
        const size_t left = len - at - 8;
        if (!memcmp(c, "fmt ", 4)) {
            if (size < 16 || size > left) {
                hf_fmt(err, cap, "wav: the fmt chunk is %u bytes (at least 16, within the file)", (unsigned)size);
                return MN_E_FORMAT;
            }
            fmt = le16(c + 8), channels = le16(c + 10), rate = le32(c + 12), align = le16(c + 20), bits = le16(c + 22);
            if (fmt == 0xFFFE) { /* WAVE_FORMAT_EXTENSIBLE: the sub-format GUID starts with the format code */
                if (size < 40) {
                    hf_fmt(err, cap, "wav: an extensible fmt chunk of %u bytes (40 expected)", (unsigned)size);
                    return MN_E_FORMAT;
                }
                fmt = le16(c + 8 + 24);
            }
            have_fmt = true;
        } else if (!memcmp(c, "data", 4)) {
            if (!have_fmt) {
                hf_fmt(err, cap, "wav: the data chunk comes before the fmt chunk");
                return MN_E_FORMAT;
            }
            if (size > left && size != 0xFFFFFFFFu) {
                hf_fmt(err, cap, "wav: the data chunk claims %u bytes but the file holds %zu after it (truncated)",
                       (unsigned)size, left);
                return MN_E_FORMAT;
            }
            samples = c + 8;
            nbytes = size == 0xFFFFFFFFu ? left : size;
            break;
        }
        if (size > left) {
            hf_fmt(err, cap, "wav: chunk '%c%c%c%c' claims %u bytes, past the end of the file",
                   c[0] >= 32 && c[0] < 127 ? c[0] : '?', c[1] >= 32 && c[1] < 127 ? c[1] : '?',
                   c[2] >= 32 && c[2] < 127 ? c[2] : '?', c[3] >= 32 && c[3] < 127 ? c[3] : '?', (unsigned)size);
            return MN_E_FORMAT;
        }
        at += 8 + (size_t)size + (size & 1); /* chunks are padded to even sizes */
    }
    if (!have_fmt || !samples) {
        hf_fmt(err, cap, "wav: no %s chunk", have_fmt ? "data" : "fmt");
        return MN_E_FORMAT;
    }
    const bool pcm = fmt == 1, flt = fmt == 3;
    if (!(pcm && (bits == 8 || bits == 16 || bits == 24 || bits == 32)) && !(flt && (bits == 32 || bits == 64))) {
        hf_fmt(err, cap, "wav: format %u with %u bits per sample is not read (PCM 8/16/24/32 bits or IEEE float 32/64)",
               fmt, bits);
        return MN_E_UNSUPPORTED;
    }
    if (channels < 1 || channels > 64 || align != channels * (bits / 8) || rate < 1000 || rate > 768000) {
        hf_fmt(err, cap, "wav: %u channels, block alignment %u, %u bits, %u Hz: inconsistent or out of range "
                         "(1..64 channels, alignment = channels * bytes per sample, 1 kHz .. 768 kHz)",
               channels, align, bits, (unsigned)rate);
        return MN_E_FORMAT;
    }
    const size_t frames = nbytes / align;
    if (frames > ((size_t)1 << 31)) {
        hf_fmt(err, cap, "wav: %zu sample frames is more than %zu", frames, (size_t)1 << 31);
        return MN_E_FORMAT;
    }
    float *pcm_out = malloc((frames ? frames : 1) * sizeof *pcm_out);
    if (!pcm_out) {
        hf_fmt(err, cap, "wav: out of memory for %zu samples", frames);
        return MN_E_NOMEM;
    }
    const unsigned bps = bits / 8;
    for (size_t f = 0; f < frames; f++) {
        double acc = 0;
        for (unsigned ch = 0; ch < channels; ch++) {
            const uint8_t *p = samples + f * align + ch * bps;
            double v;
            if (flt && bits == 32) {
                float x;
                memcpy(&x, p, 4);
                v = x;
            } else if (flt) {
                memcpy(&v, p, 8);
            } else if (bits == 8) v = ((double)p[0] - 128) / 128.0;
            else if (bits == 16) v = (double)(int16_t)le16(p) / 32768.0;
            else if (bits == 24) {
                int32_t x = (int32_t)((uint32_t)p[0] << 8 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 24) >> 8;
                v = (double)x / 8388608.0;
            } else v = (double)(int32_t)le32(p) / 2147483648.0;
            if (!isfinite(v) || fabs(v) > MN_WAV_FLOAT_MAX) {
                free(pcm_out);
                if (!isfinite(v)) hf_fmt(err, cap, "wav: sample %zu of channel %u is not finite", f, ch);
                else
                    hf_fmt(err, cap, "wav: sample %zu of channel %u is %.3g, beyond +-%g (not audio)", f, ch, v,
                           MN_WAV_FLOAT_MAX);
                return MN_E_FORMAT;
            }
            acc += v;
        }
        pcm_out[f] = (float)(acc / channels);
    }
    out->pcm = pcm_out;
    out->samples = (int64_t)frames;
    out->sample_rate = (int)rate;
    return MN_OK;
}

mn_status mn_wav_load(mn_audio *out, const char *path, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!out || !path) {
        hf_fmt(err, cap, "wav_load: %s is NULL", out ? "path" : "out");
        return MN_E_INVALID;
    }
    memset(out, 0, sizeof *out);
    char *buf = NULL, e[512], pb[200];
    size_t n = 0;
    mn_status st = mn_read_file(&buf, &n, path, (size_t)1 << 31, e, sizeof e);
    if (st) {
        hf_fmt(err, cap, "%s", e);
        return st;
    }
    st = mn_wav_decode(out, buf, n, e, sizeof e);
    free(buf);
    if (st) hf_fmt(err, cap, "'%s': %s", mn_escape(pb, sizeof pb, path), e);
    return st;
}

/* Band-limited interpolation: a Hann-windowed sinc of 32 zero crossings each
 * side, cut off at the lower of the two Nyquist frequencies. */
mn_status mn_audio_resample(mn_audio *out, const mn_audio *in, int rate) {
    if (!out || !in || (!in->pcm && in->samples) || in->sample_rate < 1 || rate < 1000 || rate > 768000)
        return MN_E_INVALID;
    memset(out, 0, sizeof *out);
    const double ratio = (double)rate / in->sample_rate, cut = ratio < 1 ? ratio : 1;
    const int64_t n = (int64_t)floor((double)in->samples * ratio);
    if (n > ((int64_t)1 << 31)) return MN_E_INVALID;
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return MN_E_NOMEM;
    const int Z = 32;
    const double half = Z / cut; /* the kernel's half width in input samples */
    for (int64_t i = 0; i < n; i++) {
        const double t = (double)i / ratio;
        int64_t lo = (int64_t)ceil(t - half), hi = (int64_t)floor(t + half);
        if (lo < 0) lo = 0;
        if (hi > in->samples - 1) hi = in->samples - 1;
        double acc = 0;
        for (int64_t j = lo; j <= hi; j++) {
            const double x = (t - (double)j) * cut, w = 0.5 + 0.5 * cos(3.14159265358979323846 * x / Z);
            const double s = x == 0 ? 1 : sin(3.14159265358979323846 * x) / (3.14159265358979323846 * x);
            acc += in->pcm[j] * s * w * cut;
        }
        v[i] = (float)acc;
    }
    out->pcm = v;
    out->samples = n;
    out->sample_rate = rate;
    return MN_OK;
}

/* ---- Whisper's log-mel ------------------------------------------------------------------ */

#define NFFT 400
#define HOP 160
#define NBINS (NFFT / 2 + 1)

static double hz_to_mel(double f) { return f >= 1000 ? 15 + log(f / 1000) * (27 / log(6.4)) : 3 * f / 200; }
static double mel_to_hz(double m) { return m >= 15 ? 1000 * exp(log(6.4) / 27 * (m - 15)) : 200 * m / 3; }

/* numpy.linspace(a, b, n)[i] */
static double linspace(double a, double b, int n, int i) {
    return i == n - 1 ? b : a + (double)i * ((b - a) / (double)(n - 1));
}

mn_status mn_whisper_mel_filters(double *f, int n_mels) {
    if (!f || n_mels < 1 || n_mels > 512) return MN_E_INVALID;
    const double mmin = hz_to_mel(0), mmax = hz_to_mel(8000);
    double *ff = malloc((size_t)(n_mels + 2) * sizeof *ff);
    if (!ff) return MN_E_NOMEM;
    for (int i = 0; i < n_mels + 2; i++) ff[i] = mel_to_hz(linspace(mmin, mmax, n_mels + 2, i));
    for (int k = 0; k < NBINS; k++) {
        const double fk = linspace(0, 8000, NBINS, k);
        for (int m = 0; m < n_mels; m++) {
            const double down = -(ff[m] - fk) / (ff[m + 1] - ff[m]), up = (ff[m + 2] - fk) / (ff[m + 2] - ff[m + 1]);
            const double v = fmax(0.0, fmin(down, up));
            f[k * n_mels + m] = v * (2.0 / (ff[m + 2] - ff[m]));
        }
    }
    free(ff);
    return MN_OK;
}

static pthread_mutex_t plan_lock = PTHREAD_MUTEX_INITIALIZER; /* FFTW's planner is not thread-safe */

mn_status mn_whisper_log_mel(float *out, const float *pcm, int64_t n, int n_mels) {
    if (!out || (!pcm && n) || n < 0 || n_mels < 1 || n_mels > 512) return MN_E_INVALID;
    const int64_t N = MN_WHISPER_SAMPLES, PAD = NFFT / 2, T = MN_WHISPER_FRAMES;
    double *x = calloc((size_t)(N + 2 * PAD), sizeof *x), *filt = malloc((size_t)(NBINS * n_mels) * sizeof *filt);
    double *power = malloc((size_t)(NBINS * (T + 1)) * sizeof *power), *mel = malloc((size_t)(n_mels * T) * sizeof *mel);
    double *buf = fftw_malloc(NFFT * sizeof(double));
    fftw_complex *spec = fftw_malloc(NBINS * sizeof(fftw_complex));
    mn_status st = MN_E_NOMEM;
    fftw_plan plan = NULL;
    if (!x || !filt || !power || !mel || !buf || !spec || mn_whisper_mel_filters(filt, n_mels)) goto done;
    for (int64_t i = 0; i < N && i < n; i++) x[PAD + i] = pcm[i];
    for (int64_t i = 0; i < PAD; i++) { /* reflect padding (numpy's "reflect": the edge sample not repeated) */
        x[PAD - 1 - i] = x[PAD + 1 + i];
        x[PAD + N + i] = x[PAD + N - 2 - i];
    }
    pthread_mutex_lock(&plan_lock);
    plan = fftw_plan_dft_r2c_1d(NFFT, buf, spec, FFTW_ESTIMATE);
    pthread_mutex_unlock(&plan_lock);
    if (!plan) goto done;
    for (int64_t t = 0; t <= T; t++) {
        for (int i = 0; i < NFFT; i++) buf[i] = x[t * HOP + i] * (0.5 - 0.5 * cos(2 * 3.14159265358979323846 * i / NFFT));
        fftw_execute(plan);
        for (int k = 0; k < NBINS; k++) power[t * NBINS + k] = spec[k][0] * spec[k][0] + spec[k][1] * spec[k][1];
    }
    double mx = -INFINITY;
    for (int m = 0; m < n_mels; m++)
        for (int64_t t = 0; t < T; t++) { /* the last frame is dropped */
            double acc = 0;
            for (int k = 0; k < NBINS; k++) acc += filt[k * n_mels + m] * power[t * NBINS + k];
            const double v = log10(fmax(acc, 1e-10));
            mel[m * T + t] = v;
            if (v > mx) mx = v;
        }
    for (int64_t i = 0; i < n_mels * T; i++) out[i] = (float)((fmax(mel[i], mx - 8.0) + 4.0) / 4.0);
    st = MN_OK;
done:
    if (plan) {
        pthread_mutex_lock(&plan_lock);
        fftw_destroy_plan(plan);
        pthread_mutex_unlock(&plan_lock);
    }
    free(x), free(filt), free(power), free(mel);
    fftw_free(buf);
    fftw_free(spec);
    return st;
}
