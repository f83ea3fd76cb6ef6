/*
 * region.c — the generic half of a region: backend dispatch, key checks,
 * the last-error message.
 *
 * Design notes:
 * - Keys are checked here, once, before any backend sees them, so that no
 *   backend can be talked into a path outside its root: a key is relative,
 *   '/'-separated, with no empty, "." or ".." component, shorter than
 *   REGION_KEY_MAX.  A list prefix is a key whose last component may be
 *   partial or empty ("chunks/", "snapshots/r1/", "snap").
 * - Each operation clears errmsg first and backends fill it on failure; a
 *   failure a backend did not describe still gets a generic message, so
 *   region_last_error() after a failed call always says something.
 * - Create-only puts are gated here, not in the backends: a backend's
 *   put_new always sends the precondition, and region_put_new() refuses
 *   with -ENOTSUP unless the caller (or the kind's default) said the store
 *   enforces it.  The probe calls the backend directly, since asking the
 *   store is exactly what the setting does not know yet.
 * - Sealing (an encrypted repository) is done here too, around the
 *   backends, so that no caller can forget it and every kind gets it: a
 *   put seals into a scratch buffer, a get opens what came back, sizes
 *   (has, list) are shifted by the envelope's fixed overhead.  A backend
 *   never sees a plaintext object of an encrypted repository.  Each region
 *   seals on its own (random nonces): the three copies of a chunk differ
 *   byte for byte and open to the same object.
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/crypt.h"
#include "engine/hash.h"
#include "engine/manifest.h"
#include "store/layout.h"
#include "store/region.h"

#define REGION_PROBE_BODY "ckptsync precondition probe\n"

int region_new(const struct region_conf *conf, struct region **ret, struct buf *err)
{
    switch (conf->kind) {
    case REGION_KIND_DIR:
        return region_dir_new(conf, ret, err);
    case REGION_KIND_S3:
        return region_s3_new(conf, ret, err);
    }
    if (err)
        buf_printf(err, "region '%s': unknown kind %d", conf->name, (int)conf->kind);
    return CKS_E_CONFIG;
}

void region_free(struct region *r)
{
    if (!r)
        return;
    free(r->names);
    r->names = NULL;
    buf_free(&r->scratch);
    OPENSSL_cleanse(r->name_key, sizeof(r->name_key));
    r->ops->free(r);
}

/* Checks every component but the last; the last is checked when whole. */
static int region_key_check(const char *key, int prefix)
{
    size_t len = strlen(key);
    if (len >= REGION_KEY_MAX || (!prefix && len == 0) || key[0] == '/')
        return -EINVAL;
    for (const char *p = key; *p;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (!slash && prefix)
            break; /* a partial name: only compared, never opened */
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return -EINVAL;
        if (!slash)
            break;
        p = slash + 1;
        if (!*p && !prefix)
            return -EINVAL; /* trailing '/' leaves an empty last component */
    }
    return 0;
}

static int region_bad_key(struct region *r, const char *key)
{
    region_set_error(r, "region '%s': invalid key \"%.*s\"", r->conf.name, 200, key);
    return -EINVAL;
}

/* Backends describe their failures; this covers one that did not. */
static int region_done(struct region *r, const char *what, const char *key, int rc)
{
    if (rc < 0 && r->errmsg[0] == 0)
        region_set_error(r, "region '%s': %s \"%s\": %s", r->conf.name, what, key, err_str(rc));
    return rc;
}

/* ---- sealing ------------------------------------------------------------- */

/* ---- run names ------------------------------------------------------------ */

#define RUN_HASHED_LEN 34 /* "k-" + 32 hex */

struct region_run_name {
    char hashed[RUN_HASHED_LEN + 1];
    char name[MANIFEST_MAX_FIELD + 1];
    bool stored; /* runs/<hashed> is known to be in this region */
};

void region_set_seal(struct region *r, const struct crypt_keys *keys)
{
    static const char info[] = "ckptsync run names";
    r->seal = keys;
    r->nnames = 0;
    if (keys && crypt_hkdf(keys->id, sizeof(keys->id), NULL, 0, (const uint8_t *)info,
                           sizeof(info) - 1, r->name_key, sizeof(r->name_key)) < 0)
        abort(); /* OpenSSL out of memory before anything was written */
}

static struct region_run_name *name_find(struct region *r, const char *name, const char *hashed)
{
    for (size_t i = 0; i < r->nnames; i++)
        if (name ? !strcmp(r->names[i].name, name) : !strcmp(r->names[i].hashed, hashed))
            return &r->names[i];
    return NULL;
}

