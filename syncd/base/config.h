/*
 * config.h — the configuration file (INI, parsed with libinih).
 *
 * Every key has a default (config_default()); config_load() overlays a
 * file and validates the result.  Errors name file, line and key:
 *   "/etc/ckptsync.conf:12: [chunker] avg: '3X' is not a size"
 * Sizes accept K, M, G, T suffixes (powers of 1024), e.g. "4M"; durations
 * are seconds with one optional lower-case s, m, h or d suffix, e.g. "6h".
 *
 *   [daemon]  watch, state, quorum, settle, socket, memory, workers, readers,
 *             create_settle,
 *             durable_first = auto|on|off,
 *             metrics (HOST:PORT or PORT, off by default), metrics_textfile,
 *             control_idle_timeout, nodes, node_rank, part_timeout, part_expire (a job on
 *             several nodes: config_nodes_env)
 *   [chunker] min, avg, max, normalization
 *   [compress] level, tensor, derive_bf16, keyframe_every, keyframe_fetch
 *   [retention], [retention.RUN]  keep_last, keep_every, keep_within,
 *                 keep_best, best_metric, best_mode  (the default policy,
 *                 and one run's: a run's section replaces the default whole)
 *   [prune]   grace, interval, intent_ttl, clock_skew, lease
 *   [restore] order: "GROUP:PATTERN ..." (service/restore.h, restore_group)
 *   [restore] inflight: bytes in flight across a group boundary (service/fetch.h)
 *   [region.NAME] kind = dir|s3, path (dir), preconditions = auto|none,
 *                 copy_from = auto|none|REGION, ... (server-side copies)
 *                 endpoint, bucket, prefix, region, addressing, payload,
 *                 credentials, tls_verify, ca_file, connections, bandwidth (s3)
 *
 * Syntax is inih's: ';' or '#' comment lines, " ;" inline comments,
 * "key = value" or "key: value"; lines are limited to inih's line buffer
 * (197 characters in default builds) and multi-line values are rejected.
 * A region's kind defaults to dir.
 *
 * With no file at all, config_default() is the embedded default: watch
 * /data/cloud_storage, state /var/lib/ckptsync, three dir regions a, b, c
 * under <state>/regions/.  A file must name its regions: one with no
 * [region.NAME] section (an empty file included) is refused, naming the
 * file, rather than replicating into three folders on one disk.
 *
 * A struct config owns no heap memory (fixed-size fields), so it can be
 * copied by value.  Not thread-safe while loading.
 */
#ifndef CKS_CONFIG_H
#define CKS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define CONFIG_MAX_REGIONS 8
#define CONFIG_KEYFRAME_MAX 64 /* [compress] keyframe_every */
#define CONFIG_PATH_MAX 4096
#define CONFIG_NAME_MAX 64
#define CONFIG_LISTEN_MAX 64
#define CONFIG_ORDER_MAX 256 /* [restore] order, one line */

/* A TCP listening address: numeric host (IPv4, or IPv6 without brackets). */
struct config_listen {
    int family; /* AF_INET or AF_INET6 */
    char host[CONFIG_LISTEN_MAX];
    unsigned port; /* 1..65535 */
};

enum region_kind { REGION_KIND_DIR = 0, REGION_KIND_S3 = 1 };
/* [daemon] durable_first: the regions past the first `quorum` hold back
 * while a snapshot is not yet durable (daemon/replicator.c). */
enum config_durable_first { DURABLE_FIRST_AUTO = 0, DURABLE_FIRST_ON, DURABLE_FIRST_OFF };

struct region_conf {
    char name[CONFIG_NAME_MAX]; /* [region.NAME]: [A-Za-z0-9_-]{1,63} */
    enum region_kind kind;
    char path[CONFIG_PATH_MAX]; /* dir: the region's directory */
    /* s3 */
    char endpoint[1024];
    char bucket[256];
    char prefix[1024];
    char signing_region[64]; /* key "region", default us-east-1 */
    bool virtual_hosted;     /* addressing = virtual|path (default path) */
    bool unsigned_payload;   /* payload = signed|unsigned */
    char credentials[CONFIG_PATH_MAX];
    bool tls_verify; /* default true */
    char ca_file[CONFIG_PATH_MAX];
    unsigned connections;  /* default 16, 1..256 */
    uint64_t bandwidth;    /* bytes/s, 0 = unlimited */
    bool no_preconditions; /* preconditions = none|auto (default auto):
                            * none = never ask for create-only puts
                            * (see region_set_preconditions) */
    /* copy_from: the regions this one may get chunks from by server-side
     * copy (issue 25; service/fanout.h): "" = auto (whichever a probe says
     * can), "none", or names of other regions separated by ','
     * (config_copy_from) */
    char copy_from[CONFIG_MAX_REGIONS * (CONFIG_NAME_MAX + 2)];
};

