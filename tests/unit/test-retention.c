/*
 * test-retention.c — retention planning (service/retention.c) over a real
 * repository: snapshots taken with snapshot_take into two dir regions in a
 * scratch directory, then planned with each kind of rule the module
 * offers:
 * - no rule: everything kept, and said so;
 * - keep_last N (the N newest checkpoints), keep_every K (steps divisible
 *   by K), keep_within D (seconds before the newest);
 * - keep_best M by best_metric, min and max, from the newest checkpoint's
 *   trainer_state.json (its best_model_checkpoint always kept);
 * - always kept: the run's resume point (the newest checkpoint), and a
 *   snapshot not committed anywhere yet;
 * - snapshots without a step: the newest max(N, 1) of each root;
 * - retention_apply: the forget records go into every region and the next
 *   plan no longer lists what they remove;
 * - retention_id_time on ids and on what is not one.
 * The plan is read through plan_of() and keeps_of(), so a change of the
 * planning API (retention_run) touches those two only.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "base/err.h"
#include "service/retention.h"
#include "service/snapshot.h"
#include "testrepo.h"

#define CHUNKER "[chunker]\nmin = 1K\navg = 4K\nmax = 16K\n"
#define MAXSNAP 16

struct fx {
    struct test_repo tr;
    char ids[MAXSNAP][MANIFEST_ID_MAX + 1];
    int64_t steps[MAXSNAP];
    size_t n;
    struct retention_plan plan;
};

/* A trainer_state.json whose log_history gives step 10 * (k + 1) the
 * metric losses[k], and names best_model_checkpoint (NULL: none). */
static void write_trainer_state(const char *dir, const double *losses, size_t n, const char *best)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/trainer_state.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{");
    if (best)
        fprintf(f, "\"best_model_checkpoint\": \"out/%s\", ", best);
    fprintf(f, "\"log_history\": [");
    for (size_t k = 0; k < n; k++)
        fprintf(f, "%s{\"step\": %zu, \"loss\": 1.5, \"eval_loss\": %g}", k ? ", " : "",
                10 * (k + 1), losses[k]);
    fprintf(f, "]}\n");
    assert_int_equal(fclose(f), 0);
}

/* Takes a snapshot of watch/<name> (made with one file) at step (-1:
 * none), committed in every region. */
static void take(struct fx *x, const char *run, const char *name, int64_t step, unsigned seed,
                 const double *losses, size_t nlosses, const char *best)
{
    char dir[256];
    struct snapshot_result res;
    struct buf err = BUF_INIT;
    snprintf(dir, sizeof(dir), "%s/watch/%s", x->tr.tmp, name);
    mkdir(dir, 0755);
    test_write_file(dir, "model.bin", 5000 + seed, seed);
    if (nlosses)
        write_trainer_state(dir, losses, nlosses, best);
    struct snapshot_opts o = {.path = dir, .run = run, .step = step};
    int e = snapshot_take(x->tr.r, &o, &res, &err);
    if (e != 0)
        fail_msg("snapshot of \"%s\": %d %s", dir, e, buf_str(&err));
    buf_free(&err);
    assert_true(x->n < MAXSNAP);
    snprintf(x->ids[x->n], sizeof(x->ids[x->n]), "%s", res.id);
    x->steps[x->n++] = step;
}

/* Steps 10..50 of run "r", one checkpoint each, oldest first. */
static void take_five(struct fx *x, const double *losses, const char *best)
{
    for (int k = 0; k < 5; k++) {
        char name[32];
        snprintf(name, sizeof(name), "checkpoint-%d", 10 * (k + 1));
        take(x, "r", name, 10 * (k + 1), (unsigned)k + 1, k == 4 ? losses : NULL,
             k == 4 && losses ? 5 : 0, best);
    }
}

static struct fx *fx_new(void)
{
    struct fx *x = calloc(1, sizeof(*x));
    assert_non_null(x);
    test_repo_open(&x->tr, "retention", 2, 2, CHUNKER);
    return x;
}

static void fx_free(struct fx *x)
{
    retention_plan_free(&x->plan);
    test_repo_close(&x->tr);
    free(x);
}

static struct retention_policy policy(void)
{
    struct retention_policy p;
    memset(&p, 0, sizeof(p));
    snprintf(p.best_metric, sizeof(p.best_metric), "eval_loss");
    return p;
}

/* The plan of run under pol (the one call of the planning API). */
static const struct retention_plan *plan_of(struct fx *x, const char *run,
                                            const struct retention_policy *pol)
{
    struct buf err = BUF_INIT;
    retention_plan_free(&x->plan);
    if (retention_plan(x->tr.r, run, pol, &x->plan, &err) < 0)
        fail_msg("retention_plan: %s", buf_str(&err));
    buf_free(&err);
    return &x->plan;
}

