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
 *
 * Records (commits/, lineage/, and the version-1 refs/ and handoff/) are
 * listed in every region and merged: each copy is read and checked
 * against its key; a region that lacks a record others hold is reported
 * (not a failure: readers merge the regions' listings).
 *
 * With repair, whatever a region lacks or holds damaged is copied from a
 * region whose copy checked out: chunks (decoded and hashed first),
 * manifests (parsed; their commit record is written with them, which is
 * deterministic), records (checked against their key).  Nothing is ever
 * repaired from an unchecked copy, and every repair is counted.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/chunkobj.h"
#include "engine/filedigest.h"
#include "engine/handoff.h"
#include "engine/lineage.h"
#include "engine/ref.h"
#include "service/catalog.h"
#include "service/manifests.h"
#include "service/repokeys.h"
#include "service/verify.h"
#include "store/layout.h"

static int chunk_cmp(const void *a, const void *b)
{
    return memcmp(((const struct mchunk *)a)->id, ((const struct mchunk *)b)->id, HASH_LEN);
}

struct vctx {
    struct repo *r;
    bool quick, repair;
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

/* Copies the manifest of (run, id) from region good to region i, with its
 * commit record. */
static int verify_repair_manifest(struct vctx *v, size_t good, size_t i, const struct manifest *m)
{
    char key[REGION_KEY_MAX];
    struct buf data = BUF_INIT;
    int e = layout_snapshot(m->run, m->id, key);
    if (e == 0)
        e = region_get(repo_region(v->r, good), key, MANIFEST_MAX_BYTES, &data);
    if (e == 0)
        e = catalog_publish(repo_region(v->r, i), m, data.data, data.len);
    if (e == 0)
        log_info("region '%s': manifest \"%s\" repaired from region '%s'",
                 repo_region(v->r, i)->conf.name, key, repo_region(v->r, good)->conf.name);
    else
        log_error("region '%s': repairing manifest \"%s\": %s", repo_region(v->r, i)->conf.name,
                  key, region_last_error(repo_region(v->r, i)));
    buf_free(&data);
    return e;
}

static int committed_cb(void *ud, const char *key, uint64_t size)
{
    const char *id = ud;
    struct lineage_rec rec;
    (void)size;
    return layout_record_parse(key, &rec) == 0 && rec.kind == LINEAGE_COMMIT && !strcmp(rec.id, id);
}

/* Does some healthy region hold a commit record of (run, id)?  A region
 * whose listing fails says yes: what is not known is not excused. */
static bool verify_committed(struct vctx *v, const char *run, const char *id)
{
    char prefix[REGION_KEY_MAX];
    if (layout_prefix(LAYOUT_COMMIT, run, prefix) < 0)
        return false;
    REPO_FOR_HEALTHY(v->r, i) {
        int e = region_list(repo_region(v->r, i), prefix, committed_cb, (void *)id);
        if (e != 0 && e != -ENOENT)
            return true; /* 1: found it; < 0: cannot tell */
    }
    return false;
}

/* A manifest that some region lacks or holds damaged and no region has a
 * commit record of: a publish not finished (a writer in progress, or one
 * that died between the manifest and its commit record; catalog_publish).
 * Not a snapshot yet, so not damage: reported, not checked. */
static bool verify_uncommitted(struct vctx *v, const char *run, const char *id, const int *state)
{
    bool partial = false;
    for (size_t i = 0; i < repo_nregions(v->r); i++)
        partial |= state[i] > 0;
    if (!partial || verify_committed(v, run, id))
        return false;
    log_warn("snapshot %s of run '%s' is uncommitted (a writer in progress or one that died): "
             "its manifest is not in every region and no region holds its commit record; not "
             "counted as damage",
             id, run);
    v->res->uncommitted++;
    return true;
}

/* Counts region i's copy of a manifest: 0 ok, 1 missing, 2 damaged. */
static void verify_manifest_count(struct vctx *v, size_t i, int state, const char *run,
                                  const char *id)
{
    char key[REGION_KEY_MAX];
    if (state == 0) {
        v->res->region[i].manifests_ok++;
    } else if (state == 1) {
        v->res->region[i].manifests_missing++;
        layout_snapshot(run, id, key);
        log_error("region '%s': manifest \"%s\" is missing", repo_region(v->r, i)->conf.name, key);
    } else {
        v->res->region[i].manifests_bad++; /* manifests_read_in said what is wrong */
    }
}

/* Every tree digest of region i's copy of m is the tree of its file's
 * chunk lines (engine/filedigest.h); the chunks themselves are checked
 * against their ids below, which together is what a tree digest claims.
 * A sha256 digest is checked by restore, which has the bytes in order.
 * 0, or CKS_E_DIGEST naming the file. */
static int verify_trees(struct vctx *v, size_t i, const char *run, const struct manifest *m)
{
    for (size_t k = 0; k < m->nfiles; k++)
        if (!filedigest_tree_matches(m, &m->files[k])) {
            log_error("region '%s': snapshot %s of run '%s': \"%s\": chunk-tree digest does not "
                      "match its chunk list (manifest damaged or altered)",
                      repo_region(v->r, i)->conf.name, m->id, run, m->files[k].path);
            return CKS_E_DIGEST;
        }
    return 0;
}

/* Checks every region's copy of the manifest (present, parses, names this
 * snapshot, tree digests match); collects the chunks of the first good
 * copy. */
static int verify_manifest(struct vctx *v, const char *run, const char *id)
{
    struct manifest m;
    size_t good = SIZE_MAX;
    int state[CONFIG_MAX_REGIONS] = {0}; /* 0 ok, 1 missing, 2 damaged, -1 not asked */
    int e = 0;
    for (size_t i = 0; i < repo_nregions(v->r); i++) {
        struct manifest one;
        state[i] = -1;
        if (repo_region_error(v->r, i))
            continue;
        struct manifest *dst = good == SIZE_MAX ? &m : &one;
        int g = manifests_read_in(v->r, i, run, id, dst);
        if (g == 0 && (g = verify_trees(v, i, run, dst)) < 0)
            manifest_free(dst);
        state[i] = g == -ENOENT ? 1 : g < 0 ? 2 : 0;
        if (g == 0 && good == SIZE_MAX)
            good = i;
        else if (g == 0)
            manifest_free(&one);
    }
    if (verify_uncommitted(v, run, id, state)) {
        if (good != SIZE_MAX)
            manifest_free(&m);
        return 0;
    }
    for (size_t i = 0; i < repo_nregions(v->r); i++)
        if (state[i] >= 0)
            verify_manifest_count(v, i, state[i], run, id);
    if (good == SIZE_MAX) {
        log_error("snapshot %s of run '%s': no region holds a valid manifest", id, run);
        return 0;
    }
    v->res->snapshots++;
    for (size_t i = 0; v->repair && i < repo_nregions(v->r); i++) {
        if (state[i] <= 0 || repo_region_error(v->r, i) ||
            verify_repair_manifest(v, good, i, &m) < 0)
            continue;
        if (state[i] == 1)
            v->res->region[i].manifests_missing--;
        else
            v->res->region[i].manifests_bad--;
        v->res->region[i].manifests_ok++;
        v->res->region[i].repaired++;
    }
    e = vctx_add_chunks(v, &m);
    manifest_free(&m);
    return e;
}

/* ---- records ------------------------------------------------------------- */

/* A record key and the regions (bit per index) whose listing has it. */
struct rec_key {
    char key[REGION_KEY_MAX];
    uint32_t mask;
};

struct rec_list {
    struct rec_key *v;
    size_t n, cap;
    uint32_t bit;
};

static int rec_list_cb(void *ud, const char *key, uint64_t size)
{
    struct rec_list *l = ud;
    (void)size;
    for (size_t k = l->n; k-- > 0;)
        if (!strcmp(l->v[k].key, key)) {
            l->v[k].mask |= l->bit;
            return 0;
        }
    if (strlen(key) >= REGION_KEY_MAX)
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        struct rec_key *p = realloc(l->v, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        l->v = p;
        l->cap = cap;
    }
    snprintf(l->v[l->n].key, REGION_KEY_MAX, "%s", key);
    l->v[l->n++].mask = l->bit;
    return 0;
}

static int verify_record_body(const char *key, const uint8_t *d, size_t n)
{
    struct lineage_rec rec;
    struct layout_key k;
    struct ref f;
    struct handoff h;
    if (layout_parse(key, &k) < 0)
        return CKS_E_FORMAT;
    if (k.kind == LAYOUT_COMMIT || k.kind == LAYOUT_LINEAGE)
        return layout_record_read(key, d, n, &rec);
    if (k.kind == LAYOUT_REF_V1) /* version 1, read by nothing now */
        return ref_parse(d, n, &f);
    if (k.kind != LAYOUT_HANDOFF_V1)
        return CKS_E_FORMAT;
    int e = handoff_parse(d, n, &h); /* handoff/<run>, version 1 */
    return e == 0 && strcmp(k.dir, h.run) ? CKS_E_MISMATCH : e;
}

/* One record in every region that lists it; a good copy kept in good. */
static void verify_record(struct vctx *v, const struct rec_key *k, struct buf *good,
                          uint32_t *ret_bad)
{
    struct buf data = BUF_INIT;
    *ret_bad = 0;
    buf_reset(good);
    for (size_t i = 0; i < repo_nregions(v->r); i++) {
        struct region *rg = repo_region(v->r, i);
        if (repo_region_error(v->r, i) || !(k->mask & (1u << i)))
            continue;
        buf_reset(&data);
        int e = region_get(rg, k->key, LINEAGE_MAX_BYTES, &data);
        if (e == -ENOENT)
            continue; /* removed since the listing */
        if (e == 0)
            e = verify_record_body(k->key, data.data, data.len);
        if (e == 0) {
            v->res->region[i].records_ok++;
            if (!good->len)
                buf_append(good, data.data, data.len);
            continue;
        }
        *ret_bad |= 1u << i;
        v->res->region[i].records_bad++;
        log_error("region '%s': record \"%s\" is damaged: %s", rg->conf.name, k->key,
                  e == CKS_E_MISMATCH ? "its body disagrees with its key" : err_str(e));
    }
    buf_free(&data);
}

/* Regions lacking a record the others hold, or holding it damaged. */
static void verify_record_gaps(struct vctx *v, const struct rec_key *k, const struct buf *good,
                               uint32_t bad)
{
    for (size_t i = 0; i < repo_nregions(v->r); i++) {
        struct region *rg = repo_region(v->r, i);
        bool missing = !(k->mask & (1u << i)), damaged = bad & (1u << i);
        if (repo_region_error(v->r, i) || (!missing && !damaged))
            continue;
        if (missing) {
            v->res->region[i].records_missing++;
            log_warn("region '%s': record \"%s\" is missing (other regions hold it)", rg->conf.name,
                     k->key);
        }
        if (!v->repair || !good->len || region_put(rg, k->key, good->data, good->len) < 0)
            continue;
        log_info("region '%s': record \"%s\" repaired", rg->conf.name, k->key);
        v->res->region[i].repaired++;
        if (damaged) {
            v->res->region[i].records_bad--;
            v->res->region[i].records_ok++;
        } else {
            v->res->region[i].records_missing--;
        }
    }
}

/* Every commit, claim and handoff record (of run, or of all runs), and the
 * version-1 refs and handoffs, in every healthy region. */
static int verify_records(struct vctx *v, const char *run)
{
    static const enum layout_kind tops[] = {LAYOUT_COMMIT, LAYOUT_LINEAGE, LAYOUT_REF_V1,
                                            LAYOUT_HANDOFF_V1};
    struct rec_list l = {0};
    struct buf good = BUF_INIT;
    int e = 0;
    for (size_t i = 0; i < repo_nregions(v->r) && e != -ENOMEM; i++) {
        l.bit = 1u << i;
        for (size_t k = 0; repo_region_ok(v->r, i) && k < sizeof(tops) / sizeof(tops[0]); k++) {
            char prefix[REGION_KEY_MAX];
            if (layout_prefix(tops[k], run, prefix) < 0)
                continue; /* a run no key can name holds no record */
            e = region_list(repo_region(v->r, i), prefix, rec_list_cb, &l);
            if (e == -ENOMEM)
                break;
            if (e < 0 && e != -ENOENT) {
                log_error("%s", region_last_error(repo_region(v->r, i)));
                repo_region_fail(v->r, i, e);
            }
            e = 0;
        }
    }
    for (size_t k = 0; e == 0 && k < l.n; k++) {
        uint32_t bad;
        verify_record(v, &l.v[k], &good, &bad);
        verify_record_gaps(v, &l.v[k], &good, bad);
    }
    free(l.v);
    buf_free(&good);
    return e;
}

/* 0 when region i holds the chunk intact, 1 missing, 2 corrupt. */
static int verify_chunk_in(struct vctx *v, size_t i, const struct mchunk *c, struct chunkobj_ctx *z,
                           struct buf *obj, struct buf *raw)
{
    char key[REGION_KEY_MAX];
    struct region *rg = repo_region(v->r, i);
    layout_chunk(c->id, key);
    buf_reset(obj);
    int e;
    if (v->quick) {
        enum chunkobj_codec codec;
        uint32_t raw_len = 0;
        e = region_peek(rg, key, CHUNKOBJ_HEADER_LEN, obj);
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
        return 0;
    }
    if (e == -ENOENT) {
        v->res->region[i].chunks_missing++;
        log_error("region '%s': chunk \"%s\" is missing", rg->conf.name, key);
        return 1;
    }
    v->res->region[i].chunks_corrupt++;
    log_error("region '%s': chunk \"%s\": %s", rg->conf.name, key, err_str(e));
    return 2;
}

/* Puts the checked object good into the regions whose state says missing
 * or corrupt. */
static void verify_repair_chunk(struct vctx *v, const struct mchunk *c, const struct buf *good,
                                const int *state)
{
    char key[REGION_KEY_MAX];
    layout_chunk(c->id, key);
    for (size_t i = 0; i < repo_nregions(v->r); i++) {
        struct verify_region_result *res = &v->res->region[i];
        if (!state[i] || repo_region_error(v->r, i))
            continue;
        if (region_put(repo_region(v->r, i), key, good->data, good->len) < 0) {
            log_error("%s", region_last_error(repo_region(v->r, i)));
            continue;
        }
        if (state[i] == 1)
            res->chunks_missing--;
        else
            res->chunks_corrupt--;
        res->chunks_ok++;
        res->repaired++;
    }
}

static int verify_chunks(struct vctx *v, void (*progress)(void *, uint64_t, uint64_t), void *ud)
{
    struct chunkobj_ctx z = repo_chunkobj_ctx(v->r);
    struct buf obj = BUF_INIT, raw = BUF_INIT, good = BUF_INIT;
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
        int state[CONFIG_MAX_REGIONS] = {0};
        bool bad = false;
        buf_reset(&good);
        REPO_FOR_HEALTHY(v->r, i) {
            state[i] = verify_chunk_in(v, i, &v->chunks[k], &z, &obj, &raw);
            bad |= state[i] != 0;
            if (!state[i] && !good.len && v->repair)
                buf_append(&good, obj.data, obj.len);
        }
        if (bad && good.len)
            verify_repair_chunk(v, &v->chunks[k], &good, state);
        done += v->chunks[k].len;
        if (progress)
            progress(ud, done, v->res->bytes);
    }
    chunkobj_ctx_free(&z);
    buf_free(&obj);
    buf_free(&raw);
    buf_free(&good);
    return 0;
}

/* Slots per region that some region holds and this one lacks. */
static int slots_lacking(struct vctx *v, uint64_t *lack, struct buf *err)
{
    struct repokey_info *s = NULL;
    struct repokeys_view kv;
    size_t n = 0;
    int e = repokeys_list(repo_keys_view(v->r, &kv), &s, &n, err);
    if (e < 0)
        return e;
    memset(lack, 0, sizeof(uint64_t) * CONFIG_MAX_REGIONS);
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; s[k].valid && i < repo_nregions(v->r); i++)
            lack[i] += repo_region_ok(v->r, i) && !(s[k].regions & (1u << i));
    free(s);
    return 0;
}