static struct region_run_name *name_add(struct region *r, const char *name, const char *hashed)
{
    if (r->nnames == r->names_cap) {
        size_t cap = r->names_cap ? 2 * r->names_cap : 16;
        struct region_run_name *v = realloc(r->names, cap * sizeof(*v));
        if (!v)
            return NULL;
        r->names = v;
        r->names_cap = cap;
    }
    struct region_run_name *e = &r->names[r->nnames++];
    snprintf(e->name, sizeof(e->name), "%s", name);
    memcpy(e->hashed, hashed, RUN_HASHED_LEN + 1);
    e->stored = false;
    return e;
}

/* The stored form of run name[0..n). */
static int name_hash(struct region *r, const char *name, size_t n, char out[RUN_HASHED_LEN + 1])
{
    struct crypt_mac m = CRYPT_MAC_INIT;
    uint8_t d[CRYPT_MAC_LEN];
    int e = crypt_mac_init(&m, r->name_key, sizeof(r->name_key));
    if (e == 0)
        e = crypt_mac_digest(&m, (const uint8_t *)name, n, d);
    crypt_mac_free(&m);
    if (e < 0)
        return e;
    out[0] = 'k';
    out[1] = '-';
    hex_encode(d, 16, out + 2);
    return 0;
}

/* The entry of run name[0..n), computed once per handle. */
static struct region_run_name *name_of(struct region *r, const char *name, size_t n)
{
    char plain[MANIFEST_MAX_FIELD + 1], hashed[RUN_HASHED_LEN + 1];
    if (n >= sizeof(plain))
        return NULL;
    memcpy(plain, name, n);
    plain[n] = 0;
    struct region_run_name *e = name_find(r, plain, NULL);
    if (e || name_hash(r, plain, n, hashed) < 0)
        return e;
    return name_add(r, plain, hashed);
}

/* key as the store names it: its run component keyed (see region.h).
 * *ret_run (may be NULL) gets the run's entry, NULL when key has none. */
static int region_map(struct region *r, const char *key, bool prefix, char out[REGION_KEY_MAX],
                      struct region_run_name **ret_run)
{
    size_t top = 0;
    int t = r->seal ? layout_run_top(key, &top) : -1;
    if (ret_run)
        *ret_run = NULL;
    const char *rest = t < 0 ? NULL : key + top;
    if (!rest || !*rest) {
        snprintf(out, REGION_KEY_MAX, "%s", key);
        return 0;
    }
    const char *slash = strchr(rest, '/');
    size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
    if (!slash && prefix && t != LAYOUT_HANDOFF_V1) {
        region_set_error(r,
                         "region '%s': listing \"%s\": a prefix ending inside a run name "
                         "cannot be listed in an encrypted repository",
                         r->conf.name, key);
        return -EINVAL;
    }
    struct region_run_name *e = name_of(r, rest, n);
    if (!e)
        return -ENOMEM;
    snprintf(out, REGION_KEY_MAX, "%.*s%s%s", (int)top, key, e->hashed, rest + n);
    if (ret_run)
        *ret_run = e;
    return 0;
}

/* Writes runs/<hashed> (the name, sealed) once per run and handle, before
 * the first object that names the run, so that every listing can give the
 * name back.  The same plaintext every time: a plain put is idempotent. */
static int region_put_via(struct region *r,
                          int (*put)(struct region *, const char *, const void *, size_t),
                          const char *what, const char *key, const void *data, size_t len);

static int region_publish_name(struct region *r, struct region_run_name *e)
{
    char key[LAYOUT_KEY_MAX];
    if (!e || e->stored)
        return 0;
    if (layout_key(LAYOUT_RUNNAME, NULL, e->hashed, key) < 0)
        return -EINVAL;
    int rc = region_put_via(r, r->ops->put, "writing", key, e->name, strlen(e->name));
    e->stored = rc == 0;
    return rc;
}

/* The stored name of a key about to be written, its run's name published
 * first (every put of a sealed key goes through here). */
static int region_map_put(struct region *r, const char *key, char mkey[REGION_KEY_MAX])
{
    struct region_run_name *run;
    int e = region_map(r, key, false, mkey, &run);
    return e < 0 ? e : region_publish_name(r, run);
}

/* The plain run name of a stored one, learnt from runs/<hashed>; NULL
 * when that cannot be read (logged). */
static const char *region_unmap_run(struct region *r, const char *hashed)
{
    struct region_run_name *e = name_find(r, NULL, hashed);
    if (e)
        return e->name;
    char key[LAYOUT_KEY_MAX];
    struct buf obj = BUF_INIT, plain = BUF_INIT;
    int rc = layout_key(LAYOUT_RUNNAME, NULL, hashed, key);
    if (rc == 0)
        rc = r->ops->get(r, key, MANIFEST_MAX_FIELD + CRYPT_OVERHEAD, &obj);
    if (rc == 0)
        rc = crypt_open(r->seal, key, obj.data, obj.len, &plain);
    char check[RUN_HASHED_LEN + 1];
    if (rc == 0 && (plain.len > MANIFEST_MAX_FIELD || memchr(plain.data, 0, plain.len) ||
                    manifest_run_check(buf_str(&plain)) < 0 ||
                    name_hash(r, (const char *)plain.data, plain.len, check) < 0 ||
                    strcmp(check, hashed) != 0))
        rc = CKS_E_FORMAT;
    if (rc == 0 && (e = name_add(r, buf_str(&plain), hashed)))
        e->stored = true;
    if (rc < 0)
        log_error("region '%s': the name of run \"%s\" (\"%s\"): %s; its objects are listed "
                  "under the stored name",
                  r->conf.name, hashed, key, err_str(rc));
    buf_free(&obj);
    buf_free(&plain);
    return e ? e->name : NULL;
}

