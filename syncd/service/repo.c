/*
 * repo.c — opening a repository, and creating it race-free.
 *
 * The repository parameters live in each region's `repo` object, not in
 * the local configuration: every instance that ever writes to the regions
 * must cut chunks alike, or dedup across instances silently dies.  Later
 * instances adopt what the regions say (and log when their configuration
 * differs).  Regions that disagree are a hard error with a diagnosis and a
 * repair (`ckptsync repo adopt REGION`).
 *
 * Creation, when no region holds a `repo` yet, with any number of
 * instances starting at once and no lock server:
 * - Every region enforces create-only puts (region_put_new: link(2) on a
 *   dir, If-None-Match: * on S3; probed once per store and remembered in
 *   the index): the first healthy region in the configured order is the
 *   arbiter.  Whoever's create-only put wins there fixes the repository;
 *   the others read it and adopt it; the remaining regions get the winner
 *   with create-only puts as well, and a region that already holds a
 *   different one is a split, reported.
 * - Some region does not enforce it: each creator that sees no candidate
 *   writes its own write-once candidate repo.d/<id> to every region,
 *   waits `create_settle` seconds, lists the candidates again and adopts
 *   the smallest id.  Correct when every candidate is written within
 *   create_settle of its writer's first listing (the creator checks its
 *   own time and gives up otherwise): then everyone who decides has seen
 *   every candidate there will ever be, because a later creator sees one
 *   and writes none.  The winner is then written as `repo`.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/log.h"
#include "engine/hash.h"
#include "service/repo.h"
#include "service/repokeys.h"

struct repo {
    struct config conf;
    struct index *ix;
    bool owns_ix; /* false in a repo_dup */
    size_t nregions;
    struct region *regions[CONFIG_MAX_REGIONS];
    atomic_int health[CONFIG_MAX_REGIONS]; /* 0 healthy, else the error (repo.h: Threads) */
    struct repoobj params;                 /* agreed by every healthy region */
    struct fastcdc cdc;
    /* An encrypted repository (params.encrypted), unlocked by repo_open:
     * the subkeys every region seals with, the keyed gear table cdc uses.
     * master is held from creation here or unlocking on (`key add`). */
    bool encrypted;
    struct crypt_keys keys;
    uint64_t gear[256];
    bool have_master;
    uint8_t master[CRYPT_KEY_LEN];
    char unlocked_by[REPOKEYS_ID_HEX + 1]; /* the key slot that opened it ("" if created here) */
};

