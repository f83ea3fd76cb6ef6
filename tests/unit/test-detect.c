/*
 * test-detect.c — completion of units: every framework marker, quiescence
 * (not before settle; a file open for writing holds it until closed or
 * until 10 x settle), explicit commits, dirty again after completion,
 * newest-first order, the "_root" run, ignored names, deletes, and the
 * step parsed from names (table-driven).  Time is passed explicitly; the
 * marker files DeepSpeed and Megatron need are real files in a scratch
 * root.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/detect.h"
#include "testutil.h"

#define SETTLE 10 /* seconds */
#define S(x) ((int64_t)(x)*1000)

struct scratch {
    char dir[64];
    struct detector *d;
};

static int scratch_setup(void **state)
{
    struct scratch *s = calloc(1, sizeof(*s));
    if (!s)
        return -1;
    snprintf(s->dir, sizeof(s->dir), "/tmp/test-detect-XXXXXX");
    if (!mkdtemp(s->dir) || detector_new(s->dir, SETTLE, &s->d) < 0) {
        free(s);
        return -1;
    }
    *state = s;
    return 0;
}

static int scratch_teardown(void **state)
{
    struct scratch *s = *state;
    detector_free(s->d);
    test_rm_rf(s->dir);
    free(s);
    return 0;
}

/* ---- helpers ----------------------------------------------------------- */

static void mkdir_in(const struct scratch *s, const char *name)
{
    char path[512];
    int n = snprintf(path, sizeof(path), "%s/%s", s->dir, name);
    assert_true(n > 0 && (size_t)n < sizeof(path));
    assert_int_equal(mkdir(path, 0755), 0);
}

