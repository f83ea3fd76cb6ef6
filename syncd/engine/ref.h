/*
 * ref.h — the run's `latest` ref object (refs/<run>/latest):
 *
 *   <snapshot id> <step>\n          step is -1 when unknown
 *
 * The step rides along so that a writer can refuse to move latest
 * backwards (an older checkpoint committed late) without fetching the
 * manifest it points to.  Pure transform; the parser takes hostile input.
 */
#ifndef CKS_REF_H
#define CKS_REF_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/manifest.h"

#define REF_MAX_BYTES 256

struct ref {
    char id[MANIFEST_ID_MAX + 1];
    int64_t step;
};

int ref_encode(const struct ref *f, struct buf *out);
/* 0 or CKS_E_FORMAT. */
int ref_parse(const uint8_t *data, size_t len, struct ref *ret);
/* Does a snapshot (id, step) supersede ref cur?  Ordered by (step known,
 * step, id): a checkpoint (step known) outranks a snapshot without a step
 * (logs, configs), a higher step wins, then the later id (ids sort by
 * time). */
int ref_newer(const struct ref *cand, const struct ref *cur);

#endif
