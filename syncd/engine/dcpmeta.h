/*
 * dcpmeta.h — what a PyTorch distributed checkpoint's `.metadata` says
 * must exist beside it: every data file, and how long it must be.
 *
 * torch.distributed.checkpoint's FileSystemWriter pickles one
 * torch.distributed.checkpoint.metadata.Metadata (a dataclass) whose
 * `storage_data` maps each MetadataIndex (a tensor chunk or a bytes item)
 * to a torch.distributed.checkpoint.filesystem._StorageInfo
 * (relative_path, offset, length): the item's bytes are
 * relative_path[offset .. offset + length), relative_path a file of the
 * checkpoint's directory ("__3_0.distcp").  The pickle is read with
 * engine/pickle.h: nothing is executed.
 *
 *   struct layout_needs n = LAYOUT_NEEDS_INIT;
 *   e = dcpmeta_parse(data, len, &n, &err);
 *   ... n.v[i].path must exist with at least n.v[i].size bytes ...
 *   layout_needs_free(&n);
 *
 * Pure; not thread-safe per result.
 */
#ifndef CKS_DCPMETA_H
#define CKS_DCPMETA_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/layoutneed.h"

#define DCPMETA_NAME ".metadata" /* the file's name in the checkpoint's directory */
#define DCPMETA_MODULE "torch.distributed.checkpoint.metadata"
#define DCPMETA_STORAGE_MODULE "torch.distributed.checkpoint.filesystem"

/* Parses a `.metadata` (the whole file) into ret (emptied first; folded:
 * one entry per file, sorted).  0, or with err saying what: CKS_E_FORMAT
 * or CKS_E_LIMIT (the pickle's offset and opcode, or what in it is not
 * what DCP writes: the root not a Metadata, storage_data not a dict, an
 * entry not a _StorageInfo, an offset or length not a non-negative int or
 * past 2^63), CKS_E_UNSAFE_PATH (a relative_path that is absolute, has an
 * empty, "." or ".." component), -ENOMEM. */
int dcpmeta_parse(const uint8_t *data, size_t len, struct layout_needs *ret, struct buf *err);

#endif
