#include "zstream.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>

#include <zstd.h>

#define DISK_MAGIC "SBXDISK1"
#define DISK_BLOCK 4096u
#define DISK_CHUNK (1u << 20)
#define DISK_MAX (64ull << 40) /* an image size no quota reaches */
#define PROGRESS_EVERY (4u << 20)

static void put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* --- the compressing sink ---------------------------------------------- */

int sbx_zsink_open(struct sbx_zsink *s, int fd, int level, struct sbx_err *err)
{
	memset(s, 0, sizeof *s);
	s->fd = fd;
	s->cap = ZSTD_CStreamOutSize();
	s->buf = malloc(s->cap);
	s->z = ZSTD_createCCtx();
	if (!s->buf || !s->z) {
		sbx_zsink_free(s);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot start compressing");
	}
	/* One thread: the monitor must not take more of the host than its
	 * session's share while it saves. */
	ZSTD_CCtx_setParameter(s->z, ZSTD_c_compressionLevel, level);
	ZSTD_CCtx_setParameter(s->z, ZSTD_c_checksumFlag, 1);
	return 0;
}

static int sink_step(struct sbx_zsink *s, ZSTD_inBuffer *in, ZSTD_EndDirective mode, struct sbx_err *err)
{
	for (;;) {
		ZSTD_outBuffer out = { s->buf, s->cap, 0 };
		size_t left = ZSTD_compressStream2(s->z, &out, in, mode);
		if (ZSTD_isError(left))
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot compress: %s", ZSTD_getErrorName(left));
		if (s->limit && out.pos > s->limit - s->out)
			return sbx_err_set(err, SBX_EXIT_TEMPFAIL, EDQUOT,
					   "the file would pass its limit of %llu bytes", (unsigned long long)s->limit);
		if (out.pos && sbx_write_all(s->fd, s->buf, out.pos) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot write the snapshot");
		s->out += out.pos;
		if (mode == ZSTD_e_end ? left == 0 : in->pos == in->size)
			return 0;
	}
}

int sbx_zsink_write(struct sbx_zsink *s, const void *p, size_t n, struct sbx_err *err)
{
	ZSTD_inBuffer in = { p, n, 0 };
	s->in += n;
	return sink_step(s, &in, ZSTD_e_continue, err);
}

int sbx_zsink_finish(struct sbx_zsink *s, struct sbx_err *err)
{
	ZSTD_inBuffer in = { NULL, 0, 0 };
	if (sink_step(s, &in, ZSTD_e_end, err) < 0)
		return -1;
	if (fsync(s->fd) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot write the snapshot");
	return 0;
}

void sbx_zsink_free(struct sbx_zsink *s)
{
	ZSTD_freeCCtx(s->z);
	free(s->buf);
	s->z = NULL;
	s->buf = NULL;
}

/* --- a VMM's save stream, capped --------------------------------------- */

int sbx_zsave(int rd, int out, int alive_fd, uint64_t deadline_ns, uint64_t max_in, uint64_t max_out, sbx_zprogress cb,
	      void *ctx, struct sbx_err *err)
{
	struct sbx_zsink z;
	_cleanup_free_ uint8_t *buf = malloc(1u << 20);
	if (!buf)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot save the VM");
	if (sbx_zsink_open(&z, out, 1, err) < 0)
		return -1;
	z.limit = max_out;
	uint64_t shown = 0;
	int rc = 0;
	for (;;) {
		ssize_t r = read(rd, buf, 1u << 20);
		if (r > 0) {
			/* Counted before it is taken: past max_in, not one byte
			 * more reaches the file. */
			if (max_in && (uint64_t)r > max_in - z.in) {
				rc = sbx_err_set(err, SBX_EXIT_INTERNAL, EFBIG,
						 "the stream passed its limit of %llu bytes",
						 (unsigned long long)max_in);
				break;
			}
			if ((rc = sbx_zsink_write(&z, buf, (size_t)r, err)) < 0)
				break;
			if (cb && z.in - shown >= PROGRESS_EVERY) {
				cb(ctx, "saving memory", z.in, 0);
				shown = z.in;
			}
			continue;
		}
		if (r == 0)
			break;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN) {
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the VM's state");
			break;
		}
		if (sbx_mono_ns() >= deadline_ns) {
			rc = sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the VMM did not finish writing its state in time");
			break;
		}
		struct pollfd p[2] = { { .fd = rd, .events = POLLIN }, { .fd = alive_fd, .events = POLLIN } };
		if (poll(p, alive_fd >= 0 ? 2 : 1, 1000) > 0 && alive_fd >= 0 && (p[1].revents & POLLIN) &&
		    !(p[0].revents & (POLLIN | POLLHUP))) {
			rc = sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the VMM exited while saving");
			break;
		}
	}
	if (rc == 0)
		rc = sbx_zsink_finish(&z, err);
	if (rc == 0 && cb)
		cb(ctx, "saving memory", z.in, z.in);
	sbx_zsink_free(&z);
	return rc;
}

/* --- decompressing into a pipe ------------------------------------------ */

/* Write all of p to a pipe whose reader may be slow, hung or gone. */
static int pipe_write(int fd, const uint8_t *p, size_t n, int alive_fd, uint64_t deadline, struct sbx_err *err)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w > 0) {
			p += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno != EAGAIN)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "the VMM stopped reading the snapshot");
		uint64_t now = sbx_mono_ns();
		if (now >= deadline)
			return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the VMM did not read the snapshot in time");
		struct pollfd pf[2] = { { .fd = fd, .events = POLLOUT }, { .fd = alive_fd, .events = POLLIN } };
		int r = poll(pf, alive_fd >= 0 ? 2 : 1, (int)((deadline - now) / 1000000u) + 1);
		if (r < 0 && errno != EINTR)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot wait for the VMM");
		if (r > 0 && alive_fd >= 0 && (pf[1].revents & POLLIN))
			return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the VMM exited while loading the snapshot");
	}
	return 0;
}

