/*
 * preflight.c — `ckptsyncd --check [--connect]`, region by region
 * (preflight.h).
 *
 * Design: each region gets its own handle, made and freed here, so that a
 * check never goes through the repository handle (which would create the
 * repository, agree on it and unlock it: what the first start does).  The
 * reads are the ones repo_open makes first (the region's check, the repo
 * object, the key slots), so what --connect says works is what the start
 * will find; nothing is written but a dir region's probe file, which its
 * check removes again.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/keyslot.h"
#include "engine/repoobj.h"
#include "service/copymap.h"
#include "service/preflight.h"
#include "service/repokeys.h"
#include "store/layout.h"
#include "store/region.h"

static void pf_set(struct preflight_check *c, enum preflight_state state, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void pf_set(struct preflight_check *c, enum preflight_state state, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->text, sizeof(c->text), fmt, ap);
    va_end(ap);
    c->state = state;
}

/* The repo object: 1 and *o when present, 0 when absent, < 0 when it
 * cannot be read or parsed. */
static int pf_repo(struct region *rg, struct preflight_check *c, struct repoobj *o)
{
    struct buf data = BUF_INIT, perr = BUF_INIT;
    int e = region_get(rg, layout_repo(), REPOOBJ_MAX_BYTES, &data);
    if (e == -ENOENT) {
        pf_set(c, PREFLIGHT_OK, "no repository yet (the first start creates it)");
        e = 0;
    } else if (e < 0) {
        pf_set(c, PREFLIGHT_FAILED, "%s", region_last_error(rg));
    } else if ((e = repoobj_parse(data.data, data.len, o, &perr)) < 0) {
        pf_set(c, PREFLIGHT_FAILED, "object \"%s\": %s", layout_repo(), buf_str(&perr));
    } else {
        pf_set(c, PREFLIGHT_OK, "repository %s, chunker %llu/%llu/%llu, %s", o->id,
               (unsigned long long)o->chunk_min, (unsigned long long)o->chunk_avg,
               (unsigned long long)o->chunk_max, o->encrypted ? "encrypted" : "not encrypted");
        e = 1;
    }
    buf_free(&data);
    buf_free(&perr);
    return e;
}

struct pf_slots {
    char keys[REPOKEYS_MAX_SLOTS][REGION_KEY_MAX];
    size_t n;
};

static int pf_slots_cb(void *ud, const char *key, uint64_t size)
{
    struct pf_slots *l = ud;
    struct layout_key k;
    (void)size;
    if (layout_parse(key, &k) < 0 || k.kind != LAYOUT_KEYSLOT || l->n == REPOKEYS_MAX_SLOTS)
        return 0;
    snprintf(l->keys[l->n++], REGION_KEY_MAX, "%s", key);
    return 0;
}

/* Does slot key open with sec?  0 yes, 1 a slot of another kind or
 * secret, < 0 it cannot be read or parsed. */
static int pf_slot_opens(struct region *rg, const char *key, const struct repo_secret *sec)
{
    struct buf data = BUF_INIT;
    struct keyslot s;
    uint8_t master[CRYPT_KEY_LEN];
    int e = region_get(rg, key, KEYSLOT_MAX_BYTES, &data);
    if (e == 0)
        e = keyslot_parse(data.data, data.len, &s);
    if (e == 0 && s.kind != sec->kind)
        e = 1;
    else if (e == 0)
        e = keyslot_unwrap(&s, sec->bytes.data, sec->bytes.len, master) == 0 ? 0 : 1;
    memset(master, 0, sizeof(master));
    buf_free(&data);
    return e;
}

/* An encrypted repository's key slots in this region: one must open with
 * the configured secret. */
