/*
 * region.h — one replica of the repository, behind one table of operations.
 * The scheduler and the services never know which kind they talk to.
 *
 * Keys are '/'-separated names relative to the region's root (for s3, its
 * prefix); include/ckptsync/format.h has the layout: repo, repo.d/<id>,
 * keys/..., chunks/<2 hex>/<64 hex>, snapshots/<run>/<id>, commits/<run>/...,
 * lineage/<run>/..., forget/, handoff/, gc/, intents/, runs/ (encrypted
 * repositories), probe/ (region_probe_preconditions).
 *
 * Calling sequence:
 *   region_new(&conf, &r, &err);   // checks nothing remote yet
 *   region_check(r);               // reachable and writable? (< 0: region_last_error
 *                                  // names the problem)
 *   r->slot = ...;                 // the index's slot for it (service/repo.c)
 *   region_set_seal(r, keys);      // an encrypted repository only
 *   region_put(r, key, data, len); region_get(r, key, max, &buf); ...
 *   region_free(r);                // NULL is fine
 *
 * Create-only puts (objects that concurrent instances share and must never
 * overwrite), decided once per region by the caller:
 *   if (region_preconditions(r) < 0)            // s3: not known yet
 *       region_set_preconditions(r, region_probe_preconditions(r) == 1);
 *   rc = region_put_new(r, key, data, len);     // 0, -EEXIST, or -ENOTSUP:
 *                                               // then the no-precondition path
 *
 * Return values: 0 (has: 1 present / 0 absent), -ENOENT for a missing key,
 * another -errno or CKS_E_* on failure; a human-readable description of the
 * last failure (naming the region and the key or path) is kept in
 * region_last_error(r), valid until the next call on r.  put is durable
 * when it returns 0: a dir region has fsynced file and directory.  The
 * caller owns every buffer it passes (get replaces out's contents) and
 * each region_req until region_poll hands it back.
 *
 * Threads: a struct region does I/O for one thread at a time (its error
 * message, request count, sealing scratch buffer and run-name cache are
 * unguarded); a thread that needs a region of its own clones the handle
 * (repo_region_clone, service/repo.h).  Exceptions: region_seal only reads
 * r, so pool threads may call it on a handle another thread uses; and
 * the fields set before the handle is shared (ops, conf, slot,
 * preconditions, seal) may be read by any thread.  region_batch runs each op on
 * a thread of its own, so every op must name a different region.
 */
#ifndef CKS_REGION_H
#define CKS_REGION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/config.h"
#include "engine/hash.h"
#include "store/layout.h"

#define REGION_KEY_MAX LAYOUT_KEY_MAX

struct crypt_keys;
struct region_run_name;

struct region;
struct region_req;
struct region_clock;
struct region_tidy;

struct region_ops {
    const char *kind;
    int (*put)(struct region *r, const char *key, const void *data, size_t len);
    /* Create-only put (see region_put_new); NULL: the kind cannot. */
    int (*put_new)(struct region *r, const char *key, const void *data, size_t len);
    int (*get)(struct region *r, const char *key, size_t max, struct buf *out);
    /* Bytes [off, off+len) of an object (fewer at its end). */
    int (*get_range)(struct region *r, const char *key, uint64_t off, size_t len, struct buf *out);
    /* size > 0: an object of another size counts as absent (a torn upload
     * left by a store that is not atomic). */
    int (*has)(struct region *r, const char *key, uint64_t size);
    int (*list)(struct region *r, const char *prefix,
                int (*cb)(void *ud, const char *key, uint64_t size), void *ud);
    int (*del)(struct region *r, const char *key);
    int (*check)(struct region *r);
    /* Optional (see region_clock): one request that reads the store's time. */
    int (*clock)(struct region *r, struct region_clock *ret);
    /* Optional (see region_tidy): removes what interrupted writes left. */
    int (*tidy)(struct region *r, uint64_t min_age, struct region_tidy *ret);
    void (*free)(struct region *r);
    /* Optional (see region_copy): a server-side copy of key from src, a
     * region of the same kind; NULL: the kind cannot copy. */
    int (*copy)(struct region *r, const struct region *src, const char *key, uint64_t size);
    /* Optional native asynchronous interface (see region_submit). */
    int (*submit)(struct region *r, struct region_req *req);
    struct region_req *(*poll)(struct region *r, int timeout_ms);
};