int sbx_zpump(int in_fd, int out_fd, int alive_fd, uint64_t deadline_ns, sbx_zprogress cb, void *ctx,
	      struct sbx_err *err)
{
	size_t icap = ZSTD_DStreamInSize(), ocap = ZSTD_DStreamOutSize();
	_cleanup_free_ uint8_t *ibuf = malloc(icap);
	_cleanup_free_ uint8_t *obuf = malloc(ocap);
	ZSTD_DCtx *z = ZSTD_createDCtx();
	struct stat sb;
	uint64_t total = fstat(in_fd, &sb) == 0 ? (uint64_t)sb.st_size : 0, done = 0, shown = 0;
	int rc = -1;
	size_t last = 1; /* 0 once a frame ended exactly at the input's end */
	if (!ibuf || !obuf || !z) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot start decompressing");
		goto out;
	}
	if (cb)
		cb(ctx, "loading memory", 0, total); /* the start, before any byte is read */
	for (;;) {
		ssize_t r = read(in_fd, ibuf, icap);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the snapshot");
			goto out;
		}
		if (r == 0)
			break;
		done += (uint64_t)r;
		ZSTD_inBuffer in = { ibuf, (size_t)r, 0 };
		while (in.pos < in.size) {
			ZSTD_outBuffer o = { obuf, ocap, 0 };
			last = ZSTD_decompressStream(z, &o, &in);
			if (ZSTD_isError(last)) {
				sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the snapshot is corrupt: %s",
					    ZSTD_getErrorName(last));
				goto out;
			}
			if (o.pos && pipe_write(out_fd, obuf, o.pos, alive_fd, deadline_ns, err) < 0)
				goto out;
		}
		/* Output the decoder still holds for this input.  Only a call
		 * that made progress says whether the frame is complete: after
		 * its end, an empty call hints at the next frame's header. */
		for (;;) {
			ZSTD_outBuffer o = { obuf, ocap, 0 };
			ZSTD_inBuffer none = { NULL, 0, 0 };
			size_t ret = ZSTD_decompressStream(z, &o, &none);
			if (ZSTD_isError(ret)) {
				sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the snapshot is corrupt: %s",
					    ZSTD_getErrorName(ret));
				goto out;
			}
			if (o.pos)
				last = ret;
			if (o.pos && pipe_write(out_fd, obuf, o.pos, alive_fd, deadline_ns, err) < 0)
				goto out;
			if (o.pos < ocap)
				break;
		}
		if (cb && done - shown >= PROGRESS_EVERY) {
			cb(ctx, "loading memory", done, total);
			shown = done;
		}
	}
	if (last != 0) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the snapshot is truncated");
		goto out;
	}
	if (cb)
		cb(ctx, "loading memory", done, total);
	rc = 0;
out:
	ZSTD_freeDCtx(z);
	return rc;
}

/* --- sparse disk images ------------------------------------------------- */

