/*
 * gcrec.c — bodies and names of prune's records (gcrec.h).
 *
 * Strict both ways, like the lineage records: one spelling of every
 * number, fixed line order, a restricted charset, a trailing SHA-256.
 * Item counts are checked against the "items" line and GC_MAX_ITEMS before
 * anything is allocated for them, so a hostile body costs at most its own
 * size in memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "engine/gcrec.h"
#include "engine/lineage.h"

static const char *const kind_names[] = {"mark", "intents", "keep",  "sweep",
                                         "done", "lease",   "intent"};

void gcrec_init(struct gcrec *g, enum gc_kind kind)
{
    memset(g, 0, sizeof(*g));
    g->kind = kind;
    g->expires = -1;
    g->seq = -1;
}

void gcrec_free(struct gcrec *g)
{
    free(g->chunks);
    free(g->snaps);
    free(g->intents);
    g->chunks = NULL;
    g->snaps = NULL;
    g->intents = NULL;
    g->nchunks = g->nsnaps = g->nintents = 0;
}

/* Capacity is implicit: 16, then doubling, so the array is full exactly
 * when n is 16 * 2^k. */
static int grow(void **v, size_t n, size_t size)
{
    if (n != 0 && (n < 16 || (n & (n - 1))))
        return 0;
    size_t cap = n ? n * 2 : 16;
    void *p = realloc(*v, cap * size);
    if (!p)
        return -ENOMEM;
    *v = p;
    return 0;
}

int gcrec_add_chunk(struct gcrec *g, const uint8_t id[HASH_LEN], uint64_t size)
{
    if (grow((void **)&g->chunks, g->nchunks, sizeof(*g->chunks)) < 0)
        return -ENOMEM;
    struct gc_chunk *c = &g->chunks[g->nchunks++];
    memset(c, 0, sizeof(*c));
    memcpy(c->id, id, HASH_LEN);
    c->size = size;
    return 0;
}

int gcrec_add_recipe(struct gcrec *g, const uint8_t id[HASH_LEN],
                     const uint8_t sig[MANIFEST_RECIPE_SIG], uint64_t size)
{
    if (gcrec_add_chunk(g, id, size) < 0)
        return -ENOMEM;
    g->chunks[g->nchunks - 1].recipe = true;
    memcpy(g->chunks[g->nchunks - 1].sig, sig, MANIFEST_RECIPE_SIG);
    return 0;
}

int gcrec_add_snap(struct gcrec *g, const char *run, const char *id)
{
    if (manifest_run_check(run) < 0 || manifest_id_check(id) < 0 || strlen(id) > MANIFEST_ID_MAX)
        return -EINVAL;
    if (grow((void **)&g->snaps, g->nsnaps, sizeof(*g->snaps)) < 0)
        return -ENOMEM;
    snprintf(g->snaps[g->nsnaps].run, sizeof(g->snaps[0].run), "%s", run);
    snprintf(g->snaps[g->nsnaps++].id, sizeof(g->snaps[0].id), "%s", id);
    return 0;
}

int gcrec_add_intent(struct gcrec *g, const char *name)
{
    int64_t t;
    uint64_t ttl;
    if (gc_intent_parse(name, &t, &ttl) < 0)
        return -EINVAL;
    if (grow((void **)&g->intents, g->nintents, sizeof(*g->intents)) < 0)
        return -ENOMEM;
    snprintf(g->intents[g->nintents++], GC_INTENT_MAX + 1, "%s", name);
    return 0;
}

int gcrec_chunk_cmp(const void *a, const void *b)
{
    const struct gc_chunk *x = a, *y = b;
    return manifest_object_cmp(x->id, x->recipe, x->sig, y->id, y->recipe, y->sig);
}

void gcrec_sort_chunks(struct gcrec *g)
{
    size_t out = 0;
    if (g->nchunks > 1)
        qsort(g->chunks, g->nchunks, sizeof(*g->chunks), gcrec_chunk_cmp);
    for (size_t i = 0; i < g->nchunks; i++)
        if (!out || gcrec_chunk_cmp(&g->chunks[out - 1], &g->chunks[i]))
            g->chunks[out++] = g->chunks[i];
    g->nchunks = out;
}

