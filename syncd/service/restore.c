/*
 * restore.c — fetch, verify, write, fsync, rename.
 *
 * Design notes.
 * - The manifest is trusted for nothing: it was parsed by the bounded
 *   parser (paths relative and clean, symlinks staying inside), and on top
 *   of that every directory is entered with openat(O_NOFOLLOW|O_DIRECTORY)
 *   from the staging directory's descriptor, so even a symlink the
 *   manifest itself created cannot be walked through.
 * - Writes go to a fresh staging directory; the snapshot's single root
 *   entry is renamed into the target only when every file is verified and
 *   fsynced.  Directory modes are applied last (a 0555 directory must
 *   still receive its files).  An existing tree (--force) is exchanged
 *   with the new one in one rename, so the target names a complete tree
 *   at every instant; the old tree is deleted after, with the staging
 *   directory, and what a killed restore left is removed by the next.
 * - Chunks are fetched all at once by service/fetch.c: chunk i first from
 *   healthy region i mod n, each region with many requests in flight, so
 *   the regions' bandwidth adds up; a failing region costs one retry per
 *   chunk, never the restore.  Chunks land out of order (pwrite at their
 *   offsets) through io_uring, so disk writes overlap the downloads.
 * - Every core, no serial stage: fetch's parts decode and verify chunks
 *   on their own threads and call rst_chunk concurrently; each part
 *   pwrites its chunks itself (with one part, through io_uring).  Each
 *   file's whole-file digest is computed in chunk order: a part hashes the
 *   chunk in hand when it is its file's next, and no more; a chunk that
 *   arrives early is kept in memory (a sixteenth of the budget) or marked
 *   for reading back, and a file whose next chunk is waiting is queued for
 *   the finishing threads (one per worker), which catch its digest up.  So
 *   the digests of different files run on several threads at once, no
 *   thread reads every byte back, and no part inherits the hashing of
 *   the chunks the others delivered early.  One file's SHA-256 is serial by
 *   nature: one huge file is hashed at one core's rate.  With one
 *   part (workers = 1) the part catches up itself.  The same threads
 *   finish each verified file (mode, times, fsync, close), off the
 *   fetching threads.
 * - A file whose digest is a chunk tree (manifest version 5,
 *   engine/filedigest.h) is not hashed at all here: each chunk was
 *   verified against its id by whoever handed it to rst_chunk (fetch, or
 *   the seed's check), which records that id and the length it wrote
 *   (leaf, per manifest chunk); when the file's last chunk is written the
 *   tree over those records must equal the manifest's digest.  No pass
 *   over the bytes and no ordering between chunks: a huge file restores
 *   at the rate of every part together.
 * - Priority: the chunks are asked for in the order of restore_group()
 *   (metadata, weights, master weights, optimizer state), group by group:
 *   the next group's requests take no more than [restore] inflight bytes
 *   of the link while the group before is still arriving (fetch.h); with
 *   --progressive each finished file is renamed to its final path, group
 *   by group (rst_place_ready), and a chunk that no region has intact
 *   fails the restore only after every other file is placed.
 * - After the rename, the restored files enter the index, and every
 *   region holding the manifest is recorded as holding its chunks (the
 *   manifest is published only after all its chunks are), so the next
 *   snapshot does not read or upload them again.  The snapshot itself
 *   enters it before the tree appears (rst_record): committed in those
 *   regions, and, under the watch root, as what the unit is (so a daemon
 *   does not take the tree it sees appear as a new snapshot, and answers
 *   a commit of it with the snapshot, durable only when those regions
 *   are a quorum).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/log.h"
#include "engine/filedigest.h"
#include "engine/rankbind.h"
#include "engine/ref.h"
#include "service/fetch.h"
#include "service/recipar.h"
#include "service/recipe.h"
#include "service/catalog.h"
#include "service/restore.h"
#include "service/scan.h"
#include "service/snaprec.h"
#include "service/unitmark.h"
#include "service/walk.h"
#include "service/wring.h"
#include "store/layout.h"

/* ---- writing ----------------------------------------------------------- */

/* Opens the parent directory of rel under root, creating missing
 * directories, never following a symlink.  *ret_name points into rel. */
static int restore_parent(int root, const char *rel, int *ret_fd, const char **ret_name)
{
    int fd = dup(root);
    const char *p = rel, *slash;
    char comp[MANIFEST_MAX_COMPONENT + 1];

    if (fd < 0)
        return -errno;
    while ((slash = strchr(p, '/'))) {
        size_t n = (size_t)(slash - p);
        if (n > MANIFEST_MAX_COMPONENT) {
            close(fd);
            return CKS_E_UNSAFE_PATH;
        }
        memcpy(comp, p, n);
        comp[n] = 0;
        if (mkdirat(fd, comp, 0700) < 0 && errno != EEXIST) {
            int e = -errno;
            close(fd);
            return e;
        }
        int sub = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = -errno;
        close(fd);
        if (sub < 0)
            return e == -ELOOP || e == -ENOTDIR ? CKS_E_UNSAFE_PATH : e;
        fd = sub;
        p = slash + 1;
    }
    *ret_fd = fd;
    *ret_name = p;
    return 0;
}

struct rfile;

#define RST_FIN_MAX 8 /* finishing threads at most */

struct rst {
    struct repo *r;
    const struct restore_opts *o;
    struct restore_result *res;
    struct buf *err;
    struct manifest m;
    int stage;        /* staging directory fd: regular files are written here */
    int tree;         /* where directories and links are made: stage, or target (progressive) */
    int target;       /* the target directory */
    uint32_t holders; /* slots of the regions that hold the manifest (rst_record) */
    char stage_name[MANIFEST_ID_MAX + 32];
    bool marked; /* --progressive: the staging directory says what was placed */
    bool late;   /* rst_finish_files() runs */
    /* Chunks arrive on several threads at once (fetch.h, FETCH_CONCURRENT):
     * mu guards the ring, err, res, done, stash_bytes and the finishing
     * queue; each file's own state has its own lock (struct rfile).  Lock
     * order: a file's, then mu; pmu (placing) before mu; nothing slow
     * (hashing, reading back, fsync) runs under mu. */
    pthread_mutex_t mu;
    /* One part: writes go through io_uring, so the disk overlaps the
     * downloads.  Several: each part's thread writes its chunks itself
     * (pwrite, no lock), which is the overlap, and a ring shared under mu
     * would run every part's writes through one lock (io_uring performs a
     * buffered write inline at submit). */
    bool direct;
    /* Finishing: a file whose digest matched is queued (fq, FIFO, each file
     * once) for the finishing threads, which set its mode and times, fsync
     * and close it, and with --progressive place it; so no fetch part waits
     * for a disk flush, and several flushes run at once. */
    pthread_t fin[RST_FIN_MAX];
    size_t nfin;
    bool fstop;
    pthread_cond_t fcv;
    size_t *fq;
    size_t fhead, ftail;
    int ferr;
    /* With several parts (handoff), a part hashes the chunk in hand when it
     * is its file's next, and no more: a file whose next chunk was kept or
     * marked is queued (hq, a ring of nfiles, each file once at a time) for
     * the same threads, which catch its digest up.  Hashing chunks that
     * wait for an earlier one is thus spread over those threads instead of
     * falling on whichever part lags (which would then lag more). */
    bool handoff;
    size_t *hq;
    size_t hhead, htail;
    bool *hqueued; /* per file: in hq; apart from struct rfile's own state */
    /* Progressive placing, under pmu: files are renamed from the staging
     * tree to the target in group order (restore_group()); a finished file
     * of a later group waits until every file of the earlier ones is
     * placed. */
    pthread_mutex_t pmu;
    uint8_t *group;                /* per manifest file */
    bool *skip;                    /* per manifest file: excluded (--exclude) */
    size_t gleft[RESTORE_NGROUPS]; /* regular files not placed, per group */
    int cur_group;                 /* the group being placed */
    size_t *waiting;               /* finished files of later groups */
    size_t nwaiting;
    struct wring wr; /* io_uring writes */
    uint64_t done, total;
    uint64_t stash_bytes, stash_budget;
    struct rfile *rfiles;    /* per manifest file */
    size_t *chunk_file;      /* per manifest chunk: its file */
    uint64_t *chunk_off;     /* per manifest chunk: its offset */
    struct mchunk *leaf;     /* per manifest chunk of a tree file: the id it was
                              * verified against and the length written (len 0:
                              * not yet) */
    struct recipe_src *rsrc; /* version 6: rebuilds the recipe chunks (rst_recipes) */
    struct seed *seed;       /* local files lending chunks and recipe bases */
};

/* A chunk that arrived before its turn in its file's digest, kept. */
struct stashed {
    struct stashed *next;
    uint64_t c; /* within the file */
    size_t len;
    uint8_t data[];
};

/* Per regular file while its chunks arrive.  The whole-file digest is
 * computed in chunk order: the thread whose chunk is next hashes it (no
 * lock held), then every kept chunk that has become next.  A chunk that
 * arrives early is kept in memory while the stash budget lasts, else
 * marked and read back from the file when its turn comes. */
struct rfile {
    pthread_mutex_t mu;
    bool mu_init;
    int fd;
    uint64_t remaining; /* chunks not arrived */
    struct hash h;
    bool hashing;
    bool busy; /* a thread is hashing this file's chunks */
    bool closing;
    bool finished; /* digest matched, mode and times set, fsynced, closed */
    bool placed;   /* --progressive: at its final path */
    uint64_t next; /* next chunk (within the file) to hash */
    struct stashed *stash;
    uint8_t *early; /* bitmap: arrived, not kept, not hashed yet */
};

static int rst_fail(struct rst *s, const struct mfile *f, const char *what, int e)
{
    pthread_mutex_lock(&s->mu);
    if (!buf_str(s->err)[0])
        buf_printf(s->err, "%s \"%s\": %s", what, f->path, err_str(e));
    pthread_mutex_unlock(&s->mu);
    return e;
}

static int rst_drain(struct rst *s)
{
    if (s->direct) /* every pwrite returned: nothing in flight */
        return 0;
    pthread_mutex_lock(&s->mu);
    int e = wring_drain(&s->wr);
    pthread_mutex_unlock(&s->mu);
    return e;
}

/* Reads manifest chunk g back from fd (its file, where it was written) into
 * back and adds it to h.  A short read is -EIO: the file was created at its
 * full size (rst_open()), so a chunk is never past its end.  No lock held. */
