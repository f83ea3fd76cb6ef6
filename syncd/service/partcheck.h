/*
 * partcheck.h — the checks a multi-node step's parts pass before they are
 * merged (README "Multi-node jobs", docs/multinode.md "Bad input"): bad
 * input is refused with an error naming the node and the step, and the
 * step is not committed.
 *
 * A merging node (service/multinode.c), once every rank's part is listed
 * in region rg:
 *
 *   struct buf err = BUF_INIT;
 *   e = partcheck_step(rg, conf, self, gen, multinode_decode, &err);
 *
 * self: the merging node's own part (run, step, rank, node count); gen:
 * its generation.  A step may also hold parts of an abandoned generation
 * (a job that migrated, docs/multinode.md): those are not bad input.
 *   if (e == CKS_E_MISMATCH) ... refused: err says why, naming the nodes
 *
 * Refused (CKS_E_MISMATCH):
 *   - a part whose key claims a rank not below its node count;
 *   - a part of the step, of this node's generation, that names another
 *     node count than this node's (a part of another generation that does
 *     is logged and left alone);
 *   - two parts of one rank and one generation from different hosts (two
 *     nodes claiming the same rank); the same node's part taken again is
 *     fine (a retake: the newest is merged);
 *   - a part that cannot be decoded, where one of those checks reads it;
 *   - a part with no time stamp in its id, or one stamped more than
 *     [prune] clock_skew ahead of the region's
 *     clock (that node's clock is wrong), or, the newest of its rank,
 *     older than [daemon] part_expire less clock_skew (prune may already
 *     have taken it for expired: its chunks are not protected any more).
 * Warned (logged, merged): the step's node count differs from that of
 * the run's previous step whose parts the region still lists (a job
 * restarted on another node count).
 * decode parses a part's body (multinode_decode; passed in, so that this
 * module and the multinode one do not include each other).
 * Other errors: the region's (retry later).  Not thread-safe per region.
 */
#ifndef CKS_PARTCHECK_H
#define CKS_PARTCHECK_H

#include <stdint.h>

#include "base/buf.h"
#include "base/config.h"
#include "engine/manifest.h"
#include "store/layout.h"
#include "store/region.h"

typedef int (*partcheck_decode_fn)(const char *key, const uint8_t *data, size_t len,
                                   struct manifest *ret, struct buf *err);

int partcheck_step(struct region *rg, const struct config *c, const struct layout_part *self,
                   int64_t gen, partcheck_decode_fn decode, struct buf *err);

#endif
