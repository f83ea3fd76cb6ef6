/*
 * kfxor.h — the writers' step between dwrite_match and the read that
 * proposes deltas against the run's keyframe (issue 27, docs/deltas.md
 * "Deltas against the keyframe"): `ckptsync snapshot` (service/snapshot.c)
 * and ckptsyncd's ingest (daemon/ingest.c) call it alike.
 *
 *   struct kfbase *kb = NULL;
 *   e = kfxor_prepass(r, run, step, &w, derive, open, ud, sizes, unchanged, &d, &kb, &err);
 *       // dwrite_new, dwrite_match (derived bf16), kfxor_propose
 *   ... the read, phase B (dwrite_finish reads the bases through kb) ...
 *   kfxor_report(kb, dwrite_stats(d), unit);
 *   dwrite_free(d);
 *   kfbase_free(kb);                                 // after d
 *
 * Only when some file to read has a tensor view (kfxor_any_view: a file's
 * first bytes, and its torch zip or safetensors metadata when they say it
 * is one) is the keyframe looked up at all: a unit of logs or configs
 * lists no snapshot.  No keyframe found is logged ("no keyframe for step
 * S of run R ...: this one is a keyframe").
 *
 * Which keyframe: keyframe_find with [compress] keyframe_every, through
 * r's own region handles (the calling thread must own them: the daemon's
 * ingest thread passes a repo_dup of its own).  Its bytes: kfbase_open
 * with the local directory w->base (the parent of the source, where a
 * trainer leaves the keyframe's directory beside this one), else the
 * regions.  Each file k with sizes[k] > 0 is proposed against the
 * keyframe's file of the same path under the keyframe's root
 * (dwrite_xor).
 */
#ifndef CKS_KFXOR_H
#define CKS_KFXOR_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "service/dwrite.h"
#include "service/keyframe.h"
#include "service/repo.h"
#include "service/walk.h"

/* Whether some file k < n with sizes[k] >= 8, not unchanged[k] (may be
 * NULL), opened with open(ud, k), has a tensor view with a tensor
 * (scan_view; a file that is no such format costs one 8-byte read). */
bool kfxor_any_view(size_t n, dwrite_open_fn open, void *ud, const uint64_t *sizes,
                    const bool *unchanged);

/* *ret_kb stays NULL when there is no keyframe (this snapshot is one) or
 * it has no root; else it is the keyframe's base source, which must
 * outlive d.  0, -ENOMEM or a region's error (err). */
int kfxor_propose(struct repo *r, const char *run, int64_t step, const struct walk *w,
                  struct dwrite *d, dwrite_open_fn open, void *ud, const uint64_t *sizes,
                  const bool *unchanged, struct kfbase **ret_kb, struct buf *err);

/* The whole pre-pass as both writers run it: dwrite_new over w's files,
 * dwrite_match when derive (derived bf16), kfxor_propose when r is not
 * NULL (deltas; r as above).  *ret_dw is NULL when nothing was proposed
 * or on error; *ret_kb as kfxor_propose leaves it (free it after *ret_dw).
 * 0, -ENOMEM or a region's error (err). */
int kfxor_prepass(struct repo *r, const char *run, int64_t step, const struct walk *w, bool derive,
                  dwrite_open_fn open, void *ud, const uint64_t *sizes, const bool *unchanged,
                  struct dwrite **ret_dw, struct kfbase **ret_kb, struct buf *err);

/* Logs phase B's use of the keyframe kb (NULL: nothing) with st's counts,
 * "keyframe ID: T tensor(s) stored against it; ...", after "\"unit\": "
 * when unit is not NULL. */
void kfxor_report(struct kfbase *kb, const struct dwrite_stats *st, const char *unit);

#endif