/* A stored key as the caller names it (out), or key itself. */
static void region_unmap(struct region *r, const char *key, char out[REGION_KEY_MAX])
{
    size_t top = 0;
    int t = layout_run_top(key, &top);
    const char *rest = t < 0 ? NULL : key + top;
    const char *slash = rest ? strchr(rest, '/') : NULL;
    size_t n = rest ? (slash ? (size_t)(slash - rest) : strlen(rest)) : 0;
    char hashed[RUN_HASHED_LEN + 1];
    const char *name = NULL;
    if (n == RUN_HASHED_LEN && !strncmp(rest, "k-", 2)) {
        memcpy(hashed, rest, n);
        hashed[n] = 0;
        name = region_unmap_run(r, hashed);
    }
    if (name)
        snprintf(out, REGION_KEY_MAX, "%.*s%s%s", (int)top, key, name, rest + n);
    else
        snprintf(out, REGION_KEY_MAX, "%s", key);
}

bool region_key_sealed(const struct region *r, const char *key)
{
    return r->seal && layout_sealed(key);
}

/* Seals data for key into out; the error is recorded on r. */
static int region_seal_into(struct region *r, const char *key, const void *data, size_t len,
                            struct buf *out)
{
    int e = crypt_seal(r->seal, key, data, len, out);
    if (e < 0)
        region_set_error(r, "region '%s': sealing \"%s\": %s", r->conf.name, key, err_str(e));
    return e;
}

/* Opens the sealed object in out, in place; anything that does not open
 * (a plaintext object included) is CKS_E_AUTH or the envelope's code. */
static int region_open_in(struct region *r, const char *key, struct buf *out, char *msg,
                          size_t msg_size)
{
    /* Into the handle's scratch buffer, then the two trade places: no
     * allocation per object once both have grown (an object of a few MiB
     * is an mmap of its own, and page faults on every touch). */
    int e = crypt_is_sealed(out->data, out->len)
                ? crypt_open(r->seal, key, out->data, out->len, &r->scratch)
                : CKS_E_AUTH;
    if (e < 0) {
        buf_reset(out);
        snprintf(msg, msg_size, "region '%s': opening \"%s\": %s", r->conf.name, key,
                 e == CKS_E_AUTH ? "authentication failed: altered, or not this repository's key"
                                 : err_str(e));
        return e;
    }
    struct buf t = *out;
    *out = r->scratch;
    r->scratch = t;
    buf_reset(&r->scratch);
    return 0;
}

/* A sealed object's size as the store holds it. */
static uint64_t region_sealed_size(const struct region *r, const char *key, uint64_t size)
{
    return size && region_key_sealed(r, key) ? size + CRYPT_OVERHEAD : size;
}

static bool region_retry(struct region *r, int e, unsigned *attempt);

/* After a create-only put failed in a way that may have landed, the retry's
 * "already there" is ours when the stored bytes are the ones sent (sealed:
 * the same envelope, nonce and all); otherwise it stays -EEXIST. */
static int region_put_landed(struct region *r, const char *mkey, const void *data, size_t len)
{
    struct buf got = {0};
    int e = r->ops->get(r, mkey, len + 1, &got);
    bool ours = e == 0 && got.len == len && (len == 0 || !memcmp(got.data, data, len));
    buf_free(&got);
    if (!ours)
        return -EEXIST;
    r->errmsg[0] = 0;
    return 0;
}

/* One put with the transient retries of region_retry: a store that answers
 * one request of many with "500 InternalError, please try again" should not
 * cost a snapshot the region.  A plain put of the same bytes is idempotent;
 * a create-only put whose earlier try may have landed is checked by
 * reading the object back (region_put_landed). */
static int region_put_retried(struct region *r,
                              int (*put)(struct region *, const char *, const void *, size_t),
                              const char *what, const char *key, const char *mkey, const void *data,
                              size_t len, bool create)
{
    unsigned attempt = 0;
    int e;
    for (;;) {
        e = region_done(r, what, key, put(r, mkey, data, len));
        if (e == -EEXIST && attempt > 0 && create && region_put_landed(r, mkey, data, len) == 0)
            return 0;
        if (!region_retry(r, e, &attempt))
            return e;
        r->errmsg[0] = 0;
    }
}

