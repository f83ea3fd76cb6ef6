/*
 * metrics.c — counters, the Prometheus text format, and /metrics.
 *
 * Design notes.
 * - The counters are plain uint64_t updated with relaxed atomic adds by
 *   the ingest thread and the region workers, and read the same way by
 *   the event loop: no lock is taken on the hot path, and nothing else is
 *   shared.  Region names are copied at creation, so rendering never
 *   touches a worker's region.
 * - A histogram is the same: one counter per bucket (not cumulative, so
 *   an observation is one add, not one per bucket above it) and the sum
 *   in whole microseconds (an integer add; no float atomics).  The render
 *   cumulates a single read of each bucket and writes that total as
 *   _count, so a scrape is always self-consistent.
 * - The counts live in two structs of uint64_t words only (the daemon's,
 *   each region's), described field by field by the carry tables: one
 *   description serves the reload's text both ways, and metrics_new()
 *   checks that the tables cover every word.  The text names fields,
 *   never offsets, so a build with other fields or a configuration with
 *   other regions takes what it knows and leaves the rest.
 * - process_* is read from /proc at scrape time (the event loop, a few
 *   small reads), as the Prometheus client libraries do.
 * - The HTTP side is one listening socket and a fixed table of
 *   connections, all non-blocking and driven by the daemon's epoll loop:
 *   a scrape is one short request and one response, so a thread of its
 *   own would only add locking.  The response is rendered once the whole
 *   request head is in and written as the socket accepts it; then the
 *   connection closes (no keep-alive: Prometheus reconnects cheaply, and
 *   a closed connection cannot hold a slot).
 * - No client can lock scrapes out (the endpoint is on loopback TCP, open
 *   to every local user): the backlog is SOMAXCONN, each wakeup accepts
 *   all of it, and when the table is full the connection idle the longest
 *   (no byte read or sent) is closed to make room, as the control socket
 *   does.  A scrape sends its request at once and is answered on the spot,
 *   so only connections that hold a slot without talking are closed.
 * - Series follow Prometheus naming: ckptsync_ prefix, base units,
 *   _total for counters, labels only region, run, operation and result
 *   (and le); process_* as the client libraries name them.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"
#include "base/mstime.h"
#include "base/numfmt.h"
#include "daemon/metrics.h"

/* Bucket bounds of the histograms, in microseconds, ascending (+Inf is
 * implied).  Changing them is safe across a reload: a carried histogram
 * whose bounds differ is dropped (carry_token). */
static const uint64_t durable_le[] = {500000,     1000000,    2500000,   5000000,   10000000,
                                      30000000,   60000000,   120000000, 300000000, 600000000,
                                      1800000000, 3600000000, 7200000000};
static const uint64_t request_le[] = {5000,     10000,    25000,   50000,   100000,
                                      250000,   500000,   1000000, 2500000, 5000000,
                                      10000000, 30000000, 60000000};
static const uint64_t restore_le[] = {500000,     1000000,    2500000,   5000000,   10000000,
                                      30000000,   60000000,   120000000, 300000000, 600000000,
                                      1800000000, 3600000000, 7200000000};
#define NLE(a) (sizeof(a) / sizeof((a)[0]))

/* One histogram: observations per bucket (not cumulative: [k] counts
 * those above bound k-1 and at most bound k; [nle] those above every
 * bound), and their sum. */
struct metrics_hist {
    uint64_t bucket[METRICS_HIST_MAX + 1];
    uint64_t sum_us;
};

/* Everything counted per region: uint64_t words only (carried over a
 * reload by the carry_region table below). */
struct region_counts {
    uint64_t requests[METRICS_NOPS][2]; /* [op][ok] */
    uint64_t bytes[2];                  /* PUT bytes by [ok] */
    uint64_t retries[METRICS_NRETRIES];
    struct metrics_hist request_seconds[METRICS_NOPS];
};

/* Everything counted for the daemon as a whole: uint64_t words only
 * (carried over a reload by the carry_global table below). */
struct global_counts {
    uint64_t snaps[METRICS_NSNAPS];
    uint64_t bytes_new, bytes_dedup, chunks_new, chunks_dedup;
    uint64_t rereads;
    uint64_t restores[2]; /* by [ok] */
    uint64_t restore_bytes, restore_files, restore_usec;
    struct metrics_hist durable_seconds, restore_seconds;
};

struct metrics_region {
    char name[CONFIG_NAME_MAX];
    struct region_counts c;
};

struct metrics {
    size_t nregions;
    struct metrics_region rg[CONFIG_MAX_REGIONS];
    struct global_counts c;
};

