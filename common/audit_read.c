/* The audit trail read (audit.h): the record format and its hashes,
 * verify (the whole chain, across segments), read and chain (the records
 * as they are), and the times --since/--until take. */
#include "audit.h"
#include "audit_int.h"
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void aud_hash_bytes(const char *p, size_t n, uint8_t out[HASH_LEN])
{
	SHA2_CTX c;
	SHA256Init(&c);
	SHA256Update(&c, (const uint8_t *)p, n);
	SHA256Final(out, &c);
}

void aud_hex_of(const uint8_t h[HASH_LEN], char out[2 * HASH_LEN + 1])
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

int aud_all_digits(const char *s, size_t n)
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
	if (n < 10 || !aud_all_digits(s, 4) || s[4] != '-' || !aud_all_digits(s + 5, 2) || s[7] != '-' ||
	    !aud_all_digits(s + 8, 2))
		return -1;
	struct tm tm = { .tm_year = num(s, 4) - 1900, .tm_mon = num(s + 5, 2) - 1, .tm_mday = num(s + 8, 2) };
	static const int mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	if (tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > mdays[tm.tm_mon])
		return -1;
	long off_s = 0;
	uint64_t frac_ns = 0;
	const char *p = s + 10;
	if (*p) {
		if ((*p != 'T' && *p != 't' && *p != ' ') || strlen(p) < 9 || !aud_all_digits(p + 1, 2) ||
		    p[3] != ':' || !aud_all_digits(p + 4, 2) || p[6] != ':' || !aud_all_digits(p + 7, 2))
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
		} else if ((*p == '+' || *p == '-') && aud_all_digits(p + 1, 2) && p[3] == ':' &&
			   aud_all_digits(p + 4, 2)) {
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
	if (n >= 2 && n <= 12 && aud_all_digits(s, n - 1) && strchr("smhdw", s[n - 1])) {
		static const uint64_t unit[] = {
			['s' - 'a'] = 1, ['m' - 'a'] = 60, ['h' - 'a'] = 3600, ['d' - 'a'] = 86400, ['w' - 'a'] = 604800
		};
		/* 11 digits of weeks still fit in 64 bits as seconds, not as ns. */
		uint64_t secs = strtoull(s, NULL, 10) * unit[s[n - 1] - 'a'];
		/* Before the epoch clamps to just after it, not to 0: 0 means
		 * "unbounded", which would turn --until 60000w into "always". */
		*out_ns = secs < now_ns / 1000000000u ? now_ns - secs * 1000000000u : 1;
		return 0;
	}
	if (parse_rfc3339(s, out_ns) < 0)
		return sbx_err_set(
			err, SBX_EXIT_INVALID, 0,
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
json_t *aud_parse_rec(const char *p, size_t n, uint64_t *seq, uint8_t prev[HASH_LEN], const char **why)
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

static void head_check(const char *body, size_t n, char out[AUD_HEAD_CHECK])
{
	uint8_t h[HASH_LEN];
	char hex[2 * HASH_LEN + 1];
	aud_hash_bytes(body, n, h);
	aud_hex_of(h, hex);
	memcpy(out, hex, AUD_HEAD_CHECK);
}

size_t aud_format_head(uint64_t seq, const uint8_t hash[HASH_LEN], char out[AUD_HEAD_MAX + 1])
{
	char hex[2 * HASH_LEN + 1];
	aud_hex_of(hash, hex);
	int n = snprintf(out, AUD_HEAD_MAX + 1, "%llu %s ", (unsigned long long)seq, hex);
	head_check(out, (size_t)n - 1, out + n);
	out[n + AUD_HEAD_CHECK] = '\n';
	out[n + AUD_HEAD_CHECK + 1] = 0;
	return (size_t)n + AUD_HEAD_CHECK + 1;
}

int aud_parse_head(const char *h, size_t n, uint64_t *seq, uint8_t hash[HASH_LEN])
{
	char *end;
	if (n < 2 || h[0] < '0' || h[0] > '9' || h[n - 1] != '\n')
		return -1;
	errno = 0;
	unsigned long long v = strtoull(h, &end, 10);
	if (errno || *end != ' ')
		return -1;
	size_t body = (size_t)(end + 1 - h) + 2 * HASH_LEN; /* "SEQ HEX" */
	int checked = n == body + 1 + AUD_HEAD_CHECK + 1;
	if (checked) {
		char c[AUD_HEAD_CHECK];
		head_check(h, body, c);
		if (h[body] != ' ' || memcmp(c, h + body + 1, AUD_HEAD_CHECK))
			return -1;
	} else if (n != body + 1) {
		return -1;
	}
	if (unhex(end + 1, 2 * HASH_LEN, hash) < 0)
		return -1;
	*seq = v;
	return checked;
}

char *aud_read_head(struct sbx_state *st, size_t *n)
{
	char *h = NULL;
	for (int i = 0; i < 3; i++) {
		free(h);
		h = sbx_read_small_at(st->lib_fd, "audit.head", 256, n);
		uint64_t seq;
		uint8_t hash[HASH_LEN];
		if (!h || aud_parse_head(h, *n, &seq, hash) >= 0)
			break;
	}
	return h;
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
	aud_hex_of(w->prev, r->last_hash);
	w->have_head = head && aud_parse_head(head, head_n, &w->head_seq, w->head_hash) >= 0;
}

static void walk_lookahead(struct walk *w, const char *p, size_t n)
{
	uint64_t seq;
	uint8_t prev[HASH_LEN];
	const char *why;
	json_t *o = aud_parse_rec(p, n, &seq, prev, &why);
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
	json_t *o = n ? aud_parse_rec(p, n, &seq, prev, &why) : NULL;
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
			problem(w, w->prev_lines, SBX_AUDIT_EDITED,
				"its SHA-256 is not the prev of the next segment's first line");
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
	aud_hash_bytes(p, n, h);
	if (w->have_head && seq == w->head_seq && memcmp(h, w->head_hash, HASH_LEN)) {
		problem(w, line, SBX_AUDIT_EDITED, "its SHA-256 differs from the one in audit.head");
		return;
	}
	memcpy(w->prev, h, HASH_LEN);
	w->expect++;
	w->r->records++;
	w->r->last_seq = seq;
	aud_hex_of(h, w->r->last_hash);
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
			problem(w, 1, SBX_AUDIT_DELETED,
				"the trail starts at seq %llu and no audit.retention record says why",
				(unsigned long long)w->start_seq);
		else
			problem(w, 1, SBX_AUDIT_DELETED,
				"the trail starts at seq %llu but retention kept it from seq %llu: %llu records "
				"missing",
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

int sbx_audit_verify(struct sbx_state *st, struct sbx_audit_report *r, struct sbx_err *err)
{
	struct trail t;
	_cleanup_free_ char *buf = NULL;
	if (aud_trail_open(st, &t, 1, err) < 0)
		return -1;
	struct walk w;
	walk_init(&w, r, t.head, t.head_n);
	r->segments = t.segs.n;
	if (!(buf = malloc(SRC_CAP))) {
		aud_trail_close(&t);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot verify the audit log");
	}
	if (t.n == 0) { /* no log yet, which audit.head may contradict */
		walk_end(&w, 0);
		aud_trail_close(&t);
		return 0;
	}
	for (size_t i = 0; i < t.n; i++) {
		struct src s = { .fd = t.fd[i], .left = t.size[i], .buf = buf };
		if (walk_file(&w, &s, aud_trail_name(&t, i), i + 1 == t.n) < 0) {
			aud_trail_close(&t);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the audit log");
		}
	}
	if (!t.have_log)
		walk_end(&w, 0);
	aud_trail_close(&t);
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
	if (aud_trail_open(st, &t, 0, err) < 0)
		return -1;
	if (t.n && !(buf = malloc(SRC_CAP))) {
		aud_trail_close(&t);
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
			json_t *o = aud_parse_rec(p, n, &seq, prev, &why);
			rc = o ? fn(p, n, o, seq, prev, ctx) : 0;
			json_decref(o);
			if (rc)
				break;
		}
	}
	aud_trail_close(&t);
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

int sbx_audit_read(struct sbx_state *st, const struct sbx_audit_filter *f, int (*cb)(json_t *rec, void *ctx), void *ctx,
		   struct sbx_err *err)
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
	aud_hash_bytes(line, n, h);
	aud_hex_of(h, hh);
	aud_hex_of(prev, ph);
	int mine = !c->tenant || str_is(o, "tenant", c->tenant);
	return c->cb(mine ? line : NULL, n, seq, hh, ph, c->ctx);
}

int sbx_audit_chain(struct sbx_state *st, const char *tenant,
		    int (*cb)(const char *line, size_t n, uint64_t seq, const char *sha256, const char *prev,
			      void *ctx),
		    void *ctx, struct sbx_err *err)
{
	struct chain_ctx c = { tenant, cb, ctx };
	return each_record(st, chain_one, &c, err);
}