bool gcrec_has_object(const struct gcrec *g, const uint8_t id[HASH_LEN], bool recipe,
                      const uint8_t *sig)
{
    struct gc_chunk k = {.recipe = recipe};
    memcpy(k.id, id, HASH_LEN);
    if (recipe)
        memcpy(k.sig, sig, MANIFEST_RECIPE_SIG);
    return g->nchunks && bsearch(&k, g->chunks, g->nchunks, sizeof(k), gcrec_chunk_cmp);
}

bool gcrec_has_chunk(const struct gcrec *g, const uint8_t id[HASH_LEN])
{
    return gcrec_has_object(g, id, false, NULL);
}

/* ---- names ------------------------------------------------------------- */

void gc_boot_id(char out[33])
{
    char raw[64];
    size_t n = 0;
    out[0] = 0;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd < 0 ? -1 : read(fd, raw, sizeof(raw) - 1);
    if (fd >= 0)
        close(fd);
    for (ssize_t i = 0; i < got && n < 32; i++)
        if ((raw[i] >= '0' && raw[i] <= '9') || (raw[i] >= 'a' && raw[i] <= 'f'))
            out[n++] = raw[i];
    out[n == 32 ? 32 : 0] = 0;
}

/* When process pid started, in Unix seconds by this boot's clock (its
 * start in /proc is counted from boot, suspend included); -1 if unknown. */
static int64_t proc_started(pid_t pid)
{
    char path[64], st[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, st, sizeof(st) - 1);
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return -1;
    st[n] = 0;
    char *p = strrchr(st, ')'); /* the name may hold spaces and parentheses */
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    char *end;
    errno = 0;
    unsigned long long ticks = p ? strtoull(p + 1, &end, 10) : 0;
    long hz = sysconf(_SC_CLK_TCK);
    struct timespec boot, wall;
    if (!p || errno || end == p + 1 || hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &boot) < 0 ||
        clock_gettime(CLOCK_REALTIME, &wall) < 0)
        return -1;
    return (int64_t)wall.tv_sec - ((int64_t)boot.tv_sec - (int64_t)(ticks / (unsigned long)hz));
}

bool gc_owner_dead(const struct gcrec *rec, uint64_t skew)
{
    char boot[33], host[GC_FIELD_MAX + 1] = "", mine[GC_FIELD_MAX + 1];
    gc_boot_id(boot);
    if (gethostname(host, sizeof(host) - 1) < 0)
        return false;
    lineage_sanitise(host, mine, sizeof(mine));
    if (!boot[0] || strcmp(boot, rec->boot) || strcmp(mine, rec->host) || rec->seq <= 0 ||
        rec->seq > INT32_MAX)
        return false;
    if (kill((pid_t)rec->seq, 0) < 0)
        return errno == ESRCH;
    /* The pid runs, but a process that started after the record was
     * written (beyond the clock skew the protocol allows) is not its
     * writer: the pid was given out again (a busy host wraps pid_max, a
     * restarted container's daemon gets the same small pid). */
    int64_t started = proc_started((pid_t)rec->seq);
    return started >= 0 && started > rec->time + (int64_t)skew + 1;
}

int gc_random_hex(char out[17])
{
    uint8_t r[8];
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
        return -EIO;
    hex_encode(r, sizeof(r), out);
    return 0;
}