static int rst_hash_back(const struct rst *s, size_t g, int fd, struct buf *back, struct hash *h)
{
    uint32_t len = s->m.chunks[g].len;
    buf_reset(back);
    int e = buf_reserve(back, len);
    ssize_t n = e == 0 ? pread(fd, back->data, len, (off_t)s->chunk_off[g]) : 0;
    if (e == 0 && n != (ssize_t)len)
        e = n < 0 ? -errno : -EIO;
    if (e == 0)
        hash_update(h, back->data, len);
    return e;
}

/* Called with rf->mu held and rf->busy set: hashes the chunks kept or
 * marked that are next in line (kept ones from memory, marked ones read
 * back after their writes completed), releasing the lock while hashing. */
static int rst_hash_catchup(struct rst *s, size_t k)
{
    const struct mfile *f = &s->m.files[k];
    struct rfile *rf = &s->rfiles[k];
    struct buf back = BUF_INIT;
    int e = 0;
    while (e == 0 && rf->next < f->nchunks) {
        struct stashed **pp = &rf->stash;
        while (*pp && (*pp)->c != rf->next)
            pp = &(*pp)->next;
        struct stashed *kept = *pp;
        bool marked = rf->early[rf->next / 8] >> (rf->next % 8) & 1;
        if (!kept && !marked)
            break;
        size_t g = (size_t)(f->first_chunk + rf->next);
        int fd = rf->fd;
        if (kept)
            *pp = kept->next;
        pthread_mutex_unlock(&rf->mu);
        if (kept) {
            hash_update(&rf->h, kept->data, kept->len);
            pthread_mutex_lock(&s->mu);
            s->stash_bytes -= kept->len;
            pthread_mutex_unlock(&s->mu);
            free(kept);
        } else {
            /* its write was submitted before it was marked; marks made
             * while this loop hashed came after any earlier drain */
            e = rst_drain(s);
            if (e == 0)
                e = rst_hash_back(s, g, fd, &back, &rf->h);
        }
        pthread_mutex_lock(&rf->mu);
        if (e == 0)
            rf->next++;
    }
    buf_free(&back);
    return e;
}

static void rst_fin_push(struct rst *s, size_t k);

/* The tree over the chunks of f as verified and written (s->leaf); a
 * chunk not recorded (never: rf->remaining counts them) leaves a zero
 * leaf, which no tree of the manifest's can match. */
static int rst_tree_digest(const struct rst *s, const struct mfile *f, uint8_t digest[HASH_LEN])
{
    return filedigest_tree(s->leaf + f->first_chunk, (size_t)f->nchunks, digest);
}

/* All chunks are written and hashed: the digest must match the manifest's;
 * then the file goes to the finishing threads (rst_finish_file).  One
 * caller per file (rf->closing). */
static int rst_file_done(struct rst *s, size_t k)
{
    const struct mfile *f = &s->m.files[k];
    struct rfile *rf = &s->rfiles[k];
    uint8_t digest[HASH_LEN];
    int e = 0;
    if (f->dkind == MDIGEST_TREE)
        e = rst_tree_digest(s, f, digest);
    else if (!rf->hashing) /* an empty file */
        hash_sha256("", 0, digest);
    else
        hash_final(&rf->h, digest);
    if (e < 0)
        return rst_fail(s, f, "computing the chunk tree of", e);
    /* the ring's writes of this file complete before its fsync */
    if ((e = rst_drain(s)) < 0)
        return rst_fail(s, f, "writing", e);
    if (memcmp(digest, f->digest, HASH_LEN) != 0) {
        pthread_mutex_lock(&s->mu);
        buf_reset(s->err);
        buf_printf(s->err, "\"%s\": %s does not match the manifest", f->path,
                   f->dkind == MDIGEST_TREE ? "chunk-tree digest" : "whole-file digest");
        pthread_mutex_unlock(&s->mu);
        return CKS_E_DIGEST;
    }
    rst_fin_push(s, k);
    return 0;
}

static int rst_open(struct rst *s, size_t k, int flags)
{
    const struct mfile *f = &s->m.files[k];
    const char *name;
    int dirfd, e = restore_parent(s->stage, f->path, &dirfd, &name);
    if (e < 0)
        return rst_fail(s, f, "opening the directory of", e);
    int fd = openat(dirfd, name, flags | O_NOFOLLOW | O_CLOEXEC, 0600);
    e = fd < 0 ? -errno : 0;
    close(dirfd);
    /* At its full size from the start: a chunk of zeros that is not
     * written (restore_zero_chunk()) stays a hole, and reading a chunk
     * back never meets the end of the file. */
    if (e == 0 && (flags & O_CREAT) && ftruncate(fd, (off_t)f->size) < 0) {
        e = -errno;
        close(fd);
    }
    if (e < 0)
        return rst_fail(s, f, (flags & O_CREAT) ? "creating" : "opening", e);
    s->rfiles[k].fd = fd;
    return 0;
}

/* Keeps chunk c (early) in memory when the budget allows; else marks it
 * for reading back (its write was submitted: rst_hash_catchup drains the
 * ring first, pwrite has returned).  rf->mu held. */
static void rst_keep(struct rst *s, struct rfile *rf, uint64_t c, const uint8_t *data, size_t len)
{
    struct stashed *kept = NULL;
    pthread_mutex_lock(&s->mu);
    bool fits = s->stash_bytes + len <= s->stash_budget;
    if (fits)
        s->stash_bytes += len;
    pthread_mutex_unlock(&s->mu);
    if (fits && (kept = malloc(sizeof(*kept) + len))) {
        kept->c = c;
        kept->len = len;
        memcpy(kept->data, data, len);
        kept->next = rf->stash;
        rf->stash = kept;
        return;
    }
    if (fits) { /* out of memory: read back instead */
        pthread_mutex_lock(&s->mu);
        s->stash_bytes -= len;
        pthread_mutex_unlock(&s->mu);
    }
    rf->early[c / 8] |= (uint8_t)(1u << (c % 8));
}

/* The file of chunk's k open, its digest started; its descriptor. */
static int rst_prepare(struct rst *s, size_t k, int *ret_fd)
{
    struct rfile *rf = &s->rfiles[k];
    int e = 0;
    pthread_mutex_lock(&rf->mu);
    if (rf->fd < 0)
        e = rst_open(s, k, O_RDWR);
    if (e == 0 && s->m.files[k].dkind == MDIGEST_SHA256 && !rf->hashing &&
        (e = hash_init(&rf->h)) == 0)
        rf->hashing = true;
    *ret_fd = rf->fd;
    pthread_mutex_unlock(&rf->mu);
    return e;
}

/* Writes a chunk at off: pwrite with several parts, else through the ring.
 * An all-zero chunk is left a hole (the file was created at full size). */
static int rst_write(struct rst *s, int fd, const uint8_t *data, size_t len, uint64_t off)
{
    if (restore_zero_chunk(data, len))
        return 0;
    if (s->direct)
        return fileio_pwrite_full(fd, data, len, (off_t)off);
    pthread_mutex_lock(&s->mu);
    int e = wring_write(&s->wr, fd, data, len, off);
    pthread_mutex_unlock(&s->mu);
    return e;
}

/* true when file k's next chunk to hash has arrived (kept or marked);
 * rf->mu held. */
static bool rst_next_here(const struct rst *s, size_t k)
{
    const struct rfile *rf = &s->rfiles[k];
    if (rf->next >= s->m.files[k].nchunks)
        return false;
    if (rf->early[rf->next / 8] >> (rf->next % 8) & 1)
        return true;
    for (const struct stashed *x = rf->stash; x; x = x->next)
        if (x->c == rf->next)
            return true;
    return false;
}

/* Queues file k for its digest's catching up (rst_hash_queued); rf->mu
 * held, takes mu. */
static void rst_hash_push(struct rst *s, size_t k)
{
    pthread_mutex_lock(&s->mu);
    if (!s->hqueued[k]) {
        s->hqueued[k] = true;
        s->hq[s->htail++ % s->m.nfiles] = k; /* each file once: room for all */
        pthread_cond_signal(&s->fcv);
    }
    pthread_mutex_unlock(&s->mu);
}

/* Catches file k's digest up (on a finishing thread); a file someone else
 * hashes is left to them: they queue it again when they stop and its next
 * chunk is there. */
static int rst_hash_queued(struct rst *s, size_t k)
{
    const struct mfile *f = &s->m.files[k];
    struct rfile *rf = &s->rfiles[k];
    pthread_mutex_lock(&rf->mu);
    if (rf->busy || rf->closing) {
        pthread_mutex_unlock(&rf->mu);
        return 0;
    }
    rf->busy = true;
    int e = rst_hash_catchup(s, k);
    rf->busy = false;
    bool done = e == 0 && !rf->remaining && rf->next == f->nchunks && !rf->closing;
    rf->closing |= done;
    pthread_mutex_unlock(&rf->mu);
    if (e < 0)
        return rst_fail(s, f, "reading back", e);
    return done ? rst_file_done(s, k) : 0;
}

static void rst_count(struct rst *s, size_t len)
{
    pthread_mutex_lock(&s->mu);
    s->done += len;
    if (s->o->progress)
        s->o->progress(s->o->progress_ud, s->done, s->total);
    pthread_mutex_unlock(&s->mu);
}

/* A chunk of a tree file, written: its leaf recorded (the id j was
 * verified against, the length written); the last to arrive closes the
 * file, whose tree rst_file_done checks. */
static int rst_chunk_leaf(struct rst *s, const struct fetch_job *j, size_t k, size_t len)
{
    struct rfile *rf = &s->rfiles[k];
    struct mchunk *leaf = &s->leaf[j->tag];
    memcpy(leaf->id, j->id, HASH_LEN);
    leaf->len = (uint32_t)len;
    pthread_mutex_lock(&rf->mu);
    rf->remaining--;
    bool done = !rf->remaining && !rf->closing;
    rf->closing |= done;
    pthread_mutex_unlock(&rf->mu);
    rst_count(s, len);
    return done ? rst_file_done(s, k) : 0;
}