/* What a reload carries: each field of the two count structs by name,
 * with its size in words, and a histogram's bounds. */
struct carried {
    const char *name;
    size_t off, words;
    const uint64_t *le; /* a histogram's (or an array of them): its bounds */
    size_t nle;
};
#define CARRY(s, f) #f, offsetof(struct s, f), sizeof(((struct s *)0)->f) / (sizeof(uint64_t))
static const struct carried carry_global[] = {
    {CARRY(global_counts, snaps), NULL, 0},
    {CARRY(global_counts, bytes_new), NULL, 0},
    {CARRY(global_counts, bytes_dedup), NULL, 0},
    {CARRY(global_counts, chunks_new), NULL, 0},
    {CARRY(global_counts, chunks_dedup), NULL, 0},
    {CARRY(global_counts, rereads), NULL, 0},
    {CARRY(global_counts, restores), NULL, 0},
    {CARRY(global_counts, restore_bytes), NULL, 0},
    {CARRY(global_counts, restore_files), NULL, 0},
    {CARRY(global_counts, restore_usec), NULL, 0},
    {CARRY(global_counts, durable_seconds), durable_le, NLE(durable_le)},
    {CARRY(global_counts, restore_seconds), restore_le, NLE(restore_le)},
};
static const struct carried carry_region[] = {
    {CARRY(region_counts, requests), NULL, 0},
    {CARRY(region_counts, bytes), NULL, 0},
    {CARRY(region_counts, retries), NULL, 0},
    {CARRY(region_counts, request_seconds), request_le, NLE(request_le)},
};
#define NCARRY(a) (sizeof(a) / sizeof((a)[0]))

static const char *const op_names[METRICS_NOPS] = {"has", "put", "publish"};
static const char *const retry_names[METRICS_NRETRIES] = {"error", "missing", "changed"};
static const char *const snap_names[METRICS_NSNAPS] = {"taken", "unchanged", "failed"};

static void add(uint64_t *c, uint64_t v)
{
    __atomic_fetch_add(c, v, __ATOMIC_RELAXED);
}

static uint64_t get(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

static void observe(struct metrics_hist *h, const uint64_t *le, size_t nle, uint64_t usec)
{
    size_t k = 0;
    while (k < nle && usec > le[k])
        k++;
    add(&h->bucket[k], 1);
    add(&h->sum_us, usec);
}

/* Every word of a count struct is in its carry table: a counter added
 * without a line there would silently reset on reload. */
static bool carry_complete(const struct carried *t, size_t n, size_t size)
{
    size_t words = 0;
    for (size_t i = 0; i < n; i++)
        words += t[i].words;
    return words * sizeof(uint64_t) == size;
}

int metrics_new(const struct config *conf, struct metrics **ret)
{
    if (!carry_complete(carry_global, NCARRY(carry_global), sizeof(struct global_counts)) ||
        !carry_complete(carry_region, NCARRY(carry_region), sizeof(struct region_counts))) {
        log_error("metrics.c: a counter is missing from carry_global or carry_region");
        return -EINVAL;
    }
    struct metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->nregions = conf->nregions;
    for (size_t i = 0; i < conf->nregions; i++)
        snprintf(m->rg[i].name, sizeof(m->rg[i].name), "%s", conf->regions[i].name);
    *ret = m;
    return 0;
}

void metrics_free(struct metrics *m)
{
    free(m);
}

void metrics_snapshot(struct metrics *m, enum metrics_snap outcome, uint64_t bytes,
                      uint64_t new_bytes, uint64_t chunks, uint64_t new_chunks)
{
    if (!m)
        return;
    add(&m->c.snaps[outcome], 1);
    if (outcome != METRICS_SNAP_TAKEN)
        return;
    new_bytes = new_bytes < bytes ? new_bytes : bytes;
    new_chunks = new_chunks < chunks ? new_chunks : chunks;
    add(&m->c.bytes_new, new_bytes);
    add(&m->c.bytes_dedup, bytes - new_bytes);
    add(&m->c.chunks_new, new_chunks);
    add(&m->c.chunks_dedup, chunks - new_chunks);
}

void metrics_reread(struct metrics *m)
{
    if (m)
        add(&m->c.rereads, 1);
}

void metrics_request(struct metrics *m, size_t i, enum metrics_op op, bool ok, uint64_t bytes,
                     uint64_t usec)
{
    if (!m || i >= m->nregions)
        return;
    struct region_counts *c = &m->rg[i].c;
    add(&c->requests[op][ok], 1);
    if (op == METRICS_OP_PUT)
        add(&c->bytes[ok], bytes);
    observe(&c->request_seconds[op], request_le, NLE(request_le), usec);
}

void metrics_retry(struct metrics *m, size_t i, enum metrics_retry cause, uint64_t n)
{
    if (m && i < m->nregions)
        add(&m->rg[i].c.retries[cause], n);
}

void metrics_durable(struct metrics *m, uint64_t usec)
{
    if (m)
        observe(&m->c.durable_seconds, durable_le, NLE(durable_le), usec);
}

void metrics_restore(struct metrics *m, bool ok, uint64_t bytes, uint64_t files, uint64_t usec)
{
    if (!m)
        return;
    add(&m->c.restores[ok], 1);
    if (!ok)
        return;
    add(&m->c.restore_bytes, bytes);
    add(&m->c.restore_files, files);
    add(&m->c.restore_usec, usec);
    observe(&m->c.restore_seconds, restore_le, NLE(restore_le), usec);
}

/* ---- carried over a reload ------------------------------------------- */

/* A field's name in the carried text; a histogram's carries a hash of its
 * bounds, so counts are never put into buckets they were not counted in. */
static const char *carry_token(const struct carried *c, char tok[96])
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t k = 0; k < c->nle; k++)
        for (size_t b = 0; b < 8; b++)
            h = (h ^ ((c->le[k] >> (8 * b)) & 0xff)) * 1099511628211ull;
    if (c->le)
        snprintf(tok, 96, "%s@%016llx", c->name, (unsigned long long)h);
    else
        snprintf(tok, 96, "%s", c->name);
    return tok;
}

