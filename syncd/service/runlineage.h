/*
 * runlineage.h — a run's lineage: who owns a run, and which snapshot the
 * next instance resumes from, decided by the regions' write-once records
 * (engine/lineage.h), never by a shared object that writers update.
 *
 * Generations.  Every snapshot carries the generation of the instance that
 * wrote it (manifest "gen").  An instance that adopts a run (migrate-in)
 * writes a claim for generation G+1, G the highest generation any region
 * shows for the run, and writes the run at G+1 from then on.  An instance
 * that simply writes a run it never adopted joins the current generation.
 *
 * The resume point of a run (lineage_resume), in this order:
 *   1. G = the highest generation among snapshots, claims and handoffs;
 *   2. a handoff of generation G names it (the owner of G left; its later
 *      uploads, if any, do not move it);
 *   3. otherwise the newest committed snapshot of generation G (checkpoints
 *      before other files, then step, then id);
 *   4. otherwise (G was claimed and nothing committed since) the snapshot
 *      the claim resumed from;
 *   5. otherwise the same for G-1, and so on.
 * So a handoff never beats what the adopter committed after it (those are
 * G+1), and an abandoned instance's late uploads (still at G) never outrank
 * the adopter's work.  Every snapshot stays listed and restorable by id.
 *
 * Deciding a writer's generation.  The generation an instance writes a
 * run at is decided once, from the regions' listings, and recorded in its
 * index ("gen/<run>"); an instance that decided wrong would write every
 * later snapshot of the run where the resume point never looks.  So it is
 * decided only from a successful listing, never from a failure: a region
 * that does not answer (unreachable, no bucket, a dir region whose
 * directory is missing) is no evidence of an empty run.  The rule: at
 * least one region answered, and every region that answered counts (a
 * daemon's region worker, which owns one handle, asks its own region).
 * Those are the regions a reader (restore --latest, migrate-in, ls
 * --remote) would consult at that moment, so the writer joins the
 * generation such a reader sees as current.  Waiting for every region
 * instead would hold back a fresh instance's snapshots of a run for as
 * long as one region is gone; the limit of the rule is a claim that
 * reached only regions that are all down at the decision (migrate-in
 * writes it to every region that answers).  With no listing at all the
 * generation stays undecided and nothing is recorded: the CLI's snapshot
 * fails, naming the regions; the daemon queues the snapshot and a region
 * worker decides before it uploads or publishes it (daemon/rungen.h).
 *
 * Calling sequence: runlineage_scan() reads one run from every healthy
 * region (listings; a GET only for a snapshot with no commit record, or a
 * claim whose base is needed); runlineage_candidates() orders what to restore;
 * runlineage_view_free().  Not thread-safe (a repo is used by one thread).
 */
#ifndef CKS_RUNLINEAGE_H
#define CKS_RUNLINEAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/lineage.h"
#include "service/repo.h"

struct runlineage_snap {
    char id[MANIFEST_ID_MAX + 1];
    int64_t gen, step;
    uint32_t manifests; /* bit per region index: lists the manifest */
    uint32_t commits;   /* bit per region index: lists a commit record */
    uint32_t forgets;   /* bit per region index: lists a forget record
                         * (removed: skipped by every resume rule) */
    bool known;         /* gen/step known (from a key or a manifest) */
};

struct runlineage_view {
    char run[MANIFEST_MAX_FIELD + 1];
    struct runlineage_snap *snaps; /* sorted by id */
    size_t nsnaps;
    struct lineage_rec *recs; /* claims and handoffs, each once */
    size_t nrecs;
    int64_t gen;         /* highest generation seen; 0 if none */
    bool legacy_handoff; /* a version-1 handoff/<run> was read */
    /* runlineage_candidates: the snapshots claims resumed from (read from
     * their bodies), which its returned ids may point to */
    char bases[4][MANIFEST_ID_MAX + 1];
    size_t nbases;
};

