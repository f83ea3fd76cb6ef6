/*
 * jobmigrate.h — migration of a job on several nodes (README "Multi-node
 * jobs", docs/multinode.md "Migration and preemption"): the handoff that
 * every old node agrees on, and the one claim that every new node joins.
 * Only the regions' write-once records decide; no node is the leader.
 *
 * Old nodes (each, after its daemon made its parts durable: migrate.h's
 * migrate_out_wait):
 *
 *   struct jobmigrate_out o;
 *   e = jobmigrate_out_wait(repo, run, own_step, quorum, deadline_s, &o);
 *   if (e == 0 && o.committed)
 *       jobmigrate_handoff(repo, run, &o);
 *
 * jobmigrate_out_wait polls the regions (every 200 ms, until deadline_s)
 * until a committed snapshot of the run at this node's generation, of
 * step own_step or newer, is in quorum regions: that is the job's newest
 * committed step, the one handed off.  A node's own newest step that is
 * still incomplete (other nodes' parts missing) when the deadline passes
 * leaves o.committed false and o.missing naming the nodes.
 * jobmigrate_handoff writes the handoff record (key
 * lineage/<run>/g<gen>.handoff.s<step>.<id>: every node that hands off
 * the same step writes the same key) create-only where the store enforces
 * it; a region that has it already counts as holding it.  A handoff of a
 * newer step there already (a later node saw a newer commit) is left as
 * it is, and none older is written.
 *
 * New nodes (each, after restoring the resume point):
 *
 *   e = jobmigrate_claim(repo, run, base, base_step, nodes, job, &res);
 *
 * claims generation G+1 for the job once: the claim's name is a hash of
 * (run, G+1, base, nodes, job), so every new node of one job computes the
 * same key, the first create-only put wins and the others find it; a node
 * that scans after the claim landed sees G+1 claimed under its job's name
 * and joins it without writing.  job is the launcher's job id
 * (CKPTSYNC_JOB_ID, SLURM_JOB_ID) or "": it keeps two attempts that
 * resume from the same snapshot on the same node count apart.
 *
 * Not thread-safe (a repo is used by one thread).
 */
#ifndef CKS_JOBMIGRATE_H
#define CKS_JOBMIGRATE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/ref.h"
#include "service/multinode.h"
#include "service/repo.h"

struct jobmigrate_out {
    int64_t gen;           /* this node's generation of the run */
    int64_t own_step;      /* this node's newest step (its part); -1: none */
    bool committed;        /* a step >= own_step is committed in quorum regions */
    bool have_step;        /* step: the job's newest committed step (quorum regions) */
    struct ref step;       /* (any step when own_step < 0) */
    unsigned step_regions; /* regions holding its commit record */
    bool in_time;          /* committed before the deadline */
    /* own_step incomplete: which ranks have no part (from the regions) */
    bool have_missing;
    struct multinode_step missing;
    /* jobmigrate_handoff */
    unsigned handoff_written; /* regions this node wrote the handoff to */
    unsigned handoff_found;   /* regions that had it already (another node) */
    bool newer_handoff;       /* a handoff of a newer step is there: not written */
    struct ref newer;         /* that one */
};

/* 0 with *ret filled (committed or not); a negative code when no region
 * could be listed at all. */
int jobmigrate_out_wait(struct repo *r, const char *run, int64_t own_step, unsigned quorum,
                        int64_t deadline_s, struct jobmigrate_out *ret);
/* Writes (or finds) the handoff of ret->step at ret->gen: fills the
 * handoff_* fields.  How many regions hold it. */
unsigned jobmigrate_handoff(struct repo *r, const char *run, struct jobmigrate_out *o);

struct jobmigrate_claim {
    int64_t gen;     /* the job's generation: this node writes the run at it */
    bool joined;     /* another node of the job had claimed it */
    bool handed_off; /* base is what the previous generation's handoff named */
};

/* Claims (or joins) the job's generation and records it as this
 * instance's generation of run.  CKS_E_QUORUM when no region took or
 * showed the claim. */
int jobmigrate_claim(struct repo *r, const char *run, const char *base, int64_t base_step,
                     unsigned nodes, const char *job, struct jobmigrate_claim *ret);

/* The job id the launcher gives (CKPTSYNC_JOB_ID, else SLURM_JOB_ID),
 * "" when none: a pointer into the environment. */
const char *jobmigrate_env_job(void);

#endif
