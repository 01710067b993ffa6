/* hf_util.h - helpers shared by the Hugging Face readers of src/models:
 * strict JSON field access (cJSON) and a growing string for messages.
 *
 * JSON from config.json and model.safetensors.index.json is hostile: a
 * duplicated key (Python's json keeps the last one, cJSON finds the first)
 * is refused, integers must be integral and in range, and every value is
 * type-checked, with the key named in the message.
 *
 * Does not: read files (mn_read_file does), or include anything below the
 * public API (this stage is written against meganeura.h like a user program).
 */
#ifndef MN_MODELS_HF_UTIL_H
#define MN_MODELS_HF_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "meganeura_models.h"

#if defined(__GNUC__)
#define HF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define HF_PRINTF(a, b)
/* Sets m's error message (mn_llama_error), for files other than llama.c. */
void hf_llama_set_error(mn_llama *m, const char *msg);

#endif

/* snprintf into err (cap bytes; nothing if err is NULL or cap is 0). */
void hf_fmt(char *err, size_t cap, const char *fmt, ...) HF_PRINTF(3, 4);

/* A growing NUL-terminated string; after an allocation failure it keeps what
 * it had and sets oom. */
typedef struct hf_str {
    char *p;
    size_t n, cap;
    bool oom;
} hf_str;
void hf_str_add(hf_str *s, const char *fmt, ...) HF_PRINTF(2, 3);
/* An untrusted string, escaped (mn_escape), quoted with ''. */
void hf_str_add_name(hf_str *s, const char *name);
void hf_str_free(hf_str *s);

/* The first key of object o (and of no nested object) that occurs twice, or
 * NULL. */
const char *hf_json_duplicate_key(const cJSON *o);
/* Whether JSON text holds, inside a string, the escape \u0000 (cJSON would
 * cut the string there while Python keeps the rest) or a raw control byte
 * (Python's json refuses it; cJSON does not): readers refuse both. */
bool hf_json_bad_string(const char *text, size_t len);
/* What a JSON value is, for messages: "a string", "a number", "null", ... */
const char *hf_json_kind(const cJSON *v);

/* Sets m's error message (mn_llama_error), for files other than llama.c. */
void hf_llama_set_error(mn_llama *m, const char *msg);

#endif