static int repo_read_params(struct region *rg, struct repoobj *ret, struct buf *err)
{
    struct buf data = BUF_INIT, perr = BUF_INIT;
    int r = region_get(rg, layout_repo(), REPOOBJ_MAX_BYTES, &data);
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

/* While other instances create the repository, a store that is not
 * atomic can show their `repo` half-written, or fail a GET racing a PUT
 * (5xx): look again a few times before calling it damaged or failed. */
static int repo_read_settled(struct region *rg, struct repoobj *ret, struct buf *err)
{
    int e = repo_read_params(rg, ret, err);
    for (int k = 0; k < 5 && (e == CKS_E_FORMAT || e == CKS_E_DIGEST || e == CKS_E_REMOTE); k++) {
        usleep(200 * 1000 << k);
        buf_reset(err);
        e = repo_read_params(rg, ret, err);
    }
    return e;
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
/* *ret_missing: the healthy regions lacking it (bits); *ret_have: some
 * holds it (otherwise r->params are new ones, from the configuration). */
static int repo_agree(struct repo *r, uint32_t *ret_missing, bool *ret_have, struct buf *err)
{
    bool have = false;
    *ret_missing = 0;
    *ret_have = false;
    for (size_t i = 0; i < r->nregions; i++) {
        struct repoobj o;
        if (r->health[i])
            continue;
        int e = repo_read_settled(r->regions[i], &o, err);
        if (e == -ENOENT) {
            *ret_missing |= 1u << i;
            continue;
        }
        if (e < 0)
            return e;
        if (have && !repo_same(&o, &r->params)) {
            buf_printf(err,
                       "region '%s' holds repository %s, but other regions hold %s "
                       "(or different chunker parameters): the repository is split; "
                       "`ckptsync repo` shows each region's, `ckptsync repo adopt REGION` "
                       "makes every region hold that region's (nothing stored is lost)",
                       r->regions[i]->conf.name, o.id, r->params.id);
            return CKS_E_MISMATCH;
        }
        r->params = o;
        have = true;
    }
    *ret_have = have;
    if (!have) {
        int e = repo_new_params(&r->conf, &r->params);
        if (e == 0 && r->conf.encryption && (e = repokeys_new_master(&r->params, r->master)) == 0)
            r->have_master = true;
        return e;
    }
    return 0;
}

/* ---- creation ------------------------------------------------------------ */

static double repo_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Writes obj as `repo` into every healthy region lacking it (create-only
 * where the region enforces it).  A region holding a different one is a
 * split: CKS_E_MISMATCH, with both named in err. */
int repo_put_params(struct region *rg, const struct repoobj *params)
{
    struct buf obj = BUF_INIT;
    int e = repoobj_encode(params, &obj);
    if (e == 0)
        e = region_preconditions(rg) == 1 ? region_put_new(rg, layout_repo(), obj.data, obj.len)
                                          : region_put(rg, layout_repo(), obj.data, obj.len);
    buf_free(&obj);
    return e;
}

static int repo_fill(struct repo *r, const struct repoobj *want, struct buf *err)
{
    int ret = 0;
    for (size_t i = 0; ret == 0 && i < r->nregions; i++) {
        struct repoobj have;
        struct buf rerr = BUF_INIT;
        struct region *rg = r->regions[i];
        if (r->health[i])
            continue;
        bool cas = region_preconditions(rg) == 1, read = false;
        int e = cas ? repo_put_params(rg, want) : -EEXIST;
        if (e == -EEXIST) {
            e = repo_read_settled(rg, &have, &rerr);
            read = true;
        }
        /* Without preconditions, every instance that decided writes the
         * same agreed object; one absent or half-written by a store that
         * is not atomic is simply written (again). */
        if (!cas && (e == -ENOENT || e == CKS_E_FORMAT || e == CKS_E_DIGEST))
            e = repo_put_params(rg, want);
        else if (e == 0 && read && !repo_same(&have, want)) {
            buf_printf(err,
                       "region '%s' holds repository %s, but %s was agreed: the repository "
                       "is split; see `ckptsync repo` to repair",
                       rg->conf.name, have.id, want->id);
            ret = CKS_E_MISMATCH;
        }
        if (e < 0) {
            log_error("region '%s': writing \"repo\": %s", rg->conf.name,
                      buf_str(&rerr)[0] ? buf_str(&rerr) : region_last_error(rg));
            repo_region_fail(r, i, e);
        }
        buf_free(&rerr);
    }
    return ret;
}

static bool repo_all_enforce(const struct repo *r)
{
    for (size_t i = 0; i < r->nregions; i++)
        if (!r->health[i] && region_preconditions(r->regions[i]) != 1)
            return false;
    return true;
}

/* Every region enforces create-only puts: the first healthy one decides. */
static int repo_create_arbiter(struct repo *r, struct buf *err)
{
    size_t a = 0;
    while (a < r->nregions && r->health[a])
        a++;
    int e = repo_put_params(r->regions[a], &r->params); /* create-only: every region enforces it */
    if (e == -EEXIST) { /* another instance won: adopt its repository */
        e = repo_read_params(r->regions[a], &r->params, err);
        if (e == 0)
            log_info("region '%s': another instance created repository %s; adopting it",
                     r->regions[a]->conf.name, r->params.id);
    } else if (e == 0) {
        log_info("created repository %s in region '%s'", r->params.id, r->regions[a]->conf.name);
    } else {
        buf_printf(err, "creating the repository: %s", region_last_error(r->regions[a]));
    }
    return e < 0 ? e : repo_fill(r, &r->params, err);
}

struct cand_ctx {
    char best[REPOOBJ_ID_HEX + 1];
    size_t n;
};

static int cand_cb(void *ud, const char *key, uint64_t size)
{
    struct cand_ctx *c = ud;
    struct layout_key k;
    const char *id = k.name;
    (void)size;
    if (layout_parse(key, &k) < 0 || k.kind != LAYOUT_REPO_CAND || strlen(id) != REPOOBJ_ID_HEX ||
        strspn(id, "0123456789abcdef") != REPOOBJ_ID_HEX)
        return 0;
    c->n++;
    if (!c->best[0] || strcmp(id, c->best) < 0)
        memcpy(c->best, id, REPOOBJ_ID_HEX + 1);
    return 0;
}

static int repo_candidates(struct repo *r, struct cand_ctx *c)
{
    char prefix[REGION_KEY_MAX];
    memset(c, 0, sizeof(*c));
    layout_prefix(LAYOUT_REPO_CAND, NULL, prefix);
    for (size_t i = 0; i < r->nregions; i++) {
        if (r->health[i])
            continue;
        int e = region_list(r->regions[i], prefix, cand_cb, c);
        if (e < 0 && e != -ENOENT) {
            log_warn("%s", region_last_error(r->regions[i]));
            repo_region_fail(r, i, e);
        }
    }
    return repo_healthy(r) ? 0 : CKS_E_QUORUM;
}

/* Writes our candidate to every healthy region; fails when that took so
 * long that another creator may have decided without seeing it. */
static int repo_put_candidate(struct repo *r, double t0, struct buf *err)
{
    char key[REGION_KEY_MAX];
    struct buf obj = BUF_INIT;
    unsigned n = 0;
    int e = layout_key(LAYOUT_REPO_CAND, NULL, r->params.id, key);
    if (e == 0)
        e = repoobj_encode(&r->params, &obj);
    for (size_t i = 0; e == 0 && i < r->nregions; i++) {
        if (r->health[i])
            continue;
        if (region_put(r->regions[i], key, obj.data, obj.len) == 0)
            n++;
        else
            log_error("%s", region_last_error(r->regions[i]));
    }
    buf_free(&obj);
    if (e == 0 && n == 0)
        e = CKS_E_QUORUM;
    if (e == 0 && repo_now() - t0 > (double)r->conf.create_settle) {
        for (size_t i = 0; i < r->nregions; i++)
            if (!r->health[i])
                region_del(r->regions[i], key);
        buf_printf(err,
                   "creating the repository: the regions took over %us ([daemon] "
                   "create_settle) to take a candidate, too slow to agree safely with other "
                   "instances; try again, or raise create_settle",
                   r->conf.create_settle);
        e = CKS_E_REMOTE;
    }
    return e;
}

/* Some region does not enforce create-only puts: write-once candidates,
 * a settle time, then the smallest id wins (see the design note). */
static int repo_create_settle(struct repo *r, struct buf *err)
{
    struct cand_ctx c;
    double t0 = repo_now();
    int e = repo_candidates(r, &c);
    if (e == 0 && c.n == 0)
        e = repo_put_candidate(r, t0, err);
    if (e < 0)
        return e;
    log_info("creating the repository: waiting %us for other instances' candidates",
             r->conf.create_settle);
    sleep(r->conf.create_settle);
    if ((e = repo_candidates(r, &c)) < 0)
        return e;
    if (!c.n) {
        buf_printf(err, "creating the repository: the candidates vanished from every region");
        return CKS_E_REMOTE;
    }
    char key[REGION_KEY_MAX];
    layout_key(LAYOUT_REPO_CAND, NULL, c.best, key); /* c.best: 32 hex, listed */
    for (size_t i = 0; i < r->nregions; i++) {
        struct repoobj o;
        struct buf data = BUF_INIT, perr = BUF_INIT;
        if (r->health[i] || region_get(r->regions[i], key, REPOOBJ_MAX_BYTES, &data) < 0 ||
            repoobj_parse(data.data, data.len, &o, &perr) < 0 || strcmp(o.id, c.best)) {
            buf_free(&data);
            buf_free(&perr);
            continue;
        }
        buf_free(&data);
        buf_free(&perr);
        if (strcmp(o.id, r->params.id))
            log_info("another instance's repository %s won; adopting it", o.id);
        r->params = o;
        return repo_fill(r, &r->params, err);
    }
    buf_printf(err, "creating the repository: no region serves candidate \"%s\"", key);
    return CKS_E_REMOTE;
}

static int repo_create(struct repo *r, struct buf *err)
{
    return repo_all_enforce(r) ? repo_create_arbiter(r, err) : repo_create_settle(r, err);
}

/* ---- preconditions ------------------------------------------------------- */

/* Whether each region enforces create-only puts: asked once per store
 * (kind, endpoint, bucket, prefix or path) and remembered in the index. */
static void repo_preconditions(struct repo *r)
{
    for (size_t i = 0; i < r->nregions; i++) {
        struct region *rg = r->regions[i];
        const struct region_conf *c = &rg->conf;
        char fp[CONFIG_PATH_MAX + 2400], key[16 + HASH_HEX_LEN], val[8];
        uint8_t d[HASH_LEN];
        struct index_txn *t;
        if (r->health[i] || region_preconditions(rg) >= 0)
            continue;
        /* LMDB keys are short: the store's identity, hashed */
        snprintf(fp, sizeof(fp), "%s|%s|%s|%s", c->endpoint, c->bucket, c->prefix, c->path);
        hash_sha256(fp, strlen(fp), d);
        memcpy(key, "precond/", 8);
        hex_encode(d, HASH_LEN, key + 8);
        int e = index_txn_begin(r->ix, false, &t);
        if (e == 0) {
            e = index_meta_get(t, key, val, sizeof(val));
            index_txn_abort(t);
        }
        if (e == 0) {
            region_set_preconditions(rg, val[0] == '1');
            continue;
        }
        int p = region_probe_preconditions(rg);
        if (p < 0) {
            log_warn("region '%s': cannot tell whether it enforces create-only writes (%s); "
                     "assuming not",
                     c->name, region_last_error(rg));
            region_set_preconditions(rg, 0);
            continue;
        }
        region_set_preconditions(rg, p);
        log_info("region '%s' %s create-only writes (If-None-Match)", c->name,
                 p ? "enforces" : "does not enforce");
        if (index_txn_begin(r->ix, true, &t) == 0 &&
            (index_meta_put(t, key, p ? "1" : "0") < 0 || index_txn_commit(t) < 0))
            log_warn("could not remember the probe of region '%s'", c->name);
    }
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
        if (e < 0) { /* the others carry on: a warning; the command fails if it needs it */
            log_warn("%s", region_last_error(rg));
            r->health[i] = e;
        }
    }
    return 0;
}

/* Every region's slot, in one transaction; -ENOENT from a read one when
 * some region has none yet. */
static int repo_slots_in(struct repo *r, bool write)
{
    struct index_txn *t = NULL;
    int e = index_txn_begin(r->ix, write, &t);
    for (size_t i = 0; e == 0 && i < r->nregions; i++)
        e = index_region_slot(t, r->regions[i]->conf.name, &r->regions[i]->slot);
    if (e < 0 || !write) {
        index_txn_abort(t);
        return e;
    }
    return index_txn_commit(t);
}

/* Read first: a command that only reads (restore, ls) writes nothing
 * unless a region is new. */
static int repo_assign_slots(struct repo *r)
{
    int e = repo_slots_in(r, false);
    return e == -ENOENT ? repo_slots_in(r, true) : e;
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

/* Creates the repository; an encrypted one gets its first key slot
 * before the repo object exists anywhere, so that no instance ever sees an
 * encrypted repository it cannot unlock for want of a slot.  A creator
 * that loses the race deletes its slot (it wraps a master key nobody uses). */
static int repo_create_keyed(struct repo *r, struct buf *err)
{
    char slot[REPOKEYS_ID_HEX + 1] = "", mine[REPOOBJ_ID_HEX + 1];
    struct repokeys_view kv;
    if (r->params.encrypted) {
        struct repo_secret s;
        int e = repokeys_secret(&r->conf, &s, err);
        if (e == 0)
            e = repokeys_put_slot(repo_keys_view(r, &kv), &s, slot, err);
        repokeys_secret_free(&s);
        if (e < 0)
            return e;
    }
    memcpy(mine, r->params.id, sizeof(mine));
    int e = repo_create(r, err);
    if (slot[0] && strcmp(mine, r->params.id) != 0) {
        repokeys_del_slot(repo_keys_view(r, &kv), slot);
        OPENSSL_cleanse(r->master, sizeof(r->master));
        r->have_master = false;
    }
    return e;
}

/* Unlocks an encrypted repository; refuses to write plaintext into an
 * existing repository when the configuration asks for encryption. */
static int repo_unlock(struct repo *r, struct buf *err)
{
    if (r->params.encrypted) {
        struct repokeys_view kv;
        uint8_t master[CRYPT_KEY_LEN];
        char slot[REPOKEYS_ID_HEX + 1];
        int e = repokeys_unlock(repo_keys_view(r, &kv), master, slot, err);
        if (e == 0 && (e = repo_set_master(r, master, slot)) < 0)
            buf_printf(err, "deriving the repository's keys: %s", err_str(e));
        OPENSSL_cleanse(master, sizeof(master));
        return e;
    }
    if (!r->conf.encryption)
        return 0;
    buf_printf(err,
               "[repository] encryption = aes-256-gcm, but repository %s is not encrypted: "
               "encryption is chosen when a repository is created (use new regions or a new "
               "prefix for an encrypted one)",
               r->params.id);
    return CKS_E_MISMATCH;
}

int repo_open(const struct config *conf, unsigned flags, struct repo **ret, struct buf *err)
{
    struct repo *r = calloc(1, sizeof(*r));
    uint32_t missing;
    bool have;
    int e;

    if (!r)
        return -ENOMEM;
    r->conf = *conf;
    r->owns_ix = true;
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
    repo_preconditions(r);
    e = repo_agree(r, &missing, &have, err);
    if (e < 0 && e != -ENOMEM && (flags & REPO_NO_AGREE)) { /* to look at, or repair */
        buf_reset(err);
        *ret = r;
        return 0;
    }
    if (e < 0)
        goto fail;
    if ((missing || !have) && (flags & REPO_CREATE)) {
        /* An encrypted repository's key slots reach a region before its
         * repo object does (see repo_create_keyed). */
        struct repokeys_view kv;
        if (have && r->params.encrypted &&
            repokeys_copy(repo_keys_view(r, &kv), ~missing, missing, err) < 0) {
            log_error("copying key slots into the regions lacking them: %s", buf_str(err));
            buf_reset(err);
        }
        e = have ? repo_fill(r, &r->params, err) : repo_create_keyed(r, err);
        if (e < 0)
            goto fail;
    }
    if ((have || (flags & REPO_CREATE)) && (e = repo_unlock(r, err)) < 0)
        goto fail;
    e = fastcdc_init_gear(&r->cdc, (size_t)r->params.chunk_min, (size_t)r->params.chunk_avg,
                          (size_t)r->params.chunk_max, r->params.normalization,
                          r->encrypted ? r->gear : NULL);
    if (e < 0)
        goto fail;
    if (r->params.chunk_avg != conf->chunk_avg || r->params.chunk_min != conf->chunk_min ||
        r->params.chunk_max != conf->chunk_max)
        log_info(
            "using the repository's chunker parameters %llu/%llu/%llu, not the configuration's",
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
    crypt_keys_wipe(&r->keys);
    OPENSSL_cleanse(r->master, sizeof(r->master));
    for (size_t i = 0; i < r->nregions; i++)
        region_free(r->regions[i]);
    if (r->owns_ix)
        index_free(r->ix);
    free(r);
}

int repo_region_clone(const struct repo *r, size_t i, struct region **ret, struct buf *err)
{
    int e = region_new(&r->conf.regions[i], ret, err);
    if (e == 0) {
        (*ret)->slot = r->regions[i]->slot;
        region_set_seal(*ret, r->encrypted ? &r->keys : NULL);
    }
    return e;
}

size_t repo_workers(const struct repo *r)
{
    long n = r->conf.workers ? (long)r->conf.workers : sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > REPO_MAX_WORKERS ? REPO_MAX_WORKERS : (size_t)n;
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
    int healthy = 0;
    atomic_compare_exchange_strong(&r->health[i], &healthy, err ? err : -EIO);
}

void repo_regions_retry(struct repo *r)
{
    for (size_t i = 0; i < r->nregions; i++)
        atomic_store(&r->health[i], 0);
}

int repo_region_params(struct repo *r, size_t i, struct repoobj *ret, struct buf *err)
{
    return repo_read_params(r->regions[i], ret, err);
}

int repo_adopt(struct repo *r, size_t i, struct buf *err)
{
    struct repoobj want;
    struct buf obj = BUF_INIT;
    int n = 0, e = repo_read_params(r->regions[i], &want, err);
    if (e == -ENOENT)
        buf_printf(err, "region '%s' holds no repo object", r->regions[i]->conf.name);
    if (e < 0)
        return e;
    if ((e = repoobj_encode(&want, &obj)) < 0)
        return e;
    for (size_t k = 0; k < r->nregions; k++) {
        struct repoobj have;
        struct buf perr = BUF_INIT;
        if (k == i || r->health[k])
            continue;
        if (repo_read_params(r->regions[k], &have, &perr) == 0 && repo_same(&have, &want)) {
            buf_free(&perr);
            continue;
        }
        buf_free(&perr);
        /* its key slots first, as at creation (another repository's slots
         * there stay, and open to no key that passes the check) */
        struct repokeys_view kv;
        if (want.encrypted && repokeys_copy(repo_keys_view(r, &kv), 1u << i, 1u << k, &perr) < 0)
            log_error("region '%s': copying key slots: %s", r->regions[k]->conf.name,
                      buf_str(&perr));
        buf_free(&perr);
        if ((e = region_put(r->regions[k], layout_repo(), obj.data, obj.len)) < 0) {
            buf_printf(err, "%s", region_last_error(r->regions[k]));
            break;
        }
        log_info("region '%s' now holds repository %s", r->regions[k]->conf.name, want.id);
        n++;
    }
    buf_free(&obj);
    return e < 0 ? e : n;
}

struct chunkobj_opts repo_chunk_opts(const struct repo *r)
{
    return (struct chunkobj_opts){.level = r->conf.zstd_level, .tensor = r->conf.tensor};
}

void repo_chunk_id(const struct repo *r, const uint8_t *data, size_t len, uint8_t id[HASH_LEN])
{
    if (!r->encrypted || crypt_chunk_id(&r->keys, data, len, id) < 0) {
        if (r->encrypted) /* OpenSSL out of memory: no id we could trust */
            abort();
        hash_sha256(data, len, id);
    }
}

struct chunkobj_ctx repo_chunkobj_ctx(const struct repo *r)
{
    struct chunkobj_ctx z = CHUNKOBJ_CTX_INIT;
    z.keys = r->encrypted ? &r->keys : NULL;
    return z;
}

/* ---- another thread's copy ------------------------------------------------ */

int repo_dup(const struct repo *r, struct repo **ret, struct buf *err)
{
    struct repo *d = malloc(sizeof(*d));
    if (!d)
        return -ENOMEM;
    memcpy(d, r, sizeof(*d)); /* its health is set again below, atomically */
    d->owns_ix = false;
    d->nregions = 0;
    for (size_t i = 0; i < r->nregions; i++) {
        struct buf cerr = BUF_INIT;
        int e = repo_region_clone(r, i, &d->regions[i], &cerr);
        if (e < 0) {
            buf_printf(err, "region '%s': %s", r->conf.regions[i].name, buf_str(&cerr));
            buf_free(&cerr);
            repo_free(d);
            return e;
        }
        buf_free(&cerr);
        d->nregions++;
        region_set_seal(d->regions[i], d->encrypted ? &d->keys : NULL);
        region_set_preconditions(d->regions[i], region_preconditions(r->regions[i]));
        atomic_init(&d->health[i], atomic_load(&r->health[i]));
    }
    *ret = d;
    return 0;
}

/* ---- reading ---------------------------------------------------------------- */

const struct config *repo_conf(const struct repo *r)
{
    return &r->conf;
}

unsigned repo_quorum(const struct repo *r)
{
    return r->conf.quorum;
}

struct index *repo_index(const struct repo *r)
{
    return r->ix;
}

const struct repoobj *repo_params(const struct repo *r)
{
    return &r->params;
}

const struct fastcdc *repo_chunker(const struct repo *r)
{
    return &r->cdc;
}

size_t repo_nregions(const struct repo *r)
{
    return r->nregions;
}

struct region *repo_region(const struct repo *r, size_t i)
{
    return r->regions[i];
}

struct region *const *repo_regions(const struct repo *r)
{
    return r->regions;
}

int repo_region_error(const struct repo *r, size_t i)
{
    return atomic_load_explicit(&r->health[i], memory_order_relaxed);
}

bool repo_region_ok(const struct repo *r, size_t i)
{
    return repo_region_error(r, i) == 0;
}

uint32_t repo_healthy_mask(const struct repo *r)
{
    uint32_t m = 0;
    for (size_t i = 0; i < r->nregions; i++)
        m |= (uint32_t)repo_region_ok(r, i) << i;
    return m;
}

/* ---- keys ------------------------------------------------------------------- */

bool repo_encrypted(const struct repo *r)
{
    return r->encrypted;
}

const struct crypt_keys *repo_keys(const struct repo *r)
{
    return r->encrypted ? &r->keys : NULL;
}

const char *repo_unlocked_by(const struct repo *r)
{
    return r->unlocked_by;
}

const struct repokeys_view *repo_keys_view(const struct repo *r, struct repokeys_view *v)
{
    *v = (struct repokeys_view){.regions = r->regions,
                                .nregions = r->nregions,
                                .healthy = repo_healthy_mask(r),
                                .params = &r->params,
                                .conf = &r->conf,
                                .master = repo_master(r)};
    return v;
}

const uint8_t *repo_master(const struct repo *r)
{
    return r->have_master ? r->master : NULL;
}

int repo_set_master(struct repo *r, const uint8_t master[CRYPT_KEY_LEN], const char *slot)
{
    uint8_t id[REPOOBJ_ID_HEX / 2];
    int e = hex_decode(r->params.id, sizeof(id), id) < 0 ? CKS_E_FORMAT : 0;
    if (e == 0)
        e = crypt_derive(master, id, sizeof(id), &r->keys);
    if (e == 0)
        e = crypt_gear(&r->keys, r->gear);
    if (master != r->master)
        memcpy(r->master, master, sizeof(r->master));
    r->have_master = e == 0;
    if (e < 0) {
        crypt_keys_wipe(&r->keys);
        OPENSSL_cleanse(r->master, sizeof(r->master));
        return e;
    }
    snprintf(r->unlocked_by, sizeof(r->unlocked_by), "%s", slot);
    r->encrypted = true;
    for (size_t i = 0; i < r->nregions; i++)
        region_set_seal(r->regions[i], &r->keys);
    return 0;
}
