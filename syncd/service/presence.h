/*
 * presence.h — asking a region which of a set of chunks it really holds.
 *
 * The index's presence bits are a cache: a person, a lifecycle rule or an
 * emptied bucket can remove a chunk behind it.  So before a snapshot is
 * committed in a region, every chunk it names that this snapshot did not
 * itself upload or see there is confirmed with the region
 * (presence_confirm); the missing ones are uploaded again first.
 *
 * Cost is bounded by choosing, per region and per call, the cheaper of
 *   - one HEAD per chunk (up to region_parallelism() in flight), or
 *   - one listing of chunks/ (a request per ~1000 keys on S3),
 * from the number of chunks to confirm and the index's chunk count as an
 * estimate of what the listing would return.
 *
 * Calls the region from the calling thread only (a struct region is used
 * by one thread at a time).
 */
#ifndef CKS_PRESENCE_H
#define CKS_PRESENCE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/hash.h"
#include "engine/manifest.h"
#include "store/index.h"
#include "store/region.h"

/* An object: chunks/<id>, or (recipe) recipes/<id>.<sig> (version 6
 * manifests, docs/deltas.md).  Zero the struct before filling it. */
struct presence_item {
    uint8_t id[HASH_LEN];
    uint32_t size;   /* encoded object size, 0 = unknown (any size) */
    uint8_t missing; /* out: 1 when the region lacks it */
    uint8_t recipe;  /* 1: the recipe object recipes/<id>.<sig> */
    uint8_t sig[MANIFEST_RECIPE_SIG];
};

struct presence_stats {
    uint64_t asked;    /* chunks confirmed */
    uint64_t heads;    /* HEAD requests made */
    uint64_t listed;   /* keys read from listings */
    uint64_t missing;  /* chunks found missing */
    unsigned listings; /* listings of chunks/ made */
};

/* items sorted by id, each once.  estimate: chunks the region may hold
 * (for the HEAD-or-list choice).  0, or the region's error (the region is
 * then to be treated as failed for this snapshot). */
int presence_confirm(struct region *rg, struct presence_item *items, size_t n, uint64_t estimate,
                     struct presence_stats *st);

/* By id, a chunk before a recipe of that id, then by sig (the order of
 * engine/gcrec.h's items). */
int presence_item_cmp(const void *a, const void *b);

/* The distinct plain chunk objects of m (chunks/ keys: its file chunks not
 * stored as recipes and its k lines, manifest_each_object), sorted by id
 * (as presence_confirm wants them),
 * each with its encoded size from the index; *ret_estimate: how many chunks
 * the index knows (presence_confirm's estimate).  *ret is malloc'ed. */
int presence_items(struct index *ix, const struct manifest *m, struct presence_item **ret,
                   size_t *ret_n, uint64_t *ret_estimate);
/* As presence_items, but every object m needs (manifest_each_object): its
 * plain file chunks and k lines as chunks/ items, its recipes as recipe
 * items; sorted by presence_item_cmp, each once.  The writer's check
 * against prune's marks (service/gc.h W1) takes these. */
int presence_objects(struct index *ix, const struct manifest *m, struct presence_item **ret,
                     size_t *ret_n, uint64_t *ret_estimate);

#endif
