/* Unit tests for the audit trail (TAP): the chain, every kind of
 * tampering verify must name, torn-tail repair, filters, and appends from
 * many processes at once. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "audit.h"
#include "util.h"

#include "tap.h"

static struct sbx_state st;
static char *orig;
static size_t orig_n;

static void put_log(const char *buf, size_t len)
{
	int fd = openat(st.lib_fd, "audit.log", O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0 || sbx_write_all(fd, buf, len) < 0)
		abort();
	close(fd);
}

/* The start of line k (1-based) in orig, and its length with the newline. */
static size_t line_at(size_t k, size_t *len)
{
	size_t off = 0;
	for (size_t i = 1; i < k; i++)
		off = (size_t)((char *)memchr(orig + off, '\n', orig_n - off) - orig) + 1;
	*len = (size_t)((char *)memchr(orig + off, '\n', orig_n - off) - (orig + off)) + 1;
	return off;
}

/* Verify the log as it now is; the problem and its line must match. */
static void expect(enum sbx_audit_problem p, uint64_t line, const char *what)
{
	struct sbx_audit_report r;
	struct sbx_err e = { 0 };
	int rc = sbx_audit_verify(&st, &r, &e);
	char msg[200];
	snprintf(msg, sizeof msg, "%s: %s at line %llu", what, sbx_audit_problem_name(p), (unsigned long long)line);
	ok(rc == 0 && !r.ok && r.problem == p && r.line == line, msg);
	if (rc == 0 && (r.problem != p || r.line != line))
		printf("#   got %s at line %llu: %s\n", sbx_audit_problem_name(r.problem), (unsigned long long)r.line,
		       r.detail);
}

static void tamper_tests(void)
{
	char *b = malloc(orig_n + 100);
	size_t l10, o10 = line_at(10, &l10), l11, o11 = line_at(11, &l11), l5, o5 = line_at(5, &l5), l15,
		    o15 = line_at(15, &l15);

	memcpy(b, orig, orig_n);
	char *s1 = memmem(b + o10, l10, "\"s-", 3);
	s1[3] = 'z'; /* still valid JSON: only the hash can tell */
	put_log(b, orig_n);
	expect(SBX_AUDIT_EDITED, 10, "a byte edited in line 10");

	memcpy(b, orig, o10);
	memcpy(b + o10, orig + o10 + l10, orig_n - o10 - l10);
	put_log(b, orig_n - l10);
	expect(SBX_AUDIT_DELETED, 10, "line 10 deleted");

	memcpy(b, orig, orig_n);
	memcpy(b + o10, orig + o11, l11);
	memcpy(b + o10 + l11, orig + o10, l10);
	put_log(b, orig_n);
	expect(SBX_AUDIT_REORDERED, 10, "lines 10 and 11 swapped");

	/* lines 5 and 9 are alike (exec.end, s-a, one-digit seq and i), so
	 * they have the same length and can trade places in the buffer */
	size_t l9, o9 = line_at(9, &l9);
	memcpy(b, orig, orig_n);
	memcpy(b + o5, orig + o9, l9);
	memcpy(b + o9, orig + o5, l5);
	put_log(b, orig_n);
	ok(l5 == l9, "lines 5 and 9 have the same length");
	expect(SBX_AUDIT_REORDERED, 5, "lines 5 and 9 swapped");

	put_log(orig, orig_n - 7);
	expect(SBX_AUDIT_TRUNCATED, 20, "the last line cut short");

	size_t l20, o20 = line_at(20, &l20);
	put_log(orig, o20);
	expect(SBX_AUDIT_DELETED, 20, "the last line removed whole (audit.head says so)");

	memcpy(b, orig, o5);
	memcpy(b + o5, "not json\n", 9);
	memcpy(b + o5 + 9, orig + o5, orig_n - o5);
	put_log(b, orig_n + 9);
	expect(SBX_AUDIT_MALFORMED, 5, "a garbage line inserted");

	memcpy(b, orig, orig_n);
	char *seq = memmem(b + o15, l15, "\"seq\":15", 8);
	seq[7] = '7';
	put_log(b, orig_n);
	expect(SBX_AUDIT_EDITED, 15, "a seq changed");

	memcpy(b, orig, orig_n);
	char *last = memmem(b + o20, l20, "\"s-", 3);
	last[3] ^= 1;
	put_log(b, orig_n);
	expect(SBX_AUDIT_EDITED, 20, "the last line edited (audit.head says so)");

	/* the in-memory core agrees, with and without a head */
	struct sbx_audit_report r;
	memcpy(b, orig, orig_n);
	b[o10 + 7] = '9'; /* {"seq":10 -> 90 */
	sbx_audit_verify_buf(b, orig_n, NULL, 0, &r);
	ok(!r.ok && r.line == 10, "verify_buf: an edited seq");
	sbx_audit_verify_buf(orig, orig_n, NULL, 0, &r);
	ok(r.ok && r.records == 20, "verify_buf: intact");
	sbx_audit_verify_buf("", 0, "3 zz\n", 5, &r);
	ok(r.ok && r.records == 0, "verify_buf: empty log, unreadable head ignored");
	free(b);
	put_log(orig, orig_n);
}