/* Every region of an encrypted repository should hold every key slot:
 * a region that is the last one standing must still let each secret in. */
static int verify_keys(struct vctx *v)
{
    uint64_t lack[CONFIG_MAX_REGIONS], after[CONFIG_MAX_REGIONS];
    struct buf err = BUF_INIT;
    bool any = false;
    int e = repo_encrypted(v->r) ? slots_lacking(v, lack, &err) : 0;
    if (e < 0 || !repo_encrypted(v->r))
        goto out;
    for (size_t i = 0; i < repo_nregions(v->r); i++) {
        v->res->region[i].slots_missing = lack[i];
        if (lack[i])
            log_error("region '%s' lacks %llu key slot(s) that other regions hold",
                      repo_region(v->r, i)->conf.name, (unsigned long long)lack[i]);
        any |= lack[i] != 0;
    }
    if (!any || !v->repair)
        goto out;
    struct repokeys_view kv;
    if ((e = repokeys_copy(repo_keys_view(v->r, &kv), UINT32_MAX, UINT32_MAX, &err)) >= 0 &&
        (e = slots_lacking(v, after, &err)) == 0)
        for (size_t i = 0; i < repo_nregions(v->r); i++)
            v->res->region[i].repaired += lack[i] > after[i] ? lack[i] - after[i] : 0;
out:
    if (e < 0 && e != -ENOMEM) {
        log_error("key slots: %s", buf_str(&err));
        e = 0; /* the regions' own errors show in their results */
    }
    buf_free(&err);
    return e;
}

