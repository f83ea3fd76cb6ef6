/*
 * snapout.h — the JSON of a snapshot's outcome, one emitter for both
 * front ends: `ckptsync snapshot --json` (the whole result of
 * snapshot_take) and the daemon's answer to a control-socket `commit`
 * (how many regions committed a snapshot it took).  One table of fields
 * drives both (as curl's tool_writeout.c drives --write-out), so a field
 * the two share is spelled and computed in one place.
 *
 *   struct snapout o = {.id = res.id, .res = &res, .repo = r,
 *                       .committed = res.committed, .durable = res.durable,
 *                       .replicated = e == 0};
 *   snapout_json(&j, &o, SNAPOUT_TAKE);      // one object, appended to j
 *
 * Nothing is kept; thread-safe as long as the caller's inputs are.
 */
#ifndef CKS_SNAPOUT_H
#define CKS_SNAPOUT_H

#include <stdbool.h>

#include "base/json.h"
#include "service/repo.h"
#include "service/snapshot.h"

/* Which document: each field of the table belongs to one or both. */
enum snapout_view {
    SNAPOUT_TAKE = 1,   /* ckptsync snapshot --json: counts and per-region results */
    SNAPOUT_COMMIT = 2, /* the daemon's commit answer: id, run, regions committed */
};

struct snapout {
    const char *id;
    const char *run;                   /* SNAPOUT_COMMIT */
    const struct snapshot_result *res; /* SNAPOUT_TAKE: the counts and regions */
    const struct repo *repo;           /* SNAPOUT_TAKE: the regions' names */
    unsigned committed;                /* regions that committed it */
    bool durable;                      /* committed in at least quorum regions */
    bool replicated;                   /* committed in every region */
};

/* Appends o as one JSON object with the fields of view v, in the table's
 * order.  Errors (ENOMEM) are sticky in j (base/json.h). */
void snapout_json(struct json *j, const struct snapout *o, enum snapout_view v);

#endif