static void write_in(const struct scratch *s, const char *name, const char *text)
{
    char path[512];
    int n = snprintf(path, sizeof(path), "%s/%s", s->dir, name);
    assert_true(n > 0 && (size_t)n < sizeof(path));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

/* What the watcher reports for a file written and closed. */
static void written(struct scratch *s, const char *path, int64_t now)
{
    detector_event(s->d, WATCH_CREATE, path, false, now);
    detector_event(s->d, WATCH_WRITE, path, false, now);
    detector_event(s->d, WATCH_CLOSE_WRITE, path, false, now);
}

static void expect_ready(struct scratch *s, int64_t now, const char *run, const char *unit,
                         int64_t step, enum detect_reason reason)
{
    struct detect_ready r;
    memset(&r, 0x5a, sizeof(r));
    assert_int_equal(detector_next(s->d, now, &r), 1);
    assert_string_equal(r.run, run);
    assert_string_equal(r.unit, unit);
    assert_int_equal(r.step, step);
    assert_int_equal(r.reason, reason);
}

static void expect_none(struct scratch *s, int64_t now)
{
    struct detect_ready r;
    assert_int_equal(detector_next(s->d, now, &r), 0);
}

/* ---- markers ----------------------------------------------------------- */

static void test_hf_trainer_state(void **state)
{
    struct scratch *s = *state;
    written(s, "run1/checkpoint-100/model.safetensors", S(1));
    written(s, "run1/checkpoint-100/optimizer.pt", S(2));
    expect_none(s, S(3));
    assert_int_equal(detector_pending(s->d), 1);

    written(s, "run1/checkpoint-100/trainer_state.json", S(4));
    expect_ready(s, S(4), "run1", "run1/checkpoint-100", 100, DETECT_MARKER);
    expect_none(s, S(100));
    assert_int_equal(detector_pending(s->d), 0);
    assert_int_equal(detector_deadline(s->d), -1);

    /* Not a marker deeper down, nor in a file unit. */
    written(s, "run1/checkpoint-200/sub/trainer_state.json", S(200));
    written(s, "run1/trainer_state.json", S(200));
    expect_none(s, S(201));
    assert_int_equal(detector_pending(s->d), 2);
}

static void test_dcp_metadata(void **state)
{
    struct scratch *s = *state;
    written(s, "job/step-5/__0_0.distcp", S(1));
    written(s, "job/step-5/__1_0.distcp", S(1));
    expect_none(s, S(2));
    written(s, "job/step-5/.metadata", S(2));
    expect_ready(s, S(2), "job", "job/step-5", 5, DETECT_MARKER);

    /* Renamed into place counts too, also deeper inside the unit. */
    detector_event(s->d, WATCH_MOVED_IN, "job/dcp/model/.metadata", false, S(3));
    expect_ready(s, S(3), "job", "job/dcp", -1, DETECT_MARKER);
    /* Only closing after a write or moving in completes. */
    detector_event(s->d, WATCH_CREATE, "job/step-6/.metadata", false, S(4));
    detector_event(s->d, WATCH_WRITE, "job/step-6/.metadata", false, S(4));
    expect_none(s, S(5));
}

static void test_deepspeed_latest(void **state)
{
    struct scratch *s = *state;
    mkdir_in(s, "ds");
    mkdir_in(s, "ds/global_step300");
    written(s, "ds/global_step300/mp_rank_00_model_states.pt", S(1));
    write_in(s, "ds/latest", "global_step300\n");
    written(s, "ds/latest", S(2));

    expect_ready(s, S(2), "ds", "ds/global_step300", 300, DETECT_MARKER);
    expect_none(s, S(3));
    /* The latest file is a loose unit of its own, complete when quiet. */
    assert_int_equal(detector_pending(s->d), 1);
    expect_none(s, S(2 + SETTLE) - 1);
    expect_ready(s, S(2 + SETTLE), "ds", "ds/latest", -1, DETECT_QUIET);

    /* A tag that leaves the run, or names no directory, completes nothing. */
    write_in(s, "ds/latest", "../global_step300\n");
    written(s, "ds/latest", S(50));
    write_in(s, "ds/latest", "  global_step400  \n");
    written(s, "ds/latest", S(51));
    write_in(s, "ds/latest", ".ckptsync-pins\n");
    written(s, "ds/latest", S(52));
    expect_none(s, S(53));

    /* Moved into place, with surrounding blanks and a second line. */
    mkdir_in(s, "ds/global_step400");
    write_in(s, "ds/latest", "  global_step400 \r\nextra\n");
    detector_event(s->d, WATCH_MOVED_IN, "ds/latest", false, S(54));
    expect_ready(s, S(54), "ds", "ds/global_step400", 400, DETECT_MARKER);
}

static void test_megatron_tracker(void **state)
{
    struct scratch *s = *state;
    mkdir_in(s, "mg");
    mkdir_in(s, "mg/iter_0000500");
    written(s, "mg/iter_0000500/mp_rank_00/model_optim_rng.pt", S(1));
    write_in(s, "mg/latest_checkpointed_iteration.txt", "500");
    written(s, "mg/latest_checkpointed_iteration.txt", S(2));
    expect_ready(s, S(2), "mg", "mg/iter_0000500", 500, DETECT_MARKER);

    mkdir_in(s, "mg/release");
    write_in(s, "mg/latest_checkpointed_iteration.txt", "release\n");
    written(s, "mg/latest_checkpointed_iteration.txt", S(3));
    expect_ready(s, S(3), "mg", "mg/release", -1, DETECT_MARKER);

    write_in(s, "mg/latest_checkpointed_iteration.txt", "12x");
    written(s, "mg/latest_checkpointed_iteration.txt", S(4));
    write_in(s, "mg/latest_checkpointed_iteration.txt", "600"); /* no iter_0000600 */
    written(s, "mg/latest_checkpointed_iteration.txt", S(5));
    expect_none(s, S(6));
    expect_ready(s, S(5 + SETTLE), "mg", "mg/latest_checkpointed_iteration.txt", -1, DETECT_QUIET);
}

static void test_single_file(void **state)
{
    struct scratch *s = *state;
    static const char *const done[] = {"r/step_1000.pt", "r/model.pth", "r/epoch=3-step=7.ckpt",
                                       "r/model.safetensors", "r/pytorch_model.bin"};
    static const int64_t steps[] = {1000, -1, 7, -1, -1};
    for (size_t i = 0; i < sizeof(done) / sizeof(done[0]); i++) {
        detector_event(s->d, WATCH_CREATE, done[i], false, S(1));
        detector_event(s->d, WATCH_WRITE, done[i], false, S(1));
        expect_none(s, S(1));
        detector_event(s->d, WATCH_CLOSE_WRITE, done[i], false, S(2));
        expect_ready(s, S(2), "r", done[i], steps[i], DETECT_MARKER);
    }
    detector_event(s->d, WATCH_MOVED_IN, "r/step_2000.pt", false, S(3));
    expect_ready(s, S(3), "r", "r/step_2000.pt", 2000, DETECT_MARKER);

    /* Not single-file checkpoints: a log, a .pt inside a unit directory. */
    written(s, "r/train.log", S(4));
    written(s, "r/checkpoint-9/rng_state.pt", S(4));
    expect_none(s, S(5));
    assert_int_equal(detector_pending(s->d), 2);
}

/* ---- quiescence -------------------------------------------------------- */

static void test_quiet_after_settle(void **state)
{
    struct scratch *s = *state;
    assert_int_equal(detector_deadline(s->d), -1);
    written(s, "run/logs/events.txt", S(0));
    written(s, "run/logs/events.txt", S(3));
    assert_int_equal(detector_pending(s->d), 1);
    assert_true(detector_deadline(s->d) <= S(3 + SETTLE));
    expect_none(s, S(3 + SETTLE) - 1);
    assert_int_equal(detector_deadline(s->d), S(3 + SETTLE));
    expect_ready(s, S(3 + SETTLE), "run", "run/logs", -1, DETECT_QUIET);
    assert_int_equal(detector_pending(s->d), 0);
    expect_none(s, S(100));
    assert_int_equal(detector_deadline(s->d), -1);
}

static void test_open_for_write_blocks(void **state)
{
    struct scratch *s = *state;

    /* Written, not closed yet: held past settle, released by the close. */
    detector_event(s->d, WATCH_CREATE, "run/ckpt/a.bin", false, S(0));
    detector_event(s->d, WATCH_WRITE, "run/ckpt/a.bin", false, S(1));
    expect_none(s, S(1 + SETTLE));
    expect_none(s, S(5 * SETTLE));
    detector_event(s->d, WATCH_CLOSE_WRITE, "run/ckpt/a.bin", false, S(60));
    expect_none(s, S(60 + SETTLE) - 1);
    expect_ready(s, S(60 + SETTLE), "run", "run/ckpt", -1, DETECT_QUIET);

    /* Never closed: taken anyway after 10 x settle without any event. */
    detector_event(s->d, WATCH_WRITE, "run/stuck/b.bin", false, S(100));
    detector_event(s->d, WATCH_CLOSE_WRITE, "run/stuck/c.bin", false, S(101));
    expect_none(s, S(101 + SETTLE));
    /* The deadline may be early (a lower bound), never late. */
    assert_true(detector_deadline(s->d) <= S(101 + DETECT_STALL_FACTOR * SETTLE));
    expect_none(s, S(101 + DETECT_STALL_FACTOR * SETTLE) - 1);
    assert_int_equal(detector_deadline(s->d), S(101 + DETECT_STALL_FACTOR * SETTLE));
    expect_ready(s, S(101 + DETECT_STALL_FACTOR * SETTLE), "run", "run/stuck", -1, DETECT_QUIET);

    /* A file deleted (or renamed away) while open is no longer waited for. */
    detector_event(s->d, WATCH_WRITE, "run/tmp/x.part", false, S(200));
    detector_event(s->d, WATCH_DELETE, "run/tmp/x.part", false, S(201));
    expect_ready(s, S(201 + SETTLE), "run", "run/tmp", -1, DETECT_QUIET);

    /* A directory removed with its open files. */
    detector_event(s->d, WATCH_WRITE, "run/u/d/y", false, S(300));
    detector_event(s->d, WATCH_DELETE, "run/u/d", true, S(301));
    expect_ready(s, S(301 + SETTLE), "run", "run/u", -1, DETECT_QUIET);
}

/* ---- commits, re-dirtying, order ---------------------------------------- */

static void test_explicit_commit(void **state)
{
    struct scratch *s = *state;
    mkdir_in(s, "run");
    mkdir_in(s, "run/checkpoint-7");
    mkdir_in(s, "run/checkpoint-7/sub");
    write_in(s, "run/checkpoint-7/sub/file", "x");
    write_in(s, "run/notes.txt", "x");
    write_in(s, "loose.bin", "x");

    detector_event(s->d, WATCH_WRITE, "run/checkpoint-7/sub/file", false, S(1));
    assert_int_equal(detector_commit(s->d, "run/checkpoint-7/sub/file", 42, S(2)), 0);
    expect_ready(s, S(2), "run", "run/checkpoint-7", 42, DETECT_EXPLICIT);

    assert_int_equal(detector_commit(s->d, "./run//checkpoint-7/", -1, S(3)), 0);
    expect_ready(s, S(3), "run", "run/checkpoint-7", 7, DETECT_EXPLICIT);

    char abs[512];
    snprintf(abs, sizeof(abs), "%s/run/notes.txt", s->dir);
    assert_int_equal(detector_commit(s->d, abs, 3, S(4)), 0);
    expect_ready(s, S(4), "run", "run/notes.txt", 3, DETECT_EXPLICIT);
    assert_int_equal(detector_commit(s->d, "loose.bin", -1, S(5)), 0);
    expect_ready(s, S(5), DETECT_ROOT_RUN, "loose.bin", -1, DETECT_EXPLICIT);

    assert_int_equal(detector_commit(s->d, "run", -1, S(6)), -EINVAL);
    assert_int_equal(detector_commit(s->d, "run/../run/checkpoint-7", -1, S(6)), -EINVAL);
    assert_int_equal(detector_commit(s->d, "/elsewhere/run/x", -1, S(6)), -EINVAL);
    assert_int_equal(detector_commit(s->d, "", -1, S(6)), -EINVAL);
    assert_int_equal(detector_commit(s->d, ".ckptsync-pins/x", -1, S(6)), -EINVAL);
    assert_int_equal(detector_commit(s->d, "run/checkpoint-8", -1, S(6)), -ENOENT);
    expect_none(s, S(100));
}

static void test_dirty_again(void **state)
{
    struct scratch *s = *state;

    written(s, "run/checkpoint-1/trainer_state.json", S(0));
    expect_ready(s, S(0), "run", "run/checkpoint-1", 1, DETECT_MARKER);
    written(s, "run/checkpoint-1/README.md", S(1));
    assert_int_equal(detector_pending(s->d), 1);
    expect_none(s, S(1 + SETTLE) - 1);
    expect_ready(s, S(1 + SETTLE), "run", "run/checkpoint-1", 1, DETECT_QUIET);

    /* Ready but not yet handed out: an event takes it back. */
    written(s, "run/checkpoint-2/trainer_state.json", S(20));
    detector_event(s->d, WATCH_WRITE, "run/checkpoint-2/extra", false, S(21));
    expect_none(s, S(21));
    assert_int_equal(detector_pending(s->d), 1);
    written(s, "run/checkpoint-2/trainer_state.json", S(22));
    expect_ready(s, S(22), "run", "run/checkpoint-2", 2, DETECT_MARKER);
}

static void test_newest_first(void **state)
{
    struct scratch *s = *state;

    written(s, "run/checkpoint-100/a", S(3));
    written(s, "run/checkpoint-300/a", S(1));
    written(s, "run/checkpoint-200/a", S(2));
    written(s, "run/notes-a.txt", S(1));
    written(s, "run/notes-b.txt", S(2));
    int64_t t = S(3 + SETTLE);
    expect_ready(s, t, "run", "run/checkpoint-300", 300, DETECT_QUIET);
    expect_ready(s, t, "run", "run/checkpoint-200", 200, DETECT_QUIET);
    expect_ready(s, t, "run", "run/checkpoint-100", 100, DETECT_QUIET);
    expect_ready(s, t, "run", "run/notes-b.txt", -1, DETECT_QUIET); /* more recent */
    expect_ready(s, t, "run", "run/notes-a.txt", -1, DETECT_QUIET);
    expect_none(s, t);

    /* Markers and commits ready at once sort the same way. */
    written(s, "r2/step_5.pt", S(50));
    written(s, "r2/step_9.pt", S(50));
    written(s, "r2/step_7.pt", S(51));
    expect_ready(s, S(51), "r2", "r2/step_9.pt", 9, DETECT_MARKER);
    expect_ready(s, S(51), "r2", "r2/step_7.pt", 7, DETECT_MARKER);
    expect_ready(s, S(51), "r2", "r2/step_5.pt", 5, DETECT_MARKER);
}

static void test_root_run(void **state)
{
    struct scratch *s = *state;
    written(s, "notes.txt", S(0));
    written(s, "model.safetensors", S(0));
    expect_ready(s, S(0), DETECT_ROOT_RUN, "model.safetensors", -1, DETECT_MARKER);
    expect_ready(s, S(SETTLE), DETECT_ROOT_RUN, "notes.txt", -1, DETECT_QUIET);

    /* A run directory itself is not a unit. */
    detector_event(s->d, WATCH_CREATE, "run9", true, S(20));
    assert_int_equal(detector_pending(s->d), 0);
}

/* Hugging Face with output_dir=<root>, DeepSpeed with save_dir=<root>: a
 * folder directly under the root whose name carries a step is a
 * checkpoint of the run _root, with the markers a run's checkpoint has;
 * its staging name is nothing; any other folder there is still a run. */
static void test_root_checkpoints(void **state)
{
    struct scratch *s = *state;
    detector_event(s->d, WATCH_CREATE, "tmp-checkpoint-500", true, S(0));
    written(s, "tmp-checkpoint-500/model.safetensors", S(0));
    written(s, "tmp-checkpoint-500/trainer_state.json", S(0));
    assert_int_equal(detector_pending(s->d), 0);
    expect_none(s, S(1000));

    detector_event(s->d, WATCH_DELETE, "tmp-checkpoint-500", true, S(1));
    detector_event(s->d, WATCH_MOVED_IN, "checkpoint-500", true, S(1));
    detector_event(s->d, WATCH_MOVED_IN, "checkpoint-500/model.safetensors", false, S(1));
    assert_int_equal(detector_pending(s->d), 1); /* one unit, not a run of files */
    detector_event(s->d, WATCH_MOVED_IN, "checkpoint-500/trainer_state.json", false, S(1));
    expect_ready(s, S(1), DETECT_ROOT_RUN, "checkpoint-500", 500, DETECT_MARKER);
    assert_int_equal(detector_pending(s->d), 0);

    /* DeepSpeed: <root>/global_step300 named by <root>/latest */
    mkdir_in(s, "global_step300");
    written(s, "global_step300/mp_rank_00_model_states.pt", S(2));
    write_in(s, "latest", "global_step300\n");
    written(s, "latest", S(3));
    expect_ready(s, S(3), DETECT_ROOT_RUN, "global_step300", 300, DETECT_MARKER);

    /* committed by path, as a unit */
    mkdir_in(s, "step_7");
    assert_int_equal(detector_commit(s->d, "step_7", 7, S(4)), 0);
    expect_ready(s, S(4), DETECT_ROOT_RUN, "step_7", 7, DETECT_EXPLICIT);

    /* a folder without a step in its name is a run */
    written(s, "myrun/checkpoint-9/trainer_state.json", S(5));
    expect_ready(s, S(5), "myrun", "myrun/checkpoint-9", 9, DETECT_MARKER);
}

static void test_ignored_names(void **state)
{
    struct scratch *s = *state;
    written(s, ".ckptsync-pins/p/run/checkpoint-1/trainer_state.json", S(0));
    written(s, "run/.ckptsync-restore.12/x.pt", S(0));
    written(s, ".ckptsync-x.pt", S(0));
    detector_event(s->d, WATCH_OVERFLOW, "", false, S(0));
    assert_int_equal(detector_pending(s->d), 0);
    expect_none(s, S(1000));

    /* Temporary and hidden files inside a unit are activity. */
    written(s, "run/checkpoint-3/.model.bin.tmp", S(0));
    assert_int_equal(detector_pending(s->d), 1);
}

/* A framework's staging folder, a hidden run or unit, a temporary file:
 * never a unit, whatever is written in it (markers included); the name it
 * is renamed to is a unit as usual. */
static void test_transient_units(void **state)
{
    struct scratch *s = *state;
    static const char *const paths[] = {
        "run/tmp-checkpoint-500/trainer_state.json", /* HF Trainer staging */
        "run/tmp-checkpoint-500/model.safetensors",
        "run/.ipynb_checkpoints/x.pt",
        ".hidden-run/checkpoint-1/trainer_state.json",
        ".cache/huggingface/hub/model.bin",
        ".stray.pt",
        "run/model.safetensors.incomplete",
        "run/epoch=3-step=900.ckpt.tmp",
        "run/tmpab12cd_9.pt", /* Python tempfile */
        "run/1000.orbax-checkpoint-tmp-1712345678/_METADATA",
        "run/ckpt-1_temp/part-00000-of-00001.data-00000-of-00001",
        "run/megatron_gpt--step=100.ckpt-unfinished",
        "run/step_3.pt.TMP",
        "tmp-checkpoint-9.pt.partial",
    };
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        written(s, paths[i], S(0));
    detector_event(s->d, WATCH_CREATE, "run/tmp-checkpoint-600", true, S(0));
    assert_int_equal(detector_pending(s->d), 0);
    expect_none(s, S(1000));
    /* nor by commit */
    mkdir_in(s, "run");
    mkdir_in(s, "run/tmp-checkpoint-500");
    assert_int_equal(detector_commit(s->d, "run/tmp-checkpoint-500", -1, S(1)), -EINVAL);

    /* renamed to its final name: the watcher reports the move, then what
     * is inside; the marker inside makes it ready */
    detector_event(s->d, WATCH_DELETE, "run/tmp-checkpoint-500", true, S(2));
    detector_event(s->d, WATCH_MOVED_IN, "run/checkpoint-500", true, S(2));
    detector_event(s->d, WATCH_MOVED_IN, "run/checkpoint-500/model.safetensors", false, S(2));
    detector_event(s->d, WATCH_MOVED_IN, "run/checkpoint-500/trainer_state.json", false, S(2));
    expect_ready(s, S(2), "run", "run/checkpoint-500", 500, DETECT_MARKER);
    assert_int_equal(detector_pending(s->d), 0);
    /* a temporary file renamed into place: a single-file checkpoint */
    detector_event(s->d, WATCH_DELETE, "run/tmpab12cd_9.pt", false, S(3));
    detector_event(s->d, WATCH_MOVED_IN, "run/epoch=3-step=900.ckpt", false, S(3));
    expect_ready(s, S(3), "run", "run/epoch=3-step=900.ckpt", 900, DETECT_MARKER);
}

static void test_name_transient(void **state)
{
    static const struct {
        const char *name;
        bool transient;
    } cases[] = {
        {"tmp-checkpoint-500", true},
        {".ipynb_checkpoints", true},
        {".incomplete", true},
        {".metadata", true},
        {"x.tmp", true},
        {"x.TMP", true},
        {"x.temp", true},
        {"x.part", true},
        {"x.partial", true},
        {"model.safetensors.incomplete", true},
        {"a-unfinished", true},
        {"tmpk3j2_9xq", true},
        {"tmpab12cd34.pt", true},
        {"5.orbax-checkpoint-tmp-1712345678", true},
        {"ckpt-1_temp", true},
        {"ckpt_temp_0123456789abcdef0123456789abcdef", true},
        {"checkpoint-500", false},
        {"global_step100", false},
        {"iter_0000100", false},
        {"epoch=3-step=900.ckpt", false},
        {"latest", false},
        {"train.log", false},
        {"tmp", false},
        {"tmpdir", false},      /* not 8 characters of tempfile's alphabet */
        {"tmpAB12CD34", false}, /* tempfile uses lower case */
        {"tmpab12cd34x", false},
        {"model_temp_0.5", false}, /* a temperature, not TensorFlow's suffix */
        {"template", false},
        {".tmp", true}, /* hidden */
        {"tmp.", false},
        {"", false},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (ckptname_transient(cases[i].name, strlen(cases[i].name)) != cases[i].transient)
            fail_msg("\"%s\": transient should be %d", cases[i].name, cases[i].transient);
    /* only len bytes are looked at */
    assert_true(ckptname_transient("x.tmp/checkpoint-1", 5));
    assert_false(ckptname_transient("checkpoint-1/x.tmp", 12));
}

static void test_deletes_and_forget(void **state)
{
    struct scratch *s = *state;

    written(s, "run/checkpoint-1/a", S(0));
    written(s, "run/checkpoint-2/a", S(0));
    written(s, "run/notes.txt", S(0));
    written(s, "other/checkpoint-1/a", S(0));
    assert_int_equal(detector_pending(s->d), 4);

    /* Deleting a file inside a unit is activity; deleting the unit drops it. */
    detector_event(s->d, WATCH_DELETE, "run/checkpoint-1/a", false, S(1));
    assert_int_equal(detector_pending(s->d), 4);
    detector_event(s->d, WATCH_DELETE, "run/checkpoint-1", true, S(1));
    detector_event(s->d, WATCH_DELETE, "run/notes.txt", false, S(1));
    assert_int_equal(detector_pending(s->d), 2);

    /* A marker-ready unit that is deleted before it is handed out. */
    written(s, "run/checkpoint-4/trainer_state.json", S(2));
    detector_forget(s->d, "run/checkpoint-4/trainer_state.json");
    assert_int_equal(detector_pending(s->d), 2);
    expect_none(s, S(2));

    /* A whole run removed. */
    detector_event(s->d, WATCH_DELETE, "run", true, S(3));
    assert_int_equal(detector_pending(s->d), 1);
    detector_forget(s->d, "other");
    assert_int_equal(detector_pending(s->d), 0);
    expect_none(s, S(1000));
}

static void test_flush(void **state)
{
    struct scratch *s = *state;
    written(s, "run/checkpoint-1/a", S(0));
    detector_event(s->d, WATCH_WRITE, "run/checkpoint-2/a", false, S(0));
    detector_flush(s->d, S(1));
    assert_int_equal(detector_pending(s->d), 0);
    expect_ready(s, S(1), "run", "run/checkpoint-2", 2, DETECT_QUIET);
    expect_ready(s, S(1), "run", "run/checkpoint-1", 1, DETECT_QUIET);
    expect_none(s, S(1));
}

/* Many units: the table grows and shrinks, every unit comes out once. */
static void test_many_units(void **state)
{
    struct scratch *s = *state;
    char path[64];
    for (int i = 0; i < 5000; i++) {
        snprintf(path, sizeof(path), "run%d/checkpoint-%d/f", i % 7, i);
        written(s, path, S(0));
    }
    assert_int_equal(detector_pending(s->d), 5000);
    for (int i = 0; i < 5000; i += 2) {
        snprintf(path, sizeof(path), "run%d/checkpoint-%d", i % 7, i);
        detector_event(s->d, WATCH_DELETE, path, true, S(1));
    }
    assert_int_equal(detector_pending(s->d), 2500);
    struct detect_ready r;
    int64_t last = INT64_MAX;
    for (int i = 0; i < 2500; i++) {
        assert_int_equal(detector_next(s->d, S(SETTLE), &r), 1);
        assert_true(r.step < last && r.step % 2 == 1);
        last = r.step;
    }
    expect_none(s, S(SETTLE));
}

/* ---- step from names --------------------------------------------------- */

static void test_step_from_name(void **state)
{
    static const struct {
        const char *name;
        int64_t step;
    } cases[] = {
        {"checkpoint-1000", 1000},
        {"checkpoint_12", 12},
        {"global_step1000", 1000},
        {"iter_0001000", 1000},
        {"iter-5", 5},
        {"step_1000", 1000},
        {"step-1000", 1000},
        {"step1000", 1000},
        {"step=1000", 1000},
        {"epoch=3-step=1000.ckpt", 1000},
        {"epoch=3-step=1000-v1.ckpt", 1000},
        {"step_1000.pt", 1000},
        {"Step_77", 77},
        {"model_step_5_rank0.pt", 5},
        {"run1/checkpoint-100", 100},
        {"checkpoint-100/model.bin", -1},
        {"step_0", 0},
        {"model_1000.pt", -1},
        {"checkpoint1000", -1},
        {"checkpoints-5", -1},
        {"iteration_5", -1},
        {"laststep5", -1},
        {"steps_1000", -1},
        {"step_", -1},
        {"step", -1},
        {"step_12a", -1},
        {"step_1234567890123456789", -1},
        {"checkpoint-latest", -1},
        {"latest", -1},
        {"", -1},
        {"step_5-step_9", 9},
        /* a path as typed on a command line (ckptsync snapshot PATH) */
        {"/data/cloud_storage/run1/checkpoint-1000/", 1000},
        {"run1/checkpoint-1000//", 1000},
        {"step_3/checkpoint-1000/", 1000},
        {"checkpoint-7/latest/", -1},
        {"/", -1},
        {"//", -1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t got = ckptname_step(cases[i].name);
        if (got != cases[i].step)
            fail_msg("\"%s\": step %lld, expected %lld", cases[i].name, (long long)got,
                     (long long)cases[i].step);
    }
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, scratch_setup, scratch_teardown)
    const struct CMUnitTest tests[] = {
        T(test_hf_trainer_state),
        T(test_dcp_metadata),
        T(test_deepspeed_latest),
        T(test_megatron_tracker),
        T(test_single_file),
        T(test_quiet_after_settle),
        T(test_open_for_write_blocks),
        T(test_explicit_commit),
        T(test_dirty_again),
        T(test_newest_first),
        T(test_root_run),
        T(test_root_checkpoints),
        T(test_ignored_names),
        T(test_transient_units),
        cmocka_unit_test(test_name_transient),
        T(test_deletes_and_forget),
        T(test_flush),
        T(test_many_units),
        cmocka_unit_test(test_step_from_name),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