/* The snapshots to check: one, or what the regions list (of a run). */
static int verify_select(struct repo *r, const char *run, const char *id, struct catalog_snap **ret,
                         size_t *ret_n, struct buf *err)
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

int verify_run(struct repo *r, const char *run, const char *id, unsigned flags,
               void (*progress)(void *ud, uint64_t done, uint64_t total), void *ud,
               struct verify_result *ret, struct buf *err)
{
    struct catalog_snap *snaps = NULL;
    size_t nsnaps = 0;
    struct vctx v = {.r = r,
                     .res = ret,
                     .quick = (flags & VERIFY_QUICK) && !(flags & VERIFY_REPAIR),
                     .repair = flags & VERIFY_REPAIR};
    int e;

    memset(ret, 0, sizeof(*ret));
    ret->nregions = repo_nregions(r);
    if ((run && manifest_run_check(run) < 0) || (id && (!run || manifest_id_check(id) < 0))) {
        buf_printf(err, "invalid run name or snapshot id (a snapshot id needs --run)");
        return -EINVAL;
    }
    if ((e = verify_select(r, run, id, &snaps, &nsnaps, err)) < 0)
        goto out;
    for (size_t k = 0; k < nsnaps && e == 0; k++)
        e = verify_manifest(&v, snaps[k].run, snaps[k].id);
    if (e == 0 && !id)
        e = verify_records(&v, run);
    if (e == 0)
        e = verify_chunks(&v, progress, ud);
    if (e == 0)
        e = verify_keys(&v);
    for (size_t i = 0; i < repo_nregions(r); i++) {
        ret->region[i].err = repo_region_error(r, i);
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
           !v->chunks_missing && !v->chunks_corrupt && !v->slots_missing;
}