static int count_cb(json_t *rec, void *ctx)
{
	(void)rec;
	++*(int *)ctx;
	return 0;
}

static int count(const struct sbx_audit_filter *f)
{
	int c = 0;
	struct sbx_err e = { 0 };
	if (sbx_audit_read(&st, f, count_cb, &c, &e) < 0)
		return -1;
	return c;
}

static void read_tests(void)
{
	struct sbx_audit_filter f = { .type = "exec." };
	ok(count(&f) == 10, "type prefix exec.");
	f.type = "exec.start";
	ok(count(&f) == 5, "exact type");
	f.type = "exec.*";
	ok(count(&f) == 10, "type prefix exec.*");
	f = (struct sbx_audit_filter){ .session = "s-b" };
	ok(count(&f) == 10, "session filter");
	f.tenant = "t1";
	ok(count(&f) == 0, "tenant filter (no tenant recorded)");
	uint64_t now = sbx_now_ns();
	f = (struct sbx_audit_filter){ .since_ns = now - 3600ull * 1000000000u };
	ok(count(&f) == 20, "since an hour ago");
	f = (struct sbx_audit_filter){ .until_ns = now - 3600ull * 1000000000u };
	ok(count(&f) == 0, "until an hour ago");
	ok(count(NULL) == 20, "no filter");
}

static void time_tests(void)
{
	uint64_t t, now = 2000000000ull * 1000000000u;
	struct sbx_err e = { 0 };
	ok(sbx_audit_parse_time("2024-05-01T12:00:00Z", now, &t, &e) == 0 && t == 1714564800ull * 1000000000u,
	   "RFC 3339 UTC");
	ok(sbx_audit_parse_time("2024-05-01T14:00:00.250+02:00", now, &t, &e) == 0 &&
		   t == 1714564800ull * 1000000000u + 250000000u,
	   "RFC 3339 with fraction and offset");
	ok(sbx_audit_parse_time("2024-05-01", now, &t, &e) == 0 && t == 1714521600ull * 1000000000u, "bare date");
	ok(sbx_audit_parse_time("1h", now, &t, &e) == 0 && t == now - 3600ull * 1000000000u, "relative 1h");
	ok(sbx_audit_parse_time("99999999999w", now, &t, &e) == 0 && t == 1, "huge age clamps to the epoch");
	const char *bad[] = { "",
			      "1",
			      "h",
			      "-1h",
			      "1y",
			      "2024-02-30",
			      "2024-13-01",
			      "2024-05-01T25:00:00Z",
			      "2024-05-01T12:00:00",
			      "2024-05-01T12:00:00Zjunk",
			      "2024-05-01T12:00:00.Z" };
	int all = 1;
	for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++)
		if (sbx_audit_parse_time(bad[i], now, &t, &e) == 0 || e.code != SBX_EXIT_INVALID) {
			printf("# accepted '%s'\n", bad[i]);
			all = 0;
		}
	ok(all, "bad times rejected with 3");
}