static void pf_keys(const struct config *conf, struct region *rg, struct preflight_check *c)
{
    struct pf_slots *l = calloc(1, sizeof(*l));
    struct repo_secret sec = {0};
    struct buf err = BUF_INIT;
    char prefix[REGION_KEY_MAX];
    size_t bad = 0;
    int e = l ? layout_prefix(LAYOUT_KEYSLOT, NULL, prefix) : -ENOMEM;
    if (e == 0 && (e = region_list(rg, prefix, pf_slots_cb, l)) < 0 && e != -ENOENT)
        pf_set(c, PREFLIGHT_FAILED, "listing key slots: %s", region_last_error(rg));
    else if (e < 0 || l->n == 0)
        pf_set(c, PREFLIGHT_FAILED, "encrypted, but the region holds no key slot");
    else if ((e = repokeys_secret(conf, &sec, &err)) < 0)
        pf_set(c, PREFLIGHT_FAILED, "%zu key slot(s), but no secret to try: %s", l->n,
               buf_str(&err));
    for (size_t k = 0; l && e == 0 && k < l->n; k++) {
        int o = pf_slot_opens(rg, l->keys[k], &sec);
        if (o == 0) {
            pf_set(c, PREFLIGHT_OK, "%zu key slot(s); \"%s\" opens with %s", l->n, l->keys[k],
                   sec.where);
            break;
        }
        bad += o < 0;
        if (k + 1 == l->n)
            pf_set(c, PREFLIGHT_FAILED, "%zu key slot(s) (%zu unreadable): none opens with %s",
                   l->n, bad, sec.where);
    }
    repokeys_secret_free(&sec);
    buf_free(&err);
    free(l);
}

/* --connect: the bucket or directory, the repo object, the key slots. */
static void pf_connect(const struct config *conf, struct region *rg, struct preflight_region *p)
{
    struct repoobj o;
    int e = region_check(rg);
    if (e < 0) {
        pf_set(&p->reach, PREFLIGHT_FAILED, "%s", region_last_error(rg));
        return;
    }
    pf_set(&p->reach, PREFLIGHT_OK, "reachable");
    if (pf_repo(rg, &p->repo, &o) == 1 && o.encrypted)
        pf_keys(conf, rg, &p->keys);
}

/* --connect, an auto pair of two reachable s3 regions: the probe. */
static enum copymap_why pf_copy_probe(const struct config *conf, size_t dst, size_t src)
{
    struct region *d = NULL, *s = NULL;
    struct buf err = BUF_INIT;
    int e = region_new(&conf->regions[dst], &d, &err);
    if (e == 0)
        e = region_new(&conf->regions[src], &s, &err);
    if (e == 0)
        e = region_probe_copy(d, s);
    region_free(d);
    region_free(s);
    buf_free(&err);
    return e < 0 ? COPYMAP_NO_ANSWER : e ? COPYMAP_PROBED_YES : COPYMAP_PROBED_NO;
}

/* The copy matrix: the configuration's word, or the probe's. */
static void pf_copies(const struct config *conf, unsigned flags, struct preflight *pf)
{
    for (size_t dst = 0; dst < conf->nregions; dst++)
        for (size_t src = 0; src < conf->nregions; src++) {
            if (src == dst)
                continue;
            enum copymap_why why = copymap_conf_why(conf, dst, src);
            bool reach = pf->region[dst].reach.state == PREFLIGHT_OK &&
                         pf->region[src].reach.state == PREFLIGHT_OK;
            if (why == COPYMAP_UNKNOWN && (flags & PREFLIGHT_CONNECT))
                why = reach ? pf_copy_probe(conf, dst, src) : COPYMAP_UNHEALTHY;
            pf->copy[dst][src] = (unsigned char)why;
        }
}

unsigned preflight_run(const struct config *conf, unsigned flags, struct preflight *ret)
{
    unsigned bad = 0;
    memset(ret, 0, sizeof(*ret));
    for (size_t i = 0; i < conf->nregions; i++) {
        struct preflight_region *p = &ret->region[ret->n++];
        struct region *rg = NULL;
        struct buf err = BUF_INIT;
        snprintf(p->name, sizeof(p->name), "%s", conf->regions[i].name);
        int e = region_new(&conf->regions[i], &rg, &err);
        if (e < 0)
            pf_set(&p->credentials, PREFLIGHT_FAILED, "%s",
                   buf_str(&err)[0] ? buf_str(&err) : err_str(e));
        else
            pf_set(&p->credentials, PREFLIGHT_OK, "%s",
                   conf->regions[i].kind == REGION_KIND_S3 ? "credentials read" : "configured");
        if (e == 0 && (flags & PREFLIGHT_CONNECT))
            pf_connect(conf, rg, p);
        bad += p->credentials.state == PREFLIGHT_FAILED || p->reach.state == PREFLIGHT_FAILED ||
               p->repo.state == PREFLIGHT_FAILED || p->keys.state == PREFLIGHT_FAILED;
        region_free(rg);
        buf_free(&err);
    }
    pf_copies(conf, flags, ret);
    return bad;
}