/* The plan's item for snapshot k of the fixture. */
static const struct retention_item *item_of(struct fx *x, size_t k)
{
    for (size_t i = 0; i < x->plan.n; i++)
        if (!strcmp(x->plan.v[i].id, x->ids[k]))
            return &x->plan.v[i];
    fail_msg("snapshot %zu (%s) is not in the plan", k, x->ids[k]);
    return NULL;
}

/* Which of the fixture's snapshots the plan keeps, as a string of 'k' and
 * '-' oldest first; each kept one's reason must contain why[k] (NULL or
 * "": any).  A forgotten one says "no rule keeps it". */
static void keeps_of(struct fx *x, const char *want, const char *const *why)
{
    assert_int_equal(strlen(want), x->n);
    size_t forget = 0;
    for (size_t k = 0; k < x->n; k++) {
        const struct retention_item *it = item_of(x, k);
        if (it->keep != (want[k] == 'k'))
            fail_msg("snapshot %zu (step %lld): keep %d, want %c (%s)", k, (long long)x->steps[k],
                     it->keep, want[k], it->why);
        if (!it->keep) {
            assert_string_equal(it->why, "no rule keeps it");
            forget++;
        } else if (why && why[k] && why[k][0] && !strstr(it->why, why[k])) {
            fail_msg("snapshot %zu (step %lld): kept for \"%s\", want \"%s\"", k,
                     (long long)x->steps[k], it->why, why[k]);
        }
    }
    assert_int_equal(x->plan.nforget, forget);
}

/* ---- tests --------------------------------------------------------------- */

static void test_no_rule_keeps_all(void **state)
{
    struct fx *x = fx_new();
    take_five(x, NULL, NULL);
    struct retention_policy p = policy();
    const struct retention_plan *pl = plan_of(x, "r", &p);
    assert_string_equal(pl->run, "r");
    assert_int_equal(pl->n, 5);
    /* newest first */
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(pl->v[i].id, x->ids[4 - i]);
        assert_int_equal(pl->v[i].step, x->steps[4 - i]);
        assert_int_equal(pl->v[i].gen, 0);
        assert_int_equal(pl->v[i].time, retention_id_time(x->ids[4 - i]));
    }
    static const char *const why[] = {"no retention policy", "no retention policy",
                                      "no retention policy", "no retention policy", "resume point"};
    keeps_of(x, "kkkkk", why);
    /* another run has nothing to plan */
    assert_int_equal(plan_of(x, "other", &p)->n, 0);
    fx_free(x);
}

static void test_keep_last_every_within(void **state)
{
    struct fx *x = fx_new();
    take_five(x, NULL, NULL);
    struct retention_policy p = policy();
    p.keep_last = 2;
    plan_of(x, "r", &p);
    static const char *const last[] = {NULL, NULL, NULL, "keep-last 2 (#2)", "resume point"};
    keeps_of(x, "---kk", last);

    p = policy();
    p.keep_every = 20;
    plan_of(x, "r", &p);
    static const char *const every[] = {NULL, "keep-every 20", NULL, "keep-every 20",
                                        "resume point"};
    keeps_of(x, "-k-kk", every);

    p = policy();
    p.keep_last = 1;
    p.keep_every = 30;
    plan_of(x, "r", &p);
    keeps_of(x, "--k-k", NULL);

    /* every snapshot was taken within a day of the newest */
    p = policy();
    p.keep_within = 86400;
    plan_of(x, "r", &p);
    static const char *const within[] = {"keep-within 86400s", "keep-within", "keep-within",
                                         "keep-within", "resume point"};
    keeps_of(x, "kkkkk", within);
    fx_free(x);
}

static void test_keep_best(void **state)
{
    struct fx *x = fx_new();
    /* eval_loss of steps 10..50 */
    static const double losses[] = {0.5, 0.3, 0.4, 0.9, 0.8};
    take_five(x, losses, "checkpoint-10");
    struct retention_policy p = policy();
    p.keep_best = 2;
    plan_of(x, "r", &p);
    static const char *const minw[] = {"best_model_checkpoint", "eval_loss = 0.3 (#1)",
                                       "eval_loss = 0.4 (#2)", NULL, "resume point"};
    keeps_of(x, "kkk-k", minw);
    for (size_t k = 0; k < 5; k++) {
        const struct retention_item *it = item_of(x, k);
        assert_true(it->has_metric);
        assert_true(it->metric == losses[k]);
    }

    p.best_max = true;
    plan_of(x, "r", &p);
    static const char *const maxw[] = {"best_model_checkpoint", NULL, NULL, "eval_loss = 0.9 (#1)",
                                       "resume point"};
    keeps_of(x, "k--kk", maxw);

    /* a metric the log does not have keeps nothing by it */
    snprintf(p.best_metric, sizeof(p.best_metric), "eval_accuracy");
    plan_of(x, "r", &p);
    keeps_of(x, "k---k", NULL);
    assert_false(item_of(x, 2)->has_metric);
    fx_free(x);
}

