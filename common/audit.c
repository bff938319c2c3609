#include "audit.h"
#include "hostconf.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

#include <sha2.h>

#define HASH_LEN SHA256_DIGEST_LENGTH

static void hash_bytes(const char *p, size_t n, uint8_t out[HASH_LEN])
{
	SHA2_CTX c;
	SHA256Init(&c);
	SHA256Update(&c, (const uint8_t *)p, n);
	SHA256Final(out, &c);
}

static void hex_of(const uint8_t h[HASH_LEN], char out[2 * HASH_LEN + 1])
{
	static const char digits[] = "0123456789abcdef";
	for (int i = 0; i < HASH_LEN; i++) {
		out[2 * i] = digits[h[i] >> 4];
		out[2 * i + 1] = digits[h[i] & 15];
	}
	out[2 * HASH_LEN] = 0;
}

/* Lowercase only: the writer never produces anything else, so an
 * uppercase digest is an edit. */
static int unhex(const char *s, size_t n, uint8_t out[HASH_LEN])
{
	if (n != 2 * HASH_LEN)
		return -1;
	for (size_t i = 0; i < n; i++) {
		int v = s[i] >= '0' && s[i] <= '9' ? s[i] - '0' : s[i] >= 'a' && s[i] <= 'f' ? s[i] - 'a' + 10 : -1;
		if (v < 0)
			return -1;
		if (i % 2 == 0)
			out[i / 2] = (uint8_t)(v << 4);
		else
			out[i / 2] |= (uint8_t)v;
	}
	return 0;
}

const char *sbx_audit_problem_name(enum sbx_audit_problem p)
{
	switch (p) {
	case SBX_AUDIT_INTACT: return "intact";
	case SBX_AUDIT_EDITED: return "edited";
	case SBX_AUDIT_DELETED: return "deleted";
	case SBX_AUDIT_REORDERED: return "reordered";
	case SBX_AUDIT_TRUNCATED: return "truncated";
	case SBX_AUDIT_MALFORMED: return "malformed";
	}
	return "malformed";
}

/* ---- times ---- */

static int all_digits(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return 0;
	return 1;
}

static int num(const char *s, size_t n)
{
	int v = 0;
	for (size_t i = 0; i < n; i++)
		v = v * 10 + (s[i] - '0');
	return v;
}

static int parse_rfc3339(const char *s, uint64_t *out)
{
	size_t n = strlen(s);
	if (n < 10 || !all_digits(s, 4) || s[4] != '-' || !all_digits(s + 5, 2) || s[7] != '-' ||
	    !all_digits(s + 8, 2))
		return -1;
	struct tm tm = { .tm_year = num(s, 4) - 1900, .tm_mon = num(s + 5, 2) - 1, .tm_mday = num(s + 8, 2) };
	static const int mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	if (tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > mdays[tm.tm_mon])
		return -1;
	long off_s = 0;
	uint64_t frac_ns = 0;
	const char *p = s + 10;
	if (*p) {
		if ((*p != 'T' && *p != 't' && *p != ' ') || strlen(p) < 9 || !all_digits(p + 1, 2) || p[3] != ':' ||
		    !all_digits(p + 4, 2) || p[6] != ':' || !all_digits(p + 7, 2))
			return -1;
		tm.tm_hour = num(p + 1, 2);
		tm.tm_min = num(p + 4, 2);
		tm.tm_sec = num(p + 7, 2);
		if (tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
			return -1;
		if (tm.tm_sec == 60) /* a leap second: keep it in its own day */
			tm.tm_sec = 59;
		p += 9;
		if (*p == '.') {
			size_t k = 0;
			uint64_t scale = 100000000;
			for (p++; *p >= '0' && *p <= '9'; p++, k++) {
				frac_ns += (uint64_t)(*p - '0') * scale;
				scale /= 10;
			}
			if (k == 0)
				return -1;
		}
		if (*p == 'Z' || *p == 'z') {
			p++;
		} else if ((*p == '+' || *p == '-') && all_digits(p + 1, 2) && p[3] == ':' && all_digits(p + 4, 2)) {
			int h = num(p + 1, 2), m = num(p + 4, 2);
			if (h > 23 || m > 59)
				return -1;
			off_s = (*p == '-' ? -1 : 1) * (long)(h * 3600 + m * 60);
			p += 6;
		} else {
			return -1;
		}
		if (*p)
			return -1;
	}
	time_t t = timegm(&tm);
	/* timegm normalises 02-30 into March: a day that moved is not a date. */
	if (t == (time_t)-1 || tm.tm_mday != num(s + 8, 2))
		return -1;
	long long secs = (long long)t - off_s;
	if (secs < 0)
		return -1;
	*out = (uint64_t)secs * 1000000000u + frac_ns;
	return 0;
}

int sbx_audit_parse_time(const char *s, uint64_t now_ns, uint64_t *out_ns, struct sbx_err *err)
{
	size_t n = strlen(s);
	if (n >= 2 && n <= 12 && all_digits(s, n - 1) && strchr("smhdw", s[n - 1])) {
		static const uint64_t unit[] = { ['s' - 'a'] = 1, ['m' - 'a'] = 60, ['h' - 'a'] = 3600,
						 ['d' - 'a'] = 86400, ['w' - 'a'] = 604800 };
		/* 11 digits of weeks still fit in 64 bits as seconds, not as ns. */
		uint64_t secs = strtoull(s, NULL, 10) * unit[s[n - 1] - 'a'];
		/* Before the epoch clamps to just after it, not to 0: 0 means
		 * "unbounded", which would turn --until 60000w into "always". */
		*out_ns = secs < now_ns / 1000000000u ? now_ns - secs * 1000000000u : 1;
		return 0;
	}
	if (parse_rfc3339(s, out_ns) < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "invalid time '%.80s': want RFC 3339 (2024-05-01T12:00:00Z) or an age (90s, 15m, 1h, 2d, 1w)",
				   s);
	return 0;
}

/* ---- reading lines ---- */

enum { LR_EOF, LR_LINE, LR_TORN, LR_LONG };

/* Lines from memory or from an fd (at most `left` bytes of it: the size
 * seen under the lock, so a record being appended is not half-read).  A
 * line longer than SBX_AUDIT_RECORD_MAX is returned as LR_LONG without its
 * bytes, so a hostile log cannot make us buffer gigabytes. */
struct src {
	const char *mem;
	size_t mem_n, mem_off;
	int fd;
	uint64_t left;
	char *buf;
	size_t start, end;
	int skipping;
};

#define SRC_CAP (SBX_AUDIT_RECORD_MAX + 1)

static int src_next_mem(struct src *s, const char **p, size_t *n)
{
	if (s->mem_off >= s->mem_n)
		return LR_EOF;
	const char *b = s->mem + s->mem_off, *nl = memchr(b, '\n', s->mem_n - s->mem_off);
	size_t len = nl ? (size_t)(nl - b) : s->mem_n - s->mem_off;
	s->mem_off += len + (nl != NULL);
	*p = b;
	*n = len;
	if (len > SBX_AUDIT_RECORD_MAX)
		return LR_LONG;
	return nl ? LR_LINE : LR_TORN;
}

static int src_next(struct src *s, const char **p, size_t *n)
{
	if (s->mem)
		return src_next_mem(s, p, n);
	for (;;) {
		char *nl = memchr(s->buf + s->start, '\n', s->end - s->start);
		if (nl) {
			*p = s->buf + s->start;
			*n = (size_t)(nl - *p);
			s->start += *n + 1;
			if (s->skipping) {
				s->skipping = 0;
				return LR_LONG;
			}
			return LR_LINE;
		}
		if (s->skipping)
			s->start = s->end = 0;
		if (s->start) {
			memmove(s->buf, s->buf + s->start, s->end - s->start);
			s->end -= s->start;
			s->start = 0;
		}
		if (s->end == SRC_CAP) {
			s->skipping = 1;
			s->end = 0;
			continue;
		}
		size_t want = SRC_CAP - s->end;
		if (want > s->left)
			want = (size_t)s->left;
		ssize_t r = want ? read(s->fd, s->buf + s->end, want) : 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0) {
			int torn = s->end > s->start, skipped = s->skipping;
			*p = s->buf + s->start;
			*n = s->end - s->start;
			s->start = s->end = 0;
			s->skipping = 0;
			return skipped ? LR_LONG : torn ? LR_TORN : LR_EOF;
		}
		s->end += (size_t)r;
		s->left -= (uint64_t)r;
	}
}

