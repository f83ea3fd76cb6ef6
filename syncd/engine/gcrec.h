/*
 * gcrec.h — the records that let prune delete chunks while other instances
 * upload (protocol: service/gc.h; formats: include/ckptsync/format.h,
 * section 8).  Pure transform; the parsers take hostile input (bounded,
 * strict, checksummed).
 *
 * Keys:
 *   intents/<YYYYmmddTHHMMSSZ>.<ttl>.<16 hex>   a writer relies on what it
 *                                               sees in this region from
 *                                               that time, for <ttl> s
 *   gc/<mark>/mark                              the candidates of one prune
 *   gc/<mark>/intents                           intents seen after the mark
 *   gc/<mark>/keep.<16 hex>                     a writer's snapshot names
 *                                               these candidates
 *   gc/<mark>/sweep.<expires>.<16 hex>          deleting has begun (until
 *                                               <expires>, unix seconds)
 *   gc/<mark>/done                              deleting is over; intents
 *                                               then alive
 *   locks/prune/<12 digits>                     the prune lease, numbered
 *
 * <mark> is "<YYYYmmddTHHMMSSZ>-<16 hex>": marks sort by time.
 *
 * Body (text, lines in this order, fields printable, one space):
 *   ckptsync-gc <1|2>             2 exactly when an "r" item is present,
 *                                  so a record without recipes reads as
 *                                  before with an older build
 *   kind mark|intents|keep|sweep|done|lease|intent
 *   mark <mark>                    ("-" for a lease or an intent)
 *   host <name>
 *   boot <32 hex>                  the host's boot id (/proc/sys/kernel/random/boot_id)
 *                                  or "-": with pid, tells a dead process on this host
 *   time <unix seconds>
 *   expires <unix seconds>         sweep, lease, intent; "-" otherwise (lease: "-" = released)
 *   seq <n>                        lease, intent: the writer's pid; "-" otherwise
 *                                  (a lease's number is its key's)
 *   snapshot <run>/<id>            keep: the snapshot; "-" otherwise
 *   items <n>
 *   n item lines:  "c <64 hex> <size>"   mark: candidates, sorted, each once
 *                                        keep: chunks (size 0)
 *                  "r <64 hex>.<16 hex> <size>"  (version 2) as "c", for a
 *                                        recipe object recipes/<id>.<sig>;
 *                                        c and r items in one order: by
 *                                        id, then c before r, then sig
 *                  "s <run>/<id>"        mark: the manifests it read
 *                  "i <intent name>"     intents, done
 *   end <sha256 of every byte before this line>
 */
#ifndef CKS_GCREC_H
#define CKS_GCREC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/hash.h"
#include "engine/manifest.h"

#define GC_MARK_LEN 33   /* 16 + 1 + 16 */
#define GC_INTENT_MAX 64 /* an intent's name (after "intents/") */
#define GC_FIELD_MAX 128
#define GC_MAX_ITEMS 4000000u /* a mark holds at most this many candidates */
#define GC_MAX_BYTES (512u * 1024 * 1024)

enum gc_kind { GC_MARK, GC_INTENTS, GC_KEEP, GC_SWEEP, GC_DONE, GC_LEASE, GC_INTENT };

/* An object a mark or keep names: chunks/<id>, or (recipe) the recipe
 * object recipes/<id>.<sig> (docs/deltas.md). */
struct gc_chunk {
    uint8_t id[HASH_LEN];
    uint64_t size;
    bool recipe;
    uint8_t sig[MANIFEST_RECIPE_SIG]; /* recipe only; zero otherwise */
};

struct gc_snapref {
    char run[MANIFEST_MAX_FIELD + 1];
    char id[MANIFEST_ID_MAX + 1];
};

