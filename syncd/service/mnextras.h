/*
 * mnextras.h — a merged multi-node step's recipes (service/multinode.h;
 * version 6, docs/deltas.md): the union of the parts' extras that the
 * merged manifest needs.
 *
 *   (multinode_merge: the parts' entries and chunks appended to m, each
 *    chunk marked as its part marked it)
 *   e = mnextras_merge(m, parts, n);
 *
 * Rules, so that the result passes the version 6 closure checks
 * (manifest_check_extras: closed, minimal):
 *   - a chunk id some part stores plain (a plain file chunk, or a k line:
 *     a base of its deltas, one of the keyframe's chunks) and another as a
 *     recipe is plain in the merged manifest (its chunks/ object was
 *     confirmed by the part that named it so): every place of it is
 *     unmarked.  So two nodes' deltas never make a cycle through each
 *     other's chunks (node 0's chunk A over the keyframe's B, node 1's B
 *     over the keyframe's A: both plain);
 *   - the extras are those a marked chunk needs, transitively through
 *     recipes' bases, down to the merged manifest's plain file chunks;
 *     each id once, taken from the lowest rank's part that has it (a
 *     recipe line where the merged manifest marks the id, else a k line
 *     where some part has one);
 *   - an extra no part has (a part that is not closed) is left out, and
 *     the closure check then refuses the merge.
 * Pure; 0 or -ENOMEM / CKS_E_LIMIT.
 */
#ifndef CKS_MNEXTRAS_H
#define CKS_MNEXTRAS_H

#include <stddef.h>

#include "engine/manifest.h"

int mnextras_merge(struct manifest *m, const struct manifest *parts, size_t n);

#endif