static void stamp(int64_t t, char out[17])
{
    struct tm tm;
    time_t tt = (time_t)t;
    gmtime_r(&tt, &tm);
    strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

int64_t gc_utc_parse(const char *s)
{
    struct tm tm;
    int v[6] = {0}, at[6] = {0, 4, 6, 9, 11, 13}, w[6] = {4, 2, 2, 2, 2, 2};
    if (strnlen(s, 15) < 15 || s[8] != 'T')
        return -1;
    for (int k = 0; k < 6; k++)
        for (int j = 0; j < w[k]; j++) {
            char c = s[at[k] + j];
            if (c < '0' || c > '9')
                return -1;
            v[k] = v[k] * 10 + (c - '0');
        }
    if (v[1] < 1 || v[1] > 12 || v[2] < 1 || v[2] > 31 || v[3] > 23 || v[4] > 59 || v[5] > 59)
        return -1;
    memset(&tm, 0, sizeof(tm));
    tm.tm_year = v[0] - 1900;
    tm.tm_mon = v[1] - 1;
    tm.tm_mday = v[2];
    tm.tm_hour = v[3];
    tm.tm_min = v[4];
    tm.tm_sec = v[5];
    time_t t = timegm(&tm);
    struct tm back;
    /* one spelling: "20260230T..." would normalise to another day */
    if (t == (time_t)-1 || !gmtime_r(&t, &back) || back.tm_mday != v[2] || back.tm_mon != v[1] - 1)
        return -1;
    return (int64_t)t;
}

/* "YYYYmmddTHHMMSSZ" -> unix seconds, -1 if not exactly that. */
static int64_t stamp_parse(const char *s)
{
    return strnlen(s, 16) == 16 && s[15] == 'Z' ? gc_utc_parse(s) : -1;
}

/* n lower-case hex digits at s (what follows is the caller's to check). */
static bool hex_n(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* A decimal without sign or leading zeros, at most 12 digits. */
static bool dec_n(const char *s, size_t n, int64_t *ret)
{
    int64_t v = 0;
    if (n == 0 || n > 12 || (s[0] == '0' && n > 1))
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *ret = v;
    return true;
}

int gc_mark_make(char out[GC_MARK_LEN + 1])
{
    char hex[17];
    if (gc_random_hex(hex) < 0)
        return -EIO;
    stamp((int64_t)time(NULL), out);
    out[16] = '-';
    memcpy(out + 17, hex, 17);
    return 0;
}

bool gc_mark_check(const char *mark)
{
    return strlen(mark) == GC_MARK_LEN && stamp_parse(mark) >= 0 && mark[16] == '-' &&
           hex_n(mark + 17, 16);
}

int64_t gc_mark_time(const char *mark)
{
    return gc_mark_check(mark) ? stamp_parse(mark) : -1;
}

int gc_intent_make(int64_t t, uint64_t ttl, char out[GC_INTENT_MAX + 1])
{
    char st[17], hex[17];
    if (gc_random_hex(hex) < 0)
        return -EIO;
    stamp(t, st);
    snprintf(out, GC_INTENT_MAX + 1, "%s.%llu.%s", st, (unsigned long long)ttl, hex);
    return 0;
}

int gc_intent_parse(const char *name, int64_t *ret_time, uint64_t *ret_ttl)
{
    int64_t t, ttl;
    const char *dot;
    if (strlen(name) > GC_INTENT_MAX || (t = stamp_parse(name)) < 0 || name[16] != '.' ||
        !(dot = strchr(name + 17, '.')) || !dec_n(name + 17, (size_t)(dot - name - 17), &ttl) ||
        strlen(dot + 1) != 16 || !hex_n(dot + 1, 16))
        return CKS_E_FORMAT;
    *ret_time = t;
    *ret_ttl = (uint64_t)ttl;
    return 0;
}

int gc_sweep_parse(const char *name, int64_t *ret_expires)
{
    const char *dot;
    int64_t v;
    if (strncmp(name, "sweep.", 6) || !(dot = strchr(name + 6, '.')) ||
        !dec_n(name + 6, (size_t)(dot - name - 6), &v) || strlen(dot + 1) != 16 ||
        !hex_n(dot + 1, 16))
        return CKS_E_FORMAT;
    *ret_expires = v;
    return 0;
}

/* ---- encoding ---------------------------------------------------------- */

static int snapref_put(struct buf *out, const char *key, const struct gc_snapref *s)
{
    return s->run[0] ? buf_printf(out, "%s %s/%s\n", key, s->run, s->id)
                     : buf_printf(out, "%s -\n", key);
}

/* "c <hex> <size>" or "r <hex>.<sig hex> <size>". */
static int item_put(struct buf *out, const struct gc_chunk *c)
{
    char hex[HASH_HEX_LEN + 1], sig[2 * MANIFEST_RECIPE_SIG + 1];
    hex_encode(c->id, HASH_LEN, hex);
    if (!c->recipe)
        return buf_printf(out, "c %s %llu\n", hex, (unsigned long long)c->size);
    hex_encode(c->sig, MANIFEST_RECIPE_SIG, sig);
    return buf_printf(out, "r %s.%s %llu\n", hex, sig, (unsigned long long)c->size);
}

int gcrec_encode(const struct gcrec *g, struct buf *out)
{
    char host[GC_FIELD_MAX + 1], hex[HASH_HEX_LEN + 1];
    uint8_t d[HASH_LEN];
    size_t start = out->len, items = g->nchunks + g->nsnaps + g->nintents;
    bool nomark = g->kind == GC_LEASE || g->kind == GC_INTENT;
    if ((unsigned)g->kind > GC_INTENT || (!nomark && !gc_mark_check(g->mark)) ||
        items > GC_MAX_ITEMS + GC_MAX_ITEMS || (g->boot[0] && strlen(g->boot) != 32))
        return -EINVAL;
    lineage_sanitise(g->host, host, sizeof(host));
    int version = 1;
    for (size_t i = 0; i < g->nchunks && version == 1; i++)
        version += g->chunks[i].recipe;
    int e = buf_printf(out, "ckptsync-gc %d\nkind %s\nmark %s\nhost %s\nboot %s\ntime %lld\n",
                       version, kind_names[g->kind], nomark ? "-" : g->mark, host,
                       g->boot[0] ? g->boot : "-", (long long)g->time);
    if (e == 0)
        e = g->expires >= 0 ? buf_printf(out, "expires %lld\n", (long long)g->expires)
                            : buf_printf(out, "expires -\n");
    if (e == 0)
        e = g->seq >= 0 ? buf_printf(out, "seq %lld\n", (long long)g->seq)
                        : buf_printf(out, "seq -\n");
    if (e == 0)
        e = snapref_put(out, "snapshot", &g->snap);
    if (e == 0)
        e = buf_printf(out, "items %zu\n", items);
    for (size_t i = 0; e == 0 && i < g->nchunks; i++)
        e = item_put(out, &g->chunks[i]);
    for (size_t i = 0; e == 0 && i < g->nsnaps; i++)
        e = snapref_put(out, "s", &g->snaps[i]);
    for (size_t i = 0; e == 0 && i < g->nintents; i++)
        e = buf_printf(out, "i %s\n", g->intents[i]);
    if (e < 0)
        return e;
    hash_sha256(out->data + start, out->len - start, d);
    hex_encode(d, HASH_LEN, hex);
    return buf_printf(out, "end %s\n", hex);
}

/* ---- parsing ----------------------------------------------------------- */

struct gp {
    const char *p, *end;
    char v[MANIFEST_MAX_FIELD + MANIFEST_ID_MAX + 8];
};

/* The next line "<key> <value>" (value printable, no spaces); NULL otherwise. */
static const char *gp_field(struct gp *l, const char *key)
{
    const char *nl = memchr(l->p, '\n', (size_t)(l->end - l->p));
    size_t n = nl ? (size_t)(nl - l->p) : 0, kl = strlen(key);
    if (!nl || n <= kl + 1 || n - kl - 1 >= sizeof(l->v) || memcmp(l->p, key, kl) ||
        l->p[kl] != ' ')
        return NULL;
    memcpy(l->v, l->p + kl + 1, n - kl - 1);
    l->v[n - kl - 1] = 0;
    for (const char *c = l->v; *c; c++)
        if (*c < 0x21 || *c > 0x7e)
            return NULL;
    l->p = nl + 1;
    return l->v;
}

static bool gp_num(struct gp *l, const char *key, bool dash, int64_t *ret)
{
    const char *v = gp_field(l, key);
    if (v && dash && !strcmp(v, "-")) {
        *ret = -1;
        return true;
    }
    return v && dec_n(v, strlen(v), ret);
}

static bool snapref_parse(const char *v, struct gc_snapref *s)
{
    const char *slash = strchr(v, '/');
    if (!slash || (size_t)(slash - v) > MANIFEST_MAX_FIELD || strlen(slash + 1) > MANIFEST_ID_MAX)
        return false;
    snprintf(s->run, sizeof(s->run), "%.*s", (int)(slash - v), v);
    snprintf(s->id, sizeof(s->id), "%s", slash + 1);
    return manifest_run_check(s->run) == 0 && manifest_id_check(s->id) == 0;
}

/* "c <hex> <size>" or (version 2) "r <hex>.<sig hex> <size>": gp_field
 * refuses the space, so split by hand.  Items sorted, each once. */
static int gp_object(struct gp *l, struct gcrec *g, const char *nl)
{
    size_t n = (size_t)(nl - l->p), sl = 2 * MANIFEST_RECIPE_SIG;
    struct gc_chunk c = {.recipe = l->p[0] == 'r'};
    size_t at = 2 + HASH_HEX_LEN + (c.recipe ? 1 + sl : 0); /* the space before size */
    int64_t size;
    if (c.recipe && g->version < 2)
        return CKS_E_FORMAT;
    if (n < at + 2 || l->p[at] != ' ' || !hex_n(l->p + 2, HASH_HEX_LEN) ||
        hex_decode(l->p + 2, HASH_LEN, c.id) < 0 || !dec_n(l->p + at + 1, n - at - 1, &size))
        return CKS_E_FORMAT;
    if (c.recipe && (l->p[2 + HASH_HEX_LEN] != '.' || !hex_n(l->p + 3 + HASH_HEX_LEN, sl) ||
                     hex_decode(l->p + 3 + HASH_HEX_LEN, MANIFEST_RECIPE_SIG, c.sig) < 0))
        return CKS_E_FORMAT;
    if (g->nchunks && gcrec_chunk_cmp(&g->chunks[g->nchunks - 1], &c) >= 0)
        return CKS_E_FORMAT; /* sorted, each once */
    l->p = nl + 1;
    return c.recipe ? gcrec_add_recipe(g, c.id, c.sig, (uint64_t)size)
                    : gcrec_add_chunk(g, c.id, (uint64_t)size);
}

static int gp_item(struct gp *l, struct gcrec *g)
{
    const char *nl = memchr(l->p, '\n', (size_t)(l->end - l->p));
    size_t n = nl ? (size_t)(nl - l->p) : 0;
    if (!nl || n < 3 || l->p[1] != ' ')
        return CKS_E_FORMAT;
    char c = l->p[0];
    if ((c == 'c' || c == 'r') && (g->kind == GC_MARK || g->kind == GC_KEEP))
        return gp_object(l, g, nl);
    const char *v = gp_field(l, c == 's' ? "s" : c == 'i' ? "i" : "?");
    if (!v)
        return CKS_E_FORMAT;
    if (c == 's' && g->kind == GC_MARK) {
        struct gc_snapref s;
        if (!snapref_parse(v, &s))
            return CKS_E_FORMAT;
        return gcrec_add_snap(g, s.run, s.id);
    }
    if (c == 'i' && (g->kind == GC_INTENTS || g->kind == GC_DONE)) {
        int e = gcrec_add_intent(g, v);
        return e == -EINVAL ? CKS_E_FORMAT : e;
    }
    return CKS_E_FORMAT;
}

static int gp_body(struct gp *l, struct gcrec *g)
{
    const char *v;
    int64_t items;
    if (!(v = gp_field(l, "kind")))
        return CKS_E_FORMAT;
    unsigned k = 0;
    while (k <= GC_INTENT && strcmp(v, kind_names[k]))
        k++;
    if (k > GC_INTENT)
        return CKS_E_FORMAT;
    g->kind = (enum gc_kind)k;
    bool nomark = g->kind == GC_LEASE || g->kind == GC_INTENT;
    if (!(v = gp_field(l, "mark")))
        return CKS_E_FORMAT;
    if (nomark ? strcmp(v, "-") != 0 : !gc_mark_check(v))
        return CKS_E_FORMAT;
    snprintf(g->mark, sizeof(g->mark), "%s", nomark ? "" : v);
    if (!(v = gp_field(l, "host")) || strlen(v) > GC_FIELD_MAX)
        return CKS_E_FORMAT;
    for (const char *c = v; *c; c++)
        if (!lineage_field_char(*c))
            return CKS_E_FORMAT;
    snprintf(g->host, sizeof(g->host), "%s", v);
    if (!(v = gp_field(l, "boot")) || (strcmp(v, "-") && (strlen(v) != 32 || !hex_n(v, 32))))
        return CKS_E_FORMAT;
    snprintf(g->boot, sizeof(g->boot), "%s", strcmp(v, "-") ? v : "");
    if (!gp_num(l, "time", false, &g->time) || !gp_num(l, "expires", true, &g->expires) ||
        !gp_num(l, "seq", true, &g->seq) || !(v = gp_field(l, "snapshot")))
        return CKS_E_FORMAT;
    if (strcmp(v, "-") && !snapref_parse(v, &g->snap))
        return CKS_E_FORMAT;
    if ((g->kind == GC_KEEP) != (g->snap.run[0] != 0) ||
        ((g->kind == GC_SWEEP || g->kind == GC_INTENT) && g->expires < 0) ||
        (nomark != (g->seq >= 0)) || (!nomark && g->kind != GC_SWEEP && g->expires >= 0))
        return CKS_E_FORMAT;
    if (!gp_num(l, "items", false, &items) || (uint64_t)items > 2ull * GC_MAX_ITEMS)
        return CKS_E_FORMAT;
    /* every item line is at least 4 bytes: a count the body cannot hold is a lie */
    if ((uint64_t)items * 4 > (uint64_t)(l->end - l->p))
        return CKS_E_FORMAT;
    bool recipes = false;
    for (int64_t i = 0; i < items; i++) {
        int e = gp_item(l, g);
        if (e < 0)
            return e;
    }
    for (size_t i = 0; i < g->nchunks && !recipes; i++)
        recipes = g->chunks[i].recipe;
    /* one spelling: a record without a recipe item is written as version 1 */
    return g->version == 2 && !recipes ? CKS_E_FORMAT : 0;
}

int gcrec_parse(const uint8_t *data, size_t len, struct gcrec *g)
{
    struct gp l = {.p = (const char *)data, .end = (const char *)data + len};
    uint8_t want[HASH_LEN], got[HASH_LEN];
    const char *v;
    gcrec_init(g, GC_MARK);
    if (len == 0 || len > GC_MAX_BYTES || memchr(data, 0, len))
        return CKS_E_FORMAT;
    const char *nl = memchr(l.p, '\n', len);
    if (!nl || (size_t)(nl - l.p) < 12 || memcmp(l.p, "ckptsync-gc ", 12))
        return CKS_E_FORMAT;
    if (nl - l.p != 13 || (l.p[12] != '1' && l.p[12] != '2')) {
        for (const char *c = l.p + 12; c < nl; c++)
            if (*c < '0' || *c > '9')
                return CKS_E_FORMAT;
        return CKS_E_VERSION; /* a version we do not know */
    }
    g->version = l.p[12] - '0';
    l.p = nl + 1;
    int e = gp_body(&l, g);
    if (e < 0)
        return e;
    size_t body = (size_t)(l.p - (const char *)data);
    if (!(v = gp_field(&l, "end")) || l.p != l.end || strlen(v) != HASH_HEX_LEN ||
        !hex_n(v, HASH_HEX_LEN) || hex_decode(v, HASH_LEN, want) < 0)
        return CKS_E_FORMAT;
    hash_sha256(data, body, got);
    return memcmp(want, got, HASH_LEN) ? CKS_E_DIGEST : 0;
}