/* ---- records ---- */

static int str_is(json_t *o, const char *key, const char *want)
{
	const char *v = json_string_value(json_object_get(o, key));
	return v && !strcmp(v, want);
}


/* The fields the chain depends on.  The line must be one JSON object with
 * no duplicate keys: a second "seq" would let a reader and the verifier
 * disagree about the record. */
static json_t *parse_rec(const char *p, size_t n, uint64_t *seq, uint8_t prev[HASH_LEN], const char **why)
{
	json_error_t je;
	json_t *o = json_loadb(p, n, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(o)) {
		*why = o ? "not a JSON object" : "not valid JSON";
		json_decref(o);
		return NULL;
	}
	json_t *s = json_object_get(o, "seq"), *pv = json_object_get(o, "prev");
	if (!json_is_integer(s) || json_integer_value(s) < 1)
		*why = "no positive integer \"seq\"";
	else if (!json_is_string(pv) || unhex(json_string_value(pv), json_string_length(pv), prev) < 0)
		*why = "no SHA-256 \"prev\"";
	else if (!json_is_string(json_object_get(o, "type")) || !json_is_string(json_object_get(o, "time")))
		*why = "no \"type\" or \"time\"";
	else {
		*seq = (uint64_t)json_integer_value(s);
		return o;
	}
	json_decref(o);
	return NULL;
}

static int parse_head(const char *h, size_t n, uint64_t *seq, uint8_t hash[HASH_LEN])
{
	char *end;
	if (n < 2 || h[0] < '0' || h[0] > '9')
		return -1;
	errno = 0;
	unsigned long long v = strtoull(h, &end, 10);
	if (errno || *end != ' ' || (size_t)(end + 1 - h) + 2 * HASH_LEN + 1 != n || h[n - 1] != '\n')
		return -1;
	if (unhex(end + 1, 2 * HASH_LEN, hash) < 0)
		return -1;
	*seq = v;
	return 0;
}

/* ---- verifying ---- */

struct walk {
	struct sbx_audit_report *r;
	uint64_t line, expect;
	uint8_t prev[HASH_LEN];
	int done;
	int gap; /* seq jumped: look ahead for the missing ones (reordered) */
	uint64_t gap_line, gap_lo, gap_hi;
	int have_head;
	uint64_t head_seq;
	uint8_t head_hash[HASH_LEN];
	/* Across files: the one being read, the one before (an edit of its
	 * last line shows at this one's first), where the gap was. */
	const char *file, *prev_file, *gap_file;
	uint64_t prev_lines;
	const char *first_file;
	uint64_t start_seq;     /* the first record's seq (> 1: older segments dropped) */
	uint64_t kept_from_seq; /* the last audit.retention's; 0: none seen */
};

__attribute__((format(printf, 4, 5))) static void problem(struct walk *w, uint64_t line, enum sbx_audit_problem k,
							  const char *fmt, ...)
{
	struct sbx_audit_report *r = w->r;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->detail, sizeof r->detail, fmt, ap);
	va_end(ap);
	r->ok = 0;
	r->line = line;
	r->problem = k;
	snprintf(r->file, sizeof r->file, "%s", w->file ? w->file : "audit.log");
	w->done = 1;
}

static void walk_init(struct walk *w, struct sbx_audit_report *r, const char *head, size_t head_n)
{
	memset(w, 0, sizeof *w);
	memset(r, 0, sizeof *r);
	w->r = r;
	w->expect = 1;
	r->ok = 1;
	hex_of(w->prev, r->last_hash);
	w->have_head = head && parse_head(head, head_n, &w->head_seq, w->head_hash) == 0;
}

static void walk_lookahead(struct walk *w, const char *p, size_t n)
{
	uint64_t seq;
	uint8_t prev[HASH_LEN];
	const char *why;
	json_t *o = parse_rec(p, n, &seq, prev, &why);
	if (o && seq >= w->gap_lo && seq < w->gap_hi && (w->file = w->gap_file, 1))
		problem(w, w->gap_line, SBX_AUDIT_REORDERED, "seq %llu where %llu was expected; seq %llu comes later",
			(unsigned long long)w->gap_hi, (unsigned long long)w->gap_lo, (unsigned long long)seq);
	json_decref(o);
}

/* The first problem decides the report.  A record's prev names the line
 * before it, so an edited line shows at the next record; a seq that jumps
 * with a broken prev means lines went missing, unless a later line carries
 * a missing seq (then they were moved). */
