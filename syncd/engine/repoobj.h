/*
 * repoobj.h — the `repo` object every region holds at its root: the
 * repository id and the parameters every instance must share so that they
 * cut and name chunks alike (format in include/ckptsync/format.h):
 *
 *   ckptsync-repo 1
 *   id <32 hex>
 *   chunker fastcdc2020 <min> <avg> <max> <nc>
 *   hash sha256                      (encrypted: hash hmac-sha256)
 *   compression zstd
 *   encryption none                  (or: encryption aes-256-gcm <64 hex>)
 *   end <sha256 hex of every byte before this line>
 *
 * An encrypted repository's line carries its key check: HKDF-SHA256 of the
 * master key (salt: the id's bytes, info "ckptsync key check"), so that an
 * instance knows a master key it unwrapped from a slot is this repository's
 * (a slot left by a creator that lost the creation race is not).  It says
 * nothing else about the key.  A ckptsync that predates encryption refuses
 * the object ("unsupported repository feature") instead of writing
 * plaintext into an encrypted repository.
 *
 * Pure transform; the parser takes hostile input (bounded, strict).
 */
#ifndef CKS_REPOOBJ_H
#define CKS_REPOOBJ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define REPOOBJ_VERSION 1
#define REPOOBJ_MAX_BYTES 4096
#define REPOOBJ_ID_HEX 32

struct repoobj {
    char id[REPOOBJ_ID_HEX + 1];
    uint64_t chunk_min, chunk_avg, chunk_max;
    unsigned normalization;
    bool encrypted;
    uint8_t key_check[32]; /* encrypted only */
};

int repoobj_encode(const struct repoobj *o, struct buf *out);
/* 0, CKS_E_FORMAT, CKS_E_VERSION, CKS_E_DIGEST or CKS_E_LIMIT; err (may be
 * NULL) gets "line N: what". */
int repoobj_parse(const uint8_t *data, size_t len, struct repoobj *ret, struct buf *err);

#endif
