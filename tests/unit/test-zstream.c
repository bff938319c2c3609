/* Unit tests for the snapshot streams (zstream.h): a sparse disk packed
 * and unpacked byte for byte with its holes, corrupt or truncated input
 * refused, a VMM's endless save stream cut off at its caps, names checked
 * (TAP). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "snapshot.h"
#include "util.h"
#include "zstream.h"

#include "tap.h"

static int same(const char *a, const char *b)
{
	FILE *x = fopen(a, "rb"), *y = fopen(b, "rb");
	int r = x && y, ca, cb;
	while (r && ((ca = fgetc(x)) != EOF) | ((cb = fgetc(y)) != EOF))
		r = ca == cb;
	if (x)
		fclose(x);
	if (y)
		fclose(y);
	return r;
}

static void corrupt_copy(int dfd, const char *from, const char *to, off_t at, size_t keep)
{
	size_t len;
	char *buf = sbx_read_small_at(dfd, from, 1 << 24, &len);
	if (keep && keep < len)
		len = keep;
	if (at >= 0 && (size_t)at < len)
		buf[at] ^= 0x55;
	int fd = openat(dfd, to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd >= 0 && buf)
		sbx_write_all(fd, buf, len);
	if (fd >= 0)
		close(fd);
	free(buf);
}

/* A stand-in for a hostile VMM: writes pattern bytes (zeros, or
 * incompressible ones) into a pipe forever, or limit bytes and closes it. */
static pid_t endless_writer(int *rd, int random_bytes, size_t limit)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		static char buf[65536];
		uint32_t x = 2463534242u;
		for (size_t done = 0; !limit || done < limit;) {
			for (size_t i = 0; random_bytes && i < sizeof buf; i++) {
				x ^= x << 13, x ^= x >> 17, x ^= x << 5;
				buf[i] = (char)x;
			}
			size_t w = limit && limit - done < sizeof buf ? limit - done : sizeof buf;
			if (sbx_write_all(p[1], buf, w) < 0)
				_exit(0);
			done += w;
		}
		_exit(0);
	}
	close(p[1]);
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	*rd = p[0];
	return pid;
}

