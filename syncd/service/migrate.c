/*
 * migrate.c — the handoff protocol and the claim of a run (migrate.h).
 *
 * Design notes.
 * - migrate-out judges the daemon by its status document only (what
 *   `ckptsync status --json` shows: units_pending, ingest_busy, and each
 *   run's latest snapshot with regions_committed), so any front end that
 *   can fetch that document gets the same decision.
 * - The snapshot a handoff names comes from the local index (committed
 *   bits of the configured regions), not from the status: the newest that
 *   is safe may be older than the newest there is.
 * - migrate-in claims only after a verified restore: a claim outranks the
 *   old owner, so it must never name something this instance lacks.
 */
#include "service/migrate.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "service/catalog.h"
#include "service/jobmigrate.h"
#include "service/runlineage.h"

static double migrate_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- migrate-out ------------------------------------------------------- */

static bool migrate_run_selected(const char *want, const char *run)
{
    return !want || !strcmp(want, run);
}

/* Every selected run's latest snapshot is in quorum regions, and nothing
 * is left to take. */
static bool migrate_out_done(const struct jnode *status, const char *run, unsigned quorum)
{
    const struct jnode *runs = jnode_get(status, "runs");
    bool found = false;
    if (jnode_num(jnode_get(status, "units_pending"), 1) > 0 ||
        jnode_num(jnode_get(status, "ingest_busy"), 1) > 0)
        return false;
    for (size_t i = 0; i < jnode_len(runs); i++) {
        const struct jnode *rn = jnode_at(runs, i), *l = jnode_get(rn, "latest");
        if (!migrate_run_selected(run, jnode_str(jnode_get(rn, "run"), "")))
            continue;
        found = true;
        if (jnode_num(jnode_get(l, "regions_committed"), 0) < quorum)
            return false;
    }
    return found || !run;
}

int migrate_out_wait(const struct migrate_daemon *d, const char *run, unsigned quorum,
                     int64_t deadline_s, struct jnode **ret_status, bool *ret_in_time)
{
    struct jnode *status = NULL;
    bool in_time = false;
    double end = migrate_now() + (double)deadline_s;
    int e;
    d->flush(d->ud, deadline_s);
    for (;;) {
        jsonread_free(status);
        status = NULL;
        if ((e = d->status(d->ud, &status)) < 0)
            break;
        if ((in_time = migrate_out_done(status, run, quorum)) || migrate_now() >= end)
            break;
        usleep(200 * 1000);
    }
    if (e < 0) {
        jsonread_free(status);
        status = NULL;
    }
    *ret_status = status;
    *ret_in_time = in_time;
    return e;
}

/* The newest snapshot of run in at least quorum regions, by the index. */
static int migrate_newest_safe(struct repo *r, const char *run, unsigned quorum, struct ref *ret)
{
    struct catalog_rows l = {0};
    bool have = false;
    int e = catalog_list(r, run, 0, &l);
    for (size_t k = 0; e == 0 && k < l.n; k++) {
        struct ref cand;
        if (l.v[k].regions < quorum)
            continue;
        snprintf(cand.id, sizeof(cand.id), "%s", l.v[k].id);
        cand.step = l.v[k].step;
        if (!have || ref_newer(&cand, ret)) {
            *ret = cand;
            have = true;
        }
    }
    catalog_rows_free(&l);
    if (e == 0 && !have)
        e = -ENOENT;
    return e;
}

