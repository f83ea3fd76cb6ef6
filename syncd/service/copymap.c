/*
 * copymap.c — the copy matrix: configuration first, then a probe per
 * pair, remembered in the index (see copymap.h).
 */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "engine/hash.h"
#include "service/copymap.h"
#include "service/repo.h"

/* The index key of the pair's answer: "copyfrom/" + SHA-256 of both
 * stores' identity, source first. */
static void copymap_key(const struct region_conf *src, const struct region_conf *dst,
                        char key[16 + HASH_HEX_LEN])
{
    const struct region_conf *c[2] = {src, dst};
    struct buf fp = BUF_INIT;
    uint8_t d[HASH_LEN];
    for (int k = 0; k < 2; k++)
        buf_printf(&fp, "%d|%s|%s|%s|%s|%s|%s|%d>", (int)c[k]->kind, c[k]->endpoint, c[k]->bucket,
                   c[k]->prefix, c[k]->path, c[k]->signing_region, c[k]->credentials,
                   (int)c[k]->virtual_hosted);
    hash_sha256(fp.data ? fp.data : (const uint8_t *)"", fp.len, d);
    buf_free(&fp);
    memcpy(key, "copyfrom/", 9);
    hex_encode(d, HASH_LEN, key + 9);
}

/* The remembered answer: 1, 0, or -1 unknown. */
static int copymap_recall(struct repo *r, const char *key)
{
    struct index_txn *t;
    char val[8];
    int e = index_txn_begin(repo_index(r), false, &t);
    if (e < 0)
        return -1;
    e = index_meta_get(t, key, val, sizeof(val));
    index_txn_abort(t);
    return e == 0 ? val[0] == '1' : -1;
}

static void copymap_remember(struct repo *r, const char *key, int yes, const char *what)
{
    struct index_txn *t;
    if (index_txn_begin(repo_index(r), true, &t) == 0 &&
        (index_meta_put(t, key, yes ? "1" : "0") < 0 || index_txn_commit(t) < 0))
        log_warn("could not remember the copy probe of %s", what);
}

/* Probes the pair on handles of its own: 1, 0, or -1 (no answer). */
static int copymap_probe(struct repo *r, size_t dst, size_t src, const char *what)
{
    struct region *d = NULL, *s = NULL;
    struct buf err = BUF_INIT;
    int e = repo_region_clone(r, dst, &d, &err);
    if (e == 0)
        e = repo_region_clone(r, src, &s, &err);
    if (e == 0) {
        e = region_probe_copy(d, s);
        if (e < 0)
            buf_printf(&err, "%s",
                       region_last_error(d)[0] ? region_last_error(d) : region_last_error(s));
    }
    if (e < 0)
        log_warn("cannot tell whether %s works (%s); not copying for now", what, buf_str(&err));
    region_free(d);
    region_free(s);
    buf_free(&err);
    return e < 0 ? -1 : e;
}

enum copymap_why copymap_conf_why(const struct config *c, size_t dst, size_t src)
{
    int conf = config_copy_from(c, dst, src);
    if (conf >= 0)
        return conf ? COPYMAP_CONF_YES : COPYMAP_CONF_NO;
    if (c->regions[dst].kind != REGION_KIND_S3 || c->regions[src].kind != REGION_KIND_S3)
        return COPYMAP_KIND; /* only s3 copies server-side */
    return COPYMAP_UNKNOWN;
}

const char *copymap_why_str(enum copymap_why why)
{
    static const char *const s[] = {
        [COPYMAP_UNKNOWN] = "not probed yet",
        [COPYMAP_CONF_YES] = "configured (copy_from)",
        [COPYMAP_CONF_NO] = "configured (copy_from)",
        [COPYMAP_KIND] = "only two s3 regions copy server-side",
        [COPYMAP_UNHEALTHY] = "a region of the pair is not working; not probed",
        [COPYMAP_PROBED_YES] = "probed",
        [COPYMAP_PROBED_NO] = "probed: the copy was refused or came out wrong",
        [COPYMAP_NO_ANSWER] = "the probe got no answer; not copying for now",
        [COPYMAP_RECALL_YES] = "probed earlier (remembered in the index)",
        [COPYMAP_RECALL_NO] = "probed earlier (remembered in the index): the copy did not work",
    };
    return why < sizeof(s) / sizeof(s[0]) && s[why] ? s[why] : "?";
}

