/* The package cache's names and encodings (pkgcache.h): what a project,
 * package, version and file name may be, the percent, hex and base64
 * the requests and registries use, and a growing buffer. */
#include "pkgc.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ------------------------------------------------------------------ */

int sbx_pep503_normalize(const char *name, char *out, size_t n)
{
	size_t len = strlen(name), o = 0;
	if (!len || len > 200 || n < 2)
		return -1;
	/* PEP 508: letters and digits at both ends, ".-_" between. */
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!alnum && !(i > 0 && i < len - 1 && strchr("._-", c)))
			return -1;
		if (!alnum) {
			if (o && out[o - 1] == '-')
				continue;
			c = '-';
		} else if (c >= 'A' && c <= 'Z') {
			c = (char)(c - 'A' + 'a');
		}
		if (o + 1 >= n)
			return -1;
		out[o++] = c;
	}
	out[o] = 0;
	return 0;
}

/* npm package names: "name" or "@scope/name", URL-safe characters only. */
int pc_npm_name_ok(const char *s)
{
	size_t len = strlen(s);
	if (!len || len > 214)
		return 0;
	const char *name = s;
	if (*s == '@') {
		const char *sl = strchr(s, '/');
		if (!sl || sl == s + 1 || strchr(sl + 1, '/'))
			return 0;
		for (const char *q = s + 1; q < sl; q++)
			if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
			      strchr("-._~", *q)))
				return 0;
		if (s[1] == '.' || s[1] == '_')
			return 0;
		name = sl + 1;
	}
	if (!*name || *name == '.' || *name == '_')
		return 0;
	for (const char *q = name; *q; q++)
		if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
		      strchr("-._~", *q)))
			return 0;
	return 1;
}

/* Versions (npm semver, PEP 440) and file names end up in URLs and paths
 * we write: a plain character set, no leading dot. */
static int plain_ok(const char *s, size_t max, const char *extra)
{
	size_t len = strlen(s);
	if (!len || len > max || *s == '.')
		return 0;
	for (const char *q = s; *q; q++)
		if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
		      strchr(extra, *q)))
			return 0;
	return 1;
}

int pc_version_ok(const char *s)
{
	return plain_ok(s, 128, ".+-_~!");
}
int pc_filename_ok(const char *s)
{
	return plain_ok(s, FILE_NAME_MAX, ".+-_~!");
}

static int unhex(int c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
				      : -1;
}

/* Percent-decode one path segment into out; -1 on a bad escape, a NUL or
 * a control character, or when it does not fit. */
int pc_pct_decode(const char *s, size_t len, char *out, size_t n)
{
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		int c = (unsigned char)s[i];
		if (c == '%') {
			if (i + 2 >= len)
				return -1;
			int h = unhex(s[i + 1]), l = unhex(s[i + 2]);
			if (h < 0 || l < 0)
				return -1;
			c = h * 16 + l;
			i += 2;
		}
		if (c < 0x20 || c == 0x7f || o + 1 >= n)
			return -1;
		out[o++] = (char)c;
	}
	out[o] = 0;
	return 0;
}

void pc_to_hex(const uint8_t *d, size_t n, char *out)
{
	static const char x[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = x[d[i] >> 4];
		out[2 * i + 1] = x[d[i] & 15];
	}
	out[2 * n] = 0;
}

int pc_hex_ok(const char *s, size_t len)
{
	if (strlen(s) != len)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

/* Standard base64 (npm's integrity), into at most n bytes; the length, or
 * -1. */
int pc_b64_decode(const char *s, uint8_t *out, size_t n)
{
	static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	uint32_t acc = 0;
	int bits = 0;
	size_t o = 0;
	for (; *s && *s != '='; s++) {
		const char *p = memchr(a, *s, 64);
		if (!p || !*s)
			return -1;
		acc = (acc << 6) | (uint32_t)(p - a);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (o >= n)
				return -1;
			out[o++] = (uint8_t)(acc >> bits);
		}
	}
	while (*s == '=')
		s++;
	return *s ? -1 : (int)o;
}

/* ---- a growing buffer ---------------------------------------------------- */

void pc_sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t nc = b->cap ? b->cap : 4096;
		while (nc < b->n + n + 1)
			nc *= 2;
		char *p = realloc(b->p, nc);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = nc;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
}