static void append_many(int child, int k)
{
	struct sbx_state s;
	struct sbx_err e = { 0 };
	if (sbx_state_open(&s, &e) < 0)
		_exit(1);
	json_t *f = json_pack("{s:i}", "child", child);
	for (int i = 0; i < k; i++) {
		json_object_set_new(f, "i", json_integer(i));
		if (sbx_audit_append(&s, "exec.start", f, &e) < 0) {
			fprintf(stderr, "child %d: %s\n", child, e.msg);
			_exit(1);
		}
	}
	_exit(0);
}

static void concurrency_test(void)
{
	unlinkat(st.lib_fd, "audit.log", 0);
	unlinkat(st.lib_fd, "audit.head", 0);
	pid_t pids[8];
	for (int c = 0; c < 8; c++)
		if ((pids[c] = fork()) == 0)
			append_many(c, 200);
	int all_ok = 1, status;
	for (int c = 0; c < 8; c++)
		all_ok &= waitpid(pids[c], &status, 0) == pids[c] && WIFEXITED(status) && WEXITSTATUS(status) == 0;
	ok(all_ok, "8 processes appended 200 records each");
	struct sbx_audit_report r;
	struct sbx_err e = { 0 };
	ok(sbx_audit_verify(&st, &r, &e) == 0 && r.ok && r.records == 1600 && r.last_seq == 1600,
	   "verify: intact, 1600 records, seq 1..1600");
	ok(count(NULL) == 1600, "every record reads back");
}

