/*
 * snaprec.c — a snapshot's record in the local index (see snaprec.h).
 */
#include "service/snaprec.h"

#include <errno.h>
#include <string.h>

#include "store/queue.h"

int snaprec_add(struct index_txn *t, const struct manifest *m, uint64_t bytes, uint32_t committed)
{
    struct index_snap rec = {.step = m->step,
                             .time = m->time,
                             .bytes = bytes,
                             .nfiles = manifest_regular_files(m),
                             .committed = committed};
    int e = 0;
    for (size_t i = 0; i < m->nchunks && e == 0; i++) {
        struct index_chunk ch = {0};
        int ge = index_chunk_get(t, m->chunks[i].id, &ch);
        if (ge < 0 && ge != -ENOENT)
            return ge;
        ch.raw_len = m->chunks[i].len;
        ch.refcount++;
        e = index_chunk_put(t, m->chunks[i].id, &ch);
    }
    return e < 0 ? e : index_snap_put(t, m->run, m->id, &rec);
}

/* The logical bytes of m: its regular files' sizes. */
static uint64_t snaprec_bytes(const struct manifest *m)
{
    uint64_t n = 0;
    for (size_t f = 0; f < m->nfiles; f++)
        if (m->files[f].type == MFILE_REG)
            n += m->files[f].size;
    return n;
}

int snaprec_found(struct index_txn *t, const struct manifest *m, uint32_t holders)
{
    struct index_snap rec;
    int e = index_snap_get(t, m->run, m->id, &rec);
    if (e == -ENOENT) {
        e = snaprec_add(t, m, snaprec_bytes(m), holders);
        return e < 0 ? e : 1;
    }
    if (e < 0 || (rec.committed | holders) == rec.committed)
        return e;
    rec.committed |= holders;
    return index_snap_put(t, m->run, m->id, &rec);
}

static int drop_pending_cb(void *ud, const struct pending *p)
{
    const struct manifest *m = ud;
    return !strcmp(p->run, m->run) && !strcmp(p->id, m->id);
}

int snaprec_drop(struct index_txn *t, const struct manifest *m)
{
    struct index_snap rec;
    int e = index_snap_get(t, m->run, m->id, &rec);
    if (e < 0)
        return e == -ENOENT ? 0 : e;
    if ((e = queue_pending_foreach(t, drop_pending_cb, (void *)m)) != 0)
        return e < 0 ? e : 0;
    for (size_t i = 0; i < m->nchunks && e == 0; i++) {
        struct index_chunk ch;
        int ge = index_chunk_get(t, m->chunks[i].id, &ch);
        if (ge == -ENOENT || (ge == 0 && ch.refcount == 0))
            continue; /* not counted (fsck names such a chunk) */
        if (ge < 0)
            return ge;
        ch.refcount--;
        e = index_chunk_put(t, m->chunks[i].id, &ch);
    }
    if (e == 0)
        e = index_snap_del(t, m->run, m->id);
    return e < 0 ? e : 1;
}
