/* Sizes and durations (units.h). */
#include "units.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Rejecting what YAML versions disagree on keeps one meaning per file. */
int sbx_parse_digits(const char **sp, uint64_t *out)
{
	const char *s = *sp;
	uint64_t v = 0;
	if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9'))
		return errno = EINVAL, -1;
	for (; *s >= '0' && *s <= '9'; s++) {
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return errno = ERANGE, -1;
		v = v * 10 + d;
	}
	*sp = s;
	*out = v;
	return 0;
}

int sbx_parse_uint(const char *s, uint64_t *out)
{
	if (sbx_parse_digits(&s, out) < 0)
		return -1;
	return *s ? (errno = EINVAL, -1) : 0;
}

int sbx_parse_uint_max(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t v;
	if (sbx_parse_uint(s, &v) < 0)
		return -1;
	if (v > max)
		return errno = ERANGE, -1;
	*out = v;
	return 0;
}

int sbx_parse_size(const char *s, uint64_t *out)
{
	uint64_t v, mult = 1;
	if (sbx_parse_digits(&s, &v) < 0)
		return -1;
	/* Binary multiples whatever the spelling: "2GB" meaning 2*10^9 next to
	 * "2G" meaning 2*2^30 would be a trap in a limits file. */
	switch (*s) {
	case 'K':
	case 'k': mult = KIB; break;
	case 'M':
	case 'm': mult = MIB; break;
	case 'G':
	case 'g': mult = GIB; break;
	case 'T':
	case 't': mult = TIB; break;
	}
	if (mult > 1 && *++s == 'i')
		s++;
	if (*s == 'B')
		s++;
	if (*s)
		return errno = EINVAL, -1;
	if (v > UINT64_MAX / mult)
		return errno = ERANGE, -1;
	*out = v * mult;
	return 0;
}

int sbx_parse_duration_ms(const char *s, uint64_t *out)
{
	uint64_t v, mult;
	if (sbx_parse_digits(&s, &v) < 0)
		return -1;
	if (!*s || !strcmp(s, "s"))
		mult = SEC;
	else if (!strcmp(s, "ms"))
		mult = 1;
	else if (!strcmp(s, "m"))
		mult = MINUTE;
	else if (!strcmp(s, "h"))
		mult = HOUR;
	else if (!strcmp(s, "d"))
		mult = DAY;
	else
		return errno = EINVAL, -1;
	if (v > UINT64_MAX / mult)
		return errno = ERANGE, -1;
	*out = v * mult;
	return 0;
}

int sbx_parse_milli(const char *s, uint64_t *out)
{
	uint64_t v, frac = 0;
	if (sbx_parse_digits(&s, &v) < 0)
		return -1;
	if (*s == '.') {
		unsigned nd = 0;
		for (s++; *s >= '0' && *s <= '9'; s++, nd++) {
			if (nd == 3)
				return errno = EINVAL, -1;
			frac = frac * 10 + (unsigned)(*s - '0');
		}
		if (!nd)
			return errno = EINVAL, -1;
		for (; nd < 3; nd++)
			frac *= 10;
	}
	if (*s)
		return errno = EINVAL, -1;
	if (v > (UINT64_MAX - frac) / 1000)
		return errno = ERANGE, -1;
	*out = v * 1000 + frac;
	return 0;
}

void sbx_fmt_size(char *b, size_t n, uint64_t v)
{
	static const char u[] = "KMGT";
	int i = -1;
	while (i < 3 && v && v % 1024 == 0) {
		v /= 1024;
		i++;
	}
	if (i < 0)
		snprintf(b, n, "%llu", (unsigned long long)v);
	else
		snprintf(b, n, "%llu%c", (unsigned long long)v, u[i]);
}

void sbx_fmt_duration(char *b, size_t n, uint64_t ms)
{
	static const struct {
		uint64_t mult;
		const char *sfx;
	} u[] = {
		{ DAY, "d" },
		{ HOUR, "h" },
		{ MINUTE, "m" },
		{ SEC, "s" },
	};
	for (size_t i = 0; i < SBX_ARRAY_LEN(u); i++)
		if (ms && ms % u[i].mult == 0) {
			snprintf(b, n, "%llu%s", (unsigned long long)(ms / u[i].mult), u[i].sfx);
			return;
		}
	snprintf(b, n, "%llums", (unsigned long long)ms);
}
