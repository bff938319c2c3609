/* The strict YAML reader every configuration file of sbx goes through
 * (policies, sbx.yaml, template specs): libyaml's event stream, refusing
 * what none of them needs wherever it appears (anchors, aliases, tags,
 * directives, deep nesting, long values, control characters, invalid
 * UTF-8), every error as FILE:LINE:COL (yamlstrict.h). */
#include "yamlstrict.h"
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One UTF-8 sequence at p (at most n bytes): its length, or 0 when it is
 * malformed, overlong, a surrogate or beyond U+10FFFF. */
size_t sbx_utf8_dec(const unsigned char *p, size_t n, uint32_t *cp)
{
	if (!n)
		return 0;
	if (p[0] < 0x80) {
		*cp = p[0];
		return 1;
	}
	size_t len;
	uint32_t v, min;
	if ((p[0] & 0xe0) == 0xc0)
		len = 2, v = p[0] & 0x1f, min = 0x80;
	else if ((p[0] & 0xf0) == 0xe0)
		len = 3, v = p[0] & 0x0f, min = 0x800;
	else if ((p[0] & 0xf8) == 0xf0)
		len = 4, v = p[0] & 0x07, min = 0x10000;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		v = v << 6 | (p[i] & 0x3f);
	}
	if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return len;
}

/* Characters a policy never needs and that would make line numbers or
 * messages ambiguous: controls (C0 but tab and line ends, DEL, C1, which
 * holds YAML 1.1's NEL line break), the Unicode line and paragraph
 * separators (also YAML 1.1 breaks) and non-characters. */
int sbx_text_bad_char(uint32_t cp, int in_scalar)
{
	if (cp < 0x20)
		return in_scalar || (cp != '\t' && cp != '\n' && cp != '\r');
	return (cp >= 0x7f && cp < 0xa0) || cp == 0x2028 || cp == 0x2029 || cp == 0xfffe || cp == 0xffff;
}

/* Untrusted text made fit for a message: valid UTF-8 (so a JSON error can
 * carry it), anything odd shown as '?', cut after max characters. */
const char *sbx_yaml_show(char *out, size_t outn, const char *s, size_t max)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t o = 0, chars = 0;
	while (*p && chars < max && o + 8 < outn) {
		uint32_t cp;
		size_t l = sbx_utf8_dec(p, 4, &cp);
		if (!l || sbx_text_bad_char(cp, 1)) {
			out[o++] = '?';
			p++;
		} else {
			memcpy(out + o, p, l);
			o += l;
			p += l;
		}
		chars++;
	}
	if (*p)
		memcpy(out + o, "...", 3), o += 3;
	out[o] = 0;
	return out;
}

/* A message cut to fit its buffer may end inside a UTF-8 sequence, which a
 * JSON error could not carry: drop the partial sequence. */
static void utf8_trim(char *s)
{
	size_t n = strlen(s), i = n, back = 0;
	while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xc0) == 0x80)
		i--, back++;
	if (i == 0 || (unsigned char)s[i - 1] < 0x80)
		return;
	uint32_t cp;
	if (!sbx_utf8_dec((const unsigned char *)s + i - 1, n - i + 1, &cp))
		s[i - 1] = 0;
}

/* ---- Event stream ---- */

__attribute__((format(printf, 4, 0))) static int failv(struct sbx_yaml *c, size_t line, size_t col, const char *fmt,
						       va_list ap)
{
	char msg[400], hidden[400];
	if (c->redact) {
		/* Every value a message quotes is '%s' (or '%.Ns') by house
		 * style: printed as nothing, the argument still consumed. */
		size_t o = 0;
		for (const char *f = fmt; *f && o + 16 < sizeof hidden;) {
			size_t l = f[0] == '\'' && f[1] == '%' ? strspn(f + 2, "0123456789.") : 0;
			if (l || (f[0] == '\'' && f[1] == '%')) {
				if (f[2 + l] == 's' && f[3 + l] == '\'') {
					o += (size_t)snprintf(hidden + o, sizeof hidden - o, "%%.0s(value not shown)");
					f += 4 + l;
					continue;
				}
			}
			hidden[o++] = *f++;
		}
		hidden[o] = 0;
		fmt = hidden;
	}
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	vsnprintf(msg, sizeof msg, fmt, ap);
#pragma GCC diagnostic pop
	sbx_err_set(c->err, SBX_EXIT_INVALID, 0, "%s:%zu:%zu: %s", c->name, line, col, msg);
	if (c->err)
		utf8_trim(c->err->msg);
	return -1;
}