static void carry_put(struct buf *out, const char *prefix, const struct carried *c,
                      const void *base)
{
    char tok[96];
    const uint64_t *w = (const uint64_t *)((const char *)base + c->off);
    buf_printf(out, "%s %s", prefix, carry_token(c, tok));
    for (size_t k = 0; k < c->words; k++)
        buf_printf(out, " %llu", (unsigned long long)get(&w[k]));
    buf_puts(out, "\n");
}

void metrics_carry_out(const struct metrics *m, struct buf *out)
{
    buf_printf(out, "%s\n", METRICS_CARRY_MAGIC);
    if (!m)
        return;
    for (size_t k = 0; k < NCARRY(carry_global); k++)
        carry_put(out, "g", &carry_global[k], &m->c);
    for (size_t i = 0; i < m->nregions; i++) {
        struct buf pre = BUF_INIT;
        buf_printf(&pre, "r %s", m->rg[i].name);
        for (size_t k = 0; k < NCARRY(carry_region); k++)
            carry_put(out, buf_str(&pre), &carry_region[k], &m->rg[i].c);
        buf_free(&pre);
    }
}

/* One line's values (after the token) into the field tok names in t;
 * false when no field has that name and that many words. */
static bool carry_take(const struct carried *t, size_t n, void *base, const char *tok, char *vals)
{
    char name[96], *save = NULL;
    for (size_t k = 0; k < n; k++) {
        if (strcmp(carry_token(&t[k], name), tok))
            continue;
        uint64_t
            v[(sizeof(struct region_counts) + sizeof(struct global_counts)) / sizeof(uint64_t)];
        size_t got = 0;
        for (char *w = vals ? strtok_r(vals, " ", &save) : NULL; w;
             w = strtok_r(NULL, " ", &save)) {
            char *end;
            errno = 0;
            unsigned long long x = strtoull(w, &end, 10);
            if (errno || *end || w[0] == '-' || got == t[k].words)
                return false;
            v[got++] = x;
        }
        if (got != t[k].words)
            return false;
        memcpy((char *)base + t[k].off, v, got * sizeof(uint64_t));
        return true;
    }
    return false;
}

/* "g TOKEN values" or "r REGION TOKEN values": 1 when taken, else 0. */
static int carry_line(struct metrics *m, char *line)
{
    char *save = NULL, *kind = strtok_r(line, " ", &save);
    if (!kind)
        return 0;
    if (!strcmp(kind, "g")) {
        char *tok = strtok_r(NULL, " ", &save);
        return tok && carry_take(carry_global, NCARRY(carry_global), &m->c, tok, save);
    }
    char *region = strtok_r(NULL, " ", &save), *tok = strtok_r(NULL, " ", &save);
    if (strcmp(kind, "r") || !region || !tok)
        return 0;
    for (size_t i = 0; i < m->nregions; i++)
        if (!strcmp(m->rg[i].name, region))
            return carry_take(carry_region, NCARRY(carry_region), &m->rg[i].c, tok, save);
    return 0; /* a region the new configuration no longer has */
}