/* A pair's answer: "yes", "no", or "auto" (not probed). */
static const char *pf_copy_answer(enum copymap_why why)
{
    if (why == COPYMAP_CONF_YES || why == COPYMAP_PROBED_YES || why == COPYMAP_RECALL_YES)
        return "yes";
    return why == COPYMAP_UNKNOWN ? "auto" : "no";
}

static const char *pf_copy_why(enum copymap_why why)
{
    return why == COPYMAP_UNKNOWN ? "copy_from = auto: the daemon probes the pair at start; "
                                    "--connect probes it now"
                                  : copymap_why_str(why);
}

static const char *const pf_states[] = {"skipped", "ok", "failed"};

void preflight_print(const struct preflight *pf, FILE *out)
{
    for (size_t i = 0; i < pf->n; i++) {
        const struct preflight_region *p = &pf->region[i];
        const struct preflight_check *c[] = {&p->credentials, &p->reach, &p->repo, &p->keys};
        static const char *const what[] = {"configuration", "connection", "repository", "keys"};
        for (size_t k = 0; k < sizeof(c) / sizeof(c[0]); k++)
            if (c[k]->state != PREFLIGHT_SKIPPED)
                fprintf(out, "region %s: %s: %s%s\n", p->name, what[k],
                        c[k]->state == PREFLIGHT_FAILED ? "FAILED: " : "", c[k]->text);
    }
    for (size_t d = 0; d < pf->n; d++)
        for (size_t s = 0; s < pf->n; s++)
            if (s != d)
                fprintf(out, "copy %s <- %s: %s (%s)\n", pf->region[d].name, pf->region[s].name,
                        pf_copy_answer(pf->copy[d][s]), pf_copy_why(pf->copy[d][s]));
}

void preflight_copies_json(const struct preflight *pf, struct json *j)
{
    json_arr_begin(j);
    for (size_t d = 0; d < pf->n; d++)
        for (size_t s = 0; s < pf->n; s++) {
            if (s == d)
                continue;
            const char *a = pf_copy_answer(pf->copy[d][s]);
            json_obj_begin(j);
            json_key(j, "to");
            json_str(j, pf->region[d].name);
            json_key(j, "from");
            json_str(j, pf->region[s].name);
            json_key(j, "copies");
            a[0] == 'a' ? json_null(j) : json_bool(j, a[0] == 'y');
            json_key(j, "why");
            json_str(j, pf_copy_why(pf->copy[d][s]));
            json_obj_end(j);
        }
    json_arr_end(j);
}

static void pf_json_check(struct json *j, const char *key, const struct preflight_check *c)
{
    json_key(j, key);
    json_obj_begin(j);
    json_key(j, "state");
    json_str(j, pf_states[c->state]);
    json_key(j, "text");
    c->state == PREFLIGHT_SKIPPED ? json_null(j) : json_str(j, c->text);
    json_obj_end(j);
}

void preflight_json(const struct preflight *pf, struct json *j)
{
    json_arr_begin(j);
    for (size_t i = 0; i < pf->n; i++) {
        const struct preflight_region *p = &pf->region[i];
        json_obj_begin(j);
        json_key(j, "name");
        json_str(j, p->name);
        pf_json_check(j, "credentials", &p->credentials);
        pf_json_check(j, "reach", &p->reach);
        pf_json_check(j, "repository", &p->repo);
        pf_json_check(j, "keys", &p->keys);
        json_obj_end(j);
    }
    json_arr_end(j);
}
