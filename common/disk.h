/* Session disks, built without loop mounts: the scratch disk (a sparse raw
 * file of exactly the quota, ext4, the overlay's writable layer) and
 * read-only volume images made from host directories (mkfs.ext4 -d). */
#ifndef SBX_DISK_H
#define SBX_DISK_H

#include <stdint.h>
#include "err.h"

/* Create path (must not exist) as an empty ext4 of bytes. */
int sbx_disk_scratch(const char *path, uint64_t bytes, struct sbx_err *err);
/* Create path as an ext4 holding a copy of dir. */
int sbx_disk_from_dir(const char *path, const char *dir, unsigned uid, unsigned gid, struct sbx_err *err);
/* Create path (must not exist) as an empty journaled ext4 of bytes whose
 * root directory belongs to uid:gid: a workspace. */
int sbx_disk_workspace(const char *path, uint64_t bytes, unsigned uid, unsigned gid, struct sbx_err *err);
/* Grow the workspace image at path (not in use) to bytes: the file only;
 * the guest grows its file system online when it mounts it. */
int sbx_disk_grow(const char *path, uint64_t bytes, struct sbx_err *err);

#endif
