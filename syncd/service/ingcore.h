/*
 * ingcore.h — the reading half of every snapshot, one path for
 * `ckptsync snapshot` (service/snapshot.c) and the daemon's ingest
 * (daemon/ingest.c): walk, manifest header, each entry in walk order,
 * each regular file opened, given time to age, identified, taken from the
 * index when unchanged or else read once (FastCDC + SHA-256, the chunks
 * on the worker pool), checked for a change during the read, and added
 * to the manifest with its chunks, mtime and digest.
 *
 * The front ends differ only in how a chunk reaches the regions, which
 * they give as ops: the CLI's job uploads it to every region at once, the
 * daemon's encodes it into the object buffer for its region workers.
 * What they do with the finished manifest (confirm and publish now, or
 * queue it in one index transaction) is theirs too.
 *
 *   struct ingcore c;
 *   ingcore_init(&c, r, &ops, pool, njobs, &opts, err);
 *   ingcore_begin(&c, path)            // walk + manifest header
 *   ... front end: pin, intents ...
 *   ingcore_entries(&c)                // every entry, in walk order
 *   ... c.m is the manifest, c.keys[k] the identity of its file k ...
 *   ingcore_free(&c);
 *
 * Jobs: ops->job_size bytes each, beginning with struct ingcore_job;
 * ops->prepare resets the front end's part before a job is submitted,
 * ops->run runs on pool thread `thread` once j->id is known, and
 * ops->apply takes its outcome in the file's chunk order (also for a job
 * whose run failed, so the front end can count what it did); a failed job
 * then fails the file with j->msg.  prepare, apply, file_read and
 * opts.progress run one at a time (under the core's lock) but, with
 * several readers, on reader threads and interleaved across files: apply
 * is told the chunk's file and place in it, not its place in the
 * manifest.
 *
 * Manifest file k is walk entry k; a pinned unit's file k is PIN/k.
 * Not thread-safe: one caller per struct; the pool is the caller's.
 * Several files are read, cut and hashed at once (opts.readers), each
 * file's chunks in file order and the manifest in walk order: the same
 * manifest whatever the threads' timing.  One huge file still has one
 * reader (a content-defined cut depends on the bytes before it); read
 * serially with a pool of several threads, the whole-file digest runs on
 * a thread of the core's own beside the reading and cutting.
 */
#ifndef CKS_INGCORE_H
#define CKS_INGCORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "engine/manifest.h"
#include "service/pool.h"
#include "service/repo.h"
#include "service/scan.h"
#include "service/walk.h"

struct ingcore;
struct ingcore_digest;
struct ingcore_reader;

struct ingcore_job {
    struct pool_job pj;
    struct ingcore *c;
    struct buf raw; /* a copy of the chunk's bytes */
    size_t file;    /* its manifest file (walk entry) */
    uint64_t off;   /* in its file */
    unsigned width; /* element width from the file's metadata (scan_width), 0: none */
    uint8_t id[HASH_LEN];
    int err;       /* ops->run's result */
    char msg[256]; /* why, when err < 0 (empty: err_str) */
    bool hashed;   /* private: in the file's digest (guarded by the digest thread's lock) */
};

struct ingcore_ops {
    size_t job_size; /* sizeof the front end's job, which begins with struct ingcore_job */
    void (*prepare)(struct ingcore_job *j);
    int (*run)(struct ingcore_job *j, size_t thread);
    /* The job is chunk i (from 0) of manifest file `file`.  A negative
     * return fails the file (and the snapshot). */
    int (*apply)(struct ingcore_job *j, size_t file, size_t i);
    /* Optional: a regular file read whole and unchanged during the read,
     * before its entry is added (the CLI records its identity here, its
     * chunks being in the regions already). */
    int (*file_read)(struct ingcore *c, const struct index_file_key *k,
                     const uint8_t digest[HASH_LEN], const struct mchunk *v, size_t n);
};