struct region {
    const struct region_ops *ops;
    struct region_conf conf;
    unsigned slot;     /* index slot, set by the caller */
    int preconditions; /* 1 enforce, 0 off, -1 unknown: see region_set_preconditions */
    char errmsg[1024];
    size_t inflight;         /* submitted, not yet returned by poll */
    uint64_t requests;       /* synchronous calls made (a listing counts its pages
                              * on s3), for cost reports; never reset by the region */
    struct region_req *done; /* completed by a synchronous fallback */
    /* An encrypted repository: every object but those needed to unlock
     * (region_key_sealed) is sealed on the way out (engine/crypt.h, the
     * object's key as context) and opened on the way in; callers see the
     * plain object, sizes included.  NULL: plaintext. */
    const struct crypt_keys *seal;
    /* ... and the run names in keys are keyed too (region_set_seal): the
     * names this handle has mapped, and their key */
    struct region_run_name *names;
    size_t nnames, names_cap;
    uint8_t name_key[32];
    struct buf scratch; /* sealing and opening, reused (one thread per handle) */
};

/* An asynchronous request.  The caller owns it (and the data of a PUT)
 * until region_poll() hands it back. */
struct region_req {
    enum region_req_kind { RREQ_HAS, RREQ_PUT, RREQ_GET, RREQ_COPY } kind;
    char key[REGION_KEY_MAX];
    const void *data; /* PUT */
    size_t len;       /* PUT */
    bool sealed;      /* PUT: data is region_seal()'s envelope for key */
    size_t max;       /* GET: largest object accepted */
    uint64_t size;    /* HAS: expected object size, 0 = any; COPY: the object's, 0 unknown */
    struct buf out;   /* GET: the object */
    const struct region *src; /* COPY: the region the object is copied from
                               * (only its ops and conf are read) */
    int ret;                  /* as region_has/put/get would return */
    char errmsg[512];         /* on failure */
    void *ud;                 /* the caller's */
    void *priv;               /* the backend's */
    struct region_req *next;
    /* region.c's, while a sealed PUT is in flight: the caller's data */
    struct buf sealbuf;
    const void *plain;
    size_t plain_len;
    char plain_key[REGION_KEY_MAX]; /* the caller's key while key is mapped */
};

int region_new(const struct region_conf *conf, struct region **ret, struct buf *err);
void region_free(struct region *r);

int region_put(struct region *r, const char *key, const void *data, size_t len);
/* Replaces the contents of out (reset first).  Fails with CKS_E_LIMIT if the
 * object is larger than max. */
int region_get(struct region *r, const char *key, size_t max, struct buf *out);
/* get, has, list, put, put_new and del try a transient failure
 * (CKS_E_REMOTE) again this many times, 0.25 s and 1 s apart (a listing
 * only while it has handed nothing over; a create-only put whose retry
 * finds the key taken reads the object back: the bytes it sent are its
 * own put landing, not a loss).  The asynchronous region_submit is not
 * retried here: the daemon's workers retry with backoff. */
#define REGION_READ_RETRIES 2
/* Reads bytes [off, off+len) of an object (fewer at its end) into out. */
int region_get_range(struct region *r, const char *key, uint64_t off, size_t len, struct buf *out);
/* The first len bytes of an object, for a presence check: of a sealed
 * object, decrypted without authentication (crypt_peek): never data to
 * use.  Reads CRYPT_HEADER_LEN + len bytes, not the whole object. */
int region_peek(struct region *r, const char *key, size_t len, struct buf *out);
int region_has(struct region *r, const char *key);
/* Like region_has, but an object whose size is not `size` is reported
 * absent (and logged), so that the caller writes it again. */
int region_has_size(struct region *r, const char *key, uint64_t size);
/* Calls cb for every key starting with prefix (any order); a non-zero return
 * from cb stops the listing and is returned.  No key under prefix is an
 * empty listing (0); a region that cannot say (unreachable, no bucket, a
 * dir region whose directory is missing) is an error, never empty. */
int region_list(struct region *r, const char *prefix,
                int (*cb)(void *ud, const char *key, uint64_t size), void *ud);
int region_del(struct region *r, const char *key);
int region_check(struct region *r);

/* What time does the region think it is?  Expiry in prune (service/gc.h)
 * compares times other hosts wrote with this host's clock, which is safe
 * only while the clocks agree within [prune] clock_skew; the store's own
 * clock is the one every host sees, so each host measures itself against
 * it.  One request, made now (nothing cached):
 *   s3   a HEAD of "probe/clock" (an object nobody writes): every HTTP
 *        answer, 404 and 403 included, carries the store's Date header
 *        (whole seconds), so the measurement works even where the store
 *        refuses a request signed by a clock that is far off (AWS: 15 min,
 *        RequestTimeTooSkewed);
 *   dir  a probe file created in the root (".ckptsync-clock.<pid>.<hex>",
 *        a name listings skip) and removed: its mtime is set by whoever
 *        stores it (the kernel for a local disk, the server's clock for
 *        NFS).
 * local is this host's CLOCK_REALTIME half-way through the request; the
 * store's clock reads store at that instant, to within error (half the
 * request's duration plus the resolution of the store's answer), so
 *   store - local  is the skew, known to within +-error.
 * Returns 0; -ENOTSUP when the kind cannot tell; or the region's error
 * (a request that got no answer), region_last_error naming the region.
 * Counts one request. */