/* A put through the backend's put or put_new, sealed when key is (with
 * the caller's key as context), under the key's stored name. */
static int region_put_via(struct region *r,
                          int (*put)(struct region *, const char *, const void *, size_t),
                          const char *what, const char *key, const void *data, size_t len)
{
    if (!region_key_sealed(r, key))
        return region_put_retried(r, put, what, key, key, data, len, put == r->ops->put_new);
    char mkey[REGION_KEY_MAX];
    int e = region_map_put(r, key, mkey);
    if (e < 0)
        return region_done(r, what, key, e);
    e = region_seal_into(r, key, data, len, &r->scratch);
    if (e == 0)
        e = region_put_retried(r, put, what, key, mkey, r->scratch.data, r->scratch.len,
                               put == r->ops->put_new);
    buf_reset(&r->scratch);
    return e;
}

int region_seal(struct region *r, const char *key, const void *data, size_t len, struct buf *out)
{
    if (!region_key_sealed(r, key))
        return 0;
    int e = crypt_seal(r->seal, key, data, len, out); /* reads r only: any thread */
    return e < 0 ? e : 1;
}

int region_put_sealed(struct region *r, const char *key, const void *env, size_t len)
{
    r->errmsg[0] = 0;
    r->requests++;
    if (region_key_check(key, 0) < 0)
        return region_bad_key(r, key);
    if (!region_key_sealed(r, key))
        return region_done(r, "writing", key, -EINVAL);
    char mkey[REGION_KEY_MAX];
    int e = region_map_put(r, key, mkey);
    return e < 0 ? region_done(r, "writing", key, e)
                 : region_put_retried(r, r->ops->put, "writing", key, mkey, env, len, false);
}

int region_put(struct region *r, const char *key, const void *data, size_t len)
{
    r->errmsg[0] = 0;
    r->requests++;
    if (region_key_check(key, 0) < 0)
        return region_bad_key(r, key);
    return region_put_via(r, r->ops->put, "writing", key, data, len);
}

/* A transient failure (CKS_E_REMOTE: 5xx, 429, timeouts) of a read that
 * handed the caller nothing yet, or of a put (region_put_retried), is tried
 * again twice, 0.25 s then 1 s later, before the caller hears of it: a
 * store that answers one request of many with "500 InternalError, please
 * try again" should not cost a short-lived command (snapshot, restore) the
 * region.  The daemon's workers retry everything with backoff. */