int metrics_carry_in(struct metrics *m, const char *text)
{
    size_t ml = strlen(METRICS_CARRY_MAGIC);
    if (strncmp(text, METRICS_CARRY_MAGIC, ml) || text[ml] != '\n')
        return -EINVAL;
    char *copy = strdup(text + ml + 1), *save = NULL;
    if (!copy)
        return -ENOMEM;
    int n = 0;
    for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
        n += carry_line(m, l);
    free(copy);
    return n;
}

/* ---- exposition ------------------------------------------------------- */

static void put_escaped(struct buf *out, const char *s, bool quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            buf_puts(out, "\\\\");
        else if (*s == '\n')
            buf_puts(out, "\\n");
        else if (*s == '"' && quote)
            buf_puts(out, "\\\"");
        else
            buf_append(out, s, 1);
    }
}

void metrics_family(struct buf *out, const char *name, const char *type, const char *help)
{
    buf_printf(out, "# HELP %s ", name);
    put_escaped(out, help, false);
    buf_printf(out, "\n# TYPE %s %s\n", name, type);
}

static void put_series(struct buf *out, const char *name, const struct metrics_label *labels,
                       size_t nlabels)
{
    buf_puts(out, name);
    if (!nlabels)
        return;
    buf_puts(out, "{");
    for (size_t i = 0; i < nlabels; i++) {
        buf_printf(out, "%s%s=\"", i ? "," : "", labels[i].name);
        put_escaped(out, labels[i].value, true);
        buf_puts(out, "\"");
    }
    buf_puts(out, "}");
}

void metrics_sample(struct buf *out, const char *name, const struct metrics_label *labels,
                    size_t nlabels, double value)
{
    char num[NUMFMT_DOUBLE_MAX];
    put_series(out, name, labels, nlabels);
    if (value != value)
        buf_puts(out, " NaN\n");
    else if (value > 1.7976931348623157e308 || value < -1.7976931348623157e308)
        buf_puts(out, value > 0 ? " +Inf\n" : " -Inf\n");
    else if (value > -9007199254740992.0 && value < 9007199254740992.0 &&
             value == (double)(int64_t)value)
        buf_printf(out, " %lld\n", (long long)value);
    else
        buf_printf(out, " %s\n", numfmt_double(value, num));
}

void metrics_sample_u64(struct buf *out, const char *name, const struct metrics_label *labels,
                        size_t nlabels, uint64_t value)
{
    put_series(out, name, labels, nlabels);
    buf_printf(out, " %llu\n", (unsigned long long)value);
}

/* name_bucket{labels,le="bound"} (cumulative, the last le="+Inf"),
 * name_sum in seconds, name_count (the +Inf bucket, so the two agree in
 * every scrape however the workers race the render). */
static void put_hist(struct buf *out, const char *name, const struct metrics_label *labels,
                     size_t nlabels, const struct metrics_hist *h, const uint64_t *le, size_t nle)
{
    struct metrics_label l[METRICS_LABELS_MAX + 1];
    char series[128], bound[NUMFMT_DOUBLE_MAX];
    uint64_t cum = 0;
    if (nlabels)
        memcpy(l, labels, nlabels * sizeof(*l));
    snprintf(series, sizeof(series), "%s_bucket", name);
    for (size_t k = 0; k <= nle; k++) {
        cum += get(&h->bucket[k]);
        l[nlabels].name = "le";
        l[nlabels].value = k < nle ? numfmt_double((double)le[k] / 1e6, bound) : "+Inf";
        metrics_sample_u64(out, series, l, nlabels + 1, cum);
    }
    snprintf(series, sizeof(series), "%s_sum", name);
    metrics_sample(out, series, labels, nlabels, (double)get(&h->sum_us) / 1e6);
    snprintf(series, sizeof(series), "%s_count", name);
    metrics_sample_u64(out, series, labels, nlabels, cum);
}

static void hists(const struct metrics *m, struct buf *out)
{
    metrics_family(out, "ckptsync_commit_to_durable_seconds", "histogram",
                   "Time from a snapshot's creation (queued once its unit was read) to its "
                   "commit in the quorum-th region, a restart in between included.");
    put_hist(out, "ckptsync_commit_to_durable_seconds", NULL, 0, &m->c.durable_seconds, durable_le,
             NLE(durable_le));
    metrics_family(out, "ckptsync_region_request_duration_seconds", "histogram",
                   "Time each request to a region took, failed ones included, by operation "
                   "(has, put: one chunk object; publish: a snapshot's commit).");
    for (size_t i = 0; i < m->nregions; i++)
        for (size_t op = 0; op < METRICS_NOPS; op++)
            put_hist(
                out, "ckptsync_region_request_duration_seconds",
                (struct metrics_label[]){{"region", m->rg[i].name}, {"operation", op_names[op]}}, 2,
                &m->rg[i].c.request_seconds[op], request_le, NLE(request_le));
    metrics_family(out, "ckptsync_restore_duration_seconds", "histogram",
                   "Time the restores that succeeded took, as the ckptsync command reported.");
    put_hist(out, "ckptsync_restore_duration_seconds", NULL, 0, &m->c.restore_seconds, restore_le,
             NLE(restore_le));
}

