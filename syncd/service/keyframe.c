/*
 * keyframe.c — the keyframe of a snapshot and its chunks' bytes (see
 * keyframe.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "service/catalog.h"
#include "service/keyframe.h"
#include "service/manifests.h"
#include "service/rgchunk.h"

/* ---- which keyframe --------------------------------------------------- */

static int kf_id_desc(const void *a, const void *b)
{
    return -strcmp(((const struct catalog_snap *)a)->id, ((const struct catalog_snap *)b)->id);
}

/* Whether m names a base outside its files (a k line): a delta. */
static bool kf_is_delta(const struct manifest *m)
{
    for (size_t i = 0; i < m->nextras; i++)
        if (!m->extras[i].recipe)
            return true;
    return false;
}

int keyframe_find(struct repo *r, const char *run, int64_t step, unsigned every,
                  struct manifest *ret, bool *ret_found, struct buf *err)
{
    struct catalog_snap *v = NULL;
    size_t n = 0;
    unsigned deltas = 0, skipped = 0;
    (void)err;
    *ret_found = false;
    if (every <= 1 || step < 0)
        return 0;
    int e = catalog_snapshots(r, run, &v, &n);
    if (e < 0)
        return e == -ENOMEM ? e : 0;
    qsort(v, n, sizeof(*v), kf_id_desc);
    for (size_t k = 0; k < n && deltas + 1 < every && skipped <= every; k++) {
        struct manifest m;
        struct buf why = BUF_INIT;
        manifest_init(&m);
        if (manifests_read(r, run, v[k].id, &m, NULL, &why) < 0) {
            log_warn("keyframe: snapshot %s of run %s skipped: %s", v[k].id, run, buf_str(&why));
            skipped++;
        } else if (m.step < 0 || m.step >= step) {
            skipped++;
        } else if (!kf_is_delta(&m)) {
            *ret = m; /* taken */
            *ret_found = true;
            buf_free(&why);
            break;
        } else {
            deltas++;
        }
        manifest_free(&m);
        buf_free(&why);
    }
    free(v);
    return 0;
}

/* ---- its chunks' bytes ------------------------------------------------- */

struct kfbase {
    struct repo *r;
    struct manifest kf;
    char *dir;
    struct dplan_cut *cuts; /* kf.chunks' cuts, offsets within their files */
    bool *plain;            /* per chunk: stored plain in the keyframe */
    int *fd;                /* per file: its bytes (local or filled), -1 */
    bool *local;            /* per file: fd is the local copy */
    struct region *rg[CONFIG_MAX_REGIONS];
    size_t nrg;
    struct chunkobj_ctx z;
    pthread_mutex_t mu;      /* rg, z */
    uint64_t nlocal, nfetch; /* chunks read (atomic) */
};

const struct manifest *kfbase_manifest(const struct kfbase *b)
{
    return &b->kf;
}

