/*
 * restore.c — fetch, verify, write, fsync, rename.
 *
 * Design notes.
 * - The manifest is trusted for nothing: it was parsed by the bounded
 *   parser (paths relative and clean, symlinks staying inside), and on top
 *   of that every directory is entered with openat(O_NOFOLLOW|O_DIRECTORY)
 *   from the staging directory's descriptor, so even a symlink the
 *   manifest itself created cannot be walked through.
 * - Writes go to a fresh staging directory; the snapshot's single root
 *   entry is renamed into the target only when every file is verified and
 *   fsynced.  Directory modes are applied last (a 0555 directory must
 *   still receive its files).
 * - Chunk i of the snapshot is fetched first from healthy region i mod n:
 *   the regions' bandwidth adds up, and a failing region costs one retry
 *   per chunk, never the restore.
 * - After the rename, the restored files enter the index, and every
 *   region holding the manifest is recorded as holding its chunks (the
 *   manifest is published only after all its chunks are), so the next
 *   snapshot does not read or upload them again.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/log.h"
#include "engine/chunkobj.h"
#include "engine/ref.h"
#include "service/restore.h"

/* ---- finding the snapshot ------------------------------------------- */

static int restore_latest(struct repo *r, const char *run, struct ref *ret, struct buf *err)
{
    char key[REGION_KEY_MAX];
    bool have = false;
    snprintf(key, sizeof(key), "refs/%s/latest", run);
    for (size_t i = 0; i < r->nregions; i++) {
        struct buf data = BUF_INIT;
        struct ref f;
        if (r->health[i])
            continue;
        int e = region_get(r->regions[i], key, REF_MAX_BYTES, &data);
        if (e == 0 && ref_parse(data.data, data.len, &f) < 0)
            log_warn("region '%s': \"%s\" is corrupt; ignoring it", r->regions[i]->conf.name, key);
        else if (e == 0 && (!have || ref_newer(&f, ret))) {
            *ret = f;
            have = true;
        } else if (e < 0 && e != -ENOENT)
            log_warn("%s", region_last_error(r->regions[i]));
        buf_free(&data);
    }
    if (!have) {
        buf_printf(err, "run '%s' has no committed snapshot in any reachable region", run);
        return -ENOENT;
    }
    return 0;
}

static int restore_manifest_from(struct repo *r, size_t i, const char *run, const char *id,
                                 struct manifest *ret)
{
    char key[REGION_KEY_MAX];
    struct buf data = BUF_INIT, perr = BUF_INIT;
    struct region *rg = r->regions[i];
    snprintf(key, sizeof(key), "snapshots/%s/%s", run, id);
    int e = region_get(rg, key, MANIFEST_MAX_BYTES, &data);
    if (e < 0) {
        if (e != -ENOENT)
            log_warn("%s", region_last_error(rg));
        goto out;
    }
    e = manifest_parse(data.data, data.len, ret, &perr);
    if (e < 0) {
        log_error("region '%s': manifest \"%s\" rejected: %s", rg->conf.name, key, buf_str(&perr));
        goto out;
    }
    if (strcmp(ret->id, id) != 0 || !ret->run || strcmp(ret->run, run) != 0 || !ret->root ||
        strchr(ret->root, '/') || manifest_path_check(ret->root) < 0) {
        log_error("region '%s': manifest \"%s\" names another snapshot", rg->conf.name, key);
        manifest_free(ret);
        e = CKS_E_FORMAT;
    }
out:
    buf_free(&data);
    buf_free(&perr);
    return e;
}

int restore_find(struct repo *r, const char *run, const char *id, struct manifest *ret,
                 size_t *ret_region, struct buf *err)
{
    struct ref latest;
    int e = -ENOENT;

    if (manifest_run_check(run) < 0 || (id && manifest_id_check(id) < 0)) {
        buf_printf(err, "invalid run name or snapshot id");
        return -EINVAL;
    }
    if (!id) {
        if ((e = restore_latest(r, run, &latest, err)) < 0)
            return e;
        id = latest.id;
    }
    for (size_t i = 0; i < r->nregions; i++) {
        if (r->health[i])
            continue;
        e = restore_manifest_from(r, i, run, id, ret);
        if (e == 0) {
            if (ret_region)
                *ret_region = i;
            return 0;
        }
    }
    buf_printf(err, "snapshot %s of run '%s': no reachable region holds a valid manifest", id, run);
    return e == 0 ? -ENOENT : e;
}

