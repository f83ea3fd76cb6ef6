/*
 * retention.h — which snapshots of a run a policy keeps, and forgetting
 * the others (a forget record in every region; prune deletes later).
 *
 * A snapshot is kept when any rule keeps it (the reason is reported):
 *   - it is not committed anywhere yet (in flight);
 *   - it is the run's resume point (service/runlineage.h), or its newest
 *     snapshot committed in `quorum` regions: never removed;
 *   - a handoff names it, or a claim resumed from it;
 *   - keep_last N: among the N newest checkpoints (generation, then
 *     step, then id); keep_every K: its step is a multiple of K;
 *     keep_within D: taken at most D before the newest snapshot;
 *   - keep_best M: among the M best by best_metric, read from the newest
 *     checkpoint's trainer_state.json (Hugging Face: log_history entries
 *     of the snapshot's step, NaN ranked last; best_model_checkpoint is
 *     always kept).  It fails safe: when that file cannot be read (not
 *     JSON, over 64 MiB, not fetched, or missing while an older
 *     checkpoint has one), nothing can be ranked and every checkpoint is
 *     kept, with a warning naming the snapshot and the reason; a run
 *     without any trainer_state.json has nothing to rank;
 *   - snapshots without a step (logs, configs: one "unit" per root) keep
 *     the newest max(N, 1) of each root, and those within D.
 * A policy with no rule keeps everything.  Deciding reads the regions'
 * listings, plus the manifests of step-less snapshots (for their roots)
 * and of the newest checkpoint (keep_best).
 *
 * Concurrent forgets are safe: each keeps the newest snapshots it sees,
 * and the union of their forget records removes only what one of them
 * decided to remove.
 */
#ifndef CKS_RETENTION_H
#define CKS_RETENTION_H

#include <stdbool.h>
#include <stdint.h>

#include "base/config.h"
#include "service/repo.h"

struct retention_item {
    char id[MANIFEST_ID_MAX + 1];
    int64_t step, gen, time; /* time: from the id (unix seconds) */
    bool keep;
    char why[160]; /* the rule that keeps it, or why it goes */
    bool has_metric;
    double metric;
};

struct retention_plan {
    char run[MANIFEST_MAX_FIELD + 1];
    struct retention_item *v; /* newest first */
    size_t n;
    size_t nforget;
    unsigned forgotten_regions; /* retention_apply: regions that took every record */
};

/* Decides; nothing is written.  0 or an error (err says). */
int retention_plan(struct repo *r, const char *run, const struct retention_policy *p,
                   struct retention_plan *ret, struct buf *err);
/* Writes a forget record for each snapshot the plan removes, in every
 * healthy region.  0 when every healthy region took all of them. */
int retention_apply(struct repo *r, struct retention_plan *plan, struct buf *err);
void retention_plan_free(struct retention_plan *p);
/* One retention pass over run, what both `ckptsync forget` and the
 * daemon's retention thread do: retention_plan(), then, unless dry or the
 * plan forgets nothing, retention_apply().  Returns retention_apply's
 * result (0; 1 when some healthy region missed a record; CKS_E_QUORUM when
 * none took them), or 0 when nothing was applied (forgotten_regions is then
 * the healthy regions).  After a planning error (< 0) ret->v is NULL:
 * there is no plan to report; after an applying error the plan is kept,
 * so the caller can show what it meant to forget.  Free *ret with
 * retention_plan_free() whatever this returns. */
int retention_run(struct repo *r, const char *run, const struct retention_policy *p, bool dry,
                  struct retention_plan *ret, struct buf *err);

/* Unix seconds of a snapshot id ("20261201T000701.123456Z-..."), -1. */
int64_t retention_id_time(const char *id);

#endif