struct region_clock {
    double local; /* seconds since the epoch */
    double store;
    double error; /* seconds, > 0 */
};
int region_clock(struct region *r, struct region_clock *ret);

/* Removes the litter interrupted writes leave where the kind keeps it
 * (prune calls it, service/gc.c): a dir region's temporaries of puts,
 * checks and clock readings, and the empty folders of prune marks, last
 * changed more than min_age seconds ago (store/dirtidy.h says which
 * names, and why a live writer loses nothing).  Counts are added to
 * *ret.  A kind with nothing to tidy returns 0 (s3: an upload cut short
 * leaves an incomplete multipart upload, which the bucket's lifecycle
 * rule removes: docs/retention.md).  Or the region's error. */
struct region_tidy {
    uint64_t temps;   /* temporaries removed */
    uint64_t folders; /* empty gc/<mark>/ folders removed */
};
int region_tidy(struct region *r, uint64_t min_age, struct region_tidy *ret);

/* Creates key only when no object has that name: 0 created; -EEXIST when
 * one exists (left untouched); -ENOTSUP when this region does not enforce
 * the precondition (see region_set_preconditions) — the caller then takes
 * its no-precondition path.  Durable like region_put when it returns 0 (and
 * on -EEXIST a dir region has synced the directory, so what exists stays).
 * A dir region links an fsynced temp file into place (link(2) refuses an
 * existing name, on local file systems and NFS alike); an s3 region sends
 * one PUT with "If-None-Match: *" (412 -> -EEXIST; 409
 * ConditionalRequestConflict, a concurrent conditional write of the same
 * key, -> CKS_E_REMOTE: retried later, the retry then answers 0 or
 * -EEXIST).  s3: an object from the multipart threshold (64 MiB, or
 * CKPTSYNC_S3_MULTIPART_MIN) up fails with -E2BIG: the probe vouches only
 * for single PUTs, and stores differ on conditional CompleteMultipartUpload;
 * objects written this way are small (< 1 MiB) in practice. */
int region_put_new(struct region *r, const char *key, const void *data, size_t len);
/* Asks the store whether it enforces create-only puts: writes a probe object
 * "probe/<random hex>" with the precondition twice, expecting the second to be
 * refused, then deletes it.  1 enforced, 0 not (the second put succeeded, the
 * store refused the precondition as not implemented, or `preconditions =
 * none` is configured: then the store is not touched), or a negative error
 * (unreachable, rejected; region_last_error says which).  Costs 3 requests
 * (s3).  Changes nothing on r: the caller decides, region_set_preconditions. */
int region_probe_preconditions(struct region *r);
/* What the caller decided (from the probe, a cached probe result, or the
 * configuration): 1 enforce, 0 do not (put_new returns -ENOTSUP).  A region
 * configured `preconditions = none` stays at 0 whatever is asked.  After
 * region_new: dir 1 (link(2) is reliable), s3 -1 "unknown" (put_new returns
 * -ENOTSUP until the caller sets it: S3-compatible stores that ignore
 * If-None-Match exist, s3rver among them), 0 for either with `none`. */
void region_set_preconditions(struct region *r, int on);
int region_preconditions(const struct region *r); /* current setting: 1, 0 or -1 */