static int rst_chunk(void *ud, const struct fetch_job *j, const uint8_t *data, size_t len)
{
    struct rst *s = ud;
    size_t k = s->chunk_file[j->tag];
    struct rfile *rf = &s->rfiles[k];
    const struct mfile *f = &s->m.files[k];
    uint64_t c = j->tag - f->first_chunk;
    int e = 0;

    pthread_mutex_lock(&s->mu);
    e = s->ferr;
    pthread_mutex_unlock(&s->mu);
    if (e < 0)
        return e; /* finishing a file failed: stop fetching */
    int fd;
    if ((e = rst_prepare(s, k, &fd)) < 0)
        return e;
    if ((e = rst_write(s, fd, data, len, s->chunk_off[j->tag])) < 0)
        return rst_fail(s, f, "writing", e);
    if (f->dkind == MDIGEST_TREE)
        return rst_chunk_leaf(s, j, k, len);

    pthread_mutex_lock(&rf->mu);
    if (c == rf->next && !rf->busy) {
        rf->busy = true;
        pthread_mutex_unlock(&rf->mu);
        hash_update(&rf->h, data, len);
        pthread_mutex_lock(&rf->mu);
        rf->next++;
        if (!s->handoff)
            e = rst_hash_catchup(s, k);
        rf->busy = false;
    } else {
        rst_keep(s, rf, c, data, len);
    }
    rf->remaining--;
    if (s->handoff && !rf->busy && rst_next_here(s, k))
        rst_hash_push(s, k);
    /* The last to finish (the last arrival, or the hasher of the last
     * chunk) closes the file. */
    bool done = e == 0 && !rf->remaining && rf->next == f->nchunks && !rf->busy && !rf->closing;
    rf->closing |= done;
    pthread_mutex_unlock(&rf->mu);
    if (e < 0)
        return rst_fail(s, f, "reading back", e);
    rst_count(s, len);
    return done ? rst_file_done(s, k) : 0;
}

/* ---- seeding from local files ----------------------------------------- */

struct seed_ref {
    uint8_t id[HASH_LEN];
    uint32_t len;
    uint32_t file; /* index into seed.w */
    uint64_t off;
    bool known; /* from the index's record of the file (its identity matched) */
};

struct seed { /* the files of --seed DIR, else the target's the index knows */
    const struct repo *r;
    struct walk w;
    struct seed_ref *v;
    size_t n, cap;
    uint32_t cur;
    bool known; /* the file being added is one the index knows */
};

