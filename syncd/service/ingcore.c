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
 * - The whole-file digest is serial by nature, and was a third of the
 *   reading thread's time (perf, daemon into three dir regions: 2.3 of 7
 *   CPU s per GB).  With a pool of several threads it runs on a thread of
 *   its own: each chunk goes to it in file order as it is handed to the
 *   pool, and a job is applied (and its slot reused) only once both are
 *   done with its bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "service/catalog.h"
#include "service/ingcore.h"
#include "service/runlineage.h"

#define INGCORE_RACY_NS 20000000 /* 20 ms: several timestamp ticks */

static struct ingcore_job *ic_job(struct ingcore *c, size_t k)
{
    return (struct ingcore_job *)(c->jobs + k * c->ops->job_size);
}

/* ---- the digest thread --------------------------------------------------- */

struct ingcore_digest {
    struct ingcore *c;
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
        hash_update(&d->c->fh, j->raw.data, j->raw.len);
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
    d->c = c;
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
    c->dg = d;
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
static void ic_digest_add(struct ingcore *c, struct ingcore_job *j)
{
    struct ingcore_digest *d = c->dg;
    if (!d) {
        hash_update(&c->fh, j->raw.data, j->raw.len);
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
static void ic_digest_wait(struct ingcore *c, struct ingcore_job *j)
{
    struct ingcore_digest *d = c->dg;
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    while (!j->hashed)
        pthread_cond_wait(&d->cv, &d->mu);
    pthread_mutex_unlock(&d->mu);
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
    if (c->o.retries < 1)
        c->o.retries = 1;
    manifest_init(&c->m);
    int e = scan_init(&c->scan, repo_chunker(r));
    if (e < 0 || (e = hash_init(&c->fh)) < 0)
        return e;
    c->fh_ok = true;
    c->jobs = calloc(c->njobs, ops->job_size);
    c->jptr = calloc(c->njobs, sizeof(*c->jptr));
    if (!c->jobs || !c->jptr)
        return -ENOMEM;
    for (size_t k = 0; k < c->njobs; k++) {
        struct ingcore_job *j = ic_job(c, k);
        j->c = c;
        c->jptr[k] = &j->pj;
    }
    pool_window_init(&c->win, pool, c->jptr, c->njobs);
    return pool_size(pool) > 1 ? ic_digest_start(c) : 0;
}

static int ic_drain(struct ingcore *c);

void ingcore_free(struct ingcore *c)
{
    if (c->jptr)
        ic_drain(c); /* jobs in flight use what follows */
    ic_digest_stop(c);
    if (c->fh_ok)
        hash_free(&c->fh);
    for (size_t k = 0; c->jobs && k < c->njobs; k++)
        buf_free(&ic_job(c, k)->raw);
    free(c->jobs);
    free(c->jptr);
    free(c->fchunks);
    free(c->keys);
    scan_free(&c->scan);
    walk_free(&c->w);
    manifest_free(&c->m);
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

static int ic_fchunk(struct ingcore *c, const uint8_t id[HASH_LEN], uint32_t len)
{
    if (c->nfchunks == c->fchunks_cap) {
        size_t cap = c->fchunks_cap ? c->fchunks_cap * 2 : 64;
        struct mchunk *v = realloc(c->fchunks, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        c->fchunks = v;
        c->fchunks_cap = cap;
    }
    memcpy(c->fchunks[c->nfchunks].id, id, HASH_LEN);
    c->fchunks[c->nfchunks++].len = len;
    return 0;
}

/* Waits for the oldest job in flight and applies it: the front end's
 * outcome first, then the chunk's place in the file. */
static int ic_next(struct ingcore *c)
{
    struct ingcore_job *j = (struct ingcore_job *)pool_window_oldest(&c->win);
    ic_digest_wait(c, j); /* its slot is free only then */
    int e = c->ops->apply(j, c->m.nchunks + c->nfchunks);
    if (e == 0 && j->err < 0) {
        e = j->err;
        if (!buf_str(c->err)[0])
            buf_printf(c->err, "%s", j->msg[0] ? j->msg : err_str(e));
    }
    if (e == 0 && (e = ic_fchunk(c, j->id, (uint32_t)j->raw.len)) == 0) {
        c->done += j->raw.len;
        if (c->o.progress)
            c->o.progress(c->o.ud, c->done, c->w.bytes);
    }
    return c->jfail ? c->jfail : (c->jfail = e);
}

/* Every job in flight done and applied; the first error among them. */
static int ic_drain(struct ingcore *c)
{
    while (c->win.count)
        ic_next(c);
    int e = c->jfail;
    c->jfail = 0;
    return e;
}

/* The scan's callback: the chunk goes to the pool as a job, the oldest
 * job applied first when every slot is in flight. */
static int ic_chunk(void *ud, const uint8_t *data, size_t len, uint64_t off)
{
    struct ingcore *c = ud;
    if (pool_window_full(&c->win) && ic_next(c) < 0)
        return c->jfail;
    struct ingcore_job *j = ic_job(c, pool_window_next(&c->win));
    buf_reset(&j->raw);
    if (buf_append(&j->raw, data, len) < 0)
        return -ENOMEM;
    j->off = off;
    j->width = scan_width(&c->scan, off, len);
    j->err = 0;
    j->msg[0] = 0;
    if (c->ops->prepare)
        c->ops->prepare(j);
    j->pj.run = ic_job_run;
    ic_digest_add(c, j);
    pool_window_submit(&c->win);
    return 0;
}

/* ---- files ------------------------------------------------------------- */

int ingcore_known(struct repo *r, const struct index_file_key *k, uint32_t need,
                  uint8_t digest[HASH_LEN], struct mchunk **ret_v, size_t *ret_n)
{
    struct index_txn *t;
    struct mchunk *v = NULL;
    size_t n = 0;
    int e = index_txn_begin(repo_index(r), false, &t);
    if (e < 0)
        return e;
    e = index_file_get(t, k, digest, &v, &n);
    for (size_t i = 0; e == 0 && need && i < n; i++) {
        struct index_chunk ch;
        if (index_chunk_get(t, v[i].id, &ch) < 0 || (ch.presence & need) != need)
            e = -ENOENT;
    }
    index_txn_abort(t);
    if (e < 0 || !ret_v) {
        free(v);
        return e == 0 ? 1 : e == -ENOENT ? 0 : e;
    }
    *ret_v = v;
    *ret_n = n;
    return 1;
}

int ingcore_open(struct ingcore *c, size_t k)
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
            buf_printf(c->err, "opening \"%s\": %s", buf_str(&p), strerror(-fd));
        }
    }
    buf_free(&p);
    return fd;
}

/* Gives a file written in the last few milliseconds time to age, then
 * takes its identity again. */
static void ic_age(int fd, struct stat *st)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t age_ns = ((int64_t)now.tv_sec - st->st_mtim.tv_sec) * 1000000000 +
                     (now.tv_nsec - st->st_mtim.tv_nsec);
    if (age_ns >= 0 && age_ns < INGCORE_RACY_NS) {
        struct timespec d = {0, INGCORE_RACY_NS};
        nanosleep(&d, NULL);
        fstat(fd, st);
    }
}

/* Takes the chunks of a file the index knows into the file's list. */
static void ic_reuse(struct ingcore *c, struct mchunk *v, size_t n, uint64_t size)
{
    free(c->fchunks);
    c->fchunks = v;
    c->nfchunks = c->fchunks_cap = n;
    c->files_unchanged++;
    c->done += size;
    if (c->o.progress)
        c->o.progress(c->o.ud, c->done, c->w.bytes);
}

/* One attempt at walk entry k: 0 done, CKS_E_CHANGED to read it again. */
static int ic_file_once(struct ingcore *c, size_t k, struct stat *ret_st, uint8_t digest[HASH_LEN])
{
    struct stat st1, st2;
    struct index_file_key *key = &c->keys[k];
    struct mchunk *v;
    size_t n;
    uint64_t got = 0;
    int e, fd = ingcore_open(c, k);

    if (fd < 0)
        return fd;
    c->nfchunks = 0;
    if (fstat(fd, &st1) < 0) {
        e = -errno;
        buf_printf(c->err, "\"%s/%s\": %s", c->w.base, c->w.v[k].path, strerror(-e));
        goto out;
    }
    ic_age(fd, &st1);
    index_file_key_of(&st1, key);
    e = ingcore_known(c->r, key, c->o.reuse_need ? c->o.reuse_need(c->o.ud) : 0, digest, &v, &n);
    if (e < 0)
        goto out;
    if (e == 1) {
        ic_reuse(c, v, n, (uint64_t)st1.st_size);
        goto out_ok;
    }
    uint64_t done0 = c->done;
    hash_reset(&c->fh); /* the digest thread is idle: the last file was drained */
    e = scan_fd(&c->scan, fd, ic_chunk, c, &got, NULL);
    int de = ic_drain(c); /* every chunk of the file applied (and hashed), in order */
    hash_final(&c->fh, digest);
    if (e == 0 || (e > CKS_E_BASE && de < 0))
        e = de;
    if (e < 0) {
        if (e > CKS_E_BASE && !buf_str(c->err)[0])
            buf_printf(c->err, "reading \"%s/%s\": %s", c->w.base, c->w.v[k].path, err_str(e));
        goto out;
    }
    if (fstat(fd, &st2) < 0 || !index_file_same(&st1, &st2) || got != (uint64_t)st1.st_size) {
        c->done = done0;
        e = CKS_E_CHANGED;
        goto out;
    }
    if (c->ops->file_read && (e = c->ops->file_read(c, key, digest, c->fchunks, c->nfchunks)) < 0)
        goto out;
out_ok:
    *ret_st = st1;
    e = 0;
out:
    close(fd);
    return e;
}

/* A file found unchanged before the read (c->kept): its chunks from the
 * index.  CKS_E_CHANGED if its record went meanwhile. */
static int ic_kept_file(struct ingcore *c, size_t k, uint8_t digest[HASH_LEN])
{
    struct mchunk *v;
    size_t n;
    index_file_key_of(&c->kept[k], &c->keys[k]);
    int e = ingcore_known(c->r, &c->keys[k], 0, digest, &v, &n);
    if (e <= 0)
        return e < 0 ? e : CKS_E_CHANGED;
    ic_reuse(c, v, n, (uint64_t)c->kept[k].st_size);
    return 0;
}

static int ic_file(struct ingcore *c, size_t k)
{
    const struct walk_entry *we = &c->w.v[k];
    uint8_t digest[HASH_LEN];
    struct stat st = we->st;
    int e = CKS_E_CHANGED;

    if (c->kept && c->kept[k].st_ino) {
        st = c->kept[k];
        e = ic_kept_file(c, k, digest);
    } else {
        for (int attempt = 0; attempt < c->o.retries && e == CKS_E_CHANGED; attempt++) {
            e = ic_file_once(c, k, &st, digest);
            if (e == CKS_E_CHANGED && attempt + 1 < c->o.retries)
                log_warn("\"%s/%s\" changed while it was read; reading it again", c->w.base,
                         we->path);
        }
    }
    if (e == CKS_E_CHANGED && !buf_str(c->err)[0]) {
        if (c->o.retries > 1)
            buf_printf(c->err, "\"%s/%s\" kept changing while it was read (%d attempts)", c->w.base,
                       we->path, c->o.retries);
        else
            buf_printf(c->err, "\"%s/%s\" changed while it was read", c->w.base, we->path);
    }
    if (e < 0)
        return e;
    if ((e = manifest_add_file(&c->m, MFILE_REG, we->path, st.st_mode & 07777, NULL)) < 0)
        return e;
    manifest_set_mtime(&c->m, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    for (size_t i = 0; i < c->nfchunks; i++)
        if ((e = manifest_add_chunk(&c->m, c->fchunks[i].id, c->fchunks[i].len)) < 0)
            return e;
    manifest_set_digest(&c->m, digest);
    c->files++;
    c->bytes += (uint64_t)st.st_size;
    c->chunks += c->nfchunks;
    return 0;
}

int ingcore_entries(struct ingcore *c)
{
    for (size_t k = 0; k < c->w.n; k++) {
        const struct walk_entry *we = &c->w.v[k];
        int e = 0;
        if (we->type == MFILE_REG) {
            e = ic_file(c, k);
        } else {
            e = manifest_add_file(&c->m, we->type, we->path, we->st.st_mode & 07777, we->link);
            if (e == 0)
                manifest_set_mtime(&c->m, we->st.st_mtim.tv_sec, we->st.st_mtim.tv_nsec);
            c->dirs += we->type == MFILE_DIR;
            c->links += we->type == MFILE_LINK;
        }
        if (e < 0)
            return e;
    }
    return 0;
}

/* ---- the snapshot's records ---------------------------------------------- */

int ingcore_record(const struct ingcore *c, struct index_txn *t)
{
    const struct manifest *m = &c->m;
    struct index_snap rec = {
        .step = m->step, .time = m->time, .bytes = c->bytes, .nfiles = manifest_regular_files(m)};
    int e = 0;
    for (size_t i = 0; i < m->nchunks && e == 0; i++) {
        struct index_chunk ch = {0};
        int ge = index_chunk_get(t, m->chunks[i].id, &ch);
        if (ge < 0 && ge != -ENOENT)
            return ge;
        ch.raw_len = m->chunks[i].len;
        ch.refcount++;
        e = index_chunk_put(t, m->chunks[i].id, &ch);
    }
    return e < 0 ? e : index_snap_put(t, m->run, m->id, &rec);
}