static bool region_retry(struct region *r, int e, unsigned *attempt)
{
    static const unsigned delay_ms[REGION_READ_RETRIES] = {250, 1000};
    if (e != CKS_E_REMOTE || *attempt >= REGION_READ_RETRIES)
        return false;
    log_debug("%s; trying again in %u ms", region_last_error(r), delay_ms[*attempt]);
    struct timespec ts = {0, (long)delay_ms[*attempt] * 1000000L};
    while (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    nanosleep(&ts, NULL);
    (*attempt)++;
    return true;
}

/* The start of every keyed request: counts it, checks the key and gives its
 * stored name in mkey; an error is recorded on r (what: "reading" ...). */
static int region_begin(struct region *r, const char *what, const char *key,
                        char mkey[REGION_KEY_MAX])
{
    r->errmsg[0] = 0;
    r->requests++;
    if (region_key_check(key, 0) < 0)
        return region_bad_key(r, key);
    int e = region_map(r, key, false, mkey, NULL);
    return e < 0 ? region_done(r, what, key, e) : 0;
}

int region_get(struct region *r, const char *key, size_t max, struct buf *out)
{
    char mkey[REGION_KEY_MAX];
    int e = region_begin(r, "reading", key, mkey);
    if (e < 0)
        return e;
    bool sealed = region_key_sealed(r, key);
    size_t cap = sealed && max <= SIZE_MAX - CRYPT_OVERHEAD ? max + CRYPT_OVERHEAD : max;
    unsigned attempt = 0;
    do
        e = region_done(r, "reading", key, r->ops->get(r, mkey, cap, out));
    while (region_retry(r, e, &attempt));
    if (e == 0 && sealed)
        e = region_open_in(r, key, out, r->errmsg, sizeof(r->errmsg));
    return e;
}

int region_get_range(struct region *r, const char *key, uint64_t off, size_t len, struct buf *out)
{
    r->errmsg[0] = 0;
    r->requests++;
    if (region_key_check(key, 0) < 0)
        return region_bad_key(r, key);
    if (!region_key_sealed(r, key))
        return region_done(r, "reading", key, r->ops->get_range(r, key, off, len, out));
    /* A range of ciphertext cannot be authenticated: the whole object, then
     * the range of the plain one. */
    r->requests--;
    int e = region_get(r, key, (size_t)CRYPT_MAX_PLAIN, out);
    if (e < 0)
        return e;
    size_t from = off < out->len ? (size_t)off : out->len;
    size_t n = out->len - from < len ? out->len - from : len;
    memmove(out->data, out->data + from, n);
    out->len = n;
    out->data[n] = 0;
    return 0;
}

int region_peek(struct region *r, const char *key, size_t len, struct buf *out)
{
    if (!region_key_sealed(r, key))
        return region_get_range(r, key, 0, len, out);
    char mkey[REGION_KEY_MAX];
    int e = region_begin(r, "reading", key, mkey);
    if (e < 0)
        return e;
    e = r->ops->get_range(r, mkey, 0, CRYPT_HEADER_LEN + len, &r->scratch);
    if ((e = region_done(r, "reading", key, e)) == 0 &&
        (e = crypt_peek(r->seal, r->scratch.data, r->scratch.len, len, out)) < 0)
        region_set_error(r, "region '%s': opening \"%s\": %s", r->conf.name, key, err_str(e));
    buf_reset(&r->scratch);
    return e;
}

int region_has_size(struct region *r, const char *key, uint64_t size)
{
    char mkey[REGION_KEY_MAX];
    int e = region_begin(r, "looking up", key, mkey);
    unsigned attempt = 0;
    if (e < 0)
        return e;
    do
        e = region_done(r, "looking up", key,
                        r->ops->has(r, mkey, region_sealed_size(r, key, size)));
    while (region_retry(r, e, &attempt));
    return e;
}

int region_has(struct region *r, const char *key)
{
    return region_has_size(r, key, 0);
}

struct listed {
    char *key;
    uint64_t size;
};

struct listing {
    struct listed *v;
    size_t n, cap;
};

static int region_list_keep(void *ud, const char *key, uint64_t size)
{
    struct listing *l = ud;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        struct listed *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    if (!(l->v[l->n].key = strdup(key)))
        return -ENOMEM;
    l->v[l->n++].size = size;
    return 0;
}

struct unseal_list {
    const struct region *r;
    int (*cb)(void *ud, const char *key, uint64_t size);
    void *ud;
};

/* The plain objects' sizes, for a listing streamed as the backend gives it. */
static int region_list_unseal(void *ud, const char *key, uint64_t size)
{
    struct unseal_list *u = ud;
    if (region_key_sealed(u->r, key))
        size = size > CRYPT_OVERHEAD ? size - CRYPT_OVERHEAD : 0;
    return u->cb(u->ud, key, size);
}

/* Sealed, under a prefix that names runs: the listing is gathered first (a run's name may have to
 * be read, which a backend cannot do inside its own listing), then handed out under the callers'
 * keys with the plain objects' sizes (a sealed object shorter than the envelope is reported as 0:
 * it opens to nothing). */
struct counted_list {
    int (*cb)(void *ud, const char *key, uint64_t size);
    void *ud;
    size_t n;
};

static int region_list_count(void *ud, const char *key, uint64_t size)
{
    struct counted_list *c = ud;
    c->n++;
    return c->cb(c->ud, key, size);
}

static int region_list_once(struct region *r, const char *prefix,
                            int (*cb)(void *ud, const char *key, uint64_t size), void *ud);

int region_list(struct region *r, const char *prefix,
                int (*cb)(void *ud, const char *key, uint64_t size), void *ud)
{
    struct counted_list c = {cb, ud, 0};
    unsigned attempt = 0;
    int e;
    do
        e = region_list_once(r, prefix, region_list_count, &c);
    while (c.n == 0 && region_retry(r, e, &attempt));
    return e;
}

static int region_list_once(struct region *r, const char *prefix,
                            int (*cb)(void *ud, const char *key, uint64_t size), void *ud)
{
    r->errmsg[0] = 0;
    if (region_key_check(prefix, 1) < 0)
        return region_bad_key(r, prefix);
    if (!r->seal)
        return region_done(r, "listing", prefix, r->ops->list(r, prefix, cb, ud));
    if (!layout_prefix_has_runs(prefix)) { /* chunks/, gc/, ...: streamed */
        struct unseal_list u = {r, cb, ud};
        return region_done(r, "listing", prefix, r->ops->list(r, prefix, region_list_unseal, &u));
    }
    char mprefix[REGION_KEY_MAX], key[REGION_KEY_MAX];
    struct listing l = {NULL, 0, 0};
    int e = region_map(r, prefix, true, mprefix, NULL);
    if (e == 0)
        e = region_done(r, "listing", prefix, r->ops->list(r, mprefix, region_list_keep, &l));
    for (size_t i = 0; i < l.n; i++) {
        if (e == 0) {
            region_unmap(r, l.v[i].key, key);
            uint64_t size = l.v[i].size;
            if (region_key_sealed(r, key))
                size = size > CRYPT_OVERHEAD ? size - CRYPT_OVERHEAD : 0;
            e = cb(ud, key, size);
        }
        free(l.v[i].key);
    }
    free(l.v);
    return e;
}

int region_del(struct region *r, const char *key)
{
    char mkey[REGION_KEY_MAX];
    int e = region_begin(r, "deleting", key, mkey);
    unsigned attempt = 0;
    if (e < 0)
        return e;
    for (;;) { /* a delete is idempotent: retried like a read */
        e = region_done(r, "deleting", key, r->ops->del(r, mkey));
        if (!region_retry(r, e, &attempt))
            return e;
        r->errmsg[0] = 0;
    }
}

int region_check(struct region *r)
{
    r->errmsg[0] = 0;
    return region_done(r, "checking", r->conf.name, r->ops->check(r));
}

int region_clock(struct region *r, struct region_clock *ret)
{
    r->errmsg[0] = 0;
    r->requests++;
    if (!r->ops->clock) {
        region_set_error(r, "region '%s': a %s region cannot tell its time", r->conf.name,
                         r->ops->kind);
        return -ENOTSUP;
    }
    return region_done(r, "reading the clock of region", r->conf.name, r->ops->clock(r, ret));
}

int region_tidy(struct region *r, uint64_t min_age, struct region_tidy *ret)
{
    r->errmsg[0] = 0;
    if (!r->ops->tidy)
        return 0;
    r->requests++;
    return region_done(r, "tidying region", r->conf.name, r->ops->tidy(r, min_age, ret));
}

int region_put_new(struct region *r, const char *key, const void *data, size_t len)
{
    r->errmsg[0] = 0;
    r->requests++;
    if (region_key_check(key, 0) < 0)
        return region_bad_key(r, key);
    if (r->preconditions != 1 || !r->ops->put_new) {
        region_set_error(r, "region '%s': creating \"%s\": create-only puts are %s", r->conf.name,
                         key, r->preconditions < 0 ? "not probed yet" : "not enforced here");
        return -ENOTSUP;
    }
    return region_put_via(r, r->ops->put_new, "creating", key, data, len);
}

/* "probe/<16 hex>": unique enough that two instances never probe with
 * the same name (that would only make one of them see "enforced"). */
static void region_probe_key(char out[LAYOUT_KEY_MAX])
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 16);
    }
    char name[17];
    snprintf(name, sizeof(name), "%016llx", (unsigned long long)v);
    layout_key(LAYOUT_PROBE, NULL, name, out); /* cannot fail: 16 hex */
}

