/*
 * ingcore.c — the reading half of every snapshot (see ingcore.h).
 *
 * Design notes.
 * - Each byte is read once (service/scan.c): the whole-file digest and the
 *   chunk ids come from the same buffer; the chunks' work runs on the
 *   pool, several at once, and their outcomes are applied in file order,
 *   so the manifest is the one a single thread would write.
 * - A file is identified by index_file_key_of (dev, ino, size, mtime,
 *   ctime), taken before and after the read: a change means the file is
 *   read again, or the caller takes the unit again (opts.retries), never
 *   stored torn.  A file written in the last few milliseconds is given
 *   time to age first: a write in the same clock tick as the one before
 *   can leave every timestamp as it was ("racy" files, as git calls them).
 * - An unchanged file is not read: the index maps its identity to its
 *   digest and chunks, taken when the front end's reuse_need holds.
 * - With [snapshot] file_digest = tree (the default) a file's digest is
 *   its chunk tree (engine/filedigest.h), computed from its chunk list
 *   once the file is read: no second pass over the bytes, no digest
 *   thread, and a file the index knows gets the tree of its recorded
 *   chunks (the index keeps records of the two kinds apart).  The notes below on the digest concern
 * file_digest = sha256.
 * - The whole-file SHA-256 is serial by nature, and was a third of the
 *   reading thread's time (perf, daemon into three dir regions: 2.3 of 7
 *   CPU s per GB).  Read serially with a pool of several threads, it runs
 *   on a thread of its own: each chunk goes to it in file order as it is
 *   handed to the pool, and a job is applied (and its slot reused) only
 *   once both are done with its bytes.
 * - Several files are read at once (opts.readers, default one per pool
 *   thread): each reader thread takes the next file in walk order, cuts it
 *   with its own scan, hashes its digest itself (the files' digests run in
 *   parallel) and keeps its own ordered window over its share of the jobs,
 *   so each file's chunks are applied in file order.  The caller's thread
 *   adds the files to the manifest in walk order as their readers finish:
 *   the manifest is the serial one whatever the timing.  A file that fails
 *   stops the readers from taking later files (and cancels those being
 *   read); the error reported is the first in walk order, as serially.
 *   The readers and their jobs hold no more chunk buffers than the serial
 *   reader does (ic_par_count).  One huge file has one reader: where a
 *   content-defined cut falls depends on the bytes before it.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/filedigest.h"
#include "service/catalog.h"
#include "service/ingcore.h"
#include "service/runlineage.h"
#include "service/snaprec.h"

#define INGCORE_RACY_NS 20000000        /* 20 ms: several timestamp ticks */
#define INGCORE_WRITING_NS 2000000000LL /* 2 s: a writer that holds the file open */

static struct ingcore_job *ic_job(struct ingcore *c, size_t k)
{
    return (struct ingcore_job *)(c->jobs + k * c->ops->job_size);
}

/* One reader: a file at a time, cut (its scan), its chunks on the pool in
 * an ordered window over its share of the jobs, its digest. */
struct ingcore_reader {
    struct ingcore *c;
    struct ingcore_par *par; /* NULL: the serial reader */
    pthread_t th;
    struct scan scan;
    bool scan_ok;
    struct hash fh; /* the whole-file digest of the file being read */
    bool fh_ok;
    struct pool_window win;
    struct ingcore_digest *dg; /* the core's digest thread (serial only), else NULL */
    size_t file;               /* the walk entry being read */
    struct mchunk *fchunks;    /* of that file */
    size_t nfchunks, fchunks_cap;
    uint64_t fdone; /* its bytes counted in c->done (undone when it changed) */
    int jfail;
    struct buf *err; /* the serial reader: c->err; else its own, ebuf */
    struct buf ebuf;
};

/* Several readers: which file each takes next, and what each file gave
 * (res[k] for walk entry k) until the caller adds it to the manifest. */
struct ic_fres {
    struct mchunk *v;
    size_t n;
    uint8_t digest[HASH_LEN];
    struct stat st;
    int e;
    char *msg; /* why, when e < 0 (NULL: none) */
    bool ready;
};

struct ingcore_par {
    pthread_mutex_t mu; /* next, res[].ready, fail_at */
    pthread_cond_t cv;  /* a file ready */
    size_t next;        /* the next walk entry to look at */
    size_t fail_at;     /* the first file that failed (SIZE_MAX: none); read atomically */
    struct ic_fres *res;
    struct ingcore_reader *rd;
    size_t nrd, started;
};

/* ---- the digest thread (serial reading) ----------------------------------- */

struct ingcore_digest {
    struct ingcore_reader *rd;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* new work, and a job hashed */
    struct ingcore_job **q; /* in file order: head .. head + n - 1 */
    size_t cap, head, n;
    bool stop;
};

