/*
 * manifests.h — one snapshot's manifest as the regions hold it: read by
 * (run, id), checked, from one region or from the first healthy region
 * that holds it intact.  The floor below the run lineage
 * (service/runlineage.h reads the manifests its listings cannot describe)
 * and the catalog (service/catalog.h: which snapshots exist, the newest,
 * publishing).
 *
 *   struct manifest m;
 *   if (manifests_read(r, run, id, &m, NULL, &err) == 0) { ...; manifest_free(&m); }
 *
 * Not thread-safe (a repo is used by one thread).
 */
#ifndef CKS_MANIFESTS_H
#define CKS_MANIFESTS_H

#include <stddef.h>

#include "base/buf.h"
#include "engine/manifest.h"
#include "service/repo.h"

/* Reads and checks the manifest of (run, id) in region i: parsed by the
 * bounded parser, and naming that run and id.  Logs what is wrong, naming
 * the region and key.  -ENOENT when the region lacks it. */
int manifests_read_in(struct repo *r, size_t i, const char *run, const char *id,
                      struct manifest *ret);
/* The first valid manifest of (run, id) among the healthy regions;
 * ret_region (may be NULL) gets its region's index.  -ENOENT (or the last
 * region's error) when none holds one, with a message in err. */
int manifests_read(struct repo *r, const char *run, const char *id, struct manifest *ret,
                   size_t *ret_region, struct buf *err);

#endif
