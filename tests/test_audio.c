/* test_audio.c - WAV reading, resampling and Whisper's log-mel front end
 * (src/models/audio.c) on tests/fixtures/audio (gen_audio.py: espeak-ng
 * speech at 16 kHz, format variants, hostile files, and the log-mel
 * spectrogram of transformers' numpy feature extractor in float64).
 *
 * Checks: speech.wav decodes to int16 / 32768 exactly; the 24-bit, 8-bit,
 * extensible and stereo float variants give the samples their formats
 * promise; the log-mel spectrogram of speech.wav matches the reference
 * (rel L2 <= 1e-6 on the speech frames, every padded frame at the floor);
 * a 1 kHz sine resampled 44.1 kHz -> 16 kHz and 8 kHz -> 16 kHz keeps its
 * shape (error < 1e-3 inside); every hostile file is refused with a message
 * saying why; the fuzz corpus (tests/fuzz/corpus_wav) is replayed.
 */
#include <dirent.h>

#include "llama_util.h"

static char fix[1024];

static bool load(mn_audio *a, const char *name) {
    char path[1200], err[512];
    snprintf(path, sizeof path, "%s/audio/%s", fix, name);
    mn_status st = mn_wav_load(a, path, err, sizeof err);
    CHECK_OK(st, err);
    return st == MN_OK;
}

static void check_hostile(const char *name, const char *words) {
    char path[1200], err[512];
    snprintf(path, sizeof path, "%s/audio/%s", fix, name);
    mn_audio a;
    mn_status st = mn_wav_load(&a, path, err, sizeof err);
    CHECK_MSG(st != MN_OK && a.pcm == NULL, "%s was accepted", name);
    CHECK_MSG(strstr(err, words) && strstr(err, name), "%s: the message '%s' does not say '%s' and the file", name, err,
              words);
    if (!st) mn_audio_free(&a);
}

static void check_sine(int from) {
    mn_audio in = {from, from, malloc((size_t)from * sizeof(float))}, out;
    for (int i = 0; i < from; i++) in.pcm[i] = (float)sin(2 * 3.14159265358979 * 1000.0 * i / from);
    CHECK_OK(mn_audio_resample(&out, &in, 16000), "resample");
    CHECK(out.samples == 16000 && out.sample_rate == 16000);
    double worst = 0;
    for (int64_t i = 800; i < out.samples - 800; i++)
        worst = fmax(worst, fabs(out.pcm[i] - sin(2 * 3.14159265358979 * 1000.0 * (double)i / 16000)));
    printf("1 kHz sine %d Hz -> 16 kHz: largest error %.2e\n", from, worst);
    CHECK_MSG(worst < 1e-3, "resampling %d -> 16000: error %.3g", from, worst);
    mn_audio_free(&in);
    mn_audio_free(&out);
}

