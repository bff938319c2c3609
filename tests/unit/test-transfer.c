/* Unit tests for sbx-cp's stream checker and guest path rules (TAP).  The
 * hostile streams a guest could send are built here byte for byte with
 * libarchive and fed to the same function the download path uses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <archive.h>
#include <archive_entry.h>

#include "transfer.h"

#include "tap.h"

/* One entry: type 'f' file, 'd' dir, 'l' symlink, 'h' hard link, 'c' char
 * device, 'p' FIFO, 's' socket; arg is the link target or file content. */
struct ent {
	char type;
	const char *name, *arg;
	unsigned mode;
};

static char buf[1 << 20];
static size_t used;

static void build(const struct ent *e, size_t ne)
{
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	archive_write_set_bytes_per_block(a, 512);
	archive_write_open_memory(a, buf, sizeof buf, &used);
	for (size_t i = 0; i < ne; i++) {
		struct archive_entry *x = archive_entry_new();
		archive_entry_set_pathname(x, e[i].name);
		archive_entry_set_perm(x, e[i].mode ? e[i].mode : 0644);
		switch (e[i].type) {
		case 'f':
			archive_entry_set_filetype(x, AE_IFREG);
			archive_entry_set_size(x, e[i].arg ? (int64_t)strlen(e[i].arg) : 0);
			break;
		case 'd': archive_entry_set_filetype(x, AE_IFDIR); break;
		case 'l':
			archive_entry_set_filetype(x, AE_IFLNK);
			archive_entry_set_symlink(x, e[i].arg);
			break;
		case 'h':
			archive_entry_set_filetype(x, AE_IFREG);
			archive_entry_set_hardlink(x, e[i].arg);
			break;
		case 'c':
			archive_entry_set_filetype(x, AE_IFCHR);
			archive_entry_set_rdev(x, 0x0501);
			break;
		case 'p': archive_entry_set_filetype(x, AE_IFIFO); break;
		case 's': archive_entry_set_filetype(x, AE_IFSOCK); break;
		}
		archive_write_header(a, x);
		if (e[i].type == 'f' && e[i].arg)
			archive_write_data(a, e[i].arg, strlen(e[i].arg));
		archive_entry_free(x);
	}
	archive_write_close(a);
	archive_write_free(a);
}

/* Check the stream in buf[0..len) under rules; returns the filter's result
 * and leaves the message in err. */
static int check(const struct sbx_tar_rules *r, size_t len, struct sbx_err *err, struct sbx_tar_totals *t)
{
	struct sbx_tar_check *c = sbx_tar_check_new(r);
	struct archive *in = archive_read_new();
	archive_read_support_format_tar(in);
	archive_read_open_memory(in, buf, len);
	memset(err, 0, sizeof *err);
	int rc = sbx_tar_filter(c, in, NULL, err);
	if (t)
		sbx_tar_check_totals(c, t);
	archive_read_free(in);
	sbx_tar_check_free(c);
	return rc;
}

static const struct sbx_tar_rules up = { .max_bytes = 1 << 20 };
static const struct sbx_tar_rules down = { .max_bytes = 1 << 20, .top = "tree", .host_modes = 1 };

#define REFUSED(rules, what, ...)                                                                                      \
	do {                                                                                                           \
		const struct ent e_[] = { __VA_ARGS__ };                                                               \
		build(e_, sizeof e_ / sizeof e_[0]);                                                                   \
		struct sbx_err err_;                                                                                   \
		int rc_ = check(&(rules), used, &err_, NULL);                                                          \
		ok(rc_ < 0 && err_.code == SBX_EXIT_INVALID, what);                                                    \
		if (rc_ == 0 || err_.code != SBX_EXIT_INVALID)                                                         \
			printf("#   rc %d code %d: %s\n", rc_, err_.code, err_.msg);                                   \
	} while (0)
#define ACCEPTED(rules, what, ...)                                                                                     \
	do {                                                                                                           \
		const struct ent e_[] = { __VA_ARGS__ };                                                               \
		build(e_, sizeof e_ / sizeof e_[0]);                                                                   \
		struct sbx_err err_;                                                                                   \
		int rc_ = check(&(rules), used, &err_, NULL);                                                          \
		ok(rc_ == 0, what);                                                                                    \
		if (rc_)                                                                                               \
			printf("#   %s\n", err_.msg);                                                                  \
	} while (0)

