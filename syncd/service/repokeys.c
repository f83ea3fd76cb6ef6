/*
 * repokeys.c — key slots in the regions and unlocking (see repokeys.h).
 *
 * Slots are read from every healthy region and merged by name: a region
 * that lost its slots (a bucket recreated, a lifecycle rule) does not lock
 * anyone out while another region holds them.  Only the key check in the
 * repo object decides which master key is the repository's; a slot is
 * just a way to it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/crypt.h"
#include "engine/hash.h"
#include "service/keys.h"
#include "service/repokeys.h"
#include "store/layout.h"

#define KEY_CHECK_INFO "ckptsync key check"

int repokeys_secret_file(enum keyslot_kind kind, const char *path, struct repo_secret *s,
                         struct buf *err)
{
    int e;
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    snprintf(s->where, sizeof(s->where), "%s file \"%s\"",
             kind == KEYSLOT_KEYFILE ? "key" : "passphrase", path);
    if (kind == KEYSLOT_PASSPHRASE)
        e = keys_read_passphrase_file(path, &s->bytes, err);
    else if ((e = buf_reserve(&s->bytes, CRYPT_KEY_LEN)) == 0 &&
             (e = keys_read_keyfile(path, s->bytes.data, err)) == 0)
        s->bytes.len = CRYPT_KEY_LEN;
    if (e < 0)
        keys_secret_free(&s->bytes);
    return e;
}

int repokeys_secret(const struct config *conf, struct repo_secret *s, struct buf *err)
{
    if (conf->key_file[0])
        return repokeys_secret_file(KEYSLOT_KEYFILE, conf->key_file, s, err);
    memset(s, 0, sizeof(*s));
    s->kind = KEYSLOT_PASSPHRASE;
    if (conf->passphrase_file[0])
        snprintf(s->where, sizeof(s->where), "passphrase file \"%s\"", conf->passphrase_file);
    else
        snprintf(s->where, sizeof(s->where), "$%s", KEYS_PASSPHRASE_ENV);
    int e =
        keys_passphrase(conf->passphrase_file[0] ? conf->passphrase_file : NULL, &s->bytes, err);
    if (e == CKS_E_CONFIG && !conf->passphrase_file[0] && !conf->key_file[0])
        buf_printf(err, "; an encrypted repository needs [repository] key_file or "
                        "passphrase_file, or $" KEYS_PASSPHRASE_ENV);
    if (e < 0)
        keys_secret_free(&s->bytes);
    return e;
}

void repokeys_secret_free(struct repo_secret *s)
{
    keys_secret_free(&s->bytes);
}

/* The key check of master for the repository whose id is repo_id. */
static int key_check_of(const char *repo_id, const uint8_t master[CRYPT_KEY_LEN], uint8_t out[32])
{
    uint8_t id[REPOOBJ_ID_HEX / 2];
    int e = hex_decode(repo_id, REPOOBJ_ID_HEX / 2, id) < 0 ? CKS_E_FORMAT : 0;
    if (e == 0)
        e = crypt_hkdf(master, CRYPT_KEY_LEN, id, sizeof(id), (const uint8_t *)KEY_CHECK_INFO,
                       strlen(KEY_CHECK_INFO), out, 32);
    return e;
}

int repokeys_new_master(struct repoobj *params, uint8_t ret_master[CRYPT_KEY_LEN])
{
    int e = keys_new_master(ret_master);
    if (e == 0)
        e = key_check_of(params->id, ret_master, params->key_check);
    if (e < 0) {
        OPENSSL_cleanse(ret_master, CRYPT_KEY_LEN);
        return e;
    }
    params->encrypted = true;
    return 0;
}

/* keys/<16 hex> of slot id (an id this module made or listed: valid). */
static void slot_key(const char *id, char *key)
{
    layout_key(LAYOUT_KEYSLOT, NULL, id, key);
}

