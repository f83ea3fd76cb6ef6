/*
 * verify.c — read everything back.
 *
 * The snapshot set is the union of what the healthy regions list
 * (service/catalog.c), so a region that lost a manifest (or never received
 * it) shows as incomplete rather than being judged only against its own
 * listing.  Manifests are
 * taken from any region that holds a valid copy; the distinct chunks of
 * all of them are then fetched from each region and decoded, which checks
 * the object format and the SHA-256 of the content.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/chunkobj.h"
#include "service/catalog.h"
#include "service/restore.h"
#include "service/verify.h"

static int chunk_cmp(const void *a, const void *b)
{
    return memcmp(((const struct mchunk *)a)->id, ((const struct mchunk *)b)->id, HASH_LEN);
}

struct vctx {
    struct repo *r;
    bool quick;
    struct verify_result *res;
    struct mchunk *chunks;
    size_t nchunks, cap;
};

static int vctx_add_chunks(struct vctx *v, const struct manifest *m)
{
    if (m->nchunks > SIZE_MAX / sizeof(struct mchunk) - v->nchunks)
        return -ENOMEM;
    if (v->nchunks + m->nchunks > v->cap) {
        size_t cap = (v->nchunks + m->nchunks) * 2;
        struct mchunk *p = realloc(v->chunks, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        v->chunks = p;
        v->cap = cap;
    }
    memcpy(v->chunks + v->nchunks, m->chunks, m->nchunks * sizeof(*m->chunks));
    v->nchunks += m->nchunks;
    return 0;
}

/* Checks that every region holds the manifest; collects its chunks. */
static int verify_manifest(struct vctx *v, const char *run, const char *id)
{
    char key[REGION_KEY_MAX];
    struct manifest m;
    struct buf err = BUF_INIT;
    int e;

    snprintf(key, sizeof(key), "snapshots/%s/%s", run, id);
    for (size_t i = 0; i < v->r->nregions; i++) {
        if (v->r->health[i])
            continue;
        e = region_has(v->r->regions[i], key);
        if (e == 1)
            v->res->region[i].manifests_ok++;
        else
            v->res->region[i].manifests_missing++;
        if (e == 0)
            log_error("region '%s': manifest \"%s\" is missing", v->r->regions[i]->conf.name, key);
    }
    e = restore_find(v->r, run, id, &m, NULL, &err);
    if (e < 0) {
        log_error("%s", buf_str(&err));
        buf_free(&err);
        for (size_t i = 0; i < v->r->nregions; i++)
            v->res->region[i].manifests_bad += !v->r->health[i];
        return 0;
    }
    e = vctx_add_chunks(v, &m);
    v->res->snapshots++;
    manifest_free(&m);
    buf_free(&err);
    return e;
}

static void verify_chunk_in(struct vctx *v, size_t i, const struct mchunk *c, struct chunkobj_ctx *z,
                            struct buf *obj, struct buf *raw)
{
    char key[REGION_KEY_MAX];
    struct region *rg = v->r->regions[i];
    region_chunk_key(c->id, key);
    buf_reset(obj);
    int e;
    if (v->quick) {
        enum chunkobj_codec codec;
        uint32_t raw_len = 0;
        e = region_get_range(rg, key, 0, CHUNKOBJ_HEADER_LEN, obj);
        if (e == 0)
            e = chunkobj_header(obj->data, obj->len, &codec, &raw_len);
        if (e == 0 && raw_len != c->len)
            e = CKS_E_FORMAT;
    } else {
        e = region_get(rg, key, CHUNKOBJ_HEADER_LEN + (size_t)c->len + c->len / 8 + 1024, obj);
        if (e == 0)
            e = chunkobj_decode(z, obj->data, obj->len, c->id, c->len, raw);
        if (e == 0 && raw->len != c->len)
            e = CKS_E_FORMAT;
    }
    if (e == 0) {
        v->res->region[i].chunks_ok++;
    } else if (e == -ENOENT) {
        v->res->region[i].chunks_missing++;
        log_error("region '%s': chunk \"%s\" is missing", rg->conf.name, key);
    } else {
        v->res->region[i].chunks_corrupt++;
        log_error("region '%s': chunk \"%s\": %s", rg->conf.name, key, err_str(e));
    }
}