int sbx_yaml_failm(struct sbx_yaml *c, yaml_mark_t m, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	failv(c, m.line + 1, m.column + 1, fmt, ap);
	va_end(ap);
	return -1;
}

int sbx_yaml_failat(struct sbx_yaml *c, size_t line, size_t col, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	failv(c, line, col, fmt, ap);
	va_end(ap);
	return -1;
}

/* Line and column (1-based, columns in characters as libyaml counts them)
 * of byte offset off; the text before it is known to be valid. */
static void pos_at(const uint8_t *b, size_t n, size_t off, size_t *line, size_t *col)
{
	*line = 1;
	*col = 1;
	for (size_t i = 0; i < off && i < n; i++) {
		if (b[i] == '\n' || (b[i] == '\r' && (i + 1 >= n || b[i + 1] != '\n')))
			++*line, *col = 1;
		else if ((b[i] & 0xc0) != 0x80)
			++*col;
	}
}

/* libyaml checks encoding too, but refusing here first gives every class
 * of bad byte the same message and a position. */
static int check_text(struct sbx_yaml *c)
{
	for (size_t i = 0; i < c->n;) {
		uint32_t cp = 0;
		size_t l = sbx_utf8_dec(c->buf + i, c->n - i, &cp), line, col;
		if (!l || sbx_text_bad_char(cp, 0)) {
			pos_at(c->buf, c->n, i, &line, &col);
			if (!l)
				return sbx_yaml_failat(c, line, col, "invalid UTF-8");
			if (!cp)
				return sbx_yaml_failat(c, line, col, "NUL byte");
			return sbx_yaml_failat(c, line, col, "character U+%04X is not allowed", (unsigned)cp);
		}
		i += l;
	}
	return 0;
}

static int syntax_error(struct sbx_yaml *c)
{
	yaml_parser_t *y = &c->y;
	if (y->error == YAML_MEMORY_ERROR)
		return sbx_err_set(c->err, SBX_EXIT_INTERNAL, ENOMEM, "cannot parse %s", c->name);
	size_t line = y->problem_mark.line + 1, col = y->problem_mark.column + 1;
	if (y->error == YAML_READER_ERROR)
		pos_at(c->buf, c->n, y->problem_offset, &line, &col);
	const char *problem = y->problem ? y->problem : "syntax error";
	if (y->context)
		return sbx_yaml_failat(c, line, col, "%s (%s at %zu:%zu)", problem, y->context,
				       y->context_mark.line + 1, y->context_mark.column + 1);
	return sbx_yaml_failat(c, line, col, "%s", problem);
}

/* Advance to the next event, refusing what no policy needs wherever it
 * appears: anchors, aliases, tags, directives, deep nesting, controls. */
