/* Unit tests for the apt route's metadata parsers (proxy/aptidx.h, TAP):
 * Release texts as a suite's InRelease signs them, and Packages indexes
 * plain and compressed, the compressed ones written here with
 * libarchive's filters. */
#include <archive.h>
#include <archive_entry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "aptidx.h"

#include "tap.h"

/* 64 hex digits, all c. */
static const char *hex64(char c)
{
	static char b[8][65];
	static int k;
	char *s = b[k++ % 8];
	memset(s, c, 64);
	s[64] = 0;
	return s;
}

static int sha_is(const uint8_t sha[32], char c)
{
	uint8_t want[32];
	int v = c <= '9' ? c - '0' : c - 'a' + 10;
	memset(want, v << 4 | v, 32);
	return !memcmp(sha, want, 32);
}

/* A Release as Debian's are laid out: MD5Sum and SHA256 lists, sizes
 * padded, a root-level file, by-hash. */
static char *release_text(const char *extra_field, const char *extra_line)
{
	static char b[4096];
	snprintf(b, sizeof b,
		 "Origin: Debian\n"
		 "Label: Debian\n"
		 "Suite: stable\n"
		 "Version: 12.6\n"
		 "Codename: bookworm\n"
		 "Changelogs: https://metadata.ftp-master.debian.org/changelogs/@CHANGEPATH@_changelog\n"
		 "Date: Sat, 10 Aug 2024 09:32:04 UTC\n"
		 "Valid-Until: Sat, 17 Aug 2024 09:32:04 UTC\n"
		 "Acquire-By-Hash: yes\n"
		 "No-Support-for-Architecture-all: Packages\n"
		 "Architectures: all amd64 arm64\n"
		 "Components: main contrib\n"
		 "Description: Debian 12.6 Released 29 June 2024\n"
		 "%s"
		 "MD5Sum:\n"
		 " 0123456789abcdef0123456789abcdef   738242 contrib/Contents-all\n"
		 " 0123456789abcdef0123456789abcdef       20 main/only-in-md5\n"
		 "SHA256:\n"
		 " %s   738242 contrib/Contents-all\n"
		 " %s    57319 Contents-amd64.gz\n"
		 " %s  8788440 main/binary-amd64/Packages.xz\n"
		 " %s 12345678 main/binary-amd64/Packages.gz\n"
		 " %s      118 main/binary-amd64/Release\n"
		 " %s  9000000 main/binary-arm64/Packages.xz\n"
		 " %s   123456 main/i18n/Translation-en.bz2\n"
		 "%s",
		 extra_field, hex64('1'), hex64('2'), hex64('a'), hex64('b'), hex64('c'), hex64('d'), hex64('e'),
		 extra_line);
	return b;
}

static int rel_parse(const char *text, struct sbx_apt_release *r, char *why, size_t wn)
{
	return sbx_apt_release_parse(text, strlen(text), r, why, wn);
}