static void counters_ingest(const struct metrics *m, struct buf *out)
{
    static const char *const res[2] = {"new", "dedup"};
    const uint64_t bytes[2] = {get(&m->c.bytes_new), get(&m->c.bytes_dedup)};
    const uint64_t chunks[2] = {get(&m->c.chunks_new), get(&m->c.chunks_dedup)};
    metrics_family(out, "ckptsync_snapshots_total", "counter",
                   "Units taken by the daemon, by result: taken (a new snapshot), unchanged "
                   "(same content as the last one), failed.");
    for (size_t k = 0; k < METRICS_NSNAPS; k++)
        metrics_sample_u64(out, "ckptsync_snapshots_total",
                           (struct metrics_label[]){{"result", snap_names[k]}}, 1,
                           get(&m->c.snaps[k]));
    metrics_family(out, "ckptsync_ingest_bytes_total", "counter",
                   "File bytes of the snapshots taken, by result: new (in chunks no region had) "
                   "or dedup (in chunks already stored).");
    for (size_t k = 0; k < 2; k++)
        metrics_sample_u64(out, "ckptsync_ingest_bytes_total",
                           (struct metrics_label[]){{"result", res[k]}}, 1, bytes[k]);
    metrics_family(out, "ckptsync_ingest_chunks_total", "counter",
                   "Chunk references of the snapshots taken, by result: new or dedup.");
    for (size_t k = 0; k < 2; k++)
        metrics_sample_u64(out, "ckptsync_ingest_chunks_total",
                           (struct metrics_label[]){{"result", res[k]}}, 1, chunks[k]);
}

static void counters_regions(const struct metrics *m, struct buf *out)
{
    static const char *const ok[2] = {"error", "ok"};
    metrics_family(out, "ckptsync_region_requests_total", "counter",
                   "Requests to each region by operation (has, put, publish) and result.");
    for (size_t i = 0; i < m->nregions; i++)
        for (size_t op = 0; op < METRICS_NOPS; op++)
            for (size_t k = 0; k < 2; k++)
                metrics_sample_u64(out, "ckptsync_region_requests_total",
                                   (struct metrics_label[]){{"region", m->rg[i].name},
                                                            {"operation", op_names[op]},
                                                            {"result", ok[k]}},
                                   3, get(&m->rg[i].c.requests[op][k]));
    metrics_family(out, "ckptsync_region_bytes_total", "counter",
                   "Bytes of chunk objects sent to each region (compressed), by result.");
    for (size_t i = 0; i < m->nregions; i++)
        for (size_t k = 0; k < 2; k++)
            metrics_sample_u64(out, "ckptsync_region_bytes_total",
                               (struct metrics_label[]){{"region", m->rg[i].name},
                                                        {"operation", "put"},
                                                        {"result", ok[k]}},
                               3, get(&m->rg[i].c.bytes[k]));
    metrics_family(out, "ckptsync_retries_total", "counter",
                   "Work done again, by cause (result): error (a region round failed and is "
                   "retried after backoff), missing (chunks a region had lost, uploaded again), "
                   "changed (a file changed after it was read: operation read re-reads the unit, "
                   "operation upload drops the snapshot and takes the unit again).");
    for (size_t i = 0; i < m->nregions; i++)
        for (size_t k = 0; k < METRICS_NRETRIES; k++)
            metrics_sample_u64(out, "ckptsync_retries_total",
                               (struct metrics_label[]){{"region", m->rg[i].name},
                                                        {"operation", "upload"},
                                                        {"result", retry_names[k]}},
                               3, get(&m->rg[i].c.retries[k]));
    metrics_sample_u64(out, "ckptsync_retries_total",
                       (struct metrics_label[]){{"operation", "read"}, {"result", "changed"}}, 2,
                       get(&m->c.rereads));
}