static int verify_chunks(struct vctx *v, void (*progress)(void *, uint64_t, uint64_t), void *ud)
{
    struct chunkobj_ctx z = CHUNKOBJ_CTX_INIT;
    struct buf obj = BUF_INIT, raw = BUF_INIT;
    size_t out = 0;
    uint64_t done = 0;

    qsort(v->chunks, v->nchunks, sizeof(*v->chunks), chunk_cmp);
    for (size_t k = 0; k < v->nchunks; k++)
        if (!out || memcmp(v->chunks[out - 1].id, v->chunks[k].id, HASH_LEN))
            v->chunks[out++] = v->chunks[k];
    v->nchunks = out;
    v->res->chunks = out;
    for (size_t k = 0; k < out; k++)
        v->res->bytes += v->chunks[k].len;
    for (size_t k = 0; k < out; k++) {
        for (size_t i = 0; i < v->r->nregions; i++)
            if (!v->r->health[i])
                verify_chunk_in(v, i, &v->chunks[k], &z, &obj, &raw);
        done += v->chunks[k].len;
        if (progress)
            progress(ud, done, v->res->bytes);
    }
    chunkobj_ctx_free(&z);
    buf_free(&obj);
    buf_free(&raw);
    return 0;
}

/* The snapshots to check: one, or what the regions list (of a run). */
static int verify_select(struct repo *r, const char *run, const char *id,
                         struct catalog_snap **ret, size_t *ret_n, struct buf *err)
{
    if (id) {
        struct catalog_snap *one = calloc(1, sizeof(*one));
        if (!one)
            return -ENOMEM;
        snprintf(one->run, sizeof(one->run), "%s", run);
        snprintf(one->id, sizeof(one->id), "%s", id);
        *ret = one;
        *ret_n = 1;
        return 0;
    }
    int e = catalog_snapshots(r, run, ret, ret_n);
    if (e == -ENOENT) {
        if (run)
            buf_printf(err, "run '%s' has no snapshot in any reachable region", run);
        else
            buf_printf(err, "no snapshot in any reachable region");
    }
    return e;
}

int verify_run(struct repo *r, const char *run, const char *id, bool quick,
               void (*progress)(void *ud, uint64_t done, uint64_t total), void *ud,
               struct verify_result *ret, struct buf *err)
{
    struct catalog_snap *snaps = NULL;
    size_t nsnaps = 0;
    struct vctx v = {.r = r, .res = ret, .quick = quick};
    int e;

    memset(ret, 0, sizeof(*ret));
    ret->nregions = r->nregions;
    if ((run && manifest_run_check(run) < 0) || (id && (!run || manifest_id_check(id) < 0))) {
        buf_printf(err, "invalid run name or snapshot id (a snapshot id needs --run)");
        return -EINVAL;
    }
    if ((e = verify_select(r, run, id, &snaps, &nsnaps, err)) < 0)
        goto out;
    for (size_t k = 0; k < nsnaps && e == 0; k++)
        e = verify_manifest(&v, snaps[k].run, snaps[k].id);
    if (e == 0)
        e = verify_chunks(&v, progress, ud);
    for (size_t i = 0; i < r->nregions; i++) {
        ret->region[i].err = r->health[i];
        if (e == 0 && !verify_region_ok(&ret->region[i]))
            e = CKS_E_DIGEST;
    }
out:
    free(snaps);
    free(v.chunks);
    return e;
}

int verify_region_ok(const struct verify_region_result *v)
{
    return !v->err && !v->manifests_missing && !v->manifests_bad && !v->chunks_missing &&
           !v->chunks_corrupt;
}