int main(void)
{
	char tmpl[] = "/tmp/sbx-unit-audit.XXXXXX";
	char *root = mkdtemp(tmpl);
	struct sbx_err e = { 0 };
	setenv("SBX_ROOT", root, 1);
	if (!root || sbx_state_open(&st, &e) < 0) {
		printf("1..0 # SKIP cannot make a state root: %s\n", e.msg);
		return 0;
	}
	struct sbx_audit_report r;
	ok(sbx_audit_verify(&st, &r, &e) == 0 && r.ok && r.records == 0, "no log yet: ok, 0 records");

	for (int i = 1; i <= 20; i++) {
		const char *type = i % 4 == 0 ? "exec.start" : i % 4 == 1 ? "exec.end" : "session.create";
		json_t *f =
			json_pack("{s:s, s:i, s:[s,s]}", "session", i % 2 ? "s-a" : "s-b", "i", i, "argv", "sh", "-c");
		if (sbx_audit_append(&st, type, f, &e) < 0)
			printf("# %s\n", e.msg);
		json_decref(f);
	}
	ok(sbx_audit_verify(&st, &r, &e) == 0 && r.ok && r.records == 20 && r.last_seq == 20, "20 appended, intact");
	struct stat sb;
	ok(fstatat(st.lib_fd, "audit.log", &sb, 0) == 0 && (sb.st_mode & 0777) == 0600, "the log is mode 0600");
	orig = sbx_read_small_at(st.lib_fd, "audit.log", 1 << 20, &orig_n);
	ok(orig && !memcmp(orig, "{\"seq\":1,\"time\":\"", 17) &&
		   memmem(orig, orig_n,
			  "\"prev\":\"0000000000000000000000000000000000000000000000000000000000000000\"}\n", 74),
	   "seq and time lead, the first prev is 64 zeros");

	json_t *bad = json_pack("{s:i}", "seq", 5);
	ok(sbx_audit_append(&st, "exec.start", bad, &e) < 0 && e.code == SBX_EXIT_INVALID, "a reserved key is refused");
	json_decref(bad);
	ok(sbx_audit_append(&st, "Exec Start", NULL, &e) < 0 && e.code == SBX_EXIT_INVALID, "a bad type is refused");

	tamper_tests();
	read_tests();
	time_tests();

	/* A crash mid-append leaves a torn line (and audit.head one record
	 * behind it); the next append cuts it off and records that it did. */
	char *torn = malloc(orig_n + 20);
	memcpy(torn, orig, orig_n);
	memcpy(torn + orig_n, "{\"seq\":21,\"ti", 13);
	put_log(torn, orig_n + 13);
	free(torn);
	expect(SBX_AUDIT_TRUNCATED, 21, "a torn append");
	ok(sbx_audit_append(&st, "session.destroy", NULL, &e) == 0, "append after a torn tail");
	ok(sbx_audit_verify(&st, &r, &e) == 0 && r.ok && r.records == 22, "intact again: 20 + repair + new");
	struct sbx_audit_filter f = { .type = "audit.repair" };
	ok(count(&f) == 1, "the repair is in the chain");

	/* Records removed from the end, then an append: the chain goes on,
	 * but says that audit.head was ahead of the log. */
	put_log(orig, line_at(19, &(size_t){ 0 }));
	ok(sbx_audit_append(&st, "session.destroy", NULL, &e) == 0, "append after the last records were removed");
	ok(sbx_audit_verify(&st, &r, &e) == 0 && r.ok && r.records == 20, "intact: 18 + repair + new");
	ok(count(&f) == 1, "the repair says audit.head was ahead");
	free(orig);

	/* audit.head is not synced: after a crash it may be behind the log
	 * or gone.  Neither is tampering, and the next append goes on from
	 * the log's own last record. */
	size_t hn;
	char *h = sbx_read_small_at(st.lib_fd, "audit.head", 256, &hn);
	ok(sbx_audit_append(&st, "exec.start", NULL, &e) == 0, "one more append");
	ok(h && sbx_atomic_write_at(st.lib_fd, "audit.head", h, hn, 0600, &e) == 0, "audit.head put one record back");
	free(h);
	ok(sbx_audit_verify(&st, &r, &e) == 0 && r.ok && r.records == 21, "a head behind the log verifies");
	ok(sbx_audit_append(&st, "exec.end", NULL, &e) == 0 && count(&f) == 1, "and the next append repairs nothing");
	unlinkat(st.lib_fd, "audit.head", 0);
	ok(sbx_audit_verify(&st, &r, &e) == 0 && r.ok && r.records == 22, "a missing head verifies");
	ok(sbx_audit_append(&st, "exec.end", NULL, &e) == 0 && count(&f) == 1 &&
		   (h = sbx_read_small_at(st.lib_fd, "audit.head", 256, &hn)) && !strncmp(h, "23 ", 3),
	   "the next append writes it again, without a repair");
	free(h);

	/* A record longer than the small tail read (8 KiB): the next append
	 * reads the full window and still chains onto it. */
	char *big = malloc(20001);
	memset(big, 'b', 20000);
	big[20000] = 0;
	json_t *bf = json_pack("{s:s}", "pad", big);
	free(big);
	ok(sbx_audit_append(&st, "exec.start", bf, &e) == 0 && sbx_audit_append(&st, "exec.end", NULL, &e) == 0,
	   "a 20 KB record, then a small one");
	json_decref(bf);
	ok(sbx_audit_verify(&st, &r, &e) == 0 && r.ok && r.records == 25, "the chain goes on across it");

	concurrency_test();

	sbx_state_close(&st);
	char cmd[100];
	snprintf(cmd, sizeof cmd, "rm -rf %s", root);
	if (system(cmd) != 0)
		printf("# cannot remove %s\n", root);
	printf("1..%d\n", n);
	return failed != 0;
}
