/*
 * unitrestore.c — restore every selected unit of a run (unitrestore.h).
 *
 * Design: the catalog names each unit's newest snapshot; this module only
 * chooses which of them to restore and runs restore_run for each, so a
 * single-snapshot restore and a multi-unit one verify and place files the
 * same way.  Failures are per unit: one that cannot be restored does not
 * stop the others.
 */
#include "service/unitrestore.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"

static double unitrestore_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bool unitrestore_selected(const struct unitrestore_opts *o, const struct catalog_unit *u)
{
    if (!o->all && u->step >= 0)
        return false;
    return !o->skip_root || strcmp(u->root, o->skip_root);
}

/* Restores one unit; logs what went wrong and counts the outcome. */
static void unitrestore_one(struct repo *r, const struct unitrestore_opts *o,
                            const struct catalog_unit *u, struct unitrestore_result *ret,
                            struct buf *err)
{
    struct restore_opts ro = {.run = o->run,
                              .id = u->id,
                              .target = o->target,
                              .force = o->force,
                              .keep_setid = o->keep_setid};
    struct restore_result res;
    buf_reset(err);
    double t0 = unitrestore_now();
    int e = restore_run(r, &ro, &res, err);
    struct unitrestore_item it = {u, e, unitrestore_now() - t0, &res};
    if (e == -EEXIST) {
        log_warn("\"%s/%s\" is already there; left as it is (--force replaces it)", o->target,
                 u->root);
        ret->present++;
    } else if (e < 0) {
        log_error("restoring \"%s\" (snapshot %s): %s", u->root, u->id, buf_str(err));
        ret->failed++;
    } else {
        ret->restored++;
    }
    if (o->done)
        o->done(o->ud, &it);
}

int unitrestore_run(struct repo *r, const struct unitrestore_opts *o,
                    struct unitrestore_result *ret, struct buf *err)
{
    struct catalog_unit *u = NULL;
    size_t n = 0;
    struct buf uerr = BUF_INIT;
    memset(ret, 0, sizeof(*ret));
    int e = catalog_units(r, o->run, &u, &n, err);
    if (e < 0)
        return e;
    ret->units = n;
    for (size_t i = 0; i < n; i++)
        if (unitrestore_selected(o, &u[i]))
            unitrestore_one(r, o, &u[i], ret, &uerr);
    free(u);
    buf_free(&uerr);
    return 0;
}