static int all_zero(const uint8_t *p, size_t n)
{
	static const uint8_t zero[DISK_BLOCK];
	for (size_t off = 0; off < n; off += DISK_BLOCK) {
		size_t k = n - off < DISK_BLOCK ? n - off : DISK_BLOCK;
		if (memcmp(p + off, zero, k))
			return 0;
	}
	return 1;
}

/* One chunk of a data extent: runs of non-zero blocks become records. */
static int pack_chunk(struct sbx_zsink *s, const uint8_t *p, size_t n, uint64_t base, struct sbx_err *err)
{
	size_t run = 0, len = 0;
	for (size_t off = 0; off <= n; off += DISK_BLOCK) {
		size_t k = off < n ? (n - off < DISK_BLOCK ? n - off : DISK_BLOCK) : 0;
		int data = k && !all_zero(p + off, k);
		if (data) {
			if (!len)
				run = off;
			len += k;
			continue;
		}
		if (len) {
			uint8_t h[16];
			put_u64(h, base + run);
			put_u64(h + 8, len);
			if (sbx_zsink_write(s, h, sizeof h, err) < 0 || sbx_zsink_write(s, p + run, len, err) < 0)
				return -1;
			len = 0;
		}
	}
	return 0;
}

int sbx_zdisk_pack(const char *src, int dirfd, const char *name, uint64_t max_out, sbx_zprogress cb, void *ctx,
		   struct sbx_err *err)
{
	_cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat sb;
	if (in < 0 || fstat(in, &sb) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read %s", src);
	_cleanup_close_ int out = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create %s", name);
	_cleanup_free_ uint8_t *buf = malloc(DISK_CHUNK);
	struct sbx_zsink s;
	if (!buf)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot copy %s", src);
	if (sbx_zsink_open(&s, out, 1, err) < 0)
		return -1;
	s.limit = max_out;
	uint8_t h[16];
	uint64_t size = (uint64_t)sb.st_size, done = 0, shown = 0, total = (uint64_t)sb.st_blocks * 512;
	memcpy(h, DISK_MAGIC, 8);
	put_u64(h + 8, size);
	int rc = sbx_zsink_write(&s, h, sizeof h, err);
	for (off_t pos = 0; rc == 0 && (uint64_t)pos < size;) {
		off_t data = lseek(in, pos, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			break; /* only a hole is left */
		off_t hole = data < 0 ? -1 : lseek(in, data, SEEK_HOLE);
		if (data < 0 || hole < 0) {
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot map %s", src);
			break;
		}
		for (pos = data; rc == 0 && pos < hole;) {
			size_t want = (uint64_t)(hole - pos) < DISK_CHUNK ? (size_t)(hole - pos) : DISK_CHUNK;
			ssize_t r = pread(in, buf, want, pos);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				rc = sbx_err_set(err, SBX_EXIT_INTERNAL, r < 0 ? errno : EIO, "cannot read %s", src);
				break;
			}
			rc = pack_chunk(&s, buf, (size_t)r, (uint64_t)pos, err);
			pos += r;
			done += (uint64_t)r;
			if (cb && done - shown >= PROGRESS_EVERY) {
				cb(ctx, "saving disk", done, total);
				shown = done;
			}
		}
	}
	if (rc == 0) {
		put_u64(h, UINT64_MAX);
		put_u64(h + 8, 0);
		rc = sbx_zsink_write(&s, h, sizeof h, err);
	}
	if (rc == 0)
		rc = sbx_zsink_finish(&s, err);
	sbx_zsink_free(&s);
	if (rc == 0 && cb)
		cb(ctx, "saving disk", done, total);
	if (rc < 0)
		unlinkat(dirfd, name, 0);
	return rc;
}

/* Reads decompressed bytes from a packed disk. */
struct zreader {
	int fd;
	ZSTD_DCtx *z;
	uint8_t *ibuf, *obuf;
	size_t icap, ocap;
	ZSTD_inBuffer in;
	size_t opos, olen;
	int eof;
	size_t last;
};

static int zr_fill(struct zreader *r, struct sbx_err *err)
{
	for (;;) {
		if (r->in.pos == r->in.size && !r->eof) {
			ssize_t n = read(r->fd, r->ibuf, r->icap);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the snapshot's disk");
			r->eof = n == 0;
			r->in = (ZSTD_inBuffer){ r->ibuf, (size_t)n, 0 };
		}
		ZSTD_outBuffer o = { r->obuf, r->ocap, 0 };
		size_t before = r->in.pos;
		size_t ret = ZSTD_decompressStream(r->z, &o, &r->in);
		if (ZSTD_isError(ret))
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the snapshot's disk is corrupt: %s",
					   ZSTD_getErrorName(ret));
		/* As in sbx_zpump: only a call that made progress tells. */
		if (o.pos || r->in.pos != before)
			r->last = ret;
		r->opos = 0;
		r->olen = o.pos;
		if (o.pos)
			return 1;
		if (r->eof && r->in.pos == r->in.size)
			return 0;
	}
}