static void walk_line(struct walk *w, const char *p, size_t n, int kind)
{
	if (w->done)
		return;
	if (w->gap) {
		if (kind == LR_LINE)
			walk_lookahead(w, p, n);
		return;
	}
	uint64_t line = ++w->line;
	if (kind == LR_LONG) {
		problem(w, line, SBX_AUDIT_MALFORMED, "line longer than %d bytes", SBX_AUDIT_RECORD_MAX);
		return;
	}
	uint64_t seq;
	uint8_t prev[HASH_LEN], h[HASH_LEN];
	const char *why = "empty line";
	json_t *o = n ? parse_rec(p, n, &seq, prev, &why) : NULL;
	if (!o) {
		problem(w, line, SBX_AUDIT_MALFORMED, "%s", why);
		return;
	}
	if (str_is(o, "type", "audit.retention")) {
		json_t *k = json_object_get(o, "kept_from_seq");
		if (json_is_integer(k) && json_integer_value(k) > 0)
			w->kept_from_seq = (uint64_t)json_integer_value(k);
	}
	json_decref(o);
	if (w->r->records == 0 && w->expect == 1 && seq > 1) {
		/* The oldest segments were dropped (or deleted: walk_end
		 * asks the audit.retention records which). */
		w->expect = seq;
		memcpy(w->prev, prev, HASH_LEN);
	}
	if (w->r->records == 0)
		w->start_seq = seq;
	int chained = !memcmp(prev, w->prev, HASH_LEN);
	unsigned long long s = seq, e = w->expect;
	if (seq == w->expect && !chained) {
		if (line == 1 && !w->prev_file)
			problem(w, 1, SBX_AUDIT_EDITED, "the first record's prev is not all zeros");
		else if (line == 1 && (w->file = w->prev_file, 1))
			problem(w, w->prev_lines, SBX_AUDIT_EDITED, "its SHA-256 is not the prev of the next segment's first line");
		else
			problem(w, line - 1, SBX_AUDIT_EDITED, "its SHA-256 is not the prev of line %llu",
				(unsigned long long)line);
		return;
	}
	if (seq != w->expect && chained) {
		problem(w, line, SBX_AUDIT_EDITED, "seq %llu where %llu was expected, with the chain intact", s, e);
		return;
	}
	if (seq < w->expect) {
		problem(w, line, SBX_AUDIT_REORDERED, "seq %llu after %llu", s, e - 1);
		return;
	}
	if (seq > w->expect) {
		w->gap = 1;
		w->gap_file = w->file;
		w->gap_line = line;
		w->gap_lo = w->expect;
		w->gap_hi = seq;
		return;
	}
	hash_bytes(p, n, h);
	if (w->have_head && seq == w->head_seq && memcmp(h, w->head_hash, HASH_LEN)) {
		problem(w, line, SBX_AUDIT_EDITED, "its SHA-256 differs from the one in audit.head");
		return;
	}
	memcpy(w->prev, h, HASH_LEN);
	w->expect++;
	w->r->records++;
	w->r->last_seq = seq;
	hex_of(h, w->r->last_hash);
}

static void walk_end(struct walk *w, int torn)
{
	if (w->done)
		return;
	if (w->gap) {
		unsigned long long k = w->gap_hi - w->gap_lo;
		w->file = w->gap_file;
		problem(w, w->gap_line, SBX_AUDIT_DELETED, "seq %llu where %llu was expected: %llu record%s missing",
			(unsigned long long)w->gap_hi, (unsigned long long)w->gap_lo, k, k == 1 ? "" : "s");
	} else if (torn) {
		problem(w, w->line + 1, SBX_AUDIT_TRUNCATED, "the last line has no newline (a torn append)");
	} else if (w->have_head && w->head_seq > w->expect - 1) {
		problem(w, w->line + 1, SBX_AUDIT_DELETED, "the log ends at seq %llu but audit.head records seq %llu",
			(unsigned long long)(w->expect - 1), (unsigned long long)w->head_seq);
	} else if (w->start_seq > 1 && (!w->kept_from_seq || w->start_seq > w->kept_from_seq)) {
		w->file = w->first_file;
		if (!w->kept_from_seq)
			problem(w, 1, SBX_AUDIT_DELETED, "the trail starts at seq %llu and no audit.retention record says why",
				(unsigned long long)w->start_seq);
		else
			problem(w, 1, SBX_AUDIT_DELETED,
				"the trail starts at seq %llu but retention kept it from seq %llu: %llu records missing",
				(unsigned long long)w->start_seq, (unsigned long long)w->kept_from_seq,
				(unsigned long long)(w->start_seq - w->kept_from_seq));
	}
}

/* One file of the trail; last: the active log, where the trail ends.  A
 * segment is complete when it is renamed, so a torn line in one is
 * reported there. */
static int walk_file(struct walk *w, struct src *s, const char *name, int last)
{
	if (w->file && !w->done) {
		w->prev_file = w->file;
		w->prev_lines = w->line;
	}
	w->file = name;
	if (!w->first_file)
		w->first_file = name;
	w->line = 0;
	for (;;) {
		const char *p;
		size_t n;
		int k = src_next(s, &p, &n);
		if (k < 0)
			return -1;
		if (k == LR_TORN && !last && !w->done && !w->gap) {
			problem(w, w->line + 1, SBX_AUDIT_TRUNCATED, "the segment's last line has no newline");
			return 0;
		}
		if (k == LR_EOF || k == LR_TORN) {
			if (last)
				walk_end(w, k == LR_TORN);
			return 0;
		}
		walk_line(w, p, n, k);
	}
}

static int walk_src(struct walk *w, struct src *s)
{
	return walk_file(w, s, "audit.log", 1);
}

void sbx_audit_verify_buf(const char *log, size_t n, const char *head, size_t head_n, struct sbx_audit_report *r)
{
	struct walk w;
	struct src s = { .mem = log ? log : "", .mem_n = log ? n : 0, .fd = -1 };
	walk_init(&w, r, head, head_n);
	walk_src(&w, &s);
}

/* ---- segments ----
 *
 * With audit.max_size (sbx.yaml) the log rotates: audit.log is renamed to
 * audit.log.<its last seq, 20 digits> and a new audit.log begins with an
 * audit.segment record naming it and its last seq and hash.  seq and prev
 * go on across files, so the trail is one chain: the segments in the order
 * of their names, then audit.log. */

#define SEG_PREFIX "audit.log."
#define SEG_DIGITS 20
#define SEG_NAME_MAX (sizeof SEG_PREFIX + SEG_DIGITS)

struct segs {
	size_t n;
	char (*name)[SEG_NAME_MAX];
};

static int seg_parse(const char *name, uint64_t *last)
{
	size_t pl = strlen(SEG_PREFIX);
	if (strncmp(name, SEG_PREFIX, pl) || strlen(name) != pl + SEG_DIGITS || !all_digits(name + pl, SEG_DIGITS))
		return -1;
	*last = strtoull(name + pl, NULL, 10);
	return 0;
}

static int cmp_seg(const void *a, const void *b)
{
	return strcmp(a, b); /* fixed width: the names sort as their seqs */
}

static void segs_free(struct segs *g)
{
	free(g->name);
	g->name = NULL;
	g->n = 0;
}

/* The segments in LIB, oldest first (call under audit.lock). */
static int segs_list(struct sbx_state *st, struct segs *g, struct sbx_err *err)
{
	memset(g, 0, sizeof *g);
	int dfd = openat(st->lib_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot list the audit trail's segments");
	}
	size_t cap = 0;
	struct dirent *de;
	uint64_t last;
	while ((de = readdir(d))) {
		if (seg_parse(de->d_name, &last) < 0)
			continue;
		if (g->n == cap) {
			cap = cap ? 2 * cap : 16;
			void *nn = realloc(g->name, cap * sizeof *g->name);
			if (!nn) {
				closedir(d);
				segs_free(g);
				return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot list the audit trail's segments");
			}
			g->name = nn;
		}
		snprintf(g->name[g->n++], SEG_NAME_MAX, "%s", de->d_name);
	}
	closedir(d);
	if (g->n)
		qsort(g->name, g->n, sizeof *g->name, cmp_seg);
	return 0;
}

