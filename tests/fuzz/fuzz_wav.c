/* fuzz_wav.c - libFuzzer target for the WAV reader of src/models/audio.c
 * and the resampler `transcribe` runs after it.
 *
 * Does: decodes every input; an accepted file must give finite samples
 * (integer formats land in [-1, 1) by construction; float files may exceed
 * 1, which is legal) and a sample rate in range, and a short one is resampled to 16 kHz (finite
 * results). A refusal must come with a message. A broken
 * promise aborts, which libFuzzer reports as a crash.
 *
 * Does not: touch the file system, compute the log-mel spectrogram (30 s of
 * frames per call would make the fuzzer too slow; test_audio covers it).
 * Run: build/fuzz/tests/fuzz_wav -max_total_time=60 <copy of tests/fuzz/corpus_wav>
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "meganeura_models.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    mn_audio a;
    if (mn_wav_decode(&a, data, size, err, sizeof err) != MN_OK) {
        MN_ASSERT(err[0] != 0 && a.pcm == NULL);
        return 0;
    }
    MN_ASSERT(a.samples >= 0 && a.sample_rate >= 1000 && a.sample_rate <= 768000);
    for (int64_t i = 0; i < a.samples; i++) MN_ASSERT(isfinite(a.pcm[i]));
    if (a.samples <= 4096 && (double)a.samples * 16000.0 / a.sample_rate <= 8192) {
        mn_audio r;
        MN_ASSERT(mn_audio_resample(&r, &a, 16000) == MN_OK);
        for (int64_t i = 0; i < r.samples; i++) MN_ASSERT(isfinite(r.pcm[i]));
        mn_audio_free(&r);
    }
    mn_audio_free(&a);
    return 0;
}