/* The answer to the second create of the probe object. */
static int region_probe_answer(struct region *r, const char *key, int rc)
{
    if (rc == -EEXIST)
        return 1;
    if (rc == 0 || rc == -ENOTSUP)
        return 0;
    return region_done(r, "probing preconditions with", key, rc);
}

/* Deletes the probe object; a failure leaves a stray small object, which
 * does not change the answer, so it is only logged, and errmsg kept. */
static void region_probe_cleanup(struct region *r, const char *key)
{
    char keep[sizeof(r->errmsg)];
    memcpy(keep, r->errmsg, sizeof(keep));
    r->errmsg[0] = 0;
    unsigned attempt = 0;
    int rc;
    while ((rc = r->ops->del(r, key)) < 0 && region_retry(r, rc, &attempt))
        r->errmsg[0] = 0;
    if (rc < 0 && rc != -ENOENT)
        log_warn("region '%s': deleting the probe object \"%s\": %s", r->conf.name, key,
                 r->errmsg[0] ? r->errmsg : err_str(rc));
    memcpy(r->errmsg, keep, sizeof(keep));
}

int region_probe_preconditions(struct region *r)
{
    char key[LAYOUT_KEY_MAX];
    const size_t len = sizeof(REGION_PROBE_BODY) - 1;
    r->errmsg[0] = 0;
    if (r->conf.no_preconditions || !r->ops->put_new)
        return 0;
    region_probe_key(key);
    /* Both puts ride out a transient failure (a 500 must not leave the
     * region "not enforced" for the whole command); only the first may
     * find its own earlier try landed. */
    static const char what[] = "probing preconditions with";
    int rc = region_put_retried(r, r->ops->put_new, what, key, key, REGION_PROBE_BODY, len, true);
    if (rc == -ENOTSUP) /* the store refused the header itself */
        return 0;
    if (rc == -EEXIST) { /* "exists" for a fresh name: the answer means nothing */
        log_warn("region '%s': the store refused to create the new probe object \"%s\" as "
                 "existing; create-only puts are not used",
                 r->conf.name, key);
        return 0;
    }
    if (rc < 0)
        return region_done(r, "probing preconditions with", key, rc);
    r->errmsg[0] = 0;
    rc = region_put_retried(r, r->ops->put_new, what, key, key, REGION_PROBE_BODY, len, false);
    int ans = region_probe_answer(r, key, rc);
    region_probe_cleanup(r, key);
    return ans;
}

/* ---- server-side copy ------------------------------------------------------ */

