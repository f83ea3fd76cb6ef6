/*
 * partcheck.c — bad input among a step's parts, refused before a merge
 * (see partcheck.h).
 *
 * Design notes.
 * - The checks read only what the region lists and the parts' own
 *   bodies, so every node that would merge a step refuses it for the same
 *   reason, and the step stays uncommitted whoever looks.
 * - The clock checks use the region's clock (region_clock, as prune's
 *   clock check does), not this node's: the parts' stamps come from other
 *   nodes, and the store is the one clock every node shares.
 */
#include "service/partcheck.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/gcrec.h"
#include "engine/hash.h"
#include "store/layout.h"

#define PC_PART_MAX (MANIFEST_MAX_BYTES + 64u)

struct pc_list {
    const char *run;
    int64_t gen; /* the merging node's generation: parts of another are an abandoned job's */
    partcheck_decode_fn decode;
    struct layout_part *v;
    size_t n, cap;
};

static int pc_list_cb(void *ud, const char *key, uint64_t size)
{
    struct pc_list *l = ud;
    struct layout_part p;
    (void)size;
    if (layout_part_parse_any(key, &p) < 0 || strcmp(p.run, l->run) != 0)
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        struct layout_part *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = p;
    return 0;
}

/* Reads part p from rg into ret. */
static int pc_read(struct region *rg, const struct pc_list *l, const struct layout_part *p,
                   struct manifest *ret, struct buf *err)
{
    char key[LAYOUT_KEY_MAX];
    struct buf body = BUF_INIT;
    int e = layout_part(p, key);
    if (e == 0 && (e = region_get(rg, key, PC_PART_MAX, &body)) < 0)
        buf_printf(err, "part \"%s\": %s", key, region_last_error(rg));
    if (e == 0)
        e = l->decode(key, body.data, body.len, ret, err);
    buf_free(&body);
    return e;
}

/* Whether e says a part itself is bad (not one a node wrote). */
static bool pc_bad(int e)
{
    return e == CKS_E_FORMAT || e == CKS_E_VERSION || e == CKS_E_DIGEST || e == CKS_E_LIMIT ||
           e == CKS_E_UNSAFE_PATH || e == CKS_E_MISMATCH;
}

/* A part of another node count than self's: refused when it is of the
 * merging node's generation, else (an abandoned job's) a warning. */
static int pc_other_count(struct region *rg, const struct pc_list *l,
                          const struct layout_part *self, const struct layout_part *p,
                          struct buf *err)
{
    struct manifest m;
    int e = pc_read(rg, l, p, &m, err);
    if (e < 0)
        return pc_bad(e) ? CKS_E_MISMATCH : e;
    bool same = m.gen == l->gen;
    manifest_free(&m);
    if (!same) {
        log_warn("run '%s' step %lld: node %u's part (snapshot %s) says the job has %u nodes, "
                 "this node %u: it is of generation other than %lld (an abandoned job's), so "
                 "not merged",
                 self->run, (long long)self->step, p->rank, p->id, p->nodes, self->nodes,
                 (long long)l->gen);
        return 0;
    }
    buf_printf(err,
               "node %u's part of step %lld (snapshot %s) says the job has %u nodes, node %u "
               "says %u: the node count changed mid-step",
               p->rank, (long long)self->step, p->id, p->nodes, self->rank, self->nodes);
    return CKS_E_MISMATCH;
}

/* Ranks and node counts: every part of the step is node K < N, of this
 * node's N (or of another generation). */
static int pc_ranks(struct region *rg, const struct pc_list *l, const struct layout_part *self,
                    struct buf *err)
{
    int e = 0;
    for (size_t i = 0; e == 0 && i < l->n; i++) {
        const struct layout_part *p = &l->v[i];
        if (p->step != self->step)
            continue;
        if (p->rank >= p->nodes) {
            buf_printf(err,
                       "the part of node %u of step %lld (snapshot %s) claims node %u of %u: "
                       "there is no such node",
                       p->rank, (long long)self->step, p->id, p->rank, p->nodes);
            return CKS_E_MISMATCH;
        }
        if (p->nodes != self->nodes)
            e = pc_other_count(rg, l, self, p, err);
    }
    return e;
}

/* Two parts of one rank of the step, x and y: one node's part taken again
 * (the same host: the newest is merged), one of an abandoned generation,
 * or two nodes (two hosts) claiming that rank. */
static int pc_dup_pair(struct region *rg, const struct pc_list *l, const struct layout_part *x,
                       const struct layout_part *y, struct buf *err)
{
    struct manifest a, b;
    int e = pc_read(rg, l, x, &a, err);
    if (e < 0)
        return pc_bad(e) ? CKS_E_MISMATCH : e;
    if ((e = pc_read(rg, l, y, &b, err)) < 0) {
        manifest_free(&a);
        return pc_bad(e) ? CKS_E_MISMATCH : e;
    }
    if (a.gen == b.gen && strcmp(a.host ? a.host : "", b.host ? b.host : "") != 0) {
        buf_printf(err,
                   "two nodes claim node %u of step %lld: snapshot %s (host %s) and snapshot %s "
                   "(host %s)",
                   x->rank, (long long)x->step, a.id, a.host ? a.host : "-", b.id,
                   b.host ? b.host : "-");
        e = CKS_E_MISMATCH;
    }
    manifest_free(&a);
    manifest_free(&b);
    return e;
}