static void *ic_digest_main(void *arg)
{
    struct ingcore_digest *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->stop && d->n == 0)
            pthread_cond_wait(&d->cv, &d->mu);
        if (d->n == 0)
            break;
        struct ingcore_job *j = d->q[d->head];
        d->head = (d->head + 1) % d->cap;
        d->n--;
        pthread_mutex_unlock(&d->mu);
        hash_update(&d->rd->fh, j->raw.data, j->raw.len);
        pthread_mutex_lock(&d->mu);
        j->hashed = true;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static int ic_digest_start(struct ingcore *c)
{
    struct ingcore_digest *d = calloc(1, sizeof(*d));
    if (!d || !(d->q = calloc(c->njobs, sizeof(*d->q)))) {
        free(d);
        return -ENOMEM;
    }
    d->rd = c->rd0;
    d->cap = c->njobs;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    int e = pthread_create(&d->th, NULL, ic_digest_main, d);
    if (e) {
        pthread_cond_destroy(&d->cv);
        pthread_mutex_destroy(&d->mu);
        free(d->q);
        free(d);
        return -e;
    }
    c->dg = c->rd0->dg = d;
    return 0;
}

static void ic_digest_stop(struct ingcore *c)
{
    struct ingcore_digest *d = c->dg;
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->th, NULL);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d->q);
    free(d);
    c->dg = NULL;
}

/* The chunk's bytes into the file's digest: queued for the digest thread
 * (in order; the window never holds more jobs than the queue), or at once
 * without one. */
