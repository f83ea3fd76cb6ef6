/*
 * layoutcov.h — whether a step's tree holds every file its own layout
 * names: the coverage proof of a multi-node commit (service/multinode.h),
 * beyond "every node's part is in".
 *
 * Layouts read (docs/multinode.md "When a step commits"):
 *   - every `.metadata` file: a PyTorch DCP metadata pickle
 *     (engine/dcpmeta.h, read without executing it); each file it names
 *     must exist beside it, as a regular file at least as long as the end
 *     of the furthest byte range it names there;
 *   - every `*.index.json`: a Hugging Face sharded-weights index
 *     (engine/hfindex.h); each shard it names must exist beside it;
 *   - Megatron / DeepSpeed rank names (engine/ranknames.h): a gap in a
 *     family of mp_rank_* / zero_pp_rank_* names is a missing file.
 * A layout file is read through the caller's reader (whole, at most
 * LAYOUTCOV_MAX_FILE bytes); layoutcov_region_read() reads it from one
 * region's chunks.
 *
 *   struct buf missing = BUF_INIT, err = BUF_INIT;
 *   e = layoutcov_check(&merged, layoutcov_region_read, rg, &missing, &bad, &err);
 *   e == 0: covered; e == 1: not covered, missing says what and which layout
 *   said so; e < 0: a layout file cannot be read (bad: its path; err: why)
 *   or the reader failed (region errors: try again later).
 *
 * Not thread-safe per reader context (a region handle is single-threaded).
 */
#ifndef CKS_LAYOUTCOV_H
#define CKS_LAYOUTCOV_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/manifest.h"

#define LAYOUTCOV_MAX_FILE ((uint64_t)256 << 20)
/* How many missing files the description lists before "and N more". */
#define LAYOUTCOV_LIST_MAX 10

/* Reads file f of m whole into out (reset first).  0, or a negative code
 * with err saying why. */
typedef int (*layoutcov_read_fn)(void *ud, const struct manifest *m, const struct mfile *f,
                                 struct buf *out, struct buf *err);

/* The verdict on tree m: 0 covered; 1 not covered, with ret_missing
 * (appended) saying "\"path\" (named by \"layout file\")" for each file
 * missing or too short, ", " between; negative: CKS_E_FORMAT, CKS_E_LIMIT
 * or CKS_E_UNSAFE_PATH when a layout file is not what its name says (bad
 * or hostile: ret_bad gets its path, err why), or the reader's error
 * (ret_bad gets the path, err why). */
int layoutcov_check(const struct manifest *m, layoutcov_read_fn read, void *ud,
                    struct buf *ret_missing, struct buf *ret_bad, struct buf *err);

/* A layoutcov_read_fn over a struct region *(ud): the file's chunks from
 * that region, each decoded and verified against its id.  A file larger
 * than LAYOUTCOV_MAX_FILE is CKS_E_LIMIT. */
int layoutcov_region_read(void *ud, const struct manifest *m, const struct mfile *f,
                          struct buf *out, struct buf *err);

#endif