static int pc_dups(struct region *rg, const struct pc_list *l, int64_t step, struct buf *err)
{
    int e = 0;
    for (size_t i = 0; e == 0 && i < l->n; i++)
        for (size_t j = i + 1; e == 0 && j < l->n; j++) {
            const struct layout_part *x = &l->v[i], *y = &l->v[j];
            if (x->step == step && y->step == step && x->rank == y->rank && strcmp(x->id, y->id))
                e = pc_dup_pair(rg, l, x, y, err);
        }
    return e;
}

/* Whether p is the newest (largest id) part of its rank and node count:
 * the one of the current generation, where several are listed. */
static bool pc_newest(const struct pc_list *l, const struct layout_part *p)
{
    for (size_t i = 0; i < l->n; i++) {
        const struct layout_part *q = &l->v[i];
        if (q->step == p->step && q->rank == p->rank && q->nodes == p->nodes &&
            strcmp(q->id, p->id) > 0)
            return false;
    }
    return true;
}

/* The parts' time stamps against the region's clock: none ahead, and the
 * newest of each rank not past part_expire. */
static int pc_clock(struct region *rg, const struct config *c, const struct pc_list *l,
                    int64_t step, struct buf *err)
{
    struct region_clock ck;
    int e = region_clock(rg, &ck);
    if (e == -ENOTSUP) { /* a kind that cannot tell: this host's clock */
        ck.local = ck.store = (double)time(NULL);
        ck.error = 1;
    } else if (e < 0) {
        buf_printf(err, "%s", region_last_error(rg));
        return e;
    }
    double ahead_max = (double)c->clock_skew + ck.error;
    double age_max = c->part_expire > c->clock_skew ? (double)(c->part_expire - c->clock_skew) : 0;
    for (size_t i = 0; i < l->n; i++) {
        const struct layout_part *p = &l->v[i];
        int64_t t = gc_utc_parse(p->id);
        if (p->step != step)
            continue;
        if (t < 0) { /* its age cannot be told: prune expires it at once (service/partgc.h) */
            buf_printf(err, "node %u's part of step %lld (snapshot %s) has no time stamp in its id",
                       p->rank, (long long)step, p->id);
            return CKS_E_MISMATCH;
        }
        if ((double)t - ck.store > ahead_max) {
            buf_printf(err,
                       "node %u's part of step %lld (snapshot %s) is stamped %.0f s ahead of "
                       "region '%s''s clock, more than [prune] clock_skew (%llu s): node %u's "
                       "clock is wrong",
                       p->rank, (long long)step, p->id, (double)t - ck.store, rg->conf.name,
                       (unsigned long long)c->clock_skew, p->rank);
            return CKS_E_MISMATCH;
        }
        if (ck.store - (double)t > age_max && pc_newest(l, p)) {
            buf_printf(err,
                       "node %u's part of step %lld (snapshot %s) is %.0f s old by region '%s''s "
                       "clock, past [daemon] part_expire (%llu s) less clock_skew: prune may "
                       "already have taken its chunks",
                       p->rank, (long long)step, p->id, ck.store - (double)t, rg->conf.name,
                       (unsigned long long)c->part_expire);
            return CKS_E_MISMATCH;
        }
    }
    return 0;
}

/* The run's previous step whose parts rg still lists, and its node count. */
static void pc_prev_nodes(const struct pc_list *l, const char *run, int64_t step, unsigned nodes)
{
    const struct layout_part *prev = NULL;
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].step < step && (!prev || l->v[i].step > prev->step))
            prev = &l->v[i];
    if (prev && prev->nodes != nodes)
        log_warn("run '%s' step %lld: the job has %u nodes, its previous step %lld had %u (node "
                 "%u's part says so): a job restarted on another node count; restore with --node "
                 "K --of M where files are bound to a rank",
                 run, (long long)step, nodes, (long long)prev->step, prev->nodes, prev->rank);
}

int partcheck_step(struct region *rg, const struct config *c, const struct layout_part *self,
                   int64_t gen, partcheck_decode_fn decode, struct buf *err)
{
    const char *run = self->run;
    int64_t step = self->step;
    unsigned nodes = self->nodes;
    struct pc_list l = {.run = run, .gen = gen, .decode = decode};
    char prefix[LAYOUT_KEY_MAX];
    int e = layout_prefix(LAYOUT_PART, run, prefix);
    if (e == 0 && (e = region_list(rg, prefix, pc_list_cb, &l)) < 0 && e != -ENOENT)
        buf_printf(err, "%s", region_last_error(rg));
    if (e == -ENOENT)
        e = 0;
    if (e == 0)
        e = pc_ranks(rg, &l, self, err);
    if (e == 0)
        e = pc_dups(rg, &l, step, err);
    if (e == 0)
        e = pc_clock(rg, c, &l, step, err);
    if (e == 0)
        pc_prev_nodes(&l, run, step, nodes);
    free(l.v);
    return e;
}
