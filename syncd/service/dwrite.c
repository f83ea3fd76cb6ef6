/*
 * dwrite.c — the writer of derived-bf16 recipes (see dwrite.h).
 *
 * Design notes.
 * - Matching is by (numel, a fingerprint of DW_SAMPLES elements at spread
 *   places): the fp32 side's samples are derived (tdelta_bf16_derive) and
 *   hashed, the bf16 side's hashed as read, and the fp32 fingerprints
 *   sorted, so n tensors cost O(n log n) and DW_SAMPLES preads each,
 *   whatever their shapes.  Tensors under DW_MIN_NUMEL elements are left
 *   alone (a recipe's tables would eat what they save).
 * - Phase B keeps the base chunks of the last chunk: consecutive bf16
 *   chunks derive from neighbouring fp32 chunks.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/dplan.h"
#include "engine/tdelta.h"
#include "engine/tensorview.h"
#include "service/dwrite.h"
#include "service/keyframe.h"
#include "service/pool.h"
#include "service/scan.h"
#include "store/layout.h"
#include "store/recidx.h"

#define DW_SAMPLES 32
#define DW_MIN_NUMEL 1024

struct dw_range {
    uint64_t off, len;
};

struct dw_file {
    struct dplan_pair *pairs; /* its bf16 and delta ranges, sorted by b16, disjoint */
    size_t npairs, pcap;
    struct dplan_pair *xpairs; /* of them, the deltas (dwrite_xor) */
    size_t nxpairs;
    struct dw_range *f32; /* its matched fp32 ranges, sorted, merged */
    size_t nf32, fcap;
    struct dplan_cut *cuts; /* phase B: its chunks, from the manifest */
    size_t ncuts;
};

struct dw_item {
    size_t file;
    uint64_t off;
    uint32_t len;
    uint8_t id[HASH_LEN];
    bool xonly;     /* holds fp32 bytes of a pair: planned against the keyframe only */
    uint8_t width;  /* the read's byte-plane width (dwrite_defer): stored plain so */
    bool recipe;    /* phase B's decision */
    uint8_t *bytes; /* the chunk as the read hashed it (dwrite_defer_bytes), owned,
                     * read-only in phase B (a derivation's base too); NULL: read
                     * again in phase B */
};

/* A candidate tensor of the pre-pass. */
struct dw_cand {
    size_t file;
    uint64_t begin, numel, fp;
};

struct dwrite {
    size_t nfiles;
    struct dw_file *f;
    pthread_mutex_t mu; /* def */
    struct dw_item *def;
    size_t ndef, dcap;
    struct mbase *ids; /* phase B: the manifest's chunk ids, sorted */
    size_t nids;
    struct dw_cand *c16, *c32;
    size_t n16, n32, cap16, cap32;
    struct kfbase *kb;   /* the keyframe (dwrite_xor), not owned; NULL: none */
    struct mextra *kids; /* bases outside the snapshot's files: its k lines */
    size_t nkids, kcap;
    uint64_t keep_cap, kept; /* dwrite_keep's budget, the bytes kept (under mu) */
    struct dwrite_stats st;
};

/* A base chunk's plaintext, read in phase B. */
struct dw_bbuf {
    uint8_t id[HASH_LEN];
    struct buf b;
    bool have;
};

int dwrite_new(size_t nfiles, struct dwrite **ret)
{
    struct dwrite *d = calloc(1, sizeof(*d));
    if (!d || !(d->f = calloc(nfiles ? nfiles : 1, sizeof(*d->f)))) {
        free(d);
        return -ENOMEM;
    }
    d->nfiles = nfiles;
    pthread_mutex_init(&d->mu, NULL);
    *ret = d;
    return 0;
}

void dwrite_free(struct dwrite *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->ndef; i++)
        free(d->def[i].bytes);
    for (size_t k = 0; k < d->nfiles; k++) {
        free(d->f[k].pairs);
        free(d->f[k].xpairs);
        free(d->f[k].f32);
        free(d->f[k].cuts);
    }
    free(d->f);
    free(d->def);
    free(d->ids);
    free(d->kids);
    free(d->c16);
    free(d->c32);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

const struct dwrite_stats *dwrite_stats(const struct dwrite *d)
{
    return &d->st;
}

/* Grows *v (of *cap elements of size sz) to hold n + 1. */
static int dw_grow(void **v, size_t *cap, size_t n, size_t sz)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? 2 * *cap : 64;
    void *p = realloc(*v, c * sz);
    if (!p)
        return -ENOMEM;
    *v = p;
    *cap = c;
    return 0;
}

/* ---- the pre-pass ------------------------------------------------------ */

