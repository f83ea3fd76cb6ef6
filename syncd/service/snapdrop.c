/*
 * snapdrop.c — dropping the index's record of a forgotten snapshot
 * (snapdrop.h).  The index is read first so that an instance that never
 * knew the snapshot (most of a shared repository) reads no manifest.
 */
#include <errno.h>

#include "base/err.h"
#include "base/log.h"
#include "service/manifests.h"
#include "service/snapdrop.h"
#include "service/snaprec.h"

/* 1 when the index has a record of run/id, 0 when not, or an error. */
static int drop_known(struct repo *r, const char *run, const char *id)
{
    struct index_txn *t;
    struct index_snap s;
    int e = index_txn_begin(repo_index(r), false, &t);
    if (e < 0)
        return e;
    e = index_snap_get(t, run, id, &s);
    index_txn_abort(t);
    return e == 0 ? 1 : e == -ENOENT ? 0 : e;
}

int snapdrop_forgotten(struct repo *r, const char *run, const char *id)
{
    struct index_txn *t;
    struct manifest m;
    struct buf err = BUF_INIT;
    int e = drop_known(r, run, id);
    if (e <= 0)
        goto out;
    if ((e = manifests_read(r, run, id, &m, NULL, &err)) < 0)
        goto out;
    if ((e = index_txn_begin(repo_index(r), true, &t)) == 0) {
        e = snaprec_drop(t, &m);
        if (e < 0)
            index_txn_abort(t);
        else if (e == 1)
            e = index_txn_commit(t) < 0 ? CKS_E_FATAL : 1;
        else
            index_txn_abort(t);
    }
    manifest_free(&m);
out:
    if (e == -ENOENT) /* pruned already: no manifest tells its references */
        log_debug("snapshot %s of run '%s' is forgotten and pruned; the local index keeps its "
                  "record until `ckptsync reindex`",
                  id, run);
    else if (e < 0)
        log_warn("snapshot %s of run '%s' is forgotten, but the local index keeps its record "
                 "(%s); `ckptsync reindex` removes it",
                 id, run, buf_str(&err)[0] ? buf_str(&err) : err_str(e));
    else if (e == 1)
        log_debug("snapshot %s of run '%s': dropped from the local index (forgotten)", id, run);
    buf_free(&err);
    return e;
}
