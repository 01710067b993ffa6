/* hf_checkpoint.h - internal parts of the Hugging Face checkpoint reader
 * shared with its fuzz target and tests: the sharded index parser.
 *
 * Does not: open files (hf_checkpoint.c does, through mn_read_file and
 * mn_safetensors_open).
 */
#ifndef MN_MODELS_HF_CHECKPOINT_H
#define MN_MODELS_HF_CHECKPOINT_H

#include "meganeura_models.h"

/* Most entries an index may list. */
#define HF_INDEX_MAX_ENTRIES 1000000

/* model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor
 * name: shard file name}}. Entries sorted by name; names and files owned. */
typedef struct hf_index {
    int n;
    char **names;
    char **files;
} hf_index;

/* Refuses: invalid JSON, a duplicated key anywhere, a missing or non-object
 * weight_map, a value that is not a string, more than HF_INDEX_MAX_ENTRIES
 * entries, and shard names that are not plain file names ending in
 * ".safetensors" (empty, ".", "..", containing '/' or '\\' or a NUL byte).
 * err names the key. */
mn_status hf_index_parse(hf_index *out, const char *json, size_t len, char *err, size_t cap);
void hf_index_free(hf_index *x); /* accepts a zeroed or freed index */

#endif