static void test_release(void)
{
	char why[300];
	struct sbx_apt_release r;
	int rc = rel_parse(release_text("", ""), &r, why, sizeof why);
	ok(rc == 0 && !strcmp(r.suite, "stable") && !strcmp(r.codename, "bookworm") && r.by_hash == 1,
	   "a Release as Debian's: suite, codename, Acquire-By-Hash");
	if (rc)
		printf("# %s\n", why);
	ok(r.date == 1723282324 && r.valid_until == 1723887124, "Date and Valid-Until in seconds since the epoch");
	ok(r.nfiles == 7, "only the SHA256 list's files");
	const struct sbx_apt_relfile *f = sbx_apt_release_find(&r, "main/binary-amd64/Packages.xz");
	ok(f && f->size == 8788440 && sha_is(f->sha256, 'a'), "find: a file's size and hash");
	ok(!sbx_apt_release_find(&r, "main/binary-amd64/Packages") && !sbx_apt_release_find(&r, "main/only-in-md5"),
	   "find: a file not listed, or listed in MD5Sum only");
	char p[200];
	snprintf(p, sizeof p, "main/binary-amd64/by-hash/SHA256/%s", hex64('b'));
	f = sbx_apt_release_by_hash(&r, p);
	ok(f && !strcmp(f->path, "main/binary-amd64/Packages.gz"), "by-hash: the file of that hash in that directory");
	snprintf(p, sizeof p, "main/binary-arm64/by-hash/SHA256/%s", hex64('b'));
	ok(!sbx_apt_release_by_hash(&r, p), "by-hash: a hash of another directory's file");
	snprintf(p, sizeof p, "main/by-hash/SHA256/%s", hex64('a'));
	ok(!sbx_apt_release_by_hash(&r, p), "by-hash: not from a subdirectory");
	snprintf(p, sizeof p, "by-hash/SHA256/%s", hex64('2'));
	f = sbx_apt_release_by_hash(&r, p);
	ok(f && !strcmp(f->path, "Contents-amd64.gz"), "by-hash at the suite's top");
	snprintf(p, sizeof p, "main/binary-amd64/by-hash/SHA256/%s", hex64('B'));
	const struct sbx_apt_relfile *upper = sbx_apt_release_by_hash(&r, p);
	snprintf(p, sizeof p, "main/binary-amd64/by-hash/SHA512/%s", hex64('b'));
	const struct sbx_apt_relfile *sha512 = sbx_apt_release_by_hash(&r, p);
	snprintf(p, sizeof p, "main/binary-amd64/by-hash/SHA256/%.63s", hex64('b'));
	const struct sbx_apt_relfile *shorter = sbx_apt_release_by_hash(&r, p);
	snprintf(p, sizeof p, "main/binary-amd64/xby-hash/SHA256/%s", hex64('b'));
	const struct sbx_apt_relfile *glued = sbx_apt_release_by_hash(&r, p);
	snprintf(p, sizeof p, "main/../main/binary-amd64/by-hash/SHA256/%s", hex64('b'));
	const struct sbx_apt_relfile *climb = sbx_apt_release_by_hash(&r, p);
	ok(!upper && !sha512 && !shorter && !glued && !climb,
	   "by-hash: NULL for upper-case hex, SHA512, a short hash, other forms, a climbing DIR");
	sbx_apt_release_free(&r);

	/* The same path twice, saying the same: one entry. */
	char line[200];
	snprintf(line, sizeof line, " %s      118 main/binary-amd64/Release\n", hex64('c'));
	rc = rel_parse(release_text("", line), &r, why, sizeof why);
	ok(rc == 0 && r.nfiles == 7, "the same path twice, alike: one entry");
	sbx_apt_release_free(&r);

	struct {
		const char *field, *line, *want, *what;
	} bad[] = {
		{ "suite: testing\n", "", "twice", "a field twice (names compared case-insensitively)" },
		{ "", "  0123 5 main/x\n", "SHA-256", "a hash that is not 64 hex digits" },
		{ "", NULL, "..", "a path with a .. component" },
		{ "", NULL, "leading /", "a path with a leading /" },
		{ "", NULL, "empty component", "a path with an empty component" },
		{ "", NULL, "printable ASCII", "a path with a byte outside printable ASCII" },
		{ "", NULL, "twice, differently", "the same path twice with different hashes" },
		{ "", NULL, "not a size", "a size past 64 bits" },
		{ "", NULL, "hash, a size and a path", "a line of the list without its path" },
		{ "# a comment\n", "", "comment", "a comment line" },
		{ "", "\nSuite: other\n", "second stanza", "a second stanza" },
		{ "Nofield\n", "", "neither a field", "a line that is no field" },
	};
	const char *lines[] = {
		NULL,
		NULL,
		"main/../../etc/passwd",
		"/etc/passwd",
		"main//Packages",
		"main/P\xc3\xa4"
		"ckages",
		NULL,
		NULL,
		NULL,
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (!bad[i].line) {
			if (i < sizeof lines / sizeof lines[0] && lines[i])
				snprintf(line, sizeof line, " %s 5 %s\n", hex64('f'), lines[i]);
			else if (strstr(bad[i].want, "differently"))
				snprintf(line, sizeof line, " %s 118 main/binary-amd64/Release\n", hex64('f'));
			else if (!strcmp(bad[i].want, "not a size"))
				snprintf(line, sizeof line, " %s 18446744073709551616 main/x\n", hex64('f'));
			else
				snprintf(line, sizeof line, " %s 5\n", hex64('f'));
		}
		memset(&r, 0x55, sizeof r);
		rc = rel_parse(release_text(bad[i].field, bad[i].line ? bad[i].line : line), &r, why, sizeof why);
		int good = rc == -1 && strstr(why, bad[i].want) && !r.files && !r.nfiles;
		if (!good)
			printf("# rc %d: %s\n", rc, why);
		ok(good, bad[i].what);
	}

	struct {
		const char *field, *want, *what;
	} single[] = {
		{ "Acquire-By-Hash: maybe", "neither yes nor no", "Acquire-By-Hash neither yes nor no" },
		{ "Codename: a b", "63 printable", "a Codename with a blank" },
		{ "Suite: 0123456789012345678901234567890123456789012345678901234567890123", "63 printable",
		  "a Suite of 64 characters" },
		{ "Date: Sat, 10 Aug 2024\n 09:32:04 UTC", "more than one line", "a Date on two lines" },
	};
	char text[300];
	for (size_t i = 0; i < sizeof single / sizeof single[0]; i++) {
		snprintf(text, sizeof text, "%s\nSHA256:\n %s 5 main/x\n", single[i].field, hex64('a'));
		rc = rel_parse(text, &r, why, sizeof why);
		ok(rc == -1 && strstr(why, single[i].want), single[i].what);
		if (rc == 0)
			sbx_apt_release_free(&r);
	}
	const char *nosha = "Suite: stable\nMD5Sum:\n 0123456789abcdef0123456789abcdef 5 main/x\n";
	ok(rel_parse(nosha, &r, why, sizeof why) == -1 && strstr(why, "no SHA256"), "no SHA256 field at all");
	snprintf(text, sizeof text, "SHA256: %s 5 main/x\n", hex64('a'));
	ok(rel_parse(text, &r, why, sizeof why) == -1, "a SHA256 list starting on the field's line");
	snprintf(text, sizeof text, "SHA256:\r\n %s 5 main/x\r\n", hex64('a'));
	ok(rel_parse(text, &r, why, sizeof why) == -1 && strstr(why, "carriage return"), "CRLF line ends");
	snprintf(text, sizeof text, " Suite: x\nSHA256:\n %s 5 main/x\n", hex64('a'));
	ok(rel_parse(text, &r, why, sizeof why) == -1 && strstr(why, "before any field"),
	   "a continuation line before any field");
	snprintf(text, sizeof text, "\n\nSHA256:\n %s 5 main/x\n\t%s 6 main/y\n\n \n", hex64('a'), hex64('b'));
	rc = rel_parse(text, &r, why, sizeof why);
	ok(rc == 0 && r.nfiles == 2 && !r.suite[0] && !r.date && !r.by_hash,
	   "blank lines around the stanza, a tab-indented line; absent fields empty");
	sbx_apt_release_free(&r);
	ok(rel_parse("", &r, why, sizeof why) == -1, "an empty text");

	struct {
		const char *date;
		long long want; /* -1: refused */
	} dates[] = {
		{ "Sat, 10 Aug 2024 09:32:04 UTC", 1723282324 },
		{ "Sat, 10 Aug 2024 09:32:04 GMT", 1723282324 },
		{ "Sat, 10 Aug 2024 09:32:04 +0000", 1723282324 },
		{ "10 Aug 2024 09:32:04 UTC", 1723282324 },
		{ "Sat, 1 Jan 2000 00:00:00 UTC", 946684800 },
		{ "Sat, 10 Aug 2024 09:32:04 +0200", -1 },
		{ "Fri, 30 Feb 2024 09:32:04 UTC", -1 },
		{ "Thu, 29 Feb 2023 09:32:04 UTC", -1 },
		{ "Sat, 10 Aug 2024 9:32:04 UTC", -1 },
		{ "Sat, 10 Aug 2024 24:00:00 UTC", -1 },
		{ "Xyz, 10 Aug 2024 09:32:04 UTC", -1 },
		{ "2024-08-10T09:32:04Z", -1 },
	};
	int dates_ok = 1;
	for (size_t i = 0; i < sizeof dates / sizeof dates[0]; i++) {
		snprintf(text, sizeof text, "Date: %s\nSHA256:\n %s 5 main/x\n", dates[i].date, hex64('a'));
		rc = rel_parse(text, &r, why, sizeof why);
		if (dates[i].want < 0 ? rc != -1 : rc != 0 || r.date != dates[i].want) {
			printf("# %s: rc %d date %lld\n", dates[i].date, rc, (long long)r.date);
			dates_ok = 0;
		}
		sbx_apt_release_free(&r);
	}
	ok(dates_ok, "dates: UTC, GMT, +0000, no weekday; other zones, impossible days and other forms refused");
}

