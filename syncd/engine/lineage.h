/*
 * lineage.h — the write-once records that say what a run holds and who
 * owns it, and the keys they live under (format in
 * include/ckptsync/format.h, section 6).  Pure transform; parsers take
 * hostile input (bounded, strict).
 *
 * Nothing here is ever overwritten.  Every record has a name no other
 * writer can pick (a snapshot id, or 64 random bits), and the facts a
 * reader decides on (generation, step, snapshot) are in the key itself,
 * so "what is newest" is one listing per region, no GET:
 *
 *   commits/<run>/g<gen>.s<step>.<id>          snapshot <id> is committed
 *                                              in this region (written after
 *                                              its manifest)
 *   lineage/<run>/g<gen>.claim.<16 hex>        an instance adopted the run:
 *                                              generation <gen> starts here
 *   lineage/<run>/g<gen>.handoff.s<step>.<id>  the owner of <gen> handed the
 *                                              run off at snapshot <id>
 *   forget/<run>/g<gen>.s<step>.<id>           snapshot <id> is removed
 *                                              (ckptsync forget; prune
 *                                              deletes it later)
 *
 * <step> is a decimal or "-1" (unknown); <gen> a decimal without leading
 * zeros.  The body of each is a small checksummed text (lineage_encode)
 * repeating the key's facts plus host, instance, time, and for a commit
 * the SHA-256 of the manifest; a body that disagrees with its key is
 * damaged.
 */
#ifndef CKS_LINEAGE_H
#define CKS_LINEAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/hash.h"
#include "engine/manifest.h"

#define LINEAGE_MAX_BYTES 2048
#define LINEAGE_FIELD_MAX 128
#define LINEAGE_GEN_MAX 999999999999LL
#define LINEAGE_CLAIM_HEX 16

enum lineage_kind { LINEAGE_COMMIT, LINEAGE_CLAIM, LINEAGE_HANDOFF, LINEAGE_FORGET };

struct lineage_rec {
    enum lineage_kind kind;
    char run[MANIFEST_MAX_FIELD + 1];
    int64_t gen;
    /* commit, handoff: the snapshot; claim: the snapshot it resumed from
     * ("" when it started from nothing). */
    char id[MANIFEST_ID_MAX + 1];
    int64_t step;                         /* of id; -1 unknown */
    char tag[LINEAGE_CLAIM_HEX + 1];      /* claim: its random name */
    char host[LINEAGE_FIELD_MAX + 1];     /* [A-Za-z0-9._-]; others written '_' */
    char instance[LINEAGE_FIELD_MAX + 1]; /* same, "" when unknown */
    int64_t time;                         /* unix seconds */
    uint8_t manifest[HASH_LEN];           /* commit: SHA-256 of the manifest */
};

/* The part of the record's key after "<folder>/<run>/" (the whole key is
 * store/layout.h's layout_record): "g<gen>.s<step>.<id>" (commit, forget),
 * "g<gen>.claim.<tag>", "g<gen>.handoff.s<step>.<id>"; out holds cap
 * bytes.  -EINVAL when a field cannot form a key. */
int lineage_name(const struct lineage_rec *r, char *out, size_t cap);
/* Parses that part into r, whose kind (commit, forget, or handoff for any
 * record of the lineage folder: refined to claim here) and run the caller
 * set from the key's folder; fills gen, step, id or tag.  CKS_E_FORMAT
 * when it is not a record's name. */
int lineage_name_parse(const char *name, struct lineage_rec *r);

int lineage_encode(const struct lineage_rec *r, struct buf *out);
/* 0, CKS_E_FORMAT, CKS_E_VERSION or CKS_E_DIGEST. */
int lineage_parse(const uint8_t *data, size_t len, struct lineage_rec *ret);
/* Parses a body and checks it against k, the record its key names
 * (layout_record_parse): CKS_E_MISMATCH when they disagree. */
int lineage_parse_for(const struct lineage_rec *k, const uint8_t *data, size_t len,
                      struct lineage_rec *ret);

/* The charset of host and instance fields ([A-Za-z0-9._-]); sanitise
 * writes other bytes as '_' and an empty value as "-" (handoff.c too). */
bool lineage_field_char(char c);
void lineage_sanitise(const char *in, char *out, size_t cap);

/* Orders snapshots for "newest": (step known, step, id), as ref_newer. */
int lineage_newer(int64_t step_a, const char *id_a, int64_t step_b, const char *id_b);

#endif
