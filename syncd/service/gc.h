/*
 * gc.h — deleting chunks no retained snapshot names, while other instances
 * keep uploading: the writers' half and prune's half of one protocol.
 *
 * Every region is pruned on its own; what follows is about one region R.
 * A chunk is content-addressed, so a writer that needs a chunk prune is
 * deleting writes the very key prune deletes: nothing a writer uploads can
 * be told apart afterwards.  So prune never deletes a chunk some snapshot
 * may still be published with, and writers say what they rely on before
 * they publish.
 *
 * Writers (ckptsync snapshot, the daemon's region workers), per snapshot
 * and region:
 *   W0  write an intent, intents/<time>.<ttl>.<hex>, before the snapshot
 *       relies on anything it sees in R (the first HEAD or PUT of a chunk);
 *   W1  just before publishing, list gc/; for every mark M whose
 *       candidates include chunks of the snapshot (K):
 *         M done:      confirm K with R again (upload what is gone);
 *         M not done:  write a keep record gc/M/keep.<hex> naming K, then
 *                      list gc/M/ again (W3): a sweep begun and not over
 *                      means wait (-EAGAIN) until it is done or expired,
 *                      then confirm K again;
 *   W2  publish the manifest and commit record, then delete the intent.
 *   An intent older than ttl/2 by the writer's own clock is not published
 *   under.  That is checked immediately before each region's publish
 *   (gc_intent_publishable), whatever the writer did since W1 (a stall, a
 *   slow upload to another region): a stale intent is replaced by a new
 *   one, then W1 runs again and every chunk is confirmed again (uploading
 *   what a sweep took), then the check again.
 *
 * Prune (one at a time per repository: the lease, locks/prune/<n>, in the
 * first configured region), per region:
 *   P1  references: every manifest any healthy region lists and no forget
 *       record removes (every object it names: manifest_each_object);
 *       candidates: the chunks/ and recipes/ keys R lists that none names
 *       (a "chunk" below is either; docs/retention.md);
 *   P2  write gc/M/mark (the candidates), THEN list intents/ and write
 *       gc/M/intents (those alive now);
 *   S0  wait: M at least `grace` old, and every intent of gc/M/intents gone
 *       (its writer published or gave up) or expired (time + ttl +
 *       clock_skew in the past);
 *   S1  write gc/M/sweep.<expires>.<hex> (renewed while deleting);
 *   S2  list every region's manifests again (after S1) and gc/M/keep.*:
 *       candidates named by either are kept;
 *   S3  delete the rest; write gc/M/done with the intents alive then;
 *   C   delete gc/M/ once every intent done lists is gone or expired.
 *
 * Why no interleaving loses a chunk X ∈ M that a snapshot N publishes
 * in R (N's intent I written at W0, its W1 listing at time w):
 *   - w before gc/M/mark was written: I predates P2's listing, so I is in
 *     gc/M/intents and S0 waits until I is gone, i.e. N is published, or
 *     expired, i.e. N will not be published under I.  N's manifest then
 *     exists at S2, which keeps X.
 *   - w sees M not done: N wrote its keep before W3.  If W3 saw no sweep,
 *     the keep predates S1, so S2 reads it and keeps X.  If W3 saw a sweep,
 *     N waits for it to end and confirms X again afterwards; every later
 *     sweep of M reads the keep.
 *   - w sees M done: N confirms X after the deletes (uploading it again).
 *   - w after M was cleaned up (C): every intent alive at done is gone, so
 *     I was written after the deletes, and N saw R only after them.
 * Linearizable listings are assumed (AWS S3, Ceph RGW, a local or NFS
 * directory); clocks need only agree within clock_skew, and only for
 * expiry.  Two prunes at once (a lease lost to a partition) waste work but
 * lose nothing: every rule above is about one mark.
 *
 * Clocks, checked: S0's "expired", the lease's and a sweep record's
 * expiry are times other hosts wrote, read by this host's clock; one
 * running ahead would sweep under an intent a writer still publishes
 * under.  So prune first asks every healthy region for its time
 * (store/region.h, region_clock: the store's clock is the one all hosts
 * share) and stops before the lease, having written and deleted nothing,
 * when this host's clock and a region's disagree by more than clock_skew
 * beyond the measurement's error (CKS_E_CLOCK; the error names the region,
 * both times and the difference).  Writers' clocks are not checked: an
 * intent's expiry is ttl + clock_skew by its own time while the writer
 * stops using it at ttl/2 by its monotonic clock, so a writer's clock
 * matters only when it is behind by more than ttl/2.
 *
 * Forgetting is separate (service/retention.h): a forget record removes a
 * snapshot for every reader at once; prune deletes its manifest and commit
 * records first (P1 treats it as gone) and the forget record last.
 */
#ifndef CKS_GC_H
#define CKS_GC_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/gcrec.h"
#include "service/presence.h"
#include "service/repo.h"

/* ---- writers ----------------------------------------------------------- */

struct gc_intent {
    char name[GC_INTENT_MAX + 1]; /* "" when none is held */
    double t0;                    /* CLOCK_BOOTTIME seconds before its PUT */
    int64_t wall0;                /* its time field (the wall clock) */
    uint64_t ttl;
};