/* ---- chunks ------------------------------------------------------------ */

int restore_fetch_chunk(struct repo *r, const uint8_t id[HASH_LEN], uint32_t len, size_t first,
                        struct chunkobj_ctx *z, struct buf *obj, struct buf *out,
                        uint64_t *failovers, size_t *ret_region)
{
    char key[REGION_KEY_MAX], hex[HASH_HEX_LEN + 1];
    int e = -ENOENT;
    region_chunk_key(id, key);
    hex_encode(id, HASH_LEN, hex);
    for (size_t k = 0; k < r->nregions; k++) {
        size_t i = (first + k) % r->nregions;
        struct region *rg = r->regions[i];
        if (r->health[i])
            continue;
        buf_reset(obj);
        e = region_get(rg, key, CHUNKOBJ_HEADER_LEN + (size_t)len + len / 8 + 1024, obj);
        if (e == 0)
            e = chunkobj_decode(z, obj->data, obj->len, id, len, out);
        if (e == 0 && out->len != len)
            e = CKS_E_FORMAT;
        if (e == 0) {
            *ret_region = i;
            return 0;
        }
        (*failovers)++;
        log_warn("region '%s': chunk %s: %s; trying the next region", rg->conf.name, hex,
                 e == -ENOENT ? "missing" : err_str(e));
    }
    return e;
}

/* ---- writing ----------------------------------------------------------- */

/* Opens the parent directory of rel under root, creating missing
 * directories, never following a symlink.  *ret_name points into rel. */
static int restore_parent(int root, const char *rel, int *ret_fd, const char **ret_name)
{
    int fd = dup(root);
    const char *p = rel, *slash;
    char comp[MANIFEST_MAX_COMPONENT + 1];

    if (fd < 0)
        return -errno;
    while ((slash = strchr(p, '/'))) {
        size_t n = (size_t)(slash - p);
        if (n > MANIFEST_MAX_COMPONENT) {
            close(fd);
            return CKS_E_UNSAFE_PATH;
        }
        memcpy(comp, p, n);
        comp[n] = 0;
        if (mkdirat(fd, comp, 0700) < 0 && errno != EEXIST) {
            int e = -errno;
            close(fd);
            return e;
        }
        int sub = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = -errno;
        close(fd);
        if (sub < 0)
            return e == -ELOOP || e == -ENOTDIR ? CKS_E_UNSAFE_PATH : e;
        fd = sub;
        p = slash + 1;
    }
    *ret_fd = fd;
    *ret_name = p;
    return 0;
}

struct rst {
    struct repo *r;
    const struct restore_opts *o;
    struct restore_result *res;
    struct buf *err;
    struct manifest m;
    int stage;                 /* staging directory fd */
    char stage_name[MANIFEST_ID_MAX + 32];
    struct chunkobj_ctx z;
    struct buf obj, raw;
    struct hash h;
    uint64_t done, total, chunk_no;
};

static int rst_write_chunks(struct rst *s, const struct mfile *f, int fd)
{
    uint64_t off = 0;
    hash_reset(&s->h);
    for (uint64_t c = 0; c < f->nchunks; c++) {
        const struct mchunk *mc = &s->m.chunks[f->first_chunk + c];
        size_t from;
        size_t first = (size_t)(s->chunk_no++ % s->r->nregions);
        int e = restore_fetch_chunk(s->r, mc->id, mc->len, first, &s->z, &s->obj, &s->raw,
                                    &s->res->failovers, &from);
        if (e < 0) {
            char hex[HASH_HEX_LEN + 1];
            hex_encode(mc->id, HASH_LEN, hex);
            buf_printf(s->err, "\"%s\": chunk %s is not available intact in any region", f->path, hex);
            return e;
        }
        s->res->fetched_bytes += s->obj.len;
        s->res->region_chunks[from]++;
        hash_update(&s->h, s->raw.data, s->raw.len);
        if ((e = fileio_pwrite_full(fd, s->raw.data, s->raw.len, (off_t)off)) < 0) {
            buf_printf(s->err, "writing \"%s\": %s", f->path, strerror(-e));
            return e;
        }
        off += s->raw.len;
        s->done += s->raw.len;
        if (s->o->progress)
            s->o->progress(s->o->progress_ud, s->done, s->total);
    }
    return 0;
}