/* A retention policy (service/retention.h).  A snapshot is kept when any
 * rule keeps it; a policy with no rule keeps everything (the default). */
#define CONFIG_MAX_POLICIES 16
#define CONFIG_RUN_MAX 64 /* [retention.RUN]: run names up to 63 bytes */
#define CONFIG_METRIC_MAX 64

struct retention_policy {
    char run[CONFIG_RUN_MAX];            /* "" for [retention], the default */
    unsigned keep_last;                  /* the N newest; 0 = rule off */
    uint64_t keep_every;                 /* steps divisible by K; 0 = off */
    uint64_t keep_within;                /* seconds before the newest snapshot; 0 = off */
    unsigned keep_best;                  /* the M best by best_metric; 0 = off */
    char best_metric[CONFIG_METRIC_MAX]; /* a trainer_state.json log_history key,
                                          * default "eval_loss" */
    bool best_max;                       /* best_mode = min|max (default min) */
};

struct config {
    char source[CONFIG_PATH_MAX]; /* file it came from, "" = embedded */
    /* [daemon] */
    char watch[CONFIG_PATH_MAX];             /* default /data/cloud_storage */
    char state[CONFIG_PATH_MAX];             /* default /var/lib/ckptsync */
    char socket[CONFIG_PATH_MAX];            /* default <state>/ckptsyncd.sock */
    unsigned quorum;                         /* default 2, 1..nregions */
    unsigned settle;                         /* seconds, default 10 */
    unsigned create_settle;                  /* seconds a creator waits for rival repository
                                              * candidates where a store cannot refuse a
                                              * second create (service/repo.c), default 10 */
    uint64_t memory;                         /* memory budget, default 1G */
    unsigned workers;                        /* threads for cutting, hashing, compression and
                                              * restore; 0 (default): one per online CPU */
    unsigned readers;                        /* files of a snapshot read and cut at once
                                              * (service/ingcore.c); 0 (default): workers */
    char metrics[CONFIG_LISTEN_MAX];         /* Prometheus /metrics address as written
                                              * (config_parse_listen), "" = off (default) */
    char metrics_textfile[CONFIG_PATH_MAX];  /* node_exporter textfile (*.prom), "" = none */
    enum config_durable_first durable_first; /* auto (default): on when every region is s3 */
    unsigned control_idle_timeout;           /* seconds a control client has to send its request
                                              * line (and to read its answer), default 5, 1..3600 */
    unsigned nodes;                          /* nodes of the job; 0: not set (1 unless the
                                              * environment says: config_nodes_env) */
    unsigned node_rank;                      /* this node, 0..nodes-1, default 0 */
    uint64_t part_timeout;                   /* seconds a step's parts may take to be all
                                              * in before it is shown incomplete, default 1h */
    uint64_t part_expire;                    /* seconds a part of a step no region committed
                                              * stays a prune root, default 7d (> part_timeout) */
    /* [chunker] */
    uint64_t chunk_min, chunk_avg, chunk_max; /* defaults 512K, 2M, 8M */
    unsigned normalization;                   /* default 1, 0..3 */
    /* [compress] */
    int zstd_level;   /* default 3, 1..19 */
    bool tensor;      /* float chunks as byte planes (engine/tcodec.h): "auto" (default) or "off" */
    bool derive_bf16; /* bf16 tensors that round the snapshot's fp32 ones stored as recipes
                       * (service/dwrite.h): "on" (default) or "off" */
    unsigned keyframe_every; /* 1..CONFIG_KEYFRAME_MAX, default 8: `ckptsync snapshot` stores
                              * a checkpoint's tensors as XOR against the run's latest
                              * keyframe, and every Nth as a keyframe (service/keyframe.h);
                              * 1: every snapshot is a keyframe */
    bool keyframe_fetch;     /* a keyframe's bytes with no local copy fetched from the
                              * regions for the deltas (on), or those deltas not
                              * written (off, the default: a download of the
                              * keyframe costs more than the delta saves) */
    /* [repository]: applies when a repository is created; an existing one
     * says itself whether it is encrypted (engine/repoobj.h) */
    bool encryption;                       /* "aes-256-gcm", default "none" */
    char key_file[CONFIG_PATH_MAX];        /* 32 bytes or 64 hex, mode 0600 */
    char passphrase_file[CONFIG_PATH_MAX]; /* else $CKPTSYNC_PASSPHRASE */
    /* [retention] (default policy) and [retention.RUN] */
    struct retention_policy retention;
    size_t npolicies;
    struct retention_policy policies[CONFIG_MAX_POLICIES];
    /* [prune] (durations accept s, m, h, d suffixes; a bare number is seconds) */
    uint64_t prune_grace;    /* seconds between mark and sweep, default 3600 */
    uint64_t prune_interval; /* the daemon prunes this often; 0 = never (default) */
    uint64_t intent_ttl;     /* a writer's intent lives at most this long, default 6h */
    uint64_t clock_skew;     /* tolerated clock difference between instances, default 300 */
    uint64_t prune_lease;    /* seconds a prune's lease lasts unrenewed, default 900 */
    /* [restore] order: space-separated GROUP:PATTERN items, GROUP one
     * of metadata, weights, master, optimizer (restore_group_name()), a
     * non-empty fnmatch PATTERN; tried in order before the built-in rules
     * (restore_group()); "" (default) = the built-in rules alone */
    char restore_order[CONFIG_ORDER_MAX];
    /* [restore] inflight: while a priority group's requests are still in
     * flight, the next group's are sent only while all requests in flight
     * stay within this many bytes (service/fetch.h); default 16 MiB, 0 =
     * the next group waits for the last answer of the one before */
    uint64_t restore_inflight;
    /* [snapshot] file_digest: "tree" (default, false) or "sha256" (true),
     * the kind of each regular file's digest in new snapshots
     * (engine/filedigest.h) */
    bool file_digest_sha256;
    /* [region.*] */
    bool default_regions; /* regions are the embedded a, b, c */
    bool default_socket;
    size_t nregions;
    struct region_conf regions[CONFIG_MAX_REGIONS];
};

