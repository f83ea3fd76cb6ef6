/*
 * ranknames.h — the per-rank names of Megatron-LM and DeepSpeed, and the
 * ranks they imply.
 *
 * Megatron writes one directory per model-parallel rank, mp_rank_TT (tensor
 * rank), mp_rank_TT_PPP (and pipeline rank), mp_rank_TT_PPP_EEE (and
 * expert rank); DeepSpeed writes mp_rank_TT_model_states.pt and, per data
 * rank, zero_pp_rank_D_mp_rank_TT_optim_states.pt (bf16_ prefixed with
 * bf16).  Ranks count from 0, so the names of one family (same directory,
 * same name apart from the rank numbers) must form a full grid 0..max in
 * every rank dimension: mp_rank_00, 01 and 03 present means mp_rank_02 is
 * missing.  (A family whose highest ranks are all missing cannot be told
 * from a smaller job; the part count covers that.)
 *
 *   struct layout_needs gaps = LAYOUT_NEEDS_INIT;
 *   e = ranknames_gaps(paths, npaths, &gaps);      the missing names, as paths
 *   layout_needs_free(&gaps);
 *
 * Only the digits after "mp_rank_" / "pp_rank_" and the "_NNN" groups
 * right after an mp_rank number are ranks.  A family whose grid would be
 * larger than RANKNAMES_MAX_GRID names is not judged.  Pure.
 */
#ifndef CKS_RANKNAMES_H
#define CKS_RANKNAMES_H

#include <stddef.h>

#include "engine/layoutneed.h"

#define RANKNAMES_MAX_DIMS 4
#define RANKNAMES_MAX_GRID (1u << 16)

/* paths[0 .. n): every entry of a tree ('/'-separated, relative).  Appends
 * to ret (size 0) the path of every name a family implies and no entry
 * has (as itself or as a directory above another); sorted.  0 or -ENOMEM. */
int ranknames_gaps(const char *const *paths, size_t n, struct layout_needs *ret);

#endif