#define REGION_COPY_PROBE_BODY "ckptsync copy probe\n"

int region_copy(struct region *dst, const struct region *src, const char *key, uint64_t size)
{
    char mkey[REGION_KEY_MAX];
    dst->errmsg[0] = 0;
    if (!dst->ops->copy || strcmp(dst->ops->kind, src->ops->kind)) {
        region_set_error(dst, "region '%s': cannot copy \"%s\" from region '%s' (%s to %s)",
                         dst->conf.name, key, src->conf.name, src->ops->kind, dst->ops->kind);
        return -ENOTSUP;
    }
    int e = region_begin(dst, "copying", key, mkey);
    if (e < 0)
        return e;
    return region_done(dst, "copying", key,
                       dst->ops->copy(dst, src, mkey, region_sealed_size(dst, key, size)));
}

/* dst holds the probe object, with the probe's bytes? */
static int region_copy_check(struct region *dst, const char *key)
{
    struct buf got = BUF_INIT;
    const size_t len = sizeof(REGION_COPY_PROBE_BODY) - 1;
    int e = dst->ops->has(dst, key, len);
    if (e == 1)
        e = dst->ops->get(dst, key, 4096, &got);
    if (e == 0)
        e = got.len == len && !memcmp(got.data, REGION_COPY_PROBE_BODY, len) ? 1 : 0;
    else if (e != 1)
        e = e == -ENOENT ? 0 : e;
    else
        e = 0; /* has said absent */
    if (e == 0)
        log_debug("region '%s': the copy of probe \"%s\" is missing or differs", dst->conf.name,
                  key);
    buf_free(&got);
    return e;
}

int region_probe_copy(struct region *dst, struct region *src)
{
    char key[LAYOUT_KEY_MAX];
    const size_t len = sizeof(REGION_COPY_PROBE_BODY) - 1;
    dst->errmsg[0] = src->errmsg[0] = 0;
    if (!dst->ops->copy || strcmp(dst->ops->kind, src->ops->kind))
        return 0;
    region_probe_key(key);
    int e = src->ops->put(src, key, REGION_COPY_PROBE_BODY, len);
    if (e < 0)
        return region_done(src, "writing the copy probe", key, e);
    e = dst->ops->copy(dst, src, key, sizeof(REGION_COPY_PROBE_BODY) - 1);
    if (e == 0) {
        e = region_copy_check(dst, key);
    } else if (e != -ENOMEM && e != CKS_E_REMOTE) { /* an answer: no */
        log_debug("region '%s' cannot copy from region '%s': %s", dst->conf.name, src->conf.name,
                  dst->errmsg[0] ? dst->errmsg : err_str(e));
        e = 0;
    }
    region_probe_cleanup(src, key);
    region_probe_cleanup(dst, key);
    return e < 0 ? region_done(dst, "checking the copy probe", key, e) : e;
}

void region_set_preconditions(struct region *r, int on)
{
    r->preconditions = on && !r->conf.no_preconditions && r->ops->put_new ? 1 : 0;
}

int region_preconditions(const struct region *r)
{
    return r->preconditions;
}

const char *region_last_error(const struct region *r)
{
    return r->errmsg;
}

void region_set_error(struct region *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->errmsg, sizeof(r->errmsg), fmt, ap);
    va_end(ap);
}

/* REGION_OP_COPY: the copy, then the destination's own word on it. */
static int region_copy_confirmed(struct region *dst, const struct region *src, const char *key,
                                 uint64_t size)
{
    int e = region_copy(dst, src, key, size);
    return e < 0 ? e : region_has_size(dst, key, size);
}

static void *region_op_run(void *arg)
{
    struct region_op *op = arg;
    if (op->kind == REGION_OP_PUT)
        op->ret = op->sealed ? region_put_sealed(op->rg, op->key, op->data, op->len)
                             : region_put(op->rg, op->key, op->data, op->len);
    else if (op->kind == REGION_OP_COPY)
        op->ret = region_copy_confirmed(op->rg, op->src, op->key, op->len);
    else
        op->ret = region_has_size(op->rg, op->key, op->len);
    return NULL;
}

void region_batch(struct region_op *ops, size_t n)
{
    pthread_t th[CONFIG_MAX_REGIONS];
    bool started[CONFIG_MAX_REGIONS] = {false};

    /* Threads are cheap next to an fsync or a network round trip; when one
     * cannot be created the op simply runs on the calling thread. */
    for (size_t i = 1; i < n && i < CONFIG_MAX_REGIONS; i++)
        started[i] = pthread_create(&th[i], NULL, region_op_run, &ops[i]) == 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || i >= CONFIG_MAX_REGIONS || !started[i])
            region_op_run(&ops[i]);
    for (size_t i = 1; i < n && i < CONFIG_MAX_REGIONS; i++)
        if (started[i])
            pthread_join(th[i], NULL);
}