static void counters_restore(const struct metrics *m, struct buf *out)
{
    metrics_family(out, "ckptsync_restores_total", "counter",
                   "Restores the ckptsync command reported to this daemon, by result: ok or "
                   "failed.");
    metrics_sample_u64(out, "ckptsync_restores_total", (struct metrics_label[]){{"result", "ok"}},
                       1, get(&m->c.restores[1]));
    metrics_sample_u64(out, "ckptsync_restores_total",
                       (struct metrics_label[]){{"result", "failed"}}, 1, get(&m->c.restores[0]));
    metrics_family(out, "ckptsync_restore_bytes_total", "counter",
                   "File bytes written by the restores that succeeded.");
    metrics_sample_u64(out, "ckptsync_restore_bytes_total", NULL, 0, get(&m->c.restore_bytes));
    metrics_family(out, "ckptsync_restore_files_total", "counter",
                   "Files written by the restores that succeeded.");
    metrics_sample_u64(out, "ckptsync_restore_files_total", NULL, 0, get(&m->c.restore_files));
    metrics_family(out, "ckptsync_restore_seconds_total", "counter",
                   "Time the restores that succeeded took; restore_bytes_total / this is "
                   "their rate.");
    metrics_sample(out, "ckptsync_restore_seconds_total", NULL, 0,
                   (double)get(&m->c.restore_usec) / 1e6);
}

/* ---- process_*, as the Prometheus client libraries name them ---------- */

struct proc_stat {
    double cpu_s, start_s;
    uint64_t vsize, rss_pages;
};

/* /proc/self/stat's fields 14, 15 (user and system ticks), 22 (start, in
 * ticks after boot), 23 (virtual bytes) and 24 (resident pages), counted
 * after the ")" that ends the command name (which may hold anything). */
static int proc_stat_read(struct proc_stat *ps)
{
    char text[1024], *p;
    unsigned long long utime, stime, start, vsize, rss, btime = 0;
    long tck = sysconf(_SC_CLK_TCK);
    FILE *f = fopen("/proc/self/stat", "re");
    size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = 0;
    if (!(p = strrchr(text, ')')) || tck <= 0 ||
        sscanf(p + 1,
               " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d "
               "%llu %llu %llu",
               &utime, &stime, &start, &vsize, &rss) != 5)
        return -EIO;
    if (!(f = fopen("/proc/stat", "re")))
        return -errno;
    while (fgets(text, sizeof(text), f) && sscanf(text, "btime %llu", &btime) != 1)
        ;
    fclose(f);
    ps->cpu_s = (double)(utime + stime) / (double)tck;
    ps->start_s = (double)btime + (double)start / (double)tck;
    ps->vsize = vsize;
    ps->rss_pages = rss;
    return btime ? 0 : -EIO;
}

/* Open descriptors: the entries of /proc/self/fd but the one reading it. */
static int64_t proc_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int64_t n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.' && strtol(e->d_name, NULL, 10) != dirfd(d))
            n++;
    closedir(d);
    return n;
}

/* A family of one sample. */
static void proc_one(struct buf *out, const char *name, const char *type, const char *help,
                     double v)
{
    metrics_family(out, name, type, help);
    metrics_sample(out, name, NULL, 0, v);
}

/* What /proc cannot tell (a sandbox without it) is left out. */
static void process_metrics(struct buf *out)
{
    struct proc_stat ps;
    struct rlimit rl;
    int64_t fds = proc_open_fds();
    if (proc_stat_read(&ps) == 0) {
        proc_one(out, "process_cpu_seconds_total", "counter",
                 "Total user and system CPU time spent in seconds.", ps.cpu_s);
        proc_one(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                 (double)ps.rss_pages * (double)sysconf(_SC_PAGESIZE));
        proc_one(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
                 (double)ps.vsize);
        proc_one(out, "process_start_time_seconds", "gauge",
                 "Start time of the process since unix epoch in seconds (a reload keeps it: "
                 "the daemon re-executes itself in the same process).",
                 ps.start_s);
    }
    if (fds >= 0)
        proc_one(out, "process_open_fds", "gauge", "Number of open file descriptors.", (double)fds);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        proc_one(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
                 rl.rlim_cur == RLIM_INFINITY ? INFINITY : (double)rl.rlim_cur);
}

void metrics_counters(const struct metrics *m, struct buf *out)
{
    metrics_family(out, "ckptsync_info", "gauge", "The ckptsyncd build; always 1.");
    metrics_sample(out, "ckptsync_info", (struct metrics_label[]){{"version", CKS_VERSION}}, 1, 1);
    process_metrics(out);
    if (!m)
        return;
    counters_ingest(m, out);
    counters_regions(m, out);
    counters_restore(m, out);
    hists(m, out);
}

/* ---- the endpoint ----------------------------------------------------- */

struct hconn {
    int fd;
    bool writing;
    char in[METRICS_REQUEST_MAX];
    size_t in_len;
    struct buf out;
    size_t out_off;
    int64_t since_ms; /* accepted: METRICS_IDLE_MS bounds its whole life */
    uint64_t active;  /* s->activity at its last byte read or sent (or accept) */
};