struct ingcore_opts {
    const char *run;
    int64_t step;                  /* -1: unknown */
    const char *instance;          /* instance type, NULL: unknown */
    struct region *const *regions; /* handles for reading the run's lineage (its generation) */
    /* No region can be listed to decide the run's generation: true, the
     * front end decides it later, before anything is published (the
     * daemon: c.gen_undecided, daemon/rungen.h); false, ingcore_begin
     * fails with CKS_E_REMOTE, err naming each region (the CLI). */
    bool gen_later;
    /* Files read and cut at once, each on a reader thread of the core's
     * own (0: one per pool thread); fewer when the files to read are fewer
     * or the in-flight bound (njobs) leaves less room: see ingcore.c. */
    size_t readers;
    /* Reads of a file that changed while it was read before giving up
     * with CKS_E_CHANGED (1: at once, the caller takes the unit again). */
    int retries;
    /* An unchanged file's chunks are taken from the index only when the
     * index has each in every region slot this returns (NULL: always). */
    uint32_t (*reuse_need)(void *ud);
    void (*progress)(void *ud, uint64_t done, uint64_t total);
    void *ud;
};

struct ingcore {
    struct repo *r;
    const struct ingcore_ops *ops;
    struct ingcore_opts o;
    struct buf *err; /* the caller's: a message naming what failed */
    struct walk w;
    struct manifest m;
    struct index_file_key *keys; /* per manifest file: its identity (regular files) */
    /* Set by the front end after ingcore_begin, both optional: */
    const char *pin;         /* open regular file k as PIN/k */
    const struct stat *kept; /* per walk entry: found unchanged before the read (st_ino 0: no) */
    /* m.gen is a placeholder (0): no region answered (opts.gen_later) */
    bool gen_undecided;
    /* counts */
    uint64_t files, dirs, links, bytes, chunks, files_unchanged, done;
    /* the number of files read at once by the last ingcore_entries (1: serially) */
    size_t readers_used;
    /* private */
    struct pool *pool;
    unsigned char *jobs;
    struct pool_job **jptr;
    size_t njobs;
    pthread_mutex_t mu; /* ops->apply and file_read, done, files_unchanged, progress */
    bool mu_ok;
    struct ingcore_reader *rd0; /* the serial reader (on the caller's thread) */
    struct ingcore_digest *dg;  /* its digest thread, with a pool of several threads
                                 * and file_digest = sha256 */
    enum mdigest_kind dkind;    /* the files' digest kind ([snapshot] file_digest) */
};

/* njobs chunks in flight at most (each holds a copy of its bytes). */
int ingcore_init(struct ingcore *c, struct repo *r, const struct ingcore_ops *ops,
                 struct pool *pool, size_t njobs, const struct ingcore_opts *o, struct buf *err);
void ingcore_free(struct ingcore *c);
/* Lists path and fills the manifest's header (id, run, step, time, host,
 * chunker, root, instance, parent, generation: runlineage_run_gen, see
 * opts.gen_later for when no region answers). */
int ingcore_begin(struct ingcore *c, const char *path);
/* Every walk entry into the manifest.  CKS_E_CHANGED: a file kept
 * changing (retries reads), or a kept file's record went meanwhile. */
int ingcore_entries(struct ingcore *c);
/* Opens manifest file k for reading (PIN/k when pinned); -errno, with a
 * message in the caller's err. */
int ingcore_open(struct ingcore *c, size_t k);
/* In t: one reference more on each chunk of the manifest (a chunk the
 * index does not know yet is recorded with its length) and the snapshot's
 * record (step, time, bytes, files; no region committed yet).  Made once
 * per snapshot, in the transaction that creates its record, so a retried
 * commit never counts a chunk twice. */
int ingcore_record(const struct ingcore *c, struct index_txn *t);
/* 1 when the index knows a file by identity k and has each of its chunks
 * in every slot of need (0: no condition): its digest and chunks in
 * digest and *ret_v (the caller frees; ret_v NULL: not wanted).  The
 * digest is of r's [snapshot] file_digest kind (k's own kind is not
 * looked at): the SHA-256 of a SHA-256 record, or the chunk tree of the
 * chunks of a tree record or, failing one, of a SHA-256 record. */
int ingcore_known(struct repo *r, const struct index_file_key *k, uint32_t need,
                  uint8_t digest[HASH_LEN], struct mchunk **ret_v, size_t *ret_n);

#endif