/* The trail as it is under a shared lock: every file open with its size,
 * and the head that goes with them, so a concurrent append (or rotation,
 * or retention) is neither half-read nor anchored before it is seen. */
struct trail {
	size_t n;
	int *fd;
	uint64_t *size;
	struct segs segs; /* names of fd[0..n-2], or of all when there is no audit.log */
	int have_log;
	char *head;
	size_t head_n;
};

static void trail_close(struct trail *t)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->fd[i] >= 0)
			close(t->fd[i]);
	free(t->fd);
	free(t->size);
	free(t->head);
	segs_free(&t->segs);
	memset(t, 0, sizeof *t);
}

static const char *trail_name(const struct trail *t, size_t i)
{
	return i < t->segs.n ? t->segs.name[i] : "audit.log";
}

static int open_ro(struct sbx_state *st, const char *name, int *fd, uint64_t *size, struct sbx_err *err)
{
	*fd = openat(st->lib_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (*fd < 0)
		return errno == ENOENT ? 1 : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open %s", name);
	struct stat sb;
	if (fstat(*fd, &sb) < 0 || !S_ISREG(sb.st_mode))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "%s is not a regular file", name);
	*size = (uint64_t)sb.st_size;
	return 0;
}

static int trail_open(struct sbx_state *st, struct trail *t, int want_head, struct sbx_err *err)
{
	memset(t, 0, sizeof *t);
	_cleanup_close_ int lk = openat(st->lib_fd, "audit.lock", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (lk < 0 && errno != ENOENT)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the audit lock");
	while (lk >= 0 && flock(lk, LOCK_SH) < 0)
		if (errno != EINTR)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot lock the audit log");
	if (segs_list(st, &t->segs, err) < 0)
		return -1;
	size_t cap = t->segs.n + 1;
	t->fd = malloc(cap * sizeof *t->fd);
	t->size = calloc(cap, sizeof *t->size);
	if (!t->fd || !t->size) {
		trail_close(t);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot read the audit trail");
	}
	for (size_t i = 0; i < cap; i++) {
		int r = open_ro(st, trail_name(t, i), &t->fd[t->n], &t->size[t->n], err);
		if (r < 0) {
			if (t->fd[t->n] >= 0)
				close(t->fd[t->n]);
			trail_close(t);
			return -1;
		}
		if (r == 0)
			t->n++;
		/* a segment gone under a shared lock cannot be; audit.log
		 * missing is a trail not begun (or just rotated, for no one) */
		else if (i < t->segs.n) {
			trail_close(t);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOENT, "an audit segment vanished while locked");
		}
		else
			break;
	}
	t->have_log = t->n > t->segs.n;
	if (want_head)
		t->head = sbx_read_small_at(st->lib_fd, "audit.head", 256, &t->head_n);
	return 0;
}

int sbx_audit_verify(struct sbx_state *st, struct sbx_audit_report *r, struct sbx_err *err)
{
	struct trail t;
	_cleanup_free_ char *buf = NULL;
	if (trail_open(st, &t, 1, err) < 0)
		return -1;
	struct walk w;
	walk_init(&w, r, t.head, t.head_n);
	r->segments = t.segs.n;
	if (!(buf = malloc(SRC_CAP))) {
		trail_close(&t);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot verify the audit log");
	}
	if (t.n == 0) { /* no log yet, which audit.head may contradict */
		walk_end(&w, 0);
		trail_close(&t);
		return 0;
	}
	for (size_t i = 0; i < t.n; i++) {
		struct src s = { .fd = t.fd[i], .left = t.size[i], .buf = buf };
		if (walk_file(&w, &s, trail_name(&t, i), i + 1 == t.n) < 0) {
			trail_close(&t);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the audit log");
		}
	}
	if (!t.have_log)
		walk_end(&w, 0);
	trail_close(&t);
	return 0;
}

/* ---- filtering ---- */

static int type_matches(const char *type, const char *want)
{
	size_t n = strlen(want);
	if (n && want[n - 1] == '*')
		n--;
	if (n && want[n - 1] == '.')
		return !strncmp(type, want, n);
	return n == strlen(type) && !strncmp(type, want, n);
}

static int passes(json_t *o, const struct sbx_audit_filter *f)
{
	if (!f)
		return 1;
	if ((f->session && !str_is(o, "session", f->session)) || (f->tenant && !str_is(o, "tenant", f->tenant)))
		return 0;
	if (f->type && !type_matches(json_string_value(json_object_get(o, "type")), f->type))
		return 0;
	if (f->since_ns || f->until_ns) {
		uint64_t t;
		if (parse_rfc3339(json_string_value(json_object_get(o, "time")), &t) < 0)
			return 0;
		if ((f->since_ns && t < f->since_ns) || (f->until_ns && t >= f->until_ns))
			return 0;
	}
	return 1;
}

/* Every parsed record of the log as it is now, to fn with its line; a
 * record that does not parse is skipped (verify reports it; its hash would
 * not chain anyway).  A non-zero return from fn stops the walk and is
 * returned. */
typedef int (*rec_fn)(const char *line, size_t n, json_t *o, uint64_t seq, const uint8_t prev[HASH_LEN], void *ctx);
static int each_record(struct sbx_state *st, rec_fn fn, void *ctx, struct sbx_err *err)
{
	struct trail t;
	_cleanup_free_ char *buf = NULL;
	if (trail_open(st, &t, 0, err) < 0)
		return -1;
	if (t.n && !(buf = malloc(SRC_CAP))) {
		trail_close(&t);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the audit log");
	}
	int rc = 0;
	for (size_t i = 0; i < t.n && !rc; i++) {
		struct src s = { .fd = t.fd[i], .left = t.size[i], .buf = buf };
		for (;;) {
			const char *p;
			size_t n;
			int k = src_next(&s, &p, &n);
			if (k < 0) {
				rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the audit log");
				break;
			}
			if (k == LR_EOF || k == LR_TORN)
				break;
			if (k != LR_LINE)
				continue;
			uint64_t seq;
			uint8_t prev[HASH_LEN];
			const char *why;
			json_t *o = parse_rec(p, n, &seq, prev, &why);
			rc = o ? fn(p, n, o, seq, prev, ctx) : 0;
			json_decref(o);
			if (rc)
				break;
		}
	}
	trail_close(&t);
	return rc;
}

struct read_ctx {
	const struct sbx_audit_filter *f;
	int (*cb)(json_t *rec, void *ctx);
	void *ctx;
};

