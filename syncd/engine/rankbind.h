/*
 * rankbind.h — which files of a merged multi-node step a node restores,
 * and which are bound to a rank a new world cannot consume.
 *
 * A merged step (manifest version 4, service/multinode.h) says for each
 * entry which node's part held it.  `restore --node K --of M` gives node
 * K the files it needs; when M differs from the step's node count N, the
 * rules below name the files tied to a rank that the new world would drop
 * (a job restarted on fewer nodes silently losing ranks 2 and 3's RNG and
 * dataloader state is the failure this catches before training starts).
 *
 *   struct manifest sub;
 *   struct buf why = BUF_INIT;
 *   e = rankbind_select(&m, k, M, allow, &sub, &why);
 *   e == 1: m is not a merged step (version 1-3): restore it whole
 *   e == 0: restore sub; why non-empty (only with allow): what is left out
 *   e == CKS_E_RESHARD: refused; why names each file and the dropped ranks
 *   manifest_free(&sub);
 *
 * The rules, by path (case does not matter), first that applies:
 *   ZeRO partition   a name containing "zero_pp_rank_" (DeepSpeed);
 *   model-parallel   a component starting "mp_rank_<digit>" (Megatron's
 *                    iter_N/mp_rank_XX/, DeepSpeed's mp_rank_XX_model_states.pt);
 *   DCP shard        a name "__<digits>_<digits>.distcp" (PyTorch DCP);
 *   per-rank state   a name starting "rng_state_<digit>" or
 *                    "random_states_<digit>", or holding "rank" and one of
 *                    "dataloader", "data_loader", "sampler";
 *   otherwise        not bound to a rank.
 *
 * Node K of M gets: every entry several nodes held (identically); node
 * 0's entries not bound to a rank (the shared files: DCP .metadata,
 * `latest`, configs); its own node K's entries.  When M != N also every
 * entry not bound to a rank of any node, and every DCP shard (DCP reads
 * any file from any rank).  Bound entries that the new world cannot
 * consume: per-rank state and model-parallel files of a node K >= M
 * (nobody would get them), and ZeRO partitions unless the step holds a
 * universal checkpoint (a component ending "_universal", or a file
 * "latest_universal"): their partitioning is the old world's.  The
 * directories above a selected entry, and the target of a selected hard
 * link, are selected with it.
 *
 * Pure: no I/O; thread-safe over distinct arguments.
 */
#ifndef CKS_RANKBIND_H
#define CKS_RANKBIND_H

#include <stdbool.h>

#include "base/buf.h"
#include "engine/manifest.h"

enum rankbind_kind {
    RANKBIND_NONE,  /* not bound to a rank */
    RANKBIND_ZERO,  /* a DeepSpeed ZeRO partition */
    RANKBIND_MP,    /* a model-parallel rank's file */
    RANKBIND_DCP,   /* a DCP shard: any rank reads any */
    RANKBIND_STATE, /* per-rank RNG or dataloader state */
};

/* The kind of the entry at path (a manifest path). */
enum rankbind_kind rankbind_kind(const char *path);
/* A phrase for a kind, for messages ("per-rank state", ...). */
const char *rankbind_kind_name(enum rankbind_kind k);
/* Whether m holds a DeepSpeed universal checkpoint (see above). */
bool rankbind_universal(const struct manifest *m);

/* What node `node` of `count` (node < count) restores of m: see the top
 * of this header.  ret is initialized by the call when it returns 0 (the
 * selected entries, with m's header and chunks; of a version 6 m, the
 * selected chunks stored as recipes stay so, with the r and k lines they
 * need: engine/msubset.h); nothing to free
 * otherwise.  1: m is not a merged step; CKS_E_RESHARD (err names what);
 * -ENOMEM; -EINVAL when node >= count or count is 0. */
int rankbind_select(const struct manifest *m, unsigned node, unsigned count, bool allow,
                    struct manifest *ret, struct buf *err);

#endif
