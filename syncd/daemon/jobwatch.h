/*
 * jobwatch.h — the daemon's view of its multi-node job's incomplete steps,
 * for status --json (README "Multi-node jobs").
 *
 * Started only for a job of several nodes ([daemon] nodes > 1).  Once a
 * minute, and a moment after a status asked, its thread lists, on region
 * handles of its own (a repo_dup, as daemon/gcd.c does), the incomplete
 * steps of each run the index knows,
 * with the nodes' last errors (service/incomplete.h), and swaps the
 * result in under a lock; status renders the latest result with the one
 * emitter ls --remote uses.  It also records this node's upload failures
 * (service/nodeerr.h): while a region fails (replicator_status) and a
 * step of this node is pending there, the node's error on that step is
 * written into every other region that is up, once per failure; and a
 * unit of a step that could not be read (jobwatch_unit_failed, from the
 * loop) is written as the node's error into every region that is up.
 *
 *   jobwatch_start(repo, rp, &jw);          jw NULL when nodes = 1
 *   jobwatch_json(jw, &j);                  an array of steps ([] when none or NULL)
 *   jobwatch_free(jw);
 *
 * jobwatch_json may be called from any thread; it never waits on a region.
 */
#ifndef CKS_JOBWATCH_H
#define CKS_JOBWATCH_H

#include "base/json.h"
#include "service/repo.h"

struct jobwatch;
struct replicator;

/* rp: the region workers (outlives jw). */
int jobwatch_start(struct repo *r, struct replicator *rp, struct jobwatch **ret);
void jobwatch_json(struct jobwatch *jw, struct json *j);
/* The unit of step of run could not be read (why): recorded by the
 * thread soon (a bounded backlog; the oldest goes).  jw NULL: nothing. */
void jobwatch_unit_failed(struct jobwatch *jw, const char *run, int64_t step, const char *unit,
                          const char *why);
void jobwatch_free(struct jobwatch *jw);

#endif