static int read_one(const char *line, size_t n, json_t *o, uint64_t seq, const uint8_t prev[HASH_LEN], void *ctx)
{
	struct read_ctx *r = ctx;
	(void)line, (void)n, (void)seq, (void)prev;
	return passes(o, r->f) ? r->cb(o, r->ctx) : 0;
}

int sbx_audit_read(struct sbx_state *st, const struct sbx_audit_filter *f, int (*cb)(json_t *rec, void *ctx),
		   void *ctx, struct sbx_err *err)
{
	struct read_ctx r = { f, cb, ctx };
	return each_record(st, read_one, &r, err);
}

struct chain_ctx {
	const char *tenant;
	int (*cb)(const char *line, size_t n, uint64_t seq, const char *sha256, const char *prev, void *ctx);
	void *ctx;
};

static int chain_one(const char *line, size_t n, json_t *o, uint64_t seq, const uint8_t prev[HASH_LEN], void *ctx)
{
	struct chain_ctx *c = ctx;
	uint8_t h[HASH_LEN];
	char hh[2 * HASH_LEN + 1], ph[2 * HASH_LEN + 1];
	hash_bytes(line, n, h);
	hex_of(h, hh);
	hex_of(prev, ph);
	int mine = !c->tenant || str_is(o, "tenant", c->tenant);
	return c->cb(mine ? line : NULL, n, seq, hh, ph, c->ctx);
}

int sbx_audit_chain(struct sbx_state *st, const char *tenant,
		    int (*cb)(const char *line, size_t n, uint64_t seq, const char *sha256, const char *prev, void *ctx), void *ctx,
		    struct sbx_err *err)
{
	struct chain_ctx c = { tenant, cb, ctx };
	return each_record(st, chain_one, &c, err);
}

/* ---- appending ---- */

static int type_ok(const char *t)
{
	size_t n = strlen(t);
	if (n == 0 || n > 63)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= '0' && t[i] <= '9') || t[i] == '_' || t[i] == '.'))
			return 0;
	return 1;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The line for one record: seq, time and type first so a human reading
 * the log sees them, the caller's fields in key order, prev last.  jansson
 * keeps insertion order, so reading and re-serialising gives the same
 * bytes back. */
static char *format_rec(uint64_t seq, const char *type, json_t *fields, const uint8_t prev[HASH_LEN], size_t *len)
{
	char ts[40], hex[2 * HASH_LEN + 1];
	sbx_fmt_time(sbx_now_ns(), ts, sizeof ts);
	hex_of(prev, hex);
	json_t *o = json_pack("{s:I, s:s, s:s}", "seq", (json_int_t)seq, "time", ts, "type", type);
	size_t nk = fields ? json_object_size(fields) : 0, i = 0;
	_cleanup_free_ const char **keys = calloc(nk + 1, sizeof *keys);
	if (!o || !keys) {
		json_decref(o);
		return NULL;
	}
	const char *k;
	json_t *v;
	if (fields) {
		json_object_foreach(fields, k, v) keys[i++] = k;
	}
	qsort(keys, nk, sizeof *keys, cmp_str);
	for (i = 0; i < nk; i++)
		json_object_set(o, keys[i], json_object_get(fields, keys[i]));
	json_object_set_new(o, "prev", json_string(hex));
	char *s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (s)
		*len = strlen(s);
	return s;
}

/* One record, one write(): O_APPEND makes it land at the end, the lock
 * makes it the only writer, and a short write (disk full) is cut back so
 * the log never keeps half a record we know about. */
static int write_rec(int fd, uint64_t *size, uint64_t *seq, uint8_t prev[HASH_LEN], const char *type, json_t *fields,
		     struct sbx_err *err)
{
	size_t n;
	_cleanup_free_ char *s = format_rec(*seq + 1, type, fields, prev, &n);
	if (!s)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot format an audit record");
	if (n > SBX_AUDIT_RECORD_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "audit record of type %s is too large (%zu bytes, at most %d)",
				   type, n, SBX_AUDIT_RECORD_MAX);
	char *line = realloc(s, n + 1);
	if (!line)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot format an audit record");
	s = line;
	line[n] = '\n';
	ssize_t w;
	while ((w = write(fd, line, n + 1)) < 0 && errno == EINTR)
		;
	if (w != (ssize_t)(n + 1)) {
		int e = w < 0 ? errno : ENOSPC;
		if (ftruncate(fd, (off_t)*size) < 0) {
			/* verify will call it truncated; nothing more we can do */
		}
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot append to the audit log");
	}
	hash_bytes(line, n, prev);
	*size += n + 1;
	++*seq;
	return 0;
}

/* The last complete record's seq and hash, from a bounded read of the
 * tail: a torn fragment (a crash mid-append) is at most one record, and so
 * is the line before it.  *torn is the offset where a fragment starts, or
 * the size when there is none. */
#define TAIL_SMALL 8192

/* want: the window to read; 1 when it was too small for the last line
 * (and the fragment after it), so the caller reads the full one. */
static int read_tail_win(int fd, uint64_t size, size_t want, uint64_t *seq, uint8_t hash[HASH_LEN], uint64_t *torn,
			 char **frag, size_t *frag_n, struct sbx_err *err)
{
	int small = want < 2 * SRC_CAP;
	*seq = 0;
	memset(hash, 0, HASH_LEN);
	*torn = size;
	*frag = NULL;
	*frag_n = 0;
	if (size == 0)
		return 0;
	size_t win = size < want ? (size_t)size : want;
	uint64_t base = size - win;
	_cleanup_free_ char *b = malloc(win);
	if (!b)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot read the audit log");
	for (size_t got = 0; got < win;) {
		ssize_t r = pread(fd, b + got, win - got, (off_t)(base + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, r < 0 ? errno : EIO, "cannot read the audit log");
		got += (size_t)r;
	}
	size_t end = win; /* just past the last newline */
	if (b[win - 1] != '\n') {
		char *nl = memrchr(b, '\n', win);
		if (!nl && base && small)
			return 1;
		if (!nl && base)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
					   "the audit log ends in a line too long to be a record; run sbx-audit verify");
		end = nl ? (size_t)(nl - b) + 1 : 0;
		*torn = base + end;
		*frag_n = win - end;
		if (!(*frag = malloc(*frag_n)))
			return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot read the audit log");
		memcpy(*frag, b + end, *frag_n);
	}
	if (end == 0 && base == 0)
		return 0;
	char *nl = end >= 2 ? memrchr(b, '\n', end - 1) : NULL;
	if (!nl && base && small) {
		free(*frag);
		*frag = NULL;
		*frag_n = 0;
		return 1;
	}
	if (!nl && base)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
				   "the audit log's last record is too long; run sbx-audit verify");
	size_t start = nl ? (size_t)(nl - b) + 1 : 0;
	uint8_t prev[HASH_LEN];
	const char *why;
	json_t *o = parse_rec(b + start, end - 1 - start, seq, prev, &why);
	if (!o)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
				   "cannot continue the audit log: its last record is corrupt (%s); run sbx-audit verify", why);
	json_decref(o);
	hash_bytes(b + start, end - 1 - start, hash);
	return 0;
}