static int rst_file(struct rst *s, const struct mfile *f, int dirfd, const char *name)
{
    uint8_t digest[HASH_LEN];
    int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    int e;
    if (fd < 0) {
        e = -errno;
        buf_printf(s->err, "creating \"%s\": %s", f->path, strerror(-e));
        return e;
    }
    if ((e = rst_write_chunks(s, f, fd)) < 0)
        goto out;
    hash_final(&s->h, digest);
    if (memcmp(digest, f->digest, HASH_LEN) != 0) {
        buf_printf(s->err, "\"%s\": whole-file digest does not match the manifest", f->path);
        e = CKS_E_DIGEST;
        goto out;
    }
    if (fchmod(fd, f->mode) < 0 || fsync(fd) < 0) {
        e = -errno;
        buf_printf(s->err, "writing \"%s\": %s", f->path, strerror(-e));
        goto out;
    }
    s->res->files++;
    s->res->bytes += f->size;
out:
    close(fd);
    return e;
}

static int rst_entry(struct rst *s, const struct mfile *f)
{
    int dirfd, e;
    const char *name;
    if ((e = restore_parent(s->stage, f->path, &dirfd, &name)) < 0) {
        buf_printf(s->err, "\"%s\": cannot create its directory: %s", f->path, err_str(e));
        return e;
    }
    switch (f->type) {
    case MFILE_REG:
        e = rst_file(s, f, dirfd, name);
        break;
    case MFILE_DIR:
        if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
            e = -errno;
        s->res->dirs++;
        break;
    case MFILE_LINK:
        if (symlinkat(f->link, dirfd, name) < 0)
            e = -errno;
        s->res->links++;
        break;
    }
    if (e < 0 && !buf_str(s->err)[0])
        buf_printf(s->err, "creating \"%s\": %s", f->path, err_str(e));
    close(dirfd);
    return e;
}

/* fsyncs every directory and applies directory modes, deepest first. */
static int rst_finish_dirs(struct rst *s)
{
    for (size_t k = s->m.nfiles; k-- > 0;) {
        const struct mfile *f = &s->m.files[k];
        int dirfd, e;
        const char *name;
        if (f->type != MFILE_DIR)
            continue;
        if ((e = restore_parent(s->stage, f->path, &dirfd, &name)) < 0)
            return e;
        int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        e = fd < 0 ? -errno : 0;
        if (fd >= 0 && (fsync(fd) < 0 || fchmod(fd, f->mode) < 0))
            e = -errno;
        if (fd >= 0)
            close(fd);
        close(dirfd);
        if (e < 0) {
            buf_printf(s->err, "finishing directory \"%s\": %s", f->path, strerror(-e));
            return e;
        }
    }
    return fsync(s->stage) < 0 ? -errno : 0;
}

