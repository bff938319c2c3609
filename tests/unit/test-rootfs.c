/* The rootfs/image unpacker (common/rootfs.c) against archives built here
 * with libarchive's writer: each success (plain, gzip, zstd, docker save
 * with whiteouts, OCI layout with digests) and each refusal (.., absolute,
 * hardlink out, writes through symlinks, tampered blobs, bombs, too many
 * entries).  Every hostile case also checks that nothing appeared outside
 * the root. */
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>

#include <archive.h>
#include <archive_entry.h>
#include <sha2.h>

#include "rootfs.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
/* tap.h counts in a global n; keep the short name for locals here. */
#define n tap_count
#include "tap.h"
#undef n
#include "util.h"

static char base[64];

struct e {
	const char *name;
	unsigned type; /* AE_IF*, 0: regular */
	unsigned mode;
	const char *data; /* file content or link target */
	bool hard;
	unsigned uid, gid;
	bool caps; /* with a security.capability xattr (and a user.* one) */
};

static void put(struct archive *a, const struct e *x)
{
	struct archive_entry *en = archive_entry_new();
	archive_entry_set_pathname(en, x->name);
	unsigned t = x->type ? x->type : AE_IFREG;
	archive_entry_set_filetype(en, x->hard ? AE_IFREG : t);
	archive_entry_set_perm(en, x->mode ? x->mode : (t == AE_IFDIR ? 0755 : 0644));
	archive_entry_set_uid(en, x->uid);
	archive_entry_set_gid(en, x->gid);
	archive_entry_set_mtime(en, 1234567890, 0);
	size_t len = 0;
	if (x->hard)
		archive_entry_set_hardlink(en, x->data);
	else if (t == AE_IFLNK)
		archive_entry_set_symlink(en, x->data);
	else if (t == AE_IFREG && x->data)
		len = strlen(x->data);
	if (t == AE_IFCHR)
		archive_entry_set_rdev(en, makedev(1, 3));
	if (x->caps) {
		/* vfs_cap_data revision 2, effective: cap_net_raw (13) permitted. */
		static const uint8_t cap[20] = { 0x01, 0, 0, 0x02, 0, 0x20, 0, 0 };
		archive_entry_xattr_add_entry(en, "security.capability", cap, sizeof cap);
		archive_entry_xattr_add_entry(en, "user.note", "x", 1);
	}
	archive_entry_set_size(en, (la_int64_t)len);
	archive_write_header(a, en);
	if (len)
		archive_write_data(a, x->data, len);
	archive_entry_free(en);
}

static struct archive *writer(const char *file, int filter)
{
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	if (filter == 'g')
		archive_write_add_filter_gzip(a);
	else if (filter == 'z')
		archive_write_add_filter_zstd(a);
	else if (filter == 'x')
		archive_write_add_filter_xz(a);
	archive_write_open_filename(a, file);
	return a;
}

/* An archive of entries, in base/in/NAME; returns its path (static). */
static const char *mk(const char *name, int filter, const struct e *v, size_t n)
{
	static char path[2][256];
	static int k;
	char *p = path[k++ & 1];
	snprintf(p, 256, "%s/in/%s", base, name);
	/* Written as a tool in a UTF-8 locale writes: non-ASCII names as
	 * UTF-8 pax path records, names that are not UTF-8 as BINARY; the
	 * unpacker itself runs in the test's C locale. */
	locale_t utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0), old = uselocale(utf8);
	struct archive *a = writer(p, filter);
	for (size_t i = 0; i < n; i++)
		put(a, &v[i]);
	archive_write_close(a);
	archive_write_free(a);
	uselocale(old);
	freelocale(utf8);
	return p;
}

static char *slurp(const char *path, size_t *n)
{
	size_t len;
	char *b = sbx_read_small_at(AT_FDCWD, path, 64u << 20, &len);
	*n = len;
	return b;
}

struct blob {
	const char *name;
	const char *data;
	size_t len;
	const char *link; /* a symlink member instead */
};

static const char *mkimage(const char *name, const struct blob *v, size_t n)
{
	static char p[256];
	snprintf(p, sizeof p, "%s/in/%s", base, name);
	struct archive *a = writer(p, 0);
	for (size_t i = 0; i < n; i++) {
		struct archive_entry *en = archive_entry_new();
		archive_entry_set_pathname(en, v[i].name);
		archive_entry_set_filetype(en, v[i].link ? AE_IFLNK : AE_IFREG);
		archive_entry_set_perm(en, 0644);
		if (v[i].link)
			archive_entry_set_symlink(en, v[i].link);
		archive_entry_set_size(en, v[i].link ? 0 : (la_int64_t)v[i].len);
		archive_write_header(a, en);
		if (!v[i].link)
			archive_write_data(a, v[i].data, v[i].len);
		archive_entry_free(en);
	}
	archive_write_close(a);
	archive_write_free(a);
	return p;
}

static void sha(const char *d, size_t n, char out[65])
{
	SHA256Data((const uint8_t *)d, n, out);
}

