/*
 * statusview.c — the daemon's state as status --json and /metrics show it.
 *
 * Design notes.
 * - Both renderings read the index in one read transaction, so a status
 *   answer or a scrape is one consistent picture of runs and queues; the
 *   region states and counters come from the replicator and the metrics
 *   (lock-free or briefly locked reads).
 * - A run is read once, in key order (runs_foreach()): its latest snapshot
 *   in the latest ref's order, and its newest durable one.  status and the
 *   gauges share that walk, so "latest" and "durable" have one meaning.
 * - Nothing here changes state: the loop may call these at any time.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/json.h"
#include "base/mstime.h"
#include "engine/ref.h"
#include "daemon/detect.h"
#include "daemon/ingest.h"
#include "daemon/jobwatch.h"
#include "daemon/metrics.h"
#include "daemon/objbuf.h"
#include "store/queue.h"
#include "daemon/replicator.h"
#include "daemon/sendlog.h"
#include "daemon/statusview.h"

/* ---- runs and regions, as status and /metrics show them -------------- */

static const char *const region_states[] = {"ok", "backoff", "failed"};

/* One run: its latest snapshot (in the order of the latest ref) and its
 * newest durable one.  statusview_json and the metrics both read runs this way. */
struct run_view {
    char run[MANIFEST_MAX_FIELD + 1];
    char id[MANIFEST_ID_MAX + 1];
    struct index_snap s;
    char durable_id[MANIFEST_ID_MAX + 1];
    struct index_snap ds;
    bool have_durable;
    uint64_t snapshots;
};

struct run_scan {
    const struct daemon_parts *p;
    void (*emit)(struct run_scan *a, const struct run_view *v);
    void *ud;
    struct run_view v;
    bool have;
};

static unsigned snap_regions(const struct daemon_parts *p, uint32_t committed)
{
    return (unsigned)__builtin_popcount(committed & replicator_all_slots(p->rp));
}

static const char *snap_state(const struct daemon_parts *p, uint32_t committed, unsigned *ret_k)
{
    unsigned k = snap_regions(p, committed);
    *ret_k = k;
    if (k == repo_nregions(p->r))
        return "replicated";
    if (k >= p->conf->quorum)
        return "durable";
    return k ? "uploading" : "queued";
}

/* Is (id, s) newer than (cur_id, cur) in the latest ref's order? */
static bool snap_newer(const char *id, const struct index_snap *s, const char *cur_id,
                       const struct index_snap *cur)
{
    struct ref cand, old;
    snprintf(cand.id, sizeof(cand.id), "%s", id);
    cand.step = s->step;
    snprintf(old.id, sizeof(old.id), "%s", cur_id);
    old.step = cur->step;
    return ref_newer(&cand, &old);
}

static int run_scan_cb(void *ud, const char *run, const char *id, const struct index_snap *s)
{
    struct run_scan *a = ud;
    struct run_view *v = &a->v;
    bool same = a->have && !strcmp(v->run, run);
    if (a->have && !same)
        a->emit(a, v);
    if (!same) {
        memset(v, 0, sizeof(*v));
        snprintf(v->run, sizeof(v->run), "%s", run);
        a->have = true;
    }
    if (!v->snapshots++ || snap_newer(id, s, v->id, &v->s)) {
        snprintf(v->id, sizeof(v->id), "%s", id);
        v->s = *s;
    }
    if (snap_regions(a->p, s->committed) >= a->p->conf->quorum &&
        (!v->have_durable || snap_newer(id, s, v->durable_id, &v->ds))) {
        snprintf(v->durable_id, sizeof(v->durable_id), "%s", id);
        v->ds = *s;
        v->have_durable = true;
    }
    return 0;
}

/* Calls emit once per run, in key order. */
static int runs_foreach(const struct daemon_parts *p, struct index_txn *t,
                        void (*emit)(struct run_scan *, const struct run_view *), void *ud)
{
    struct run_scan a = {.p = p, .emit = emit, .ud = ud};
    int e = index_snap_foreach(t, NULL, run_scan_cb, &a);
    if (e >= 0 && a.have)
        emit(&a, &a.v);
    return e;
}

/* Region i's queue: chunks, bytes, and the age of its oldest pending
 * snapshot (the replication lag). */
struct region_view {
    struct region_status st;
    uint64_t chunks, bytes;
    double lag;
};