static int seed_add(struct seed *sd, const uint8_t id[HASH_LEN], uint32_t len, uint64_t off)
{
    if (sd->n == sd->cap) {
        size_t cap = sd->cap ? sd->cap * 2 : 256;
        struct seed_ref *v = realloc(sd->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        sd->v = v;
        sd->cap = cap;
    }
    struct seed_ref *x = &sd->v[sd->n++];
    memcpy(x->id, id, HASH_LEN);
    x->len = len;
    x->file = sd->cur;
    x->off = off;
    x->known = sd->known;
    return 0;
}

static int seed_chunk(void *ud, const uint8_t *data, size_t len, uint64_t off)
{
    uint8_t id[HASH_LEN];
    struct seed *sd = ud;
    repo_chunk_id(sd->r, data, len, id);
    return seed_add(sd, id, (uint32_t)len, off);
}

/* The chunks of one seed file: from the index when it knows the file
 * (keyed with or without ctime: the CLI's and the daemon's keys), else by
 * reading and cutting it. */
static int seed_file(struct rst *s, struct seed *sd, struct scan *sc, int fd)
{
    struct stat st;
    struct index_txn *t;
    struct mchunk *v = NULL;
    size_t n = 0;
    uint8_t digest[HASH_LEN];
    uint64_t got;
    if (fstat(fd, &st) < 0)
        return -errno;
    struct index_file_key k;
    index_file_key_of(&st, &k);
    int e = index_txn_begin(repo_index(s->r), false, &t);
    if (e == 0) { /* its chunks: from a record of either digest kind */
        e = index_file_get(t, &k, digest, &v, &n);
        k.kind = MDIGEST_TREE;
        if (e == -ENOENT)
            e = index_file_get(t, &k, digest, &v, &n);
        index_txn_abort(t);
    }
    sd->known = e == 0;
    if (e == 0) {
        uint64_t off = 0;
        for (size_t i = 0; i < n && e == 0; i++) {
            e = seed_add(sd, v[i].id, v[i].len, off);
            off += v[i].len;
        }
        free(v);
        return e;
    }
    if (!s->o->seed)
        return 0; /* the implicit seed (the target) only lends what the index knows */
    return scan_fd(sc, fd, seed_chunk, sd, &got, NULL);
}

static int seed_ref_cmp(const void *a, const void *b)
{
    return memcmp(((const struct seed_ref *)a)->id, ((const struct seed_ref *)b)->id, HASH_LEN);
}

static int seed_build(struct rst *s, struct seed *sd)
{
    struct buf err = BUF_INIT, path = BUF_INIT;
    struct scan sc;
    const char *dir = s->o->seed ? s->o->seed : s->o->target;
    int e = walk_list(dir, &sd->w, &err);
    if (e < 0) {
        if (s->o->seed)
            log_warn("seed \"%s\" not used: %s", dir, buf_str(&err));
        buf_free(&err);
        return 0;
    }
    if ((e = scan_init(&sc, repo_chunker(s->r))) < 0)
        return e;
    for (size_t k = 0; k < sd->w.n && e == 0; k++) {
        if (sd->w.v[k].type != MFILE_REG || strstr(sd->w.v[k].path, "/.ckptsync-restore."))
            continue;
        buf_reset(&path);
        buf_printf(&path, "%s/%s", sd->w.base, sd->w.v[k].path);
        int fd = open(buf_str(&path), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        sd->cur = (uint32_t)k;
        e = seed_file(s, sd, &sc, fd);
        close(fd);
    }
    scan_free(&sc);
    buf_free(&path);
    buf_free(&err);
    if (sd->n > 1)
        qsort(sd->v, sd->n, sizeof(*sd->v), seed_ref_cmp);
    return e;
}

/* Reads chunk id (len bytes) from the seed into tmp, checked against its
 * id: RECIPE_LOCAL_CHECKED, 0 when the seed does not hold it intact (a
 * file changed or gone since it was cut: *stale), or -ENOMEM.  Every place
 * the seed holds the id is tried.  trust: a place in a file the index
 * knows (its identity matched the record) is read unchecked and gives
 * RECIPE_LOCAL_TRUSTED (a recipe's base: recipar checks the recipe). */
static int seed_read(struct rst *s, struct seed *sd, const uint8_t id[HASH_LEN], uint32_t len,
                     bool trust, struct buf *tmp, bool *stale)
{
    struct seed_ref key, *hit;
    uint8_t got[HASH_LEN];
    memcpy(key.id, id, HASH_LEN);
    hit = sd->n ? bsearch(&key, sd->v, sd->n, sizeof(*sd->v), seed_ref_cmp) : NULL;
    if (!hit)
        return 0;
    while (hit > sd->v && !memcmp(hit[-1].id, id, HASH_LEN))
        hit--;
    buf_reset(tmp);
    if (buf_reserve(tmp, len) < 0)
        return -ENOMEM;
    for (; hit < sd->v + sd->n && !memcmp(hit->id, id, HASH_LEN); hit++) {
        if (hit->len != len)
            continue;
        struct buf path = BUF_INIT;
        buf_printf(&path, "%s/%s", sd->w.base, sd->w.v[hit->file].path);
        int fd = open(buf_str(&path), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        buf_free(&path);
        ssize_t n = fd < 0 ? -1 : pread(fd, tmp->data, len, (off_t)hit->off);
        if (fd >= 0)
            close(fd);
        if (n == (ssize_t)len && trust && hit->known) {
            tmp->len = len;
            return RECIPE_LOCAL_TRUSTED;
        }
        if (n == (ssize_t)len) {
            repo_chunk_id(s->r, tmp->data, len, got);
            if (memcmp(got, id, HASH_LEN) == 0) {
                tmp->len = len;
                return RECIPE_LOCAL_CHECKED;
            }
        }
        *stale = true;
    }
    return 0;
}

/* Copies the job's chunk from the seed if it is there and intact. */
static int seed_copy(struct rst *s, struct seed *sd, struct fetch_job *j, struct buf *tmp)
{
    bool stale = false;
    int c = seed_read(s, sd, j->id, j->len, false, tmp, &stale);
    if (c <= 0)
        return c; /* not there, or changed since it was cut: download it */
    int e = rst_chunk(s, j, tmp->data, j->len);
    if (e == 0) {
        s->res->local_chunks++;
        s->res->local_bytes += j->len;
    }
    return e < 0 ? e : 1;
}

/* recipar's local source (recipe_src_set_local; several threads at once:
 * the seed is only read): a recipe's base read from the seed, checked,
 * or trusted when the index knows its file (recipar checks the recipes
 * built on it, and fetches it when one fails: local_bases_refetched); one
 * the seed lost or holds changed is counted and left to the regions. */
static int seed_base(void *ud, const uint8_t id[HASH_LEN], uint32_t len, struct buf *out)
{
    struct rst *s = ud;
    bool stale = false;
    int c = seed_read(s, s->seed, id, len, true, out, &stale);
    if (c > 0) { /* recipar's threads: counted atomically */
        __atomic_add_fetch(&s->res->local_bases, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&s->res->local_base_bytes, len, __ATOMIC_RELAXED);
    } else if (c == 0 && stale) {
        __atomic_add_fetch(&s->res->local_bases_stale, 1, __ATOMIC_RELAXED);
    }
    return c;
}

static void seed_free(struct seed *sd)
{
    if (!sd)
        return;
    walk_free(&sd->w);
    free(sd->v);
    free(sd);
}

/* Serves what the seed has; compacts jobs to what is left to download.
 * The seed is kept in s->seed for the recipes' bases (seed_base). */
static int seed_serve(struct rst *s, struct fetch_job *jobs, size_t *n)
{
    struct seed *sd = calloc(1, sizeof(*sd));
    struct buf tmp = BUF_INIT;
    size_t out = 0;
    if (!sd)
        return -ENOMEM;
    sd->r = s->r;
    s->seed = sd;
    int e = seed_build(s, sd);
    for (size_t i = 0; i < *n && e == 0; i++) {
        int c = sd->n ? seed_copy(s, sd, &jobs[i], &tmp) : 0;
        if (c < 0)
            e = c;
        else if (c == 0)
            jobs[out++] = jobs[i];
    }
    if (e == 0)
        *n = out;
    buf_free(&tmp);
    return e;
}

/* ---- finishing and placing -------------------------------------------- */

static bool rst_times(const struct mfile *f, struct timespec ts[2]);

/* Queues file k (its digest matched) for the finishing threads. */
static void rst_fin_push(struct rst *s, size_t k)
{
    pthread_mutex_lock(&s->mu);
    s->fq[s->ftail++] = k; /* room for every file: each is pushed once */
    pthread_cond_signal(&s->fcv);
    pthread_mutex_unlock(&s->mu);
}

/* Renames finished file k from the staging tree to its final path and
 * says so (restore_opts.placed); pmu held. */
static int rst_place_one(struct rst *s, size_t k)
{
    const struct mfile *f = &s->m.files[k];
    int sd, td, e;
    const char *sn, *tn;
    if ((e = restore_parent(s->stage, f->path, &sd, &sn)) < 0)
        return rst_fail(s, f, "placing", e);
    if ((e = restore_parent(s->target, f->path, &td, &tn)) == 0) {
        if (renameat(sd, sn, td, tn) < 0)
            e = -errno;
        close(td);
    }
    close(sd);
    if (e < 0)
        return rst_fail(s, f, "placing", e);
    pthread_mutex_lock(&s->rfiles[k].mu);
    s->rfiles[k].placed = true;
    pthread_mutex_unlock(&s->rfiles[k].mu);
    if (s->o->placed)
        s->o->placed(s->o->placed_ud, f->path, f->size, restore_group_name(s->group[k]));
    return 0;
}

/* Tests: CKPTSYNC_TEST_RESTORE_HOLD_AFTER=GROUP stops the process
 * (SIGSTOP) once every file of GROUP is placed, so a test can look at a
 * half-placed tree, or kill the restore there, at a known point. */
static void rst_test_hold(int g)
{
    const char *h = getenv("CKPTSYNC_TEST_RESTORE_HOLD_AFTER");
    if (h && !strcmp(h, restore_group_name(g)))
        raise(SIGSTOP);
}

/* --progressive: finished file k is placed when its group's turn has
 * come, else it waits; the last placement of a group lets the waiting
 * files of the next go. */
static int rst_place_ready(struct rst *s, size_t k)
{
    int e = 0;
    pthread_mutex_lock(&s->pmu);
    s->waiting[s->nwaiting++] = k; /* room for every file: each comes once */
    while (e == 0 && s->cur_group < RESTORE_NGROUPS) {
        for (size_t i = 0; e == 0 && i < s->nwaiting;) {
            size_t w = s->waiting[i];
            if (s->group[w] != s->cur_group) {
                i++;
                continue;
            }
            s->waiting[i] = s->waiting[--s->nwaiting];
            if ((e = rst_place_one(s, w)) == 0)
                s->gleft[s->cur_group]--;
        }
        if (e < 0 || s->gleft[s->cur_group])
            break;
        rst_test_hold(s->cur_group++);
    }
    pthread_mutex_unlock(&s->pmu);
    return e;
}

/* A verified file: its mode and times, fsync, close; counted; placed
 * (--progressive).  On a finishing thread. */
static int rst_finish_file(struct rst *s, size_t k)
{
    const struct mfile *f = &s->m.files[k];
    struct rfile *rf = &s->rfiles[k];
    struct timespec ts[2];
    int e = 0;
    if (fchmod(rf->fd, f->mode) < 0 || (rst_times(f, ts) && futimens(rf->fd, ts) < 0) ||
        fsync(rf->fd) < 0)
        e = -errno;
    close(rf->fd);
    pthread_mutex_lock(&rf->mu); /* beside the flags a stale queue entry reads */
    rf->fd = -1;
    rf->finished = e == 0;
    pthread_mutex_unlock(&rf->mu);
    if (e < 0)
        return rst_fail(s, f, "writing", e);
    pthread_mutex_lock(&s->mu);
    s->res->files++;
    s->res->bytes += f->size;
    pthread_mutex_unlock(&s->mu);
    return s->o->progressive ? rst_place_ready(s, k) : 0;
}

/* A finishing thread: files to finish first, then digests to catch up. */
static void *rst_finisher(void *arg)
{
    struct rst *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->fhead == s->ftail && s->hhead == s->htail && !s->fstop)
            pthread_cond_wait(&s->fcv, &s->mu);
        int e;
        if (s->fhead != s->ftail) {
            size_t k = s->fq[s->fhead++];
            pthread_mutex_unlock(&s->mu);
            e = rst_finish_file(s, k);
        } else if (s->hhead != s->htail) {
            size_t k = s->hq[s->hhead++ % s->m.nfiles];
            s->hqueued[k] = false;
            pthread_mutex_unlock(&s->mu);
            e = rst_hash_queued(s, k);
        } else {
            break; /* stopped, and nothing left */
        }
        pthread_mutex_lock(&s->mu);
        if (e < 0 && !s->ferr)
            s->ferr = e;
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* One finishing thread per worker (fsyncs run side by side), at most
 * RST_FIN_MAX; none started is no error (rst_fin_stop finishes). */
static void rst_fin_start(struct rst *s)
{
    size_t n = repo_workers(s->r);
    n = n < 1 ? 1 : n > RST_FIN_MAX ? RST_FIN_MAX : n;
    for (s->nfin = 0; s->nfin < n; s->nfin++)
        if (pthread_create(&s->fin[s->nfin], NULL, rst_finisher, s) != 0)
            break;
    s->handoff = s->direct && s->nfin > 0;
}

/* The finishing threads empty the queue and end; what is left (none
 * started) is finished here.  Returns the first failure. */
static int rst_fin_stop(struct rst *s)
{
    pthread_mutex_lock(&s->mu);
    s->fstop = true;
    pthread_cond_broadcast(&s->fcv);
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < s->nfin; i++)
        pthread_join(s->fin[i], NULL);
    s->nfin = 0;
    rst_finisher(s);
    return s->ferr;
}

/* ---- fetching ---------------------------------------------------------- */

/* Creates regular file k empty at its full size and records its chunks'
 * files and offsets; an empty file is finished at once. */
static int rst_file_create(struct rst *s, size_t k)
{
    const struct mfile *f = &s->m.files[k];
    uint64_t off = 0;
    int e;
    if ((e = rst_open(s, k, O_RDWR | O_CREAT | O_EXCL)) < 0)
        return e;
    s->rfiles[k].remaining = f->nchunks;
    if (!(s->rfiles[k].early = calloc((size_t)(f->nchunks / 8 + 1), 1)))
        return -ENOMEM;
    for (uint64_t c = 0; c < f->nchunks; c++) {
        size_t g = (size_t)(f->first_chunk + c);
        s->chunk_file[g] = k;
        s->chunk_off[g] = off;
        off += s->m.chunks[g].len;
    }
    if (f->nchunks == 0)
        return rst_file_done(s, k);
    close(s->rfiles[k].fd); /* reopened when its first chunk arrives */
    s->rfiles[k].fd = -1;
    return 0;
}

/* The chunks to fetch in priority order: every chunk of group 0's files
 * in manifest order, then group 1's, ...; fetch asks for them in that
 * order, a group's only once the one before is asked for, and across a
 * boundary no more than [restore] inflight bytes at once (fetch.h).
 * Returns how many. */
static size_t rst_jobs(struct rst *s, struct fetch_job *jobs)
{
    size_t n = 0;
    for (int g = 0; g < RESTORE_NGROUPS; g++)
        for (size_t k = 0; k < s->m.nfiles; k++) {
            const struct mfile *f = &s->m.files[k];
            if (f->type != MFILE_REG || s->group[k] != g || s->skip[k])
                continue;
            for (uint64_t c = 0; c < f->nchunks && n < s->m.nchunks; c++) {
                size_t i = (size_t)(f->first_chunk + c);
                jobs[n++] = (struct fetch_job){.id = s->m.chunks[i].id,
                                               .len = s->m.chunks[i].len,
                                               .tag = i,
                                               .group = (uint8_t)g};
            }
        }
    return n;
}

/* Names the file of the chunk that no region had intact. */
static void rst_lost(struct rst *s, size_t g)
{
    const struct mfile *f = &s->m.files[s->chunk_file[g]];
    pthread_mutex_lock(&s->mu);
    buf_printf(s->err, "; it belongs to \"%s\" (offset %llu)", f->path,
               (unsigned long long)s->chunk_off[g]);
    pthread_mutex_unlock(&s->mu);
}

/* Version 6: the jobs of chunks stored as recipes move to the end (jobs
 * [*n - ret, *n)) and *n counts the others; fetch_run takes those, then
 * rst_recipes() the rest (service/recipar.h). */
static size_t rst_split_recipes(struct rst *s, struct fetch_job *jobs, size_t *n)
{
    size_t out = 0, nrec = 0;
    if (!s->m.nextras)
        return 0;
    struct fetch_job *rec = calloc(*n ? *n : 1, sizeof(*rec));
    if (!rec)
        return SIZE_MAX;
    for (size_t i = 0; i < *n; i++) {
        if (manifest_chunk_recipe(&s->m, jobs[i].tag))
            rec[nrec++] = jobs[i];
        else
            jobs[out++] = jobs[i];
    }
    memcpy(jobs + out, rec, nrec * sizeof(*rec));
    free(rec);
    *n = out;
    return nrec;
}

/* fetch_run's on_chunk while recipes wait: a chunk they name as a base is
 * kept for them (recipe_src_seed), then written as any chunk. */
static int rst_chunk_seed(void *ud, const struct fetch_job *j, const uint8_t *data, size_t len)
{
    struct rst *s = ud;
    recipe_src_seed(s->rsrc, j->id, data, len);
    return rst_chunk(ud, j, data, len);
}

/* Rebuilds the recipe chunks jobs[0..n) from their bases (s->rsrc), in
 * parallel (service/recipar.h); a failure names the snapshot and the file
 * (err already names the object).  Counts go into st. */
static int rst_recipes(struct rst *s, struct fetch_job *jobs, size_t n, struct fetch_stats *st)
{
    struct fetch_stats rs;
    unsigned fl = s->o->progressive ? FETCH_KEEP_GOING : 0;
    int e = recipar_run(s->rsrc, jobs, n, fl, rst_chunk, s, &rs, s->err);
    st->fetched_bytes += rs.fetched_bytes + recipe_src_fetched(s->rsrc);
    s->res->local_bases_refetched = recipe_src_refetched(s->rsrc);
    st->failovers += rs.failovers;
    for (size_t i = 0; i < CONFIG_MAX_REGIONS; i++)
        st->region_chunks[i] += rs.region_chunks[i];
    if (e < 0 && rs.lost) {
        const struct mfile *f = &s->m.files[s->chunk_file[rs.lost_tag]];
        buf_printf(s->err,
                   "; snapshot %s: \"%s\" (offset %llu) is stored as a recipe that no region "
                   "holds intact with its bases",
                   s->m.id, f->path, (unsigned long long)s->chunk_off[rs.lost_tag]);
    }
    return e;
}

/* Creates every regular file empty, then fetches all chunks at once;
 * files are finished (and placed) while the others arrive. */
static int rst_files(struct rst *s)
{
    struct fetch_job *jobs = calloc(s->m.nchunks ? s->m.nchunks : 1, sizeof(*jobs));
    struct fetch_stats st = {0};
    int e = jobs ? 0 : -ENOMEM;
    size_t njobs = 0, nrec = 0;
    rst_fin_start(s);
    for (size_t k = 0; k < s->m.nfiles && e == 0; k++)
        if (s->m.files[k].type == MFILE_REG && !s->skip[k])
            e = rst_file_create(s, k);
    if (e == 0) {
        njobs = rst_jobs(s, jobs);
        e = seed_serve(s, jobs, &njobs);
    }
    if (e == 0 && (nrec = rst_split_recipes(s, jobs, &njobs)) == SIZE_MAX)
        e = -ENOMEM;
    if (e == 0 && nrec)
        e = recipe_src_open(s->r, &s->m, (size_t)repo_conf(s->r)->memory / 4, &s->rsrc);
    if (e == 0 && nrec && s->seed && s->seed->n)
        recipe_src_set_local(s->rsrc, seed_base, s);
    if (e == 0) {
        /* progressive: a lost chunk fails the restore at its end, the files
         * it does not touch placed meanwhile */
        unsigned fl = FETCH_CONCURRENT | (s->o->progressive ? FETCH_KEEP_GOING : 0);
        e = fetch_run(s->r, jobs, njobs, fl, nrec ? rst_chunk_seed : rst_chunk, s, &st, s->err);
        if (e < 0 && st.lost)
            rst_lost(s, st.lost_tag);
        if (nrec && (e == 0 || s->o->progressive)) {
            int re = rst_recipes(s, jobs + njobs, nrec, &st);
            e = e < 0 ? e : re;
        }
        s->res->fetched_bytes += st.fetched_bytes;
        s->res->failovers = st.failovers;
        memcpy(s->res->region_chunks, st.region_chunks, sizeof(st.region_chunks));
    }
    int fe = rst_fin_stop(s);
    e = e < 0 ? e : fe;
    for (size_t k = 0; e == 0 && k < s->m.nfiles; k++)
        if (s->m.files[k].type == MFILE_REG && !s->skip[k] && !s->rfiles[k].finished) {
            buf_printf(s->err, "internal error: \"%s\" was not completed", s->m.files[k].path);
            e = -EIO; /* every file's digest is checked, or the restore fails */
        }
    recipe_src_close(s->rsrc);
    s->rsrc = NULL;
    seed_free(s->seed);
    s->seed = NULL;
    free(jobs);
    return e;
}

/* 16 bytes one by one, then the rest against the 16 already known to be
 * zero: memcmp is vectorised, so this runs at memory speed. */
bool restore_zero_chunk(const uint8_t *p, size_t n)
{
    size_t head = n < 16 ? n : 16;
    for (size_t i = 0; i < head; i++)
        if (p[i])
            return false;
    return n <= 16 || memcmp(p, p + 16, n - 16) == 0;
}

/* A setuid or setgid bit in a manifest is not trusted: whoever can write
 * to a region could otherwise plant setuid files on every instance that
 * restores as root.  Cleared unless the caller keeps them (the sticky bit
 * stays); the entries are counted and a warning says how many. */
static void rst_strip_setid(struct rst *s)
{
    if (s->o->keep_setid)
        return;
    for (size_t k = 0; k < s->m.nfiles; k++) {
        struct mfile *f = &s->m.files[k];
        if (f->type != MFILE_LINK && (f->mode & (S_ISUID | S_ISGID))) {
            f->mode &= ~(uint32_t)(S_ISUID | S_ISGID);
            s->res->setid_cleared++;
        }
    }
    if (s->res->setid_cleared)
        log_warn("snapshot %s: cleared the setuid/setgid bits of %llu file(s) "
                 "(--keep-setid keeps them)",
                 s->m.id, (unsigned long long)s->res->setid_cleared);
}

/* The entry's recorded mtime as utimensat() takes it, the access time
 * the same; false when the manifest does not know it. */
static bool rst_times(const struct mfile *f, struct timespec ts[2])
{
    if (f->mtime_ns < 0)
        return false;
    ts[0].tv_sec = (time_t)(f->mtime_ns / 1000000000);
    ts[0].tv_nsec = (long)(f->mtime_ns % 1000000000);
    ts[1] = ts[0];
    return true;
}

static int rst_entry(struct rst *s, const struct mfile *f)
{
    int dirfd, e;
    const char *name;
    if ((e = restore_parent(s->tree, f->path, &dirfd, &name)) < 0) {
        buf_printf(s->err, "\"%s\": cannot create its directory: %s", f->path, err_str(e));
        return e;
    }
    switch (f->type) {
    case MFILE_REG:
        break; /* created and filled by rst_files() */
    case MFILE_HARDLINK:
        break; /* made by rst_finish_files(), once its target is complete */
    case MFILE_DIR:
        if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
            e = -errno;
        s->res->dirs++;
        break;
    case MFILE_LINK: /* its time is set by rst_finish_files() */
        if (s->o->progressive && !s->late)
            break; /* made there too: it appears with the files */
        if (symlinkat(f->link, dirfd, name) < 0)
            e = -errno;
        s->res->links++;
        break;
    }
    if (e < 0 && !buf_str(s->err)[0])
        buf_printf(s->err, "creating \"%s\": %s", f->path, err_str(e));
    close(dirfd);
    return e;
}

/* A hard link to an earlier regular file (the parser checked that it is
 * one, in this manifest), made once that file is complete. */
static int rst_hardlink(struct rst *s, const struct mfile *f)
{
    int tdir, ldir, e;
    const char *tname, *lname;
    if ((e = restore_parent(s->tree, f->link, &tdir, &tname)) < 0)
        return rst_fail(s, f, "opening the directory of the target of", e);
    if ((e = restore_parent(s->tree, f->path, &ldir, &lname)) == 0) {
        if (linkat(tdir, tname, ldir, lname, 0) < 0)
            e = -errno;
        close(ldir);
    }
    close(tdir);
    return e < 0 ? rst_fail(s, f, "linking", e) : 0;
}

/* A symlink's recorded modification (and access) time (a regular
 * file's is set by rst_finish_file). */
static int rst_file_times(struct rst *s, const struct mfile *f)
{
    struct timespec ts[2];
    int dirfd, e;
    const char *name;
    if (!rst_times(f, ts))
        return 0;
    if ((e = restore_parent(s->tree, f->path, &dirfd, &name)) < 0)
        return rst_fail(s, f, "opening the directory of", e);
    e = utimensat(dirfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
    close(dirfd);
    return e < 0 ? rst_fail(s, f, "setting the times of", e) : 0;
}

/* Once every regular file is complete: the symlinks' times (late: the
 * seed's walk of the target reads the staged symlinks, which sets their
 * access time; with --progressive the symlinks are made only now), and
 * the hard links (linking does not change a file's times). */
static int rst_finish_files(struct rst *s)
{
    s->late = true;
    for (size_t k = 0; k < s->m.nfiles; k++) {
        const struct mfile *f = &s->m.files[k];
        int e = 0;
        if (f->type == MFILE_LINK && s->o->progressive)
            e = rst_entry(s, f);
        if (e == 0 && f->type == MFILE_LINK)
            e = rst_file_times(s, f);
        else if (e == 0 && f->type == MFILE_HARDLINK && !s->skip[k])
            e = rst_hardlink(s, f);
        if (e < 0)
            return e;
    }
    return 0;
}

/* fsyncs every directory and applies directory modes and times, deepest
 * first: a directory's time is set once nothing more is created in it. */
static int rst_finish_dirs(struct rst *s)
{
    for (size_t k = s->m.nfiles; k-- > 0;) {
        const struct mfile *f = &s->m.files[k];
        struct timespec ts[2];
        int dirfd, e;
        const char *name;
        if (f->type != MFILE_DIR)
            continue;
        if ((e = restore_parent(s->tree, f->path, &dirfd, &name)) < 0)
            return e;
        int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        e = fd < 0 ? -errno : 0;
        if (fd >= 0 && (fchmod(fd, f->mode) < 0 || (rst_times(f, ts) && futimens(fd, ts) < 0) ||
                        fsync(fd) < 0))
            e = -errno;
        if (fd >= 0)
            close(fd);
        close(dirfd);
        if (e < 0) {
            buf_printf(s->err, "finishing directory \"%s\": %s", f->path, strerror(-e));
            return e;
        }
    }
    return fsync(s->tree) < 0 ? -errno : 0;
}

/* Removes name under dirfd recursively without following symlinks. */
static int rst_remove_tree(int parent, const char *name)
{
    if (unlinkat(parent, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return -errno;
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    fchmod(fd, 0700);
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    struct dirent *de;
    int e = 0;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && e == 0)
            e = rst_remove_tree(dirfd(d), de->d_name);
    closedir(d);
    if (e == 0 && unlinkat(parent, name, AT_REMOVEDIR) < 0)
        e = -errno;
    return e;
}

/* ---- the staging directory and the swap ------------------------------ */

/* DIR/.ckptsync-restore.<id>/ holds the restore's state:
 *   tree/<root>   the snapshot as it is written; s->stage is open on tree/
 *                 and flock()ed while the restore runs, so a later restore
 *                 tells a live staging directory from one left by a kill;
 *                 after an exchange (rst_place) it holds the old tree
 *   old/<root>    only where the file system cannot exchange: the old tree,
 *                 moved aside for the moment between the two renames
 * Both names are ours, one level above the snapshot's root, so no root
 * name can collide with them. */
#define RST_STAGE_PREFIX ".ckptsync-restore."
#define RST_STAGE_PATH_MAX (MANIFEST_ID_MAX + 48) /* "<prefix><id>/tree" */

/* Puts back a tree an interrupted swap had moved aside (stage/old/<name>)
 * when DIR/<name> is missing; one whose DIR/<name> exists is stale.
 * Returns 0 when nothing is left to put back. */
static int rst_stage_recover(int target, const char *tpath, const char *stage)
{
    char old[RST_STAGE_PATH_MAX];
    snprintf(old, sizeof(old), "%s/old", stage);
    int fd = openat(target, old, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    struct dirent *de;
    struct stat st;
    int e = 0;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
            fstatat(target, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
            continue;
        if (errno != ENOENT || renameat(dirfd(d), de->d_name, target, de->d_name) < 0) {
            e = -errno;
            log_error("putting back \"%s/%s\" from \"%s/%s/%s\": %s", tpath, de->d_name, tpath, old,
                      de->d_name, strerror(-e));
            continue;
        }
        log_warn("put back \"%s/%s\": an interrupted restore had moved it aside", tpath,
                 de->d_name);
        fsync(target);
    }
    closedir(d);
    return e;
}

/* Removes a staging directory, first putting back what it holds of the
 * old tree; one that still holds a tree it could not put back is kept,
 * and said so. */
static void rst_stage_remove(int target, const char *tpath, const char *stage)
{
    char legacy[RST_STAGE_PATH_MAX];
    struct stat st;
    snprintf(legacy, sizeof(legacy), "%s/.replaced", stage);
    if (fstatat(target, legacy, &st, AT_SYMLINK_NOFOLLOW) == 0) { /* an older ckptsync's swap */
        log_warn("keeping \"%s/%s\": a tree an interrupted restore moved aside; move it back or "
                 "remove it",
                 tpath, legacy);
        return;
    }
    if (rst_stage_recover(target, tpath, stage) < 0) {
        log_error("keeping \"%s/%s\": it holds a previous tree that could not be put back", tpath,
                  stage);
        return;
    }
    int e = rst_remove_tree(target, stage);
    if (e < 0)
        log_warn("removing the staging directory \"%s/%s\": %s", tpath, stage, strerror(-e));
}

/* true when a running restore holds the staging directory.  One whose
 * lock cannot be probed (a file system without flock) counts as held,
 * except the one of this very snapshot, which the restore replaces. */
static bool rst_stage_busy(int target, const char *stage, const char *mine)
{
    char tree[RST_STAGE_PATH_MAX];
    snprintf(tree, sizeof(tree), "%s/tree", stage);
    int fd = openat(target, tree, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno != ENOENT && errno != ENOTDIR && errno != ELOOP && strcmp(stage, mine);
    bool busy = flock(fd, LOCK_EX | LOCK_NB) < 0 && (errno == EWOULDBLOCK || strcmp(stage, mine));
    close(fd);
    return busy;
}

/* A progressive restore's staging directory holds RST_MARK: the device
 * and inode of the DIR/<root> it made, and the root's name.  One that
 * did not finish (killed, or failed) left a partial DIR/<root>, of whole
 * verified files only: removed here, when it is still that directory. */
#define RST_MARK "progressive"

static void rst_partial_remove(int target, const char *tpath, const char *stage)
{
    char mk[RST_STAGE_PATH_MAX], txt[MANIFEST_MAX_COMPONENT + 64];
    unsigned long long dev, ino;
    int off = 0;
    struct stat st;
    snprintf(mk, sizeof(mk), "%s/" RST_MARK, stage);
    int fd = openat(target, mk, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, txt, sizeof(txt) - 1);
    close(fd);
    txt[n > 0 ? n : 0] = 0;
    if (sscanf(txt, "%llu %llu%n", &dev, &ino, &off) != 2 || txt[off] != '\n')
        return;
    const char *root = txt + off + 1;
    if (!root[0] || strchr(root, '/') || !strcmp(root, ".") || !strcmp(root, ".."))
        return;
    if (!ino) { /* killed before DIR/<root> was marked: at most an empty one */
        unlinkat(target, root, AT_REMOVEDIR);
        return;
    }
    if (fstatat(target, root, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) ||
        (unsigned long long)st.st_dev != dev || (unsigned long long)st.st_ino != ino)
        return;
    int e = rst_remove_tree(target, root);
    if (e < 0)
        log_warn("removing \"%s/%s\", placed in part by a progressive restore that did not "
                 "finish: %s",
                 tpath, root, strerror(-e));
    else
        log_warn("removed \"%s/%s\": a progressive restore that did not finish had placed part "
                 "of it",
                 tpath, root);
}

/* Removes the staging directories that restores killed before their end
 * left in the target (no running restore holds them), putting back any
 * old tree one of them had moved aside. */
static void rst_sweep(struct rst *s, int target)
{
    int fd = dup(target);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    struct dirent *de;
    char **names = NULL;
    size_t n = 0, cap = 0;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, RST_STAGE_PREFIX, strlen(RST_STAGE_PREFIX)) ||
            strlen(de->d_name) >= sizeof(s->stage_name))
            continue;
        if (n == cap) {
            char **v = realloc(names, (cap = cap ? cap * 2 : 8) * sizeof(*v));
            if (!v)
                break;
            names = v;
        }
        if (!(names[n] = strdup(de->d_name)))
            break;
        n++;
    }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        if (!rst_stage_busy(target, names[i], s->stage_name)) {
            rst_partial_remove(target, s->o->target, names[i]);
            rst_stage_remove(target, s->o->target, names[i]);
        }
        free(names[i]);
    }
    free(names);
}

/* true when staging directory stage (in dir, open as dfd) carries a
 * progressive mark naming root. */
static bool rst_marks_root(int dfd, const char *stage, const char *root)
{
    char mk[RST_STAGE_PATH_MAX + 8], txt[MANIFEST_MAX_COMPONENT + 64];
    snprintf(mk, sizeof(mk), "%s/" RST_MARK, stage);
    int fd = openat(dfd, mk, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, txt, sizeof(txt) - 1);
    close(fd);
    const char *nl = n > 0 ? memchr(txt, '\n', (size_t)n) : NULL;
    if (!nl)
        return false;
    txt[n] = 0;
    return !strcmp(nl + 1, root);
}

int restore_placing(const char *dir, const char *root)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
    struct dirent *de;
    bool found = false;
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        return 0;
    }
    while (!found && (de = readdir(d)))
        found = !strncmp(de->d_name, RST_STAGE_PREFIX, strlen(RST_STAGE_PREFIX)) &&
                strlen(de->d_name) < RST_STAGE_PATH_MAX - 16 &&
                rst_marks_root(dirfd(d), de->d_name, root);
    closedir(d);
    return found;
}