/* Removes name under dirfd recursively without following symlinks. */
static int rst_remove_tree(int parent, const char *name)
{
    if (unlinkat(parent, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return -errno;
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    fchmod(fd, 0700);
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    struct dirent *de;
    int e = 0;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && e == 0)
            e = rst_remove_tree(dirfd(d), de->d_name);
    closedir(d);
    if (e == 0 && unlinkat(parent, name, AT_REMOVEDIR) < 0)
        e = -errno;
    return e;
}

static int rst_place(struct rst *s, int target)
{
    const char *root = s->m.root;
    struct stat st;
    bool exists = fstatat(target, root, &st, AT_SYMLINK_NOFOLLOW) == 0;
    int e;

    if (exists && !s->o->force) {
        buf_printf(s->err, "\"%s/%s\" already exists (use --force to replace it)", s->o->target, root);
        return -EEXIST;
    }
    if (exists && renameat(target, root, s->stage, ".replaced") < 0) {
        e = -errno;
        buf_printf(s->err, "moving the old \"%s/%s\" aside: %s", s->o->target, root, strerror(-e));
        return e;
    }
    if (renameat(s->stage, root, target, root) < 0) {
        e = -errno;
        buf_printf(s->err, "renaming into \"%s/%s\": %s", s->o->target, root, strerror(-e));
        if (exists)
            renameat(s->stage, ".replaced", target, root);
        return e;
    }
    return fsync(target) < 0 ? -errno : 0;
}

/* Records the restored files and their chunks' presence in the index. */
static int rst_index(struct rst *s, int target)
{
    struct index_txn *t;
    uint32_t holders = 0;
    char key[REGION_KEY_MAX];
    int e;

    snprintf(key, sizeof(key), "snapshots/%s/%s", s->m.run, s->m.id);
    for (size_t i = 0; i < s->r->nregions; i++)
        if (!s->r->health[i] && region_has(s->r->regions[i], key) == 1)
            holders |= 1u << s->r->regions[i]->slot;
    if ((e = index_txn_begin(s->r->ix, true, &t)) < 0)
        return e;
    for (size_t k = 0; k < s->m.nfiles && e == 0; k++) {
        const struct mfile *f = &s->m.files[k];
        struct stat st;
        if (f->type != MFILE_REG || fstatat(target, f->path, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        struct index_file_key fk = {(uint64_t)st.st_dev, (uint64_t)st.st_ino, (uint64_t)st.st_size,
                                    (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
                                    (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec};
        e = index_file_put(t, &fk, f->digest, &s->m.chunks[f->first_chunk], (size_t)f->nchunks);
        for (uint64_t c = 0; c < f->nchunks && e == 0; c++) {
            const struct mchunk *mc = &s->m.chunks[f->first_chunk + c];
            struct index_chunk ic = {0};
            int g = index_chunk_get(t, mc->id, &ic);
            if (g < 0 && g != -ENOENT) {
                e = g;
                break;
            }
            ic.raw_len = mc->len;
            ic.presence |= holders;
            e = index_chunk_put(t, mc->id, &ic);
        }
    }
    if (e < 0) {
        index_txn_abort(t);
        return e;
    }
    return index_txn_commit(t);
}

static int rst_stage(struct rst *s, int target)
{
    snprintf(s->stage_name, sizeof(s->stage_name), ".ckptsync-restore.%s", s->m.id);
    rst_remove_tree(target, s->stage_name); /* left over by a crash */
    if (mkdirat(target, s->stage_name, 0700) < 0 ||
        (s->stage = openat(target, s->stage_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        int e = -errno;
        buf_printf(s->err, "creating a staging directory in \"%s\": %s", s->o->target, strerror(-e));
        return e;
    }
    return 0;
}

static int rst_all(struct rst *s, int target)
{
    int e;
    for (size_t k = 0; k < s->m.nfiles; k++)
        if (s->m.files[k].type == MFILE_REG)
            s->total += s->m.files[k].size;
    if ((e = rst_stage(s, target)) < 0)
        return e;
    for (size_t k = 0; k < s->m.nfiles; k++)
        if ((e = rst_entry(s, &s->m.files[k])) < 0)
            return e;
    if ((e = rst_finish_dirs(s)) < 0 || (e = rst_place(s, target)) < 0)
        return e;
    if ((e = rst_index(s, target)) < 0)
        log_warn("restored, but recording the files in the index failed: %s", err_str(e));
    return 0;
}

int restore_run(struct repo *r, const struct restore_opts *o, struct restore_result *ret,
                struct buf *err)
{
    struct rst s = {.r = r, .o = o, .res = ret, .err = err, .stage = -1};
    int target = -1, e;

    memset(ret, 0, sizeof(*ret));
    manifest_init(&s.m);
    if ((e = hash_init(&s.h)) < 0)
        return e;
    if ((e = restore_find(r, o->run, o->id, &s.m, NULL, err)) < 0)
        goto out;
    if ((e = fileio_mkdir_p(o->target, 0755)) < 0 ||
        (target = open(o->target, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        e = e < 0 ? e : -errno;
        buf_printf(err, "target directory \"%s\": %s", o->target, strerror(-e));
        goto out;
    }
    memcpy(ret->id, s.m.id, sizeof(ret->id));
    snprintf(ret->root, sizeof(ret->root), "%s", s.m.root);
    ret->step = s.m.step;
    ret->chunks = s.m.nchunks;
    e = rst_all(&s, target);
out:
    if (s.stage >= 0) {
        close(s.stage);
        rst_remove_tree(target, s.stage_name);
        fsync(target);
    }
    if (target >= 0)
        close(target);
    manifest_free(&s.m);
    chunkobj_ctx_free(&s.z);
    buf_free(&s.obj);
    buf_free(&s.raw);
    hash_free(&s.h);
    return e;
}
