/*
 * rungen.c — deciding the generation of snapshots queued undecided (see
 * rungen.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "daemon/rungen.h"
#include "service/runlineage.h"
#include "store/queue.h"

/* 1 when the run of queued snapshot seq (its name into run) has no
 * generation recorded; 0 when it has one or seq is gone. */
static int rungen_undecided(struct repo *r, uint64_t seq, char run[MANIFEST_MAX_FIELD + 1])
{
    struct index_txn *t;
    struct pending *p = malloc(sizeof(*p)); /* large */
    int64_t gen;
    int e = p ? index_txn_begin(repo_index(r), false, &t) : -ENOMEM;
    if (e < 0) {
        free(p);
        return e;
    }
    e = queue_pending_get(t, seq, p);
    if (e == 0) {
        memcpy(run, p->run, MANIFEST_MAX_FIELD + 1);
        e = runlineage_gen_get(t, run, &gen);
        e = e == -ENOENT || e == CKS_E_FORMAT ? 1 : e;
    } else if (e == -ENOENT) {
        e = 0;
    }
    index_txn_abort(t);
    free(p);
    return e;
}

int rungen_settle(struct repo *r, struct region *rg, uint64_t seq)
{
    char run[MANIFEST_MAX_FIELD + 1];
    struct buf why = BUF_INIT;
    struct index_txn *t;
    int64_t gen;
    size_t n = 0;
    int e = rungen_undecided(r, seq, run);
    if (e <= 0)
        return e;
    /* the region's own message (region_last_error) is what the worker reports */
    e = runlineage_region_gen(rg, run, &gen, &why);
    buf_free(&why);
    if (e < 0)
        return e;
    if ((e = index_txn_begin(repo_index(r), true, &t)) < 0)
        return e;
    if ((e = runlineage_gen_record(t, run, gen, &n)) < 0) {
        index_txn_abort(t);
        return e;
    }
    if ((e = index_txn_commit(t)) == 0 && n)
        log_info("run '%s': generation %lld, as region '%s' lists it, for the %zu snapshot(s) "
                 "queued while no region could be listed",
                 run, (long long)gen, rg->conf.name, n);
    return e;
}

int rungen_fill(struct index_txn *t, struct manifest *m, struct buf *man)
{
    int64_t gen;
    int e = runlineage_gen_get(t, m->run, &gen);
    if (e == -ENOENT || e == CKS_E_FORMAT)
        return 0;
    if (e < 0)
        return e;
    m->gen = gen;
    buf_reset(man);
    e = manifest_encode(m, man);
    return e < 0 ? e : 1;
}
