/*
 * layout.h — the repository's key layout: the one module that turns a
 * (kind, run or mark, name) into an object key and a listed key back into
 * one (restic's layout), from the CKS_KEY_* constants of
 * include/ckptsync/format.h (section 1 lists every key).  Keys are
 * relative to a region's prefix.  Pure: no I/O, no allocation,
 * thread-safe.
 *
 * Building:
 *
 *   char key[LAYOUT_KEY_MAX];
 *   layout_chunk(id, key);                          chunks/ab/ab...
 *   if (layout_snapshot(run, sid, key) < 0) ...     snapshots/<run>/<sid>
 *   if (layout_key(LAYOUT_INTENT, NULL, name, key) < 0) ...
 *   layout_prefix(LAYOUT_SNAPSHOT, run_or_NULL, key);   for region_list
 *
 * Parsing a key a region listed (outside input: a bucket holds whatever
 * anyone wrote):
 *
 *   struct layout_key k;
 *   if (layout_parse(key, &k) == 0 && k.kind == LAYOUT_SNAPSHOT) ... k.dir, k.name
 *
 * A field is one key component: non-empty, no '/', not "." or "..", and
 * short enough (LAYOUT_DIR_MAX, LAYOUT_NAME_MAX).  A run is checked as
 * manifest_run_check says and a snapshot id as manifest_id_check says; a
 * chunk key is exactly chunks/<2 hex>/<64 lower-case hex>, the 2 being the
 * first two of the 64, and a recipe key recipes/<2 hex>/<64 hex>.<16 hex>
 * likewise (all lower case).  Records under commits/, lineage/ and forget/ name
 * their facts in the key (engine/lineage.h): layout_record() and
 * layout_record_parse() build and read those whole.
 */
#ifndef CKS_LAYOUT_H
#define CKS_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/hash.h"
#include "engine/lineage.h"
#include "engine/manifest.h"

#define LAYOUT_KEY_MAX 1024
#define LAYOUT_DIR_MAX MANIFEST_MAX_FIELD /* a run (or a gc mark) */
#define LAYOUT_NAME_MAX 255               /* the last component */

enum layout_kind {
    LAYOUT_REPO,       /* repo */
    LAYOUT_REPO_CAND,  /* repo.d/<name> */
    LAYOUT_PROBE,      /* probe/<name> */
    LAYOUT_KEYSLOT,    /* keys/<name> */
    LAYOUT_RUNNAME,    /* runs/<name> */
    LAYOUT_CHUNK,      /* chunks/<2 hex>/<64 hex>: name is the 64 hex */
    LAYOUT_SNAPSHOT,   /* snapshots/<run>/<id> */
    LAYOUT_COMMIT,     /* commits/<run>/<name> */
    LAYOUT_LINEAGE,    /* lineage/<run>/<name> */
    LAYOUT_FORGET,     /* forget/<run>/<name> */
    LAYOUT_PART,       /* parts/<run>/s<step>.<K>-of-<N>.<id> */
    LAYOUT_NODEERR,    /* nodeerr/<run>/s<step>.<K>-of-<N>.<time>.<16 hex> */
    LAYOUT_HANDOFF_V1, /* handoff/<run> (version 1, read only) */
    LAYOUT_REF_V1,     /* refs/<run>/<name> (version 1, read only) */
    LAYOUT_INTENT,     /* intents/<name> */
    LAYOUT_GC,         /* gc/<mark>/<name> */
    LAYOUT_LEASE,      /* locks/prune/<name> */
    LAYOUT_RECIPE,     /* recipes/<2 hex>/<64 hex>.<16 hex>: name is "<64 hex>.<16 hex>" */
    LAYOUT_NKINDS
};

struct layout_key {
    enum layout_kind kind;
    char dir[LAYOUT_DIR_MAX + 1];     /* the run, or gc's mark; "" for other kinds */
    char name[LAYOUT_NAME_MAX + 1];   /* the last component; "" for repo, handoff */
    uint8_t id[HASH_LEN];             /* chunk, recipe: the id its name spells */
    uint8_t sig[MANIFEST_RECIPE_SIG]; /* recipe: its bases' signature */
};

/* The key of (kind, dir, name) into out (LAYOUT_KEY_MAX bytes).  dir is
 * the run or mark where the kind has one (else ignored, may be NULL),
 * name the last component where the kind has one.  -EINVAL when a field
 * cannot form that key (out is then ""). */