static void region_view(const struct daemon_parts *p, struct index_txn *t, size_t i,
                        struct region_view *v)
{
    uint64_t oldest = 0;
    struct pending pd;
    memset(v, 0, sizeof(*v));
    replicator_status(p->rp, i, &v->st);
    queue_stats(t, repo_region(p->r, i)->slot, &v->chunks, &v->bytes, &oldest);
    if (oldest && queue_pending_get(t, oldest, &pd) == 0)
        v->lag = (double)(mstime_wall() - pd.created_ms) / 1000.0;
}

static int count_cb(void *ud, const struct pending *p)
{
    (void)p;
    ++*(size_t *)ud;
    return 0;
}

size_t statusview_pending_snapshots(struct index_txn *t)
{
    size_t n = 0;
    queue_pending_foreach(t, count_cb, &n);
    return n;
}

/* ---- status ------------------------------------------------------------ */

struct pct_acc {
    const char *run, *id;
    unsigned nslots;
    struct index_txn *t;
    double pct;
};

static int pct_cb(void *ud, const struct pending *p)
{
    struct pct_acc *a = ud;
    uint64_t left = 0;
    if (strcmp(p->run, a->run) || strcmp(p->id, a->id))
        return 0;
    if (p->queued_bytes && queue_seq_bytes(a->t, p->seq, a->nslots, &left) == 0)
        a->pct = 100.0 *
                 (double)(p->queued_bytes - (left < p->queued_bytes ? left : p->queued_bytes)) /
                 (double)p->queued_bytes;
    return 1;
}

/* How much of the snapshot's queued upload is done, over all regions. */
static double upload_percent(const struct daemon_parts *p, struct index_txn *t,
                             const struct run_view *v)
{
    struct pct_acc pa = {v->run, v->id, 0, t, 100.0};
    for (size_t i = 0; i < repo_nregions(p->r); i++)
        if (repo_region(p->r, i)->slot + 1 > pa.nslots)
            pa.nslots = repo_region(p->r, i)->slot + 1;
    queue_pending_foreach(t, pct_cb, &pa);
    return pa.pct;
}

struct status_acc {
    struct json *j;
    struct index_txn *t;
};

static void json_time_ms(struct json *j, int64_t ms)
{
    if (ms > 0)
        json_double(j, (double)ms / 1000.0);
    else
        json_null(j);
}

/* Upload once: what the snapshot sent from the instance against its new
 * stored bytes (daemon/sendlog.h); null when this daemon did not take it
 * or has forgotten it (a restart, or many snapshots since). */
static void status_sent(struct json *j, const struct daemon_parts *p, const char *id)
{
    struct sendlog_rec sr;
    bool have = sendlog_get(replicator_sendlog(p->rp), id, &sr);
    const char *keys[] = {"bytes_sent", "bytes_copied", "stored_bytes"};
    const uint64_t vals[] = {sr.sent, sr.copied, sr.stored};
    for (size_t k = 0; k < 3; k++) {
        json_key(j, keys[k]);
        have ? json_u64(j, vals[k]) : json_null(j);
    }
    json_key(j, "sent_ratio");
    have &&sr.stored ? json_double(j, (double)sr.sent / (double)sr.stored) : json_null(j);
}

static void status_emit_run(struct run_scan *a, const struct run_view *v)
{
    const struct daemon_parts *p = a->p;
    struct status_acc *sa = a->ud;
    struct json *j = sa->j;
    unsigned k;
    json_obj_begin(j);
    json_key(j, "run");
    json_str(j, v->run);
    json_key(j, "snapshots");
    json_u64(j, v->snapshots);
    json_key(j, "latest");
    json_obj_begin(j);
    json_key(j, "id");
    json_str(j, v->id);
    json_key(j, "step");
    json_i64(j, v->s.step);
    json_key(j, "time");
    json_i64(j, v->s.time);
    json_key(j, "bytes");
    json_u64(j, v->s.bytes);
    json_key(j, "files");
    json_u64(j, v->s.nfiles);
    json_key(j, "state");
    json_str(j, snap_state(p, v->s.committed, &k));
    json_key(j, "regions_committed");
    json_u64(j, k);
    json_key(j, "regions");
    json_u64(j, repo_nregions(p->r));
    json_key(j, "durable");
    json_bool(j, k >= p->conf->quorum);
    json_key(j, "uploaded_percent");
    json_double(j, k == repo_nregions(p->r) ? 100.0 : upload_percent(p, sa->t, v));
    status_sent(j, p, v->id);
    json_key(j, "region_states");
    json_obj_begin(j);
    for (size_t i = 0; i < repo_nregions(p->r); i++) {
        json_key(j, repo_region(p->r, i)->conf.name);
        json_str(j, (v->s.committed >> repo_region(p->r, i)->slot) & 1 ? "committed" : "pending");
    }
    json_obj_end(j);
    json_obj_end(j);
    json_key(j, "durable_latest");
    if (v->have_durable) {
        json_obj_begin(j);
        json_key(j, "id");
        json_str(j, v->durable_id);
        json_key(j, "step");
        json_i64(j, v->ds.step);
        json_key(j, "time");
        json_i64(j, v->ds.time);
        json_obj_end(j);
    } else {
        json_null(j);
    }
    json_obj_end(j);
}

