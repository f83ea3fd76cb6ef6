/*
 * unitmark.c — the content marks of units (see unitmark.h).
 *
 * Design: marks are index meta records keyed by a hash of the unit's
 * path (the path may be longer than a meta key allows), so two units
 * whose paths collide in 128 bits would share one; the content digest in
 * the value still has to match, so a collision costs at most a needless
 * snapshot, never a skipped one.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "service/unitmark.h"

#define MARK_VAL_MAX 512

void unitmark_content(const struct manifest *m, uint8_t ret[HASH_LEN])
{
    struct hash h;
    if (hash_init(&h) < 0) {
        memset(ret, 0, HASH_LEN);
        return;
    }
    for (size_t k = 0; k < m->nfiles; k++) {
        const struct mfile *f = &m->files[k];
        uint8_t head[1 + 4 + 8];
        head[0] = (uint8_t)f->type;
        memcpy(head + 1, &f->mode, 4);
        memcpy(head + 5, &f->size, 8);
        hash_update(&h, head, sizeof(head));
        hash_update(&h, f->path, strlen(f->path) + 1);
        if (f->link)
            hash_update(&h, f->link, strlen(f->link) + 1);
        hash_update(&h, f->digest, HASH_LEN);
    }
    hash_final(&h, ret);
    hash_free(&h);
}

/* "<prefix>:<32 hex of SHA-256(unit)>" */
static void mark_key(const char *prefix, const char *unit, char key[96])
{
    uint8_t d[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    hash_sha256(unit, strlen(unit), d);
    hex_encode(d, 16, hex);
    snprintf(key, 96, "%s:%s", prefix, hex);
}

int unitmark_snapshotted(struct index_txn *t, const char *unit, const uint8_t content[HASH_LEN],
                         const char *id)
{
    char key[96], val[MARK_VAL_MAX], hex[HASH_HEX_LEN + 1];
    mark_key("unit", unit, key);
    hex_encode(content, HASH_LEN, hex);
    snprintf(val, sizeof(val), "%s %s", hex, id);
    return index_meta_put(t, key, val);
}

/* The id after "<content hex> " in val when the content matches, else NULL. */
static const char *mark_match(const char *val, const uint8_t content[HASH_LEN])
{
    char hex[HASH_HEX_LEN + 1];
    hex_encode(content, HASH_LEN, hex);
    if (strlen(val) <= HASH_HEX_LEN + 1 || strncmp(val, hex, HASH_HEX_LEN) ||
        val[HASH_HEX_LEN] != ' ')
        return NULL;
    return val + HASH_HEX_LEN + 1;
}

int unitmark_same(struct index_txn *t, const char *run, const char *unit,
                  const uint8_t content[HASH_LEN], char ret_id[MANIFEST_ID_MAX + 1])
{
    char key[96], val[MARK_VAL_MAX];
    const char *rest;
    struct index_snap s;

    mark_key("unit", unit, key);
    if (index_meta_get(t, key, val, sizeof(val)) == 0 && (rest = mark_match(val, content)) &&
        strlen(rest) <= MANIFEST_ID_MAX && index_snap_get(t, run, rest, &s) == 0) {
        snprintf(ret_id, MANIFEST_ID_MAX + 1, "%s", rest);
        return 1;
    }
    mark_key("restored", unit, key);
    if (index_meta_get(t, key, val, sizeof(val)) < 0 || !(rest = mark_match(val, content)))
        return 0;
    size_t rl = strlen(run);
    if (strncmp(rest, run, rl) || rest[rl] != ' ' || strlen(rest + rl + 1) > MANIFEST_ID_MAX ||
        index_snap_get(t, run, rest + rl + 1, &s) < 0)
        return 0; /* not recorded by the restore (snaprec.h): taken again */
    snprintf(ret_id, MANIFEST_ID_MAX + 1, "%s", rest + rl + 1);
    return 1;
}

/* The unit that target/root is under the watch root, into unit; -ENOENT
 * when it is not under it. */
static int mark_unit_path(const char *watch, const char *target, const char *root, char *unit,
                          size_t cap)
{
    char w[PATH_MAX], t[PATH_MAX];
    if (!realpath(watch, w) || !realpath(target, t))
        return -errno;
    size_t wl = strlen(w);
    if (strncmp(t, w, wl) || (t[wl] != '/' && t[wl] != '\0'))
        return -ENOENT;
    const char *rel = t + wl + (t[wl] == '/');
    int n = *rel ? snprintf(unit, cap, "%s/%s", rel, root) : snprintf(unit, cap, "%s", root);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int unitmark_restored(struct repo *r, const char *run, const char *target, const struct manifest *m)
{
    char unit[PATH_MAX], key[96], val[MARK_VAL_MAX], hex[HASH_HEX_LEN + 1];
    uint8_t content[HASH_LEN];
    struct index_txn *t;
    if (!m->root)
        return 0; /* a whole run, not one unit */
    int e = mark_unit_path(repo_conf(r)->watch, target, m->root, unit, sizeof(unit));
    if (e < 0)
        return e == -ENOENT ? 0 : e;
    unitmark_content(m, content);
    hex_encode(content, HASH_LEN, hex);
    if (snprintf(val, sizeof(val), "%s %s %s", hex, run, m->id) >= (int)sizeof(val))
        return -ENAMETOOLONG;
    mark_key("restored", unit, key);
    if ((e = index_txn_begin(repo_index(r), true, &t)) < 0)
        return e;
    if ((e = index_meta_put(t, key, val)) < 0) {
        index_txn_abort(t);
        return e;
    }
    if ((e = index_txn_commit(t)) == 0)
        log_debug("\"%s\": restored snapshot %s of run '%s' (the daemon will not take it again)",
                  unit, m->id, run);
    return e;
}