int sbx_yaml_next(struct sbx_yaml *c)
{
	if (c->have_ev)
		yaml_event_delete(&c->ev);
	c->have_ev = false;
	if (!yaml_parser_parse(&c->y, &c->ev))
		return syntax_error(c);
	c->have_ev = true;
	yaml_event_t *e = &c->ev;
	yaml_mark_t m = e->start_mark;
	const yaml_char_t *anchor = NULL, *tag = NULL;
	switch (e->type) {
	case YAML_ALIAS_EVENT: return sbx_yaml_failm(c, m, "aliases are not allowed");
	case YAML_DOCUMENT_START_EVENT:
		if (e->data.document_start.version_directive ||
		    e->data.document_start.tag_directives.start != e->data.document_start.tag_directives.end)
			return sbx_yaml_failm(c, m, "directives are not allowed");
		break;
	case YAML_SCALAR_EVENT:
		anchor = e->data.scalar.anchor;
		tag = e->data.scalar.tag;
		if (e->data.scalar.length > c->scalar_max)
			return sbx_yaml_failm(c, m, "value longer than %zu bytes", c->scalar_max);
		/* Escapes in quoted scalars ("\0", "\e") reach past check_text. */
		for (size_t i = 0; i < e->data.scalar.length;) {
			uint32_t cp = 0;
			size_t l = sbx_utf8_dec(e->data.scalar.value + i, e->data.scalar.length - i, &cp);
			if (!l || (sbx_text_bad_char(cp, 1) && !(cp == '\t' && c->value_tabs)))
				return sbx_yaml_failm(c, m, "control or invalid character in a value");
			i += l;
		}
		break;
	case YAML_SEQUENCE_START_EVENT:
	case YAML_MAPPING_START_EVENT:
		if (e->type == YAML_SEQUENCE_START_EVENT)
			anchor = e->data.sequence_start.anchor, tag = e->data.sequence_start.tag;
		else
			anchor = e->data.mapping_start.anchor, tag = e->data.mapping_start.tag;
		if (++c->depth > c->depth_max)
			return sbx_yaml_failm(c, m, "nested deeper than %u levels", c->depth_max);
		break;
	case YAML_SEQUENCE_END_EVENT:
	case YAML_MAPPING_END_EVENT: c->depth--; break;
	default: break;
	}
	if (anchor)
		return sbx_yaml_failm(c, m, "anchors are not allowed (&%s)", SBX_YAML_SHOW((const char *)anchor));
	if (tag)
		return sbx_yaml_failm(c, m, "tags are not allowed (%s)", SBX_YAML_SHOW((const char *)tag));
	return 0;
}