/* The regions it copies chunks from (service/fanout.h), by name. */
static void status_copies_from(struct json *j, const struct repo *r, uint32_t from)
{
    json_key(j, "copies_from");
    json_arr_begin(j);
    for (size_t k = 0; k < repo_nregions(r); k++)
        if ((from >> k) & 1)
            json_str(j, repo_region(r, k)->conf.name);
    json_arr_end(j);
}

static void status_region(struct json *j, const struct repo *r, size_t i,
                          const struct region_view *v, int64_t now_mono)
{
    const struct region *rg = repo_region(r, i);
    const struct region_status *st = &v->st;
    bool current = st->last_error[0] && st->state != REGION_OK;
    json_obj_begin(j);
    json_key(j, "name");
    json_str(j, rg->conf.name);
    json_key(j, "kind");
    json_str(j, rg->ops->kind);
    if (rg->conf.kind == REGION_KIND_S3) {
        json_key(j, "tls_verify");
        json_bool(j, rg->conf.tls_verify);
    }
    json_key(j, "state");
    json_str(j, region_states[st->state]);
    json_key(j, "access_denied"); /* the region refused the credentials */
    json_bool(j, st->state != REGION_OK && st->last_code == CKS_E_DENIED);
    json_key(j, "pending_chunks");
    json_u64(j, v->chunks);
    json_key(j, "pending_bytes");
    json_u64(j, v->bytes);
    json_key(j, "lag_seconds");
    json_double(j, v->lag);
    json_key(j, "objects_put");
    json_u64(j, st->objects_put);
    json_key(j, "bytes_put");
    json_u64(j, st->bytes_put);
    json_key(j, "objects_copied");
    json_u64(j, st->objects_copied);
    json_key(j, "bytes_copied");
    json_u64(j, st->bytes_copied);
    json_key(j, "copies_failed");
    json_u64(j, st->copies_failed);
    status_copies_from(j, r, st->copies_from);
    json_key(j, "failures");
    json_u64(j, st->failures);
    json_key(j, "retry_in_seconds");
    if (st->state == REGION_BACKOFF)
        json_double(j,
                    st->retry_at_ms > now_mono ? (double)(st->retry_at_ms - now_mono) / 1000 : 0);
    else
        json_null(j);
    json_key(j, "last_error");
    if (current)
        json_str(j, st->last_error);
    else
        json_null(j);
    json_key(j, "last_error_time");
    json_time_ms(j, current ? st->last_error_ms : 0);
    json_key(j, "last_failure");
    if (st->last_error[0] && st->last_error_ms) {
        json_obj_begin(j);
        json_key(j, "error");
        json_str(j, st->last_error);
        json_key(j, "time");
        json_time_ms(j, st->last_error_ms);
        json_obj_end(j);
    } else {
        json_null(j);
    }
    json_key(j, "last_success_time");
    json_time_ms(j, st->last_success_ms);
    json_obj_end(j);
}

