/*
 * verify.h — check that every chunk of every selected snapshot is present
 * and intact (decodes, and its SHA-256 matches its id) in every region,
 * and that every region holds every selected snapshot's manifest (and,
 * when the repository is encrypted, every key slot).
 *
 * The selection is the union over healthy regions of their snapshots
 * (of one run, or all runs), or one snapshot.  Each distinct chunk is
 * fetched once per region.  Not thread-safe.
 */
#ifndef CKS_VERIFY_H
#define CKS_VERIFY_H

#include <stdbool.h>
#include <stdint.h>

#include "service/repo.h"

struct verify_region_result {
    int err; /* region unusable: the check's error */
    uint64_t manifests_ok, manifests_missing, manifests_bad;
    /* commit, claim and handoff records (and version-1 refs/handoffs) */
    uint64_t records_ok, records_bad;
    uint64_t records_missing; /* held by other regions, not this one (not a failure) */
    uint64_t repaired;        /* objects copied in from a region with a good copy */
    uint64_t chunks_ok, chunks_missing, chunks_corrupt;
    /* an encrypted repository's key slots that other regions hold and this
     * one lacks (repair copies them in) */
    uint64_t slots_missing;
};

struct verify_result {
    uint64_t snapshots;
    /* manifests some region lacks or holds damaged, with no commit record
     * in any region: a writer in progress or one that died; not checked,
     * not damage */
    uint64_t uncommitted;
    uint64_t chunks; /* distinct chunks referenced */
    uint64_t bytes;  /* their raw bytes */
    size_t nregions;
    struct verify_region_result region[CONFIG_MAX_REGIONS];
};

/* Returns 0 when every region is complete and intact, CKS_E_DIGEST when
 * anything is missing or corrupt, another negative code on failure. */
/* VERIFY_QUICK: read only each chunk object's header (a ranged read) and
 * check it names the right length, instead of reading and hashing
 * everything.  VERIFY_REPAIR: copy what a region lacks or holds damaged
 * from a region whose copy checked out (reads everything: no quick). */
enum verify_flags { VERIFY_QUICK = 1 << 0, VERIFY_REPAIR = 1 << 1 };
int verify_run(struct repo *r, const char *run, const char *id, unsigned flags,
               void (*progress)(void *ud, uint64_t done, uint64_t total), void *ud,
               struct verify_result *ret, struct buf *err);
/* Is the region complete and intact? */
int verify_region_ok(const struct verify_region_result *v);

#endif