void migrate_out_handoff(struct repo *r, const struct jnode *status, const char *run,
                         unsigned quorum, bool in_time,
                         void (*report)(void *ud, const struct migrate_out_run *m), void *ud,
                         bool *ret_ok)
{
    const struct jnode *runs = jnode_get(status, "runs");
    bool ok = true;
    for (size_t i = 0; i < jnode_len(runs); i++) {
        const struct jnode *rn = jnode_at(runs, i), *l = jnode_get(rn, "latest");
        struct migrate_out_run m = {.run = jnode_str(jnode_get(rn, "run"), "")};
        if (!migrate_run_selected(run, m.run))
            continue;
        m.latest = jnode_str(jnode_get(l, "id"), NULL);
        m.latest_step = (int64_t)jnode_num(jnode_get(l, "step"), -1);
        m.latest_regions = (unsigned)jnode_num(jnode_get(l, "regions_committed"), 0);
        m.have_handoff = migrate_newest_safe(r, m.run, quorum, &m.handoff) == 0;
        if (m.have_handoff)
            m.handoff_regions = runlineage_handoff(r, m.run, m.handoff.id, m.handoff.step);
        m.latest_safe = m.latest_regions >= quorum && in_time;
        if (m.handoff_regions < quorum || !m.latest_safe)
            ok = false;
        report(ud, &m);
    }
    *ret_ok = ok;
}

/* ---- migrate-in -------------------------------------------------------- */

int migrate_pick_run(struct repo *r, char *run, size_t run_cap,
                     char (*names)[MANIFEST_MAX_FIELD + 1], size_t cap, size_t *ret_n)
{
    size_t n = 0;
    runlineage_runs(r, names, cap, &n);
    *ret_n = n;
    if (n == 1) {
        snprintf(run, run_cap, "%s", names[0]);
        return 0;
    }
    return n == 0 ? -ENOENT : -EINVAL;
}

/* The claim: once per job on several nodes, else this instance's. */
static int migrate_claim(struct repo *r, const struct migrate_in_opts *o,
                         const struct restore_result *res, struct migrate_in_result *ret)
{
    struct jobmigrate_claim jc = {0};
    if (o->node_count <= 1)
        return runlineage_adopt(r, o->run, res->id, res->step, &ret->gen, &ret->handed_off);
    int e = jobmigrate_claim(r, o->run, res->id, res->step, (unsigned)o->node_count,
                             o->job ? o->job : "", &jc);
    ret->gen = jc.gen;
    ret->joined = jc.joined;
    ret->handed_off = jc.handed_off;
    return e;
}

int migrate_in_run(struct repo *r, const struct migrate_in_opts *o, struct migrate_in_result *ret,
                   struct buf *err)
{
    struct restore_opts ro = {.run = o->run,
                              .target = o->target,
                              .seed = o->seed,
                              .force = o->force,
                              .progress = o->progress,
                              .progress_ud = o->progress_ud,
                              .node_rank = o->node_rank,
                              .node_count = o->node_count,
                              .allow_reshard = o->allow_reshard,
                              .progressive = o->progressive,
                              .placed = o->placed,
                              .placed_ud = o->ud};
    struct restore_result *res = &ret->res;
    ret->gen = 0;
    ret->handed_off = false;
    ret->joined = false;
    double t0 = migrate_now();
    int e = restore_run(r, &ro, res, err);
    if (o->restored)
        o->restored(o->ud, res, migrate_now() - t0, e);
    if (e < 0)
        return e;
    /* Only a verified restore adopts the run: from now on this instance
     * writes it at a new generation, which outranks the old owner's. */
    if ((e = migrate_claim(r, o, res, ret)) < 0) {
        buf_printf(err, "restored, but could not claim the run in any region");
        return e;
    }
    if (res->step < 0)
        return 0;
    /* a checkpoint: the run's files outside checkpoints (logs, configs) come along */
    struct unitrestore_opts u = {.run = o->run,
                                 .target = o->target,
                                 .force = o->force,
                                 .skip_root = res->root,
                                 .done = o->unit_done,
                                 .ud = o->ud};
    struct unitrestore_result ur;
    struct buf uerr = BUF_INIT;
    int ue = unitrestore_run(r, &u, &ur, &uerr);
    if (ue < 0)
        log_error("%s", buf_str(&uerr));
    if (ue < 0 || ur.failed)
        log_warn("some of the run's files outside checkpoints could not be restored (see above)");
    buf_free(&uerr);
    return 0;
}