static void status_regions(const struct daemon_parts *p, struct index_txn *t, struct json *j)
{
    uint64_t chunks = 0, bytes = 0;
    double lag = 0;
    json_key(j, "regions");
    json_arr_begin(j);
    for (size_t i = 0; i < repo_nregions(p->r); i++) {
        struct region_view v;
        region_view(p, t, i, &v);
        status_region(j, p->r, i, &v, mstime_mono());
        chunks += v.chunks;
        bytes += v.bytes;
        lag = v.lag > lag ? v.lag : lag;
    }
    json_arr_end(j);
    json_key(j, "queue");
    json_obj_begin(j);
    json_key(j, "snapshots");
    json_u64(j, statusview_pending_snapshots(t));
    json_key(j, "chunks");
    json_u64(j, chunks);
    json_key(j, "bytes");
    json_u64(j, bytes);
    json_key(j, "lag_seconds");
    json_double(j, lag);
    json_obj_end(j);
    /* ingest's encoded objects (objbuf.h): evicted ones are read back from
     * the pin and encoded again by the regions that still needed them */
    struct objbuf_stats ob;
    objbuf_stats(replicator_objbuf(p->rp), &ob);
    const struct {
        const char *key;
        uint64_t v;
    } obf[] = {{"objects", ob.entries}, {"bytes", ob.bytes},     {"puts", ob.puts},
               {"hits", ob.hits},       {"evicted", ob.evicted}, {"waits", ob.waits}};
    json_key(j, "object_buffer");
    json_obj_begin(j);
    for (size_t k = 0; k < sizeof(obf) / sizeof(obf[0]); k++) {
        json_key(j, obf[k].key);
        json_u64(j, obf[k].v);
    }
    json_obj_end(j);
}

/* An endpoint without "user:password@", should one have been written. */
static void json_endpoint(struct json *j, const char *url)
{
    const char *host = strstr(url, "://");
    host = host ? host + 3 : url;
    size_t hl = strcspn(host, "/");
    const char *at = memchr(host, '@', hl);
    if (!at) {
        json_str(j, url);
        return;
    }
    struct buf b = BUF_INIT;
    buf_printf(&b, "%.*s%s", (int)(host - url), url, at + 1);
    json_str(j, buf_str(&b));
    buf_free(&b);
}

static void json_opt_str(struct json *j, const char *s)
{
    if (s[0])
        json_str(j, s);
    else
        json_null(j);
}

static void status_config_region(struct json *j, const struct region_conf *rc)
{
    json_obj_begin(j);
    json_key(j, "name");
    json_str(j, rc->name);
    json_key(j, "kind");
    json_str(j, rc->kind == REGION_KIND_S3 ? "s3" : "dir");
    if (rc->kind == REGION_KIND_DIR) {
        json_key(j, "path");
        json_str(j, rc->path);
    } else {
        json_key(j, "endpoint");
        json_endpoint(j, rc->endpoint);
        json_key(j, "bucket");
        json_str(j, rc->bucket);
        json_key(j, "prefix");
        json_str(j, rc->prefix);
        json_key(j, "region");
        json_str(j, rc->signing_region);
        json_key(j, "addressing");
        json_str(j, rc->virtual_hosted ? "virtual" : "path");
        json_key(j, "payload");
        json_str(j, rc->unsigned_payload ? "unsigned" : "signed");
        json_key(j, "tls_verify");
        json_bool(j, rc->tls_verify);
        json_key(j, "credentials_file");
        json_opt_str(j, rc->credentials);
    }
    json_key(j, "connections");
    json_u64(j, rc->connections);
    json_key(j, "bandwidth");
    json_u64(j, rc->bandwidth);
    json_key(j, "preconditions");
    json_str(j, rc->no_preconditions ? "none" : "auto");
    json_obj_end(j);
}