/* renameat2(); -EINVAL where the kernel or the file system lacks it, or
 * where CKPTSYNC_RESTORE_NO_EXCHANGE is set (tests of the fallback). */
static int rst_rename2(int from, const char *a, int to, const char *b, unsigned flags)
{
    if (getenv("CKPTSYNC_RESTORE_NO_EXCHANGE"))
        return -EINVAL;
    if (renameat2(from, a, to, b, flags) == 0)
        return 0;
    return errno == ENOSYS ? -EINVAL : -errno;
}

/* The swap where the file system cannot exchange: the old tree is moved
 * aside to stage/old/<root> and the new one renamed in.  When the second
 * rename fails the old tree is put back, and that rename is checked: if
 * it fails too, the old tree stays in the staging directory, which is
 * then kept, and the message says where.  A crash between the two renames
 * leaves DIR/<root> missing until the next restore into DIR puts the old
 * tree back (rst_sweep). */
static int rst_swap_renames(struct rst *s, int target)
{
    const char *root = s->m.root;
    struct buf aside = BUF_INIT;
    int e = 0;
    buf_printf(&aside, "%s/old", s->stage_name);
    if (mkdirat(target, buf_str(&aside), 0700) < 0 && errno != EEXIST)
        e = -errno;
    buf_printf(&aside, "/%s", root);
    if (e == 0 && renameat(target, root, target, buf_str(&aside)) < 0)
        e = -errno;
    if (e < 0) {
        buf_printf(s->err, "moving the old \"%s/%s\" aside: %s", s->o->target, root, strerror(-e));
    } else if (renameat(s->stage, root, target, root) < 0) {
        e = -errno;
        buf_printf(s->err, "renaming into \"%s/%s\": %s", s->o->target, root, strerror(-e));
        if (renameat(target, buf_str(&aside), target, root) < 0)
            buf_printf(s->err, "; putting the old tree back failed too (%s): it is in \"%s/%s\"",
                       strerror(errno), s->o->target, buf_str(&aside));
    }
    buf_free(&aside);
    return e;
}

