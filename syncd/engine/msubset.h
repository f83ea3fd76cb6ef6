/*
 * msubset.h — the version 6 objects of a manifest that holds some of
 * another's files (docs/deltas.md): restore --node K --of M narrows a
 * merged step to what node K needs (engine/rankbind.h), and the chunks of
 * the files it keeps that are stored as recipes must stay recipes, with
 * the bases they need.
 *
 *   (sub: some of from's entries, their chunks added with
 *    manifest_add_chunk, no marks, no extras)
 *   e = msubset_extras(&sub, &from);
 *
 * Marks every chunk of sub that from stores as a recipe (an id with an r
 * line in from) and adds the extras those need, transitively through the
 * recipes' bases, down to sub's plain file chunks: from's r and k lines,
 * and a k line for a base that is a plain file chunk of from but of no
 * file sub keeps.  Each id once; the extras sorted.  sub then passes the
 * closure checks (manifest_check_extras) when from does; a base from
 * does not name is left out, and the check refuses sub.  A from without
 * extras leaves sub as it is.  Pure; 0, or -ENOMEM / -EINVAL / CKS_E_LIMIT
 * (manifest_add_extra).
 */
#ifndef CKS_MSUBSET_H
#define CKS_MSUBSET_H

#include "engine/manifest.h"

int msubset_extras(struct manifest *sub, const struct manifest *from);

#endif
