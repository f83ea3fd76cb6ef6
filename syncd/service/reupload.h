/*
 * reupload.h — a plain chunk a region turned out to lack at a writer's
 * pre-publish confirmation, put there again (docs/deltas.md, "A `k` chunk
 * a region lacks"): its plaintext from a source the writer names (the
 * snapshot's file read again, the keyframe's local copy, another region),
 * which checks it against its id; encoded with the repository's chunk
 * options and put as chunks/<id>.  `ckptsync snapshot` (snap_reupload)
 * and the daemon's region workers (rw_upload_base) both call this.
 *
 *   enum reupload_step step;
 *   e = reupload_chunk(rg, z, &opts, id, get, ud, &obj, &step);
 *   // e < 0: step says which of get, encode, put failed
 *
 *   // a get that asks the other healthy regions (rgchunk_get, through
 *   // clones of their handles, so any thread may call it)
 *   e = reupload_from_regions(r, skip, z, m, id, len, &data, &why);
 *
 * Logs nothing: the callers name the chunk, the region and the snapshot
 * in their own lines.  z and obj belong to the calling thread.
 */
#ifndef CKS_REUPLOAD_H
#define CKS_REUPLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/chunkobj.h"
#include "engine/manifest.h"
#include "service/repo.h"
#include "store/region.h"

enum reupload_step { REUPLOAD_GET, REUPLOAD_ENCODE, REUPLOAD_PUT };

/* The plaintext of chunk id into out (reset first), checked against the
 * id; 0 or an error (returned by reupload_chunk as it is). */
typedef int (*reupload_get_fn)(void *ud, const uint8_t id[HASH_LEN], struct buf *out);

/* Chunk id from get, encoded with o (z) into obj and put into rg under
 * its chunks/ key.  0 (obj holds the object put: obj->len bytes sent),
 * or the failing step's error with *ret_step that step. */
int reupload_chunk(struct region *rg, struct chunkobj_ctx *z, const struct chunkobj_opts *o,
                   const uint8_t id[HASH_LEN], reupload_get_fn get, void *ud, struct buf *obj,
                   enum reupload_step *ret_step);

/* Chunk id of m (plaintext len bytes) into out from the first healthy
 * region of r other than skip that gives it intact (rgchunk_get, a plain
 * chunk or a recipe, checked against its id).  0, -ENOENT when no other
 * region is healthy, else the last region's error, each failure appended
 * to why. */
int reupload_from_regions(struct repo *r, size_t skip, struct chunkobj_ctx *z,
                          const struct manifest *m, const uint8_t id[HASH_LEN], uint32_t len,
                          struct buf *out, struct buf *why);

#endif
