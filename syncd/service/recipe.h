/*
 * recipe.h — reading the recipes of a version 6 snapshot (issue 27,
 * docs/deltas.md): a chunk stored as recipes/<id>.<sig> is rebuilt from
 * its bases' plaintext (engine/tdelta.h), the bases found through the
 * manifest's extras (a base is a file chunk, a k line's plain chunk, or
 * itself a recipe, resolved first).
 *
 *   struct recipe_src *src;
 *   recipe_src_open(repo, &manifest, cache_bytes, &src);
 *   recipe_get(src, id, len, &plain, &err);     // verified against id
 *   recipe_src_close(src);
 *
 * Restore rebuilds many recipes at once with service/recipar.h, which
 * uses this source's cache (recipe_src_take/keep) and checks.
 *
 * Every object is read from the healthy regions in order, the next one
 * asked when a region lacks it or holds it damaged (undecodable, a recipe
 * that names other bases than the manifest says, a result whose id is
 * not the chunk's); a base no region holds intact fails the call, and err
 * names the base ("base <64 hex>: intact in no region (region 'a':
 * missing; ...)"); the caller adds the snapshot and the file.
 *
 * Memory: each decoded object is kept in an LRU cache of at most
 * cache_bytes (bases shared by several recipes are fetched once); a
 * recipe being decoded holds its bases' plaintext, down its chain (depth
 * at most MANIFEST_MAX_DEPTH).  recipe_get on one thread, the repo's own
 * region handles (the caller's thread owns them), serial fetches (verify);
 * the cache calls (seed, take, keep, cached) from any thread.
 */
#ifndef CKS_RECIPE_H
#define CKS_RECIPE_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/manifest.h"
#include "service/fetch.h"
#include "service/repo.h"

struct recipe_src;

/* m must outlive the source.  0 or -ENOMEM (*ret then untouched). */
int recipe_src_open(struct repo *r, const struct manifest *m, size_t cache_bytes,
                    struct recipe_src **ret);
void recipe_src_close(struct recipe_src *s);

/* The plaintext of chunk id (len bytes: a recipe of the manifest, or any
 * plain chunk) into out (reset first), checked against its id.  0, or
 * -ENOENT (missing everywhere), CKS_E_DIGEST (damaged or missing in every
 * region), CKS_E_LIMIT, -ENOMEM, with err (appended) naming the object. */
int recipe_get(struct recipe_src *s, const uint8_t id[HASH_LEN], uint32_t len, struct buf *out,
               struct buf *err);

/* Offers a plain chunk's verified plaintext (a fetch's on_chunk): kept in
 * the cache when some recipe names it as a base.  Thread-safe. */
void recipe_src_seed(struct recipe_src *s, const uint8_t id[HASH_LEN], const uint8_t *data,
                     size_t len);
/* Moves chunk id's plaintext out of the cache into out (its old contents
 * freed): true, or false when not cached. */
bool recipe_src_take(struct recipe_src *s, const uint8_t id[HASH_LEN], struct buf *out);
/* Moves data (chunk id's verified plaintext) into the cache, evicting the
 * least recently used; data is left empty (freed when not kept). */
void recipe_src_keep(struct recipe_src *s, const uint8_t id[HASH_LEN], struct buf *data);
/* Whether chunk id is in the cache now. */
bool recipe_src_cached(struct recipe_src *s, const uint8_t id[HASH_LEN]);
/* A base's plaintext length: its extra's, else its file chunk's; 0 when
 * the manifest does not know it. */
uint32_t recipe_base_len(const struct recipe_src *s, const uint8_t id[HASH_LEN]);
/* 0 when the recipe object obj[0..len) names exactly x's bases (ids), else
 * CKS_E_FORMAT (or tdelta_refs's code). */
int recipe_refs_match(const struct manifest *m, const struct mextra *x, const uint8_t *obj,
                      size_t len);
/* What recipe_src_open was given: the repo, the manifest, cache_bytes. */
struct repo *recipe_src_repo(const struct recipe_src *s);
const struct manifest *recipe_src_manifest(const struct recipe_src *s);
uint64_t recipe_src_budget(const struct recipe_src *s);
/* Object bytes the source downloaded so far. */
uint64_t recipe_src_fetched(const struct recipe_src *s);

/* A local source of chunks' plaintext (restore's seed, docs/deltas.md
 * "hot resume"): fn puts chunk id's len bytes into out (reset first),
 * checked against id, and returns RECIPE_LOCAL_CHECKED; or unchecked, read
 * from a file whose identity the local index vouches for, and returns
 * RECIPE_LOCAL_TRUSTED (recipar checks such a base only when a recipe
 * built on it fails its id, and then fetches it from the regions if it is
 * wrong: recipe_src_refetched counts those); 0 when it has no intact copy
 * (the regions are asked); a negative code stops the caller.  Called by
 * recipar_run before it fetches a batch's bases, from several threads at
 * once (fn locks what it shares; each call has its own out). */
enum { RECIPE_LOCAL_CHECKED = 1, RECIPE_LOCAL_TRUSTED = 2 };
typedef int (*recipe_local_fn)(void *ud, const uint8_t id[HASH_LEN], uint32_t len, struct buf *out);
void recipe_src_set_local(struct recipe_src *s, recipe_local_fn fn, void *ud);
/* Whether a local source was set; fn's answer for chunk id (0 when none
 * was set). */
bool recipe_src_has_local(const struct recipe_src *s);
int recipe_src_local(struct recipe_src *s, const uint8_t id[HASH_LEN], uint32_t len,
                     struct buf *out);
/* Trusted local bases that proved wrong and were fetched instead (recipar
 * adds them; several threads may read the count while it runs). */
void recipe_src_add_refetched(struct recipe_src *s, uint64_t n);
uint64_t recipe_src_refetched(const struct recipe_src *s);

/* The recipe object of extra x in region i, checked: read, names the bases
 * the manifest gives x, and (unless quick: then only read) decodes with
 * them to x's id.  0 intact, -ENOENT missing, CKS_E_DIGEST/CKS_E_FORMAT
 * damaged; 1 when a base could not be had anywhere (err says which). */
int recipe_check_in(struct recipe_src *s, size_t i, const struct mextra *x, bool quick,
                    struct buf *err);

#endif