/* Puts the finished tree at DIR/<root>.  An existing DIR/<root> (with
 * --force) is exchanged with it in one renameat2(RENAME_EXCHANGE), so that
 * DIR/<root> names a complete tree at every instant, the old one until the
 * new one; the old tree is then in the staging directory, removed with it
 * after the exchange (by a later restore if this one is killed first). */
static int rst_place(struct rst *s, int target)
{
    const char *root = s->m.root;
    struct stat st;
    bool exists = fstatat(target, root, &st, AT_SYMLINK_NOFOLLOW) == 0;
    int e;

    if (exists && !s->o->force) {
        buf_printf(s->err, "\"%s/%s\" already exists (use --force to replace it)", s->o->target,
                   root);
        return -EEXIST;
    }
    if (exists) {
        e = rst_rename2(s->stage, root, target, root, RENAME_EXCHANGE);
        if (e == -EINVAL && (e = rst_swap_renames(s, target)) < 0)
            return e; /* the message says what happened to the old tree */
    } else {
        e = rst_rename2(s->stage, root, target, root, RENAME_NOREPLACE);
        if (e == -EINVAL)
            e = renameat(s->stage, root, target, root) < 0 ? -errno : 0;
    }
    if (e == -EEXIST) {
        buf_printf(s->err, "\"%s/%s\" appeared meanwhile (use --force to replace it)", s->o->target,
                   root);
        return e;
    }
    if (e < 0) {
        buf_printf(s->err, "renaming into \"%s/%s\": %s", s->o->target, root, strerror(-e));
        return e;
    }
    return fsync(target) < 0 ? -errno : 0;
}

/* The snapshot in the index (service/snaprec.h), committed in the
 * regions that hold its manifest (a node's share of a merged step is not
 * the snapshot). */
static int rst_snaprec(struct rst *s)
{
    struct index_txn *t;
    char key[REGION_KEY_MAX];
    int e = layout_snapshot(s->m.run, s->m.id, key); /* a parsed manifest's: valid */
    for (size_t i = 0; e == 0 && i < repo_nregions(s->r); i++)
        if (repo_region_ok(s->r, i) && region_has(repo_region(s->r, i), key) == 1)
            s->holders |= 1u << repo_region(s->r, i)->slot;
    if (e < 0 || (s->o->node_count > 0 && !s->res->node_whole))
        return e;
    if ((e = index_txn_begin(repo_index(s->r), true, &t)) < 0)
        return e;
    if ((e = snaprec_found(t, &s->m, s->holders)) < 0) {
        index_txn_abort(t);
        return e;
    }
    return index_txn_commit(t);
}

