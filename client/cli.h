/*
 * cli.h — shared pieces of the `ckptsync` command line: options common to
 * every command, output helpers (human and --json), progress display.
 *
 * Exit codes: 0 success, 1 failure, 2 usage error; status and ls --remote
 * also 3-6 (below).
 */
#ifndef CKS_CLI_H
#define CKS_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/config.h"
#include "service/repo.h"

#define EXIT_USAGE 2
/* `status` and `ls --remote` (README, "Exit status"): 3, else 5, else 4 */
#define EXIT_DEGRADED 3 /* the daemon's index failed a write: it takes no new work */
#define EXIT_REGION 4   /* a region is failing (backing off, stopped, unreachable) */
#define EXIT_DENIED 5   /* a region refused the credentials (access denied) */
#define EXIT_STARTING 6 /* the daemon is starting: not answering yet */
#define EXIT_RESHARD 7  /* restore --node K --of M: files bound to a rank would be dropped */
/* migrate-out on a node of a job: its part is durable, but its step is not
 * committed (other nodes' parts missing): no handoff written */
#define EXIT_INCOMPLETE 8

struct cli {
    const char *config_path; /* --config */
    const char *state;       /* --state */
    bool json;               /* --json */
    bool quiet;              /* -q */
    struct config conf;
    bool warned; /* config_warn_insecure() ran */
    /* progress */
    bool progress;
    double t0, last;
};

int cli_load_config(struct cli *c);
/* Loads the configuration and opens the repository; prints the error. */
int cli_open_repo(struct cli *c, unsigned flags, struct repo **ret);
/* Closes r (NULL is fine) and returns the exit status: rc, or 1 when a
 * write to the index failed (store/index.h), said once, naming the index:
 * every command that opens the repository ends through here, so each
 * one that writes (snapshot, restore's bookkeeping, reindex, prune) does. */
int cli_close_repo(struct repo *r, int rc);
void cli_progress(void *ud, uint64_t done, uint64_t total);
void cli_progress_end(struct cli *c);
void cli_human(uint64_t bytes, char *out, size_t cap);
double cli_now(void);
/* Prints buf to stdout (adding a newline). */
void cli_print_json(struct buf *b);
/* Parses a decimal integer for an option; returns 0 or prints and -1. */
int cli_parse_i64(const char *opt, const char *s, int64_t min, int64_t max, int64_t *ret);

/* Tells a daemon on the configured socket about one restore (its
 * metrics); advisory: without a daemon nothing is sent or reported. */
struct restore_result;
/* restore_opts.placed: with --json, one line per placed file
 * ({"placed":PATH,"bytes":N,"group":G}), flushed at once; ud is the cli. */
void cli_restore_placed(void *ud, const char *path, uint64_t bytes, const char *group);
void cli_report_restore(const struct cli *c, const struct restore_result *res, double secs, int e);

/* unitrestore_opts.done for a struct cli: prints each unit restored
 * (service/unitrestore.h; the service logs failures) and reports each
 * to the daemon. */
struct unitrestore_item;
void cli_unit_restored(void *ud, const struct unitrestore_item *it);

int cmd_snapshot(struct cli *c, int argc, char **argv);
int cmd_restore(struct cli *c, int argc, char **argv);
int cmd_verify(struct cli *c, int argc, char **argv);
int cmd_ls(struct cli *c, int argc, char **argv);
int cmd_show(struct cli *c, int argc, char **argv);
int cmd_chunks(struct cli *c, int argc, char **argv);
int cmd_commit(struct cli *c, int argc, char **argv);
int cmd_status(struct cli *c, int argc, char **argv);
int cmd_flush(struct cli *c, int argc, char **argv);
int cmd_retry(struct cli *c, int argc, char **argv);
int cmd_fsck(struct cli *c, int argc, char **argv);
int cmd_repo(struct cli *c, int argc, char **argv);
int cmd_migrate_out(struct cli *c, int argc, char **argv);
int cmd_migrate_in(struct cli *c, int argc, char **argv);
int cmd_reindex(struct cli *c, int argc, char **argv);
int cmd_forget(struct cli *c, int argc, char **argv);
int cmd_prune(struct cli *c, int argc, char **argv);
int cmd_stats(struct cli *c, int argc, char **argv);
int cmd_key(struct cli *c, int argc, char **argv);

#endif