struct gcrec {
    enum gc_kind kind;
    int version;                /* parsed: the body's version (1 or 2); encoding picks its own */
    char mark[GC_MARK_LEN + 1]; /* "" for a lease or an intent */
    char host[GC_FIELD_MAX + 1];
    char boot[33]; /* "" unknown */
    int64_t time;
    int64_t expires;         /* sweep, lease; -1 = none / released */
    int64_t seq;             /* lease, intent: the writer's pid; -1 otherwise */
    struct gc_snapref snap;  /* keep; empty otherwise */
    struct gc_chunk *chunks; /* mark, keep */
    size_t nchunks;
    struct gc_snapref *snaps; /* mark */
    size_t nsnaps;
    char (*intents)[GC_INTENT_MAX + 1]; /* intents, done */
    size_t nintents;
};

void gcrec_init(struct gcrec *g, enum gc_kind kind);
void gcrec_free(struct gcrec *g);
/* Appends an item (grows the arrays); -ENOMEM. */
int gcrec_add_chunk(struct gcrec *g, const uint8_t id[HASH_LEN], uint64_t size);
/* Appends a recipe object's item (id, sig). */
int gcrec_add_recipe(struct gcrec *g, const uint8_t id[HASH_LEN],
                     const uint8_t sig[MANIFEST_RECIPE_SIG], uint64_t size);
/* The order of items: by id, a chunk before a recipe, then by sig
 * (qsort/bsearch over struct gc_chunk). */
int gcrec_chunk_cmp(const void *a, const void *b);
int gcrec_add_snap(struct gcrec *g, const char *run, const char *id);
int gcrec_add_intent(struct gcrec *g, const char *name);

/* Sorts and dedups the items (mark and keep bodies must be sorted). */
void gcrec_sort_chunks(struct gcrec *g);
int gcrec_encode(const struct gcrec *g, struct buf *out);
/* 0, CKS_E_FORMAT, CKS_E_VERSION, CKS_E_DIGEST or -ENOMEM; g is
 * initialised by the call and must be freed (also after a failure). */
int gcrec_parse(const uint8_t *data, size_t len, struct gcrec *g);

/* Is chunks/<id> among g's (sorted) items? */
bool gcrec_has_chunk(const struct gcrec *g, const uint8_t id[HASH_LEN]);
/* Is the object (recipe: recipes/<id>.<sig>; else chunks/<id>, sig
 * ignored and may be NULL) among g's (sorted) items? */
bool gcrec_has_object(const struct gcrec *g, const uint8_t id[HASH_LEN], bool recipe,
                      const uint8_t *sig);

/* Names.  A mark id: now (UTC) and 64 random bits. */
int gc_mark_make(char out[GC_MARK_LEN + 1]);
bool gc_mark_check(const char *mark);
/* Unix time of a mark id (its first 16 characters), -1 if not one. */
int64_t gc_mark_time(const char *mark);
/* An intent's name "<YYYYmmddTHHMMSSZ>.<ttl>.<16 hex>" for time t. */
int gc_intent_make(int64_t t, uint64_t ttl, char out[GC_INTENT_MAX + 1]);
/* Parses an intent's name: its time and ttl; CKS_E_FORMAT if not one. */
int gc_intent_parse(const char *name, int64_t *ret_time, uint64_t *ret_ttl);
/* "sweep.<expires>.<16 hex>" -> expires; CKS_E_FORMAT if not one. */
int gc_sweep_parse(const char *name, int64_t *ret_expires);
/* Unix seconds of the "YYYYmmddTHHMMSS" at s (UTC; what follows is the
 * caller's to check), -1 if not exactly that: one spelling per instant. */
int64_t gc_utc_parse(const char *s);
/* This host's boot id as 32 hex digits ("" if unknown). */
void gc_boot_id(char out[33]);
/* Was rec (a lease or an intent, with boot and pid) written by a process
 * of this boot of this host that no longer runs?  A process running under
 * that pid that started more than skew seconds after rec's time is
 * another one (the pid was reused): the writer is gone. */
bool gc_owner_dead(const struct gcrec *rec, uint64_t skew);
/* 16 random lower-case hex digits. */
int gc_random_hex(char out[17]);

#endif
