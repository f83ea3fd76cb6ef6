/*
 * gcd.h — the daemon's retention and prune thread.
 *
 * Started only when the configuration asks for it: a retention policy
 * that removes something ([retention] or a [retention.RUN] with a keep_*
 * rule) or `[prune] interval`.  Every few seconds it looks at the index
 * for runs whose newest snapshot became durable (committed in quorum
 * regions) since it last looked, and applies that run's policy
 * (service/retention.h: forget records); every `interval` seconds it runs
 * a prune (service/gc.h).  Both run on the thread's own region handles,
 * over the daemon's index; a failure is logged and tried again at the
 * next occasion, never stops the daemon.
 */
#ifndef CKS_GCD_H
#define CKS_GCD_H

#include "service/repo.h"

struct gcd;

/* 0 (*ret NULL when nothing is configured) or an error. */
int gcd_start(struct repo *r, struct gcd **ret);
void gcd_free(struct gcd *g); /* stops after the step in hand; NULL is fine */

#endif