/* Exactly n bytes, or an error: a record cut short is corruption. */
static int zr_read(struct zreader *r, void *dst, size_t n, struct sbx_err *err)
{
	uint8_t *p = dst;
	while (n) {
		if (r->opos == r->olen) {
			int f = zr_fill(r, err);
			if (f < 0)
				return -1;
			if (f == 0)
				return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the snapshot's disk is truncated");
		}
		size_t k = r->olen - r->opos < n ? r->olen - r->opos : n;
		memcpy(p, r->obuf + r->opos, k);
		r->opos += k;
		p += k;
		n -= k;
	}
	return 0;
}

static int zr_open(struct zreader *r, int dirfd, const char *name, uint64_t *size, struct sbx_err *err)
{
	memset(r, 0, sizeof *r);
	r->fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (r->fd < 0)
		return sbx_err_set(err, errno == ENOENT ? SBX_EXIT_NOENT : SBX_EXIT_INTERNAL, errno, "cannot open %s",
				   name);
	r->icap = ZSTD_DStreamInSize();
	r->ocap = ZSTD_DStreamOutSize();
	r->ibuf = malloc(r->icap);
	r->obuf = malloc(r->ocap);
	r->z = ZSTD_createDCtx();
	if (!r->ibuf || !r->obuf || !r->z)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot read %s", name);
	uint8_t h[16];
	if (zr_read(r, h, sizeof h, err) < 0)
		return -1;
	*size = get_u64(h + 8);
	if (memcmp(h, DISK_MAGIC, 8) || *size == 0 || *size > DISK_MAX)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "%s is not a packed disk image", name);
	return 0;
}

static void zr_close(struct zreader *r)
{
	if (r->fd >= 0)
		close(r->fd);
	ZSTD_freeDCtx(r->z);
	free(r->ibuf);
	free(r->obuf);
}

int sbx_zdisk_size(int dirfd, const char *name, uint64_t *size, struct sbx_err *err)
{
	struct zreader r;
	int rc = zr_open(&r, dirfd, name, size, err);
	zr_close(&r);
	return rc;
}

int sbx_zdisk_unpack(int dirfd, const char *name, const char *dst, uint64_t *size, struct sbx_err *err)
{
	struct zreader r;
	_cleanup_free_ uint8_t *buf = malloc(DISK_CHUNK);
	int out = -1, rc = -1;
	if (!buf) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot unpack %s", name);
		return -1;
	}
	if (zr_open(&r, dirfd, name, size, err) < 0)
		goto done;
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create %s", dst);
		goto done;
	}
	if (ftruncate(out, (off_t)*size) < 0) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot size %s", dst);
		goto done;
	}
	for (;;) {
		uint8_t h[16];
		if (zr_read(&r, h, sizeof h, err) < 0)
			goto done;
		uint64_t off = get_u64(h), len = get_u64(h + 8);
		if (off == UINT64_MAX && len == 0)
			break;
		if (!len || off > *size || len > *size - off) {
			sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
				    "the snapshot's disk is corrupt (a record out of bounds)");
			goto done;
		}
		while (len) {
			size_t k = len < DISK_CHUNK ? (size_t)len : DISK_CHUNK;
			if (zr_read(&r, buf, k, err) < 0)
				goto done;
			for (size_t w = 0; w < k;) {
				ssize_t n = pwrite(out, buf + w, k - w, (off_t)(off + w));
				if (n < 0 && errno == EINTR)
					continue;
				if (n <= 0) {
					sbx_err_set(err, SBX_EXIT_INTERNAL, n < 0 ? errno : EIO, "cannot write %s",
						    dst);
					goto done;
				}
				w += (size_t)n;
			}
			off += k;
			len -= k;
		}
	}
	/* Nothing may follow the end record, and the zstd frame must be whole
	 * (its checksum verified). */
	uint8_t extra;
	if (zr_read(&r, &extra, 1, NULL) == 0 || r.last != 0) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the snapshot's disk is corrupt (trailing data)");
		goto done;
	}
	rc = 0;
done:
	zr_close(&r);
	if (out >= 0)
		close(out);
	if (rc < 0 && out >= 0)
		unlink(dst);
	return rc;
}
