/*
 * migrate.h — moving training from one instance to another: the handoff
 * protocol of `migrate-out` and the restore-and-claim of `migrate-in`.
 *
 * Old instance (a daemon runs there):
 *
 *   struct migrate_daemon d = {flush_fn, status_fn, ctx};
 *   e = migrate_out_wait(&d, run, quorum, deadline_s, &status, &in_time);
 *   e = migrate_out_handoff(repo, status, run, quorum, in_time, report_fn, ctx, &ok);
 *   jsonread_free(status);
 *
 * migrate_out_wait asks the daemon to commit everything pending now and
 * polls its status (every 200 ms) until each selected run's newest
 * snapshot is in quorum regions and nothing is left to take, or the
 * deadline passes.  migrate_out_handoff then writes, for each selected
 * run of that status, a handoff record (service/runlineage.h) naming the
 * newest snapshot the index shows in quorum regions: on the deadline too,
 * so the next instance gets the newest safe one.  The daemon is reached
 * through the caller's functions (the CLI uses the control socket).
 *
 * New instance (no daemon needed):
 *
 *   migrate_pick_run(repo, run, sizeof(run), names, 16, &n);   // when none is named
 *   e = migrate_in_run(repo, &opts, &res, &err);
 *
 * migrate_in_run restores the run's resume point (the handed-off snapshot,
 * else the newest of its current lineage), verified; only then claims the
 * run for this instance (a new generation, which outranks the old
 * owner's); then restores the run's newest files outside checkpoints
 * (service/unitrestore.h) next to a checkpoint.
 *
 * Not thread-safe (a repo is used by one thread).  The status document is
 * the caller's (jsonread_free it).
 */
#ifndef CKS_MIGRATE_H
#define CKS_MIGRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/jsonread.h"
#include "engine/ref.h"
#include "service/restore.h"
#include "service/unitrestore.h"

/* ---- migrate-out ------------------------------------------------------- */

struct migrate_daemon {
    /* ask the daemon to commit everything pending now (not waiting for it) */
    void (*flush)(void *ud, int64_t deadline_s);
    /* the daemon's status document, parsed (*ret the caller's); 0 or a
     * negative errno */
    int (*status)(void *ud, struct jnode **ret);
    void *ud;
};

/* 0 with *ret_status (free it) and *ret_in_time (everything was safe
 * before the deadline); the status function's error otherwise (*ret_status
 * NULL).  run: NULL for every run. */
int migrate_out_wait(const struct migrate_daemon *d, const char *run, unsigned quorum,
                     int64_t deadline_s, struct jnode **ret_status, bool *ret_in_time);

struct migrate_out_run {
    const char *run;         /* these strings point into the status document */
    const char *latest;      /* the run's newest snapshot; NULL when the status has none */
    int64_t latest_step;     /* -1 when unknown */
    unsigned latest_regions; /* regions that committed it */
    bool latest_safe;        /* in quorum regions, before the deadline */
    bool have_handoff;       /* some snapshot is in quorum regions: handoff names it */
    struct ref handoff;
    unsigned handoff_regions; /* regions that took the handoff record */
};

/* For each selected run of status: writes the handoff and calls report
 * with what was found and written.  *ret_ok: every reported run's newest
 * snapshot is safe and its handoff is in quorum regions. */
void migrate_out_handoff(struct repo *r, const struct jnode *status, const char *run,
                         unsigned quorum, bool in_time,
                         void (*report)(void *ud, const struct migrate_out_run *m), void *ud,
                         bool *ret_ok);

/* ---- migrate-in -------------------------------------------------------- */

/* The run to migrate when none is named: 0 and run set when exactly one
 * run has snapshots in a healthy region; else -ENOENT (none) or -EINVAL
 * (several), with the first cap of them in names, *ret_n of them (== cap:
 * there may be more), for the caller to show. */
int migrate_pick_run(struct repo *r, char *run, size_t run_cap,
                     char (*names)[MANIFEST_MAX_FIELD + 1], size_t cap, size_t *ret_n);

struct migrate_in_opts {
    const char *run;
    const char *target; /* directory; created if missing */
    const char *seed;   /* restore_opts.seed */
    bool force;         /* replace what the target holds */
    /* a job on several nodes (service/jobmigrate.h): this node is node_rank
     * of node_count (> 1: the job's generation is claimed once, every new
     * node joins it); passed to the restore with allow_reshard.  job: the
     * launcher's job id, or "" */
    int node_rank;
    int node_count;
    bool allow_reshard;
    const char *job;
    bool progressive; /* restore_opts.progressive, .placed, .placed_ud */
    void (*placed)(void *ud, const char *path, uint64_t bytes, const char *group);
    void (*progress)(void *ud, uint64_t done, uint64_t total);
    void *progress_ud;
    /* after the resume point's restore, whatever its outcome */
    void (*restored)(void *ud, const struct restore_result *res, double seconds, int err);
    /* after each file outside checkpoints (unitrestore_opts.done) */
    void (*unit_done)(void *ud, const struct unitrestore_item *it);
    void *ud;
};

struct migrate_in_result {
    struct restore_result res; /* the resume point's restore */
    int64_t gen;               /* the generation this instance now owns */
    bool handed_off;           /* res.id is what the old owner's handoff named */
    bool joined;               /* node_count > 1: another new node had claimed gen */
};

/* 0 when the resume point is restored and the run claimed (a failure to
 * restore files outside checkpoints is only warned about); a negative
 * code with err set otherwise. */
int migrate_in_run(struct repo *r, const struct migrate_in_opts *o, struct migrate_in_result *ret,
                   struct buf *err);

#endif