static void streams(void)
{
	struct sbx_err err;
	struct sbx_tar_totals t;
	const struct ent tree[] = { { 'd', "tree/", 0, 0755 },      { 'f', "tree/a", "hello", 04755 },
				    { 'd', "tree/sub", 0, 0 },      { 'l', "tree/sub/l", "../a", 0 },
				    { 'h', "tree/b", "tree/a", 0 }, { 'f', "./tree/sub/c", "", 0 } };
	build(tree, 6);
	ok(check(&down, used, &err, &t) == 0, "a plain tree is accepted");
	ok(t.files == 2 && t.dirs == 2 && t.symlinks == 1 && t.hardlinks == 1 && t.bytes == 5, "and counted");

	ACCEPTED(up, "'./' (tar -C dir -c .) is skipped", { 'd', "./", 0, 0 }, { 'f', "./x", "1", 0 });
	REFUSED(up, "../x refused", { 'f', "../x", "evil", 0 });
	REFUSED(up, "a/../../x refused", { 'f', "a/../../x", "evil", 0 });
	REFUSED(up, "/etc/x refused", { 'f', "/etc/x", "evil", 0 });
	REFUSED(up, "symlink to an absolute path refused", { 'l', "a", "/etc", 0 });
	REFUSED(up, "symlink-then-file refused", { 'l', "a", "sub", 0 }, { 'f', "a/passwd", "evil", 0 });
	REFUSED(up, "symlink-then-dir refused", { 'l', "a", ".", 0 }, { 'd', "a/d", 0, 0 });
	REFUSED(up, "symlink escaping the destination refused", { 'l', "d/l", "../../x", 0 });
	ACCEPTED(up, "symlink up to the destination accepted", { 'l', "d/l", "../x", 0 });
	REFUSED(up, "'..' after a name in a target refused (d/l -> .., x -> d/l/..)", { 'l', "d/l", "..", 0 },
		{ 'l', "x", "d/l/..", 0 });
	REFUSED(down, "download: a symlink out of the copied tree refused", { 'd', "tree", 0, 0 },
		{ 'l', "tree/l", "../sibling", 0 });
	REFUSED(down, "download: the top being a symlink refused", { 'l', "tree", "x", 0 });
	REFUSED(down, "download: a second top-level name refused", { 'd', "tree", 0, 0 }, { 'f', "other", "x", 0 });
	REFUSED(up, "hard link out refused", { 'h', "x", "../../etc/passwd", 0 });
	REFUSED(up, "hard link to an absolute path refused", { 'h', "x", "/etc/passwd", 0 });
	REFUSED(up, "hard link to a name not seen yet refused", { 'h', "x", "y", 0 }, { 'f', "y", "1", 0 });
	REFUSED(up, "hard link to a symlink refused", { 'l', "y", "z", 0 }, { 'h', "x", "y", 0 });
	REFUSED(up, "character device refused", { 'c', "dev", 0, 0 });
	REFUSED(up, "FIFO refused", { 'p', "fifo", 0, 0 });
	/* tar writers cannot store sockets; a forged header could */
	struct sbx_tar_check *sc = sbx_tar_check_new(&up);
	struct archive_entry *sock = archive_entry_new(), *out;
	archive_entry_set_pathname(sock, "sock");
	archive_entry_set_filetype(sock, AE_IFSOCK);
	ok(sbx_tar_check_entry(sc, sock, &out, &err) < 0 && strstr(err.msg, "socket"), "socket refused");
	archive_entry_free(sock);
	sbx_tar_check_free(sc);
	REFUSED(up, "a name twice refused (file then symlink)", { 'f', "x", "1", 0 }, { 'l', "x", "y", 0 });
	REFUSED(up, "a directory replaced by a symlink refused", { 'f', "d/x", "1", 0 }, { 'l', "d", ".", 0 });
	ACCEPTED(up, "a directory named twice accepted", { 'd', "d", 0, 0 }, { 'f', "d/x", "1", 0 },
		 { 'd', "d/", 0, 0 });
	REFUSED(up, "a path through a file refused", { 'f', "x", "1", 0 }, { 'f', "x/y", "1", 0 });

	char longname[5000];
	memset(longname, 'a', sizeof longname - 1);
	longname[sizeof longname - 1] = 0;
	REFUSED(up, "a name of 4999 bytes refused", { 'f', longname, "1", 0 });
	longname[256] = 0;
	REFUSED(up, "a component of 256 bytes refused", { 'f', longname, "1", 0 });

	struct sbx_tar_rules small = up;
	small.max_bytes = 10;
	REFUSED(small, "more than max_bytes refused", { 'f', "a", "123456", 0 }, { 'f', "b", "123456", 0 });
	ACCEPTED(small, "exactly max_bytes accepted", { 'f', "a", "12345", 0 }, { 'f', "b", "12345", 0 });
	small = up;
	small.max_entries = 3;
	REFUSED(small, "more than max_entries refused", { 'f', "a", 0, 0 }, { 'f', "b", 0, 0 }, { 'f', "c", 0, 0 },
		{ 'f', "d", 0, 0 });

	/* setuid, setgid and sticky bits are stripped, owner made usable */
	const struct ent suid[] = { { 'f', "x", "1", 07644 }, { 'd', "d", 0, 01000 } };
	build(suid, 2);
	struct sbx_tar_check *c = sbx_tar_check_new(&up);
	struct archive *in = archive_read_new();
	archive_read_support_format_tar(in);
	archive_read_open_memory(in, buf, used);
	struct archive_entry *raw, *clean;
	archive_read_next_header(in, &raw);
	ok(sbx_tar_check_entry(c, raw, &clean, &err) == 1 && archive_entry_perm(clean) == 0644,
	   "setuid/setgid/sticky stripped from a file");
	archive_entry_free(clean);
	archive_read_next_header(in, &raw);
	ok(sbx_tar_check_entry(c, raw, &clean, &err) == 1 && archive_entry_perm(clean) == 0700,
	   "sticky stripped from a directory, owner rwx");
	archive_entry_free(clean);
	archive_read_free(in);
	sbx_tar_check_free(c);

	/* garbage and cut streams */
	memset(buf, 'x', 2048);
	ok(check(&up, 2048, &err, NULL) < 0 && err.code == SBX_EXIT_INVALID, "garbage refused");
	const struct ent one[] = { { 'f', "a", "0123456789", 0 } };
	build(one, 1);
	ok(check(&up, 520, &err, NULL) < 0 && err.code == SBX_EXIT_INVALID, "a cut stream refused");
	check(&up, 0, &err, NULL);
	ok(1, "an empty stream does not crash");
}