const char *region_last_error(const struct region *r);
/* Records a formatted error message on r (used by backends). */
void region_set_error(struct region *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Seals r's objects under keys from now on (NULL: plaintext); keys must
 * outlive r.  Sealed are all keys but "repo", "repo.d/...", "keys/..." and
 * "probe/...": what an instance reads before it can unlock.  An object that
 * fails to open is CKS_E_AUTH (altered, or another repository's key);
 * one that is not sealed at all is CKS_E_AUTH too (a plaintext object in an
 * encrypted repository is never trusted).
 * The run names in keys are keyed as well: under snapshots/, commits/,
 * lineage/, forget/, handoff/ and refs/, the run component is stored as
 * "k-" + 32 hex of HMAC-SHA256 under a key derived from keys (HKDF, "ckptsync
 * run names"), and runs/k-<hex> (sealed, written once per run) holds the
 * name, which listings use to give callers the plain keys back.  Callers
 * see plain keys everywhere; a listing prefix must not end inside a run
 * name (-EINVAL). */
void region_set_seal(struct region *r, const struct crypt_keys *keys);
bool region_key_sealed(const struct region *r, const char *key);
/* Seal once, upload to many: seals data as r would for key into out (reset
 * first) and returns 1, or returns 0 when r does not seal key (out
 * untouched), or a negative error.  Every region of one repository seals
 * alike, so the envelope may go to all of them: region_put_sealed(),
 * region_op.sealed, region_req.sealed. */
int region_seal(struct region *r, const char *key, const void *data, size_t len, struct buf *out);
/* (region_seal reads r only, so pool threads may call it on a handle that
 * another thread uses.) */
/* region_put of an envelope region_seal() made for key. */
int region_put_sealed(struct region *r, const char *key, const void *env, size_t len);

/* Server-side copy (issue 25): dst copies the object key from src, a
 * region of the same kind that dst's store can read (s3: CopyObject with
 * x-amz-copy-source naming src's bucket and prefix, sent to dst's
 * endpoint with dst's credentials).  The bytes never pass through this
 * host; an encrypted repository's sealed envelope is the same in every
 * region, so it is copied as is.  A plain copy, not create-only: it is
 * for content-addressed chunk objects, which a plain PUT writes too.
 * Returns 0 once dst's store answered the copy as done (s3: a 200 whose
 * body is not an <Error>: CopyObject may fail after its 200 OK);
 * -ENOENT when src lacks the object (a prune deleted it); -ENOTSUP when
 * the kinds cannot copy (dir, or src of another kind); another error
 * (CKS_E_REJECTED: the request itself, e.g. AccessDenied, NoSuchBucket
 * for a source in another store; CKS_E_REMOTE: transient).  Callers
 * confirm with region_has_size before they count the object present.
 * size: the object's size as callers see it (0: unknown); s3 copies an
 * object above 5 GiB (CopyObject's limit; $CKPTSYNC_S3_COPY_MAX lowers it
 * for tests) as a multipart upload of UploadPartCopy parts, aborted on
 * failure.  (A chunk object is at most [chunker] max, <= 256 MiB, plus
 * its encoding, so today's chunks take one CopyObject.)
 * Asynchronously: a region_req of kind RREQ_COPY with key, src and size. */
int region_copy(struct region *dst, const struct region *src, const char *key, uint64_t size);
/* Can dst copy from src, by a real copy?  Puts a small probe object
 * "probe/<random hex>" into src, has dst copy it, checks that dst holds
 * it with the right size and bytes, and deletes both.  1 yes; 0 no (the
 * copy was refused or produced something else: a region of another
 * store or endpoint simply answers no, and the reason is logged at
 * debug); a negative error when src or dst could not be asked at all
 * (region_last_error of dst, or of src, says which).  Costs about 6
 * requests. */
int region_probe_copy(struct region *dst, struct region *src);

/* Backends. */
int region_dir_new(const struct region_conf *conf, struct region **ret, struct buf *err);
int region_s3_new(const struct region_conf *conf, struct region **ret, struct buf *err);

/*
 * Asynchronous operations, for the daemon's region workers: region_submit()
 * starts req and returns at once; region_poll() waits at most timeout_ms
 * for completions and returns them as a list linked through ->next (in any
 * order), or NULL.  A backend with a native interface (s3: libcurl multi)
 * keeps up to region_parallelism() requests in flight on one thread;
 * others run the request inside region_submit() and hand it back at the
 * next poll.
 */
int region_submit(struct region *r, struct region_req *req);
struct region_req *region_poll(struct region *r, int timeout_ms);
unsigned region_parallelism(const struct region *r);
/* Does this error mean the request itself is wrong (credentials, bucket,
 * permissions) so retrying cannot help until the configuration changes? */
int region_err_permanent(int err);

/* One operation for region_batch().  COPY: region_copy() from src, then
 * region_has_size(len) to confirm it: ret 1 the copy is there with its
 * size, 0 the copy was answered as done but the region lacks the object
 * (or holds another size), negative the copy failed (region_last_error of
 * rg says why); a failed copy is the caller's to fall back from. */
struct region_op {
    struct region *rg;
    enum { REGION_OP_HAS, REGION_OP_PUT, REGION_OP_COPY } kind;
    const char *key;
    const void *data;         /* PUT */
    size_t len;               /* PUT; HAS, COPY: expected size (0 = any) */
    bool sealed;              /* PUT: data is region_seal()'s envelope for key */
    const struct region *src; /* COPY: only its ops and conf are read */
    int ret;                  /* out: what region_has()/region_put() returned */
};

/* Runs ops concurrently, one thread each (the calling thread runs the
 * first), and returns when all are done.  Every op must name a different
 * region: a struct region is used by one thread at a time.  This is how a
 * chunk reaches three regions in the time of the slowest one. */
void region_batch(struct region_op *ops, size_t n);

/* Does one listing request return many keys (an object store's pages of
 * ~1000), rather than costing about one stat per key (a dir)?  Lets a
 * caller choose between listing and asking key by key. */
bool region_list_cheap(const struct region *r);

#endif