/* A Packages stanza. */
static void stanza(char *b, size_t cap, const char *pkg, const char *ver, const char *file, char hex)
{
	size_t l = strlen(b);
	snprintf(b + l, cap - l,
		 "Package: %s\n"
		 "Source: %s\n"
		 "Version: %s\n"
		 "Installed-Size: 1234\n"
		 "Maintainer: Jane Doe <jane@example.org>\n"
		 "Architecture: amd64\n"
		 "Depends: libc6 (>= 2.34),\n"
		 " libfoo1 (>= 1.0)\n"
		 "Description: a package\n"
		 " with a long description\n"
		 " .\n"
		 " over several lines.\n"
		 "Filename: %s\n"
		 "Size: 4321\n"
		 "MD5sum: 0123456789abcdef0123456789abcdef\n"
		 "SHA256: %s\n"
		 "\n",
		 pkg, pkg, ver, file, hex64(hex));
}

/* buf compressed with the filter (ARCHIVE_FILTER_*) into a malloc'd
 * buffer. */
static void *squeeze(const void *buf, size_t len, int filter, size_t *out)
{
	size_t cap = len + 65536;
	char *o = malloc(cap);
	struct archive *a = archive_write_new();
	archive_write_add_filter(a, filter);
	archive_write_set_format_raw(a);
	archive_write_set_bytes_in_last_block(a, 1);
	archive_write_open_memory(a, o, cap, out);
	struct archive_entry *e = archive_entry_new();
	archive_entry_set_pathname(e, "Packages");
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_size(e, (la_int64_t)len);
	archive_write_header(a, e);
	archive_write_data(a, buf, len);
	archive_entry_free(e);
	archive_write_close(a);
	archive_write_free(a);
	return o;
}

