/*
 * preflight.h — what `ckptsyncd --check` checks beyond the file, region by
 * region, without starting anything.
 *
 * Always (no network): each configured region is made as the daemon would
 * make it (region_new), which reads what it needs locally: an S3 region's
 * credentials file (missing, unreadable, readable by group or others:
 * refused, naming the file) or environment.  With PREFLIGHT_CONNECT each
 * region is also contacted: reachable (an S3 bucket listed; a dir region's
 * directory written and removed again), its `repo` object present, absent
 * (the first start creates it) or unreadable, and, when that object says
 * the repository is encrypted, its key slots read and tried with the
 * configured secret (key_file, passphrase_file or $CKPTSYNC_PASSPHRASE).
 * Nothing is created or changed in a region, but for the copy probe.
 *
 * The copy matrix (issue 25, service/copymap.h): for each ordered pair of
 * regions, whether the destination gets chunks by server-side copy from
 * the source and why: configured ([region.X] copy_from), impossible (not
 * two s3 regions), or auto — with PREFLIGHT_CONNECT probed now (a small
 * probe/<random> object put into the source, copied, checked and deleted:
 * region_probe_copy), without it left to the daemon's probe at start.
 * A pair that cannot copy is not a failed check: its destination gets
 * chunks from the instance.
 *
 *   struct preflight pf;
 *   unsigned bad = preflight_run(conf, PREFLIGHT_CONNECT, &pf);
 *   preflight_print(&pf, stdout);     or preflight_json(&pf, &json);
 *
 * bad counts the regions with a failed check (0: every check passed).
 * Each result's text is one line, naming the region and, for a file, the
 * file.  Not thread-safe (one caller; makes and frees its own handles).
 */
#ifndef CKS_PREFLIGHT_H
#define CKS_PREFLIGHT_H

#include <stdbool.h>
#include <stdio.h>

#include "base/config.h"
#include "base/json.h"

enum preflight_flags { PREFLIGHT_CONNECT = 1 << 0 };

/* One check's outcome: ok, failed, or not run (skipped: it needs one
 * that failed, or --connect). */
enum preflight_state { PREFLIGHT_SKIPPED, PREFLIGHT_OK, PREFLIGHT_FAILED };

struct preflight_check {
    enum preflight_state state;
    char text[1024]; /* what was found, or why it failed */
};

struct preflight_region {
    char name[CONFIG_NAME_MAX + 1];
    struct preflight_check credentials; /* region_new: credentials, endpoint */
    struct preflight_check reach;       /* connect: the bucket or directory */
    struct preflight_check repo;        /* connect: the repo object */
    struct preflight_check keys;        /* connect, encrypted: a key slot opens */
};

struct preflight {
    size_t n;
    struct preflight_region region[CONFIG_MAX_REGIONS];
    /* [dst][src]: enum copymap_why of the pair (COPYMAP_UNKNOWN: auto,
     * not probed); [i][i] unused */
    unsigned char copy[CONFIG_MAX_REGIONS][CONFIG_MAX_REGIONS];
};

unsigned preflight_run(const struct config *conf, unsigned flags, struct preflight *ret);
/* One line per region and check that ran, then one per ordered pair of
 * regions: "copy b <- a: yes (probed)". */
void preflight_print(const struct preflight *pf, FILE *out);
/* The regions as a JSON array of {name, credentials, reach, repository, keys},
 * each check {state: "ok"|"failed"|"skipped", text}; the repo object's
 * check is "repository". */
void preflight_json(const struct preflight *pf, struct json *j);
/* The copy matrix as a JSON array of {to, from, copies: true|false|null
 * (auto, not probed), why}, one per ordered pair. */
void preflight_copies_json(const struct preflight *pf, struct json *j);

#endif
