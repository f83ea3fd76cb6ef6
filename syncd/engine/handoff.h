/*
 * handoff.h — the handoff record `migrate-out` leaves in every region for
 * the instance that takes over (key handoff/<run>; format in
 * include/ckptsync/format.h):
 *
 *   ckptsync-handoff 1
 *   run <run>
 *   snapshot <id>
 *   step <n>                 (-1 when unknown)
 *   host <name>              ([A-Za-z0-9._-], other bytes written as '_')
 *   instance <type>          (same charset, or -)
 *   time <unix seconds>
 *   end <sha256 hex of every byte before this line>
 *
 * Pure transform; the parser takes hostile input (bounded, strict).
 */
#ifndef CKS_HANDOFF_H
#define CKS_HANDOFF_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/manifest.h"

#define HANDOFF_MAX_BYTES 2048
#define HANDOFF_FIELD_MAX 128

struct handoff {
    char run[MANIFEST_MAX_FIELD + 1];
    char id[MANIFEST_ID_MAX + 1];
    int64_t step;
    char host[HANDOFF_FIELD_MAX + 1];
    char instance[HANDOFF_FIELD_MAX + 1]; /* "" when unknown */
    int64_t time;
};

/* host and instance are sanitised to the charset; run and id must pass
 * manifest_run_check / manifest_id_check (else -EINVAL). */
int handoff_encode(const struct handoff *h, struct buf *out);
/* 0, CKS_E_FORMAT, CKS_E_VERSION or CKS_E_DIGEST. */
int handoff_parse(const uint8_t *data, size_t len, struct handoff *ret);

#endif
