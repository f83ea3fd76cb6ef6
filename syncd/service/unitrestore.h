/*
 * unitrestore.h — restore the newest snapshot of each unit of a run
 * (service/catalog.h: "checkpoint-100", "train.log", ...) into one target
 * directory: `restore --all`, and the files outside checkpoints (logs,
 * configs) that `restore --latest` and `migrate-in` bring along with the
 * checkpoint they restored.
 *
 *   struct unitrestore_opts o = {.run = run, .target = dir, .all = true,
 *                                .done = print_one, .ud = ctx};
 *   e = unitrestore_run(repo, &o, &res, &err);   // res.failed: how many failed
 *
 * Units are restored one after the other, in the catalog's order, each
 * with restore_run (verified, staged, renamed into place).  A unit already
 * present in the target is left as it is unless force (a warning says
 * so); a unit that fails is logged and counted, and the next one is still
 * restored.  After each unit tried, o->done (may be NULL) is called with
 * its outcome, for the front end to print and report; what it is given
 * is valid only during the call.
 *
 * Not thread-safe (a repo is used by one thread).
 */
#ifndef CKS_UNITRESTORE_H
#define CKS_UNITRESTORE_H

#include <stdbool.h>
#include <stddef.h>

#include "service/catalog.h"
#include "service/restore.h"

struct unitrestore_item {
    const struct catalog_unit *unit;
    int err;                          /* 0, -EEXIST (present, left alone), or the restore's error */
    double seconds;                   /* how long its restore took */
    const struct restore_result *res; /* meaningful when err == 0 */
};

struct unitrestore_opts {
    const char *run;
    const char *target;    /* directory; created if missing */
    bool force;            /* replace target/<root> when it exists */
    bool keep_setid;       /* restore_opts.keep_setid */
    bool all;              /* every unit; false: only those that are not checkpoints */
    const char *skip_root; /* NULL, or a unit's root not to restore (the
                            * checkpoint a --latest restore just brought back) */
    void (*done)(void *ud, const struct unitrestore_item *it);
    void *ud;
};

struct unitrestore_result {
    size_t units;    /* units of the run in the catalog */
    size_t restored; /* restored into the target */
    size_t present;  /* already there, left alone (no force) */
    size_t failed;   /* failed (each logged) */
};

/* 0 when every selected unit was tried (res->failed says how many
 * failed); a negative code, with err set, when the run's units could not
 * be listed (nothing was restored). */
int unitrestore_run(struct repo *r, const struct unitrestore_opts *o,
                    struct unitrestore_result *ret, struct buf *err);

#endif
