/*
 * recipar.h — rebuild many chunks stored as recipes at once (restore of a
 * version 6 snapshot; docs/deltas.md "Restore and verify").
 *
 *   recipe_src_open(repo, &m, cache_bytes, &src);
 *   fetch_run(... on_chunk calls recipe_src_seed(src, ...) ...);  // plain chunks
 *   recipar_run(src, jobs, n, flags, on_chunk, ud, &stats, &err);
 *   recipe_src_close(src);
 *
 * jobs are chunks of src's manifest stored as recipes (marked c lines),
 * as fetch_run takes them (id, len, tag; group and sig are set here).
 * Every recipe object and every base missing from src's cache is fetched
 * with fetch_run's machinery (striped over the healthy regions, parallel,
 * a missing or damaged copy asked of the next region), every recipe is
 * decoded on the fetch parts' threads and checked against its id, and
 * on_chunk gets the plaintext as from fetch_run: from several threads at
 * once (it locks what it shares), in no set order, data valid during the
 * call.  The plaintext of a file chunk that some recipe names as a base is
 * offered to the cache (recipe_src_seed) before on_chunk.
 *
 * Flags: FETCH_KEEP_GOING as fetch_run's: a recipe that cannot be rebuilt
 * (its object or a base intact in no region) does not stop the others;
 * the run fails at its end.  Without it, the first one stops the run.
 * Returns 0 or a negative code; stats as fetch_run's (summed over every
 * fetch), stats->lost/lost_tag naming the first job that could not be
 * rebuilt (not set when on_chunk failed), err (appended) naming the
 * object intact in no region.
 */
#ifndef CKS_RECIPAR_H
#define CKS_RECIPAR_H

#include "service/fetch.h"
#include "service/recipe.h"

int recipar_run(struct recipe_src *src, struct fetch_job *jobs, size_t n, unsigned flags,
                int (*on_chunk)(void *ud, const struct fetch_job *j, const uint8_t *data,
                                size_t len),
                void *ud, struct fetch_stats *stats, struct buf *err);

#endif
