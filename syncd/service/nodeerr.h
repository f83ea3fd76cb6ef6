/*
 * nodeerr.h — a node's last error on a step of a multi-node job, written
 * into the regions (format.h section 9: nodeerr/) so that every instance
 * can say why a step is incomplete, not only the node's own log.
 *
 * Writing (a node that cannot finish its part: a merge refused, parts
 * that are bad input), in the region it works on:
 *
 *   nodeerr_put(rg, run, step, rank, nodes, "what went wrong");
 *
 * Reading (ls --remote, status):
 *
 *   struct nodeerrs s = {0};
 *   e = nodeerr_collect(repo, run, &s);       newest record per (step, node)
 *   const struct nodeerr *x = nodeerr_find(&s, step, rank);
 *   nodeerrs_free(&s);
 *
 * Records are write-once and small; a reader keeps the newest per step
 * and node (by the time in the key, then the tag).  Not thread-safe per
 * region or repo (their owner's thread calls).
 */
#ifndef CKS_NODEERR_H
#define CKS_NODEERR_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "service/repo.h"
#include "store/layout.h"
#include "store/region.h"

#define NODEERR_MAGIC "ckptsync-nodeerr"
#define NODEERR_MSG_MAX 1024u
#define NODEERR_HOST_MAX 128u
#define NODEERR_MAX_BYTES 2048u

struct nodeerr {
    struct layout_nodeerr k; /* run, step, rank, nodes, time, tag */
    char host[NODEERR_HOST_MAX + 1];
    char msg[NODEERR_MSG_MAX + 1];
};

/* The record's body (format.h section 9); msg is cut to one line of at
 * most NODEERR_MSG_MAX bytes (control characters become spaces). */
int nodeerr_encode(const struct nodeerr *n, struct buf *out);
/* Parses a body read from key and checks it against the key: 0, or
 * CKS_E_FORMAT (not a record) / CKS_E_MISMATCH (body and key disagree). */
int nodeerr_decode(const char *key, const uint8_t *data, size_t len, struct nodeerr *ret);

/* Writes node rank of nodes's error on (run, step) in rg, stamped now,
 * with this host's name: 0 or the region's error (logged by the caller;
 * a node that cannot write it still has its log line). */
int nodeerr_put(struct region *rg, const char *run, int64_t step, unsigned rank, unsigned nodes,
                const char *msg);

struct nodeerrs {
    struct nodeerr *v; /* malloc'ed */
    size_t n, cap;
};
/* The newest record of each (step, node) of run in any healthy region.
 * 0, or a listing's error (a region that cannot list is left out, as
 * multinode_incomplete does). */
int nodeerr_collect(struct repo *r, const char *run, struct nodeerrs *ret);
/* The record of (step, rank) in s, or NULL. */
const struct nodeerr *nodeerr_find(const struct nodeerrs *s, int64_t step, unsigned rank);
void nodeerrs_free(struct nodeerrs *s);

#endif
