/*
 * pin.h — pin folders: hardlinks to the files of a snapshot being
 * replicated, kept in <watch>/.ckptsync-pins/<snapshot id>/ (same
 * filesystem as the data, so a link is possible and costs no copy).  A
 * framework that rotates old checkpoints away then cannot pull a file from
 * under an upload: the inode lives until the pin goes.
 *
 * Pin folders are flat: file index in the manifest -> hardlink.  The
 * watcher ignores names starting with ".ckptsync".  Thread-safe (no state).
 */
#ifndef CKS_PIN_H
#define CKS_PIN_H

#include <stddef.h>

#include "base/buf.h"

#define PIN_DIRNAME ".ckptsync-pins"

/* Creates <root>/.ckptsync-pins/<id>/ and puts its path in ret_path. */
int pin_create(const char *root, const char *id, struct buf *ret_path);
/* Links src as <pin>/<index>; -EXDEV when src is on another filesystem. */
int pin_link(const char *pin, size_t index, const char *src);
/* Removes a pin folder and its links. */
int pin_remove(const char *pin);
/* Removes every pin folder under root for which keep(ud, path) is false. */
int pin_cleanup(const char *root, int (*keep)(void *ud, const char *path), void *ud);

#endif