/* The daemon's node identity (a job on several nodes, README "Multi-node
 * jobs"): CKPTSYNC_NODES and CKPTSYNC_NODE_RANK override the file's
 * nodes and node_rank; where the file sets no nodes, Slurm's SLURM_NNODES
 * and SLURM_NODEID are taken.  get is getenv (a parameter so that tests
 * can pass a table).  Afterwards nodes >= 1 and node_rank < nodes, or
 * CKS_E_CONFIG with err naming the variable or key. */
int config_nodes_env(struct config *c, char *(*get)(const char *name), struct buf *err);
/* The job's node count: nodes, or 1 where it is not set. */
unsigned config_nodes(const struct config *c);

/* Fill with the embedded default (three dir regions under state). */
void config_default(struct config *c);
/* Load path over the defaults and validate.  On error returns CKS_E_CONFIG
 * (or -errno when the file cannot be read) and puts one human-readable
 * message naming file, line and key into err. */
int config_load(const char *path, struct config *c, struct buf *err);
/* The same for text already in memory; name is used in messages. */
int config_parse(const char *name, const char *text, size_t len, struct config *c, struct buf *err);
/* Re-derive values that depend on others (region paths under state, the
 * socket path) after a field such as state was changed by a command-line
 * option, and validate again. */
int config_finish(struct config *c, struct buf *err);
/* One warning (log_warn) per S3 region with tls_verify = false, naming
 * it; front ends call it once at start.  Returns how many it wrote. */
size_t config_warn_insecure(const struct config *c);
/* "4M" -> 4194304.  Returns 0 or CKS_E_CONFIG. */
int config_parse_size(const char *s, uint64_t *ret);
/* "90", "90s", "15m", "6h", "7d" -> seconds.  Returns 0 or CKS_E_CONFIG. */
int config_parse_duration(const char *s, uint64_t *ret);
/* "127.0.0.1:9477", "[::1]:9477", "localhost:9477" or a bare "9477" (all
 * loopback), or another numeric address written out in full such as
 * "0.0.0.0:9477".  ":9477" and host names are refused: an address that
 * leaves the machine is never implied.  Returns 0 or CKS_E_CONFIG. */
int config_parse_listen(const char *s, struct config_listen *ret);
/* The policy for run: its [retention.RUN] section, else [retention]. */
const struct retention_policy *config_policy(const struct config *c, const char *run);
/* What [region.DST] copy_from says of copying from region src (indexes
 * into c->regions): -1 auto (probe), 0 never (none, a list without src,
 * or src == dst), 1 configured to copy. */
int config_copy_from(const struct config *c, size_t dst, size_t src);
/* Does the policy remove anything (some keep_* rule set)? */
bool retention_policy_active(const struct retention_policy *p);

#endif
