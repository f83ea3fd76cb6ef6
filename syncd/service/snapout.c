/*
 * snapout.c — the JSON of a snapshot's outcome (see snapout.h).
 *
 * Design notes.
 * - One row per field: its name, the views that print it, and either the
 *   offset of a counter in struct snapshot_result or a function that
 *   writes its value.  The two views share the rows they have in common
 *   ("id", "durable", "replicated"); "committed" and "regions_committed"
 *   are one value under the name each document has always used.
 */
#include <stddef.h>
#include <stdint.h>

#include "service/snapout.h"

static void put_id(struct json *j, const struct snapout *o)
{
    json_str(j, o->id);
}

static void put_run(struct json *j, const struct snapout *o)
{
    json_str(j, o->run);
}

static void put_root(struct json *j, const struct snapout *o)
{
    json_str(j, o->res->root);
}

static void put_dedup_ratio(struct json *j, const struct snapout *o)
{
    const struct snapshot_result *s = o->res;
    json_double(j, s->new_bytes ? (double)s->bytes / (double)s->new_bytes : 0);
}

/* Chunk bytes sent from this instance per new stored byte: 1 when each
 * new chunk went up once (upload once), the number of regions when each
 * got it from the instance; 0 when nothing was new. */
static void put_sent_ratio(struct json *j, const struct snapout *o)
{
    const struct snapshot_result *s = o->res;
    json_double(j, s->stored_bytes ? (double)s->bytes_sent / (double)s->stored_bytes : 0);
}

static void put_committed(struct json *j, const struct snapout *o)
{
    json_u64(j, o->committed);
}

static void put_durable(struct json *j, const struct snapout *o)
{
    json_bool(j, o->durable);
}

static void put_replicated(struct json *j, const struct snapout *o)
{
    json_bool(j, o->replicated);
}

/* Each region's part in the snapshot, in the configuration's order. */
static void put_regions(struct json *j, const struct snapout *o)
{
    const struct snapshot_result *s = o->res;
    json_arr_begin(j);
    for (size_t i = 0; i < s->nregions; i++) {
        const struct snapshot_region_result *g = &s->region[i];
        json_obj_begin(j);
        json_key(j, "name");
        json_str(j, repo_region(o->repo, i)->conf.name);
        json_key(j, "committed");
        json_bool(j, g->err == 0 && o->id[0]);
        json_key(j, "objects_put");
        json_u64(j, g->objects_put);
        json_key(j, "bytes_put");
        json_u64(j, g->bytes_put);
        json_key(j, "objects_copied");
        json_u64(j, g->objects_copied);
        json_key(j, "bytes_copied");
        json_u64(j, g->bytes_copied);
        json_key(j, "copies_failed");
        json_u64(j, g->copies_failed);
        json_key(j, "error");
        if (g->err)
            json_str(j, g->msg);
        else
            json_null(j);
        json_obj_end(j);
    }
    json_arr_end(j);
}

#define TAKE SNAPOUT_TAKE
#define BOTH (SNAPOUT_TAKE | SNAPOUT_COMMIT)
#define COUNT(name, field)                                                                         \
    {                                                                                              \
        name, TAKE, offsetof(struct snapshot_result, field), NULL                                  \
    }

static const struct snapout_field {
    const char *name;
    unsigned views;
    size_t off; /* put == NULL: a uint64_t counter at this offset of o->res */
    void (*put)(struct json *j, const struct snapout *o);
} fields[] = {
    {"id", BOTH, 0, put_id},
    {"run", SNAPOUT_COMMIT, 0, put_run},
    {"root", TAKE, 0, put_root},
    COUNT("files", files),
    COUNT("dirs", dirs),
    COUNT("symlinks", links),
    COUNT("bytes", bytes),
    COUNT("files_unchanged", files_unchanged),
    COUNT("readers", readers),
    COUNT("chunks", chunks),
    COUNT("new_chunks", new_chunks),
    COUNT("new_bytes", new_bytes),
    COUNT("stored_bytes", stored_bytes),
    COUNT("bytes_sent", bytes_sent),
    {"sent_ratio", TAKE, 0, put_sent_ratio},
    COUNT("confirmed_chunks", confirm_asked),
    COUNT("confirm_heads", confirm_heads),
    COUNT("confirm_listed", confirm_listed),
    COUNT("reuploaded_chunks", confirm_missing),
    {"dedup_ratio", TAKE, 0, put_dedup_ratio},
    {"committed", TAKE, 0, put_committed},
    {"regions_committed", SNAPOUT_COMMIT, 0, put_committed},
    {"durable", BOTH, 0, put_durable},
    {"replicated", BOTH, 0, put_replicated},
    {"regions", TAKE, 0, put_regions},
};

void snapout_json(struct json *j, const struct snapout *o, enum snapout_view v)
{
    json_obj_begin(j);
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        const struct snapout_field *f = &fields[i];
        if (!(f->views & (unsigned)v))
            continue;
        json_key(j, f->name);
        if (f->put)
            f->put(j, o);
        else
            json_u64(j, *(const uint64_t *)(const void *)((const char *)o->res + f->off));
    }
    json_obj_end(j);
}
