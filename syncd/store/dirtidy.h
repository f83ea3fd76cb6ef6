/*
 * dirtidy.h — removing what interrupted writes leave in a dir region
 * (store/region_dir.c's tidy operation, region_tidy in store/region.h).
 *
 * A dir region's put writes ".<name>.tmp.<pid>.<16 hex>" next to the
 * object and renames it into place (base/fileio.h); a writer killed -9
 * between the two leaves the temporary for good.  Its checks and clock
 * readings leave ".ckptsync-probe.<pid>" and ".ckptsync-clock.<pid>.<8
 * hex>" the same way.  Listings skip every name that starts with '.', so
 * nothing reads them; they only take space.  And every prune mark gets a
 * folder gc/<mark>/ that stays, empty, after its cleanup.
 *
 *   struct region_tidy st = {0};
 *   e = dirtidy_run(r, min_age, &st);
 *
 *   dirtidy_after_del(key, folder);   // region_dir.c's del, after the unlink
 *
 * dirtidy_run removes, under the region's root: such temporaries whose
 * mtime is more than min_age seconds old (a temporary is written
 * continuously while its put runs, and a put whose temporary is removed
 * fails at its rename: nothing a writer stored is ever lost, only a put
 * that stalled longer than min_age is made to fail), and the empty
 * folders directly under gc/ unchanged for as long (left by a crash, or
 * by a version before this one).  dirtidy_after_del removes a mark's
 * folder when prune deleted its last record (service/gc.c's cleanup), so
 * none is left behind.  A writer that puts a keep record into a folder
 * removed as it writes makes it again (region_dir.c retries a put whose
 * folder went), and a folder it made is fresh, so dirtidy_run never
 * removes it.  Nothing else is touched, and nothing that does not match
 * those names exactly.  dirtidy_run returns 0, or
 * the first error that stopped the walk (region_last_error names the
 * path); a file or folder that cannot be removed is skipped (logged at
 * debug level).  One thread per handle, as every region call.
 */
#ifndef CKS_DIRTIDY_H
#define CKS_DIRTIDY_H

#include <stdint.h>

#include "store/region.h"

#define DIRTIDY_PROBE_NAME ".ckptsync-probe"
#define DIRTIDY_CLOCK_NAME ".ckptsync-clock"

int dirtidy_run(struct region *r, uint64_t min_age, struct region_tidy *ret);
/* key was deleted from folder (its path, without the trailing '/'): when
 * key is a prune record (gc/<mark>/<name>) and folder is empty now,
 * removes it and cuts folder to its parent, the folder to sync. */
void dirtidy_after_del(const char *key, char *folder);

#endif