void kfbase_free(struct kfbase *b)
{
    if (!b)
        return;
    for (size_t f = 0; b->fd && f < b->kf.nfiles; f++)
        if (b->fd[f] >= 0)
            close(b->fd[f]);
    for (size_t i = 0; i < b->nrg; i++)
        region_free(b->rg[i]);
    chunkobj_ctx_free(&b->z);
    manifest_free(&b->kf);
    free(b->dir);
    free(b->cuts);
    free(b->plain);
    free(b->fd);
    free(b->local);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

/* The cuts of every file, and which chunks are plain. */
static int kf_cuts(struct kfbase *b)
{
    const struct manifest *m = &b->kf;
    size_t n = m->nchunks ? m->nchunks : 1, nf = m->nfiles ? m->nfiles : 1;
    b->cuts = calloc(n, sizeof(*b->cuts));
    b->plain = calloc(n, sizeof(*b->plain));
    b->fd = malloc(nf * sizeof(*b->fd));
    b->local = calloc(nf, sizeof(*b->local));
    if (!b->cuts || !b->plain || !b->fd || !b->local)
        return -ENOMEM;
    for (size_t f = 0; f < m->nfiles; f++) {
        const struct mfile *mf = &m->files[f];
        uint64_t off = 0;
        b->fd[f] = -1;
        for (uint64_t c = 0; mf->type == MFILE_REG && c < mf->nchunks; c++) {
            size_t i = (size_t)(mf->first_chunk + c);
            b->cuts[i] = (struct dplan_cut){.off = off, .len = m->chunks[i].len};
            memcpy(b->cuts[i].id, m->chunks[i].id, HASH_LEN);
            b->plain[i] = !manifest_chunk_recipe(m, i);
            off += m->chunks[i].len;
        }
    }
    return 0;
}

int kfbase_open(struct repo *r, struct manifest *kf, const char *local_dir, struct kfbase **ret,
                struct buf *err)
{
    struct kfbase *b = calloc(1, sizeof(*b));
    if (!b) {
        manifest_free(kf);
        return -ENOMEM;
    }
    pthread_mutex_init(&b->mu, NULL);
    b->r = r;
    b->kf = *kf;
    manifest_init(kf);
    b->z = repo_chunkobj_ctx(r);
    int e = local_dir && !(b->dir = strdup(local_dir)) ? -ENOMEM : kf_cuts(b);
    REPO_FOR_HEALTHY(r, i) {
        if (e < 0)
            break;
        if ((e = repo_region_clone(r, i, &b->rg[b->nrg], err)) == 0)
            b->nrg++;
    }
    if (e < 0) {
        kfbase_free(b);
        return e;
    }
    *ret = b;
    return 0;
}

long kfbase_file(const struct kfbase *b, const char *path)
{
    for (size_t f = 0; f < b->kf.nfiles; f++)
        if (b->kf.files[f].type == MFILE_REG && !strcmp(b->kf.files[f].path, path))
            return (long)f;
    return -1;
}

const struct dplan_cut *kfbase_cuts(const struct kfbase *b, size_t f, size_t *ret_n)
{
    const struct mfile *mf = &b->kf.files[f];
    *ret_n = (size_t)mf->nchunks;
    return b->cuts + mf->first_chunk;
}

bool kfbase_owns(const struct kfbase *b, const struct dplan_cut *c)
{
    return c >= b->cuts && c < b->cuts + b->kf.nchunks;
}

bool kfbase_plain(const struct kfbase *b, const struct dplan_cut *c)
{
    return kfbase_owns(b, c) && b->plain[c - b->cuts];
}

/* Chunk id (len bytes) from the regions, in order, into out. */
static int kf_fetch(struct kfbase *b, const uint8_t id[HASH_LEN], uint32_t len, struct buf *out,
                    struct buf *err)
{
    int e = -ENOENT;
    pthread_mutex_lock(&b->mu);
    for (size_t i = 0; i < b->nrg; i++) {
        b->z.keys = b->rg[i]->seal;
        if ((e = rgchunk_get(b->rg[i], &b->z, &b->kf, id, len, out, err)) == 0)
            break;
    }
    pthread_mutex_unlock(&b->mu);
    if (e < 0) {
        char hex[2 * HASH_LEN + 1];
        hex_encode(id, HASH_LEN, hex);
        buf_printf(err, "%sbase chunk %s of keyframe %s: no region holds it intact",
                   err->len ? "; " : "", hex, b->kf.id);
    }
    return e;
}

int kfbase_read(struct kfbase *b, size_t f, uint64_t off, uint32_t len, const uint8_t id[HASH_LEN],
                struct buf *out, struct buf *err)
{
    uint8_t got[HASH_LEN];
    buf_reset(out);
    if (buf_reserve(out, len ? len : 1) < 0)
        return -ENOMEM;
    if (f < b->kf.nfiles && b->fd[f] >= 0) {
        ssize_t n = pread(b->fd[f], out->data, len, (off_t)off);
        if (n == (ssize_t)len) {
            repo_chunk_id(b->r, out->data, len, got);
            if (!memcmp(got, id, HASH_LEN)) {
                out->len = len;
                if (b->local[f]) /* (a filled file's chunks were counted as fetched) */
                    __atomic_add_fetch(&b->nlocal, 1, __ATOMIC_RELAXED);
                return 0;
            }
        }
    }
    __atomic_add_fetch(&b->nfetch, 1, __ATOMIC_RELAXED);
    return kf_fetch(b, id, len, out, err);
}

int kfbase_get(struct kfbase *b, const uint8_t id[HASH_LEN], struct buf *out, struct buf *err)
{
    const struct manifest *m = &b->kf;
    for (size_t f = 0; f < m->nfiles; f++)
        for (uint64_t c = 0; m->files[f].type == MFILE_REG && c < m->files[f].nchunks; c++) {
            const struct dplan_cut *cut = &b->cuts[m->files[f].first_chunk + c];
            if (!memcmp(cut->id, id, HASH_LEN))
                return kfbase_read(b, f, cut->off, cut->len, id, out, err);
        }
    return -ENOENT;
}

void kfbase_counts(const struct kfbase *b, uint64_t *ret_local, uint64_t *ret_fetched)
{
    *ret_local = __atomic_load_n(&b->nlocal, __ATOMIC_RELAXED);
    *ret_fetched = __atomic_load_n(&b->nfetch, __ATOMIC_RELAXED);
}

/* File f's local copy (dir/path, of the keyframe's size) as b->fd[f]. */
static void kf_local(struct kfbase *b, size_t f)
{
    const struct mfile *mf = &b->kf.files[f];
    struct stat st;
    char *p = NULL;
    if (!b->dir || asprintf(&p, "%s/%s", b->dir, mf->path) < 0)
        return;
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    free(p);
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == mf->size) {
        b->fd[f] = fd;
        b->local[f] = true;
    } else if (fd >= 0) {
        close(fd);
    }
}