int repokeys_put_slot(const struct repokeys_view *v, const struct repo_secret *s,
                      char ret_id[REPOKEYS_ID_HEX + 1], struct buf *err)
{
    const uint8_t *master = v->master; /* held since repo_open */
    struct buf obj = BUF_INIT;
    uint8_t rnd[REPOKEYS_ID_HEX / 2];
    char key[REGION_KEY_MAX];
    int e = crypt_random(rnd, sizeof(rnd));
    if (e == 0 && !master)
        e = -EINVAL;
    if (e == 0)
        e = s->kind == KEYSLOT_KEYFILE
                ? keyslot_wrap_keyfile(master, s->bytes.data, &obj)
                : keyslot_wrap_passphrase(master, s->bytes.data, s->bytes.len, KEYSLOT_SCRYPT_N,
                                          KEYSLOT_SCRYPT_R, KEYSLOT_SCRYPT_P, &obj);
    if (e < 0) {
        buf_printf(err, "wrapping the master key under the %s: %s", s->where, err_str(e));
        buf_free(&obj);
        return e;
    }
    hex_encode(rnd, sizeof(rnd), ret_id);
    slot_key(ret_id, key);
    unsigned n = 0;
    for (size_t i = 0; i < v->nregions; i++) {
        struct region *rg = v->regions[i];
        if (!(v->healthy & (1u << i)))
            continue;
        e = region_preconditions(rg) == 1 ? region_put_new(rg, key, obj.data, obj.len)
                                          : region_put(rg, key, obj.data, obj.len);
        if (e == 0)
            n++;
        else
            log_error("%s", region_last_error(rg));
    }
    buf_free(&obj);
    if (n == 0) {
        buf_printf(err, "no region took key slot \"%s\" (see the errors above)", key);
        return CKS_E_QUORUM;
    }
    return 0;
}

/* Visits the healthy regions of v, i in order. */
#define VIEW_FOR_HEALTHY(v, i)                                                                     \
    for (size_t i = 0; i < (v)->nregions; i++)                                                     \
        if ((v)->healthy & (1u << i))

void repokeys_del_slot(const struct repokeys_view *v, const char *id)
{
    char key[REGION_KEY_MAX];
    slot_key(id, key);
    VIEW_FOR_HEALTHY(v, i)
    if (region_del(v->regions[i], key) < 0)
        log_error("%s", region_last_error(v->regions[i]));
}

/* ---- listing --------------------------------------------------------------- */

struct slot_names {
    struct repokey_info *v;
    size_t n;
    uint32_t bit;
    bool full;
};

static int slot_name_cb(void *ud, const char *key, uint64_t size)
{
    struct slot_names *l = ud;
    struct layout_key lk;
    const char *id = lk.name;
    (void)size;
    if (layout_parse(key, &lk) < 0 || lk.kind != LAYOUT_KEYSLOT || strlen(id) != REPOKEYS_ID_HEX ||
        strspn(id, "0123456789abcdef") != REPOKEYS_ID_HEX)
        return 0;
    for (size_t k = 0; k < l->n; k++) {
        if (!strcmp(l->v[k].id, id)) {
            l->v[k].regions |= l->bit;
            return 0;
        }
    }
    if (l->n == REPOKEYS_MAX_SLOTS) {
        l->full = true;
        return 0;
    }
    memset(&l->v[l->n], 0, sizeof(l->v[0]));
    memcpy(l->v[l->n].id, id, REPOKEYS_ID_HEX + 1);
    l->v[l->n++].regions = l->bit;
    return 0;
}

static int info_cmp(const void *a, const void *b)
{
    return strcmp(((const struct repokey_info *)a)->id, ((const struct repokey_info *)b)->id);
}

/* Slot in's bytes into out and parsed into *ret, from the first region of
 * its that holds a copy that parses; each copy that does not is logged. */