int runlineage_scan(struct repo *r, struct region *const *regions, const char *run,
                    struct runlineage_view *ret, struct buf *err);
/* runlineage_scan over every region of r; a failure is logged (its
 * message names the region) and returned. */
int runlineage_scan_all(struct repo *r, const char *run, struct runlineage_view *ret);
void runlineage_view_free(struct runlineage_view *v);
struct runlineage_snap *runlineage_find(struct runlineage_view *v, const char *id);

/* Restore candidates in resume order (see above), each once, at most cap;
 * ret_why[k] says which rule chose candidate k.  The ids point into v:
 * valid until runlineage_view_free(v). */
size_t runlineage_candidates(struct repo *r, struct runlineage_view *v, const char **ret_ids,
                             const char **ret_why, size_t cap);

/* The generation this instance writes run with: the index's (meta
 * "gen/<run>"), else the highest the regions that answer show, which is
 * then recorded (unless another thread recorded one first: that one is
 * kept and returned).  regions: the set to read (the daemon's ingest
 * thread has its own).  CKS_E_QUORUM, nothing recorded and err naming
 * each region and why, when no region could be listed. */
int runlineage_run_gen(struct repo *r, struct region *const *regions, const char *run, int64_t *ret,
                       struct buf *err);
/* The same record inside the caller's transaction t: -ENOENT when none
 * was decided, CKS_E_FORMAT when it is damaged (decide again). */
int runlineage_gen_get(struct index_txn *t, const char *run, int64_t *ret);
/* In t: records gen as this instance's generation of run unless one is
 * recorded (then nothing changes, *ret_n 0).  Keeps the daemon's rule
 * (daemon/rungen.h): every snapshot of run it queued without a generation
 * (none was recorded) is rewritten with gen in the same transaction;
 * *ret_n how many.  Every writer of "gen/<run>" goes through it. */
int runlineage_gen_record(struct index_txn *t, const char *run, int64_t gen, size_t *ret_n);
/* The highest generation one region shows for run (its listings; a
 * manifest without a commit record is not read).  Uses only rg: for a
 * thread that owns one region handle.  < 0 with err naming the region
 * when it could not be listed. */
int runlineage_region_gen(struct region *rg, const char *run, int64_t *ret, struct buf *err);

/* Writes a write-once record to every healthy region; returns how many
 * took it (errors logged, naming region and key). */
unsigned runlineage_put(struct repo *r, const struct lineage_rec *rec);
/* A record filled with this host, instance and time. */
void runlineage_rec_init(struct lineage_rec *rec, enum lineage_kind kind, const char *run,
                         int64_t gen);

/* The commit record of manifest m (bytes man) into one region, after the
 * manifest itself. */
int runlineage_put_commit(struct region *rg, const struct manifest *m, const uint8_t *man,
                          size_t len);

/* migrate-out: a handoff record naming snapshot (id, step), at this
 * instance's generation of run.  Returns how many regions took it. */
unsigned runlineage_handoff(struct repo *r, const char *run, const char *id, int64_t step);
/* migrate-in, after restoring snapshot base: claims generation G+1 (G the
 * highest the regions show) in every healthy region and records it as
 * this instance's generation of run.  *ret_handed_off: base is what the
 * current generation's handoff named.  CKS_E_QUORUM when no region took
 * the claim. */
int runlineage_adopt(struct repo *r, const char *run, const char *base, int64_t base_step,
                     int64_t *ret_gen, bool *ret_handed_off);
/* Records claimed (or joined: service/jobmigrate.h) generation gen as this
 * instance's generation of run. */
int runlineage_gen_claimed(struct repo *r, const char *run, int64_t gen);

/* Runs that have snapshots in any healthy region (first cap, sorted). */
int runlineage_runs(struct repo *r, char (*ret)[MANIFEST_MAX_FIELD + 1], size_t cap, size_t *ret_n);

#endif