/* ---- asynchronous requests ----------------------------------------------- */

/* Gives the caller back its view of a request the backend saw sealed. */
static void region_req_unseal(struct region *r, struct region_req *req)
{
    if (!req->plain_key[0])
        return;
    memcpy(req->key, req->plain_key, sizeof(req->key));
    req->plain_key[0] = 0;
    if (!region_key_sealed(r, req->key))
        return;
    if (req->kind == RREQ_PUT && req->plain) {
        req->data = req->plain;
        req->len = req->plain_len;
        req->plain = NULL;
        buf_free(&req->sealbuf);
    } else if (req->kind == RREQ_GET && req->max >= CRYPT_OVERHEAD) {
        req->max -= CRYPT_OVERHEAD;
    } else if ((req->kind == RREQ_HAS || req->kind == RREQ_COPY) && req->size >= CRYPT_OVERHEAD) {
        req->size -= CRYPT_OVERHEAD;
    }
}

static void region_req_run(struct region *r, struct region_req *req)
{
    switch (req->kind) {
    case RREQ_HAS:
        req->ret = region_has_size(r, req->key, req->size);
        break;
    case RREQ_PUT:
        req->ret = req->sealed ? region_put_sealed(r, req->key, req->data, req->len)
                               : region_put(r, req->key, req->data, req->len);
        break;
    case RREQ_GET:
        req->ret = region_get(r, req->key, req->max, &req->out);
        break;
    case RREQ_COPY:
        req->ret = req->src ? region_copy(r, req->src, req->key, req->size) : -EINVAL;
        break;
    }
    snprintf(req->errmsg, sizeof(req->errmsg), "%.*s", (int)sizeof(req->errmsg) - 1,
             req->ret < 0 ? r->errmsg : "");
}

int region_submit(struct region *r, struct region_req *req)
{
    req->ret = 0;
    req->errmsg[0] = 0;
    req->next = NULL;
    if (region_key_check(req->key, 0) < 0)
        return region_bad_key(r, req->key);
    r->inflight++;
    bool copy_bad = req->kind == RREQ_COPY &&
                    (!r->ops->copy || !req->src || strcmp(r->ops->kind, req->src->ops->kind));
    if (r->ops->submit && !copy_bad) {
        /* The backend sees the sealed request; region_poll() restores the
         * caller's view. */
        req->plain = NULL;
        req->plain_key[0] = 0;
        bool sealed = region_key_sealed(r, req->key);
        char mkey[REGION_KEY_MAX];
        int me = !sealed                 ? 0
                 : req->kind == RREQ_PUT ? region_map_put(r, req->key, mkey)
                                         : region_map(r, req->key, false, mkey, NULL);
        if (me < 0) {
            r->inflight--;
            return me;
        }
        if (sealed && req->kind == RREQ_PUT && !req->sealed) {
            int e = region_seal_into(r, req->key, req->data, req->len, &req->sealbuf);
            if (e < 0) {
                r->inflight--;
                return e;
            }
            req->plain = req->data;
            req->plain_len = req->len;
            req->data = req->sealbuf.data;
            req->len = req->sealbuf.len;
        } else if (sealed && req->kind == RREQ_GET && req->max <= SIZE_MAX - CRYPT_OVERHEAD) {
            req->max += CRYPT_OVERHEAD;
        } else if (sealed && (req->kind == RREQ_HAS || req->kind == RREQ_COPY)) {
            req->size = region_sealed_size(r, req->key, req->size);
        }
        if (sealed) {
            memcpy(req->plain_key, req->key, sizeof(req->key));
            memcpy(req->key, mkey, sizeof(req->key));
        }
        int e = r->ops->submit(r, req);
        if (e < 0) {
            r->inflight--;
            region_req_unseal(r, req);
        }
        return e;
    }
    region_req_run(r, req);
    req->next = r->done;
    r->done = req;
    return 0;
}

struct region_req *region_poll(struct region *r, int timeout_ms)
{
    struct region_req *list = r->done;
    r->done = NULL;
    if (!list && r->ops->poll) {
        list = r->ops->poll(r, timeout_ms);
        for (struct region_req *q = list; q; q = q->next) {
            region_req_unseal(r, q);
            bool get = q->kind == RREQ_GET && region_key_sealed(r, q->key);
            if (get && q->ret == 0)
                q->ret = region_open_in(r, q->key, &q->out, q->errmsg, sizeof(q->errmsg));
        }
    }
    for (struct region_req *q = list; q; q = q->next)
        r->inflight--;
    return list;
}

unsigned region_parallelism(const struct region *r)
{
    return r->ops->submit && r->conf.connections ? r->conf.connections : 1;
}

int region_err_permanent(int err)
{
    return err == CKS_E_REJECTED || err == CKS_E_DENIED;
}

bool region_list_cheap(const struct region *r)
{
    return strcmp(r->ops->kind, "dir") != 0;
}