static uint64_t dw_fnv(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The fingerprint of tensor t (bf16, or fp32 derived to bf16): 0 and
 * *ret_fp, or -1 when it cannot be read. */
static int dw_fingerprint(int fd, const struct tensorview_tensor *t, bool f32, uint64_t *ret_fp)
{
    uint8_t s[2 * DW_SAMPLES];
    size_t w = f32 ? 4 : 2;
    for (size_t j = 0; j < DW_SAMPLES; j++) {
        uint64_t at = t->begin + (t->numel - 1) * j / (DW_SAMPLES - 1) * w;
        uint8_t e[4];
        if (pread(fd, e, w, (off_t)at) != (ssize_t)w)
            return -1;
        if (f32)
            tdelta_bf16_derive(e, 1, TDELTA_NAN_TORCH_CPU, s + 2 * j);
        else
            memcpy(s + 2 * j, e, 2);
    }
    uint8_t n[8];
    for (int i = 0; i < 8; i++)
        n[i] = (uint8_t)(t->numel >> (8 * i));
    *ret_fp = dw_fnv(dw_fnv(0xcbf29ce484222325ull, n, 8), s, sizeof(s));
    return 0;
}

/* File k's candidate tensors into d's lists (only its fp32 ones when
 * bases_only: it will not be read). */
static int dw_view_cands(struct dwrite *d, size_t k, int fd, const struct tensorview *v,
                         bool bases_only)
{
    for (size_t i = 0; i < v->n; i++) {
        const struct tensorview_tensor *t = &v->t[i];
        bool f32 = t->dtype == TENSORVIEW_F32;
        if (!t->contiguous || t->numel < DW_MIN_NUMEL ||
            (!f32 && (bases_only || t->dtype != TENSORVIEW_BF16)))
            continue;
        struct dw_cand c = {.file = k, .begin = t->begin, .numel = t->numel};
        if (dw_fingerprint(fd, t, f32, &c.fp) < 0)
            continue;
        struct dw_cand **v_ = f32 ? &d->c32 : &d->c16;
        size_t *n = f32 ? &d->n32 : &d->n16, *cap = f32 ? &d->cap32 : &d->cap16;
        if (dw_grow((void **)v_, cap, *n, sizeof(**v_)) < 0)
            return -ENOMEM;
        (*v_)[(*n)++] = c;
    }
    return 0;
}

static int dw_cand_cmp(const void *a, const void *b)
{
    const struct dw_cand *x = a, *y = b;
    if (x->fp != y->fp)
        return x->fp < y->fp ? -1 : 1;
    return x->numel < y->numel ? -1 : x->numel > y->numel;
}

/* The pair b (bf16) <- f (fp32) into their files' lists. */
static int dw_add_pair(struct dwrite *d, const struct dw_cand *b, const struct dw_cand *f)
{
    struct dw_file *bf = &d->f[b->file], *ff = &d->f[f->file];
    if (dw_grow((void **)&bf->pairs, &bf->pcap, bf->npairs, sizeof(*bf->pairs)) < 0 ||
        dw_grow((void **)&ff->f32, &ff->fcap, ff->nf32, sizeof(*ff->f32)) < 0)
        return -ENOMEM;
    bf->pairs[bf->npairs++] =
        (struct dplan_pair){.b16 = b->begin, .f32 = f->begin, .n = b->numel, .file = f->file};
    ff->f32[ff->nf32++] = (struct dw_range){f->begin, 4 * f->numel};
    return 0;
}

static int dw_pair_cmp(const void *a, const void *b)
{
    const struct dplan_pair *x = a, *y = b;
    return x->b16 < y->b16 ? -1 : x->b16 > y->b16;
}

static int dw_range_cmp(const void *a, const void *b)
{
    const struct dw_range *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Each file's pairs sorted and disjoint (a tied tensor once), its fp32
 * ranges sorted and merged. */
static void dw_tidy(struct dw_file *f)
{
    size_t n = 0;
    if (f->npairs > 1)
        qsort(f->pairs, f->npairs, sizeof(*f->pairs), dw_pair_cmp);
    for (size_t i = 0; i < f->npairs; i++)
        if (!n || f->pairs[i].b16 >= f->pairs[n - 1].b16 + dplan_span(&f->pairs[n - 1]))
            f->pairs[n++] = f->pairs[i];
    f->npairs = n;
    n = 0;
    if (f->nf32 > 1)
        qsort(f->f32, f->nf32, sizeof(*f->f32), dw_range_cmp);
    for (size_t i = 0; i < f->nf32; i++) {
        struct dw_range *last = n ? &f->f32[n - 1] : NULL;
        if (last && f->f32[i].off <= last->off + last->len) {
            uint64_t end = f->f32[i].off + f->f32[i].len;
            if (end > last->off + last->len)
                last->len = end - last->off;
        } else {
            f->f32[n++] = f->f32[i];
        }
    }
    f->nf32 = n;
}

static int dw_pairs(struct dwrite *d)
{
    if (d->n32 > 1)
        qsort(d->c32, d->n32, sizeof(*d->c32), dw_cand_cmp);
    for (size_t i = 0; d->n32 && i < d->n16; i++) {
        const struct dw_cand *f = bsearch(&d->c16[i], d->c32, d->n32, sizeof(*d->c32), dw_cand_cmp);
        if (f && dw_add_pair(d, &d->c16[i], f) < 0)
            return -ENOMEM;
        d->st.pairs += f != NULL;
    }
    for (size_t k = 0; k < d->nfiles; k++)
        dw_tidy(&d->f[k]);
    free(d->c16);
    free(d->c32);
    d->c16 = d->c32 = NULL;
    d->n16 = d->n32 = d->cap16 = d->cap32 = 0;
    return 0;
}

int dwrite_match(struct dwrite *d, dwrite_open_fn open, void *ud, const uint64_t *sizes,
                 const bool *unchanged)
{
    int e = 0;
    for (size_t k = 0; k < d->nfiles && e == 0; k++) {
        if (sizes[k] < 8)
            continue;
        int fd = open(ud, k);
        if (fd < 0)
            continue;
        struct tensorview v = TENSORVIEW_INIT;
        if (scan_view(fd, sizes[k], &v) == 0)
            e = dw_view_cands(d, k, fd, &v, unchanged && unchanged[k]);
        tensorview_free(&v);
        close(fd);
    }
    return e < 0 ? e : dw_pairs(d);
}

/* ---- deltas against the keyframe (dwrite_xor) ---------------------------- */

/* The element width of a delta of dtype: 0 when none is tried. */
static unsigned dw_xwidth(enum tensorview_dtype t)
{
    return t == TENSORVIEW_F32 ? 4 : t == TENSORVIEW_BF16 || t == TENSORVIEW_F16 ? 2 : 0;
}

/* File k's tensors (view v) matched by name, dtype and numel to those of
 * the keyframe's file kf (view kv), into k's pairs; a tensor a derivation
 * covers (its first n0 pairs) keeps it. */
static int dw_xmatch(struct dwrite *d, size_t k, size_t kf, const struct tensorview *v,
                     const struct tensorview *kv, size_t n0)
{
    struct dw_file *f = &d->f[k];
    for (size_t i = 0; i < v->n; i++) {
        const struct tensorview_tensor *t = &v->t[i], *b = tensorview_find(kv, v->t[i].name);
        unsigned w = dw_xwidth(t->dtype);
        if (!w || !b || !t->contiguous || !b->contiguous || t->numel < DW_MIN_NUMEL ||
            b->dtype != t->dtype || b->numel != t->numel ||
            dplan_overlaps_b16(f->pairs, n0, t->begin, t->numel * w))
            continue;
        if (dw_grow((void **)&f->pairs, &f->pcap, f->npairs, sizeof(*f->pairs)) < 0)
            return -ENOMEM;
        f->pairs[f->npairs++] = (struct dplan_pair){
            .b16 = t->begin, .f32 = b->begin, .n = t->numel, .file = d->nfiles + kf, .xw = w};
        d->st.xpairs++;
    }
    return 0;
}

/* File k's pairs tidied again, its deltas copied into xpairs (sorted),
 * each pair given its base file's cuts when that is the keyframe's. */
static int dw_xtidy(struct dwrite *d, size_t k)
{
    struct dw_file *f = &d->f[k];
    dw_tidy(f);
    free(f->xpairs);
    f->nxpairs = 0;
    if (!(f->xpairs = malloc((f->npairs ? f->npairs : 1) * sizeof(*f->xpairs))))
        return -ENOMEM;
    for (size_t i = 0; i < f->npairs; i++) {
        struct dplan_pair *p = &f->pairs[i];
        if (p->file >= d->nfiles)
            p->cuts = kfbase_cuts(d->kb, p->file - d->nfiles, &p->ncuts);
        if (p->xw)
            f->xpairs[f->nxpairs++] = *p;
    }
    return 0;
}

/* File k (at path) against its keyframe file, if the keyframe has one. */
static int dw_xfile(struct dwrite *d, size_t k, const char *path, int fd, uint64_t size)
{
    struct tensorview v = TENSORVIEW_INIT, kv = TENSORVIEW_INIT;
    uint64_t ksize;
    long kf = kfbase_file(d->kb, path);
    int kfd = kf < 0 ? -1 : kfbase_fd(d->kb, (size_t)kf, &ksize), e = 0;
    if (kfd >= 0 && scan_view(fd, size, &v) == 0 && scan_view(kfd, ksize, &kv) == 0)
        e = dw_xmatch(d, k, (size_t)kf, &v, &kv, d->f[k].npairs);
    tensorview_free(&v);
    tensorview_free(&kv);
    return e < 0 ? e : dw_xtidy(d, k);
}

int dwrite_xor(struct dwrite *d, struct kfbase *kb, const char *const *paths, dwrite_open_fn open,
               void *ud, const uint64_t *sizes, const bool *unchanged)
{
    int e = 0;
    d->kb = kb;
    for (size_t k = 0; k < d->nfiles && e == 0; k++) {
        if (sizes[k] < 8 || !paths[k] || (unchanged && unchanged[k]))
            continue;
        int fd = open(ud, k);
        if (fd < 0)
            continue;
        e = dw_xfile(d, k, paths[k], fd, sizes[k]);
        close(fd);
    }
    return e;
}

bool dwrite_any(const struct dwrite *d)
{
    return d->st.pairs + d->st.xpairs > 0;
}

/* ---- during the read ---------------------------------------------------- */

static bool dw_overlaps_f32(const struct dw_file *f, uint64_t off, uint64_t len)
{
    size_t lo = 0, hi = f->nf32;
    while (lo < hi) { /* the first range ending after off */
        size_t mid = lo + (hi - lo) / 2;
        if (f->f32[mid].off + f->f32[mid].len <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < f->nf32 && f->f32[lo].off < off + len;
}

void dwrite_keep(struct dwrite *d, uint64_t bytes)
{
    d->keep_cap = bytes;
}

/* A copy of data[0..len) when the budget has room for it, else NULL. */
static uint8_t *dw_keep_copy(struct dwrite *d, const uint8_t *data, uint32_t len)
{
    pthread_mutex_lock(&d->mu);
    bool room = data && len && d->kept + len <= d->keep_cap;
    d->kept += room ? len : 0;
    pthread_mutex_unlock(&d->mu);
    uint8_t *p = room ? malloc(len) : NULL;
    if (p) {
        memcpy(p, data, len);
    } else if (room) { /* no memory: read again in phase B, its room given back */
        pthread_mutex_lock(&d->mu);
        d->kept -= len;
        pthread_mutex_unlock(&d->mu);
    }
    return p;
}

bool dwrite_defer_bytes(struct dwrite *d, size_t k, uint64_t off, uint32_t len,
                        const uint8_t id[HASH_LEN], unsigned width, const uint8_t *data)
{
    if (k >= d->nfiles || d->f[k].npairs == 0 ||
        !dplan_overlaps_b16(d->f[k].pairs, d->f[k].npairs, off, len))
        return false;
    /* a chunk holding a derivation's fp32 bytes is a base: a delta at most */
    bool xonly = dw_overlaps_f32(&d->f[k], off, len);
    if (xonly && !dplan_overlaps_b16(d->f[k].xpairs, d->f[k].nxpairs, off, len))
        return false;
    uint8_t *bytes = dw_keep_copy(d, data, len);
    pthread_mutex_lock(&d->mu);
    bool ok = dw_grow((void **)&d->def, &d->dcap, d->ndef, sizeof(*d->def)) == 0;
    if (ok) {
        struct dw_item *it = &d->def[d->ndef++];
        *it = (struct dw_item){.file = k,
                               .off = off,
                               .len = len,
                               .xonly = xonly,
                               .width = (uint8_t)width,
                               .bytes = bytes};
        memcpy(it->id, id, HASH_LEN);
    }
    pthread_mutex_unlock(&d->mu);
    if (!ok)
        free(bytes);
    return ok;
}

bool dwrite_defer(struct dwrite *d, size_t k, uint64_t off, uint32_t len,
                  const uint8_t id[HASH_LEN], unsigned width)
{
    return dwrite_defer_bytes(d, k, off, len, id, width, NULL);
}

/* ---- phase B ------------------------------------------------------------ */

static int dw_item_cmp(const void *a, const void *b)
{
    return memcmp(((const struct dw_item *)a)->id, ((const struct dw_item *)b)->id, HASH_LEN);
}

static struct dw_item *dw_deferred(const struct dwrite *d, const uint8_t id[HASH_LEN])
{
    struct dw_item probe;
    memcpy(probe.id, id, HASH_LEN);
    return d->ndef ? bsearch(&probe, d->def, d->ndef, sizeof(*d->def), dw_item_cmp) : NULL;
}

/* A base of the snapshot's files may be used when its id is nowhere
 * deferred (a plain chunk of the snapshot) or only as a delta against the
 * keyframe (a recipe at depth 1, so the derivation is at depth 2); a
 * keyframe's base when the keyframe stores it plain and this snapshot
 * does not defer it (depth 1, no cycle). */
static bool dw_usable(void *ud, const struct dplan_cut *c)
{
    struct dwrite *d = ud;
    const struct dw_item *it = dw_deferred(d, c->id);
    if (d->kb && kfbase_owns(d->kb, c))
        return !it && kfbase_plain(d->kb, c);
    return !it || it->xonly;
}

/* Each base file's chunks, from m, and each pair's cuts. */
static int dw_cuts(struct dwrite *d, const struct manifest *m)
{
    for (size_t k = 0; k < d->nfiles && k < m->nfiles; k++) {
        struct dw_file *f = &d->f[k];
        const struct mfile *mf = &m->files[k];
        if (f->nf32 == 0 || mf->type != MFILE_REG)
            continue;
        if (!(f->cuts = calloc(mf->nchunks ? mf->nchunks : 1, sizeof(*f->cuts))))
            return -ENOMEM;
        uint64_t off = 0;
        for (uint64_t c = 0; c < mf->nchunks; c++) {
            const struct mchunk *mc = &m->chunks[mf->first_chunk + c];
            f->cuts[c].off = off;
            f->cuts[c].len = mc->len;
            memcpy(f->cuts[c].id, mc->id, HASH_LEN);
            off += mc->len;
        }
        f->ncuts = (size_t)mf->nchunks;
    }
    for (size_t k = 0; k < d->nfiles; k++)
        for (size_t i = 0; i < d->f[k].npairs; i++) {
            struct dplan_pair *p = &d->f[k].pairs[i];
            if (p->file < d->nfiles) { /* a keyframe's keep theirs (dw_xtidy) */
                p->cuts = d->f[p->file].cuts;
                p->ncuts = d->f[p->file].ncuts;
            }
        }
    return 0;
}

/* Bytes [off, off + len) of manifest file k into out, checked to be
 * chunk id when check (else only their count): 0, CKS_E_CHANGED (err says
 * which file), or an error.  Any thread (env->open, which may write
 * env->err, under d->mu). */
static int dw_read_as(struct dwrite *d, const struct manifest *m, const struct dwrite_env *env,
                      size_t k, uint64_t off, uint32_t len, const uint8_t id[HASH_LEN], bool check,
                      struct buf *out, struct buf *err)
{
    uint8_t got[HASH_LEN];
    if (k >= d->nfiles) /* a keyframe's chunk (checked there) */
        return kfbase_read(d->kb, k - d->nfiles, off, len, id, out, err);
    buf_reset(out);
    if (buf_reserve(out, len ? len : 1) < 0)
        return -ENOMEM;
    pthread_mutex_lock(&d->mu);
    int fd = env->open(env->ud, k);
    pthread_mutex_unlock(&d->mu);
    if (fd < 0)
        return fd;
    ssize_t n = pread(fd, out->data, len, (off_t)off);
    int e = n < 0 ? -errno : 0;
    close(fd);
    if (e == 0) {
        out->len = (size_t)n;
        if (check)
            env->chunk_id(env->ud, out->data, out->len, got);
        if ((size_t)n != len || (check && memcmp(got, id, HASH_LEN)))
            e = CKS_E_CHANGED;
    }
    if (e == 0)
        return 0;
    /* under d->mu: err may be env->err, which env->open writes on a pool
     * thread meanwhile */
    pthread_mutex_lock(&d->mu);
    if (e == CKS_E_CHANGED)
        buf_printf(err, "\"%s\" changed during the snapshot; take it again", m->files[k].path);
    else
        buf_printf(err, "reading \"%s\": %s", m->files[k].path, err_str(e));
    pthread_mutex_unlock(&d->mu);
    return e;
}

/* dw_read_as, checked. */
static int dw_read(struct dwrite *d, const struct manifest *m, const struct dwrite_env *env,
                   size_t k, uint64_t off, uint32_t len, const uint8_t id[HASH_LEN],
                   struct buf *out, struct buf *err)
{
    return dw_read_as(d, m, env, k, off, len, id, true, out, err);
}

/* Phase B's buffers, one set per thread. */
struct dw_b {
    struct dplan p;
    struct buf raw, obj, back;
    const uint8_t *rd; /* the chunk's bytes: raw's, or the item's kept ones */
    size_t rl;
    struct dw_bbuf bb[2][TDELTA_MAX_BASES]; /* the last chunk's bases, this one's */
    int cur;
    struct tdelta_scratch sc;
    struct chunkobj_ctx z; /* the repository's keys, this thread's coders */
    struct buf err;
};

static void dw_b_free(struct dw_b *b)
{
    dplan_free(&b->p);
    buf_free(&b->raw);
    buf_free(&b->obj);
    buf_free(&b->back);
    for (int s = 0; s < 2; s++)
        for (size_t k = 0; k < TDELTA_MAX_BASES; k++)
            buf_free(&b->bb[s][k].b);
    tdelta_scratch_free(&b->sc);
    chunkobj_ctx_free(&b->z);
    buf_free(&b->err);
}

/* The plan's bases read (or kept from the last chunk's, prev) into cur
 * and tb: 0, 1 when a keyframe's base cannot be had (kfbase_read), or an
 * error. */
static int dw_bases(struct dwrite *d, const struct manifest *m, const struct dwrite_env *env,
                    struct dw_b *b, struct dw_bbuf *prev, struct dw_bbuf *cur,
                    struct tdelta_base *tb)
{
    const struct dplan *p = &b->p;
    for (size_t k = 0; k < p->nbase; k++) {
        const struct dplan_cut *c = p->base[k].cut;
        const struct dw_item *kept = p->base[k].file < d->nfiles ? dw_deferred(d, c->id) : NULL;
        if (kept && kept->bytes && kept->len == c->len) { /* a delta's, hashed by the read */
            memcpy(tb[k].id, c->id, HASH_LEN);
            tb[k].data = kept->bytes;
            tb[k].len = kept->len;
            continue;
        }
        for (size_t j = 0; j < TDELTA_MAX_BASES && !cur[k].have; j++)
            if (prev[j].have && !memcmp(prev[j].id, c->id, HASH_LEN)) {
                struct dw_bbuf t = cur[k];
                cur[k] = prev[j];
                prev[j] = t;
            }
        if (!cur[k].have) {
            int e = dw_read(d, m, env, p->base[k].file, c->off, c->len, c->id, &cur[k].b, &b->err);
            if (e == -ENOENT && p->base[k].file >= d->nfiles) {
                buf_reset(&b->err); /* a keyframe's base not to be had: no delta */
                return 1;
            }
            if (e < 0)
                return e;
            memcpy(cur[k].id, c->id, HASH_LEN);
            cur[k].have = true;
        }
        memcpy(tb[k].id, c->id, HASH_LEN);
        tb[k].data = cur[k].b.data;
        tb[k].len = cur[k].b.len;
    }
    return 0;
}

/* Whether the recipe in b->obj (stats st) is smaller than the chunk in
 * b->raw stored plain (env->copts at the read's width, as env->plain
 * would store it; its exact size, chunkobj_size: byte planes counted, not
 * coded; b->back may be overwritten).  Only a delta is checked: a
 * derivation is a few bytes. */
static int dw_smaller(const struct dwrite_env *env, const struct dw_item *it, struct dw_b *b,
                      const struct tdelta_stats *st, bool *ret)
{
    size_t plain;
    *ret = true;
    if (!env->copts || st->bytes[TDELTA_XOR] + st->bytes[TDELTA_SUB] == 0)
        return 0;
    struct chunkobj_opts o = *env->copts;
    o.width = it->width;
    int e = chunkobj_size(&b->z, b->rd, b->rl, &o, &b->back, &plain);
    if (e == 0)
        *ret = b->obj.len < plain;
    return e;
}

/* Whether the chunk's bytes (b->rd: read unchecked, or kept) are chunk
 * it. */
static bool dw_raw_is(const struct dwrite_env *env, const struct dw_b *b, const struct dw_item *it)
{
    uint8_t got[HASH_LEN];
    if (it->bytes)
        return true; /* hashed by the read */
    env->chunk_id(env->ud, b->rd, b->rl, got);
    return memcmp(got, it->id, HASH_LEN) == 0;
}

/* The check of the recipe in b->obj: decoded with bases tb, it gives the
 * chunk id (hashed), or the kept bytes that the read hashed to it. */
static int dw_check(const struct dw_item *it, struct dw_b *b, const struct tdelta_base *tb)
{
    if (it->bytes)
        return tdelta_decode_same(&b->z, b->obj.data, b->obj.len, it->bytes, it->len, tb,
                                  b->p.nbase, &b->back);
    return tdelta_decode(&b->z, b->obj.data, b->obj.len, it->id, it->len, tb, b->p.nbase, &b->back);
}

/* Chunk it (in b->raw) encoded as a recipe into b->obj, checked by
 * decoding it: *ret_ok, or not (it stays plain). */
static int dw_encode(struct dwrite *d, const struct manifest *m, const struct dwrite_env *env,
                     const struct dw_item *it, struct dw_b *b, bool *ret_ok)
{
    struct tdelta_base tb[TDELTA_MAX_BASES];
    struct tdelta_stats st;
    const struct dw_file *f = &d->f[it->file];
    *ret_ok = false;
    int e = it->xonly ? dplan_chunk(&b->p, it->off, it->len, f->xpairs, f->nxpairs, dw_usable, d)
                      : dplan_chunk(&b->p, it->off, it->len, f->pairs, f->npairs, dw_usable, d);
    if (e == CKS_E_LIMIT || (e == 0 && b->p.derived == 0))
        return 0;
    struct dw_bbuf *prev = b->bb[b->cur], *cur = b->bb[!b->cur];
    for (size_t k = 0; k < TDELTA_MAX_BASES; k++)
        cur[k].have = false;
    if (e == 0)
        e = dw_bases(d, m, env, b, prev, cur, tb);
    b->cur = !b->cur; /* what this chunk read is the next one's prev */
    if (e != 0)
        return e < 0 ? e : 0; /* 1: a keyframe's base not to be had, stored plain */
    struct tdelta_opts o = {.level = env->level, .scratch = &b->sc};
    e = tdelta_encode(&b->z, b->rd, b->rl, b->p.seg, b->p.nseg, tb, b->p.nbase, &o, &b->obj, &st);
    if (e < 0) {
        buf_printf(&b->err, "encoding a recipe of \"%s\": %s", m->files[it->file].path, err_str(e));
        return e;
    }
    bool smaller = false;
    if (!st.recipe || (e = dw_smaller(env, it, b, &st, &smaller)) < 0 || !smaller)
        return e < 0 ? e : 0;
    e = dw_check(it, b, tb);
    if (e < 0 && dw_raw_is(env, b, it)) /* else the file changed: dw_apply says so */
        log_warn("a recipe of \"%s\" at byte %llu did not decode to its chunk (%s); storing the "
                 "chunk plain",
                 m->files[it->file].path, (unsigned long long)it->off, err_str(e));
    *ret_ok = e == 0;
    return 0;
}

static int dw_mbase_cmp(const void *a, const void *b)
{
    return memcmp(((const struct mbase *)a)->id, ((const struct mbase *)b)->id, HASH_LEN);
}

/* The index's record of recipe r of chunk id, its presence merged with
 * what it had. */
static int dw_record(const struct dwrite_env *env, const uint8_t id[HASH_LEN], struct recidx *r)
{
    struct index_txn *t;
    struct recidx old;
    int e = index_txn_begin(env->ix, true, &t);
    if (e < 0)
        return e;
    if (recidx_get(t, id, r->sig, &old) == 0)
        r->presence |= old.presence;
    if ((e = recidx_put(t, id, r)) < 0) {
        index_txn_abort(t);
        return e;
    }
    return index_txn_commit(t);
}

/* The r line of chunk it over bases refs[0 .. n) into m. */
static int dw_add_r(struct manifest *m, const struct dwrite_env *env, const struct dw_item *it,
                    const struct tdelta_ref *refs, size_t n)
{
    uint8_t ids[TDELTA_MAX_BASES][HASH_LEN];
    for (size_t k = 0; k < n; k++)
        memcpy(ids[k], refs[k].id, HASH_LEN);
    int e = manifest_add_extra(m, it->id, it->len, (const uint8_t(*)[HASH_LEN])ids, n);
    if (e < 0)
        buf_printf(env->err, "adding a recipe to the manifest: %s", err_str(e));
    return e;
}

/* Whether id is one of the manifest's file chunks (plain or not). */
static bool dw_in_ids(const struct dwrite *d, const uint8_t id[HASH_LEN])
{
    struct mbase probe;
    memcpy(probe.id, id, HASH_LEN);
    return d->nids && bsearch(&probe, d->ids, d->nids, sizeof(*d->ids), dw_mbase_cmp);
}

/* The bases of a recipe that are no file chunk of the snapshot (the
 * keyframe's) noted for their k lines; its depth: 2 over a file chunk
 * stored as a recipe (a delta, stored first), else 1. */
static int dw_note_bases(struct dwrite *d, const struct recidx *r, uint8_t *ret_depth)
{
    *ret_depth = 1;
    for (size_t k = 0; k < r->nbases; k++) {
        const struct dw_item *it = dw_deferred(d, r->base[k].id);
        if (it && it->recipe)
            *ret_depth = 2;
        if (dw_in_ids(d, r->base[k].id))
            continue;
        if (dw_grow((void **)&d->kids, &d->kcap, d->nkids, sizeof(*d->kids)) < 0)
            return -ENOMEM;
        struct mextra *x = &d->kids[d->nkids++];
        memset(x, 0, sizeof(*x));
        memcpy(x->id, r->base[k].id, HASH_LEN);
        x->len = r->base[k].len;
    }
    return 0;
}

/* The recipe in b->obj of chunk it: stored (env->put), recorded in the
 * index, and its r line added to m. */
static int dw_store(struct dwrite *d, struct manifest *m, const struct dwrite_env *env,
                    const struct dw_item *it, const struct buf *obj)
{
    struct recidx r = {.depth = 1, .raw_len = it->len, .stored_len = (uint32_t)obj->len};
    struct mbase mb[TDELTA_MAX_BASES];
    char key[LAYOUT_KEY_MAX];
    int e = tdelta_refs(obj->data, obj->len, r.base, TDELTA_MAX_BASES, &r.nbases);
    if (e == 0)
        e = dw_note_bases(d, &r, &r.depth);
    if (e < 0)
        return e;
    for (size_t k = 0; k < r.nbases; k++)
        memcpy(mb[k].id, r.base[k].id, HASH_LEN);
    qsort(mb, r.nbases, sizeof(*mb), dw_mbase_cmp);
    manifest_recipe_sig(mb, r.nbases, r.sig);
    layout_recipe(it->id, r.sig, key);
    if ((e = env->put(env->ud, key, obj->data, obj->len, it->len, &r.presence)) < 0 ||
        (e = dw_record(env, it->id, &r)) < 0 || (e = dw_add_r(m, env, it, r.base, r.nbases)) < 0)
        return e;
    d->st.recipes++;
    d->st.recipe_raw += it->len;
    d->st.recipe_bytes += obj->len;
    return 0;
}

/* Whether id is a plain file chunk of the snapshot (not deferred). */
static bool dw_plain_file_chunk(const struct dwrite *d, const uint8_t id[HASH_LEN])
{
    struct mbase probe;
    memcpy(probe.id, id, HASH_LEN);
    return d->nids && bsearch(&probe, d->ids, d->nids, sizeof(*d->ids), dw_mbase_cmp) &&
           !dw_deferred(d, id);
}

struct dw_known {
    const struct dwrite *d;
    struct recidx r;
    bool found;
};

static int dw_known_cb(void *ud, const struct recidx *r)
{
    struct dw_known *k = ud;
    if (r->depth != 1)
        return 0;
    for (size_t i = 0; i < r->nbases; i++)
        if (!dw_plain_file_chunk(k->d, r->base[i].id))
            return 0;
    k->r = *r;
    k->found = true;
    return 1;
}

/* A recipe of chunk it the index knows, over plain file chunks of the
 * snapshot and held by every region (asked now): named again (*ret_done). */
static int dw_reuse(struct dwrite *d, struct manifest *m, const struct dwrite_env *env,
                    const struct dw_item *it, bool *ret_done)
{
    struct dw_known k = {.d = d};
    struct index_txn *t;
    char key[LAYOUT_KEY_MAX];
    uint32_t slots, need = env->slots(env->ud);
    *ret_done = false;
    int e = index_txn_begin(env->ix, false, &t);
    if (e < 0)
        return e;
    e = recidx_each(t, it->id, dw_known_cb, &k);
    index_txn_abort(t);
    if (e < 0 || !k.found || k.r.raw_len != it->len)
        return e < 0 && e != CKS_E_FORMAT ? e : 0; /* a damaged record: encode again */
    layout_recipe(it->id, k.r.sig, key);
    if ((e = env->has(env->ud, key, k.r.stored_len, &slots)) < 0 || (slots & need) != need)
        return e;
    k.r.presence = slots;
    if ((e = dw_record(env, it->id, &k.r)) < 0 ||
        (e = dw_add_r(m, env, it, k.r.base, k.r.nbases)) < 0)
        return e;
    d->st.recipes++;
    d->st.reused++;
    d->st.recipe_raw += it->len;
    d->st.recipe_bytes += k.r.stored_len;
    *ret_done = true;
    return 0;
}

/* A batch of deferred chunks, encoded on a pool thread: each read again
 * and checked, planned, encoded and decoded (dw_encode); the recipes
 * are stored, or the chunks stored plain, on the calling thread
 * (dw_apply), in file order. */
#define DW_BATCH 8

struct dw_job {
    struct pool_job pj;
    struct dwrite *d;
    const struct manifest *m;
    const struct dwrite_env *env;
    struct dw_item **items;
    size_t n;
    struct buf obj[DW_BATCH]; /* the recipe of items[i], when ok[i] */
    bool ok[DW_BATCH];
    struct dw_b b;
    int e;
};

static void dw_job_run(struct pool_job *pj, size_t thread)
{
    struct dw_job *j = (struct dw_job *)pj;
    (void)thread;
    j->e = 0;
    buf_reset(&j->b.err);
    for (size_t i = 0; i < j->n && j->e == 0; i++) {
        const struct dw_item *it = j->items[i];
        j->ok[i] = false;
        /* not hashed here: a recipe is kept only when it decodes to it->id,
         * which checks these bytes too; a chunk kept plain is read again,
         * and checked, by dw_apply.  Kept bytes are the read's, hashed. */
        j->b.rd = it->bytes;
        j->b.rl = it->len;
        if (!it->bytes) {
            j->e = dw_read_as(j->d, j->m, j->env, it->file, it->off, it->len, it->id, false,
                              &j->b.raw, &j->b.err);
            j->b.rd = j->b.raw.data;
            j->b.rl = j->b.raw.len;
        }
        if (j->e == 0)
            j->e = dw_encode(j->d, j->m, j->env, it, &j->b, &j->ok[i]);
        if (j->e == 0 && j->ok[i]) {
            struct buf t = j->obj[i];
            j->obj[i] = j->b.obj;
            j->b.obj = t;
        }
    }
}

/* The batch's outcome: each recipe stored, each other chunk stored plain
 * (read again here, checked). */
static int dw_apply(struct dw_job *j, struct manifest *m, struct buf *raw)
{
    const struct dwrite_env *env = j->env;
    if (j->e < 0) {
        buf_printf(env->err, "%s", buf_str(&j->b.err));
        return j->e;
    }
    for (size_t i = 0; i < j->n; i++) {
        struct dw_item *it = j->items[i];
        int e = j->ok[i] ? dw_store(j->d, m, env, it, &j->obj[i]) : 0;
        it->recipe = j->ok[i] && e == 0;
        if (e == 0 && !j->ok[i]) {
            j->d->st.plain++;
            if (it->bytes)
                e = env->plain(env->ud, it->id, it->bytes, it->len, it->width);
            else if ((e = dw_read(j->d, m, env, it->file, it->off, it->len, it->id, raw,
                                  env->err)) == 0)
                e = env->plain(env->ud, it->id, raw->data, raw->len, it->width);
        }
        if (e < 0)
            return e;
    }
    return 0;
}

/* The deferred chunks (todo, in file order) through the pool, env->njobs
 * batches at a time (inline without a pool). */
static int dw_encode_all(struct dwrite *d, struct manifest *m, const struct dwrite_env *env,
                         struct dw_item **todo, size_t n)
{
    size_t nj = env->pool && env->njobs ? env->njobs : 1, next = 0;
    struct dw_job *jobs = calloc(nj, sizeof(*jobs));
    struct pool_job **jp = calloc(nj, sizeof(*jp));
    struct buf raw = BUF_INIT;
    struct pool_window w;
    int e = jobs && jp ? 0 : -ENOMEM;
    for (size_t k = 0; e == 0 && k < nj; k++) {
        jobs[k] = (struct dw_job){.d = d, .m = m, .env = env, .pj.run = dw_job_run};
        jobs[k].b = (struct dw_b){.p = DPLAN_INIT, .sc = TDELTA_SCRATCH_INIT};
        jobs[k].b.z.keys = env->z->keys;
        jp[k] = &jobs[k].pj;
    }
    if (e == 0 && env->pool)
        pool_window_init(&w, env->pool, jp, nj);
    for (struct pool_job *done; e == 0 && (next < n || (env->pool && w.count));) {
        if (!env->pool) { /* inline */
            jobs[0].items = todo + next;
            jobs[0].n = n - next < DW_BATCH ? n - next : DW_BATCH;
            next += jobs[0].n;
            dw_job_run(&jobs[0].pj, 0);
            e = dw_apply(&jobs[0], m, &raw);
        } else if (next < n && !pool_window_full(&w)) {
            struct dw_job *j = &jobs[pool_window_next(&w)];
            j->items = todo + next;
            j->n = n - next < DW_BATCH ? n - next : DW_BATCH;
            next += j->n;
            pool_window_submit(&w);
        } else if ((done = pool_window_oldest(&w))) {
            e = dw_apply((struct dw_job *)done, m, &raw);
        }
    }
    while (e < 0 && env->pool && jobs && jp && pool_window_oldest(&w)) /* drain */
        ;
    for (size_t k = 0; jobs && k < nj; k++) {
        dw_b_free(&jobs[k].b);
        for (size_t i = 0; i < DW_BATCH; i++)
            buf_free(&jobs[k].obj[i]);
    }
    free(jobs);
    free(jp);
    buf_free(&raw);
    return e;
}

/* The deferred chunks that need no encoding: stored plain meanwhile (the
 * same bytes elsewhere), or a recipe the index knows; the others into
 * todo (file order kept). */
static int dw_known_all(struct dwrite *d, struct manifest *m, const struct dwrite_env *env,
                        struct dw_item **ord, size_t n, size_t *ret_todo)
{
    size_t t = 0;
    for (size_t i = 0; i < n; i++) {
        struct dw_item *it = ord[i];
        it->recipe = false;
        if (env->have_plain(env->ud, it->id))
            continue;
        int e = dw_reuse(d, m, env, it, &it->recipe);
        if (e < 0)
            return e;
        if (!it->recipe)
            ord[t++] = it;
    }
    *ret_todo = t;
    return 0;
}

static int dw_extra_cmp(const void *a, const void *b)
{
    return memcmp(((const struct mextra *)a)->id, ((const struct mextra *)b)->id, HASH_LEN);
}

/* Every place in m of a chunk stored as a recipe marked; a k line for
 * each base outside the snapshot's files, once. */
static int dw_mark(struct dwrite *d, struct manifest *m)
{
    for (size_t i = 0; i < m->nchunks; i++) {
        const struct dw_item *it = dw_deferred(d, m->chunks[i].id);
        int e = it && it->recipe ? manifest_mark_recipe(m, i, true) : 0;
        if (e < 0)
            return e;
    }
    if (d->nkids > 1)
        qsort(d->kids, d->nkids, sizeof(*d->kids), dw_extra_cmp);
    for (size_t i = 0; i < d->nkids; i++) {
        if (i && !memcmp(d->kids[i - 1].id, d->kids[i].id, HASH_LEN))
            continue;
        int e = manifest_add_extra(m, d->kids[i].id, d->kids[i].len, NULL, 0);
        if (e < 0)
            return e;
        d->st.kbases++;
    }
    manifest_sort_extras(m);
    return 0;
}

/* The manifest's chunk ids, sorted (dw_plain_file_chunk). */
static int dw_ids(struct dwrite *d, const struct manifest *m)
{
    if (!(d->ids = malloc((m->nchunks ? m->nchunks : 1) * sizeof(*d->ids))))
        return -ENOMEM;
    for (size_t i = 0; i < m->nchunks; i++)
        memcpy(d->ids[i].id, m->chunks[i].id, HASH_LEN);
    d->nids = m->nchunks;
    if (d->nids > 1)
        qsort(d->ids, d->nids, sizeof(*d->ids), dw_mbase_cmp);
    return 0;
}

/* In file order, the deltas of the chunks that bases of derivations hold
 * first (their outcome is the derivations' depth). */
static int dw_place_cmp(const void *a, const void *b)
{
    const struct dw_item *x = *(struct dw_item *const *)a, *y = *(struct dw_item *const *)b;
    if (x->xonly != y->xonly)
        return x->xonly ? -1 : 1;
    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

int dwrite_finish(struct dwrite *d, struct manifest *m, const struct dwrite_env *env)
{
    size_t n = 0, todo = 0;
    if (d->ndef == 0)
        return 0;
    if (d->ndef > 1)
        qsort(d->def, d->ndef, sizeof(*d->def), dw_item_cmp);
    for (size_t i = 0; i < d->ndef; i++) { /* each id once: its first place read */
        struct dw_item *last = n ? &d->def[n - 1] : NULL;
        if (!last || memcmp(last->id, d->def[i].id, HASH_LEN))
            d->def[n++] = d->def[i];
        else if (!last->bytes) /* the same bytes: one copy kept */
            last->bytes = d->def[i].bytes;
        else
            free(d->def[i].bytes);
    }
    d->ndef = n;
    d->st.deferred = n;
    struct dw_item **ord = malloc(n * sizeof(*ord)); /* in file order: bases shared */
    if (!ord)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        ord[i] = &d->def[i];
    qsort(ord, n, sizeof(*ord), dw_place_cmp);
    int e = dw_cuts(d, m);
    if (e == 0)
        e = dw_ids(d, m);
    if (e == 0)
        e = dw_known_all(d, m, env, ord, n, &todo);
    if (e == 0)
        e = dw_encode_all(d, m, env, ord, todo);
    free(ord);
    return e < 0 ? e : dw_mark(d, m);
}