/* Most records are a few hundred bytes: read a small tail first, and the
 * full window (two records of the largest size) only when it needs it. */
static int read_tail(int fd, uint64_t size, uint64_t *seq, uint8_t hash[HASH_LEN], uint64_t *torn, char **frag,
		     size_t *frag_n, struct sbx_err *err)
{
	int r = read_tail_win(fd, size, TAIL_SMALL, seq, hash, torn, frag, frag_n, err);
	if (r != 1)
		return r;
	return read_tail_win(fd, size, 2 * SRC_CAP, seq, hash, torn, frag, frag_n, err);
}

/* A crash tore the last append; its caller never saw success.  Cut it
 * off so the chain can go on, and say so in the chain itself. */
static int repair_torn(int fd, uint64_t *size, uint64_t torn, const char *frag, size_t frag_n, uint64_t *seq,
		       uint8_t prev[HASH_LEN], struct sbx_err *err)
{
	if (torn >= *size)
		return 0;
	if (ftruncate(fd, (off_t)torn) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot repair the audit log's torn tail");
	*size = torn;
	uint8_t fh[HASH_LEN];
	char hex[2 * HASH_LEN + 1];
	hash_bytes(frag, frag_n, fh);
	hex_of(fh, hex);
	json_t *rf = json_pack("{s:s, s:I, s:s}", "reason", "torn", "discarded_bytes", (json_int_t)frag_n,
			       "discarded_sha256", hex);
	if (!rf)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot repair the audit log");
	int rc = write_rec(fd, size, seq, prev, "audit.repair", rf, err);
	json_decref(rf);
	return rc;
}

/* audit.head is written only after the log is durable, so it is never
 * ahead of the log's tail nor different from it at the same seq, unless
 * records were removed or rewritten (or an old copy restored).  Continuing
 * silently would bury that; record it in the chain instead of refusing,
 * so auditing does not stop the sandboxes. */
static int repair_head(struct sbx_state *st, int fd, uint64_t *size, uint64_t tail_seq,
		       const uint8_t tail_hash[HASH_LEN], uint64_t *seq, uint8_t prev[HASH_LEN], struct sbx_err *err)
{
	size_t hn;
	_cleanup_free_ char *h = sbx_read_small_at(st->lib_fd, "audit.head", 256, &hn);
	uint64_t hseq;
	uint8_t hh[HASH_LEN];
	if (!h || parse_head(h, hn, &hseq, hh) < 0)
		return 0;
	if (hseq < tail_seq || (hseq == tail_seq && !memcmp(hh, tail_hash, HASH_LEN)))
		return 0;
	char hex[2 * HASH_LEN + 1];
	hex_of(hh, hex);
	json_t *rf = json_pack("{s:s, s:I, s:s, s:I}", "reason", "head-mismatch", "head_seq", (json_int_t)hseq,
			       "head_sha256", hex, "log_seq", (json_int_t)tail_seq);
	if (!rf)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot repair the audit log");
	int rc = write_rec(fd, size, seq, prev, "audit.repair", rf, err);
	json_decref(rf);
	return rc;
}

static int check_fields(const char *type, json_t *fields, struct sbx_err *err)
{
	if (!type_ok(type))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid audit event type '%.80s'", type);
	if (fields && !json_is_object(fields))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "audit fields of %s are not a JSON object", type);
	static const char *const reserved[] = { "seq", "time", "type", "prev" };
	for (size_t i = 0; fields && i < SBX_ARRAY_LEN(reserved); i++)
		if (json_object_get(fields, reserved[i]))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "audit fields of %s must not set \"%s\"", type,
					   reserved[i]);
	return 0;
}

/* ---- durability: one fdatasync, shared ----
 *
 * A record is durable once an fdatasync of the log began after its write()
 * returned.  Appenders write under LIB/audit.lock (exclusive), then sync
 * under LIB/audit.sync (group commit): each takes a ticket (a counter of
 * records written, kept in audit.sync's bytes) while it holds the append
 * lock; whoever gets the sync lock first reads the latest ticket, syncs once
 * for every record written so far, and publishes that ticket as synced; an
 * appender whose ticket is already synced returns without a syscall to the
 * disk.  The counters live only in the page cache: they carry this boot's
 * ID, and after a reboot (or a mangled file) they start again at 0, as no
 * appender of an earlier boot can still be waiting.
 *
 * audit.head is written by the syncing appender after the sync, through a
 * rename but without an fsync of its own: after a crash it may be behind
 * the log (or missing), never ahead of what is durable.  The next append
 * continues from the log's own last record; verify accepts a head that is
 * behind.  The directory is synced only when the log is created. */

#define SYNC_MAGIC "sbxasyn1"

struct sync_page {
	char magic[8];
	char boot[40];
	uint64_t written;  /* tickets handed out (under audit.lock) */
	uint64_t synced;   /* every ticket <= this is durable (under audit.sync) */
	uint64_t last_seq; /* the record of ticket `written`, for audit.head */
	uint8_t last_hash[HASH_LEN];
};

static const char *boot_id(void)
{
	static char id[40];
	static int done;
	if (!done) {
		int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
		ssize_t r = fd >= 0 ? read(fd, id, sizeof id - 1) : -1;
		if (fd >= 0)
			close(fd);
		if (r < 36)
			memset(id, 0, sizeof id);
		else
			id[36] = 0;
		done = 1;
	}
	return id[0] ? id : NULL;
}

static int sync_read(int fd, struct sync_page *pg)
{
	ssize_t r;
	while ((r = pread(fd, pg, sizeof *pg, 0)) < 0 && errno == EINTR)
		;
	const char *b = boot_id();
	return r == (ssize_t)sizeof *pg && b && !memcmp(pg->magic, SYNC_MAGIC, 8) && !strncmp(pg->boot, b, sizeof pg->boot)
		       ? 0
		       : -1;
}

static int sync_write(int fd, const struct sync_page *pg)
{
	ssize_t w;
	while ((w = pwrite(fd, pg, sizeof *pg, 0)) < 0 && errno == EINTR)
		;
	return w == (ssize_t)sizeof *pg ? 0 : -1;
}

/* The sync file, or -1: then every appender syncs for itself (slower,
 * never less durable). */