/* Without a trainer_state.json the rule keeps nothing (and the others
 * still apply). */
static void test_keep_best_without_state(void **state)
{
    struct fx *x = fx_new();
    take_five(x, NULL, NULL);
    struct retention_policy p = policy();
    p.keep_best = 3;
    p.keep_every = 40;
    plan_of(x, "r", &p);
    keeps_of(x, "---kk", NULL);
    fx_free(x);
}

/* Snapshots without a step: the newest max(N, 1) of each root. */
static void test_stepless_units(void **state)
{
    struct fx *x = fx_new();
    take(x, "r", "logs", -1, 1, NULL, 0, NULL);
    take(x, "r", "checkpoint-10", 10, 2, NULL, 0, NULL);
    take(x, "r", "logs", -1, 3, NULL, 0, NULL);
    take(x, "r", "configs", -1, 4, NULL, 0, NULL);
    take(x, "r", "logs", -1, 5, NULL, 0, NULL);
    take(x, "r", "checkpoint-20", 20, 6, NULL, 0, NULL);
    struct retention_policy p = policy();
    p.keep_every = 1000; /* active, keeps no checkpoint */
    plan_of(x, "r", &p);
    static const char *const one[] = {
        NULL, NULL, NULL, "newest 1 of \"configs\"", "newest 1 of \"logs\"", "resume point"};
    keeps_of(x, "---kkk", one);
    for (size_t k = 0; k < x->n; k++)
        assert_int_equal(item_of(x, k)->step, x->steps[k]);

    p.keep_last = 2; /* two of each root, and the two newest checkpoints */
    plan_of(x, "r", &p);
    static const char *const two[] = {NULL,
                                      "keep-last 2 (#2)",
                                      "newest 2 of \"logs\"",
                                      "newest 2 of \"configs\"",
                                      "newest 2 of \"logs\"",
                                      "resume point"};
    keeps_of(x, "-kkkkk", two);
    fx_free(x);
}

/* A snapshot whose manifest is published but that no region has a
 * commit record of yet (a crash between the two) is never removed. */
static void test_uncommitted_kept(void **state)
{
    struct fx *x = fx_new();
    take_five(x, NULL, NULL);
    /* the commit records of step 20, removed from every region */
    for (unsigned i = 0; i < 2; i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/regions/r%u/commits/r/g0.s20.%s", x->tr.tmp, i, x->ids[1]);
        if (unlink(path) < 0)
            fail_msg("\"%s\": %s (the commit record's key changed?)", path, strerror(errno));
    }
    struct retention_policy p = policy();
    p.keep_last = 1;
    plan_of(x, "r", &p);
    static const char *const why[] = {NULL, "not committed yet", NULL, NULL, "resume point"};
    keeps_of(x, "-k--k", why);
    fx_free(x);
}

static void test_apply(void **state)
{
    struct fx *x = fx_new();
    take_five(x, NULL, NULL);
    struct retention_policy p = policy();
    p.keep_last = 2;
    plan_of(x, "r", &p);
    struct buf err = BUF_INIT;
    assert_int_equal(retention_apply(x->tr.r, &x->plan, &err), 0);
    assert_int_equal(x->plan.forgotten_regions, 2);
    buf_free(&err);
    /* the next plan sees only what was kept */
    const struct retention_plan *pl = plan_of(x, "r", &p);
    assert_int_equal(pl->n, 2);
    assert_string_equal(pl->v[0].id, x->ids[4]);
    assert_string_equal(pl->v[1].id, x->ids[3]);
    assert_int_equal(pl->nforget, 0);
    /* applying a plan that forgets nothing writes nothing */
    assert_int_equal(retention_apply(x->tr.r, &x->plan, &err), 0);
    assert_int_equal(x->plan.forgotten_regions, 2);
    buf_free(&err);
    fx_free(x);
}

static void test_id_time(void **state)
{
    static const struct {
        const char *id;
        int64_t want;
    } cases[] = {
        {"20261201T000701.123456Z-3f2a9c1b", 1796083621},
        {"19700101T000000.000000Z-00000000", 0},
        {"20240229T235959.999999Z-ffffffff", 1709251199},
        {"20230229T000000.000000Z-00000000", -1}, /* no such day */
        {"20261201X000701.123456Z-3f2a9c1b", -1},
        {"2026120", -1},
        {"", -1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (retention_id_time(cases[i].id) != cases[i].want)
            fail_msg("\"%s\": %lld, want %lld", cases[i].id,
                     (long long)retention_id_time(cases[i].id), (long long)cases[i].want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_rule_keeps_all),
        cmocka_unit_test(test_keep_last_every_within),
        cmocka_unit_test(test_keep_best),
        cmocka_unit_test(test_keep_best_without_state),
        cmocka_unit_test(test_stepless_units),
        cmocka_unit_test(test_uncommitted_kept),
        cmocka_unit_test(test_apply),
        cmocka_unit_test(test_id_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
