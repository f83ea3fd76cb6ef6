/*
 * repokeys.h — an encrypted repository's keys in the regions: the key
 * slots (keys/<16 hex>, engine/keyslot.h), unlocking the master key with
 * this instance's secret, and `ckptsync key add | list | remove`.
 *
 * The master key is random and never leaves the process; each slot wraps
 * it under one secret (a key file, or a passphrase through scrypt), so a
 * secret is added or removed by writing or deleting one slot and nothing
 * is re-encrypted.  Slots are write-once objects under fresh random names:
 * two instances adding keys at once never touch the same object.  A slot
 * is believed only when the master key it opens matches the repo object's
 * key check, so a slot written by a creator that lost the creation race
 * (or planted by someone who can write the bucket but lacks the master
 * key) opens nothing.
 *
 * The secret is chosen by the configuration: [repository] key_file, else
 * passphrase_file, else $CKPTSYNC_PASSPHRASE.
 */
#ifndef CKS_REPOKEYS_H
#define CKS_REPOKEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/config.h"
#include "engine/crypt.h"
#include "engine/keyslot.h"
#include "engine/repoobj.h"
#include "store/region.h"

#define REPOKEYS_ID_HEX 16
#define REPOKEYS_MAX_SLOTS 256

/* What the key functions need of an open repository, lent by its owner
 * (service/repo.h: repo_keys_view): the regions and which are healthy,
 * the agreed parameters, the configuration, and the master key when this
 * instance holds it.  This module works on the view so that it never
 * includes the repository handle that calls it (no circle of includes). */
struct repokeys_view {
    struct region *const *regions;
    size_t nregions;
    uint32_t healthy; /* bit i: region i may be used */
    const struct repoobj *params;
    const struct config *conf;
    const uint8_t *master; /* NULL unless held (created here, or unlocked) */
};

/* One secret, as a slot of its kind takes it. */
struct repo_secret {
    enum keyslot_kind kind;
    struct buf bytes;                 /* the key file's 32 bytes, or the passphrase */
    char where[CONFIG_PATH_MAX + 32]; /* "key file \"/x\"", "$CKPTSYNC_PASSPHRASE", ... */
};

/* The secret conf names: key_file, passphrase_file or the environment.
 * CKS_E_CONFIG (with a message saying what to set) when there is none. */
int repokeys_secret(const struct config *conf, struct repo_secret *s, struct buf *err);
/* The secret in one file: a key file (KEYSLOT_KEYFILE) or a passphrase
 * file (KEYSLOT_PASSPHRASE), checked and read as keys.h says. */
int repokeys_secret_file(enum keyslot_kind kind, const char *path, struct repo_secret *s,
                         struct buf *err);
void repokeys_secret_free(struct repo_secret *s);

/* A new repository's master key (into ret_master) and key check: params
 * (its id set) gets encrypted and key_check.  For repo.c, at creation. */
int repokeys_new_master(struct repoobj *params, uint8_t ret_master[CRYPT_KEY_LEN]);
/* Writes a slot for the master key (v->master) under s into every healthy region (a
 * create-only put where the region enforces it); its name in ret_id.
 * 0 when at least one region took it; -EINVAL when no master is held. */
int repokeys_put_slot(const struct repokeys_view *v, const struct repo_secret *s,
                      char ret_id[REPOKEYS_ID_HEX + 1], struct buf *err);
/* Deletes slot id from every healthy region (a creator that lost the race
 * cleans up its own slot this way). */
void repokeys_del_slot(const struct repokeys_view *v, const char *id);

/* The master key of an encrypted repository (v->params->encrypted) into
 * ret_master: v->master when this instance just created it (and it passes
 * the key check), else the one in the first slot that the configured
 * secret opens and that passes the key check, its slot's name in ret_slot
 * ("" when created here).  The caller (repo_open) derives the subkeys
 * from it (repo_set_master).  CKS_E_CONFIG (no secret configured),
 * CKS_E_AUTH (no slot opens: the message names the secret and the number
 * of slots tried). */
int repokeys_unlock(const struct repokeys_view *v, uint8_t ret_master[CRYPT_KEY_LEN],
                    char ret_slot[REPOKEYS_ID_HEX + 1], struct buf *err);

/* One slot as `key list` shows it. */
struct repokey_info {
    char id[REPOKEYS_ID_HEX + 1];
    uint32_t regions;    /* bits: the regions holding it */
    bool valid;          /* parses (a damaged slot is listed, not used) */
    struct keyslot slot; /* the parsed slot, when valid */
};

/* Every slot in the healthy regions (up to REPOKEYS_MAX_SLOTS), sorted by
 * id.  *ret is malloc'ed. */
int repokeys_list(const struct repokeys_view *v, struct repokey_info **ret, size_t *ret_n,
                  struct buf *err);

/* Copies every key slot that a healthy region of mask from holds (and that
 * parses) into each healthy region of mask to that lacks it: a region that
 * gets the repo object from another (a new or emptied bucket) gets the
 * slots first, so that losing the old regions later does not lose the
 * way in.  A slot that no region of from holds any more once the copies
 * are made (a concurrent `key remove`) is deleted again.  Returns the
 * number of copies written (>= 0), or a listing's error. */
int repokeys_copy(const struct repokeys_view *v, uint32_t from, uint32_t to, struct buf *err);

#endif