static int add(struct sbx_apt_debmap **m, const char *text, int filter, char *why, size_t wn)
{
	if (filter == ARCHIVE_FILTER_NONE)
		return sbx_apt_debmap_add_mem(m, text, strlen(text), why, wn);
	size_t zn;
	void *z = squeeze(text, strlen(text), filter, &zn);
	int rc = sbx_apt_debmap_add_mem(m, z, zn, why, wn);
	free(z);
	return rc;
}

static void test_packages(void)
{
	char why[300], idx[8192] = "";
	stanza(idx, sizeof idx, "jq", "1.6-2.1", "pool/main/j/jq/jq_1.6-2.1_amd64.deb", '1');
	stanza(idx, sizeof idx, "libjq1", "1:1.6-2.1+deb12u1~b1", "pool/main/j/jq/libjq1_1.6-2.1_amd64.deb", '2');
	stanza(idx, sizeof idx, "g++-12", "12.2.0-14", "pool/main/g/gcc-12/g++-12_12.2.0-14_amd64.deb", '3');

	static const struct {
		int filter;
		const char *name;
	} filters[] = { { ARCHIVE_FILTER_NONE, "plain" },
			{ ARCHIVE_FILTER_GZIP, "gzip" },
			{ ARCHIVE_FILTER_XZ, "xz" },
			{ ARCHIVE_FILTER_BZIP2, "bzip2" },
			{ ARCHIVE_FILTER_ZSTD, "zstd" } };
	for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++) {
		struct sbx_apt_debmap *m = NULL;
		int rc = add(&m, idx, filters[i].filter, why, sizeof why);
		const struct sbx_apt_deb *d = sbx_apt_debmap_find(m, "pool/main/j/jq/libjq1_1.6-2.1_amd64.deb");
		char what[100];
		snprintf(what, sizeof what, "a Packages index, %s: every stanza, its fields", filters[i].name);
		ok(rc == 0 && sbx_apt_debmap_count(m) == 3 && d && !strcmp(d->package, "libjq1") &&
			   !strcmp(d->version, "1:1.6-2.1+deb12u1~b1") && !strcmp(d->arch, "amd64") &&
			   d->size == 4321 && sha_is(d->sha256, '2'),
		   what);
		if (rc)
			printf("# %s\n", why);
		sbx_apt_debmap_free(m);
	}

	struct sbx_apt_debmap *m = NULL;
	ok(add(&m, idx, ARCHIVE_FILTER_XZ, why, sizeof why) == 0 &&
		   add(&m, idx, ARCHIVE_FILTER_NONE, why, sizeof why) == 0 && sbx_apt_debmap_count(m) == 3,
	   "the same index added twice: the same map");
	ok(!sbx_apt_debmap_find(m, "pool/main/j/jq/jq_1.6-2.1_amd64.de") &&
		   !sbx_apt_debmap_find(m, "pool/main/j/jq/jq_1.6-2.1_amd64.deb/") &&
		   sbx_apt_debmap_find(m, "pool/main/g/gcc-12/g++-12_12.2.0-14_amd64.deb"),
	   "find: hits and misses");

	char other[8192] = "";
	stanza(other, sizeof other, "zz", "1", "pool/main/z/zz/zz_1_all.deb", '4');
	stanza(other, sizeof other, "aa", "1", "pool/main/a/aa/aa_1_all.deb", '5');
	stanza(other, sizeof other, "jq", "1.6-2.1", "pool/main/j/jq/jq_1.6-2.1_amd64.deb", '1');
	ok(add(&m, other, ARCHIVE_FILTER_GZIP, why, sizeof why) == 0 && sbx_apt_debmap_count(m) == 5 &&
		   sbx_apt_debmap_find(m, "pool/main/a/aa/aa_1_all.deb") &&
		   sbx_apt_debmap_find(m, "pool/main/z/zz/zz_1_all.deb"),
	   "a second index into the same map: the union");

	/* New entries first, then one that contradicts the map. */
	char clash[8192] = "";
	stanza(clash, sizeof clash, "new", "1", "pool/main/n/new/new_1_all.deb", '6');
	stanza(clash, sizeof clash, "jq", "1.6-2.1", "pool/main/j/jq/jq_1.6-2.1_amd64.deb", '7');
	struct sbx_apt_debmap *before = m;
	ok(add(&m, clash, ARCHIVE_FILTER_NONE, why, sizeof why) == -1 && strstr(why, "twice, differently") &&
		   m == before && sbx_apt_debmap_count(m) == 5 &&
		   !sbx_apt_debmap_find(m, "pool/main/n/new/new_1_all.deb") &&
		   sha_is(sbx_apt_debmap_find(m, "pool/main/j/jq/jq_1.6-2.1_amd64.deb")->sha256, '1'),
	   "an index contradicting the map: refused, nothing of it added");
	char late[8192] = "";
	stanza(late, sizeof late, "new", "1", "pool/main/n/new/new_1_all.deb", '6');
	strcat(late, "Package: broken\n");
	ok(add(&m, late, ARCHIVE_FILTER_XZ, why, sizeof why) == -1 && sbx_apt_debmap_count(m) == 5 &&
		   !sbx_apt_debmap_find(m, "pool/main/n/new/new_1_all.deb"),
	   "an index malformed at its end: nothing of it added");
	sbx_apt_debmap_free(m);

	m = NULL;
	ok(add(&m, clash, ARCHIVE_FILTER_NONE, why, sizeof why) == 0 &&
		   add(&m, idx, ARCHIVE_FILTER_NONE, why, sizeof why) == -1 && sbx_apt_debmap_count(m) == 2,
	   "the other way round: refused too");
	sbx_apt_debmap_free(m);

	char dup[8192] = "";
	stanza(dup, sizeof dup, "a1", "1", "pool/x/a1.deb", '1');
	stanza(dup, sizeof dup, "a1", "1", "pool/x/a1.deb", '1');
	m = NULL;
	ok(add(&m, dup, ARCHIVE_FILTER_NONE, why, sizeof why) == 0 && sbx_apt_debmap_count(m) == 1,
	   "identical stanzas in one index: one entry");
	sbx_apt_debmap_free(m);
	stanza(dup, sizeof dup, "a1", "2", "pool/x/a1.deb", '1');
	m = NULL;
	ok(add(&m, dup, ARCHIVE_FILTER_NONE, why, sizeof why) == -1 && !m && strstr(why, "pool/x/a1.deb"),
	   "a Filename twice in one index, with another version: refused, no map made");

	m = NULL;
	ok(sbx_apt_debmap_add_mem(&m, "", 0, why, sizeof why) == 0 && m && sbx_apt_debmap_count(m) == 0 &&
		   !sbx_apt_debmap_find(m, "x") && add(&m, "", ARCHIVE_FILTER_GZIP, why, sizeof why) == 0 &&
		   add(&m, "\n\n  \n", ARCHIVE_FILTER_XZ, why, sizeof why) == 0 && sbx_apt_debmap_count(m) == 0,
	   "an empty index (plain, gzip'd, blank lines): an empty map");
	sbx_apt_debmap_free(m);
	ok(!sbx_apt_debmap_find(NULL, "x") && sbx_apt_debmap_count(NULL) == 0, "no map: finds nothing");

	/* Stanzas broken one field at a time. */
	static const struct {
		const char *from, *to, *want, *what;
	} breaks[] = {
		{ "Filename: pool/main/j/jq/jq_1.6-2.1_amd64.deb\n", "", "without Filename",
		  "a stanza without Filename" },
		{ "SHA256: 1111", "SHA512: 1111", "without SHA256", "a stanza without SHA256" },
		{ "Size: 4321\n", "", "without Size", "a stanza without Size" },
		{ "pool/main/j/jq/jq_1", "../../etc/jq_1", "..", "a Filename climbing out" },
		{ "pool/main/j/jq/jq_1", "/etc/jq_1", "leading /", "a Filename with a leading /" },
		{ "pool/main/j/jq/jq_1", "pool//j/jq_1", "empty component", "a Filename with //" },
		{ "pool/main/j/jq/jq_1", "pool/main/j/jq/./jq_1", ". component", "a Filename with a . component" },
		{ "pool/main/j/jq/jq_1", "pool/main/j/jq/\033[2Jjq_1", "printable ASCII",
		  "a Filename with a control character" },
		{ "pool/main/j/jq/jq_1", "pool/main/j/jq/jq 1", "printable ASCII", "a Filename with a space" },
		{ "Package: jq\n", "Package: JQ\n", "package name", "an upper-case package name" },
		{ "Package: jq\n", "Package: j\n", "package name", "a one-letter package name" },
		{ "Version: 1.6-2.1\n", "Version: 1.6 2.1\n", "Version", "a version with a blank" },
		{ "Version: 1.6-2.1\n", "Version: 1.6_2.1\n", "Version", "a version with an underscore" },
		{ "Size: 4321\n", "Size: 43x1\n", "Size", "a size that is no number" },
		{ "Size: 4321\n", "Size: -1\n", "Size", "a negative size" },
		{ "SHA256: 1111", "SHA256: 111", "SHA256", "a short hash" },
		{ "SHA256: 1111", "SHA256: g111", "SHA256", "a hash that is not hex" },
		{ "Size: 4321\n", "Size: 4321\nsize: 4321\n", "twice", "a field twice" },
		{ "Filename: pool", "Filename:\n pool", "more than one line", "a Filename on a continuation line" },
		{ "Size: 4321\n", "Size: 4321\n#Size: 1\n", "comment", "a comment line" },
		{ "Size: 4321\n", "Size: 4321\0\n", "NUL", "a NUL byte" },
		{ "Architecture: amd64\n", "Architecture: AMD64\n", "Architecture", "an upper-case architecture" },
	};
	for (size_t i = 0; i < sizeof breaks / sizeof breaks[0]; i++) {
		char t[8192] = "";
		stanza(t, sizeof t, "jq", "1.6-2.1", "pool/main/j/jq/jq_1.6-2.1_amd64.deb", '1');
		char *at = strstr(t, breaks[i].from);
		size_t fl = strlen(breaks[i].from), tl = strlen(breaks[i].to), len = strlen(t);
		if (!strcmp(breaks[i].want, "NUL"))
			tl = fl + 1; /* the NUL is part of the replacement */
		memmove(at + tl, at + fl, len - (size_t)(at - t) - fl + 1);
		memcpy(at, breaks[i].to, tl);
		len = len - fl + tl;
		m = NULL;
		int rc = sbx_apt_debmap_add_mem(&m, t, len, why, sizeof why);
		int good = rc == -1 && !m && strstr(why, breaks[i].want);
		if (!good)
			printf("# rc %d: %s\n", rc, why);
		sbx_apt_debmap_free(m);
		ok(good, breaks[i].what);
	}

	/* The last stanza without its newline, stanzas apart by blank
	 * lines of spaces and tabs. */
