/*
 * multinode.h — a job on several nodes: each node's files of a step are a
 * write-once *part*, and the step is one snapshot only once every node's
 * part is in (include/ckptsync/format.h section 9; README "Multi-node
 * jobs").  No lock server and no coordinator: whichever node sees the
 * last part in a region merges the parts there, and the merged snapshot
 * is a function of the parts alone, so two nodes that merge at once write
 * the same bytes under the same key.
 *
 * A daemon's region worker, where it would publish a snapshot:
 *
 *   if (multinode_wanted(conf, &man))
 *       e = multinode_publish(rg, conf, &man, bytes, len);   part, then maybe the step
 *   else
 *       e = catalog_publish(rg, &man, bytes, len);
 *
 * Readers (ls --remote, status):
 *
 *   struct multinode_steps s = {0};
 *   e = multinode_incomplete(repo, run, now, conf->part_timeout, &s);
 *   ... s.v[0 .. s.n) ...
 *   multinode_steps_free(&s);
 *
 * Pure over its arguments; not thread-safe per region or repo (their
 * owner's thread calls).
 */
#ifndef CKS_MULTINODE_H
#define CKS_MULTINODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/config.h"
#include "engine/manifest.h"
#include "service/repo.h"
#include "store/region.h"

#define MULTINODE_PART_MAGIC "ckptsync-part"
#define MULTINODE_PART_VERSION 1

/* Whether m is published as a part: the job has more than one node and m
 * is a checkpoint (a step).  Other files (logs, configs) stay one
 * snapshot per node, as on one node. */
bool multinode_wanted(const struct config *c, const struct manifest *m);

/* Writes node c->node_rank's part of m's step in rg (man: m's encoding),
 * then lists the step's parts there: when every rank's part is in, merges
 * them and, when the merged tree holds every file its layout names
 * (service/layoutcov.h; else logged, and left uncommitted), publishes the
 * step's snapshot and its commit record in rg.
 * 0 whether or not the step committed (a step that cannot merge, two
 * parts naming one path with different bytes, is logged as an error
 * naming the path and both nodes, and left uncommitted: nothing to
 * retry); a negative code when a region request failed (retry later: the
 * part's put is idempotent). */
int multinode_publish(struct region *rg, const struct config *c, const struct manifest *m,
                      const uint8_t *man, size_t len);

/* Merges parts[0 .. n) (node 0 .. n-1's manifests of one step, in rank
 * order) into ret (initialized by the call): 0, or CKS_E_MISMATCH with
 * err naming what disagrees (a path two nodes hold with different bytes,
 * a root, step or chunker that differs).  ids[k] is part k's id.
 * ret is a version 4 manifest: ret->nodes = n, and each entry's node is
 * the rank whose part held it, or MANIFEST_NODE_SEVERAL where several
 * parts held that path (restore --node reads them: service/noderestore.h). */
int multinode_merge(const struct manifest *parts, size_t n, struct manifest *ret, struct buf *err);

/* The part object's body: the header lines and the manifest verbatim. */
int multinode_encode(unsigned rank, unsigned nodes, const uint8_t *man, size_t len,
                     struct buf *out);
/* Parses a part's body into its manifest (initialized by the call), and
 * checks it against the key's rank, node count, run, step and id:
 * 0, CKS_E_FORMAT or CKS_E_MISMATCH (err says what), or the manifest
 * parser's codes. */
int multinode_decode(const char *key, const uint8_t *data, size_t len, struct manifest *ret,
                     struct buf *err);

/* A node's own part, by the id its index knows (fsck of a node's state:
 * its parts are the snapshots it took): the manifest into ret
 * (initialized by the call).  -ENOENT when no healthy region lists it. */
int multinode_find(struct repo *r, const char *run, int64_t step, const char *id,
                   struct manifest *ret, struct buf *err);

/* A step of a run that has parts but no commit (in any healthy region). */
struct multinode_step {
    int64_t step;
    unsigned nodes;       /* the node count its parts name */
    unsigned have;        /* how many ranks' parts are in */
    int64_t first;        /* unix seconds: its oldest part's time (from the id) */
    bool timed_out;       /* first + part_timeout <= now */
    uint8_t missing[512]; /* bit k: rank k has no part (ranks < 4096) */
};

struct multinode_steps {
    struct multinode_step *v; /* malloc'ed; multinode_steps_free() */
    size_t n, cap;
};

/* The run's steps whose parts are not all in (or in, but not committed:
 * have == nodes), from every healthy region's listing, sorted by step.
 * 0, or the listing's error. */
int multinode_incomplete(struct repo *r, const char *run, int64_t now, uint64_t part_timeout,
                         struct multinode_steps *ret);
void multinode_steps_free(struct multinode_steps *s);
/* Whether rank k is missing from s. */
bool multinode_step_missing(const struct multinode_step *s, unsigned k);

/* Prune's roots (service/gc.c): the parts of every step no region has
 * committed (or forgotten) are references, as manifests are.  Commit
 * records are listed first, then prune lists manifests, then parts:
 * a step whose commit record the first listing sees has its merged
 * manifest in the manifest listing, and a step committed later still
 * has its parts counted.
 *
 *   struct multinode_roots pr = {0};
 *   e = multinode_roots_begin(repo, &pr);          commit and forget records
 *   ... list and read the manifests ...
 *   e = multinode_roots_read(repo, &pr, cb, ud, err);   cb(ud, part's manifest)
 *   multinode_roots_free(&pr);
 *
 * Every healthy region's parts are read (a part in one region only still
 * names chunks of that region), except those [daemon] part_expire old
 * (by the stamp in their id; service/partgc.h then deletes them).  A part that cannot be read stops
 * it (err says which), as an unreadable manifest stops prune. */
struct multinode_committed;
struct multinode_roots {
    struct multinode_committed *committed;
};
int multinode_roots_begin(struct repo *r, struct multinode_roots *ret);
int multinode_roots_read(struct repo *r, struct multinode_roots *pr,
                         int (*cb)(void *ud, const struct manifest *m), void *ud, struct buf *err);
void multinode_roots_free(struct multinode_roots *pr);

#endif
