/* Release texts and Packages indexes (aptidx.h).  One deb822 reader serves
 * both: a splitter cuts the text into stanzas as it arrives (the Packages
 * index streams from libarchive's filters, never whole in memory), and
 * each stanza is checked for shape and handed over a field at a time. */
#include "aptidx.h"
#include "util.h"

#include <archive.h>
#include <archive_entry.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define STR_(x) #x
#define STR(x) STR_(x)

static uint64_t index_max_bytes = SBX_APT_INDEX_MAX_BYTES;
static size_t index_max_debs = SBX_APT_INDEX_MAX_DEBS, stanza_max = SBX_APT_STANZA_MAX;

void sbx_apt_debmap_set_bounds(uint64_t max_bytes, size_t max_debs, size_t smax)
{
	index_max_bytes = max_bytes ? max_bytes : SBX_APT_INDEX_MAX_BYTES;
	index_max_debs = max_debs ? max_debs : SBX_APT_INDEX_MAX_DEBS;
	stanza_max = smax ? smax : SBX_APT_STANZA_MAX;
}

__attribute__((format(printf, 3, 4))) static int fail(char *why, size_t wn, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, wn, fmt, ap);
	va_end(ap);
	return -1;
}

static int is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static int is_lower_digit(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int parse_sha256(const char *s, size_t l, uint8_t out[32])
{
	if (l != 64)
		return -1;
	for (size_t i = 0; i < 32; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

static int parse_u64(const char *s, size_t l, uint64_t *v)
{
	uint64_t x = 0;
	if (l == 0)
		return -1;
	for (size_t i = 0; i < l; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		unsigned d = (unsigned)(s[i] - '0');
		if (x > (UINT64_MAX - d) / 10)
			return -1;
		x = x * 10 + d;
	}
	*v = x;
	return 0;
}

/* What is wrong with a path the cache would name a file by (a Release
 * entry, a Filename), or NULL.  "." components too: each file has one
 * spelling. */
static const char *path_bad(const char *s, size_t l)
{
	if (l == 0)
		return "an empty path";
	if (l > SBX_APT_PATH_MAX)
		return "a path longer than " STR(SBX_APT_PATH_MAX) " bytes";
	for (size_t i = 0; i < l; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
			return "a byte outside printable ASCII in a path";
	if (s[0] == '/')
		return "a path with a leading /";
	for (const char *p = s, *e = s + l;;) {
		const char *c = memchr(p, '/', (size_t)(e - p));
		if (!c)
			c = e;
		size_t cl = (size_t)(c - p);
		if (cl == 0)
			return "a path with an empty component (// or a trailing /)";
		if (cl == 1 && p[0] == '.')
			return "a path with a . component";
		if (cl == 2 && p[0] == '.' && p[1] == '.')
			return "a path with a .. component";
		if (c == e)
			return NULL;
		p = c + 1;
	}
}

/* s (l bytes) fit for a message: at most 80 bytes of it, any byte but
 * printable ASCII as '?'. */
static const char *shown(const char *s, size_t l, char buf[88])
{
	size_t k = l > 80 ? 80 : l;
	for (size_t i = 0; i < k; i++)
		buf[i] = (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f ? s[i] : '?';
	strcpy(buf + k, l > k ? "..." : "");
	return buf;
}

/* One field of a stanza: its name, the value on its first line without
 * the blanks around it, and its continuation lines as they are (each
 * ending in '\n' but perhaps the last; more is NULL when there are
 * none). */
struct field {
	const char *name, *val, *more;
	size_t nl, vl, ml;
	size_t line; /* of the name, from 1 */
};
typedef int (*field_fn)(void *ctx, const struct field *f, char *why, size_t wn);

static int field_is(const struct field *f, const char *name)
{
	return f->nl == strlen(name) && !strncasecmp(f->name, name, f->nl);
}

#define STANZA_FIELDS_MAX 256

/* Each field of one stanza (n bytes of lines, none blank, the first of
 * them line number line) to fn, once its name is checked: printable
 * ASCII, not starting with '-' or '#', not twice in the stanza. */
static int stanza_fields(const char *s, size_t n, size_t line, field_fn fn, void *ctx, char *why, size_t wn)
{
	struct {
		uint32_t h;
		size_t nl;
		const char *name;
	} seen[STANZA_FIELDS_MAX];
	size_t nseen = 0;
	struct field f = { 0 };
	int have = 0;
	for (const char *p = s, *end = s + n; p < end; line++) {
		const char *e = memchr(p, '\n', (size_t)(end - p));
		if (!e)
			e = end;
		const char *next = e < end ? e + 1 : end;
		if (is_blank(*p)) {
			if (!have)
				return fail(why, wn, "line %zu: a continuation line before any field", line);
			if (!f.more)
				f.more = p;
			f.ml = (size_t)(next - f.more);
			p = next;
			continue;
		}
		if (have && fn(ctx, &f, why, wn) < 0)
			return -1;
		if (*p == '#')
			return fail(why, wn, "line %zu: a comment line, which this format has not", line);
		const char *colon = memchr(p, ':', (size_t)(e - p));
		if (!colon)
			return fail(why, wn, "line %zu: neither a field nor a continuation line", line);
		size_t nl = (size_t)(colon - p);
		if (nl == 0 || *p == '-')
			return fail(why, wn, "line %zu: a field without a name, or one starting with -", line);
		/* FNV-1a of the name folded to lower case, to compare few
		 * names in full. */
		uint32_t h = 2166136261u;
		for (size_t i = 0; i < nl; i++) {
			unsigned char c = (unsigned char)p[i];
			if (c <= 0x20 || c >= 0x7f)
				return fail(why, wn, "line %zu: a field name with a byte outside printable ASCII",
					    line);
			h = (h ^ (c >= 'A' && c <= 'Z' ? c | 0x20 : c)) * 16777619u;
		}
		for (size_t i = 0; i < nseen; i++)
			if (seen[i].h == h && seen[i].nl == nl && !strncasecmp(seen[i].name, p, nl)) {
				char b[88];
				return fail(why, wn, "line %zu: the field %s twice in one stanza", line,
					    shown(p, nl, b));
			}
		if (nseen == STANZA_FIELDS_MAX)
			return fail(why, wn, "line %zu: more than %d fields in one stanza", line, STANZA_FIELDS_MAX);
		seen[nseen].h = h;
		seen[nseen].nl = nl;
		seen[nseen++].name = p;
		const char *v = colon + 1, *ve = e;
		while (v < ve && is_blank(*v))
			v++;
		while (ve > v && is_blank(ve[-1]))
			ve--;
		f = (struct field){ .name = p, .nl = nl, .val = v, .vl = (size_t)(ve - v), .line = line };
		have = 1;
		p = next;
	}
	if (have && fn(ctx, &f, why, wn) < 0)
		return -1;
	return 0;
}

/* Cuts a text fed in pieces into stanzas, each at most cap bytes, and
 * hands each (its lines, the number of its first) to fn. */
typedef int (*stanza_fn)(void *ctx, const char *s, size_t n, size_t line, char *why, size_t wn);
struct splitter {
	char *buf;
	size_t len, cap;
	size_t lstart; /* where the last line in buf starts */
	size_t lines;  /* complete lines fed */
	size_t first;  /* the number of buf's first line */
	stanza_fn fn;
	void *ctx;
};

static int all_blank(const char *s, size_t l)
{
	for (size_t i = 0; i < l; i++)
		if (!is_blank(s[i]))
			return 0;
	return 1;
}

static int split_feed(struct splitter *sp, const char *p, size_t n, char *why, size_t wn)
{
	while (n) {
		const char *nl = memchr(p, '\n', n);
		size_t seg = nl ? (size_t)(nl - p) + 1 : n;
		if (memchr(p, 0, seg))
			return fail(why, wn, "line %zu: a NUL byte", sp->lines + 1);
		if (memchr(p, '\r', seg))
			return fail(why, wn, "line %zu: a carriage return (these files have LF line ends)",
				    sp->lines + 1);
		if (sp->len == 0)
			sp->first = sp->lines + 1;
		if (seg > sp->cap - sp->len)
			return fail(why, wn, "line %zu: a stanza longer than %zu bytes", sp->first, sp->cap);
		memcpy(sp->buf + sp->len, p, seg);
		sp->len += seg;
		p += seg;
		n -= seg;
		if (!nl)
			break;
		sp->lines++;
		if (all_blank(sp->buf + sp->lstart, sp->len - sp->lstart - 1)) {
			sp->len = sp->lstart;
			if (sp->len && sp->fn(sp->ctx, sp->buf, sp->len, sp->first, why, wn) < 0)
				return -1;
			sp->len = 0;
		}
		sp->lstart = sp->len;
	}
	return 0;
}

/* The end of the text: the last stanza, its last line perhaps without a
 * '\n'. */
static int split_end(struct splitter *sp, char *why, size_t wn)
{
	if (all_blank(sp->buf + sp->lstart, sp->len - sp->lstart))
		sp->len = sp->lstart;
	if (sp->len && sp->fn(sp->ctx, sp->buf, sp->len, sp->first, why, wn) < 0)
		return -1;
	sp->len = sp->lstart = 0;
	return 0;
}

/* Release texts. */

static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	unsigned yoe = (unsigned)(y - era * 400);
	unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
	unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + (int64_t)doe - 719468;
}

/* digits (exactly l of them) as a number, or -1. */
static int digits(const char *s, size_t l)
{
	int v = 0;
	for (size_t i = 0; i < l; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

/* An RFC 2822 date as apt writes them ("Sat, 10 Aug 2024 09:32:04 UTC"),
 * in UTC only, as apt reads them. */
static int parse_date(const char *s, size_t l, int64_t *t)
{
	static const char *const wdays[] = { "Mon,", "Tue,", "Wed,", "Thu,", "Fri,", "Sat,", "Sun," };
	static const char *const months[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
					      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
	static const char *const zones[] = { "UTC", "GMT", "Z", "+0000" };
	const char *tok[6];
	size_t tl[6], nt = 0;
	for (const char *p = s, *e = s + l; p < e;) {
		while (p < e && is_blank(*p))
			p++;
		if (p == e)
			break;
		if (nt == 6)
			return -1;
		tok[nt] = p;
		while (p < e && !is_blank(*p))
			p++;
		tl[nt] = (size_t)(p - tok[nt]);
		nt++;
	}
	size_t i = 0;
	if (nt == 6) {
		size_t k = 0;
		while (k < SBX_ARRAY_LEN(wdays) && !(tl[0] == 4 && !strncasecmp(tok[0], wdays[k], 4)))
			k++;
		if (k == SBX_ARRAY_LEN(wdays))
			return -1;
		i = 1;
	}
	if (nt - i != 5)
		return -1;
	int day = tl[i] <= 2 ? digits(tok[i], tl[i]) : -1;
	unsigned mon = 0;
	while (mon < 12 && !(tl[i + 1] == 3 && !strncasecmp(tok[i + 1], months[mon], 3)))
		mon++;
	int year = tl[i + 2] == 4 ? digits(tok[i + 2], 4) : -1;
	const char *hms = tok[i + 3];
	if (tl[i + 3] != 8 || hms[2] != ':' || hms[5] != ':')
		return -1;
	int hh = digits(hms, 2), mm = digits(hms + 3, 2), ss = digits(hms + 6, 2);
	size_t z = 0;
	while (z < SBX_ARRAY_LEN(zones) &&
	       !(tl[i + 4] == strlen(zones[z]) && !strncmp(tok[i + 4], zones[z], tl[i + 4])))
		z++;
	if (day < 1 || mon == 12 || year < 1970 || hh < 0 || hh > 23 || mm < 0 || mm > 59 || ss < 0 || ss > 60 ||
	    z == SBX_ARRAY_LEN(zones))
		return -1;
	static const int mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
	if (day > mdays[mon] || (mon == 1 && day == 29 && !leap))
		return -1;
	*t = days_from_civil(year, mon + 1, (unsigned)day) * 86400 + hh * 3600 + mm * 60 + ss;
	return 0;
}

struct relctx {
	struct sbx_apt_release *r;
	size_t cap, stanzas;
	int have_sha;
};

static int rel_sha256(struct relctx *c, const struct field *f, char *why, size_t wn)
{
	struct sbx_apt_release *r = c->r;
	c->have_sha = 1;
	if (f->vl)
		return fail(why, wn,
			    "line %zu: SHA256 with a value on the field's line (its list is on the lines below)",
			    f->line);
	size_t line = f->line + 1;
	for (const char *p = f->more, *end = p ? p + f->ml : NULL; p && p < end; line++) {
		const char *e = memchr(p, '\n', (size_t)(end - p));
		if (!e)
			e = end;
		const char *tok[3];
		size_t tl[3], nt = 0;
		for (const char *q = p; q < e;) {
			while (q < e && is_blank(*q))
				q++;
			if (q == e)
				break;
			if (nt == 3)
				return fail(why, wn, "line %zu: more than a hash, a size and a path", line);
			tok[nt] = q;
			while (q < e && !is_blank(*q))
				q++;
			tl[nt] = (size_t)(q - tok[nt]);
			nt++;
		}
		if (nt != 3)
			return fail(why, wn, "line %zu: not a hash, a size and a path", line);
		struct sbx_apt_relfile x = { 0 };
		if (parse_sha256(tok[0], tl[0], x.sha256) < 0)
			return fail(why, wn, "line %zu: not a SHA-256 in hex", line);
		if (parse_u64(tok[1], tl[1], &x.size) < 0)
			return fail(why, wn, "line %zu: not a size", line);
		const char *bad = path_bad(tok[2], tl[2]);
		if (bad)
			return fail(why, wn, "line %zu: %s", line, bad);
		if (r->nfiles == SBX_APT_RELFILES_MAX)
			return fail(why, wn, "line %zu: more than %d files in SHA256", line, SBX_APT_RELFILES_MAX);
		if (r->nfiles == c->cap) {
			size_t cap = c->cap ? 2 * c->cap : 64;
			struct sbx_apt_relfile *v = realloc(r->files, cap * sizeof *v);
			if (!v)
				return fail(why, wn, "out of memory");
			r->files = v;
			c->cap = cap;
		}
		if (!(x.path = strndup(tok[2], tl[2])))
			return fail(why, wn, "out of memory");
		r->files[r->nfiles++] = x;
		p = e < end ? e + 1 : end;
	}
	return 0;
}

static int rel_field(void *ctx, const struct field *f, char *why, size_t wn)
{
	struct relctx *c = ctx;
	struct sbx_apt_release *r = c->r;
	if (field_is(f, "SHA256"))
		return rel_sha256(c, f, why, wn);
	char *name = field_is(f, "Suite") ? r->suite : field_is(f, "Codename") ? r->codename : NULL;
	int64_t *t = field_is(f, "Date") ? &r->date : field_is(f, "Valid-Until") ? &r->valid_until : NULL;
	int by_hash = field_is(f, "Acquire-By-Hash");
	if (!name && !t && !by_hash)
		return 0;
	char b[88];
	shown(f->name, f->nl, b);
	if (f->more)
		return fail(why, wn, "line %zu: %s on more than one line", f->line, b);
	if (name) {
		int ok = f->vl < sizeof r->suite;
		for (size_t i = 0; ok && i < f->vl; i++)
			ok = (unsigned char)f->val[i] > 0x20 && (unsigned char)f->val[i] < 0x7f;
		if (!ok)
			return fail(why, wn, "line %zu: %s is not up to 63 printable characters without blanks",
				    f->line, b);
		memcpy(name, f->val, f->vl);
		name[f->vl] = 0;
	} else if (t) {
		if (parse_date(f->val, f->vl, t) < 0)
			return fail(why, wn, "line %zu: %s is not a date in UTC as apt writes them", f->line, b);
	} else if (f->vl == 3 && !strncasecmp(f->val, "yes", 3)) {
		r->by_hash = 1;
	} else if (!(f->vl == 2 && !strncasecmp(f->val, "no", 2))) {
		return fail(why, wn, "line %zu: %s is neither yes nor no", f->line, b);
	}
	return 0;
}

static int rel_stanza(void *ctx, const char *s, size_t n, size_t line, char *why, size_t wn)
{
	struct relctx *c = ctx;
	if (++c->stanzas > 1)
		return fail(why, wn, "line %zu: a second stanza (a Release text is one)", line);
	return stanza_fields(s, n, line, rel_field, c, why, wn);
}

static int relfile_cmp(const void *a, const void *b)
{
	return strcmp(((const struct sbx_apt_relfile *)a)->path, ((const struct sbx_apt_relfile *)b)->path);
}

/* Sorted by path, each path once. */
static int rel_sort(struct sbx_apt_release *r, char *why, size_t wn)
{
	qsort(r->files, r->nfiles, sizeof *r->files, relfile_cmp);
	for (size_t i = 1; i < r->nfiles; i++) {
		const struct sbx_apt_relfile *a = &r->files[i - 1], *x = &r->files[i];
		if (!strcmp(a->path, x->path) && (a->size != x->size || memcmp(a->sha256, x->sha256, 32))) {
			char b[88];
			return fail(why, wn, "%s is listed twice, differently", shown(x->path, strlen(x->path), b));
		}
	}
	size_t k = 0;
	for (size_t i = 0; i < r->nfiles; i++) {
		if (k && !strcmp(r->files[k - 1].path, r->files[i].path))
			free(r->files[i].path);
		else
			r->files[k++] = r->files[i];
	}
	r->nfiles = k;
	return 0;
}

int sbx_apt_release_parse(const char *buf, size_t n, struct sbx_apt_release *r, char *why, size_t wn)
{
	memset(r, 0, sizeof *r);
	if (n > SBX_APT_RELEASE_MAX)
		return fail(why, wn, "a Release text larger than %u bytes", SBX_APT_RELEASE_MAX);
	struct relctx c = { .r = r };
	struct splitter sp = { .cap = n, .fn = rel_stanza, .ctx = &c };
	if (!(sp.buf = malloc(n ? n : 1)))
		return fail(why, wn, "out of memory");
	int rc = split_feed(&sp, buf, n, why, wn);
	if (rc == 0)
		rc = split_end(&sp, why, wn);
	free(sp.buf);
	if (rc == 0 && !c.stanzas)
		rc = fail(why, wn, "an empty Release text");
	else if (rc == 0 && !c.have_sha)
		rc = fail(why, wn, "no SHA256 field (sbx verifies by SHA-256 only)");
	else if (rc == 0 && !r->nfiles)
		rc = fail(why, wn, "a SHA256 field listing no files");
	if (rc == 0)
		rc = rel_sort(r, why, wn);
	if (rc < 0)
		sbx_apt_release_free(r);
	return rc;
}

void sbx_apt_release_free(struct sbx_apt_release *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nfiles; i++)
		free(r->files[i].path);
	free(r->files);
	memset(r, 0, sizeof *r);
}

static int relfile_key_cmp(const void *key, const void *e)
{
	return strcmp(key, ((const struct sbx_apt_relfile *)e)->path);
}

const struct sbx_apt_relfile *sbx_apt_release_find(const struct sbx_apt_release *r, const char *path)
{
	if (!r || !r->nfiles)
		return NULL;
	return bsearch(path, r->files, r->nfiles, sizeof *r->files, relfile_key_cmp);
}

const struct sbx_apt_relfile *sbx_apt_release_by_hash(const struct sbx_apt_release *r, const char *path)
{
	static const char mark[] = "by-hash/SHA256/";
	const size_t ml = sizeof mark - 1;
	size_t l = strlen(path);
	if (!r || l < ml + 64)
		return NULL;
	const char *hex = path + l - 64, *m = hex - ml;
	if (memcmp(m, mark, ml) || (m != path && m[-1] != '/'))
		return NULL;
	uint8_t sha[32];
	for (size_t i = 0; i < 64; i++)
		if (!((hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f')))
			return NULL;
	if (parse_sha256(hex, 64, sha) < 0)
		return NULL;
	/* DIR's entries, "DIR/NAME", are a run of the sorted list. */
	size_t pl = (size_t)(m - path); /* DIR and its '/' */
	if (pl && path_bad(path, pl - 1))
		return NULL;
	size_t lo = 0, hi = r->nfiles;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strncmp(r->files[mid].path, path, pl) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < r->nfiles && !strncmp(r->files[i].path, path, pl); i++)
		if (!strchr(r->files[i].path + pl, '/') && !memcmp(r->files[i].sha256, sha, 32))
			return &r->files[i];
	return NULL;
}

/* Packages indexes.  The entries live in chunks of an arena, each one
 * allocation packing the struct and its four strings; the map is an array
 * of pointers to them sorted by filename.  An index is read into a batch
 * of its own, and merged into the map only once all of it is read. */

struct chunk {
	struct chunk *next;
	size_t used, cap;
	char data[]; /* 8-aligned: after three 8-byte members */
};
#define CHUNK_SIZE (256u << 10)

static void *arena_alloc(struct chunk **head, size_t n)
{
	n = (n + 7) & ~(size_t)7;
	struct chunk *c = *head;
	if (!c || c->cap - c->used < n) {
		size_t cap = n > CHUNK_SIZE ? n : CHUNK_SIZE;
		if (!(c = malloc(sizeof *c + cap)))
			return NULL;
		c->next = *head;
		c->used = 0;
		c->cap = cap;
		*head = c;
	}
	void *p = c->data + c->used;
	c->used += n;
	return p;
}

static void arena_free(struct chunk *c)
{
	while (c) {
		struct chunk *next = c->next;
		free(c);
		c = next;
	}
}

struct sbx_apt_debmap {
	const struct sbx_apt_deb **v;
	size_t n;
	struct chunk *chunks;
};

struct batch {
	struct chunk *chunks;
	const struct sbx_apt_deb **v;
	size_t n, cap, stanzas;
};

enum { F_PACKAGE, F_VERSION, F_ARCH, F_FILENAME, F_SIZE, F_SHA256, F_N };
static const char *const deb_fields[F_N] = { "Package", "Version", "Architecture", "Filename", "Size", "SHA256" };

struct debstanza {
	const char *v[F_N];
	size_t l[F_N], line[F_N];
};

static int deb_field(void *ctx, const struct field *f, char *why, size_t wn)
{
	struct debstanza *d = ctx;
	for (size_t i = 0; i < F_N; i++)
		if (field_is(f, deb_fields[i])) {
			if (f->more)
				return fail(why, wn, "line %zu: %s on more than one line", f->line, deb_fields[i]);
			d->v[i] = f->val;
			d->l[i] = f->vl;
			d->line[i] = f->line;
			return 0;
		}
	return 0;
}

static int pkgname_ok(const char *s, size_t l)
{
	if (l < 2 || !is_lower_digit(s[0]))
		return 0;
	for (size_t i = 1; i < l; i++)
		if (!is_lower_digit(s[i]) && !(s[i] && strchr("+.-", s[i])))
			return 0;
	return 1;
}

static int version_ok(const char *s, size_t l)
{
	for (size_t i = 0; i < l; i++)
		if (!is_lower_digit(s[i]) && !(s[i] >= 'A' && s[i] <= 'Z') && !(s[i] && strchr(".+~:-", s[i])))
			return 0;
	return l > 0;
}

static int arch_ok(const char *s, size_t l)
{
	for (size_t i = 0; i < l; i++)
		if (!is_lower_digit(s[i]) && s[i] != '-')
			return 0;
	return l > 0;
}

/* One stanza of a Packages index into the batch. */
static int deb_stanza(void *ctx, const char *s, size_t n, size_t line, char *why, size_t wn)
{
	struct batch *b = ctx;
	if (++b->stanzas > index_max_debs)
		return fail(why, wn, "line %zu: more than %zu stanzas in one index", line, index_max_debs);
	struct debstanza d = { 0 };
	if (stanza_fields(s, n, line, deb_field, &d, why, wn) < 0)
		return -1;
	for (size_t i = 0; i < F_N; i++)
		if (!d.v[i])
			return fail(why, wn, "line %zu: a stanza without %s", line, deb_fields[i]);
	const char *bad = path_bad(d.v[F_FILENAME], d.l[F_FILENAME]);
	if (bad)
		return fail(why, wn, "line %zu: Filename is %s", d.line[F_FILENAME], bad);
	if (!pkgname_ok(d.v[F_PACKAGE], d.l[F_PACKAGE]))
		return fail(why, wn, "line %zu: Package is not a Debian package name", d.line[F_PACKAGE]);
	if (!version_ok(d.v[F_VERSION], d.l[F_VERSION]))
		return fail(why, wn, "line %zu: Version is not a Debian version", d.line[F_VERSION]);
	if (!arch_ok(d.v[F_ARCH], d.l[F_ARCH]))
		return fail(why, wn, "line %zu: Architecture is not an architecture name", d.line[F_ARCH]);
	uint64_t size;
	if (parse_u64(d.v[F_SIZE], d.l[F_SIZE], &size) < 0)
		return fail(why, wn, "line %zu: Size is not a number of bytes", d.line[F_SIZE]);
	uint8_t sha[32];
	if (parse_sha256(d.v[F_SHA256], d.l[F_SHA256], sha) < 0)
		return fail(why, wn, "line %zu: SHA256 is not a SHA-256 in hex", d.line[F_SHA256]);

	size_t need = sizeof(struct sbx_apt_deb);
	for (size_t i = F_PACKAGE; i <= F_FILENAME; i++)
		need += d.l[i] + 1;
	struct sbx_apt_deb *x = arena_alloc(&b->chunks, need);
	if (!x)
		return fail(why, wn, "out of memory");
	char *p = (char *)(x + 1);
	const char **dst[] = { &x->package, &x->version, &x->arch, &x->filename };
	for (size_t i = F_PACKAGE; i <= F_FILENAME; i++) {
		memcpy(p, d.v[i], d.l[i]);
		p[d.l[i]] = 0;
		*dst[i] = p;
		p += d.l[i] + 1;
	}
	x->size = size;
	memcpy(x->sha256, sha, 32);
	if (b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 1024;
		const struct sbx_apt_deb **v = realloc(b->v, cap * sizeof *v);
		if (!v)
			return fail(why, wn, "out of memory");
		b->v = v;
		b->cap = cap;
	}
	b->v[b->n++] = x;
	return 0;
}

static int deb_cmp(const void *a, const void *b)
{
	return strcmp((*(const struct sbx_apt_deb *const *)a)->filename,
		      (*(const struct sbx_apt_deb *const *)b)->filename);
}

static int deb_same(const struct sbx_apt_deb *a, const struct sbx_apt_deb *b)
{
	return a->size == b->size && !memcmp(a->sha256, b->sha256, 32) && !strcmp(a->package, b->package) &&
	       !strcmp(a->version, b->version) && !strcmp(a->arch, b->arch);
}

static int listed_twice(const struct sbx_apt_deb *x, char *why, size_t wn)
{
	char b[88];
	return fail(why, wn, "%s is listed twice, differently", shown(x->filename, strlen(x->filename), b));
}

/* The batch into the map (made when *m is NULL), or -1 and *m as it was;
 * the batch's chunks are the map's after 0. */
static int commit(struct sbx_apt_debmap **m, struct batch *b, char *why, size_t wn)
{
	if (b->n)
		qsort(b->v, b->n, sizeof *b->v, deb_cmp);
	size_t k = 0;
	for (size_t i = 0; i < b->n; i++) {
		if (k && !strcmp(b->v[k - 1]->filename, b->v[i]->filename)) {
			if (!deb_same(b->v[k - 1], b->v[i]))
				return listed_twice(b->v[i], why, wn);
			continue;
		}
		b->v[k++] = b->v[i];
	}
	b->n = k;
	struct sbx_apt_debmap *old = *m;
	size_t on = old ? old->n : 0, n = 0, added = 0;
	_cleanup_free_ const struct sbx_apt_deb **v = malloc((on + b->n ? on + b->n : 1) * sizeof *v);
	if (!v)
		return fail(why, wn, "out of memory");
	for (size_t i = 0, j = 0; i < on || j < b->n;) {
		int c = i == on ? 1 : j == b->n ? -1 : strcmp(old->v[i]->filename, b->v[j]->filename);
		if (c == 0 && !deb_same(old->v[i], b->v[j]))
			return listed_twice(b->v[j], why, wn);
		if (c <= 0) {
			v[n++] = old->v[i++];
			j += c == 0;
		} else {
			v[n++] = b->v[j++];
			added++;
		}
	}
	struct sbx_apt_debmap *map = old ? old : calloc(1, sizeof *map);
	if (!map)
		return fail(why, wn, "out of memory");
	free(map->v);
	map->v = steal_pointer(&v);
	map->n = n;
	if (!added) {
		arena_free(b->chunks);
	} else if (b->chunks) {
		struct chunk *tail = b->chunks;
		while (tail->next)
			tail = tail->next;
		tail->next = map->chunks;
		map->chunks = b->chunks;
	}
	b->chunks = NULL;
	*m = map;
	return 0;
}

/* Only the filters libarchive was built with a library for: without one
 * it would start an external program (gzip -d, lrzip -d, ...), which the
 * proxy has no business doing on a server's bytes.  "raw" hands the
 * decompressed stream over as one entry; "empty" takes an empty one. */
static struct archive *reader(void)
{
	struct archive *a = archive_read_new();
	if (!a)
		return NULL;
	if (archive_zlib_version())
		archive_read_support_filter_gzip(a);
	if (archive_liblzma_version()) {
		archive_read_support_filter_xz(a);
		archive_read_support_filter_lzma(a);
	}
	if (archive_bzlib_version())
		archive_read_support_filter_bzip2(a);
	if (archive_libzstd_version())
		archive_read_support_filter_zstd(a);
	if (archive_liblz4_version())
		archive_read_support_filter_lz4(a);
	archive_read_support_format_raw(a);
	archive_read_support_format_empty(a);
	return a;
}

static const char *aerr(struct archive *a)
{
	const char *s = archive_error_string(a);
	return s ? s : "?";
}

#define READ_BLOCK (64u << 10)

/* The index from a (opened: what archive_read_open_* said), freed
 * here. */
static int debmap_read(struct sbx_apt_debmap **m, struct archive *a, int opened, char *why, size_t wn)
{
	struct batch b = { 0 };
	struct splitter sp = { .cap = stanza_max, .fn = deb_stanza, .ctx = &b };
	_cleanup_free_ char *block = NULL;
	struct archive_entry *e;
	int rc = -1, r;
	if (opened != ARCHIVE_OK) {
		fail(why, wn, "not a Packages index libarchive reads: %s", aerr(a));
		goto out;
	}
	r = archive_read_next_header(a, &e);
	if (r != ARCHIVE_OK && r != ARCHIVE_EOF) {
		fail(why, wn, "not a Packages index libarchive reads: %s", aerr(a));
		goto out;
	}
	if (r == ARCHIVE_OK) {
		if (!(sp.buf = malloc(sp.cap)) || !(block = malloc(READ_BLOCK))) {
			fail(why, wn, "out of memory");
			goto out;
		}
		uint64_t total = 0;
		for (;;) {
			la_ssize_t got = archive_read_data(a, block, READ_BLOCK);
			if (got < 0) {
				fail(why, wn, "the index cannot be decompressed: %s", aerr(a));
				goto out;
			}
			if (got == 0)
				break;
			total += (uint64_t)got;
			if (total > index_max_bytes) {
				fail(why, wn, "an index larger than %llu bytes decompressed",
				     (unsigned long long)index_max_bytes);
				goto out;
			}
			if (split_feed(&sp, block, (size_t)got, why, wn) < 0)
				goto out;
		}
		if (split_end(&sp, why, wn) < 0)
			goto out;
	}
	rc = commit(m, &b, why, wn);
out:
	arena_free(b.chunks);
	free(b.v);
	free(sp.buf);
	archive_read_free(a);
	return rc;
}

int sbx_apt_debmap_add(struct sbx_apt_debmap **m, int fd, char *why, size_t wn)
{
	struct archive *a = reader();
	if (!a)
		return fail(why, wn, "out of memory");
	return debmap_read(m, a, archive_read_open_fd(a, fd, READ_BLOCK), why, wn);
}

int sbx_apt_debmap_add_mem(struct sbx_apt_debmap **m, const void *buf, size_t n, char *why, size_t wn)
{
	struct archive *a = reader();
	if (!a)
		return fail(why, wn, "out of memory");
	return debmap_read(m, a, archive_read_open_memory(a, buf, n), why, wn);
}

static int deb_key_cmp(const void *key, const void *e)
{
	return strcmp(key, (*(const struct sbx_apt_deb *const *)e)->filename);
}

const struct sbx_apt_deb *sbx_apt_debmap_find(const struct sbx_apt_debmap *m, const char *filename)
{
	if (!m || !m->n)
		return NULL;
	const struct sbx_apt_deb *const *x = bsearch(filename, m->v, m->n, sizeof *m->v, deb_key_cmp);
	return x ? *x : NULL;
}

size_t sbx_apt_debmap_count(const struct sbx_apt_debmap *m)
{
	return m ? m->n : 0;
}

void sbx_apt_debmap_free(struct sbx_apt_debmap *m)
{
	if (!m)
		return;
	arena_free(m->chunks);
	free(m->v);
	free(m);
}
