/*
 * incomplete.c — the incomplete steps of a multi-node run, with the
 * nodes' errors, and their one rendering (see incomplete.h).
 */
#include "service/incomplete.h"

#include <string.h>
#include <time.h>

int incomplete_collect(struct repo *r, const char *run, int64_t now, uint64_t part_timeout,
                       struct incomplete *ret)
{
    snprintf(ret->run, sizeof(ret->run), "%s", run);
    int e = multinode_incomplete(r, run, now, part_timeout, &ret->steps);
    if (e == 0 && ret->steps.n) /* no listing of errors for a run with nothing pending */
        e = nodeerr_collect(r, run, &ret->errs);
    return e;
}

static void json_errors(struct json *j, const struct incomplete *inc,
                        const struct multinode_step *s)
{
    json_arr_begin(j);
    for (unsigned k = 0; k < s->nodes; k++) {
        const struct nodeerr *x = nodeerr_find(&inc->errs, s->step, k);
        if (!x)
            continue;
        json_obj_begin(j);
        json_key(j, "node");
        json_u64(j, k);
        json_key(j, "missing");
        json_bool(j, multinode_step_missing(s, k));
        json_key(j, "time");
        json_i64(j, x->k.time);
        json_key(j, "host");
        json_str(j, x->host);
        json_key(j, "error");
        json_str(j, x->msg);
        json_obj_end(j);
    }
    json_arr_end(j);
}

void incomplete_json(struct json *j, const struct incomplete *inc)
{
    for (size_t k = 0; k < inc->steps.n; k++) {
        const struct multinode_step *s = &inc->steps.v[k];
        json_obj_begin(j);
        json_key(j, "run");
        json_str(j, inc->run);
        json_key(j, "id");
        json_null(j);
        json_key(j, "step");
        json_i64(j, s->step);
        json_key(j, "incomplete");
        json_bool(j, true);
        json_key(j, "nodes");
        json_u64(j, s->nodes);
        json_key(j, "parts");
        json_u64(j, s->have);
        json_key(j, "missing");
        json_arr_begin(j);
        for (unsigned r = 0; r < s->nodes; r++)
            if (multinode_step_missing(s, r))
                json_u64(j, r);
        json_arr_end(j);
        json_key(j, "timed_out");
        json_bool(j, s->timed_out);
        json_key(j, "errors");
        json_errors(j, inc, s);
        json_obj_end(j);
    }
}

static void text_errors(FILE *f, const struct incomplete *inc, const struct multinode_step *s)
{
    for (unsigned k = 0; k < s->nodes; k++) {
        const struct nodeerr *x = nodeerr_find(&inc->errs, s->step, k);
        char t[32];
        time_t tt;
        struct tm tm;
        if (!x)
            continue;
        tt = (time_t)x->k.time;
        gmtime_r(&tt, &tm);
        strftime(t, sizeof(t), "%Y-%m-%dT%H:%M:%SZ", &tm);
        fprintf(f, "%-16s %-34s %10s  node %u (%s) last error at %s: %s\n", "", "", "", k, x->host,
                t, x->msg);
    }
}

void incomplete_text(FILE *f, const struct incomplete *inc)
{
    for (size_t k = 0; k < inc->steps.n; k++) {
        const struct multinode_step *s = &inc->steps.v[k];
        fprintf(f, "%-16s %-34s %10lld  %u of %u nodes' parts in%s; missing:", inc->run,
                "(incomplete)", (long long)s->step, s->have, s->nodes,
                s->timed_out ? " (past part_timeout)" : "");
        for (unsigned r = 0; r < s->nodes; r++)
            if (multinode_step_missing(s, r))
                fprintf(f, " node %u", r);
        fprintf(f, "%s\n",
                s->have == s->nodes ? " none (the parts cannot merge: see the errors)" : "");
        text_errors(f, inc, s);
    }
}

void incomplete_free(struct incomplete *inc)
{
    multinode_steps_free(&inc->steps);
    nodeerrs_free(&inc->errs);
}