int main(void) {
    lu_fixtures(fix, sizeof fix);
    char path[1200], err[512];
    snprintf(path, sizeof path, "%s/audio/reference.safetensors", fix);
    mn_safetensors *ref = NULL;
    CHECK_OK(mn_safetensors_open(&ref, path, err, sizeof err), err);
    mn_audio a, v;
    if (ref && load(&a, "speech.wav")) {
        CHECK(a.sample_rate == 16000 && a.samples == 55015);
        float *want = malloc(8000 * sizeof *want);
        CHECK_OK(mn_safetensors_read_f32(ref, "pcm", want, 8000), mn_safetensors_error(ref));
        CHECK_MSG(!memcmp(want, a.pcm, 8000 * sizeof *want), "speech.wav: samples differ from int16 / 32768");
        free(want);
        /* the format variants */
        if (load(&v, "speech-24.wav")) {
            CHECK_MSG(v.samples == 8000 && !memcmp(v.pcm, a.pcm, 8000 * sizeof(float)), "24-bit differs");
            mn_audio_free(&v);
        }
        if (load(&v, "speech-ext.wav")) {
            CHECK_MSG(v.samples == 8000 && !memcmp(v.pcm, a.pcm, 8000 * sizeof(float)), "extensible differs");
            mn_audio_free(&v);
        }
        if (load(&v, "speech-8.wav")) {
            double worst = 0;
            for (int i = 0; i < 8000; i++) worst = fmax(worst, fabs(v.pcm[i] - a.pcm[i]));
            CHECK_MSG(v.samples == 8000 && worst <= 1.0 / 128, "8-bit: error %g", worst);
            mn_audio_free(&v);
        }
        if (load(&v, "speech-stereo-f32.wav")) {
            double worst = 0;
            for (int i = 0; i < 8000; i++) {
                const int s = (int)lrint(a.pcm[i] * 32768.0);
                const float l = (float)s / 32768.0f, r = (float)(s >= 0 ? s / 2 : -((-s + 1) / 2)) / 32768.0f;
                worst = fmax(worst, fabs(v.pcm[i] - (float)(((double)l + r) / 2)));
            }
            CHECK_MSG(worst == 0, "stereo float: the channels are not averaged (%g)", worst);
            mn_audio_free(&v);
        }
        if (load(&v, "speech-22k.wav")) {
            mn_audio r;
            CHECK(v.sample_rate == 22050);
            CHECK_OK(mn_audio_resample(&r, &v, 16000), "resample");
            CHECK(labs((long)(r.samples - 16000)) <= 1);
            mn_audio_free(&r);
            mn_audio_free(&v);
        }
        /* the log-mel spectrogram */
        float *mel = malloc(80 * 3000 * sizeof *mel), *fw = malloc(80 * 256 * sizeof *fw), floor_v = 0;
        CHECK_OK(mn_whisper_log_mel(mel, a.pcm, a.samples, 80), "log_mel");
        CHECK_OK(mn_safetensors_read_f32(ref, "features", fw, 80 * 256), mn_safetensors_error(ref));
        CHECK_OK(mn_safetensors_read_f32(ref, "floor", &floor_v, 1), mn_safetensors_error(ref));
        float *ours = malloc(80 * 256 * sizeof *ours);
        for (int m = 0; m < 80; m++) memcpy(ours + m * 256, mel + m * 3000, 256 * sizeof *ours);
        const double e = lu_rel_l2(ours, fw, 80 * 256);
        double tail = 0;
        for (int m = 0; m < 80; m++)
            for (int t = 352; t < 3000; t++) tail = fmax(tail, fabs(mel[m * 3000 + t] - floor_v));
        printf("log-mel of speech.wav vs transformers' numpy extractor: rel L2 %.2e; padded frames off the floor by %.2e\n",
               e, tail);
        CHECK_MSG(e <= 1e-6, "log-mel: rel L2 %.3g", e);
        CHECK_MSG(tail <= 1e-6, "log-mel: padded frames differ from the floor by %.3g", tail);
        CHECK(mn_whisper_log_mel(mel, a.pcm, -1, 80) == MN_E_INVALID);
        free(mel), free(fw), free(ours);
        mn_audio_free(&a);
    }
    mn_safetensors_close(ref);
    check_sine(44100);
    check_sine(8000);

    check_hostile("hostile-empty.wav", "not a RIFF/WAVE");
    check_hostile("hostile-text.wav", "not a RIFF/WAVE");
    check_hostile("hostile-truncated.wav", "truncated");
    check_hostile("hostile-no-data.wav", "no data chunk");
    check_hostile("hostile-12bit.wav", "12 bits");
    check_hostile("hostile-zero-channels.wav", "0 channels");
    check_hostile("hostile-nan.wav", "not finite");
    check_hostile("hostile-huge-f64.wav", "beyond");
    check_hostile("hostile-huge-chunk.wav", "past the end");
    check_hostile("hostile-data-first.wav", "before the fmt");

    const char *corpus = getenv("MN_FUZZ_CORPUS");
    char dir[1200];
    snprintf(dir, sizeof dir, "%s_wav", corpus ? corpus : "");
    DIR *d = corpus ? opendir(dir) : NULL;
    CHECK_MSG(d != NULL, "the WAV fuzz corpus %s is missing", dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char p[1500], *buf = NULL;
        size_t len = 0;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (mn_read_file(&buf, &len, p, (size_t)1 << 24, err, sizeof err)) continue;
        mn_audio w;
        if (mn_wav_decode(&w, buf, len, err, sizeof err) == MN_OK) {
            int64_t bad = 0; /* the fuzzer's promise: accepted samples are finite */
            for (int64_t i = 0; i < w.samples; i++) bad += !isfinite(w.pcm[i]);
            CHECK_MSG(bad == 0, "%s: %lld samples are not finite", e->d_name, (long long)bad);
            mn_audio_free(&w);
        } else CHECK_MSG(err[0], "%s: refused without a message", e->d_name);
        free(buf);
        n++;
    }
    if (d) closedir(d);
    printf("WAV corpus: %d files replayed\n", n);
    return th_finish("test_audio");
}