static int slot_fetch(const struct repokeys_view *v, const struct repokey_info *in, struct buf *out,
                      struct keyslot *ret)
{
    char key[REGION_KEY_MAX];
    slot_key(in->id, key);
    int e = -ENOENT;
    VIEW_FOR_HEALTHY(v, i)
    {
        if (!(in->regions & (1u << i)))
            continue;
        buf_reset(out);
        e = region_get(v->regions[i], key, KEYSLOT_MAX_BYTES, out);
        if (e == 0 && (e = keyslot_parse(out->data, out->len, ret)) == 0)
            return 0;
        log_error("region '%s': key slot \"%s\": %s", v->regions[i]->conf.name, key, err_str(e));
    }
    return e;
}

/* The slot names in the healthy regions of mask, merged and sorted, not
 * yet read. */
static int slot_names_in(const struct repokeys_view *v, uint32_t mask, struct slot_names *l,
                         struct buf *err)
{
    *l = (struct slot_names){calloc(REPOKEYS_MAX_SLOTS, sizeof(struct repokey_info)), 0, 0, false};
    if (!l->v)
        return -ENOMEM;
    unsigned listed = 0;
    char prefix[REGION_KEY_MAX];
    layout_prefix(LAYOUT_KEYSLOT, NULL, prefix);
    VIEW_FOR_HEALTHY(v, i)
    {
        if (!(mask & (1u << i)))
            continue;
        l->bit = 1u << i;
        int e = region_list(v->regions[i], prefix, slot_name_cb, l);
        if (e < 0 && e != -ENOENT)
            log_error("%s", region_last_error(v->regions[i]));
        else
            listed++;
    }
    if (!listed) {
        free(l->v);
        l->v = NULL;
        buf_printf(err, "no region could list its key slots");
        return CKS_E_QUORUM;
    }
    if (l->full)
        log_error("more than %d key slots: the rest are not read", REPOKEYS_MAX_SLOTS);
    qsort(l->v, l->n, sizeof(*l->v), info_cmp);
    return 0;
}

int repokeys_list(const struct repokeys_view *v, struct repokey_info **ret, size_t *ret_n,
                  struct buf *err)
{
    struct slot_names l;
    int e = slot_names_in(v, UINT32_MAX, &l, err);
    if (e < 0)
        return e;
    struct buf data = BUF_INIT;
    for (size_t k = 0; k < l.n; k++)
        l.v[k].valid = slot_fetch(v, &l.v[k], &data, &l.v[k].slot) == 0;
    buf_free(&data);
    *ret = l.v;
    *ret_n = l.n;
    return 0;
}

/* ---- copying into regions that lack slots ---------------------------------- */

static const struct repokey_info *slot_find(const struct slot_names *l, const char *id)
{
    for (size_t k = 0; k < l->n; k++)
        if (!strcmp(l->v[k].id, id))
            return &l->v[k];
    return NULL;
}

int repokeys_copy(const struct repokeys_view *v, uint32_t from, uint32_t to, struct buf *err)
{
    struct slot_names src, dst, again;
    struct buf obj = BUF_INIT;
    uint32_t *put = NULL;
    int n = 0, e = slot_names_in(v, from, &src, err);
    if (e < 0)
        return e;
    if ((e = slot_names_in(v, to, &dst, err)) < 0) {
        free(src.v);
        return e;
    }
    if (!(put = calloc(src.n ? src.n : 1, sizeof(*put)))) {
        e = -ENOMEM;
        goto out;
    }
    for (size_t k = 0; k < src.n; k++) {
        const struct repokey_info *have = slot_find(&dst, src.v[k].id);
        uint32_t lack = to & ~(have ? have->regions : 0);
        struct keyslot ks; /* only checked: the bytes are copied */
        char key[REGION_KEY_MAX];
        lack &= v->healthy;
        if (!lack || slot_fetch(v, &src.v[k], &obj, &ks) < 0)
            continue; /* held everywhere, or no copy that parses: not spread */
        slot_key(src.v[k].id, key);
        for (size_t i = 0; i < v->nregions; i++) {
            struct region *rg = v->regions[i];
            if (!(lack & (1u << i)))
                continue;
            int p = region_preconditions(rg) == 1 ? region_put_new(rg, key, obj.data, obj.len)
                                                  : region_put(rg, key, obj.data, obj.len);
            if (p == 0 || p == -EEXIST) {
                put[k] |= 1u << i;
                n++;
                log_info("region '%s': copied key slot \"%s\" in", rg->conf.name, key);
            } else {
                log_error("%s", region_last_error(rg));
            }
        }
    }
    /* A `key remove` elsewhere may have deleted a slot from the sources
     * between the listing and the copy: a slot copied in that no source
     * holds any more is deleted again, so that the removal stands. */
    if (n && slot_names_in(v, from, &again, err) == 0) {
        for (size_t k = 0; k < src.n; k++) {
            if (!put[k] || slot_find(&again, src.v[k].id))
                continue;
            char key[REGION_KEY_MAX];
            slot_key(src.v[k].id, key);
            for (size_t i = 0; i < v->nregions; i++)
                if ((put[k] & (1u << i)) && region_del(v->regions[i], key) == 0)
                    n--;
            log_info("key slot \"%s\" was removed meanwhile; not copied", key);
        }
        free(again.v);
    }
    e = n;
out:
    buf_free(&obj);
    free(put);
    free(src.v);
    free(dst.v);
    return e;
}