/* Can region dst copy from region src, and why. */
static enum copymap_why copymap_pair(struct repo *r, size_t dst, size_t src)
{
    const struct config *c = repo_conf(r);
    const struct region_conf *dc = &c->regions[dst], *sc = &c->regions[src];
    char key[16 + HASH_HEX_LEN], what[2 * CONFIG_NAME_MAX + 64];
    enum copymap_why why = copymap_conf_why(c, dst, src);
    if (why != COPYMAP_UNKNOWN)
        return why;
    if (!repo_region_ok(r, dst) || !repo_region_ok(r, src))
        return COPYMAP_UNHEALTHY;
    snprintf(what, sizeof(what), "copying from region '%s' to region '%s'", sc->name, dc->name);
    copymap_key(sc, dc, key);
    int yes = copymap_recall(r, key);
    if (yes >= 0)
        return yes ? COPYMAP_RECALL_YES : COPYMAP_RECALL_NO;
    yes = copymap_probe(r, dst, src, what);
    if (yes < 0)
        return COPYMAP_NO_ANSWER;
    log_info("%s %s (probed)", what, yes ? "works" : "does not work");
    copymap_remember(r, key, yes, what);
    return yes ? COPYMAP_PROBED_YES : COPYMAP_PROBED_NO;
}

static bool copymap_yes(enum copymap_why why)
{
    return why == COPYMAP_CONF_YES || why == COPYMAP_PROBED_YES || why == COPYMAP_RECALL_YES;
}

unsigned copymap_build(struct repo *r, const atomic_bool *stop, struct copymap *m)
{
    unsigned n = 0;
    memset(m, 0, sizeof(*m));
    for (size_t dst = 0; dst < repo_nregions(r); dst++)
        for (size_t src = 0; src < repo_nregions(r); src++) {
            if (src == dst || (stop && atomic_load(stop)))
                continue;
            enum copymap_why why = copymap_pair(r, dst, src);
            m->why[dst][src] = (uint8_t)why;
            if (copymap_yes(why)) {
                m->from[dst] |= 1u << src;
                n++;
            }
        }
    return n;
}

bool copymap_can(const struct copymap *m, size_t dst, size_t src)
{
    return dst < CONFIG_MAX_REGIONS && src < 32 && (m->from[dst] >> src) & 1;
}

enum copymap_way copymap_choose(const struct copymap *m, uint32_t stopped, size_t i,
                                uint32_t present, uint32_t working, size_t *ret_src)
{
    if (i >= CONFIG_MAX_REGIONS)
        return COPYMAP_PUT;
    uint32_t from = m->from[i] & ~stopped, have = from & present;
    if (have) {
        uint32_t pref = have & working ? have & working : have;
        *ret_src = (size_t)__builtin_ctz(pref);
        return COPYMAP_COPY;
    }
    /* The first working region among those i copies from, and i itself:
     * i waits on a lower index only, so the waits end at one that uploads. */
    uint32_t group = (from & working) | (1u << i);
    return (size_t)__builtin_ctz(group) == i ? COPYMAP_PUT : COPYMAP_WAIT;
}

void copymap_describe(const struct repo *r, const struct copymap *m, struct buf *out)
{
    const struct config *c = repo_conf(r);
    bool any = false;
    for (size_t dst = 0; dst < repo_nregions(r); dst++) {
        if (!m->from[dst])
            continue;
        buf_printf(out, "%s%s<-", any ? "; " : "", c->regions[dst].name);
        any = true;
        bool first = true;
        for (size_t src = 0; src < repo_nregions(r); src++)
            if (copymap_can(m, dst, src)) {
                buf_printf(out, "%s%s", first ? "" : ",", c->regions[src].name);
                first = false;
            }
    }
    if (!any)
        buf_puts(out, "none");
}
