/* Unpacking a rootfs tarball or an image into a template's root tree
 * (sbx-template import).  The interface agreed between branches tmpl-core
 * (the caller) and tmpl-import (the implementation, common/rootfs.c and
 * rootfs_tar.c).
 *
 * The archive is hostile until proven otherwise.  Every entry is created
 * by hand under root_dfd (never archive_write_disk), each parent reached
 * by an openat walk with O_NOFOLLOW, each file created O_EXCL|O_NOFOLLOW,
 * so nothing is written outside the root, not even through a symlink an
 * earlier entry or layer planted.  Refused (3, the message names the
 * entry, or the image member, and why): absolute names and ".."
 * components (refused, not stripped; "./" prefixes are fine), entries
 * whose parent is a symlink or not a directory, hardlinks to what this
 * archive (layer) has not extracted yet, unknown entry types, malformed
 * headers or compressed data, and in images a blob whose sha256 is not
 * the one its name or descriptor says (every blob is checked before the
 * first layer is applied).  Device nodes, FIFOs and sockets are dropped
 * (the guest has devtmpfs); setuid/setgid bits are stripped from all but
 * directories unless lim->allow_setuid, and so are file capabilities
 * (security.capability, restored only then); other extended attributes
 * are never restored.  Names are kept byte for byte
 * (pax UTF-8 names too: the read runs under C.UTF-8 for this thread).
 * Ownership is kept numerically, modes and mtimes kept.
 * The limits are checked as the archive is read: max_bytes over all
 * regular file data written (a file whose header is over the cap is
 * refused before a byte of it is written), max_entries over all entries
 * of all layers; either gives 5.  Whiteouts (.wh.NAME, .wh..wh..opq) are
 * honoured in image layers only, and never hide what the same layer made.
 * An image is read in place from a plain tar (nothing staged on disk); a
 * compressed one (`docker save | gzip`) is refused with a hint.  A missing
 * or unreadable FILE is 3 as well.
 *
 * On success err->code is 0 and err->msg is "" or a note of what was
 * changed ("dropped 3 device nodes, FIFOs or sockets; stripped
 * setuid/setgid from 2 files"), for the caller to show or record.  On
 * failure root_dfd may hold a partial tree: the caller deletes it (and
 * renames only on success); nothing outside it was touched. */
#ifndef SBX_ROOTFS_H
#define SBX_ROOTFS_H

#include <stdint.h>

#include <jansson.h>

#include "err.h"

struct sbx_rootfs_limits {
	uint64_t max_bytes, max_entries;
	int allow_setuid;
};
/* env: an object of strings (NAME: value) made from the config's Env. */
struct sbx_rootfs_config {
	json_t *env;
	char user[64];
	char workdir[256];
	char format[16];
};
/* Unpack a rootfs tarball (.tar, .tar.gz, .tar.zst; `docker export`) or an image
 * (`docker save` tarball or OCI image layout tarball; layers in order, whiteouts honoured)
 * into the empty directory root_dfd. cfg gets the image config's Env/User/WorkingDir
 * (env NULL when none) and format ("rootfs"|"docker"|"oci"). 3 on a hostile or malformed
 * archive (message says which entry and why), 5 when over a limit. */
int sbx_rootfs_unpack(int root_dfd, const char *path, const struct sbx_rootfs_limits *lim,
		      struct sbx_rootfs_config *cfg, struct sbx_err *err);
/* The same from fd, opened by the caller (with the caller's rights; it
 * need not be seekable to be refused, but must be to be read); path names
 * it in messages. */
int sbx_rootfs_unpack_fd(int root_dfd, int fd, const char *path, const struct sbx_rootfs_limits *lim,
			 struct sbx_rootfs_config *cfg, struct sbx_err *err);
void sbx_rootfs_config_free(struct sbx_rootfs_config *cfg);

#endif
