/* libFuzzer target: tar streams as a hostile guest sends them to
 * sbx-cp's download side (sbx_tar_filter, checking only).  The first byte
 * picks the rules: with or without a required top-level name and a tiny
 * byte cap, so both the upload and the download checks are exercised. */
#include <stddef.h>
#include <stdint.h>

#include <archive.h>

#include "tarcheck.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	struct sbx_tar_rules r = { .max_bytes = data[0] & 1 ? 100 : 1 << 20,
				   .max_entries = 1000,
				   .top = data[0] & 2 ? "tree" : NULL,
				   .host_modes = 1 };
	struct sbx_tar_check *c = sbx_tar_check_new(&r);
	struct archive *in = archive_read_new();
	archive_read_support_format_tar(in);
	if (archive_read_open_memory(in, data + 1, size - 1) == ARCHIVE_OK) {
		struct sbx_err err;
		sbx_tar_filter(c, in, NULL, &err);
	}
	archive_read_free(in);
	sbx_tar_check_free(c);
	return 0;
}
