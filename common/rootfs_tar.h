/* The rootfs unpacker's tar half, for rootfs.c (which reads images and
 * hands this each layer, or the one rootfs tarball).  Internal to the
 * two; the interface is rootfs.h. */
#ifndef SBX_ROOTFS_TAR_H
#define SBX_ROOTFS_TAR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include <archive.h>

#include "err.h"
#include "rootfs.h"

#define NAME_MAX_LEN 4095u     /* bytes of a normalized path or link target */
#define DEPTH_MAX 256u         /* components of one path */
#define NAMES_MAX (256u << 20) /* bytes of all names remembered for one layer */
#define MEMBERS_MAX 4096u      /* members of an image tarball */
#define LAYERS_MAX 256u
#define INDEX_JSON_MAX (1u << 20) /* manifest.json, index.json, an OCI manifest */
#define CONFIG_JSON_MAX (4u << 20)
/* An image's Env is held to a spec's env: (tmplspec.h) so both reach an
 * exec alike: at most 64 names like [A-Za-z_][A-Za-z0-9_]*, 128 bytes,
 * values at most 4096 bytes. */
#define ENV_MAX 64u
#define ENV_NAME_MAX 128u
#define ENV_VAL_MAX 4096u
#define CHUNK 65536

/* Paths made by the archive (layer) being applied: hardlinks may only
 * point at them and whiteouts never hide them.  Open addressing. */
struct pathset {
	char **slot;
	size_t cap, n, bytes;
};

/* A directory's mode and mtime are set once the archive is done, so that
 * creating its children neither changes the mtime nor meets a read-only
 * mode. */
struct dirfix {
	char *path;
	mode_t mode;
	struct timespec mtime;
};

struct unpack {
	int root;
	const struct sbx_rootfs_limits *lim;
	uint64_t bytes, entries;
	unsigned dropped, stripped;
	bool layer;     /* whiteouts honoured */
	char what[160]; /* "layer 2 of 3 (blobs/sha256/...): " or "" */
	struct pathset made;
	struct dirfix *fix;
	size_t nfix, capfix;
	bool root_user;
};

static inline void archive_freep(struct archive **a)
{
	if (*a)
		archive_read_free(*a);
}
#define _cleanup_archive_ __attribute__((cleanup(archive_freep)))

/* rootfs_tar.c */
int sbx_rootfs_norm(const char *raw, char *out, const char **why);
void sbx_rootfs_reset(struct unpack *u);
struct archive *sbx_rootfs_reader(bool filters);
int sbx_rootfs_apply(struct unpack *u, struct archive *a, struct sbx_err *err);

#endif
