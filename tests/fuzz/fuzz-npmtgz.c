/* libFuzzer target: npm package tarballs and version metadata as a
 * registry (or a publisher behind it) sends them to the package cache
 * under packages.npm_scripts: deny (npmtgz.h).  The first byte picks the
 * parser: the tarball (from a memfd, as the cache reads its file) or the
 * metadata of one version (JSON). */
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "npmtgz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[300];
	if (size < 1)
		return 0;
	if (data[0] & 1) {
		json_t *v = json_loadb((const char *)data + 1, size - 1, 0, NULL);
		if (v)
			sbx_npm_meta_scripts(v, why, sizeof why);
		json_decref(v);
		return 0;
	}
	int fd = memfd_create("tgz", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	if (write(fd, data + 1, size - 1) == (ssize_t)(size - 1))
		sbx_npm_tgz_scripts(fd, why, sizeof why);
	close(fd);
	return 0;
}
