/* sbx-mkcpio: write a directory tree as a newc cpio archive (an initramfs).
 *
 * Output is reproducible: entries sorted by name, owned by 0:0, mtime 0,
 * inode numbers assigned in order, hard links stored as separate files
 * (the kernel's unpacker does not need them and they would make the output
 * depend on the staging filesystem).  Uncompressed by default: unpacking a
 * plain cpio is the cheapest thing the guest kernel can do under TCG. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Set once the temporary output exists, so a failure leaves nothing behind. */
static const char *tmp_out;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;

	if (tmp_out)
		unlink(tmp_out);

	fputs("sbx-mkcpio: error: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static char **names;
static size_t nnames, capnames;
static size_t rootlen;

static int collect(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	const char *rel = path + rootlen;

	(void)st;
	if (flag == FTW_DNR || flag == FTW_NS)
		die("cannot read %s", path);
	if (ftw->level == 0)
		return 0; /* the root itself: the kernel's rootfs already exists */
	while (*rel == '/')
		rel++;
	if (nnames == capnames) {
		capnames = capnames ? capnames * 2 : 256;
		names = realloc(names, capnames * sizeof(*names));
		if (!names)
			die("out of memory");
	}
	if (!(names[nnames++] = strdup(rel)))
		die("out of memory");
	return 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void usage(void) __attribute__((noreturn));
static void usage(void)
{
	fputs("usage: sbx-mkcpio [-z] -o OUT.cpio DIR\n", stderr);
	exit(2);
}

static void check(struct archive *a, int r, const char *what)
{
	if (r < ARCHIVE_OK && r != ARCHIVE_WARN)
		die("%s: %s", what, archive_error_string(a));
}

int main(int argc, char **argv)
{
	const char *out = NULL, *dir;
	char tmp[PATH_MAX], path[PATH_MAX];
	static char buf[1 << 16];
	struct archive *a;
	int opt, gz = 0;

	while ((opt = getopt(argc, argv, "zo:h")) != -1) {
		switch (opt) {
		case 'z': gz = 1; break;
		case 'o': out = optarg; break;
		default: usage();
		}
	}
	if (!out || optind != argc - 1)
		usage();
	dir = argv[optind];
	rootlen = strlen(dir);
	while (rootlen > 1 && dir[rootlen - 1] == '/')
		rootlen--;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", out) >= sizeof(tmp))
		die("output path too long");

	struct stat rst;
	if (stat(dir, &rst) < 0 || !S_ISDIR(rst.st_mode))
		die("%s: not a directory", dir);
	if (nftw(dir, collect, 64, FTW_PHYS) < 0)
		die("walking %s: %s", dir, strerror(errno));
	qsort(names, nnames, sizeof(*names), cmp_names);

	a = archive_write_new();
	if (!a)
		die("out of memory");
	check(a, archive_write_set_format_cpio_newc(a), "cpio format");
	if (gz) {
		check(a, archive_write_add_filter_gzip(a), "gzip");
		/* A timestamp in the gzip header would defeat reproducibility;
		 * older libarchive lacks the option, which only costs that. */
		archive_write_set_filter_option(a, "gzip", "timestamp", NULL);
	}
	/* No padding to 10 KiB blocks: the kernel reads to the end anyway. */
	check(a, archive_write_set_bytes_in_last_block(a, 1), "block size");
	check(a, archive_write_open_filename(a, tmp), tmp);
	tmp_out = tmp;

	struct archive_entry *e = archive_entry_new();
	if (!e)
		die("out of memory");
	for (size_t i = 0; i < nnames; i++) {
		struct stat st;
		int fd = -1;

		if ((size_t)snprintf(path, sizeof(path), "%.*s/%s", (int)rootlen, dir, names[i]) >= sizeof(path))
			die("path too long: %s", names[i]);
		if (lstat(path, &st) < 0)
			die("%s: %s", path, strerror(errno));

		archive_entry_clear(e);
		archive_entry_set_pathname(e, names[i]);
		archive_entry_set_mode(e, st.st_mode);
		archive_entry_set_uid(e, 0);
		archive_entry_set_gid(e, 0);
		archive_entry_set_mtime(e, 0, 0);
		archive_entry_set_ino64(e, (int64_t)i + 1);
		archive_entry_set_dev(e, 0);
		archive_entry_set_nlink(e, S_ISDIR(st.st_mode) ? 2 : 1);
		archive_entry_set_size(e, 0);

		if (S_ISREG(st.st_mode)) {
			fd = open(path, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				die("%s: %s", path, strerror(errno));
			archive_entry_set_size(e, st.st_size);
		} else if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX];
			ssize_t n = readlink(path, target, sizeof(target) - 1);
			if (n < 0)
				die("%s: %s", path, strerror(errno));
			target[n] = '\0';
			archive_entry_set_symlink(e, target);
		} else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
			archive_entry_set_rdev(e, st.st_rdev);
		} else if (!S_ISDIR(st.st_mode) && !S_ISFIFO(st.st_mode)) {
			die("%s: unsupported file type", path);
		}
		check(a, archive_write_header(a, e), names[i]);

		if (fd >= 0) {
			off_t left = st.st_size;
			while (left > 0) {
				ssize_t n = read(fd, buf, sizeof(buf));
				if (n < 0 && errno == EINTR)
					continue;
				if (n < 0)
					die("%s: %s", path, strerror(errno));
				if (n == 0)
					die("%s: changed size while archiving", path);
				if (n > left)
					n = (ssize_t)left; /* grew meanwhile: header already says st_size */
				if (archive_write_data(a, buf, (size_t)n) != n)
					die("%s: %s", names[i], archive_error_string(a));
				left -= n;
			}
			close(fd);
		}
	}
	archive_entry_free(e);
	check(a, archive_write_close(a), tmp);
	archive_write_free(a);

	if (rename(tmp, out) < 0)
		die("rename %s -> %s: %s", tmp, out, strerror(errno));
	for (size_t i = 0; i < nnames; i++)
		free(names[i]);
	free(names);
	return 0;
}
