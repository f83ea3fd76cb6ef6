/*
 * filedigest.h — a regular file's digest in the manifest, of either kind
 * (include/ckptsync/format.h, section 3, "File digests"):
 *
 *   sha256  SHA-256 of the file's bytes (manifest versions 1-5): what
 *           sha256sum prints; computing it is one more serial pass over
 *           every byte, on ingest and on restore.
 *   tree    the chunk tree (manifest version 5, the default): SHA-256 of
 *           CKS_FILEDIGEST_TREE_DOMAIN followed, for each chunk of the
 *           file in order, by its id (32 bytes) and its length (8 bytes,
 *           little-endian).  A function of the chunk list alone: no pass
 *           over the bytes.  Not what sha256sum prints.
 *
 *   uint8_t d[HASH_LEN];
 *   filedigest_tree(m->chunks + f->first_chunk, f->nchunks, d);
 *
 * The chunk ids are SHA-256 of each chunk's bytes, or in an encrypted
 * repository an HMAC-SHA-256 under its id key (engine/crypt.h); the tree
 * is computed the same way over either.  Pure functions, thread-safe.
 */
#ifndef CKS_FILEDIGEST_H
#define CKS_FILEDIGEST_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/manifest.h"

/* The kind's name in JSON, the CLI and the config ("sha256", "tree"). */
const char *filedigest_kind_name(enum mdigest_kind kind);
/* name -> kind: 0, or CKS_E_FORMAT for any other word. */
int filedigest_kind_parse(const char *name, enum mdigest_kind *ret);

/* The chunk-tree digest of the n chunks v[0..n-1] (n = 0: an empty file).
 * 0, or -ENOMEM / -ENOTSUP when OpenSSL cannot hash (out then unset). */
int filedigest_tree(const struct mchunk *v, size_t n, uint8_t out[HASH_LEN]);

/* Whether file f of m carries the digest its chunk list gives: always
 * true for a sha256 file (only its bytes can tell), for a tree file the
 * tree of its chunks.  The bytes behind the chunks are not looked at. */
bool filedigest_tree_matches(const struct manifest *m, const struct mfile *f);

#endif