/* Before anything of the tree appears in the target: the snapshot in the
 * index, and, for a target under the watch root (migrate-in), the mark
 * that the unit is that snapshot (service/unitmark.h), so that a daemon
 * that sees the tree the moment it is renamed in does not take it as a
 * new one, and a commit of it is answered with it.  Neither says anything
 * of the files, so a restore that fails after them leaves nothing untrue
 * (the mark matches only a tree with the snapshot's content). */
static void rst_record(struct rst *s)
{
    int e = rst_snaprec(s);
    if (e < 0) {
        log_warn("\"%s\": snapshot %s is not recorded in the index (%s): a daemon will take the "
                 "restored tree as a new snapshot",
                 s->o->target, s->m.id, err_str(e));
        return;
    }
    if ((e = unitmark_restored(s->r, s->o->run, s->o->target, &s->m)) < 0)
        log_warn("\"%s\": restored, but not marked as restored in the index (%s): the daemon "
                 "will take it again",
                 s->o->target, strerror(-e));
}

/* Records the restored files and their plain chunks' presence in the index
 * (a chunk stored as a recipe has no chunks/ object to be present). */
static int rst_index(struct rst *s, int target)
{
    struct index_txn *t;
    uint32_t holders = s->holders;
    int e = index_txn_begin(repo_index(s->r), true, &t);
    if (e < 0)
        return e;
    for (size_t k = 0; k < s->m.nfiles && e == 0; k++) {
        const struct mfile *f = &s->m.files[k];
        struct stat st;
        if (f->type != MFILE_REG || s->skip[k] ||
            fstatat(target, f->path, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        struct index_file_key fk;
        index_file_key_of(&st, &fk);
        fk.kind = (uint8_t)f->dkind; /* the records of each kind apart (index.h) */
        e = index_file_put(t, &fk, f->digest, &s->m.chunks[f->first_chunk], (size_t)f->nchunks);
        for (uint64_t c = 0; c < f->nchunks && e == 0; c++) {
            const struct mchunk *mc = &s->m.chunks[f->first_chunk + c];
            struct index_chunk ic = {0};
            if (manifest_chunk_recipe(&s->m, (size_t)(f->first_chunk + c)))
                continue; /* its chunks/ object does not exist: only its recipe */
            int g = index_chunk_get(t, mc->id, &ic);
            if (g < 0 && g != -ENOENT) {
                e = g;
                break;
            }
            ic.raw_len = mc->len;
            ic.presence |= holders;
            e = index_chunk_put(t, mc->id, &ic);
        }
    }
    if (e < 0) {
        index_txn_abort(t);
        return e;
    }
    return index_txn_commit(t);
}

static int rst_stage(struct rst *s, int target)
{
    char tree[RST_STAGE_PATH_MAX];
    snprintf(s->stage_name, sizeof(s->stage_name), RST_STAGE_PREFIX "%s", s->m.id);
    snprintf(tree, sizeof(tree), "%s/tree", s->stage_name);
    rst_sweep(s, target); /* left over by restores that were killed */
    if (mkdirat(target, s->stage_name, 0700) < 0) {
        int e = -errno;
        buf_printf(s->err, "creating a staging directory in \"%s\": %s%s", s->o->target,
                   strerror(-e),
                   e == -EEXIST ? " (another restore of this snapshot runs there, or "
                                  "its staging directory was kept: see above)"
                                : "");
        return e;
    }
    if (mkdirat(target, tree, 0700) < 0 ||
        (s->stage = openat(target, tree, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        int e = -errno;
        buf_printf(s->err, "creating a staging directory in \"%s\": %s", s->o->target,
                   strerror(-e));
        rst_remove_tree(target, s->stage_name);
        return e;
    }
    if (flock(s->stage, LOCK_EX | LOCK_NB) < 0)
        log_debug("\"%s/%s\": cannot lock it (%s); a later restore of this snapshot may remove it",
                  s->o->target, tree, strerror(errno));
    return 0;
}

/* ---- progressive ------------------------------------------------------ */

/* Marks the staging directory (RST_MARK) with DIR/<root>'s identity,
 * replacing the mark atomically (written aside, renamed, the directory
 * fsynced); st NULL: not made yet, or a single file (nothing to undo). */
static int rst_mark(struct rst *s, int target, const struct stat *st)
{
    char mk[RST_STAGE_PATH_MAX], tmp[RST_STAGE_PATH_MAX + 8];
    snprintf(mk, sizeof(mk), "%s/" RST_MARK, s->stage_name);
    snprintf(tmp, sizeof(tmp), "%s.new", mk);
    unlinkat(target, tmp, 0);
    int fd = openat(target, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int n = dprintf(fd, "%llu %llu\n%s", st ? (unsigned long long)st->st_dev : 0ULL,
                    st ? (unsigned long long)st->st_ino : 0ULL, s->m.root);
    int e = n < 0 || fsync(fd) < 0 ? -errno : 0;
    close(fd);
    if (e == 0 && renameat(target, tmp, target, mk) < 0)
        e = -errno;
    int dfd = openat(target, s->stage_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (e == 0 && (dfd < 0 || fsync(dfd) < 0))
        e = -errno;
    if (dfd >= 0)
        close(dfd);
    s->marked |= e == 0;
    return e;
}

static bool rst_root_is_dir(const struct rst *s)
{
    for (size_t k = 0; k < s->m.nfiles; k++)
        if (!strcmp(s->m.files[k].path, s->m.root))
            return s->m.files[k].type == MFILE_DIR;
    return false;
}

/* --progressive: DIR/<root> is made at the start (an existing one, with
 * --force, is first moved into the staging directory as old/<root>, which
 * a later restore puts back if this one does not finish), and the staging
 * directory marked.  Files are then placed into it one by one. */
static int rst_prog_begin(struct rst *s, int target)
{
    const char *root = s->m.root;
    struct stat st;
    struct buf aside = BUF_INIT;
    int e = 0;
    if (fstatat(target, root, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (!s->o->force) {
            buf_printf(s->err, "\"%s/%s\" already exists (use --force to replace it)", s->o->target,
                       root);
            return -EEXIST;
        }
        buf_printf(&aside, "%s/old", s->stage_name);
        if (mkdirat(target, buf_str(&aside), 0700) < 0 && errno != EEXIST)
            e = -errno;
        buf_printf(&aside, "/%s", root);
        if (e == 0 && renameat(target, root, target, buf_str(&aside)) < 0)
            e = -errno;
        buf_free(&aside);
        if (e < 0) {
            buf_printf(s->err, "moving the old \"%s/%s\" aside: %s", s->o->target, root,
                       strerror(-e));
            return e;
        }
    }
    /* marked before DIR/<root> is made: a crash in between leaves an empty
     * DIR/<root> that the next restore removes */
    if ((e = rst_mark(s, target, NULL)) < 0) {
        buf_printf(s->err, "marking the staging directory in \"%s\": %s", s->o->target,
                   strerror(-e));
        return e;
    }
    bool dir = rst_root_is_dir(s);
    if (dir &&
        (mkdirat(target, root, 0700) < 0 || fstatat(target, root, &st, AT_SYMLINK_NOFOLLOW) < 0)) {
        e = -errno;
        buf_printf(s->err, "creating \"%s/%s\": %s", s->o->target, root, strerror(-e));
        return e;
    }
    if (dir && (e = rst_mark(s, target, &st)) < 0)
        buf_printf(s->err, "marking the staging directory in \"%s\": %s", s->o->target,
                   strerror(-e));
    s->tree = target;
    return e;
}

/* A progressive restore that failed keeps what it placed (whole, verified)
 * and its marked staging directory, less the staged data: the next
 * restore into DIR removes both (rst_partial_remove). */
static void rst_prog_failed(struct rst *s, int target)
{
    char tree[RST_STAGE_PATH_MAX];
    snprintf(tree, sizeof(tree), "%s/tree", s->stage_name);
    rst_remove_tree(target, tree);
    fsync(target);
    log_warn("\"%s/%s\" holds the files placed so far, each whole and verified; the next "
             "restore into \"%s\" removes them",
             s->o->target, s->m.root, s->o->target);
}

/* ---- priority groups ---------------------------------------------------- */

static const char *const rst_group_names[RESTORE_NGROUPS] = {"metadata", "weights", "master",
                                                             "optimizer"};

const char *restore_group_name(int g)
{
    return g >= 0 && g < RESTORE_NGROUPS ? rst_group_names[g] : "?";
}

static bool rst_ends(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && !strcmp(s + n - t, tail);
}

/* Metadata by name: configs, run state, RNG and scheduler state. */
static bool rst_meta_name(const char *base)
{
    static const char *const ext[] = {".json", ".yaml", ".yml", ".txt", ".md",  ".toml",
                                      ".ini",  ".cfg",  ".csv", ".py",  ".log", ".metadata"};
    static const char *const pre[] = {
        "latest",         "rng",           "random_states", "scheduler",         "lr_scheduler",
        "trainer_state",  "training_args", "config",        "generation_config", "tokenizer",
        "special_tokens", "vocab",         "merges"};
    for (size_t i = 0; i < sizeof(ext) / sizeof(*ext); i++)
        if (rst_ends(base, ext[i]))
            return true;
    for (size_t i = 0; i < sizeof(pre) / sizeof(*pre); i++)
        if (!strncmp(base, pre[i], strlen(pre[i])))
            return true;
    return false;
}

int restore_group(const char *path, uint64_t size)
{
    char low[MANIFEST_MAX_PATH + 1];
    const char *rel = strchr(path, '/'); /* below the snapshot's root */
    rel = rel ? rel + 1 : path;
    size_t n = 0;
    for (; rel[n] && n < sizeof(low) - 1; n++)
        low[n] = (char)(rel[n] >= 'A' && rel[n] <= 'Z' ? rel[n] - 'A' + 'a' : rel[n]);
    low[n] = 0;
    const char *base = strrchr(low, '/');
    base = base ? base + 1 : low;
    if (rst_meta_name(base))
        return RESTORE_META;
    if (strstr(low, "model_optim_rng")) /* Megatron: the model's file, optimizer inside */
        return RESTORE_WEIGHTS;
    if (strstr(low, "optim"))
        return RESTORE_OPTIM;
    if (strstr(low, "fp32") || strstr(low, "master"))
        return RESTORE_MASTER;
    return size <= RESTORE_SMALL ? RESTORE_META : RESTORE_WEIGHTS;
}

/* true when pattern p (fnmatch, no FNM_PATHNAME) matches the path below the
 * snapshot's root or its base name. */
static bool rst_matches(const char *p, const char *path)
{
    const char *rel = strchr(path, '/'), *base = strrchr(path, '/');
    rel = rel ? rel + 1 : path;
    base = base ? base + 1 : path;
    return fnmatch(p, rel, 0) == 0 || fnmatch(p, base, 0) == 0;
}

int restore_order_group(const char *order, const char *path)
{
    char item[CONFIG_ORDER_MAX];
    const char *p = order ? order : "";
    while (*(p += strspn(p, " \t"))) {
        size_t n = strcspn(p, " \t"), g = strcspn(p, ":");
        p += n;
        if (g >= n || n >= sizeof(item))
            continue; /* not GROUP:PATTERN: refused by the configuration's check */
        memcpy(item, p - n, n);
        item[n] = 0;
        item[g] = 0;
        if (!rst_matches(item + g + 1, path))
            continue;
        for (int i = 0; i < RESTORE_NGROUPS; i++)
            if (!strcmp(item, rst_group_names[i]))
                return i;
    }
    return -1;
}

/* ---- selecting --------------------------------------------------------- */

/* A regular file's group: [restore] order, else the built-in rules. */
static int rst_group(const struct rst *s, const struct mfile *f)
{
    int g = restore_order_group(repo_conf(s->r)->restore_order, f->path);
    return g >= 0 ? g : restore_group(f->path, f->size);
}

/* true when regular file k is excluded by the options; counts, per
 * pattern, the files it matched into hits. */
static bool rst_excluded(struct rst *s, size_t k, size_t *hits)
{
    const struct mfile *f = &s->m.files[k];
    bool out = s->o->exclude_optimizer && s->group[k] == RESTORE_OPTIM;
    for (size_t i = 0; i < s->o->nexclude; i++)
        if (rst_matches(s->o->exclude[i], f->path)) {
            hits[i]++;
            out = true;
        }
    return out;
}

/* A hard link to an excluded file is left out with it. */
static bool rst_link_skipped(const struct rst *s, const struct mfile *f)
{
    for (size_t k = 0; k < s->m.nfiles; k++)
        if (s->m.files[k].type == MFILE_REG && !strcmp(s->m.files[k].path, f->link))
            return s->skip[k];
    return false;
}

/* Each regular file's group, what the options exclude, what is left to
 * restore (total, gleft).  A pattern that matches no file is an error. */
static int rst_select(struct rst *s)
{
    size_t nf = s->m.nfiles ? s->m.nfiles : 1, none = SIZE_MAX;
    size_t *hits = calloc(s->o->nexclude ? s->o->nexclude : 1, sizeof(*hits));
    s->group = calloc(nf, sizeof(*s->group));
    s->skip = calloc(nf, sizeof(*s->skip));
    if (!hits || !s->group || !s->skip) {
        free(hits);
        return -ENOMEM;
    }
    for (size_t k = 0; k < s->m.nfiles; k++) {
        const struct mfile *f = &s->m.files[k];
        if (f->type == MFILE_HARDLINK)
            s->skip[k] = rst_link_skipped(s, f);
        if (f->type != MFILE_REG)
            continue;
        s->group[k] = (uint8_t)rst_group(s, f);
        if ((s->skip[k] = rst_excluded(s, k, hits))) {
            s->res->excluded++;
            continue;
        }
        s->gleft[s->group[k]]++;
        s->total += f->size;
    }
    for (size_t i = 0; i < s->o->nexclude && none == SIZE_MAX; i++)
        if (!hits[i])
            none = i;
    free(hits);
    if (none == SIZE_MAX)
        return 0;
    buf_printf(s->err, "--exclude '%s' matches no file of snapshot %s", s->o->exclude[none],
               s->m.id);
    return -ENOENT;
}

static int rst_alloc(struct rst *s)
{
    size_t nc = s->m.nchunks ? s->m.nchunks : 1;
    s->rfiles = calloc(s->m.nfiles ? s->m.nfiles : 1, sizeof(*s->rfiles));
    s->chunk_file = calloc(nc, sizeof(*s->chunk_file));
    s->chunk_off = calloc(nc, sizeof(*s->chunk_off));
    s->leaf = calloc(nc, sizeof(*s->leaf));
    size_t nf = s->m.nfiles ? s->m.nfiles : 1;
    s->fq = calloc(nf, sizeof(*s->fq));
    s->hq = calloc(nf, sizeof(*s->hq));
    s->hqueued = calloc(nf, sizeof(*s->hqueued));
    s->waiting = calloc(nf, sizeof(*s->waiting));
    if (!s->rfiles || !s->chunk_file || !s->chunk_off || !s->leaf || !s->fq || !s->hq ||
        !s->hqueued || !s->waiting)
        return -ENOMEM;
    for (size_t k = 0; k < s->m.nfiles; k++) {
        s->rfiles[k].fd = -1;
        if (pthread_mutex_init(&s->rfiles[k].mu, NULL) != 0)
            return -ENOMEM;
        s->rfiles[k].mu_init = true;
    }
    return 0;
}

static int rst_all(struct rst *s, int target)
{
    int e;
    if ((e = rst_select(s)) < 0)
        return e;
    rst_strip_setid(s);
    s->target = target;
    rst_record(s);
    if ((e = rst_stage(s, target)) < 0)
        return e;
    s->tree = s->stage;
    if (s->o->progressive && (e = rst_prog_begin(s, target)) < 0)
        return e;
    for (size_t k = 0; k < s->m.nfiles; k++)
        if ((e = rst_entry(s, &s->m.files[k])) < 0)
            return e;
    if ((e = rst_alloc(s)) < 0 || (e = rst_files(s)) < 0 || (e = rst_finish_files(s)) < 0)
        return e;
    if ((e = rst_finish_dirs(s)) < 0 || (!s->o->progressive && (e = rst_place(s, target)) < 0))
        return e;
    if ((e = rst_index(s, target)) < 0)
        log_warn("restored, but recording the files in the index failed: %s", err_str(e));
    return 0;
}

/* With opts.node_count, narrows s->m to what that node needs of a merged
 * step (engine/rankbind.h). */
static int rst_node(struct rst *s)
{
    const struct restore_opts *o = s->o;
    struct manifest sub;
    struct buf why = BUF_INIT;
    if (o->node_count <= 0)
        return 0;
    int e = o->node_rank < 0
                ? -EINVAL
                : rankbind_select(&s->m, (unsigned)o->node_rank, (unsigned)o->node_count,
                                  o->allow_reshard, &sub, &why);
    if (e == 1) {
        s->res->node_whole = true;
        e = 0;
    } else if (e == 0) {
        if (why.len)
            log_warn("node %d of %d: %s", o->node_rank, o->node_count, buf_str(&why));
        manifest_free(&s->m);
        s->m = sub;
    } else if (e == -EINVAL) {
        buf_printf(s->err, "node %d of %d: a node is 0 .. count-1", o->node_rank, o->node_count);
    } else {
        buf_printf(s->err, "node %d of %d: %s", o->node_rank, o->node_count,
                   why.len ? buf_str(&why) : err_str(e));
    }
    buf_free(&why);
    return e;
}

/* The per-file and per-chunk state of rst_alloc, descriptors closed. */
static void rst_free_files(struct rst *s)
{
    for (size_t k = 0; s->rfiles && k < s->m.nfiles; k++) {
        struct rfile *rf = &s->rfiles[k];
        if (rf->fd >= 0)
            close(rf->fd);
        if (rf->hashing)
            hash_free(&rf->h);
        free(rf->early);
        for (struct stashed *x = rf->stash, *nx; x; x = nx) {
            nx = x->next;
            free(x);
        }
        if (rf->mu_init)
            pthread_mutex_destroy(&rf->mu);
    }
    free(s->rfiles);
    free(s->chunk_file);
    free(s->chunk_off);
    free(s->leaf);
}

int restore_run(struct repo *r, const struct restore_opts *o, struct restore_result *ret,
                struct buf *err)
{
    struct rst s = {.r = r, .o = o, .res = ret, .err = err, .stage = -1};
    int target = -1, e;

    memset(ret, 0, sizeof(*ret));
    manifest_init(&s.m);
    pthread_mutex_init(&s.mu, NULL);
    pthread_mutex_init(&s.pmu, NULL);
    pthread_cond_init(&s.fcv, NULL);
    /* memory: fetch's windows hold at most half of it (fetch.c, f_window),
     * the io_uring writes in flight (one part) a quarter, early chunks
     * kept for their file's digest a sixteenth; past that they are read
     * back from the page cache */
    wring_init(&s.wr, 64, repo_conf(r)->memory / 4);
    s.direct = repo_workers(r) > 1;
    s.stash_budget = repo_conf(r)->memory / 16;
    if ((e = catalog_find(r, o->run, o->id, &s.m, NULL, err)) < 0)
        goto out;
    ret->nodes = s.m.nodes;
    if ((e = rst_node(&s)) < 0)
        goto out;
    if ((e = fileio_mkdir_p(o->target, 0755)) < 0 ||
        (target = open(o->target, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        e = e < 0 ? e : -errno;
        buf_printf(err, "target directory \"%s\": %s", o->target, strerror(-e));
        goto out;
    }
    memcpy(ret->id, s.m.id, sizeof(ret->id));
    snprintf(ret->root, sizeof(ret->root), "%s", s.m.root);
    ret->step = s.m.step;
    ret->chunks = s.m.nchunks;
    e = rst_all(&s, target);
out:
    if (s.stage >= 0 && e < 0 && s.marked) {
        rst_prog_failed(&s, target);
    } else if (s.stage >= 0) { /* held (flock) until it is gone */
        rst_stage_remove(target, o->target, s.stage_name);
        close(s.stage);
        fsync(target);
    }
    if (target >= 0)
        close(target);
    wring_free(&s.wr); /* no write may outlive its file descriptor */
    rst_free_files(&s);
    manifest_free(&s.m);
    free(s.group);
    free(s.skip);
    free(s.fq);
    free(s.hq);
    free(s.hqueued);
    free(s.waiting);
    pthread_cond_destroy(&s.fcv);
    pthread_mutex_destroy(&s.pmu);
    pthread_mutex_destroy(&s.mu);
    return e;
}
