/*
 * parts.h — what the daemon runs, as its control server (ctlserver.h) and
 * its status rendering (statusview.h) see it: one struct, no functions,
 * so that those two and the loop (daemon.c) that owns the parts include
 * it rather than each other.
 */
#ifndef CKS_PARTS_H
#define CKS_PARTS_H

#include <stdint.h>

#include "base/config.h"

struct repo;
struct replicator;
struct ingester;
struct detector;
struct metrics;
struct jobwatch;

/* daemon_run() (daemon.h) owns every part and fills each in as start-up
 * creates it (before the loop runs, so the helpers, which only use them
 * from the loop, always find them all); the helpers borrow the struct for
 * as long as they live. */
struct daemon_parts {
    const struct config *conf;
    const char *root; /* the watch root, resolved */
    struct repo *r;
    struct replicator *rp;
    struct ingester *ig;
    struct detector *det;
    struct metrics *m;                   /* counters the threads update */
    struct jobwatch *jw;                 /* a multi-node job's incomplete steps (NULL: 1 node) */
    int64_t started_ms, started_wall_ms; /* monotonic and wall clock */
};

#endif
