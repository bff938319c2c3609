/* zstd streams for snapshots (libzstd, in process): a compressing sink
 * that writes a file, a pump that decompresses a file into a pipe with a
 * deadline, and a sparse disk image packed as one compressed stream.
 *
 * The disk format (scratch.zst): a zstd stream of "SBXDISK1", the image
 * size (u64 LE), then records of offset and length (u64 LE each) followed
 * by that many bytes, ending with the record UINT64_MAX, 0.  Holes and
 * all-zero blocks are left out, so an unpacked image is as sparse as the
 * original.  Unpacking checks every record against the size. */
#ifndef SBX_ZSTREAM_H
#define SBX_ZSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Called with bytes done of total (0: unknown) while work goes on. */
typedef void (*sbx_zprogress)(void *ctx, const char *what, uint64_t done, uint64_t total);

struct sbx_zsink {
	void *z;      /* ZSTD_CCtx */
	int fd;       /* the file, owned by the caller */
	uint8_t *buf; /* compressed output staging */
	size_t cap;
	uint64_t in, out; /* bytes taken, bytes written */
	uint64_t limit;   /* the most out may reach (0: none); set after open.
			   * A write that would pass it fails with EDQUOT and
			   * writes none of its bytes. */
};

/* Compress into fd (level 1..19); fd stays the caller's. */
int sbx_zsink_open(struct sbx_zsink *s, int fd, int level, struct sbx_err *err);
int sbx_zsink_write(struct sbx_zsink *s, const void *p, size_t n, struct sbx_err *err);
/* End the stream and fsync the file. */
int sbx_zsink_finish(struct sbx_zsink *s, struct sbx_err *err);
void sbx_zsink_free(struct sbx_zsink *s);

/* What a VMM writes for a save beyond the guest's memory: device state
 * (CPU registers, virtio queues, the serial port), a few MiB on microvm.
 * A stream longer than memory plus this is not a memory image. */
#define SBX_SAVE_DEVICE_ALLOWANCE (64ull << 20)

/* Compress the stream on rd (a nonblocking pipe, written by a VMM that may
 * be hostile) into out until the writer closes it.  Fails when more than
 * max_in bytes come (errnum EFBIG), when the file would pass max_out bytes
 * (EDQUOT; the file stays at most max_out), at deadline_ns, or when
 * alive_fd (a pidfd; -1: none) says the writer died.  0: no such cap.  cb
 * hears "saving memory" every few MiB and done of done at the end.  On
 * failure the file is the caller's to remove. */
int sbx_zsave(int rd, int out, int alive_fd, uint64_t deadline_ns, uint64_t max_in, uint64_t max_out, sbx_zprogress cb,
	      void *ctx, struct sbx_err *err);

/* Decompress the file in_fd into out_fd (a pipe, nonblocking or not),
 * giving up at deadline_ns (CLOCK_MONOTONIC) or when alive_fd (a pidfd;
 * -1: none) says the reader is gone.  cb hears 0 of total before the
 * first byte is read, and total of total once all of it is written. */
int sbx_zpump(int in_fd, int out_fd, int alive_fd, uint64_t deadline_ns, sbx_zprogress cb, void *ctx,
	      struct sbx_err *err);

/* Pack the disk image at src (read while nothing writes it) into dirfd/name,
 * created 0600 and fsynced, of at most max_out bytes (0: no cap; past it,
 * errnum EDQUOT and the file is the caller's to remove). */
int sbx_zdisk_pack(const char *src, int dirfd, const char *name, uint64_t max_out, sbx_zprogress cb, void *ctx,
		   struct sbx_err *err);
/* Unpack dirfd/name into dst (must not exist; created 0600, sparse).
 * *size gets the image size. */
int sbx_zdisk_unpack(int dirfd, const char *name, const char *dst, uint64_t *size, struct sbx_err *err);
/* The image size recorded in a packed disk, without unpacking it. */
int sbx_zdisk_size(int dirfd, const char *name, uint64_t *size, struct sbx_err *err);

#endif
