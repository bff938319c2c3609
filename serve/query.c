/* The control API's list filters (query.h). */
#include "query.h"

#include <stdlib.h>
#include <string.h>

#define PAIRS_MAX 32
#define TEXT_MAX 2048

static int hexval(char c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
				      : -1;
}

/* s[0..n) percent-decoded ('+' is a space, as URLSearchParams writes it)
 * into out (n + 1 bytes); -1 for a bad escape or a NUL. */
static int pct_decode(const char *s, size_t n, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c == '%') {
			if (i + 2 >= n)
				return -1;
			int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
			if (h < 0 || l < 0)
				return -1;
			c = (char)(h * 16 + l);
			i += 2;
		} else if (c == '+') {
			c = ' ';
		}
		if (!c)
			return -1;
		out[o++] = c;
	}
	out[o] = 0;
	return 0;
}

struct pair {
	char *k, *v;
};

static int parse_pairs(const char *q, struct pair *p, unsigned *np)
{
	*np = 0;
	size_t n = strlen(q);
	if (n > TEXT_MAX)
		return -1;
	for (const char *s = q; *s;) {
		size_t l = strcspn(s, "&");
		const char *eq = memchr(s, '=', l);
		if (l && (!eq || *np == PAIRS_MAX))
			return -1;
		if (l) {
			size_t kl = (size_t)(eq - s), vl = l - kl - 1;
			p[*np].k = malloc(kl + 1);
			p[*np].v = malloc(vl + 1);
			if (!p[*np].k || !p[*np].v || pct_decode(s, kl, p[*np].k) < 0 ||
			    pct_decode(eq + 1, vl, p[*np].v) < 0) {
				free(p[*np].k);
				free(p[*np].v);
				return -1;
			}
			(*np)++;
		}
		s += l;
		if (*s == '&')
			s++;
	}
	return 0;
}

/* state: "running", "paused", comma-separated; a bit each. */
static int parse_states(const char *q, unsigned *mask)
{
	*mask = 0;
	for (const char *s = q; *s;) {
		size_t l = strcspn(s, ",");
		if (l == 7 && !strncmp(s, "running", 7))
			*mask |= 1;
		else if (l == 6 && !strncmp(s, "paused", 6))
			*mask |= 2;
		else
			return -1;
		s += l;
		if (*s == ',')
			s++;
	}
	return 0;
}

json_t *serve_list_filter(json_t *list, const char *metadata, const char *state, const char **why)
{
	struct pair p[PAIRS_MAX];
	unsigned np = 0, mask = 3;
	if (metadata && parse_pairs(metadata, p, &np) < 0) {
		for (unsigned i = 0; i < np; i++) {
			free(p[i].k);
			free(p[i].v);
		}
		*why = "metadata: expected KEY=VALUE pairs joined by &, percent-encoded";
		return NULL;
	}
	if (state && *state && parse_states(state, &mask) < 0) {
		for (unsigned i = 0; i < np; i++) {
			free(p[i].k);
			free(p[i].v);
		}
		*why = "state: expected running, paused or both, comma-separated";
		return NULL;
	}
	json_t *out = json_array(), *s;
	size_t i;
	json_array_foreach (list, i, s) {
		const char *st = json_string_value(json_object_get(s, "state"));
		int ok = st && (((mask & 1) && !strcmp(st, "running")) || ((mask & 2) && !strcmp(st, "paused")));
		json_t *md = json_object_get(s, "metadata");
		for (unsigned k = 0; ok && k < np; k++) {
			const char *v = json_string_value(json_object_get(md, p[k].k));
			ok = v && !strcmp(v, p[k].v);
		}
		if (ok)
			json_array_append(out, s);
	}
	for (unsigned k = 0; k < np; k++) {
		free(p[k].k);
		free(p[k].v);
	}
	return out;
}
