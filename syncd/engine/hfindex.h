/*
 * hfindex.h — the shards a Hugging Face sharded-weights index names.
 *
 * transformers' save_pretrained (and safetensors / huggingface_hub) write
 * big weights as shards plus an index, "<weights>.index.json"
 * (model.safetensors.index.json, pytorch_model.bin.index.json):
 *
 *   {"metadata": {"total_size": 123}, "weight_map": {"tensor": "shard file", ...}}
 *
 * Every value of weight_map is a shard file beside the index.
 *
 *   struct layout_needs n = LAYOUT_NEEDS_INIT;
 *   e = hfindex_parse(text, len, &n, &err);    n: the shards (size 0: must exist)
 *   layout_needs_free(&n);
 *
 * Pure; not thread-safe per result.
 */
#ifndef CKS_HFINDEX_H
#define CKS_HFINDEX_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "engine/layoutneed.h"

#define HFINDEX_SUFFIX ".index.json"

/* Whether a file name (one component) is an index's. */
bool hfindex_name(const char *name);
/* Parses an index into ret (emptied first; sorted, one per shard).  0, or
 * with err saying what: CKS_E_FORMAT / CKS_E_LIMIT (not JSON, no
 * weight_map object, a value not a string), CKS_E_UNSAFE_PATH (a shard
 * name leaving the directory), -ENOMEM. */
int hfindex_parse(const char *text, size_t len, struct layout_needs *ret, struct buf *err);

#endif
