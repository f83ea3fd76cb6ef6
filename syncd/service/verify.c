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
#include "engine/handoff.h"
#include "engine/lineage.h"
#include "engine/ref.h"
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

/* Checks every region's copy of the manifest (present, parses, names this
 * snapshot); collects the chunks of the first good copy. */
static int verify_manifest(struct vctx *v, const char *run, const char *id)
{
    bool have = false;
    int e = 0;
    for (size_t i = 0; i < v->r->nregions; i++) {
        struct manifest m;
        if (v->r->health[i])
            continue;
        int g = restore_manifest_in(v->r, i, run, id, &m);
        if (g == -ENOENT) {
            v->res->region[i].manifests_missing++;
            log_error("region '%s': manifest \"snapshots/%s/%s\" is missing",
                      v->r->regions[i]->conf.name, run, id);
            continue;
        }
        if (g < 0) { /* restore_manifest_in said what is wrong */
            v->res->region[i].manifests_bad++;
            continue;
        }
        v->res->region[i].manifests_ok++;
        if (!have) {
            e = vctx_add_chunks(v, &m);
            have = true;
        }
        manifest_free(&m);
    }
    if (have)
        v->res->snapshots++;
    else
        log_error("snapshot %s of run '%s': no region holds a valid manifest", id, run);
    return e;
}

/* ---- records ------------------------------------------------------------- */

struct rec_ctx {
    struct vctx *v;
    size_t i;
    struct buf data;
};

static int verify_record_body(const char *key, const uint8_t *d, size_t n)
{
    struct lineage_rec rec;
    struct ref f;
    struct handoff h;
    if (!strncmp(key, "commits/", 8) || !strncmp(key, "lineage/", 8))
        return lineage_parse_at(key, d, n, &rec);
    if (!strncmp(key, "refs/", 5)) /* version 1, read by nothing now */
        return ref_parse(d, n, &f);
    int e = handoff_parse(d, n, &h); /* handoff/<run>, version 1 */
    return e == 0 && strcmp(key + strlen("handoff/"), h.run) ? CKS_E_MISMATCH : e;
}

static int record_cb(void *ud, const char *key, uint64_t size)
{
    struct rec_ctx *c = ud;
    struct region *rg = c->v->r->regions[c->i];
    struct verify_region_result *res = &c->v->res->region[c->i];
    (void)size;
    buf_reset(&c->data);
    int e = region_get(rg, key, LINEAGE_MAX_BYTES, &c->data);
    if (e == -ENOENT)
        return 0; /* removed since the listing */
    if (e == 0)
        e = verify_record_body(key, c->data.data, c->data.len);
    if (e == 0) {
        res->records_ok++;
    } else {
        res->records_bad++;
        log_error("region '%s': record \"%s\" is damaged: %s", rg->conf.name, key,
                  e == CKS_E_MISMATCH ? "its body disagrees with its key" : err_str(e));
    }
    return 0;
}

/* Every commit, claim and handoff record (of run, or of all runs), and the
 * version-1 refs and handoffs, in every healthy region. */
static void verify_records(struct vctx *v, const char *run)
{
    static const char *const tops[] = {"commits", "lineage", "refs", "handoff"};
    struct rec_ctx c = {.v = v, .data = BUF_INIT};
    for (size_t i = 0; i < v->r->nregions; i++) {
        if (v->r->health[i])
            continue;
        c.i = i;
        for (size_t k = 0; k < sizeof(tops) / sizeof(tops[0]); k++) {
            char prefix[REGION_KEY_MAX];
            if (run && k == 3)
                snprintf(prefix, sizeof(prefix), "handoff/%s", run);
            else if (run)
                snprintf(prefix, sizeof(prefix), "%s/%s/", tops[k], run);
            else
                snprintf(prefix, sizeof(prefix), "%s/", tops[k]);
            int e = region_list(v->r->regions[i], prefix, record_cb, &c);
            if (e < 0 && e != -ENOENT) {
                log_error("%s", region_last_error(v->r->regions[i]));
                repo_region_fail(v->r, i, e);
                break;
            }
        }
    }
    buf_free(&c.data);
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
    if (e == 0 && !id)
        verify_records(&v, run);
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
    return !v->err && !v->manifests_missing && !v->manifests_bad && !v->records_bad &&
           !v->chunks_missing && !v->chunks_corrupt;
}
