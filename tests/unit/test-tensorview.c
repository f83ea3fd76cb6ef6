/*
 * test-tensorview.c — the tensor view on real files: torch.save zips
 * written by Debian's python3-torch and a safetensors file, generated at
 * test time by tests/unit/tensorview_ref.py, which also says (from
 * zipfile, Python's own Unpickler and torch.load, not from this reader)
 * every tensor's name, dtype, shape, strides, offset and file bytes; and
 * zips whose pickles lie, of which only the sound tensors are listed.
 * Then damaged files: cut short, bytes flipped, no data.pkl — an error or
 * a view of sound tensors, never a crash.  Skipped where /usr/bin/python3
 * cannot import torch.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/fileio.h"
#include "engine/tensorhint.h"
#include "engine/tensorview.h"

#define PY "/usr/bin/python3"

struct fix {
    char dir[64];
};

static int teardown(void **state)
{
    struct fix *f = *state;
    char cmd[128];
    if (f->dir[0]) {
        snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
        if (system(cmd) != 0)
            return -1;
    }
    return 0;
}

static int setup(void **state)
{
    static struct fix f;
    char cmd[512];
    snprintf(f.dir, sizeof(f.dir), "/tmp/cks-tensorview.XXXXXX");
    if (!mkdtemp(f.dir))
        return -1;
    *state = &f;
    if (system(PY " -c 'import torch' 2>/dev/null") != 0) {
        rmdir(f.dir);
        f.dir[0] = 0; /* no torch: the tests skip */
        return 0;
    }
    snprintf(cmd, sizeof(cmd), PY " %s/tests/unit/tensorview_ref.py %s", CKS_SOURCE_DIR, f.dir);
    if (system(cmd) == 0)
        return 0;
    teardown(state); /* the files could not be written: fail */
    return -1;
}

struct img {
    uint8_t *data;
    size_t len;
};

static int img_read(void *ud, uint64_t off, void *buf, size_t len)
{
    const struct img *m = ud;
    if (off > m->len || len > m->len - off)
        return -EIO;
    memcpy(buf, m->data + off, len);
    return 0;
}

static struct img load(const struct fix *f, const char *name)
{
    char path[256];
    struct img m = {0};
    snprintf(path, sizeof(path), "%s/%s", f->dir, name);
    assert_int_equal(fileio_read_all(path, (size_t)1 << 30, &m.data, &m.len), 0);
    return m;
}

static void dims(struct buf *b, const uint64_t *v, unsigned n)
{
    if (!n)
        buf_printf(b, "-");
    for (unsigned k = 0; k < n; k++)
        buf_printf(b, "%s%" PRIu64, k ? "," : "", v[k]);
}

/* The view as tensorview_ref.py writes its expectation. */
static void render(const struct tensorview *v, struct buf *b)
{
    for (size_t i = 0; i < v->n; i++) {
        const struct tensorview_tensor *t = &v->t[i];
        buf_printf(b, "%s %s ", t->name, tensorview_dtype_name(t->dtype));
        dims(b, t->shape, t->ndim);
        buf_printf(b, " ");
        dims(b, t->stride, t->ndim);
        buf_printf(b, " %" PRIu64 " %" PRIu64 " %" PRIu64 " %s\n", t->offset, t->begin, t->end,
                   v->s[t->storage].key);
    }
}

static int view_of(const struct img *m, bool torch, struct tensorview *v, struct buf *err)
{
    if (torch)
        return tensorview_torch(m->len, img_read, (void *)m, v, err);
    return tensorview_safetensors(m->data, m->len, m->len, v, err);
}

static void expect_file(const struct fix *f, const char *name, bool torch)
{
    char ename[128];
    snprintf(ename, sizeof(ename), "%s.expect", name);
    struct img m = load(f, name), want = load(f, ename);
    struct tensorview v = TENSORVIEW_INIT;
    struct buf err = BUF_INIT, got = BUF_INIT;
    int e = view_of(&m, torch, &v, &err);
    if (e != 0)
        fail_msg("%s: %d %s", name, e, buf_str(&err));
    render(&v, &got);
    if (strlen(buf_str(&got)) != want.len || memcmp(buf_str(&got), want.data, want.len) != 0)
        fail_msg("%s: the view\n%s\ndiffers from Python's\n%.*s", name, buf_str(&got),
                 (int)want.len, (const char *)want.data);
    tensorview_free(&v);
    buf_free(&got);
    buf_free(&err);
    free(m.data);
    free(want.data);
}

static void test_torch_files(void **state)
{
    struct fix *f = *state;
    if (!f->dir[0])
        skip();
    expect_file(f, "nested.pt", true);
    expect_file(f, "module.pt", true);
    expect_file(f, "lie-mixed.pt", true);
    expect_file(f, "zip64.pt", true);
}

static void test_safetensors_file(void **state)
{
    struct fix *f = *state;
    if (!f->dir[0])
        skip();
    expect_file(f, "model.safetensors", false);
}