/* File f filled from the regions into an unlinked temporary file. */
static int kf_fill(struct kfbase *b, size_t f)
{
    const struct mfile *mf = &b->kf.files[f];
    const char *tmp = getenv("TMPDIR");
    char *p = NULL;
    struct buf chunk = BUF_INIT, err = BUF_INIT;
    if (asprintf(&p, "%s/ckptsync-keyframe.XXXXXX", tmp && *tmp ? tmp : "/tmp") < 0)
        return -ENOMEM;
    int fd = mkostemp(p, O_CLOEXEC), e = fd < 0 ? -errno : 0;
    if (fd >= 0)
        unlink(p);
    free(p);
    for (uint64_t c = 0, off = 0; e == 0 && c < mf->nchunks; c++) {
        const struct dplan_cut *cut = &b->cuts[mf->first_chunk + c];
        __atomic_add_fetch(&b->nfetch, 1, __ATOMIC_RELAXED);
        if ((e = kf_fetch(b, cut->id, cut->len, &chunk, &err)) == 0 &&
            pwrite(fd, chunk.data, cut->len, (off_t)off) != (ssize_t)cut->len)
            e = -errno ? -errno : -EIO;
        off += cut->len;
    }
    if (e < 0) {
        log_warn("keyframe %s: \"%s\" could not be read from the regions (%s%s%s); its deltas "
                 "are stored plain",
                 b->kf.id, mf->path, err_str(e), err.len ? ": " : "", buf_str(&err));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    buf_free(&chunk);
    buf_free(&err);
    b->fd[f] = fd;
    return e;
}

int kfbase_fd(struct kfbase *b, size_t f, uint64_t *ret_size)
{
    if (f >= b->kf.nfiles || b->kf.files[f].type != MFILE_REG)
        return -EINVAL;
    *ret_size = b->kf.files[f].size;
    if (b->fd[f] < 0)
        kf_local(b, f);
    if (b->fd[f] < 0) {
        int e = kf_fill(b, f);
        if (e < 0)
            return e;
    }
    return b->fd[f];
}