/* ---- unlocking -------------------------------------------------------------- */

/* The master key from the slots the secret opens; 0 or CKS_E_AUTH. */
static int unlock_from_slots(const struct repokeys_view *kv, const struct repo_secret *s,
                             uint8_t master[32], char ret_slot[REPOKEYS_ID_HEX + 1],
                             struct buf *err)
{
    struct repokey_info *v = NULL;
    size_t n = 0, tried = 0, stale = 0;
    int e = repokeys_list(kv, &v, &n, err);
    if (e < 0)
        return e;
    e = CKS_E_AUTH;
    for (size_t k = 0; k < n && e == CKS_E_AUTH; k++) {
        uint8_t check[32];
        if (!v[k].valid || v[k].slot.kind != s->kind)
            continue;
        tried++;
        int u = keyslot_unwrap(&v[k].slot, s->bytes.data, s->bytes.len, master);
        if (u == CKS_E_AUTH)
            continue;
        if (u < 0) {
            e = u;
            buf_printf(err, "key slot \"%s\": %s", v[k].id, err_str(u));
            break;
        }
        if (key_check_of(kv->params->id, master, check) < 0 ||
            CRYPTO_memcmp(check, kv->params->key_check, sizeof(check)) != 0) {
            stale++; /* opens, but not this repository's master key */
            memset(master, 0, 32);
            continue;
        }
        if (ret_slot)
            memcpy(ret_slot, v[k].id, REPOKEYS_ID_HEX + 1);
        e = 0;
    }
    if (e == CKS_E_AUTH)
        buf_printf(err,
                   "repository %s is encrypted and none of its %zu key slot(s) opens with the "
                   "%s (%zu of that kind tried%s); `ckptsync key list` shows the slots",
                   kv->params->id, n, s->where, tried,
                   stale ? ", some open to another repository's key" : "");
    free(v);
    return e;
}

int repokeys_unlock(const struct repokeys_view *v, uint8_t ret_master[CRYPT_KEY_LEN],
                    char ret_slot[REPOKEYS_ID_HEX + 1], struct buf *err)
{
    const struct repoobj *p = v->params;
    uint8_t check[32];
    ret_slot[0] = '\0';
    if (v->master && key_check_of(p->id, v->master, check) == 0 &&
        CRYPTO_memcmp(check, p->key_check, sizeof(check)) == 0) {
        memcpy(ret_master, v->master, CRYPT_KEY_LEN);
        return 0;
    }
    struct repo_secret s;
    struct buf why = BUF_INIT;
    int e = repokeys_secret(v->conf, &s, &why);
    if (e < 0) {
        buf_printf(err, "repository %s is encrypted: %s", p->id, buf_str(&why));
        buf_free(&why);
        return e;
    }
    buf_free(&why);
    e = unlock_from_slots(v, &s, ret_master, ret_slot, err);
    repokeys_secret_free(&s);
    return e;
}
