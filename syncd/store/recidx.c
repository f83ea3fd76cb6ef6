/*
 * recidx.c — recipe object records in the local index (see recidx.h).
 */
#include <errno.h>
#include <string.h>

#include "base/err.h"
#include "base/le.h"
#include "store/recidx.h"

#define RECIDX_VERSION 1
#define RECIDX_HEAD 16
#define RECIDX_KEY (HASH_LEN + MANIFEST_RECIPE_SIG)

static void recidx_key(const uint8_t id[HASH_LEN], const uint8_t sig[MANIFEST_RECIPE_SIG],
                       uint8_t key[RECIDX_KEY])
{
    memcpy(key, id, HASH_LEN);
    memcpy(key + HASH_LEN, sig, MANIFEST_RECIPE_SIG);
}

int recidx_put(struct index_txn *t, const uint8_t id[HASH_LEN], const struct recidx *r)
{
    uint8_t key[RECIDX_KEY], v[RECIDX_HEAD + TDELTA_BASE_REC * TDELTA_MAX_BASES];
    if (r->nbases == 0 || r->nbases > TDELTA_MAX_BASES)
        return -EINVAL;
    recidx_key(id, r->sig, key);
    v[0] = RECIDX_VERSION;
    v[1] = r->depth;
    v[2] = (uint8_t)r->nbases;
    v[3] = 0;
    le32_put(v + 4, r->raw_len);
    le32_put(v + 8, r->stored_len);
    le32_put(v + 12, r->presence);
    for (size_t k = 0; k < r->nbases; k++) {
        memcpy(v + RECIDX_HEAD + TDELTA_BASE_REC * k, r->base[k].id, HASH_LEN);
        le32_put(v + RECIDX_HEAD + TDELTA_BASE_REC * k + HASH_LEN, r->base[k].len);
    }
    return index_raw_put(t, INDEX_RECIPES, key, sizeof(key), v,
                         RECIDX_HEAD + TDELTA_BASE_REC * r->nbases);
}

static int recidx_decode(const uint8_t *key, const uint8_t *v, size_t n, struct recidx *r)
{
    if (n < RECIDX_HEAD || v[0] != RECIDX_VERSION || v[3] != 0 || v[2] == 0 ||
        v[2] > TDELTA_MAX_BASES || n != RECIDX_HEAD + (size_t)TDELTA_BASE_REC * v[2])
        return CKS_E_FORMAT;
    memcpy(r->sig, key + HASH_LEN, MANIFEST_RECIPE_SIG);
    r->depth = v[1];
    r->nbases = v[2];
    r->raw_len = le32_get(v + 4);
    r->stored_len = le32_get(v + 8);
    r->presence = le32_get(v + 12);
    for (size_t k = 0; k < r->nbases; k++) {
        memcpy(r->base[k].id, v + RECIDX_HEAD + TDELTA_BASE_REC * k, HASH_LEN);
        r->base[k].len = le32_get(v + RECIDX_HEAD + TDELTA_BASE_REC * k + HASH_LEN);
    }
    return 0;
}

int recidx_get(struct index_txn *t, const uint8_t id[HASH_LEN],
               const uint8_t sig[MANIFEST_RECIPE_SIG], struct recidx *ret)
{
    uint8_t key[RECIDX_KEY];
    const void *v;
    size_t n;
    recidx_key(id, sig, key);
    int e = index_raw_get(t, INDEX_RECIPES, key, sizeof(key), &v, &n);
    return e < 0 ? e : recidx_decode(key, v, n, ret);
}

struct recidx_walk {
    int (*cb)(void *ud, const struct recidx *r);
    void *ud;
};

static int recidx_one(void *ud, const void *key, size_t klen, const void *val, size_t vlen)
{
    struct recidx_walk *w = ud;
    struct recidx r;
    if (klen != RECIDX_KEY)
        return CKS_E_FORMAT;
    int e = recidx_decode(key, val, vlen, &r);
    return e < 0 ? e : w->cb(w->ud, &r);
}

int recidx_each(struct index_txn *t, const uint8_t id[HASH_LEN],
                int (*cb)(void *ud, const struct recidx *r), void *ud)
{
    struct recidx_walk w = {cb, ud};
    return index_raw_foreach(t, INDEX_RECIPES, id, HASH_LEN, recidx_one, &w);
}

struct recidx_walk_all {
    int (*cb)(void *ud, const uint8_t *id, const struct recidx *r, int e);
    void *ud;
};

static int recidx_one_all(void *ud, const void *key, size_t klen, const void *val, size_t vlen)
{
    struct recidx_walk_all *w = ud;
    struct recidx r;
    memset(&r, 0, sizeof(r));
    if (klen != RECIDX_KEY)
        return w->cb(w->ud, NULL, &r, CKS_E_FORMAT);
    int e = recidx_decode(key, val, vlen, &r);
    if (e < 0) {
        memset(&r, 0, sizeof(r));
        memcpy(r.sig, (const uint8_t *)key + HASH_LEN, MANIFEST_RECIPE_SIG);
    }
    return w->cb(w->ud, key, &r, e);
}

int recidx_all(struct index_txn *t,
               int (*cb)(void *ud, const uint8_t *id, const struct recidx *r, int e), void *ud)
{
    struct recidx_walk_all w = {cb, ud};
    return index_raw_foreach(t, INDEX_RECIPES, NULL, 0, recidx_one_all, &w);
}

int recidx_presence(struct index_txn *t, const uint8_t id[HASH_LEN],
                    const uint8_t sig[MANIFEST_RECIPE_SIG], uint32_t set, uint32_t clear)
{
    struct recidx r;
    int e = recidx_get(t, id, sig, &r);
    if (e == -ENOENT)
        return 0;
    if (e < 0)
        return e;
    uint32_t p = (r.presence | set) & ~clear;
    if (p == r.presence)
        return 0;
    r.presence = p;
    return recidx_put(t, id, &r);
}
