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
 * Removes, under the region's root: such temporaries whose mtime is more
 * than min_age seconds old (a temporary is written continuously while
 * its put runs, and a put whose temporary is removed fails at its rename:
 * nothing a writer stored is ever lost, only a put that stalled longer
 * than min_age is made to fail), and every empty folder directly under
 * gc/ (a writer that puts into one as it is removed creates it again:
 * region_dir.c retries a put whose folder went).  Nothing else is
 * touched, and nothing that does not match those names exactly.  0, or
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

#endif
