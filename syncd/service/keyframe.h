/*
 * keyframe.h — the keyframe a checkpoint's deltas are stored against
 * (issue 27, docs/deltas.md "Chains, or deltas against a keyframe"), and
 * the bytes of its chunks, for `ckptsync snapshot`'s XOR writer
 * (service/dwrite.h).
 *
 * Which keyframe: the run's committed snapshots are listed in the regions
 * (service/catalog.h) and their manifests read newest first (ids are
 * time-ordered) among checkpoints of an earlier step; the keyframe is the
 * newest one that names no base outside itself (no `k` line), and the
 * snapshots read before it are its deltas.  None, or keyframe_every - 1
 * deltas already: this snapshot is a keyframe.  At most keyframe_every
 * manifests of earlier steps are read (and as many others skipped).
 *
 *   struct manifest kf;
 *   e = keyframe_find(repo, run, step, every, &kf, &found, &err);
 *   if (found) {
 *       struct kfbase *b;
 *       e = kfbase_open(repo, &kf, local_dir, &b, &err);  // takes kf
 *       f = kfbase_file(b, "model.pt");                  // or -1
 *       fd = kfbase_fd(b, f, &size);                      // its bytes
 *       cuts = kfbase_cuts(b, f, &n);                     // its chunks
 *       e = kfbase_read(b, f, off, len, id, &out, &err);  // any thread
 *       kfbase_free(b);
 *   }
 *
 * Where the bytes come from: the keyframe's file in local_dir (the
 * keyframe's root next to the snapshot's source: dirname(DIR)/<root>),
 * each chunk read there checked against its id; else (no such file, a
 * size other than the keyframe's, a chunk that does not match) from the
 * regions, each chunk fetched and decoded (service/rgchunk.h), checked
 * against its id, the next region asked on failure.  kfbase_fd of a file
 * with no local copy fills an unlinked temporary file (in $TMPDIR) from
 * the regions first, once: the tensor view is read from it.  Nothing
 * read is trusted beyond its id: a view only proposes.
 *
 * Bases: only chunks the keyframe stores plain (kfbase_plain): a delta's
 * recipe is then at depth 1 over the keyframe.
 *
 * Thread-safety: kfbase_read from any thread (the regions are its own
 * handles, under a lock); the rest on one thread.
 */
#ifndef CKS_KEYFRAME_H
#define CKS_KEYFRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/dplan.h"
#include "engine/manifest.h"
#include "service/repo.h"

/* The keyframe of a snapshot of run at step (>= 0) into *ret (parsed;
 * manifest_free it) with *ret_found, or *ret_found false: this snapshot is
 * a keyframe (every 1, step unknown, no earlier checkpoint, or every - 1
 * deltas since the last keyframe).  A manifest that cannot be read is
 * logged and skipped.  0 or -ENOMEM. */
int keyframe_find(struct repo *r, const char *run, int64_t step, unsigned every,
                  struct manifest *ret, bool *ret_found, struct buf *err);

struct kfbase;

/* A base source over keyframe kf (taken: freed with it), its files looked
 * for under local_dir (may be NULL).  0, -ENOMEM or a region's error. */
int kfbase_open(struct repo *r, struct manifest *kf, const char *local_dir, struct kfbase **ret,
                struct buf *err);
void kfbase_free(struct kfbase *b);

const struct manifest *kfbase_manifest(const struct kfbase *b);

/* The keyframe's regular file at path (relative to its root), or -1. */
long kfbase_file(const struct kfbase *b, const char *path);

/* A descriptor of file f's bytes as the keyframe stored them (owned by b:
 * do not close), *ret_size its size; < 0 when they cannot be had. */
int kfbase_fd(struct kfbase *b, size_t f, uint64_t *ret_size);

/* File f's chunks (offsets in the file), *ret_n of them. */
const struct dplan_cut *kfbase_cuts(const struct kfbase *b, size_t f, size_t *ret_n);

/* Whether cut c is one of b's cuts (any file) that the keyframe stores
 * plain: a usable base. */
bool kfbase_plain(const struct kfbase *b, const struct dplan_cut *c);
/* Whether c is one of b's cuts. */
bool kfbase_owns(const struct kfbase *b, const struct dplan_cut *c);

/* Bytes [off, off + len) of file f, which must be chunk id, into out:
 * from the local file, else from the regions.  0, or an error with err
 * (appended) naming the chunk and what failed.  Thread-safe. */
int kfbase_read(struct kfbase *b, size_t f, uint64_t off, uint32_t len, const uint8_t id[HASH_LEN],
                struct buf *out, struct buf *err);

/* Chunk id of the keyframe's files into out, as kfbase_read gives it;
 * -ENOENT when no file of the keyframe holds it. */
int kfbase_get(struct kfbase *b, const uint8_t id[HASH_LEN], struct buf *out, struct buf *err);

/* Chunks kfbase_read took from local files, and from the regions. */
void kfbase_counts(const struct kfbase *b, uint64_t *ret_local, uint64_t *ret_fetched);

#endif