static int run(const char *file, const struct sbx_rootfs_limits *lim, struct sbx_rootfs_config *cfg,
	       struct sbx_err *err)
{
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf %s/root %s/out && mkdir %s/root %s/out", base, base, base, base);
	if (system(cmd) != 0)
		return -100;
	char r[128];
	snprintf(r, sizeof r, "%s/root", base);
	int fd = open(r, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = sbx_rootfs_unpack(fd, file, lim, cfg, err);
	close(fd);
	return rc;
}

static struct sbx_rootfs_limits lim = { .max_bytes = 64u << 20, .max_entries = 100000 };

/* Nothing but root/ and out/ (empty) and in/ in base. */
static bool outside_clean(void)
{
	char p[128];
	snprintf(p, sizeof p, "%s/out", base);
	DIR *d = opendir(p);
	int n = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	d = opendir(base);
	int m = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		m += de->d_name[0] != '.';
	if (d)
		closedir(d);
	return n == 0 && m == 3;
}

static bool root_empty(void)
{
	char p[128];
	snprintf(p, sizeof p, "%s/root", base);
	DIR *d = opendir(p);
	int n = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	if (d)
		closedir(d);
	return n == 0;
}

static bool exists(const char *rel)
{
	char p[4200];
	struct stat st;
	snprintf(p, sizeof p, "%s/root/%s", base, rel);
	return lstat(p, &st) == 0;
}

static struct stat st_of(const char *rel)
{
	char p[4200];
	struct stat st = { 0 };
	snprintf(p, sizeof p, "%s/root/%s", base, rel);
	lstat(p, &st);
	return st;
}

static bool content(const char *rel, const char *want)
{
	char p[4200];
	size_t n;
	snprintf(p, sizeof p, "%s/root/%s", base, rel);
	char *b = sbx_read_small_at(AT_FDCWD, p, 1 << 20, &n);
	bool r = b && n == strlen(want) && !memcmp(b, want, n);
	free(b);
	return r;
}

static void refused(const char *file, int code, const char *needle, const char *what)
{
	struct sbx_rootfs_config cfg;
	struct sbx_err err = { 0 };
	int rc = run(file, &lim, &cfg, &err);
	char m[300];
	snprintf(m, sizeof m, "%s: refused with %d naming it", what, code);
	ok(rc == -1 && err.code == code && strstr(err.msg, needle), m);
	if (!(rc == -1 && err.code == code && strstr(err.msg, needle)))
		printf("# rc %d code %d: %s\n", rc, err.code, err.msg);
	snprintf(m, sizeof m, "%s: nothing written outside the root", what);
	ok(outside_clean(), m);
	sbx_rootfs_config_free(&cfg);
}

static const struct e tree[] = {
	{ "./", AE_IFDIR },
	{ "./etc/", AE_IFDIR },
	{ "./etc/hostname", 0, 0640, "box\n", .uid = 1000, .gid = 100 },
	{ "./bin/", AE_IFDIR, 0700 },
	{ "./bin/sh", 0, 0755, "#!sh\n" },
	{ "./bin/ash", 0, 0, "./bin/sh", true },
	{ "./usr/lib/deep/file", 0, 0, "deep" }, /* parents not in the archive */
	{ "./lib", AE_IFLNK, 0777, "/usr/lib" },
	{ "./ro/", AE_IFDIR, 0555 },
	{ "./caf\xc3\xa9", 0, 0, "utf-8" }, /* a UTF-8 pax path record (written in a UTF-8 locale) */
	{ "./bad\xff", 0, 0, "bytes" },     /* not UTF-8: pax hdrcharset=BINARY */
};

static void test_plain(int filter, const char *what)
{
	char name[32];
	snprintf(name, sizeof name, "plain-%c.tar", filter ? filter : 'n');
	const char *f = mk(name, filter, tree, SBX_ARRAY_LEN(tree));
	struct sbx_rootfs_config cfg;
	struct sbx_err err = { 0 };
	int rc = run(f, &lim, &cfg, &err);
	char m[200];
	snprintf(m, sizeof m, "%s: unpacked, format rootfs, no env", what);
	ok(rc == 0 && !strcmp(cfg.format, "rootfs") && !cfg.env && !err.msg[0], m);
	if (rc)
		printf("# %s\n", err.msg);
	struct stat h = st_of("etc/hostname"), sh = st_of("bin/sh"), ash = st_of("bin/ash"), l = st_of("lib"),
		    ro = st_of("ro"), b = st_of("bin");
	snprintf(m, sizeof m, "%s: content, mode, owner, mtime kept", what);
	ok(content("etc/hostname", "box\n") && (h.st_mode & 07777) == 0640 &&
		   (geteuid() != 0 || (h.st_uid == 1000 && h.st_gid == 100)) && h.st_mtime == 1234567890,
	   m);
	snprintf(m, sizeof m, "%s: hardlink, symlink (absolute target kept), missing parents made", what);
	char t[64] = "";
	char p[128];
	snprintf(p, sizeof p, "%s/root/lib", base);
	ssize_t tn = readlink(p, t, sizeof t - 1);
	ok(sh.st_ino && sh.st_ino == ash.st_ino && S_ISLNK(l.st_mode) && tn == 8 && !strcmp(t, "/usr/lib") &&
		   content("usr/lib/deep/file", "deep"),
	   m);
	snprintf(m, sizeof m, "%s: non-ASCII and non-UTF-8 names kept byte for byte", what);
	ok(content("caf\xc3\xa9", "utf-8") && content("bad\xff", "bytes"), m);
	snprintf(m, sizeof m, "%s: directory modes and mtimes set after their contents", what);
	ok((ro.st_mode & 07777) == 0555 && (b.st_mode & 07777) == 0700 && b.st_mtime == 1234567890, m);
	sbx_rootfs_config_free(&cfg);
}

static void test_hostile(void)
{
	char n1[256], n2[256];
	snprintf(n1, sizeof n1, "../out/dotdot");
	struct e dd[] = { { "ok", 0, 0, "x" }, { n1, 0, 0, "pwned" } };
	refused(mk("dotdot.tar", 0, dd, 2), 3, "\"../out/dotdot\": a \"..\" component", "a .. name");
	struct e dd2[] = { { "a/../../out/x", 0, 0, "pwned" } };
	refused(mk("dotdot2.tar", 'g', dd2, 1), 3, "\"..\" component", "a .. in the middle");

	snprintf(n2, sizeof n2, "%s/out/abs", base);
	struct e ab[] = { { n2, 0, 0, "pwned" } };
	refused(mk("abs.tar", 0, ab, 1), 3, "absolute name (refused, not stripped)", "an absolute name");

	struct e hl[] = { { "h", 0, 0, "../out/x", true } };
	refused(mk("hl-out.tar", 0, hl, 1), 3, "hardlink to \"../out/x\"", "a hardlink out of the root");
	struct e hl2[] = { { "h", 0, 0, "/etc/passwd", true } };
	refused(mk("hl-abs.tar", 0, hl2, 1), 3, "hardlink to \"/etc/passwd\": absolute",
		"a hardlink to an absolute path");
	struct e hl3[] = { { "h", 0, 0, "later", true }, { "later", 0, 0, "x" } };
	refused(mk("hl-later.tar", 0, hl3, 2), 3, "has not extracted (yet)", "a hardlink to what is not extracted yet");

	snprintf(n2, sizeof n2, "%s/out", base);
	struct e sl[] = { { "l", AE_IFLNK, 0, n2 }, { "l/pwn", 0, 0, "pwned" } };
	refused(mk("sl-abs.tar", 0, sl, 2), 3, "\"l/pwn\": a parent directory is a symlink",
		"a write through an absolute symlink");
	struct e sl2[] = { { "d/", AE_IFDIR }, { "d/l", AE_IFLNK, 0, "../../out" }, { "d/l/pwn", 0, 0, "pwned" } };
	refused(mk("sl-rel.tar", 0, sl2, 3), 3, "symlink", "a write through a relative symlink");
	struct e sl3[] = { { "l", AE_IFLNK, 0, n2 }, { "l/sub/", AE_IFDIR } };
	refused(mk("sl-dir.tar", 0, sl3, 2), 3, "symlink", "a directory through a symlink");
	struct e sl4[] = { { "l", AE_IFLNK, 0, "." }, { "l/l/l/x", 0, 0, "x" } };
	refused(mk("sl-loop.tar", 0, sl4, 2), 3, "symlink", "a path through a symlink to itself");
	struct e hd[] = { { "d/", AE_IFDIR }, { "h", 0, 0, "d", true } };
	refused(mk("hl-dir.tar", 0, hd, 2), 3, "hardlink to a directory", "a hardlink to a directory");
	struct e hs[] = { { "d", AE_IFLNK, 0, "/etc" }, { "h", 0, 0, "d/passwd", true } };
	refused(mk("hl-through.tar", 0, hs, 2), 3, "not extracted", "a hardlink through a symlink");
	snprintf(n2, sizeof n2, "%s/out", base);
	struct e hr[] = {
		{ "d/", AE_IFDIR }, { "d/f", 0, 0, "f" }, { "d", AE_IFLNK, 0, n2 }, { "h", 0, 0, "d/f", true }
	};
	refused(mk("hl-replaced.tar", 0, hr, 4), 3, "symlink", "a hardlink to a name whose directory became a symlink");
	struct e nd[] = { { "f", 0, 0, "x" }, { "f/x", 0, 0, "x" } };
	refused(mk("notdir.tar", 0, nd, 2), 3, "not a directory", "a file used as a directory");

	/* A file entry over a symlink replaces the link: it never writes
	 * to the link's target. */
	snprintf(n2, sizeof n2, "%s/out/victim", base);
	struct e over[] = { { "v", AE_IFLNK, 0, n2 }, { "v", 0, 0, "new" }, { "hv", 0, 0, "v", true } };
	struct sbx_rootfs_config cfg;
	struct sbx_err err = { 0 };
	int rc = run(mk("over.tar", 0, over, 3), &lim, &cfg, &err);
	struct stat v = st_of("v");
	ok(rc == 0 && S_ISREG(v.st_mode) && content("v", "new") && outside_clean(),
	   "a file over a planted symlink replaces the link, its target untouched");
	sbx_rootfs_config_free(&cfg);

	/* A plain rootfs has no whiteouts: a .wh. file is just a file. */
	struct e wh[] = { { "a", 0, 0, "a" }, { ".wh.a", 0, 0, "" } };
	rc = run(mk("wh-plain.tar", 0, wh, 2), &lim, &cfg, &err);
	ok(rc == 0 && content("a", "a") && exists(".wh.a"), "whiteouts apply to image layers only");

	/* Not a tar at all, and a truncated one. */
	char junk[256];
	snprintf(junk, sizeof junk, "%s/in/junk.tar", base);
	FILE *fp = fopen(junk, "w");
	fputs("this is not an archive at all, not even close, but long enough to sniff\n", fp);
	fclose(fp);
	refused(junk, 3, "", "junk instead of a tar");
	/* A tar cut short in the middle of a file's data. */
	size_t n;
	struct e big[] = { { "f", 0, 0, "0123456789012345678901234567890123456789" } };
	char *b = slurp(mk("cut.tar", 0, big, 1), &n);
	snprintf(junk, sizeof junk, "%s/in/cut.tar", base);
	fp = fopen(junk, "w");
	fwrite(b, 1, 520, fp);
	fclose(fp);
	free(b);
	refused(junk, 3, "", "a truncated tar");

	/* Not an archive file at all: missing, a directory, a FIFO (which
	 * must not hang the open). */
	snprintf(junk, sizeof junk, "%s/in/missing.tar", base);
	refused(junk, 3, "cannot read", "a missing file");
	snprintf(junk, sizeof junk, "%s/in", base);
	refused(junk, 3, "not a regular file", "a directory");
	snprintf(junk, sizeof junk, "%s/in/fifo", base);
	mkfifo(junk, 0600);
	refused(junk, 3, "not a regular file", "a FIFO");
	unlink(junk);
}

static void test_drop_strip(void)
{
	struct e v[] = { { "dev/", AE_IFDIR },           { "dev/null", AE_IFCHR, 0666 },
			 { "dev/fifo", AE_IFIFO, 0644 }, { "su", 0, 04755, "x" },
			 { "sg", 0, 02755, "x" },        { "t/", AE_IFDIR, 01777 },
			 { "mail/", AE_IFDIR, 02775 },   { "ping", 0, 0755, "x", .caps = true } };
	const char *f = mk("dev.tar", 0, v, SBX_ARRAY_LEN(v));
	struct sbx_rootfs_config cfg;
	struct sbx_err err = { 0 };
	int rc = run(f, &lim, &cfg, &err);
	ok(rc == 0 && !exists("dev/null") && !exists("dev/fifo") && exists("dev"),
	   "device nodes and FIFOs dropped, the rest unpacked");
	char px[256], xv[64];
	snprintf(px, sizeof px, "%s/root/ping", base);
	ok(getxattr(px, "security.capability", xv, sizeof xv) < 0 && getxattr(px, "user.note", xv, sizeof xv) < 0,
	   "file capabilities and other xattrs not restored");
	ok(err.code == 0 && strstr(err.msg, "dropped 2 device nodes") && strstr(err.msg, "capabilities from 3 files"),
	   "the note counts what was dropped and stripped");
	printf("# note: %s\n", err.msg);
	ok((st_of("su").st_mode & 07777) == 0755 && (st_of("sg").st_mode & 07777) == 0755 &&
		   (st_of("t").st_mode & 07777) == 01777 && (st_of("mail").st_mode & 07777) == 02775,
	   "setuid/setgid stripped from files; the sticky bit and setgid directories kept");
	struct sbx_rootfs_limits l2 = lim;
	l2.allow_setuid = 1;
	rc = run(f, &l2, &cfg, &err);
	ok(rc == 0 && (st_of("su").st_mode & 07777) == 04755 && (st_of("sg").st_mode & 07777) == 02755,
	   "setuid/setgid kept when allow_setuid");
	ok(getxattr(px, "security.capability", xv, sizeof xv) == 20 && getxattr(px, "user.note", xv, sizeof xv) < 0,
	   "file capabilities kept when allow_setuid, other xattrs still not");
}

/* A ustar header by hand, for bombs whose data is never written out. */
static void ustar(char h[512], const char *name, unsigned long long size, char type)
{
	memset(h, 0, 512);
	snprintf(h, 100, "%s", name);
	snprintf(h + 100, 8, "%07o", 0644);
	snprintf(h + 108, 8, "%07o", 0);
	snprintf(h + 116, 8, "%07o", 0);
	snprintf(h + 124, 12, "%011llo", size);
	snprintf(h + 136, 12, "%011o", 0);
	h[156] = type;
	memcpy(h + 257,
	       "ustar\0"
	       "00",
	       8);
	memset(h + 148, ' ', 8);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += (unsigned char)h[i];
	snprintf(h + 148, 8, "%06o", sum);
	h[155] = ' ';
}

/* gzip of buf as one member (libarchive's raw writer). */
static char *gz(const char *buf, size_t n, size_t *out)
{
	size_t cap = n / 100 + 65536;
	char *o = malloc(cap);
	struct archive *a = archive_write_new();
	archive_write_set_format_raw(a);
	archive_write_add_filter_gzip(a);
	archive_write_set_bytes_in_last_block(a, 1);
	archive_write_open_memory(a, o, cap, out);
	struct archive_entry *en = archive_entry_new();
	archive_entry_set_filetype(en, AE_IFREG);
	archive_write_header(a, en);
	archive_write_data(a, buf, n);
	archive_entry_free(en);
	archive_write_close(a);
	archive_write_free(a);
	return o;
}

static void test_bombs(void)
{
	/* 10 GiB of zeros: 10240 gzip members, each one tar entry "z" of
	 * 1 MiB (the same name, so only the byte count grows). */
	size_t n = 512 + (1u << 20), zn;
	char *e = calloc(1, n);
	ustar(e, "z", 1u << 20, '0');
	char *z = gz(e, n, &zn);
	char p[256];
	snprintf(p, sizeof p, "%s/in/bomb.tar.gz", base);
	FILE *f = fopen(p, "w");
	for (int i = 0; i < 10240; i++)
		fwrite(z, 1, zn, f);
	fclose(f);
	free(z);
	printf("# bomb: %zu bytes of gzip for 10 GiB\n", (size_t)10240 * zn);
	uint64_t t0 = sbx_mono_ns();
	refused(p, 5, "max_bytes", "a gzip bomb of 10 GiB under a 64 MiB cap");
	uint64_t ms = (sbx_mono_ns() - t0) / 1000000;
	printf("# bomb refused in %llu ms\n", (unsigned long long)ms);
	ok(st_of("z").st_size <= (1 << 20), "the bomb wrote no more than one file of it");

	/* One huge file: refused at its header, before a byte is written. */
	ustar(e, "huge", 8ull << 30, '0');
	z = gz(e, n, &zn);
	snprintf(p, sizeof p, "%s/in/huge.tar.gz", base);
	f = fopen(p, "w");
	fwrite(z, 1, zn, f);
	fclose(f);
	free(z);
	refused(p, 5, "refused before any is written", "one 8 GiB file");
	ok(!exists("huge"), "the huge file was not created");

	/* 10^6 entries (1000 members of 1000 identical directory headers). */
	free(e);
	e = calloc(1000, 512);
	for (int i = 0; i < 1000; i++)
		ustar(e + 512 * i, "d/", 0, '5');
	z = gz(e, 512000, &zn);
	snprintf(p, sizeof p, "%s/in/entries.tar.gz", base);
	f = fopen(p, "w");
	for (int i = 0; i < 1000; i++)
		fwrite(z, 1, zn, f);
	fclose(f);
	free(z);
	free(e);
	struct sbx_rootfs_limits l = lim;
	l.max_entries = 10000;
	struct sbx_rootfs_config cfg;
	struct sbx_err err = { 0 };
	int rc = run(p, &l, &cfg, &err);
	ok(rc == -1 && err.code == 5 && strstr(err.msg, "more than 10000 entries"),
	   "10^6 entries refused at max_entries");
}

/* Legacy docker save names its layer directories by 64 hex digits. */
#define HA "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HB "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define HC "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
#define HD "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
#define HD60 "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"

/* A docker save tarball: two layers, the second with whiteouts. */
static char l1[1 << 16], l2[1 << 16];
static size_t l1n, l2n;

static void layers(void)
{
	struct e a[] = { { "etc/", AE_IFDIR },          { "etc/a", 0, 0, "a" },     { "etc/b", 0, 0, "b" },
			 { "opq/", AE_IFDIR },          { "opq/old", 0, 0, "old" }, { "opq/olddir/", AE_IFDIR },
			 { "opq/olddir/f", 0, 0, "f" }, { "keep/", AE_IFDIR },      { "keep/k", 0, 0, "k" } };
	struct e b[] = { { "etc/", AE_IFDIR },       { "etc/.wh.a", 0, 0, "" },        { "opq/", AE_IFDIR },
			 { "opq/new", 0, 0, "new" }, { "opq/.wh..wh..opq", 0, 0, "" }, { "etc/c", 0, 0, "c" },
			 { "etc/.wh.c", 0, 0, "" } /* the same layer's file stays */ };
	size_t n;
	char *x = slurp(mk("l1.tar", 0, a, SBX_ARRAY_LEN(a)), &n);
	memcpy(l1, x, l1n = n);
	free(x);
	x = slurp(mk("l2.tar", 0, b, SBX_ARRAY_LEN(b)), &n);
	memcpy(l2, x, l2n = n);
	free(x);
}

static void test_docker(void)
{
	layers();
	char d1[65], d2[65], cs[65];
	sha(l1, l1n, d1);
	sha(l2, l2n, d2);
	char config[1024];
	snprintf(
		config, sizeof config,
		"{\"config\":{\"Env\":[\"PATH=/usr/bin:/bin\",\"FOO=bar=baz\"],\"User\":\"1000:1000\","
		"\"WorkingDir\":\"/app\"},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:%s\",\"sha256:%s\"]}}",
		d1, d2);
	sha(config, strlen(config), cs);
	char cname[80], man[512];
	snprintf(cname, sizeof cname, "%s.json", cs);
	snprintf(man, sizeof man,
		 "[{\"Config\":\"%s\",\"RepoTags\":[\"t:1\"],\"Layers\":[\"" HA "/layer.tar\",\"" HB "/layer.tar\"]}]",
		 cname);
	struct blob v[] = { { HA "/layer.tar", l1, l1n },
			    { HB "/layer.tar", l2, l2n },
			    { cname, config, strlen(config) },
			    { "manifest.json", man, strlen(man) },
			    { "repositories", "{}", 2 } };
	struct sbx_rootfs_config cfg;
	struct sbx_err err = { 0 };
	int rc = run(mkimage("save.tar", v, SBX_ARRAY_LEN(v)), &lim, &cfg, &err);
	ok(rc == 0 && !strcmp(cfg.format, "docker"), "docker save: unpacked, format docker");
	if (rc)
		printf("# %s\n", err.msg);
	ok(!exists("etc/a") && content("etc/b", "b") && content("etc/c", "c") && !exists("etc/.wh.a"),
	   "docker save: .wh.a removed a lower file, not one of its own layer");
	ok(!exists("opq/old") && !exists("opq/olddir") && content("opq/new", "new") && content("keep/k", "k") &&
		   !exists("opq/.wh..wh..opq"),
	   "docker save: the opaque directory hides the lower layer only");
	ok(cfg.env && !strcmp(json_string_value(json_object_get(cfg.env, "FOO")), "bar=baz") &&
		   !strcmp(json_string_value(json_object_get(cfg.env, "PATH")), "/usr/bin:/bin") &&
		   !strcmp(cfg.user, "1000:1000") && !strcmp(cfg.workdir, "/app"),
	   "docker save: Env, User and WorkingDir read");
	sbx_rootfs_config_free(&cfg);

	/* docker save stores a layer it needs twice once, and links the
	 * other: "../ID/layer.tar".  A link out of the image is no member. */
	const char *mm = "[{\"Config\":\"c.json\",\"Layers\":[\"" HA "/layer.tar\",\"" HB "/layer.tar\"]}]";
	struct blob ln[] = { { HA "/layer.tar", l1, l1n },
			     { HB "/layer.tar", .link = "../" HA "/layer.tar" },
			     { "c.json", "{}", 2 },
			     { "manifest.json", mm, strlen(mm) } };
	rc = run(mkimage("save-ln.tar", ln, SBX_ARRAY_LEN(ln)), &lim, &cfg, &err);
	ok(rc == 0 && content("etc/a", "a") && content("keep/k", "k"), "docker save: a symlinked layer.tar is read");
	if (rc)
		printf("# %s\n", err.msg);
	sbx_rootfs_config_free(&cfg);
	ln[1].link = "../../../../etc/passwd";
	refused(mkimage("save-ln-out.tar", ln, SBX_ARRAY_LEN(ln)), 3, "does not hold",
		"docker save: a layer symlink out of the image");
	ln[1].link = HB "/layer.tar";
	refused(mkimage("save-ln-self.tar", ln, SBX_ARRAY_LEN(ln)), 3, "not a file it holds",
		"docker save: a layer symlink to itself");

	/* A layer that is not what diff_ids says: refused before any write. */
	char bad[1 << 16];
	memcpy(bad, l2, l2n);
	bad[512] ^= 1; /* the first file's data */
	struct blob w[] = { { HA "/layer.tar", l1, l1n },
			    { HB "/layer.tar", bad, l2n },
			    { cname, config, strlen(config) },
			    { "manifest.json", man, strlen(man) } };
	refused(mkimage("save-bad.tar", w, SBX_ARRAY_LEN(w)), 3, "(tampered?)", "docker save: a tampered layer");
	ok(root_empty(), "docker save: a tampered layer changes nothing");

	/* A config whose name is not its digest. */
	config[2] = 'C';
	refused(mkimage("save-cfg.tar", v, SBX_ARRAY_LEN(v)), 3, "sha256 is", "docker save: a tampered config");
	config[2] = 'c';

	/* Layer 1 plants a symlink, layer 2 writes through it. */
	char o[256];
	snprintf(o, sizeof o, "%s/out", base);
	struct e s1[] = { { "x", AE_IFLNK, 0, o } }, s2[] = { { "x/pwn", 0, 0, "pwned" } };
	size_t n1, n2;
	char *b1 = slurp(mk("s1.tar", 0, s1, 1), &n1), *b2 = slurp(mk("s2.tar", 'g', s2, 1), &n2);
	const char *m2 = "[{\"Config\":\"c.json\",\"Layers\":[\"" HC "/layer.tar\",\"" HD "/layer.tar\"]}]";
	struct blob y[] = { { HC "/layer.tar", b1, n1 },
			    { HD "/layer.tar", b2, n2 },
			    { "c.json", "{}", 2 },
			    { "manifest.json", m2, strlen(m2) } };
	refused(mkimage("save-sl.tar", y, SBX_ARRAY_LEN(y)), 3,
		"layer 2 of 2 (" HD "/layer.tar): entry \"x/pwn\": a parent directory is a symlink",
		"docker save: a write through a lower layer's symlink");
	struct e s3[] = { { ".wh.x", 0, 0, "" }, { "x/", AE_IFDIR }, { "x/ok", 0, 0, "ok" } };
	free(b2);
	b2 = slurp(mk("s3.tar", 0, s3, 3), &n2);
	struct blob y2[] = { { HC "/layer.tar", b1, n1 },
			     { HD "/layer.tar", b2, n2 },
			     { "c.json", "{}", 2 },
			     { "manifest.json", m2, strlen(m2) } };
	rc = run(mkimage("save-sl2.tar", y2, 4), &lim, &cfg, &err);
	ok(rc == 0 && S_ISDIR(st_of("x").st_mode) && content("x/ok", "ok") && outside_clean(),
	   "docker save: a whiteout removes a lower symlink itself, not its target");
	free(b1);
	free(b2);

	const char *wd = "{\"config\":{\"WorkingDir\":\"app\"}}";
	struct blob z[] = { { HC "/layer.tar", l1, l1n },
			    { "c.json", wd, strlen(wd) },
			    { "manifest.json", "[{\"Config\":\"c.json\",\"Layers\":[\"" HC "/layer.tar\"]}]", 109 } };
	refused(mkimage("save-wd.tar", z, 3), 3, "WorkingDir", "docker save: a relative WorkingDir");
	const char *envbad = "{\"config\":{\"Env\":[\"NOEQUALS\"]}}";
	struct blob z2[] = { { HC "/layer.tar", l1, l1n },
			     { "c.json", envbad, strlen(envbad) },
			     { "manifest.json", "[{\"Config\":\"c.json\",\"Layers\":[\"" HC "/layer.tar\"]}]", 109 } };
	refused(mkimage("save-env.tar", z2, 3), 3, "Env entry 0", "docker save: an Env entry without =");
	const char *envname = "{\"config\":{\"Env\":[\"A B=x\"]}}";
	struct blob z6[] = { { HC "/layer.tar", l1, l1n },
			     { "c.json", envname, strlen(envname) },
			     { "manifest.json", "[{\"Config\":\"c.json\",\"Layers\":[\"" HC "/layer.tar\"]}]", 109 } };
	refused(mkimage("save-envname.tar", z6, 3), 3, "Env entry 0", "docker save: an Env name with a space");
	/* docker save | gzip: refused with a hint, not imported as a root of blobs. */
	{
		size_t sn;
		char *raw = slurp(mkimage("save-plain.tar", v, SBX_ARRAY_LEN(v)), &sn);
		char gzp[256];
		snprintf(gzp, sizeof gzp, "%s/in/save.tar.gz", base);
		size_t zn;
		char *zb = gz(raw, sn, &zn);
		FILE *fz = fopen(gzp, "w");
		fwrite(zb, 1, zn, fz);
		fclose(fz);
		free(zb);
		free(raw);
		refused(gzp, 3, "decompress it", "docker save | gzip: refused with a hint");
	}
	struct blob z3[] = { { "c.json", "{}", 2 },
			     { "manifest.json", "[{\"Config\":\"c.json\",\"Layers\":[\"../../etc/passwd\"]}]", 51 } };
	refused(mkimage("save-path.tar", z3, 2), 3, "not a member name", "docker save: a layer path with ..");
	struct blob z4[] = { { "c.json", "{}", 2 },
			     { "manifest.json", "[{\"Config\":\"c.json\",\"Layers\":[\"nope.tar\"]}]", 43 } };
	refused(mkimage("save-missing.tar", z4, 2), 3, "does not hold", "docker save: a missing layer");
	struct blob z5[] = { { "manifest.json", "[{\"Config\":1, \"Config\":2}]", 26 } };
	refused(mkimage("save-dup.tar", z5, 1), 3, "duplicate", "docker save: duplicate JSON keys");
}

static void test_oci(void)
{
	layers();
	/* Layer 1 gzip, layer 2 zstd, as registries and BuildKit make them. */
	size_t g1, z2;
	struct e a[] = { { "etc/", AE_IFDIR }, { "etc/a", 0, 0, "a" }, { "etc/b", 0, 0, "b" } };
	struct e b[] = { { "etc/.wh.a", 0, 0, "" }, { "usr/bin/tool", 0, 0755, "tool" } };
	char *c1 = slurp(mk("o1.tar.gz", 'g', a, 3), &g1), *c2 = slurp(mk("o2.tar.zst", 'z', b, 2), &z2);
	char h1[65], h2[65], hc[65], hm[65];
	sha(c1, g1, h1);
	sha(c2, z2, h2);
	const char *config =
		"{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":[\"NODE_ENV=production\"],"
		"\"WorkingDir\":\"/srv\"}}";
	sha(config, strlen(config), hc);
	char man[1024], idx[512], p[4][100];
	snprintf(man, sizeof man,
		 "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
		 "\"config\":{\"mediaType\":\"application/"
		 "vnd.oci.image.config.v1+json\",\"digest\":\"sha256:%s\",\"size\":%zu},"
		 "\"layers\":[{\"mediaType\":\"application/"
		 "vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:%s\",\"size\":%zu},"
		 "{\"mediaType\":\"application/"
		 "vnd.oci.image.layer.v1.tar+zstd\",\"digest\":\"sha256:%s\",\"size\":%zu}]}",
		 hc, strlen(config), h1, g1, h2, z2);
	sha(man, strlen(man), hm);
	snprintf(idx, sizeof idx,
		 "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
		 "\"digest\":\"sha256:%s\",\"size\":%zu,\"platform\":{\"architecture\":\"amd64\",\"os\":\"linux\"}}]}",
		 hm, strlen(man));
	snprintf(p[0], 100, "blobs/sha256/%s", h1);
	snprintf(p[1], 100, "blobs/sha256/%s", h2);
	snprintf(p[2], 100, "blobs/sha256/%s", hc);
	snprintf(p[3], 100, "blobs/sha256/%s", hm);
	const char *lay = "{\"imageLayoutVersion\":\"1.0.0\"}";
	struct blob v[] = {
		{ "oci-layout", lay, strlen(lay) }, { p[0], c1, g1 },           { p[1], c2, z2 },
		{ p[2], config, strlen(config) },   { p[3], man, strlen(man) }, { "index.json", idx, strlen(idx) }
	};
	struct sbx_rootfs_config cfg;
	struct sbx_err err = { 0 };
	int rc = run(mkimage("oci.tar", v, SBX_ARRAY_LEN(v)), &lim, &cfg, &err);
	ok(rc == 0 && !strcmp(cfg.format, "oci"), "OCI layout: unpacked, format oci");
	if (rc)
		printf("# %s\n", err.msg);
	ok(!exists("etc/a") && content("etc/b", "b") && content("usr/bin/tool", "tool") &&
		   (st_of("usr/bin/tool").st_mode & 0777) == 0755,
	   "OCI layout: gzip and zstd layers applied in order, whiteout honoured");
	ok(cfg.env && !strcmp(json_string_value(json_object_get(cfg.env, "NODE_ENV")), "production") &&
		   !strcmp(cfg.workdir, "/srv") && !cfg.user[0],
	   "OCI layout: Env and WorkingDir read");
	sbx_rootfs_config_free(&cfg);

	/* docker 25 writes both layouts; the OCI one, digests and all, wins. */
	const char *dm = "[{\"Config\":\"nope.json\",\"Layers\":[]}]";
	struct blob both[SBX_ARRAY_LEN(v) + 1];
	memcpy(both, v, sizeof v);
	both[SBX_ARRAY_LEN(v)] = (struct blob){ "manifest.json", dm, strlen(dm) };
	rc = run(mkimage("oci-both.tar", both, SBX_ARRAY_LEN(both)), &lim, &cfg, &err);
	ok(rc == 0 && !strcmp(cfg.format, "oci") && content("usr/bin/tool", "tool"),
	   "OCI layout with a docker manifest.json too: read as OCI");
	sbx_rootfs_config_free(&cfg);

	c2[z2 / 2] ^= 0x40;
	refused(mkimage("oci-bad.tar", v, SBX_ARRAY_LEN(v)), 3, "layer 2", "OCI layout: a tampered layer blob");
	ok(root_empty(), "OCI layout: a tampered blob changes nothing");
	c2[z2 / 2] ^= 0x40;
	man[10] = ' ';
	refused(mkimage("oci-man.tar", v, SBX_ARRAY_LEN(v)), 3, "(tampered?)", "OCI layout: a tampered manifest");
	free(c1);
	free(c2);
}

int main(void)
{
	snprintf(base, sizeof base, "%s/test-rootfs.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(base))
		return 1;
	char cmd[300];
	snprintf(cmd, sizeof cmd, "mkdir %s/in", base);
	if (system(cmd))
		return 1;
	test_plain(0, "plain tar");
	test_plain('g', "tar.gz");
	test_plain('z', "tar.zst");
	test_plain('x', "tar.xz");
	test_hostile();
	test_drop_strip();
	test_bombs();
	test_docker();
	test_oci();
	snprintf(cmd, sizeof cmd, "rm -rf %s", base);
	if (system(cmd))
		return 1;
	return tap_done();
}