static void reap(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* N6: what a VMM writes for a save is capped: past the guest's memory and
 * its allowance (max_in), or past what the file may take (max_out: the
 * tenant's snapshot_bytes left), the copy stops with an error, well
 * before its 600 s deadline. */
static void save_caps(int dfd)
{
	struct sbx_err e = { 0 };
	int rd, out;
	struct stat st;

	pid_t pid = endless_writer(&rd, 0, 0);
	out = openat(dfd, "cap-in.zst", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	uint64_t t0 = sbx_mono_ns();
	int rc = sbx_zsave(rd, out, -1, t0 + 60000000000ull, 8u << 20, 0, NULL, NULL, &e);
	ok(rc < 0 && e.errnum == EFBIG && sbx_mono_ns() - t0 < 20000000000ull,
	   "an endless stream stops at max_in (EFBIG), long before the deadline");
	close(rd);
	close(out);
	reap(pid);

	pid = endless_writer(&rd, 1, 0);
	out = openat(dfd, "cap-out.zst", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	rc = sbx_zsave(rd, out, -1, sbx_mono_ns() + 60000000000ull, 0, 1u << 20, NULL, NULL, &e);
	ok(rc < 0 && e.errnum == EDQUOT, "an incompressible stream stops at max_out (EDQUOT)");
	ok(fstat(out, &st) == 0 && st.st_size <= (off_t)(1u << 20), "and the file never passed max_out");
	close(rd);
	close(out);
	reap(pid);

	pid = endless_writer(&rd, 0, 3u << 20);
	out = openat(dfd, "cap-ok.zst", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	rc = sbx_zsave(rd, out, -1, sbx_mono_ns() + 60000000000ull, 3u << 20, 1u << 20, NULL, NULL, &e);
	ok(rc == 0, "a stream within both caps (max_in exactly) is saved");
	close(rd);
	close(out);
	reap(pid);
}

int main(void)
{
	char tmpl[] = "/tmp/sbx-unit-z.XXXXXX", src[200], dst[200];
	char *dir = mkdtemp(tmpl);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct sbx_err e = { 0 };
	uint64_t size = 0;

	/* 64 MiB sparse, data at the start, middle and end, one all-zero block
	 * written out (it must come back as a hole), and random bytes. */
	snprintf(src, sizeof src, "%s/src.img", dir);
	int fd = open(src, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ok(fd >= 0 && ftruncate(fd, 64 << 20) == 0, "a sparse source image");
	char block[8192], zero[4096] = { 0 };
	for (size_t i = 0; i < sizeof block; i++)
		block[i] = (char)(i * 7 + 3);
	pwrite(fd, block, sizeof block, 0);
	pwrite(fd, zero, sizeof zero, 1 << 20);
	pwrite(fd, block, 1000, (32 << 20) + 17);
	pwrite(fd, block, sizeof block, (64 << 20) - (off_t)sizeof block);
	close(fd);

	ok(sbx_zdisk_pack(src, dfd, "disk.zst", 0, NULL, NULL, &e) == 0, "pack");
	struct stat st;
	ok(fstatat(dfd, "disk.zst", &st, 0) == 0 && (st.st_mode & 0777) == 0600 && st.st_size < 4096,
	   "packed 0600 and small (holes and zeros left out)");
	ok(sbx_zdisk_size(dfd, "disk.zst", &size, &e) == 0 && size == 64u << 20, "the size is in the header");
	snprintf(dst, sizeof dst, "%s/dst.img", dir);
	ok(sbx_zdisk_unpack(dfd, "disk.zst", dst, &size, &e) == 0 && size == 64u << 20, "unpack");
	ok(same(src, dst), "byte for byte the same");
	ok(stat(dst, &st) == 0 && st.st_blocks * 512 <= 64 * 1024, "and sparse");
	ok(sbx_zdisk_unpack(dfd, "disk.zst", dst, &size, &e) < 0, "an existing destination is refused");

	/* Corruption: a flipped byte (zstd's checksum or our bounds), a cut. */
	unlink(dst);
	corrupt_copy(dfd, "disk.zst", "flip.zst", 40, 0);
	ok(sbx_zdisk_unpack(dfd, "flip.zst", dst, &size, &e) < 0 && access(dst, F_OK) < 0,
	   "a corrupt stream is refused and leaves nothing");
	corrupt_copy(dfd, "disk.zst", "cut.zst", -1, 30);
	ok(sbx_zdisk_unpack(dfd, "cut.zst", dst, &size, &e) < 0 && access(dst, F_OK) < 0,
	   "a truncated stream is refused and leaves nothing");
	ok(sbx_zdisk_unpack(dfd, "missing.zst", dst, &size, &e) < 0 && e.code == SBX_EXIT_NOENT, "a missing file is 4");

	/* The memory path: sink then pump into a pipe. */
	int out = openat(dfd, "mem.zst", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	struct sbx_zsink z;
	int rc = sbx_zsink_open(&z, out, 1, &e);
	for (int i = 0; rc == 0 && i < 100; i++)
		rc = sbx_zsink_write(&z, block, sizeof block, &e);
	ok(rc == 0 && sbx_zsink_finish(&z, &e) == 0, "a stream compressed");
	sbx_zsink_free(&z);
	close(out);
	int p[2];
	pipe(p);
	fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
	int in = openat(dfd, "mem.zst", O_RDONLY | O_CLOEXEC);
	ok(sbx_zpump(in, p[1], -1, sbx_mono_ns() + 10000000000ull, NULL, NULL, &e) == 0, "and pumped into a pipe");
	close(in);
	close(p[1]);
	size_t got = 0, bad = 0;
	char buf[8192];
	for (ssize_t r; (r = read(p[0], buf, sizeof buf)) > 0; got += (size_t)r)
		for (ssize_t i = 0; i < r; i++)
			bad += buf[i] != block[(got + (size_t)i) % sizeof block];
	close(p[0]);
	ok(got == 100 * sizeof block && !bad, "whole and intact");
	corrupt_copy(dfd, "mem.zst", "mem-cut.zst", -1, 200);
	pipe(p);
	in = openat(dfd, "mem-cut.zst", O_RDONLY | O_CLOEXEC);
	ok(sbx_zpump(in, p[1], -1, sbx_mono_ns() + 10000000000ull, NULL, NULL, &e) < 0,
	   "a truncated memory image is refused");
	close(in);
	close(p[0]);
	close(p[1]);

	save_caps(dfd);

	/* Names. */
	char nm[64], ver[64];
	ok(sbx_snapshot_spec("py@3.11-1", nm, ver, &e) == 0 && !strcmp(nm, "py") && !strcmp(ver, "3.11-1"),
	   "NAME@VERSION");
	ok(sbx_snapshot_spec("py", nm, ver, &e) == 0 && !ver[0], "NAME");
	const char *bad_names[] = {
		"",     "@1",    "a@",
		"../x", "a/b",   "x@../y",
		".h",   "a@b@c", "0123456789012345678901234567890123456789012345678901234567890123"
	};
	for (size_t i = 0; i < SBX_ARRAY_LEN(bad_names); i++) {
		char what[120];
		snprintf(what, sizeof what, "'%.20s' refused with 3", bad_names[i]);
		ok(sbx_snapshot_spec(bad_names[i], nm, ver, &e) < 0 && e.code == SBX_EXIT_INVALID, what);
	}

	close(dfd);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		failed++;
	printf("1..%d\n", n);
	return failed ? 1 : 0;
}