#define LOOSE                                                                                                          \
	"Package: aa\nVersion: 1\nArchitecture: all\nFilename: a.deb\nSize: 1\nSHA256: %s\n"                           \
	" \t\n\n"                                                                                                      \
	"package: bb\nversion: 1\narchitecture: all\nfilename: b.deb\nsize: 2\nsha256: %s"
	char t[1024];
	snprintf(t, sizeof t, LOOSE, hex64('a'), hex64('b'));
	m = NULL;
	ok(sbx_apt_debmap_add_mem(&m, t, strlen(t), why, sizeof why) == 0 && sbx_apt_debmap_count(m) == 2 &&
		   sbx_apt_debmap_find(m, "b.deb") && sbx_apt_debmap_find(m, "b.deb")->size == 2,
	   "lower-case field names, blank lines of blanks, no final newline");
	sbx_apt_debmap_free(m);

	/* Bounds. */
	size_t big = SBX_APT_STANZA_MAX + 100;
	char *huge = malloc(big + 1024);
	memcpy(huge, "Package: aa\nDescription: x\n", 27);
	size_t hl = 27;
	while (hl < big) {
		memcpy(huge + hl, " xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n", 32);
		hl += 32;
	}
	hl += (size_t)sprintf(huge + hl, "Version: 1\nArchitecture: all\nFilename: a.deb\nSize: 1\nSHA256: %s\n",
			      hex64('a'));
	m = NULL;
	size_t zn;
	void *z = squeeze(huge, hl, ARCHIVE_FILTER_XZ, &zn);
	ok(sbx_apt_debmap_add_mem(&m, z, zn, why, sizeof why) == -1 && !m && strstr(why, "stanza longer than"),
	   "a stanza past SBX_APT_STANZA_MAX");
	free(z);
	free(huge);

	char many[16384] = "";
	for (int i = 0; i < 20; i++) {
		char name[40];
		snprintf(name, sizeof name, "pool/p%02d.deb", i);
		stanza(many, sizeof many, "pp", "1", name, 'c');
	}
	sbx_apt_debmap_set_bounds(4096, 0, 0);
	m = NULL;
	ok(add(&m, many, ARCHIVE_FILTER_XZ, why, sizeof why) == -1 && !m && strstr(why, "larger than 4096 bytes"),
	   "an index decompressing past the bound (set lower for the test)");
	sbx_apt_debmap_set_bounds(0, 19, 0);
	ok(add(&m, many, ARCHIVE_FILTER_GZIP, why, sizeof why) == -1 && !m && strstr(why, "more than 19 stanzas"),
	   "an index of more stanzas than the bound");
	sbx_apt_debmap_set_bounds(0, 20, 0);
	ok(add(&m, many, ARCHIVE_FILTER_GZIP, why, sizeof why) == 0 && sbx_apt_debmap_count(m) == 20,
	   "as many as the bound");
	sbx_apt_debmap_free(m);
	sbx_apt_debmap_set_bounds(0, 0, 0);

	/* From a file's current position. */
	int fd = memfd_create("idx", MFD_CLOEXEC);
	size_t xn;
	void *x = squeeze(idx, strlen(idx), ARCHIVE_FILTER_XZ, &xn);
	m = NULL;
	int wrote = write(fd, "junk", 4) == 4 && write(fd, x, xn) == (ssize_t)xn && lseek(fd, 4, SEEK_SET) == 4;
	ok(wrote && sbx_apt_debmap_add(&m, fd, why, sizeof why) == 0 && sbx_apt_debmap_count(m) == 3,
	   "from a file descriptor, at its current position");
	sbx_apt_debmap_free(m);
	m = NULL;
	ok(ftruncate(fd, 4 + (off_t)xn / 2) == 0 && lseek(fd, 4, SEEK_SET) == 4 &&
		   sbx_apt_debmap_add(&m, fd, why, sizeof why) == -1 && !m,
	   "a truncated .xz: refused");
	close(fd);
	free(x);
	m = NULL;
	ok(sbx_apt_debmap_add_mem(&m, "\x1f\x8b\x08\0\0\0\0\0\0\3\xff\xff\xff", 13, why, sizeof why) == -1 && !m,
	   "a corrupt .gz: refused");
}