static void ic_digest_add(struct ingcore_reader *rd, struct ingcore_job *j)
{
    struct ingcore_digest *d = rd->dg;
    if (!d) {
        if (rd->c->dkind == MDIGEST_SHA256)
            hash_update(&rd->fh, j->raw.data, j->raw.len);
        j->hashed = true;
        return;
    }
    pthread_mutex_lock(&d->mu);
    j->hashed = false;
    d->q[(d->head + d->n) % d->cap] = j;
    d->n++;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* Until the digest thread is done with j's bytes. */
static void ic_digest_wait(struct ingcore_reader *rd, struct ingcore_job *j)
{
    struct ingcore_digest *d = rd->dg;
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    while (!j->hashed)
        pthread_cond_wait(&d->cv, &d->mu);
    pthread_mutex_unlock(&d->mu);
}

/* ---- readers ------------------------------------------------------------- */

/* A reader over jobs [first, first + n) of the core. */
static int ic_reader_init(struct ingcore_reader *rd, struct ingcore *c, size_t first, size_t n)
{
    memset(rd, 0, sizeof(*rd));
    rd->c = c;
    rd->err = c->err;
    int e = scan_init(&rd->scan, repo_chunker(c->r));
    if (e < 0)
        return e;
    rd->scan_ok = true;
    if ((e = hash_init(&rd->fh)) < 0)
        return e;
    rd->fh_ok = true;
    pool_window_init(&rd->win, c->pool, c->jptr + first, n);
    return 0;
}

static int ic_drain(struct ingcore_reader *rd);

static void ic_reader_free(struct ingcore_reader *rd)
{
    if (rd->c)
        ic_drain(rd); /* jobs in flight use what follows */
    if (rd->fh_ok)
        hash_free(&rd->fh);
    if (rd->scan_ok)
        scan_free(&rd->scan);
    free(rd->fchunks);
    buf_free(&rd->ebuf);
    memset(rd, 0, sizeof(*rd));
}

int ingcore_init(struct ingcore *c, struct repo *r, const struct ingcore_ops *ops,
                 struct pool *pool, size_t njobs, const struct ingcore_opts *o, struct buf *err)
{
    memset(c, 0, sizeof(*c));
    c->r = r;
    c->ops = ops;
    c->o = *o;
    c->err = err;
    c->pool = pool;
    c->njobs = njobs ? njobs : 1;
    c->readers_used = 1;
    if (c->o.retries < 1)
        c->o.retries = 1;
    manifest_init(&c->m);
    pthread_mutex_init(&c->mu, NULL);
    c->mu_ok = true;
    c->jobs = calloc(c->njobs, ops->job_size);
    c->jptr = calloc(c->njobs, sizeof(*c->jptr));
    c->rd0 = calloc(1, sizeof(*c->rd0));
    if (!c->jobs || !c->jptr || !c->rd0)
        return -ENOMEM;
    for (size_t k = 0; k < c->njobs; k++) {
        struct ingcore_job *j = ic_job(c, k);
        j->c = c;
        c->jptr[k] = &j->pj;
    }
    int e = ic_reader_init(c->rd0, c, 0, c->njobs);
    if (e < 0)
        return e;
    c->dkind = repo_conf(r)->file_digest_sha256 ? MDIGEST_SHA256 : MDIGEST_TREE;
    return pool_size(pool) > 1 && c->dkind == MDIGEST_SHA256 ? ic_digest_start(c) : 0;
}

void ingcore_free(struct ingcore *c)
{
    if (c->rd0)
        ic_reader_free(c->rd0); /* drains first: jobs in flight use what follows */
    ic_digest_stop(c);
    free(c->rd0);
    for (size_t k = 0; c->jobs && k < c->njobs; k++)
        buf_free(&ic_job(c, k)->raw);
    free(c->jobs);
    free(c->jptr);
    free(c->keys);
    walk_free(&c->w);
    manifest_free(&c->m);
    if (c->mu_ok)
        pthread_mutex_destroy(&c->mu);
    memset(c, 0, sizeof(*c));
}

/* ---- the manifest's header --------------------------------------------- */

/* The manifest's generation (runlineage_run_gen); never a guess. */
static int ic_gen(struct ingcore *c)
{
    struct buf why = BUF_INIT;
    int e = runlineage_run_gen(c->r, c->o.regions, c->o.run, &c->m.gen, &why);
    if (e == CKS_E_QUORUM && c->o.gen_later) {
        log_warn("%s: the generation of run '%s' is undecided; the snapshot waits, queued, "
                 "until a region can be listed",
                 buf_str(&why), c->o.run);
        c->m.gen = 0;
        c->gen_undecided = true;
        e = 0;
    } else if (e == CKS_E_QUORUM) {
        buf_printf(c->err, "%s: the generation of run '%s' cannot be decided; nothing written",
                   buf_str(&why), c->o.run);
        e = CKS_E_REMOTE;
    } else if (e < 0 && why.len) {
        buf_printf(c->err, "%s", buf_str(&why));
    }
    buf_free(&why);
    return e;
}

int ingcore_begin(struct ingcore *c, const char *path)
{
    struct manifest *m = &c->m;
    struct repo *r = c->r;
    char host[256] = "unknown";
    int e = walk_list(path, &c->w, c->err);
    if (e < 0)
        return e;
    if (!(c->keys = calloc(c->w.n ? c->w.n : 1, sizeof(*c->keys))))
        return -ENOMEM;
    if ((e = catalog_make_id(m->id, sizeof(m->id))) < 0)
        return e;
    gethostname(host, sizeof(host) - 1);
    m->step = c->o.step;
    m->time = (int64_t)time(NULL);
    m->chunk_min = repo_params(r)->chunk_min;
    m->chunk_avg = repo_params(r)->chunk_avg;
    m->chunk_max = repo_params(r)->chunk_max;
    m->normalization = repo_params(r)->normalization;
    if ((e = manifest_set_str(&m->run, c->o.run)) < 0 ||
        (e = manifest_set_str(&m->host, host)) < 0 ||
        (e = manifest_set_str(&m->root, c->w.v[0].path)) < 0)
        return e;
    if (c->o.instance && c->o.instance[0] &&
        (e = manifest_set_str(&m->instance, c->o.instance)) < 0)
        return e;
    catalog_parent(r, c->o.run, &m->parent);
    return ic_gen(c);
}

/* ---- chunks ------------------------------------------------------------ */

static void ic_job_run(struct pool_job *pj, size_t t)
{
    struct ingcore_job *j = (struct ingcore_job *)pj;
    repo_chunk_id(j->c->r, j->raw.data, j->raw.len, j->id);
    j->err = j->c->ops->run(j, t);
}

static int ic_fchunk(struct ingcore_reader *rd, const uint8_t id[HASH_LEN], uint32_t len)
{
    if (rd->nfchunks == rd->fchunks_cap) {
        size_t cap = rd->fchunks_cap ? rd->fchunks_cap * 2 : 64;
        struct mchunk *v = realloc(rd->fchunks, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        rd->fchunks = v;
        rd->fchunks_cap = cap;
    }
    memcpy(rd->fchunks[rd->nfchunks].id, id, HASH_LEN);
    rd->fchunks[rd->nfchunks++].len = len;
    return 0;
}

/* Under the core's lock: n more bytes done (n may undo a file's). */
static void ic_done_locked(struct ingcore *c, int64_t n)
{
    c->done += (uint64_t)n;
    if (c->o.progress)
        c->o.progress(c->o.ud, c->done, c->w.bytes);
}

/* Waits for the reader's oldest job in flight and applies it, under the
 * core's lock: the front end's outcome first, then the chunk's place in
 * the file. */
static int ic_next(struct ingcore_reader *rd)
{
    struct ingcore *c = rd->c;
    struct ingcore_job *j = (struct ingcore_job *)pool_window_oldest(&rd->win);
    ic_digest_wait(rd, j); /* its slot is free only then */
    pthread_mutex_lock(&c->mu);
    int e = c->ops->apply(j, rd->file, rd->nfchunks);
    if (e == 0 && j->err < 0) {
        e = j->err;
        if (!buf_str(rd->err)[0])
            buf_printf(rd->err, "%s", j->msg[0] ? j->msg : err_str(e));
    }
    if (e == 0 && (e = ic_fchunk(rd, j->id, (uint32_t)j->raw.len)) == 0) {
        rd->fdone += j->raw.len;
        ic_done_locked(c, (int64_t)j->raw.len);
    }
    pthread_mutex_unlock(&c->mu);
    return rd->jfail ? rd->jfail : (rd->jfail = e);
}

/* Every job of the reader in flight done and applied; the first error
 * among them. */
static int ic_drain(struct ingcore_reader *rd)
{
    while (rd->win.count)
        ic_next(rd);
    int e = rd->jfail;
    rd->jfail = 0;
    return e;
}

/* With several readers: a file after one that failed is not finished. */
static bool ic_cancelled(const struct ingcore_reader *rd)
{
    return rd->par && rd->file > __atomic_load_n(&rd->par->fail_at, __ATOMIC_ACQUIRE);
}

/* The scan's callback: the chunk goes to the pool as a job, the oldest
 * job applied first when every slot of the reader is in flight. */
static int ic_chunk(void *ud, const uint8_t *data, size_t len, uint64_t off)
{
    struct ingcore_reader *rd = ud;
    struct ingcore *c = rd->c;
    if (ic_cancelled(rd))
        return -ECANCELED;
    if (pool_window_full(&rd->win) && ic_next(rd) < 0)
        return rd->jfail;
    struct ingcore_job *j = (struct ingcore_job *)rd->win.jobs[pool_window_next(&rd->win)];
    buf_reset(&j->raw);
    if (buf_append(&j->raw, data, len) < 0)
        return -ENOMEM;
    j->file = rd->file;
    j->off = off;
    j->width = scan_width(&rd->scan, off, len);
    j->err = 0;
    j->msg[0] = 0;
    if (c->ops->prepare) {
        pthread_mutex_lock(&c->mu);
        c->ops->prepare(j);
        pthread_mutex_unlock(&c->mu);
    }
    j->pj.run = ic_job_run;
    ic_digest_add(rd, j);
    pool_window_submit(&rd->win);
    return 0;
}

/* ---- files ------------------------------------------------------------- */

/* The record of key k (its kind as set) whose chunks are each in every
 * slot of need, in t: 0 with its digest and chunks (*ret_v, the caller
 * frees), -ENOENT, or another error. */
static int ic_record(struct index_txn *t, const struct index_file_key *k, uint32_t need,
                     uint8_t digest[HASH_LEN], struct mchunk **ret_v, size_t *ret_n)
{
    struct mchunk *v = NULL;
    size_t n = 0;
    int e = index_file_get(t, k, digest, &v, &n);
    for (size_t i = 0; e == 0 && need && i < n; i++) {
        struct index_chunk ch;
        if (index_chunk_get(t, v[i].id, &ch) < 0 || (ch.presence & need) != need)
            e = -ENOENT;
    }
    if (e < 0) {
        free(v);
        return e;
    }
    *ret_v = v;
    *ret_n = n;
    return 0;
}

/* The index keeps a file's records apart by digest kind (index.h, struct
 * index_file_key): with file_digest = sha256 only a SHA-256 record is
 * taken; with tree, a tree record, else a SHA-256 one (an index from
 * before version 5), whose chunks give the tree all the same. */
int ingcore_known(struct repo *r, const struct index_file_key *k, uint32_t need,
                  uint8_t digest[HASH_LEN], struct mchunk **ret_v, size_t *ret_n)
{
    struct index_txn *t;
    struct mchunk *v = NULL;
    size_t n = 0;
    bool tree = !repo_conf(r)->file_digest_sha256;
    struct index_file_key key = *k;
    key.kind = tree ? MDIGEST_TREE : MDIGEST_SHA256;
    int e = index_txn_begin(repo_index(r), false, &t);
    if (e < 0)
        return e;
    e = ic_record(t, &key, need, digest, &v, &n);
    if (e == -ENOENT && tree) {
        key.kind = MDIGEST_SHA256;
        e = ic_record(t, &key, need, digest, &v, &n);
    }
    index_txn_abort(t);
    if (e == 0 && tree)
        e = filedigest_tree(v, n, digest);
    if (e < 0 || !ret_v) {
        free(v);
        return e == 0 ? 1 : e == -ENOENT ? 0 : e;
    }
    *ret_v = v;
    *ret_n = n;
    return 1;
}

static int ic_open(struct ingcore *c, size_t k, struct buf *err)
{
    struct buf p = BUF_INIT;
    int fd = -ENOMEM;
    int e = c->pin ? buf_printf(&p, "%s/%zu", c->pin, k)
                   : buf_printf(&p, "%s/%s", c->w.base, c->w.v[k].path);
    if (e == 0) {
        fd = open(buf_str(&p), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);
        if (fd < 0 && errno == EPERM)
            fd = open(buf_str(&p), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            fd = -errno;
            buf_printf(err, "opening \"%s\": %s", buf_str(&p), strerror(-fd));
        }
    }
    buf_free(&p);
    return fd;
}

int ingcore_open(struct ingcore *c, size_t k)
{
    return ic_open(c, k, c->err);
}

/* 1 when some process holds the file open for writing (the kernel refuses
 * a read lease then), 0 when none does, -1 when it cannot tell (not the
 * file's owner without CAP_LEASE, leases disabled, a filesystem without
 * them: NFS, FUSE). */
static int ic_writers(int fd)
{
    /* A writer's open() in the microseconds the lease is held breaks it,
     * which signals the holder: SIGIO, whose default ends the process,
     * unless the file names another signal.  SIGURG is ignored by
     * default. */
    if (fcntl(fd, F_SETSIG, SIGURG) < 0)
        return -1;
    if (fcntl(fd, F_SETLEASE, F_RDLCK) == 0) {
        fcntl(fd, F_SETLEASE, F_UNLCK);
        return 0;
    }
    return errno == EAGAIN ? 1 : -1;
}

static int64_t ic_age_ns(const struct stat *st)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return ((int64_t)now.tv_sec - st->st_mtim.tv_sec) * 1000000000 +
           (now.tv_nsec - st->st_mtim.tv_nsec);
}

/* Whether a file's identity (st) proves that a write during the read
 * would show in it.  Not when its mtime is younger than a few timestamp
 * ticks: a write in the same tick leaves mtime and ctime as they were
 * (git's "racily clean" files).  Nor when a writer holds it open and its
 * mtime is younger than INGCORE_WRITING_NS: a write() updates the times
 * before it copies the bytes, so a writer preempted in the middle of one
 * (a loaded machine) goes on changing bytes under an identity that looks
 * settled; a file whose writer has not written for that long (an idle log
 * kept open) is read as before. */
static bool ic_settled(int fd, const struct stat *st)
{
    int64_t age = ic_age_ns(st);
    if (age < 0) /* a clock step back: as before, not waited for */
        return true;
    return age >= INGCORE_RACY_NS && (age >= INGCORE_WRITING_NS || ic_writers(fd) != 1);
}

/* Gives a file written in the last moments time to age, taking its
 * identity again, until it is settled (ic_settled).  False when it is not
 * within INGCORE_WRITING_NS: its identity proves nothing, the caller
 * reads it later. */
static bool ic_age(int fd, struct stat *st)
{
    for (int64_t waited = 0; !ic_settled(fd, st); waited += INGCORE_RACY_NS) {
        if (waited >= INGCORE_WRITING_NS)
            return false;
        struct timespec d = {0, INGCORE_RACY_NS};
        nanosleep(&d, NULL);
        if (fstat(fd, st) < 0)
            return false;
    }
    return true;
}

/* A file the index knows: its size counted done and unchanged. */
static void ic_reused(struct ingcore *c, uint64_t size)
{
    pthread_mutex_lock(&c->mu);
    c->files_unchanged++;
    ic_done_locked(c, (int64_t)size);
    pthread_mutex_unlock(&c->mu);
}

/* Takes the chunks of a file the index knows into the reader's list. */
static void ic_reuse(struct ingcore_reader *rd, struct mchunk *v, size_t n, uint64_t size)
{
    free(rd->fchunks);
    rd->fchunks = v;
    rd->nfchunks = rd->fchunks_cap = n;
    ic_reused(rd->c, size);
}

/* The file read: its chunks and digest, checked unchanged (0), or
 * CKS_E_CHANGED (its bytes no longer counted done). */
static int ic_scan_file(struct ingcore_reader *rd, int fd, const struct stat *st1,
                        uint8_t digest[HASH_LEN])
{
    struct ingcore *c = rd->c;
    struct stat st2;
    uint64_t got = 0;
    size_t k = rd->file;
    rd->fdone = 0;
    hash_reset(&rd->fh); /* the digest thread is idle: the last file was drained */
    int e = scan_fd(&rd->scan, fd, ic_chunk, rd, &got, NULL);
    int de = ic_drain(rd); /* every chunk of the file applied (and hashed), in order */
    hash_final(&rd->fh, digest);
    if (c->dkind == MDIGEST_TREE && de == 0)
        de = filedigest_tree(rd->fchunks, rd->nfchunks, digest);
    if (e == 0 || (e > CKS_E_BASE && de < 0))
        e = de;
    if (e < 0) {
        if (e > CKS_E_BASE && !buf_str(rd->err)[0])
            buf_printf(rd->err, "reading \"%s/%s\": %s", c->w.base, c->w.v[k].path, err_str(e));
        return e;
    }
    if (fstat(fd, &st2) < 0 || !index_file_same(st1, &st2) || got != (uint64_t)st1->st_size) {
        pthread_mutex_lock(&c->mu);
        ic_done_locked(c, -(int64_t)rd->fdone);
        pthread_mutex_unlock(&c->mu);
        return CKS_E_CHANGED;
    }
    if (!c->ops->file_read)
        return 0;
    pthread_mutex_lock(&c->mu);
    e = c->ops->file_read(c, &c->keys[k], digest, rd->fchunks, rd->nfchunks);
    pthread_mutex_unlock(&c->mu);
    return e;
}

/* One attempt at the reader's file: 0 done, CKS_E_CHANGED to read it
 * again. */
static int ic_file_once(struct ingcore_reader *rd, struct stat *ret_st, uint8_t digest[HASH_LEN])
{
    struct ingcore *c = rd->c;
    size_t k = rd->file;
    struct stat st1;
    struct index_file_key *key = &c->keys[k];
    struct mchunk *v;
    size_t n;
    int e, fd = ic_open(c, k, rd->err);

    if (fd < 0)
        return fd;
    rd->nfchunks = 0;
    if (fstat(fd, &st1) < 0) {
        e = -errno;
        buf_printf(rd->err, "\"%s/%s\": %s", c->w.base, c->w.v[k].path, strerror(-e));
        goto out;
    }
    if (!ic_age(fd, &st1)) {
        e = CKS_E_CHANGED; /* still being written: ic_read_file's retries */
        goto out;
    }
    index_file_key_of(&st1, key);
    key->kind = c->dkind; /* the record it gets (front end's file_read, the daemon's) */
    e = ingcore_known(c->r, key, c->o.reuse_need ? c->o.reuse_need(c->o.ud) : 0, digest, &v, &n);
    if (e == 1)
        ic_reuse(rd, v, n, (uint64_t)st1.st_size);
    else if (e == 0)
        e = ic_scan_file(rd, fd, &st1, digest);
    if (e >= 0)
        *ret_st = st1;
out:
    close(fd);
    return e < 0 ? e : 0;
}

/* Why walk entry k failed with CKS_E_CHANGED, unless err says already. */
static void ic_changed_msg(struct ingcore *c, size_t k, struct buf *err)
{
    if (buf_str(err)[0])
        return;
    if (c->o.retries > 1)
        buf_printf(err, "\"%s/%s\" kept changing while it was read (%d attempts)", c->w.base,
                   c->w.v[k].path, c->o.retries);
    else
        buf_printf(err, "\"%s/%s\" changed while it was read", c->w.base, c->w.v[k].path);
}

/* Walk entry k read by rd (retries attempts): its chunks in rd->fchunks,
 * a message in rd->err when it fails. */
static int ic_read_file(struct ingcore_reader *rd, size_t k, struct stat *st,
                        uint8_t digest[HASH_LEN])
{
    struct ingcore *c = rd->c;
    int e = CKS_E_CHANGED;
    rd->file = k;
    for (int attempt = 0; attempt < c->o.retries && e == CKS_E_CHANGED; attempt++) {
        e = ic_file_once(rd, st, digest);
        if (e == CKS_E_CHANGED && attempt + 1 < c->o.retries)
            log_warn("\"%s/%s\" changed while it was read; reading it again", c->w.base,
                     c->w.v[k].path);
    }
    if (e == CKS_E_CHANGED)
        ic_changed_msg(c, k, rd->err);
    return e;
}

/* A file found unchanged before the read (c->kept): its chunks from the
 * index.  CKS_E_CHANGED if its record went meanwhile. */
static int ic_kept_file(struct ingcore *c, size_t k, uint8_t digest[HASH_LEN], struct mchunk **v,
                        size_t *n)
{
    index_file_key_of(&c->kept[k], &c->keys[k]);
    c->keys[k].kind = c->dkind;
    int e = ingcore_known(c->r, &c->keys[k], 0, digest, v, n);
    if (e == 0) {
        pthread_mutex_lock(&c->mu); /* readers' ops may write c->err too */
        ic_changed_msg(c, k, c->err);
        pthread_mutex_unlock(&c->mu);
    }
    if (e <= 0)
        return e < 0 ? e : CKS_E_CHANGED;
    ic_reused(c, (uint64_t)c->kept[k].st_size);
    return 0;
}

/* Walk entry k, a regular file, into the manifest with its chunks. */
static int ic_add_file(struct ingcore *c, size_t k, const struct stat *st,
                       const uint8_t digest[HASH_LEN], const struct mchunk *v, size_t n)
{
    int e = manifest_add_file(&c->m, MFILE_REG, c->w.v[k].path, st->st_mode & 07777, NULL);
    if (e < 0)
        return e;
    manifest_set_mtime(&c->m, st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
    for (size_t i = 0; i < n; i++)
        if ((e = manifest_add_chunk(&c->m, v[i].id, v[i].len)) < 0)
            return e;
    manifest_set_digest(&c->m, digest);
    manifest_set_digest_kind(&c->m, c->dkind);
    c->files++;
    c->bytes += (uint64_t)st->st_size;
    c->chunks += n;
    return 0;
}

static bool ic_is_kept(const struct ingcore *c, size_t k)
{
    return c->kept && c->kept[k].st_ino;
}

/* Serially: walk entry k, a regular file, on the caller's thread. */
static int ic_file(struct ingcore *c, size_t k)
{
    uint8_t digest[HASH_LEN];
    struct stat st = c->w.v[k].st;
    struct mchunk *v = NULL;
    size_t n = 0;
    int e;
    if (ic_is_kept(c, k)) {
        st = c->kept[k];
        if ((e = ic_kept_file(c, k, digest, &v, &n)) == 0)
            e = ic_add_file(c, k, &st, digest, v, n);
        free(v);
        return e;
    }
    struct ingcore_reader *rd = c->rd0;
    if ((e = ic_read_file(rd, k, &st, digest)) < 0)
        return e;
    return ic_add_file(c, k, &st, digest, rd->fchunks, rd->nfchunks);
}

/* A directory or link into the manifest. */
static int ic_other(struct ingcore *c, const struct walk_entry *we)
{
    int e = manifest_add_file(&c->m, we->type, we->path, we->st.st_mode & 07777, we->link);
    if (e == 0)
        manifest_set_mtime(&c->m, we->st.st_mtim.tv_sec, we->st.st_mtim.tv_nsec);
    c->dirs += we->type == MFILE_DIR;
    c->links += we->type == MFILE_LINK;
    return e;
}

static int ic_entries_serial(struct ingcore *c)
{
    for (size_t k = 0; k < c->w.n; k++) {
        const struct walk_entry *we = &c->w.v[k];
        int e = we->type == MFILE_REG ? ic_file(c, k) : ic_other(c, we);
        if (e < 0)
            return e;
    }
    return 0;
}

/* ---- several readers ------------------------------------------------------ */

/* How many files are read at once, and each reader's share of the jobs:
 * R readers of `per` jobs hold at most R * (per + 2) maximal chunks (the
 * jobs' copies, and each scan's buffer of two), never more than the
 * serial reader with every job does (njobs + 2).  Files found unchanged
 * before the read (c->kept) are not read. */
static size_t ic_par_count(const struct ingcore *c, size_t *per)
{
    size_t nread = 0;
    for (size_t k = 0; k < c->w.n; k++)
        nread += c->w.v[k].type == MFILE_REG && !ic_is_kept(c, k);
    size_t r = c->o.readers ? c->o.readers : pool_size(c->pool);
    if (r > nread)
        r = nread;
    if (r > (c->njobs + 2) / 3)
        r = (c->njobs + 2) / 3;
    *per = r > 1 ? (c->njobs + 2) / r - 2 : c->njobs;
    return r;
}

/* The next walk entry to read, in walk order: SIZE_MAX when none is left,
 * or the next comes after a file that failed. */
static size_t ic_par_take(struct ingcore *c, struct ingcore_par *par)
{
    size_t k = SIZE_MAX;
    pthread_mutex_lock(&par->mu);
    while (par->next < c->w.n && (c->w.v[par->next].type != MFILE_REG || ic_is_kept(c, par->next)))
        par->next++;
    if (par->next < c->w.n && par->next < __atomic_load_n(&par->fail_at, __ATOMIC_ACQUIRE))
        k = par->next++;
    pthread_mutex_unlock(&par->mu);
    return k;
}

/* A reader thread: files in walk order, each one's outcome into res[k]. */
static void *ic_par_main(void *arg)
{
    struct ingcore_reader *rd = arg;
    struct ingcore_par *par = rd->par;
    size_t k;
    while ((k = ic_par_take(rd->c, par)) != SIZE_MAX) {
        struct ic_fres *f = &par->res[k];
        buf_reset(&rd->ebuf);
        int e = ic_read_file(rd, k, &f->st, f->digest);
        if (e == 0) {
            f->v = rd->fchunks;
            f->n = rd->nfchunks;
            rd->fchunks = NULL;
            rd->nfchunks = rd->fchunks_cap = 0;
        } else if (buf_str(&rd->ebuf)[0]) {
            f->msg = strdup(buf_str(&rd->ebuf));
        }
        pthread_mutex_lock(&par->mu);
        f->e = e;
        f->ready = true;
        if (e < 0 && k < __atomic_load_n(&par->fail_at, __ATOMIC_ACQUIRE))
            __atomic_store_n(&par->fail_at, k, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&par->cv);
        pthread_mutex_unlock(&par->mu);
    }
    return NULL;
}

static int ic_par_start(struct ingcore *c, struct ingcore_par *par, size_t nrd, size_t per)
{
    pthread_mutex_init(&par->mu, NULL);
    pthread_cond_init(&par->cv, NULL);
    par->fail_at = SIZE_MAX;
    par->res = calloc(c->w.n, sizeof(*par->res));
    par->rd = calloc(nrd, sizeof(*par->rd));
    if (!par->res || !par->rd)
        return -ENOMEM;
    par->nrd = nrd;
    for (size_t i = 0; i < nrd; i++) {
        struct ingcore_reader *rd = &par->rd[i];
        int e = ic_reader_init(rd, c, i * per, per);
        if (e < 0)
            return e;
        rd->par = par;
        rd->err = &rd->ebuf;
        if ((e = pthread_create(&rd->th, NULL, ic_par_main, rd)) != 0)
            return -e;
        par->started++;
    }
    return 0;
}

/* Every reader told to stop (a file being read is left), joined, freed. */
static void ic_par_stop(struct ingcore *c, struct ingcore_par *par)
{
    pthread_mutex_lock(&par->mu);
    __atomic_store_n(&par->fail_at, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&par->mu);
    for (size_t i = 0; i < par->started; i++)
        pthread_join(par->rd[i].th, NULL);
    for (size_t i = 0; par->rd && i < par->nrd; i++)
        ic_reader_free(&par->rd[i]);
    for (size_t k = 0; par->res && k < c->w.n; k++) {
        free(par->res[k].v);
        free(par->res[k].msg);
    }
    free(par->res);
    free(par->rd);
    pthread_cond_destroy(&par->cv);
    pthread_mutex_destroy(&par->mu);
}

/* Walk entry k's outcome, once its reader has it. */
static struct ic_fres *ic_par_wait(struct ingcore_par *par, size_t k)
{
    pthread_mutex_lock(&par->mu);
    while (!par->res[k].ready)
        pthread_cond_wait(&par->cv, &par->mu);
    pthread_mutex_unlock(&par->mu);
    return &par->res[k];
}

/* Every entry into the manifest in walk order, as the readers finish. */
static int ic_par_collect(struct ingcore *c, struct ingcore_par *par)
{
    for (size_t k = 0; k < c->w.n; k++) {
        const struct walk_entry *we = &c->w.v[k];
        int e;
        if (we->type != MFILE_REG || ic_is_kept(c, k)) {
            e = we->type == MFILE_REG ? ic_file(c, k) : ic_other(c, we);
        } else {
            struct ic_fres *f = ic_par_wait(par, k);
            if ((e = f->e) == 0)
                e = ic_add_file(c, k, &f->st, f->digest, f->v, f->n);
            pthread_mutex_lock(&c->mu);
            if (f->e < 0 && f->msg && !buf_str(c->err)[0])
                buf_printf(c->err, "%s", f->msg);
            pthread_mutex_unlock(&c->mu);
        }
        if (e < 0)
            return e;
    }
    return 0;
}

int ingcore_entries(struct ingcore *c)
{
    size_t per, nrd = ic_par_count(c, &per);
    c->readers_used = nrd > 1 ? nrd : 1;
    if (nrd <= 1)
        return ic_entries_serial(c);
    struct ingcore_par par;
    memset(&par, 0, sizeof(par));
    int e = ic_par_start(c, &par, nrd, per);
    if (e == 0)
        e = ic_par_collect(c, &par);
    ic_par_stop(c, &par);
    return e;
}

/* ---- the snapshot's records ---------------------------------------------- */

int ingcore_record(const struct ingcore *c, struct index_txn *t)
{
    return snaprec_add(t, &c->m, c->bytes, 0);
}