/* What the daemon runs with; never a credential (only the file's path). */
static void status_config(const struct daemon_parts *p, struct json *j)
{
    const struct config *c = p->conf;
    json_key(j, "config");
    json_obj_begin(j);
    json_key(j, "file");
    json_opt_str(j, c->source);
    json_key(j, "watch");
    json_str(j, c->watch);
    json_key(j, "state");
    json_str(j, c->state);
    json_key(j, "socket");
    json_str(j, c->socket);
    json_key(j, "quorum");
    json_u64(j, c->quorum);
    json_key(j, "settle");
    json_u64(j, c->settle);
    json_key(j, "memory");
    json_u64(j, c->memory);
    json_key(j, "chunker");
    json_obj_begin(j);
    json_key(j, "min");
    json_u64(j, c->chunk_min);
    json_key(j, "avg");
    json_u64(j, c->chunk_avg);
    json_key(j, "max");
    json_u64(j, c->chunk_max);
    json_key(j, "normalization");
    json_u64(j, c->normalization);
    json_obj_end(j);
    json_key(j, "compress_level");
    json_i64(j, c->zstd_level);
    json_key(j, "compress_tensor");
    json_str(j, c->tensor ? "auto" : "off");
    json_key(j, "durable_first");
    json_str(j, c->durable_first == DURABLE_FIRST_ON    ? "on"
                : c->durable_first == DURABLE_FIRST_OFF ? "off"
                                                        : "auto");
    json_key(j, "prune_interval");
    json_u64(j, c->prune_interval);
    json_key(j, "metrics");
    json_opt_str(j, c->metrics);
    json_key(j, "metrics_textfile");
    json_opt_str(j, c->metrics_textfile);
    json_key(j, "control_idle_timeout");
    json_u64(j, c->control_idle_timeout);
    json_key(j, "nodes");
    json_u64(j, config_nodes(c));
    json_key(j, "node_rank");
    json_u64(j, c->node_rank);
    json_key(j, "part_timeout");
    json_u64(j, c->part_timeout);
    json_key(j, "part_expire");
    json_u64(j, c->part_expire);
    json_key(j, "regions");
    json_arr_begin(j);
    for (size_t i = 0; i < c->nregions; i++)
        status_config_region(j, &c->regions[i]);
    json_arr_end(j);
    json_obj_end(j);
}

static void status_degraded(const struct daemon_parts *p, struct json *j)
{
    char why[INDEX_FATAL_WHY];
    int64_t since = 0;
    bool deg = index_fatal(repo_index(p->r), why, sizeof(why), &since);
    json_key(j, "degraded");
    json_bool(j, deg);
    json_key(j, "degraded_reason");
    if (deg)
        json_str(j, why);
    else
        json_null(j);
    json_key(j, "degraded_time");
    json_time_ms(j, deg ? since : 0);
}

int statusview_json(const struct daemon_parts *p, struct buf *out)
{
    struct index_txn *t;
    struct json j;
    int e = index_txn_begin(repo_index(p->r), false, &t);
    if (e < 0)
        return e;
    json_init(&j, out);
    json_obj_begin(&j);
    json_key(&j, "version");
    json_str(&j, CKS_VERSION);
    json_key(&j, "pid");
    json_i64(&j, getpid());
    json_key(&j, "watch");
    json_str(&j, p->root);
    json_key(&j, "time");
    json_time_ms(&j, mstime_wall());
    json_key(&j, "started_time");
    json_time_ms(&j, p->started_wall_ms);
    json_key(&j, "uptime_seconds");
    json_double(&j, (double)(mstime_mono() - p->started_ms) / 1000);
    status_degraded(p, &j);
    json_key(&j, "encrypted");
    json_bool(&j, repo_encrypted(p->r));
    json_key(&j, "quorum");
    json_u64(&j, p->conf->quorum);
    json_key(&j, "units_pending");
    json_u64(&j, detector_pending(p->det));
    json_key(&j, "ingest_busy");
    json_u64(&j, ingester_busy(p->ig));
    json_key(&j, "runs");
    json_arr_begin(&j);
    struct status_acc sa = {&j, t};
    e = runs_foreach(p, t, status_emit_run, &sa);
    json_arr_end(&j);
    json_key(&j, "incomplete"); /* a multi-node job's steps not all in (service/incomplete.h) */
    jobwatch_json(p->jw, &j);
    status_regions(p, t, &j);
    status_config(p, &j);
    json_obj_end(&j);
    index_txn_abort(t);
    return e < 0 ? e : j.err;
}

/* ---- metrics ----------------------------------------------------------- */

struct run_gauges {
    struct run_view *v;
    size_t n, cap;
    int err;
};

static void gauges_emit_run(struct run_scan *a, const struct run_view *v)
{
    struct run_gauges *g = a->ud;
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        struct run_view *nv = realloc(g->v, cap * sizeof(*nv));
        if (!nv) {
            g->err = -ENOMEM;
            return;
        }
        g->v = nv;
        g->cap = cap;
    }
    g->v[g->n++] = *v;
}

