/*
 * retakes.h — the units the daemon must take again: a pinned file changed
 * after ingest, so the replicator dropped the snapshot and hands its unit
 * back for a new one.  Each unit is held once however often it is added,
 * and handed back in the order it was first added.  The list grows as
 * needed: nothing is dropped because it is long (it used to be a fixed
 * array that was).
 *
 *   struct retakes rt = {0};            // empty; no init call
 *   retakes_add(&rt, unit);             // 1 new, 0 already held, -ENOMEM
 *   n = retakes_take(&rt, ret, cap);    // up to cap, oldest first, removed
 *   retakes_free(&rt);                  // whatever was not taken
 *
 * The list owns a copy of each unit; retakes_take copies into the caller's
 * ret (each 4096 bytes, a relpath's limit) and forgets its own.  Not
 * thread-safe: the replicator calls it under its own mutex.
 */
#ifndef CKS_RETAKES_H
#define CKS_RETAKES_H

#include <stddef.h>

struct retakes {
    char **v;
    size_t n, cap;
};

int retakes_add(struct retakes *rt, const char *unit);
size_t retakes_take(struct retakes *rt, char (*ret)[4096], size_t cap);
void retakes_free(struct retakes *rt);

#endif