static int sync_open(struct sbx_state *st)
{
	if (!boot_id())
		return -1;
	int fd = openat(st->lib_fd, "audit.sync", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	struct stat sb;
	if (fd >= 0 && (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode))) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Under audit.lock: this record's ticket, or 0 when there is no sync file
 * to share (the caller then syncs alone). */
static uint64_t sync_ticket(int sfd, uint64_t seq, const uint8_t hash[HASH_LEN])
{
	struct sync_page pg;
	if (sfd < 0)
		return 0;
	if (sync_read(sfd, &pg) < 0) {
		/* First use in this boot: nobody of this boot holds a ticket,
		 * so nobody is syncing against these counters either. */
		memset(&pg, 0, sizeof pg);
		memcpy(pg.magic, SYNC_MAGIC, 8);
		snprintf(pg.boot, sizeof pg.boot, "%s", boot_id());
	}
	pg.written++;
	pg.last_seq = seq;
	memcpy(pg.last_hash, hash, HASH_LEN);
	return sync_write(sfd, &pg) < 0 ? 0 : pg.written;
}

/* audit.head without an fsync: a rename, so a reader sees the old head or
 * the new one, never a mix.  One writer at a time (the syncing appender,
 * under audit.sync), so one temp name does. */
static void write_head(struct sbx_state *st, uint64_t seq, const uint8_t hash[HASH_LEN])
{
	char head[100], hex[2 * HASH_LEN + 1];
	hex_of(hash, hex);
	int hn = snprintf(head, sizeof head, "%llu %s\n", (unsigned long long)seq, hex);
	int fd = openat(st->lib_fd, ".audit.head.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return;
	int bad = sbx_write_all(fd, head, (size_t)hn) < 0;
	close(fd);
	if (bad || renameat(st->lib_fd, ".audit.head.tmp", st->lib_fd, "audit.head") < 0)
		unlinkat(st->lib_fd, ".audit.head.tmp", 0);
}

static int datasync(int fd, struct sbx_err *err)
{
	while (fdatasync(fd) < 0)
		if (errno != EINTR)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot sync the audit log");
	return 0;
}

static int lock(int fd, int how, struct sbx_err *err)
{
	while (flock(fd, how) < 0)
		if (errno != EINTR)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot lock the audit log");
	return 0;
}

/* After the record of ticket t was written and audit.lock released: make
 * it durable, by our own fdatasync or by one that began after it. */
static int group_commit(struct sbx_state *st, int lk, int fd, int sfd, uint64_t t, uint64_t seq,
			const uint8_t hash[HASH_LEN], struct sbx_err *err)
{
	if (t == 0) {
		if (datasync(fd, err) < 0)
			return -1;
		write_head(st, seq, hash);
		return 0;
	}
	if (lock(sfd, LOCK_EX, err) < 0)
		return -1;
	struct sync_page pg;
	if (sync_read(sfd, &pg) == 0 && pg.synced >= t)
		return 0; /* a sync that began after our write covered it */
	/* Lead: every record written so far is in the page cache of this
	 * log (a rotation syncs the old one before renaming it), so one
	 * fdatasync covers them all.  Read the counters without a writer
	 * in the middle of them. */
	if (lock(lk, LOCK_SH, err) < 0)
		return -1;
	int have = sync_read(sfd, &pg) == 0 && pg.written >= t;
	/* Records after a rotation are in the new log, not in ours: sync
	 * the log as it is now (the rotation synced the old one). */
	_cleanup_close_ int cur = -1;
	struct stat a, b;
	if (fstat(fd, &a) == 0 && fstatat(st->lib_fd, "audit.log", &b, AT_SYMLINK_NOFOLLOW) == 0 &&
	    (a.st_ino != b.st_ino || a.st_dev != b.st_dev) && S_ISREG(b.st_mode))
		cur = openat(st->lib_fd, "audit.log", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	flock(lk, LOCK_UN);
	if (datasync(cur >= 0 ? cur : fd, err) < 0)
		return -1;
	if (!have) { /* the counters were reset under us: cover our own */
		write_head(st, seq, hash);
		return 0;
	}
	write_head(st, pg.last_seq, pg.last_hash);
	struct sync_page now;
	if (sync_read(sfd, &now) == 0) {
		if (now.synced < pg.written)
			now.synced = pg.written;
		sync_write(sfd, &now);
	}
	return 0;
}

/* The log, opened for appending; made (and its directory synced, so the
 * name is as durable as the records) when it does not exist yet. */
static int open_log(struct sbx_state *st, struct sbx_err *err)
{
	int fd = openat(st->lib_fd, "audit.log", O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT) {
		fd = openat(st->lib_fd, "audit.log", O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd >= 0 && fsync(st->lib_fd) < 0) {
			close(fd);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot sync the audit log's directory");
		}
	}
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) < 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot open the audit log");
	}
	if (!S_ISREG(sb.st_mode)) {
		close(fd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the audit log is not a regular file");
	}
	return fd;
}

/* sbx.yaml's audit: settings, read again only when the file changed (an
 * append is on every exec's path).  A file that does not parse rotates
 * nothing: the trail goes on in one file rather than stop. */
static void audit_conf(struct sbx_hostconf_audit *out)
{
	static struct {
		int valid;
		dev_t dev;
		ino_t ino;
		struct timespec mtime;
		off_t size;
		struct sbx_hostconf_audit a;
	} c;
	char path[600];
	struct stat sb;
	memset(out, 0, sizeof *out);
	if (stat(sbx_hostconf_path(path, sizeof path), &sb) < 0) {
		c.valid = 0;
		return;
	}
	if (!c.valid || c.dev != sb.st_dev || c.ino != sb.st_ino || c.size != sb.st_size ||
	    c.mtime.tv_sec != sb.st_mtim.tv_sec || c.mtime.tv_nsec != sb.st_mtim.tv_nsec) {
		struct sbx_hostconf *hc = malloc(sizeof *hc);
		memset(&c.a, 0, sizeof c.a);
		if (hc && sbx_hostconf_load(hc, NULL) == 0)
			c.a = hc->audit;
		free(hc);
		c.valid = 1;
		c.dev = sb.st_dev;
		c.ino = sb.st_ino;
		c.size = sb.st_size;
		c.mtime = sb.st_mtim;
	}
	*out = c.a;
}

/* The chain's tail from the newest segment, for an audit.log that holds no
 * record yet (just rotated, or a crash between the rename and the first
 * record).  0: there is no segment. */
static int seg_tail(struct sbx_state *st, uint64_t *seq, uint8_t hash[HASH_LEN], char *name, struct sbx_err *err)
{
	struct segs g;
	if (segs_list(st, &g, err) < 0)
		return -1;
	if (!g.n) {
		segs_free(&g);
		return 0;
	}
	snprintf(name, SEG_NAME_MAX, "%s", g.name[g.n - 1]);
	segs_free(&g);
	_cleanup_close_ int fd = -1;
	uint64_t size, torn;
	_cleanup_free_ char *frag = NULL;
	size_t frag_n;
	if (open_ro(st, name, &fd, &size, err) != 0 || read_tail(fd, size, seq, hash, &torn, &frag, &frag_n, err) < 0)
		return sbx_err_wrap(err, "cannot continue the audit trail from %s", name), -1;
	return 1;
}

static int write_segment_rec(int fd, uint64_t *size, uint64_t *seq, uint8_t prev[HASH_LEN], const char *name,
			     struct sbx_err *err)
{
	char hex[2 * HASH_LEN + 1];
	hex_of(prev, hex);
	json_t *f = json_pack("{s:s, s:I, s:s}", "segment", name, "segment_last_seq", (json_int_t)*seq,
			      "segment_sha256", hex);
	if (!f)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot rotate the audit log");
	int rc = write_rec(fd, size, seq, prev, "audit.segment", f, err);
	json_decref(f);
	return rc;
}

/* The log is full: made durable and renamed to a segment named by its
 * last seq; a new log begins with the record that carries its head.  The
 * directory sync of the new log's creation covers the rename too. */
static int rotate(struct sbx_state *st, int *fd, uint64_t *size, uint64_t *seq, uint8_t prev[HASH_LEN],
		  struct sbx_err *err)
{
	char name[SEG_NAME_MAX];
	snprintf(name, sizeof name, "%s%0*llu", SEG_PREFIX, SEG_DIGITS, (unsigned long long)*seq);
	if (datasync(*fd, err) < 0)
		return -1;
	if (renameat2(st->lib_fd, "audit.log", st->lib_fd, name, RENAME_NOREPLACE) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot rotate the audit log to %s", name);
	int nfd = open_log(st, err);
	if (nfd < 0)
		return -1;
	close(*fd);
	*fd = nfd;
	*size = 0;
	return write_segment_rec(*fd, size, seq, prev, name, err);
}

/* Under audit.lock: the log open, its torn tail cut, a head ahead of it
 * recorded, the chain's tail in seq/prev; rotated first when it reached
 * max_size. */
static int begin_locked(struct sbx_state *st, int *fdp, uint64_t *sizep, uint64_t *seqp, uint8_t prev[HASH_LEN],
			struct sbx_err *err)
{
	int fd = open_log(st, err);
	if (fd < 0)
		return -1;
	*fdp = fd;
	struct stat sb;
	if (fstat(fd, &sb) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the audit log");
	uint64_t size = (uint64_t)sb.st_size, seq, torn;
	_cleanup_free_ char *frag = NULL;
	size_t frag_n;
	if (read_tail(fd, size, &seq, prev, &torn, &frag, &frag_n, err) < 0)
		return -1;
	char seg[SEG_NAME_MAX];
	int fresh = 0;
	if (seq == 0) { /* no record in audit.log: it may continue a segment */
		int r = seg_tail(st, &seq, prev, seg, err);
		if (r < 0)
			return -1;
		fresh = r == 1;
	}
	uint64_t tail_seq = seq;
	uint8_t tail_hash[HASH_LEN];
	memcpy(tail_hash, prev, HASH_LEN);
	if (fresh && torn < size) { /* the segment record goes first */
		if (ftruncate(fd, (off_t)torn) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot repair the audit log's torn tail");
		size = torn;
	}
	if (fresh && write_segment_rec(fd, &size, &seq, prev, seg, err) < 0)
		return -1;
	if (frag && !fresh && repair_torn(fd, &size, torn, frag, frag_n, &seq, prev, err) < 0)
		return -1;
	if (frag && fresh) { /* cut above; recorded now, after the segment record */
		uint64_t s2 = size + 1;
		if (repair_torn(fd, &s2, size, frag, frag_n, &seq, prev, err) < 0)
			return -1;
		size = s2;
	}
	if (repair_head(st, fd, &size, tail_seq, tail_hash, &seq, prev, err) < 0)
		return -1;
	struct sbx_hostconf_audit conf;
	audit_conf(&conf);
	if (conf.max_size && size >= conf.max_size && rotate(st, fdp, &size, &seq, prev, err) < 0)
		return -1;
	*sizep = size;
	*seqp = seq;
	return 0;
}

int sbx_audit_append(struct sbx_state *st, const char *type, json_t *fields, struct sbx_err *err)
{
	if (check_fields(type, fields, err) < 0)
		return -1;
	_cleanup_close_ int lk = openat(st->lib_fd, "audit.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lk < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the audit lock");
	_cleanup_close_ int sfd = sync_open(st);
	if (lock(lk, LOCK_EX, err) < 0)
		return -1;
	_cleanup_close_ int fd = -1;
	uint64_t size, seq;
	uint8_t prev[HASH_LEN];
	if (begin_locked(st, &fd, &size, &seq, prev, err) < 0)
		return -1;
	if (write_rec(fd, &size, &seq, prev, type, fields, err) < 0)
		return -1;
	uint64_t t = sync_ticket(sfd, seq, prev);
	flock(lk, LOCK_UN);
	return group_commit(st, lk, fd, sfd, t, seq, prev, err);
}

int sbx_audit_retain(struct sbx_state *st, unsigned keep, int dry_run, void (*cb)(const char *segment, void *ctx),
		     void *ctx, struct sbx_err *err)
{
	if (keep == 0)
		return 0;
	_cleanup_close_ int lk = openat(st->lib_fd, "audit.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lk < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the audit lock");
	if (lock(lk, LOCK_EX, err) < 0)
		return -1;
	struct segs g;
	if (segs_list(st, &g, err) < 0)
		return -1;
	if (g.n <= keep) {
		segs_free(&g);
		return 0;
	}
	size_t drop = g.n - keep;
	uint64_t through;
	seg_parse(g.name[drop - 1], &through);
	for (size_t i = 0; i < drop && cb; i++)
		cb(g.name[i], ctx);
	if (dry_run) {
		segs_free(&g);
		return (int)drop;
	}
	/* Recorded (durably) before anything goes: verify accepts a trail
	 * that starts after seq 1 only as far as this record says. */
	json_t *names = json_array();
	for (size_t i = 0; names && i < drop; i++)
		json_array_append_new(names, json_string(g.name[i]));
	json_t *f = names ? json_pack("{s:o, s:I, s:I, s:I}", "dropped", names, "dropped_through_seq", (json_int_t)through,
				      "kept_from_seq", (json_int_t)(through + 1), "keep", (json_int_t)keep)
			  : NULL;
	_cleanup_close_ int fd = -1;
	uint64_t size, seq;
	uint8_t prev[HASH_LEN];
	int rc = !f ? sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot record the audit retention")
		     : begin_locked(st, &fd, &size, &seq, prev, err);
	if (rc == 0)
		rc = write_rec(fd, &size, &seq, prev, "audit.retention", f, err);
	if (rc == 0)
		rc = datasync(fd, err);
	json_decref(f);
	if (rc == 0)
		write_head(st, seq, prev);
	for (size_t i = 0; rc == 0 && i < drop; i++)
		if (unlinkat(st->lib_fd, g.name[i], 0) < 0 && errno != ENOENT)
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot remove %s", g.name[i]);
	if (rc == 0)
		fsync(st->lib_fd);
	segs_free(&g);
	return rc < 0 ? -1 : (int)drop;
}