int layout_key(enum layout_kind kind, const char *dir, const char *name, char *out);
/* The repository object's key ("repo"). */
const char *layout_repo(void);
/* chunks/<2 hex>/<64 hex> of id; cannot fail. */
void layout_chunk(const uint8_t id[HASH_LEN], char *out);
/* recipes/<2 hex>/<64 hex>.<16 hex> of a recipe of chunk id over bases
 * whose signature is sig (engine/manifest.h manifest_recipe_sig); cannot
 * fail. */
void layout_recipe(const uint8_t id[HASH_LEN], const uint8_t sig[MANIFEST_RECIPE_SIG], char *out);
/* snapshots/<run>/<id>; -EINVAL for a run or id the manifest format
 * refuses. */
int layout_snapshot(const char *run, const char *id, char *out);

/* What to list for kind's keys: "<top>/" with dir NULL, "<top>/<dir>/"
 * with one (handoff: "handoff/<run>", its one key); -EINVAL for a dir that
 * is not one component, or a kind that has no folder (repo). */
int layout_prefix(enum layout_kind kind, const char *dir, char *out);

/* Parses a key (as listed, relative to the prefix) into ret: 0, or
 * CKS_E_FORMAT when it is not a key of this layout (ret untouched). */
int layout_parse(const char *key, struct layout_key *ret);

/* A commit, claim, handoff or forget record's key (engine/lineage.h names
 * the part after the run); out holds cap bytes.  -EINVAL when a field
 * cannot form a key. */
int layout_record(const struct lineage_rec *r, char *out, size_t cap);
/* Parses such a key: fills kind, run, gen, step, id or tag.
 * CKS_E_FORMAT when it is not one. */
int layout_record_parse(const char *key, struct lineage_rec *ret);
/* Parses a record's body read from key and checks it against the key:
 * lineage_parse's codes, CKS_E_FORMAT for a key that is not a record's,
 * CKS_E_MISMATCH when body and key disagree. */
int layout_record_read(const char *key, const uint8_t *data, size_t len, struct lineage_rec *ret);

/* A multi-node step's part (format.h section 9): what its key names. */
struct layout_part {
    char run[LAYOUT_DIR_MAX + 1];
    int64_t step;                 /* >= 0 */
    unsigned rank, nodes;         /* rank < nodes <= LAYOUT_NODES_MAX */
    char id[MANIFEST_ID_MAX + 1]; /* the node's manifest id */
};
#define LAYOUT_NODES_MAX 4096u
/* parts/<run>/s<step>.<K>-of-<N>.<id> into out (LAYOUT_KEY_MAX bytes);
 * -EINVAL for a field out of range. */
int layout_part(const struct layout_part *p, char *out);
/* What to list for one step's parts: "parts/<run>/s<step>." (a prefix
 * no other step's keys share); -EINVAL for a bad run or a step < 0. */
int layout_part_prefix(const char *run, int64_t step, char *out);
/* Parses such a key (outside input): 0, or CKS_E_FORMAT. */
int layout_part_parse(const char *key, struct layout_part *ret);
/* As layout_part_parse, but a rank not below the node count is parsed
 * too (ret->rank >= ret->nodes): what a bad part claims, to be named. */
int layout_part_parse_any(const char *key, struct layout_part *ret);

/* A node's error record on a step (format.h section 9). */
struct layout_nodeerr {
    char run[LAYOUT_DIR_MAX + 1];
    int64_t step;         /* >= 0 */
    unsigned rank, nodes; /* rank < nodes <= LAYOUT_NODES_MAX */
    int64_t time;         /* unix seconds (UTC in the key) */
    char tag[17];         /* 16 lower-case hex: tells two records of one second apart */
};
/* nodeerr/<run>/s<step>.<K>-of-<N>.<YYYYmmddTHHMMSSZ>.<tag> into out
 * (LAYOUT_KEY_MAX bytes); -EINVAL for a field out of range. */
int layout_nodeerr(const struct layout_nodeerr *n, char *out);
/* Parses such a key (outside input): 0, or CKS_E_FORMAT. */
int layout_nodeerr_parse(const char *key, struct layout_nodeerr *ret);

/* For a key (or a listing prefix) in one of the per-run folders
 * (snapshots, commits, lineage, forget, parts, nodeerr, handoff, refs): its kind, and in
 * *ret_top the length of "<top>/" before the run.  -1 for any other key. */
int layout_run_top(const char *key, size_t *ret_top);
/* Whether a key listed under prefix (possibly partial: "", "snap",
 * "snapshots/r1/") can lie in one of those per-run folders. */
bool layout_prefix_has_runs(const char *prefix);
/* Whether an encrypted repository seals the object at key: every one but
 * what an instance reads before it can unlock (repo, repo.d/, keys/,
 * probe/). */
bool layout_sealed(const char *key);

#endif