struct metrics_server {
    int ep, lfd;
    unsigned port;
    metrics_render_fn render;
    void *ud;
    struct hconn *conns[METRICS_MAX_CONNS];
    uint64_t activity;     /* counts accepts, reads and sends: orders idleness exactly */
    int64_t evict_warn_ms; /* the next eviction to log */
};

static int srv_listen(struct metrics_server *s, const char *addr, struct buf *err)
{
    struct config_listen l;
    struct sockaddr_storage ss = {0};
    socklen_t len;
    int one = 1;
    if (config_parse_listen(addr, &l) < 0) {
        buf_printf(err, "metrics address '%s' is not HOST:PORT", addr);
        return -EINVAL;
    }
    if (l.family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)l.port);
        inet_pton(AF_INET6, l.host, &a->sin6_addr);
        len = sizeof(*a);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)l.port);
        inet_pton(AF_INET, l.host, &a->sin_addr);
        len = sizeof(*a);
    }
    s->lfd = socket(l.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->lfd < 0 || setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(s->lfd, (struct sockaddr *)&ss, len) < 0 || listen(s->lfd, SOMAXCONN) < 0) {
        int e = -errno;
        buf_printf(err, "metrics address %s: %s", addr, strerror(-e));
        return e;
    }
    len = sizeof(ss);
    if (getsockname(s->lfd, (struct sockaddr *)&ss, &len) == 0)
        s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

int metrics_server_new(const char *addr, int epfd, metrics_render_fn render, void *ud,
                       struct metrics_server **ret, struct buf *err)
{
    struct metrics_server *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->ep = epfd;
    s->render = render;
    s->ud = ud;
    int e = srv_listen(s, addr, err);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->lfd};
    if (e == 0 && epoll_ctl(epfd, EPOLL_CTL_ADD, s->lfd, &ev) < 0) {
        e = -errno;
        buf_printf(err, "metrics address %s: epoll: %s", addr, strerror(-e));
    }
    if (e < 0) {
        if (s->lfd >= 0)
            close(s->lfd);
        free(s);
        return e;
    }
    *ret = s;
    return 0;
}

static void hc_close(struct metrics_server *s, size_t i)
{
    struct hconn *c = s->conns[i];
    epoll_ctl(s->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    buf_free(&c->out);
    free(c);
    s->conns[i] = NULL;
}

void metrics_server_free(struct metrics_server *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < METRICS_MAX_CONNS; i++)
        if (s->conns[i])
            hc_close(s, i);
    epoll_ctl(s->ep, EPOLL_CTL_DEL, s->lfd, NULL);
    close(s->lfd);
    free(s);
}

unsigned metrics_server_port(const struct metrics_server *s)
{
    return s ? s->port : 0;
}

/* A free slot for a new connection; when every one is taken, the
 * connection idle the longest is closed to make room. */
static size_t srv_slot(struct metrics_server *s)
{
    size_t old = 0;
    for (size_t i = 0; i < METRICS_MAX_CONNS; i++) {
        if (!s->conns[i])
            return i;
        if (s->conns[i]->active < s->conns[old]->active)
            old = i;
    }
    int64_t now = mstime_mono();
    if (now >= s->evict_warn_ms) {
        log_warn("metrics endpoint: %d connections, the most it takes; closing the ones idle "
                 "longest to make room",
                 METRICS_MAX_CONNS);
        s->evict_warn_ms = now + 60000;
    }
    hc_close(s, old);
    return old;
}

/* Takes every client waiting in the backlog. */
static void srv_accept(struct metrics_server *s)
{
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
            continue;
        if (fd < 0)
            return;
        size_t i = srv_slot(s);
        struct hconn *c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd); /* a scraper retries; the loop is never held up */
            continue;
        }
        c->fd = fd;
        c->since_ms = mstime_mono();
        c->active = ++s->activity;
        s->conns[i] = c;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) < 0)
            hc_close(s, i);
    }
}

