/*
 * rspool.c — recipe objects spooled in a snapshot's pin folder
 * (daemon/rspool.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fileio.h"
#include "daemon/rspool.h"

/* "r.<64 hex>": never a pin link's name (those are file indices). */
static void rspool_name(const uint8_t id[HASH_LEN], char out[2 + 2 * HASH_LEN + 1])
{
    out[0] = 'r';
    out[1] = '.';
    hex_encode(id, HASH_LEN, out + 2);
}

int rspool_put(const char *pin, const uint8_t id[HASH_LEN], const void *data, size_t len)
{
    char name[2 + 2 * HASH_LEN + 1];
    int dfd = open(pin, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    rspool_name(id, name);
    int e = fileio_write_atomic_at(dfd, name, data, len, 0600);
    close(dfd);
    return e;
}

int rspool_get(const char *pin, const uint8_t id[HASH_LEN], size_t max, struct buf *out)
{
    char name[2 + 2 * HASH_LEN + 1];
    uint8_t *data = NULL;
    size_t len = 0;
    struct buf path = BUF_INIT;
    rspool_name(id, name);
    int e = buf_printf(&path, "%s/%s", pin, name);
    if (e == 0)
        e = fileio_read_all(buf_str(&path), max, &data, &len);
    buf_free(&path);
    if (e == 0) {
        buf_reset(out);
        e = buf_append(out, data, len);
    }
    free(data);
    return e;
}
