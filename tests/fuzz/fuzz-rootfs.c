/* libFuzzer target: the import unpacker (sbx_rootfs_unpack) over hostile
 * bytes, as a plain, compressed or image tarball, into a fresh root in a
 * temp directory.  Invariants beyond "no crash": a refusal is 3 or 5 (never
 * 70 from bad input alone), and nothing ever appears beside the root (the
 * sandbox directory holds only root/ after every run). */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rootfs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char box[64];

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p) < 0 ? 0 : 0;
}

static int entries(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	if (d)
		closedir(d);
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!box[0]) {
		snprintf(box, sizeof box, "/tmp/fuzz-rootfs.XXXXXX");
		if (!mkdtemp(box))
			abort();
	}
	char root[96], in[64];
	snprintf(root, sizeof root, "%s/root", box);
	nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	if (mkdir(root, 0700) < 0)
		abort();
	int mfd = memfd_create("fuzz-rootfs", MFD_CLOEXEC);
	if (mfd < 0 || write(mfd, data, size) != (ssize_t)size)
		abort();
	snprintf(in, sizeof in, "/proc/self/fd/%d", mfd);
	int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct sbx_rootfs_limits lim = { .max_bytes = 1 << 20, .max_entries = 2000, .allow_setuid = size & 1 };
	struct sbx_rootfs_config cfg;
	struct sbx_err err = { 0 };
	int rc = sbx_rootfs_unpack(rfd, in, &lim, &cfg, &err);
	close(rfd);
	close(mfd);
	if (rc < 0 && err.code != 3 && err.code != 5) {
		fprintf(stderr, "unexpected status %d: %s\n", err.code, err.msg);
		abort();
	}
	if (rc == 0 && (!cfg.format[0] ||
			(strcmp(cfg.format, "rootfs") && strcmp(cfg.format, "docker") && strcmp(cfg.format, "oci"))))
		abort();
	sbx_rootfs_config_free(&cfg);
	if (entries(box) != 1) {
		fprintf(stderr, "something was written beside the root\n");
		abort();
	}
	return 0;
}