/* The candidate sets of marks seen in a region (read once each). */
struct gc_cache {
    struct gcrec *marks;
    size_t n;
};

void gc_cache_free(struct gc_cache *c);

/* W0: writes an intent in rg (a PUT); 0 or the region's error. */
int gc_intent_begin(struct region *rg, const struct config *conf, struct gc_intent *in);
/* Deletes the intent (errors are logged: an intent left behind only
 * delays prune until it expires). */
void gc_intent_end(struct region *rg, struct gc_intent *in);
/* Is there time left to publish under it (younger than ttl/2)?  Its age
 * is the larger of the time since it was begun (CLOCK_BOOTTIME: a
 * suspended machine's sleep counts) and the wall clock's advance since its
 * time field (what prune's expiry goes by). */
bool gc_intent_fresh(const struct gc_intent *in);
/* W2's check, called immediately before publishing a manifest under in
 * (nothing but the PUT after it): gc_intent_fresh.  When false, the
 * writer must not publish: begin a new intent, run W1 again, confirm every
 * chunk again, and ask again.  Thread-safe.
 * Test hook: with CKPTSYNC_TEST_STOP_BEFORE_PUBLISH=1 in the environment,
 * each call first stops the whole process (SIGSTOP) until a SIGCONT, so a
 * test can hold a writer at this very point (tests/integration/
 * test-stalled-writer.sh). */
bool gc_intent_publishable(const struct gc_intent *in);
/* How often a writer renews and confirms again for one publish before it
 * gives the region up (confirming takes longer than ttl/2 each time). */
#define GC_RECONFIRM_MAX 3

/* W1: items (sorted by presence_item_cmp, as presence_objects makes them)
 * are the distinct objects a snapshot's manifest names: chunks/ keys and
 * (version 6) recipes/<id>.<sig> keys, both prune candidates; sets
 * recheck[k] = 1 for each object that must be confirmed with rg again
 * before the publish.  0; -EAGAIN when a sweep
 * that may delete some of them is under way (try again later); or the
 * region's error.  *ret_waiting names the mark when -EAGAIN. */
int gc_writer_check(struct region *rg, struct gc_cache *cache, const struct config *conf,
                    const struct presence_item *items, size_t n, const char *run, const char *id,
                    uint8_t *recheck, char ret_waiting[GC_MARK_LEN + 1]);

/* ---- prune ------------------------------------------------------------- */

struct gc_opts {
    int64_t grace; /* seconds; -1: the configuration's */
    bool dry_run;
    void (*progress)(void *ud, const char *what, uint64_t done, uint64_t total);
    void *progress_ud;
};

struct gc_region_result {
    int err; /* 0, or why this region was skipped */
    char msg[1024];
    char mark[GC_MARK_LEN + 1];      /* the mark worked on ("" none) */
    const char *state;               /* "clean", "marked", "waiting", "swept", "skipped" */
    char waiting[256];               /* what the sweep waits for */
    uint64_t chunks, chunk_bytes;    /* listed in the region */
    uint64_t marked, marked_bytes;   /* candidates of a new mark */
    uint64_t deleted, deleted_bytes; /* chunks deleted */
    uint64_t kept;                   /* candidates kept (new manifests, keeps) */
    uint64_t snapshots_deleted;      /* forgotten snapshots' manifests removed */
    uint64_t records_deleted;        /* commit, forget and gc records removed */
    uint64_t parts_deleted;          /* multi-node parts and node errors (service/partgc.h) */
    uint64_t litter_deleted;         /* stale temporaries, empty mark folders (region_tidy) */
    uint64_t requests;               /* region requests made */
};

struct gc_result {
    size_t nregions;
    struct gc_region_result region[CONFIG_MAX_REGIONS];
    uint64_t manifests;   /* retained manifests read */
    uint64_t referenced;  /* distinct chunks they name */
    uint64_t forgotten;   /* forgotten snapshots found */
    uint64_t uncommitted; /* unreadable manifests no region committed: not references */
    double seconds;
    char lease_holder[256]; /* when another prune holds the lease */
};

/* One prune: compares this host's clock with every healthy region's
 * (one request each, dry_run too), takes the lease, then for each healthy
 * region finishes earlier marks (sweep, clean up), deletes forgotten
 * snapshots and makes a new mark; with grace 0 and no writer active a new
 * mark is swept at once; last, what interrupted writes left in the region
 * (store/region.h, region_tidy: temporaries and empty mark folders older
 * than intent_ttl + clock_skew).  0 when every
 * healthy region was handled;
 * CKS_E_CLOCK when a region's clock and ours disagree by more than
 * clock_skew, CKS_E_BUSY when another prune holds the lease
 * (res->lease_holder says who): in both cases nothing was written or
 * deleted; another error otherwise (err says what and where; the region's
 * result too).  Nothing is deleted with dry_run.
 * Test hook: with CKPTSYNC_TEST_PRUNE_STOP_AFTER=N in the environment, the
 * process stops (SIGSTOP) once its sweeps have deleted N chunk objects, so
 * a test can kill -9 a prune at that point (test-recipes-read.sh). */
int gc_prune(struct repo *r, const struct gc_opts *o, struct gc_result *res, struct buf *err);

#endif