static void hc_respond(struct metrics_server *s, struct hconn *c, int status, const char *reason,
                       const char *ctype, const struct buf *body, bool head)
{
    size_t blen = body ? body->len : 0;
    buf_reset(&c->out);
    buf_printf(&c->out,
               "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
               "Connection: close\r\n\r\n",
               status, reason, ctype, blen, status == 405 ? "Allow: GET, HEAD\r\n" : "");
    if (body && !head)
        buf_append(&c->out, body->data, body->len);
    c->writing = true;
    c->out_off = 0;
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
    epoll_ctl(s->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void hc_text(struct metrics_server *s, struct hconn *c, int status, const char *reason,
                    const char *text)
{
    struct buf b = BUF_INIT;
    buf_puts(&b, text);
    hc_respond(s, c, status, reason, "text/plain; charset=utf-8", &b, false);
    buf_free(&b);
}

/* GET /: a page that says what this is and links /metrics, as
 * node_exporter's does (a browser pointed at the port finds its way). */
static void hc_index(struct metrics_server *s, struct hconn *c, bool head)
{
    struct buf b = BUF_INIT;
    buf_puts(&b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>ckptsyncd</title>"
                 "</head>\n<body><h1>ckptsyncd</h1>\n<p>version " CKS_VERSION "</p>\n"
                 "<p><a href=\"metrics\">Metrics</a> (Prometheus text format)</p>\n"
                 "</body></html>\n");
    hc_respond(s, c, 200, "OK", "text/html; charset=utf-8", &b, head);
    buf_free(&b);
}

/* The request line of a complete head: "METHOD TARGET HTTP/1.x". */
static void hc_request(struct metrics_server *s, struct hconn *c)
{
    char method[16], target[256], version[16];
    c->in[c->in_len < sizeof(c->in) ? c->in_len : sizeof(c->in) - 1] = 0;
    size_t line = strcspn(c->in, "\r\n");
    c->in[line] = 0;
    if (sscanf(c->in, "%15s %255s %15s", method, target, version) != 3 ||
        strncmp(version, "HTTP/1.", 7) != 0) {
        hc_text(s, c, 400, "Bad Request", "malformed request\n");
        return;
    }
    bool head = !strcmp(method, "HEAD");
    if (!head && strcmp(method, "GET")) {
        hc_text(s, c, 405, "Method Not Allowed", "only GET and HEAD\n");
        return;
    }
    size_t plen = strcspn(target, "?");
    if (plen == 1 && target[0] == '/') {
        hc_index(s, c, head);
        return;
    }
    if (plen != 8 || strncmp(target, "/metrics", 8)) {
        hc_text(s, c, 404, "Not Found", "ckptsyncd serves / and /metrics only\n");
        return;
    }
    struct buf body = BUF_INIT;
    int e = s->render(s->ud, &body);
    if (e < 0)
        hc_text(s, c, 500, "Internal Server Error", "reading the daemon's state failed\n");
    else
        hc_respond(s, c, 200, "OK", METRICS_CONTENT_TYPE, &body, head);
    buf_free(&body);
}

static bool head_complete(const char *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '\n' &&
            (p[i + 1] == '\n' || (p[i + 1] == '\r' && i + 2 < n && p[i + 2] == '\n')))
            return true;
    return false;
}

static void hc_read(struct metrics_server *s, size_t i)
{
    struct hconn *c = s->conns[i];
    size_t room = sizeof(c->in) - 1 - c->in_len;
    ssize_t n = room ? read(c->fd, c->in + c->in_len, room) : 0;
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0 && room) {
        hc_close(s, i); /* the client went away before asking */
        return;
    }
    c->in_len += (size_t)n;
    c->active = ++s->activity;
    if (head_complete(c->in, c->in_len))
        hc_request(s, c);
    else if (c->in_len >= sizeof(c->in) - 1)
        hc_text(s, c, 400, "Bad Request", "request head too large\n");
}

static void hc_write(struct metrics_server *s, size_t i)
{
    struct hconn *c = s->conns[i];
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0)
            break;
        c->out_off += (size_t)n;
        c->active = ++s->activity;
    }
    /* Unread request bytes would make close() send a reset that can
     * overtake the answer: read them away first (what is queued now). */
    char tmp[4096];
    for (int k = 0; k < 16 && read(c->fd, tmp, sizeof(tmp)) > 0; k++)
        ;
    hc_close(s, i);
}

bool metrics_server_event(struct metrics_server *s, void *tag)
{
    if (!s)
        return false;
    if (tag == &s->lfd) {
        srv_accept(s);
        return true;
    }
    for (size_t i = 0; i < METRICS_MAX_CONNS; i++) {
        if (!s->conns[i] || s->conns[i] != tag)
            continue;
        if (s->conns[i]->writing)
            hc_write(s, i);
        else
            hc_read(s, i);
        return true;
    }
    return false;
}

void metrics_server_tick(struct metrics_server *s)
{
    if (!s)
        return;
    int64_t now = mstime_mono();
    for (size_t i = 0; i < METRICS_MAX_CONNS; i++)
        if (s->conns[i] && now - s->conns[i]->since_ms >= METRICS_IDLE_MS)
            hc_close(s, i);
}
