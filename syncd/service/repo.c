/*
 * repo.c — opening a repository.
 *
 * The repository parameters live in each region's `repo` object, not in
 * the local configuration: every instance that ever writes to the regions
 * must cut chunks alike, or dedup across instances silently dies.  So the
 * first region to be initialised fixes them from the configuration; later
 * instances adopt what the regions say (and log when their configuration
 * differs).  Regions that disagree with each other are a hard error: the
 * user pointed two repositories at one configuration.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/log.h"
#include "engine/hash.h"
#include "service/repo.h"

static int repo_read_params(struct region *rg, struct repoobj *ret, struct buf *err)
{
    struct buf data = BUF_INIT, perr = BUF_INIT;
    int r = region_get(rg, "repo", REPOOBJ_MAX_BYTES, &data);
    if (r == -ENOENT)
        goto out;
    if (r < 0) {
        buf_printf(err, "%s", region_last_error(rg));
        goto out;
    }
    r = repoobj_parse(data.data, data.len, ret, &perr);
    if (r < 0)
        buf_printf(err, "region '%s': object \"repo\": %s", rg->conf.name, buf_str(&perr));
out:
    buf_free(&data);
    buf_free(&perr);
    return r;
}

static bool repo_same(const struct repoobj *a, const struct repoobj *b)
{
    return strcmp(a->id, b->id) == 0 && a->chunk_min == b->chunk_min &&
           a->chunk_avg == b->chunk_avg && a->chunk_max == b->chunk_max &&
           a->normalization == b->normalization;
}

static int repo_new_params(const struct config *c, struct repoobj *ret)
{
    uint8_t raw[REPOOBJ_ID_HEX / 2];
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        return -EIO;
    hex_encode(raw, sizeof(raw), ret->id);
    ret->chunk_min = c->chunk_min;
    ret->chunk_avg = c->chunk_avg;
    ret->chunk_max = c->chunk_max;
    ret->normalization = c->normalization;
    return 0;
}

/* Reads every healthy region's repo object; agree on one set of params. */
static int repo_agree(struct repo *r, bool *ret_missing, struct buf *err)
{
    bool have = false;
    *ret_missing = false;
    for (size_t i = 0; i < r->nregions; i++) {
        struct repoobj o;
        if (r->health[i])
            continue;
        int e = repo_read_params(r->regions[i], &o, err);
        if (e == -ENOENT) {
            *ret_missing = true;
            continue;
        }
        if (e < 0)
            return e;
        if (have && !repo_same(&o, &r->params)) {
            buf_printf(err, "region '%s' holds repository %s, but other regions hold %s "
                       "(or different chunker parameters): one configuration must name one repository",
                       r->regions[i]->conf.name, o.id, r->params.id);
            return CKS_E_MISMATCH;
        }
        r->params = o;
        have = true;
    }
    if (!have) {
        *ret_missing = true;
        return repo_new_params(&r->conf, &r->params);
    }
    return 0;
}

static int repo_write_params(struct repo *r, struct buf *err)
{
    struct buf obj = BUF_INIT;
    int ret = repoobj_encode(&r->params, &obj);
    for (size_t i = 0; ret == 0 && i < r->nregions; i++) {
        if (r->health[i] || region_has(r->regions[i], "repo") == 1)
            continue;
        int e = region_put(r->regions[i], "repo", obj.data, obj.len);
        if (e < 0) {
            log_error("%s", region_last_error(r->regions[i]));
            repo_region_fail(r, i, e);
        }
    }
    buf_free(&obj);
    return ret;
}

static int repo_open_regions(struct repo *r, struct buf *err)
{
    for (size_t i = 0; i < r->conf.nregions; i++) {
        struct region *rg;
        /* The embedded default's regions live in our own state directory:
         * create them.  A configured dir region is never created: a missing
         * one is usually a share that is not mounted. */
        if (r->conf.default_regions && r->conf.regions[i].kind == REGION_KIND_DIR) {
            int m = fileio_mkdir_p(r->conf.regions[i].path, 0700);
            if (m < 0)
                log_error("creating \"%s\": %s", r->conf.regions[i].path, strerror(-m));
        }
        int e = region_new(&r->conf.regions[i], &rg, err);
        if (e < 0)
            return e;
        r->regions[r->nregions++] = rg;
        e = region_check(rg);
        if (e < 0) {
            log_error("%s", region_last_error(rg));
            r->health[i] = e;
        }
    }
    return 0;
}

static int repo_assign_slots(struct repo *r)
{
    struct index_txn *t;
    int e = index_txn_begin(r->ix, true, &t);
    if (e < 0)
        return e;
    for (size_t i = 0; i < r->nregions; i++) {
        e = index_region_slot(t, r->regions[i]->conf.name, &r->regions[i]->slot);
        if (e < 0) {
            index_txn_abort(t);
            return e;
        }
    }
    return index_txn_commit(t);
}

static int repo_open_index(struct repo *r, struct buf *err)
{
    char dir[CONFIG_PATH_MAX + 16];
    int e = fileio_mkdir_p(r->conf.state, 0700);
    if (e < 0) {
        buf_printf(err, "state directory \"%s\": %s", r->conf.state, err_str(e));
        return e;
    }
    snprintf(dir, sizeof(dir), "%s/index", r->conf.state);
    e = index_open(dir, &r->ix);
    if (e < 0) {
        buf_printf(err, "index \"%s\": %s", dir, err_str(e));
        return e;
    }
    e = repo_assign_slots(r);
    if (e < 0)
        buf_printf(err, "index \"%s\": %s", dir, err_str(e));
    return e;
}

int repo_open(const struct config *conf, unsigned flags, struct repo **ret, struct buf *err)
{
    struct repo *r = calloc(1, sizeof(*r));
    bool missing;
    int e;

    if (!r)
        return -ENOMEM;
    r->conf = *conf;
    e = repo_open_regions(r, err);
    if (e < 0)
        goto fail;
    e = repo_open_index(r, err);
    if (e < 0)
        goto fail;
    if (repo_healthy(r) == 0) {
        buf_printf(err, "no region is usable (see the errors above)");
        e = CKS_E_QUORUM;
        goto fail;
    }
    e = repo_agree(r, &missing, err);
    if (e < 0)
        goto fail;
    if (missing && (flags & REPO_CREATE) && (e = repo_write_params(r, err)) < 0)
        goto fail;
    e = fastcdc_init(&r->cdc, (size_t)r->params.chunk_min, (size_t)r->params.chunk_avg,
                     (size_t)r->params.chunk_max, r->params.normalization);
    if (e < 0)
        goto fail;
    if (r->params.chunk_avg != conf->chunk_avg || r->params.chunk_min != conf->chunk_min ||
        r->params.chunk_max != conf->chunk_max)
        log_info("using the repository's chunker parameters %llu/%llu/%llu, not the configuration's",
                 (unsigned long long)r->params.chunk_min, (unsigned long long)r->params.chunk_avg,
                 (unsigned long long)r->params.chunk_max);
    *ret = r;
    return 0;
fail:
    repo_free(r);
    return e;
}

void repo_free(struct repo *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->nregions; i++)
        region_free(r->regions[i]);
    index_free(r->ix);
    free(r);
}

size_t repo_healthy(const struct repo *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->nregions; i++)
        n += r->health[i] == 0;
    return n;
}

void repo_region_fail(struct repo *r, size_t i, int err)
{
    if (r->health[i] == 0)
        r->health[i] = err ? err : -EIO;
}