/* A synthetic index the size of Debian's main/binary-amd64 (some 63 000
 * stanzas): how long it takes, for the log. */
static void test_large(void)
{
	enum { N = 63000 };
	size_t cap = (size_t)N * 800, len = 0;
	char *b = malloc(cap);
	for (int i = 0; i < N; i++)
		len += (size_t)snprintf(
			b + len, cap - len,
			"Package: package-%d\nSource: source-%d\nVersion: 1.%d-%d\nInstalled-Size: 4%d\n"
			"Maintainer: Debian Somebody Team <team-%d@lists.debian.org>\n"
			"Architecture: amd64\nDepends: libc6 (>= 2.34), libfoo%d (>= 1.2.3)\n"
			"Description: the package number %d of a synthetic index\n"
			"Multi-Arch: foreign\nHomepage: https://example.org/package-%d\n"
			"Description-md5: 0123456789abcdef0123456789abcdef\nSection: misc\n"
			"Priority: optional\nFilename: pool/main/p/package-%d/package-%d_1.%d-%d_amd64.deb\n"
			"Size: %d\nMD5sum: 0123456789abcdef0123456789abcdef\nSHA256: %064x\n\n",
			i, i, i, i, i, i, i, i, i, i, i, i, i, 1000 + i, i);
	size_t zn;
	void *z = squeeze(b, len, ARCHIVE_FILTER_XZ, &zn);
	char why[300];
	struct timespec t0, t1, t2;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct sbx_apt_debmap *m = NULL;
	int rc = sbx_apt_debmap_add_mem(&m, b, len, why, sizeof why);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	sbx_apt_debmap_free(m);
	m = NULL;
	int rcz = sbx_apt_debmap_add_mem(&m, z, zn, why, sizeof why);
	clock_gettime(CLOCK_MONOTONIC, &t2);
	printf("# %d stanzas, %zu bytes: %.0f ms plain, %.0f ms from %zu bytes of xz\n", N, len,
	       (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
	       (double)(t2.tv_sec - t1.tv_sec) * 1e3 + (double)(t2.tv_nsec - t1.tv_nsec) / 1e6, zn);
	const struct sbx_apt_deb *d =
		sbx_apt_debmap_find(m, "pool/main/p/package-4711/package-4711_1.4711-4711_amd64.deb");
	ok(rc == 0 && rcz == 0 && sbx_apt_debmap_count(m) == N && d && d->size == 1000 + 4711 &&
		   !strcmp(d->package, "package-4711"),
	   "an index of 63000 stanzas, plain and xz");
	sbx_apt_debmap_free(m);
	free(z);
	free(b);
}

int main(void)
{
	test_release();
	test_packages();
	test_large();
	return tap_done();
}
