/*
 * incomplete.h — a multi-node run's incomplete steps as readers show them
 * (ls --remote, status --json): each step with the nodes whose parts are
 * missing and the last error each node recorded (service/nodeerr.h).
 * The one emitter of that result, for the CLI and the daemon alike.
 *
 *   struct incomplete inc = {0};
 *   e = incomplete_collect(repo, run, now, part_timeout, &inc);
 *   incomplete_json(&j, &inc);        one object per step, into an open array
 *   incomplete_text(stdout, &inc);    one line per step (ls's columns)
 *   incomplete_free(&inc);
 *
 * Not thread-safe per repo (its owner's thread calls).
 */
#ifndef CKS_INCOMPLETE_H
#define CKS_INCOMPLETE_H

#include <stdint.h>
#include <stdio.h>

#include "base/json.h"
#include "service/multinode.h"
#include "service/nodeerr.h"
#include "service/repo.h"

struct incomplete {
    char run[MANIFEST_MAX_FIELD + 1];
    struct multinode_steps steps;
    struct nodeerrs errs;
};

/* The incomplete steps of run, and its nodes' errors: 0 or a listing's
 * error. */
int incomplete_collect(struct repo *r, const char *run, int64_t now, uint64_t part_timeout,
                       struct incomplete *ret);
/* Each step as {"run", "id": null, "step", "incomplete": true, "nodes",
 * "parts", "missing": [ranks], "timed_out", "errors": [{"node", "time",
 * "host", "error", "missing"}]}. */
void incomplete_json(struct json *j, const struct incomplete *inc);
void incomplete_text(FILE *f, const struct incomplete *inc);
void incomplete_free(struct incomplete *inc);

#endif