static void gauges_runs(const struct daemon_parts *p, const struct run_gauges *g, struct buf *out)
{
    static const struct {
        const char *name, *help;
    } fam[] = {
        {"ckptsync_snapshot_latest_timestamp_seconds", "Time the run's latest snapshot was taken."},
        {"ckptsync_snapshot_latest_step", "Training step of the run's latest snapshot."},
        {"ckptsync_snapshot_latest_regions", "Regions that committed the run's latest snapshot."},
        {"ckptsync_snapshot_durable_timestamp_seconds",
         "Time the run's newest durable snapshot (committed in quorum regions) was taken."},
    };
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        metrics_family(out, fam[f].name, "gauge", fam[f].help);
        for (size_t i = 0; i < g->n; i++) {
            const struct run_view *v = &g->v[i];
            struct metrics_label l = {"run", v->run};
            double val = f == 0   ? (double)v->s.time
                         : f == 1 ? (double)v->s.step
                         : f == 2 ? (double)snap_regions(p, v->s.committed)
                                  : (double)v->ds.time;
            if (f < 3 || v->have_durable)
                metrics_sample(out, fam[f].name, &l, 1, val);
        }
    }
}

static void gauges_regions(const struct daemon_parts *p, struct index_txn *t, struct buf *out)
{
    static const struct {
        const char *name, *help;
    } fam[] = {
        {"ckptsync_queue_chunks", "Chunks queued for the region."},
        {"ckptsync_queue_bytes", "Bytes of the chunks queued for the region (uncompressed)."},
        {"ckptsync_replication_lag_seconds",
         "Age of the oldest snapshot the region has not committed yet; 0 when it is caught up."},
        {"ckptsync_region_healthy",
         "1 when the region's last round succeeded, 0 in backoff or failed."},
        {"ckptsync_region_consecutive_failures", "Failed rounds since the region's last success."},
    };
    struct region_view v[CONFIG_MAX_REGIONS];
    for (size_t i = 0; i < repo_nregions(p->r); i++)
        region_view(p, t, i, &v[i]);
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        metrics_family(out, fam[f].name, "gauge", fam[f].help);
        for (size_t i = 0; i < repo_nregions(p->r); i++) {
            struct metrics_label l = {"region", repo_region(p->r, i)->conf.name};
            double val = f == 0   ? (double)v[i].chunks
                         : f == 1 ? (double)v[i].bytes
                         : f == 2 ? v[i].lag
                         : f == 3 ? (v[i].st.state == REGION_OK ? 1 : 0)
                                  : (double)v[i].st.failures;
            metrics_sample(out, fam[f].name, &l, 1, val);
        }
    }
}

static void gauges_daemon(const struct daemon_parts *p, struct index_txn *t, struct buf *out)
{
    metrics_family(out, "ckptsync_start_time_seconds", "gauge",
                   "Time the daemon started or last reloaded its configuration.");
    metrics_sample(out, "ckptsync_start_time_seconds", NULL, 0, (double)p->started_wall_ms / 1000);
    metrics_family(out, "ckptsync_degraded", "gauge",
                   "1 after a durability failure: the daemon takes no new work.");
    metrics_sample(out, "ckptsync_degraded", NULL, 0,
                   index_fatal(repo_index(p->r), NULL, 0, NULL) ? 1 : 0);
    metrics_family(out, "ckptsync_units_pending", "gauge",
                   "Units waiting to settle or being read.");
    metrics_sample_u64(out, "ckptsync_units_pending", NULL, 0,
                       detector_pending(p->det) + ingester_busy(p->ig));
    metrics_family(out, "ckptsync_snapshots_pending", "gauge",
                   "Snapshots not yet committed in every region.");
    metrics_sample_u64(out, "ckptsync_snapshots_pending", NULL, 0, statusview_pending_snapshots(t));
}

int statusview_metrics(const struct daemon_parts *p, struct buf *out)
{
    struct index_txn *t;
    struct run_gauges g = {0};
    int e = index_txn_begin(repo_index(p->r), false, &t);
    if (e < 0)
        return e;
    e = runs_foreach(p, t, gauges_emit_run, &g);
    if (e >= 0 && g.err == 0) {
        metrics_counters(p->m, out);
        gauges_daemon(p, t, out);
        gauges_regions(p, t, out);
        gauges_runs(p, &g, out);
    }
    index_txn_abort(t);
    free(g.v);
    return e < 0 ? e : g.err;
}