/* Lookups, shared storages and the widths a torch file gives the codec. */
static void test_find_and_widths(void **state)
{
    struct fix *f = *state;
    if (!f->dir[0])
        skip();
    struct img m = load(f, "nested.pt");
    struct tensorview v = TENSORVIEW_INIT;
    assert_int_equal(tensorview_torch(m.len, img_read, &m, &v, NULL), 0);
    const struct tensorview_tensor *a = tensorview_find(&v, "tied.embed.weight"),
                                   *b = tensorview_find(&v, "tied.lm_head.weight"),
                                   *view = tensorview_find(&v, "view"),
                                   *w = tensorview_find(&v, "model.layers.0.weight");
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(view);
    assert_non_null(w);
    assert_null(tensorview_find(&v, "model.layers.0"));
    assert_null(tensorview_find(&v, "args.lr"));
    assert_int_equal(a->storage, b->storage);
    assert_int_equal(a->storage, view->storage);
    assert_true(a->contiguous);
    assert_false(view->contiguous);
    assert_int_equal(w->dtype, TENSORVIEW_BF16);
    assert_int_equal(w->numel, 128);
    assert_int_equal(v.s[w->storage].dtype, TENSORVIEW_BF16);
    struct tensorhint h = TENSORHINT_INIT;
    assert_int_equal(tensorhint_from_view(&v, &h), 0);
    assert_int_equal(tensorhint_width(&h, w->begin, w->end - w->begin), 2);
    const struct tensorview_tensor *mw = tensorview_find(&v, "master.layers.0.weight");
    assert_int_equal(tensorhint_width(&h, mw->begin, mw->end - mw->begin), 4);
    const struct tensorview_tensor *st = tensorview_find(&v, "step");
    assert_int_equal(tensorhint_width(&h, st->begin, st->end - st->begin), 0); /* int64 */
    tensorhint_free(&h);
    tensorview_free(&v);
    free(m.data);
}

/* Cut short at every length, and every 97th byte flipped: an error, or a
 * view whose every tensor lies in the file, never a crash. */
static void test_damaged(void **state)
{
    struct fix *f = *state;
    if (!f->dir[0])
        skip();
    struct img m = load(f, "nested.pt");
    struct tensorview v = TENSORVIEW_INIT;
    struct buf err = BUF_INIT;
    struct img cut = m;
    for (cut.len = 0; cut.len < m.len; cut.len += 1 + cut.len / 16) {
        int e = tensorview_torch(cut.len, img_read, &cut, &v, &err);
        assert_true(e == 0 || e == CKS_E_FORMAT || e == CKS_E_LIMIT || e == -EIO);
        for (size_t i = 0; i < v.n; i++)
            assert_true(v.t[i].begin <= v.t[i].end && v.t[i].end <= cut.len);
        buf_reset(&err);
    }
    assert_int_equal(tensorview_torch(m.len - 1, img_read, &m, &v, &err), CKS_E_FORMAT);
    assert_non_null(strstr(buf_str(&err), "no end of central directory"));
    for (size_t at = 0; at < m.len; at += 97) {
        m.data[at] ^= 0x5a;
        int e = tensorview_torch(m.len, img_read, &m, &v, NULL);
        assert_true(e == 0 || e == CKS_E_FORMAT || e == CKS_E_LIMIT);
        for (size_t i = 0; i < v.n; i++)
            assert_true(v.t[i].begin <= v.t[i].end && v.t[i].end <= m.len);
        m.data[at] ^= 0x5a;
    }
    tensorview_free(&v);
    buf_free(&err);
    free(m.data);
}

/* A safetensors file read as a zip, a zip without data.pkl, a data.pkl
 * whose local header disagrees with the directory. */
static void test_not_torch(void **state)
{
    struct fix *f = *state;
    if (!f->dir[0])
        skip();
    struct img m = load(f, "model.safetensors");
    struct tensorview v = TENSORVIEW_INIT;
    struct buf err = BUF_INIT;
    assert_int_equal(tensorview_torch(m.len, img_read, &m, &v, &err), CKS_E_FORMAT);
    assert_int_equal(v.n, 0);
    free(m.data);
    m = load(f, "other.zip");
    assert_true(torchzip_is_zip(m.data, m.len));
    assert_int_equal(tensorview_torch(m.len, img_read, &m, &v, &err), CKS_E_FORMAT);
    assert_non_null(strstr(buf_str(&err), "not a torch.save archive"));
    free(m.data);
    m = load(f, "nested.pt");
    char *pkl = memmem(m.data, m.len, "nested/data.pkl", 15);
    assert_non_null(pkl); /* the local header's name: central entry and local differ now */
    pkl[7] = 'X';
    assert_int_equal(tensorview_torch(m.len, img_read, &m, &v, &err), CKS_E_FORMAT);
    assert_false(torchzip_is_zip((const uint8_t *)"PK\5\6", 4));
    assert_true(torchzip_is_zip(m.data, m.len));
    buf_free(&err);
    free(m.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_torch_files),     cmocka_unit_test(test_safetensors_file),
        cmocka_unit_test(test_find_and_widths), cmocka_unit_test(test_damaged),
        cmocka_unit_test(test_not_torch),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