static void many_entries(void)
{
	/* 100,001 entries: refused at the last one, under the default cap */
	struct archive *a = archive_write_new();
	size_t cap = 110 * 1024 * 1024, len = 0;
	char *big = malloc(cap);
	archive_write_set_format_ustar(a);
	archive_write_open_memory(a, big, cap, &len);
	for (unsigned i = 0; i <= SBX_XFER_ENTRIES_MAX; i++) {
		char name[32];
		snprintf(name, sizeof name, "d%u/f%u", i / 1000, i);
		struct archive_entry *x = archive_entry_new();
		archive_entry_set_pathname(x, name);
		archive_entry_set_filetype(x, AE_IFREG);
		archive_entry_set_perm(x, 0644);
		archive_entry_set_size(x, 0);
		archive_write_header(a, x);
		archive_entry_free(x);
	}
	archive_write_close(a);
	archive_write_free(a);
	struct sbx_tar_check *c = sbx_tar_check_new(&up);
	struct archive *in = archive_read_new();
	archive_read_support_format_tar(in);
	archive_read_open_memory(in, big, len);
	struct sbx_err err = { 0 };
	int rc = sbx_tar_filter(c, in, NULL, &err);
	struct sbx_tar_totals t;
	sbx_tar_check_totals(c, &t);
	ok(rc < 0 && err.code == SBX_EXIT_INVALID && t.files == SBX_XFER_ENTRIES_MAX && strstr(err.msg, "100000"),
	   "100,001 entries refused at the last");
	archive_read_free(in);
	sbx_tar_check_free(c);
	free(big);
}

static void paths(void)
{
	struct sbx_err err;
	ok(sbx_xfer_guest_path_check("/workspace/a", "x", &err) == 0, "/workspace/a is a guest path");
	ok(sbx_xfer_guest_path_check("/", "x", &err) == 0, "/ is a guest path");
	ok(sbx_xfer_guest_path_check("workspace", "x", &err) < 0, "relative refused");
	ok(sbx_xfer_guest_path_check("/workspace/../etc", "x", &err) < 0, ".. refused");
	ok(sbx_xfer_guest_path_check("/workspace//a", "x", &err) < 0, "// refused");
	ok(sbx_xfer_guest_path_check("/workspace/./a", "x", &err) < 0, ". refused");
	ok(sbx_xfer_guest_path_check("/workspace/", "x", &err) < 0, "trailing / refused");
	struct sbx_limit_paths w = { .path = { "/workspace", "/tmp" }, .n = 2 };
	ok(sbx_xfer_path_under("/workspace", &w) && sbx_xfer_path_under("/tmp/x/y", &w), "under a prefix");
	ok(!sbx_xfer_path_under("/workspacex", &w) && !sbx_xfer_path_under("/etc", &w), "not under a prefix");
	struct sbx_limit_paths root = { .path = { "/" }, .n = 1 };
	ok(sbx_xfer_path_under("/etc", &root), "/ allows all");
}

int main(void)
{
	streams();
	many_entries();
	paths();
	printf("1..%d\n", n);
	return failed != 0;
}