bool sbx_yaml_is_null(const yaml_event_t *e)
{
	if (e->type != YAML_SCALAR_EVENT || e->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	const char *s = (const char *)e->data.scalar.value;
	return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

const char *sbx_yaml_kind(const yaml_event_t *e)
{
	switch (e->type) {
	case YAML_MAPPING_START_EVENT: return "a mapping";
	case YAML_SEQUENCE_START_EVENT: return "a list";
	case YAML_SCALAR_EVENT: return sbx_yaml_is_null(e) ? "null" : "a scalar";
	default: return "nothing";
	}
}

/* The current event must start a node of this type; null is never taken
 * for an empty collection, so a half-deleted section is an error. */
int sbx_yaml_expect(struct sbx_yaml *c, yaml_event_type_t t, const char *path)
{
	if (c->ev.type == t && !sbx_yaml_is_null(&c->ev))
		return 0;
	const char *want = "a scalar value", *hint = "";
	if (t == YAML_MAPPING_START_EVENT)
		want = "a mapping", hint = " (write {} for an empty mapping)";
	else if (t == YAML_SEQUENCE_START_EVENT)
		want = "a list", hint = " (write [] for an empty list)";
	return sbx_yaml_failm(c, c->ev.start_mark, "%s%sexpected %s, got %s%s", path, *path ? ": " : "", want,
			      sbx_yaml_kind(&c->ev), sbx_yaml_is_null(&c->ev) ? hint : "");
}

const char *sbx_yaml_scalar(struct sbx_yaml *c, const char *path)
{
	if (sbx_yaml_expect(c, YAML_SCALAR_EVENT, path) < 0)
		return NULL;
	return (const char *)c->ev.data.scalar.value;
}

int sbx_yaml_seq(struct sbx_yaml *c, const char *path, unsigned max, const char *what, sbx_yaml_item_fn fn, void *obj,
		 unsigned *count)
{
	if (sbx_yaml_expect(c, YAML_SEQUENCE_START_EVENT, path) < 0)
		return -1;
	unsigned i = 0;
	for (;; i++) {
		if (sbx_yaml_next(c) < 0)
			return -1;
		if (c->ev.type == YAML_SEQUENCE_END_EVENT)
			break;
		if (i == max)
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: more than %u %s", path, max, what);
		char ipath[180];
		snprintf(ipath, sizeof ipath, "%s[%u]", path, i);
		if (fn(c, obj, i, ipath) < 0)
			return -1;
	}
	if (count)
		*count = i;
	return 0;
}

int sbx_yaml_open(struct sbx_yaml *c, const char *name, const uint8_t *buf, size_t n, unsigned depth_max,
		  size_t scalar_max, struct sbx_err *err)
{
	*c = (struct sbx_yaml){
		.name = name, .buf = buf, .n = n, .depth_max = depth_max, .scalar_max = scalar_max, .err = err
	};
	if (!yaml_parser_initialize(&c->y)) {
		memset(&c->y, 0, sizeof c->y); /* what yaml_parser_delete can take */
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot parse %s", name);
	}
	if (check_text(c) < 0)
		return -1;
	yaml_parser_set_input_string(&c->y, buf, n);
	/* No guessing: a UTF-16 BOM must not switch decoders on us. */
	yaml_parser_set_encoding(&c->y, YAML_UTF8_ENCODING);
	return 0;
}

void sbx_yaml_close(struct sbx_yaml *c)
{
	if (c->have_ev)
		yaml_event_delete(&c->ev);
	c->have_ev = false;
	yaml_parser_delete(&c->y);
}

/* "in WHERE", or "at the top level". */
static const char *in_where(const char *where, char *buf, size_t n)
{
	if (!*where)
		return "at the top level";
	snprintf(buf, n, "in %s", where);
	return buf;
}

int sbx_yaml_map(struct sbx_yaml *c, const char *where, const char *const *keys, size_t nkeys, sbx_yaml_key_fn fn,
		 void *arg, uint64_t *seen_out)
{
	char in[200];
	if (sbx_yaml_expect(c, YAML_MAPPING_START_EVENT, where) < 0)
		return -1;
	uint64_t seen = 0;
	/* Names given so far, for a map of any names (keys NULL). */
	_cleanup_free_ char *names = keys ? NULL : calloc(SBX_YAML_MAP_ANY, 256);
	unsigned nnames = 0;
	if (!keys && !names)
		return sbx_yaml_failm(c, c->ev.start_mark, "out of memory");
	for (;;) {
		if (sbx_yaml_next(c) < 0)
			return -1;
		if (c->ev.type == YAML_MAPPING_END_EVENT)
			break;
		yaml_mark_t km = c->ev.start_mark;
		if (c->ev.type != YAML_SCALAR_EVENT)
			return sbx_yaml_failm(c, km, "keys must be scalars %s", in_where(where, in, sizeof in));
		char key[256];
		snprintf(key, sizeof key, "%s", (const char *)c->ev.data.scalar.value);
		int k = -1;
		if (keys) {
			size_t i = 0;
			while (i < nkeys && strcmp(keys[i], key))
				i++;
			if (i == nkeys) {
				char list[600] = "";
				for (size_t j = 0; j < nkeys; j++)
					snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", j ? ", " : "",
						 keys[j]);
				return sbx_yaml_failm(c, km, "unknown key '%s' %s (expected one of: %s)",
						      SBX_YAML_SHOW(key), in_where(where, in, sizeof in), list);
			}
			if (seen & (1ull << i))
				return sbx_yaml_failm(c, km, "duplicate key '%s' %s", keys[i],
						      in_where(where, in, sizeof in));
			seen |= 1ull << i;
			k = (int)i;
		} else {
			for (unsigned i = 0; i < nnames; i++)
				if (!strcmp(names + 256 * i, key))
					return sbx_yaml_failm(c, km, "duplicate key '%s' %s", SBX_YAML_SHOW(key),
							      in_where(where, in, sizeof in));
			if (nnames == SBX_YAML_MAP_ANY)
				return sbx_yaml_failm(c, km, "more than %u keys %s", SBX_YAML_MAP_ANY,
						      in_where(where, in, sizeof in));
			memcpy(names + 256 * nnames++, key, sizeof key);
		}
		char path[300];
		snprintf(path, sizeof path, "%s%s%s", where, *where ? "." : "", key);
		if (sbx_yaml_next(c) < 0 || fn(c, k, key, km, path, arg) < 0)
			return -1;
	}
	if (seen_out)
		*seen_out = seen;
	return 0;
}
