/* A sandbox's console as E2B's logs (logs.h). */
#include "logs.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "files.h"

/* "[   12.345678] ": seconds since the guest booted, in ms; -1 if none. */
static int64_t kernel_ms(const char *s, size_t n, size_t *skip)
{
	size_t i = 0;
	if (n < 3 || s[0] != '[')
		return -1;
	for (i = 1; i < n && s[i] == ' '; i++)
		;
	uint64_t sec = 0, frac = 0;
	unsigned digits = 0, fd = 0;
	for (; i < n && s[i] >= '0' && s[i] <= '9' && digits < 9; i++, digits++)
		sec = sec * 10 + (uint64_t)(s[i] - '0');
	if (!digits || i >= n || s[i] != '.')
		return -1;
	for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++, fd++)
		if (fd < 3)
			frac = frac * 10 + (uint64_t)(s[i] - '0');
	if (!fd || i >= n || s[i] != ']')
		return -1;
	while (fd < 3) {
		frac *= 10;
		fd++;
	}
	i++;
	if (i < n && s[i] == ' ')
		i++;
	*skip = i;
	return (int64_t)(sec * 1000 + frac);
}

static json_t *iso(uint64_t ms)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	char b[40];
	if (!gmtime_r(&t, &tm))
		return json_string("1970-01-01T00:00:00.000Z");
	size_t k = strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(b + k, sizeof b - k, ".%03uZ", (unsigned)(ms % 1000));
	return json_string(b);
}

json_t *serve_logs(const char *buf, size_t n, int cut_first, uint64_t base_ms, const struct serve_logs_query *q)
{
	json_t *lines = json_array(), *entries = json_array();
	uint64_t last = base_ms;
	size_t i = 0;
	if (cut_first) {
		const char *nl = memchr(buf, '\n', n);
		i = nl ? (size_t)(nl - buf) + 1 : n;
	}
	while (i < n && lines && entries) {
		const char *s = buf + i, *nl = memchr(s, '\n', n - i);
		size_t l = nl ? (size_t)(nl - s) : n - i;
		i += l + (nl ? 1 : 0);
		while (l && (s[l - 1] == '\r' || s[l - 1] == '\n'))
			l--;
		size_t skip = 0;
		int64_t k = kernel_ms(s, l, &skip);
		if (k >= 0)
			last = base_ms + (uint64_t)k;
		if (!l || last < q->from_ms)
			continue;
		json_t *text = serve_json_bytes(s, l), *ts = iso(last);
		json_t *msg = k >= 0 ? serve_json_bytes(s + skip, l - skip) : json_incref(text);
		if (!q->v2)
			json_array_append_new(lines, json_pack("{s:O, s:O}", "timestamp", ts, "line", text));
		json_array_append_new(entries,
				      json_pack("{s:O, s:s, s:O, s:{s:s}}", "timestamp", ts, "level", "info", "message",
						msg, "fields", "source", k >= 0 ? "kernel" : "console"));
		json_decref(text);
		json_decref(ts);
		json_decref(msg);
	}
	if (!lines || !entries) {
		json_decref(lines);
		json_decref(entries);
		return NULL;
	}
	/* The limit keeps the oldest (forward) or the newest (backward: them first). */
	unsigned lim = q->limit && q->limit <= SERVE_LOGS_LIMIT ? q->limit : SERVE_LOGS_LIMIT;
	json_t *arrs[] = { lines, entries };
	for (size_t a = 0; a < 2; a++) {
		json_t *v = arrs[a], *o = json_array();
		size_t m = json_array_size(v);
		for (size_t j = 0; o && j < m && j < lim; j++)
			json_array_append(o, json_array_get(v, q->backward ? m - 1 - j : j));
		json_decref(v);
		arrs[a] = o;
	}
	if (q->v2) {
		json_decref(arrs[0]);
		return json_pack("{s:o}", "logs", arrs[1]);
	}
	return json_pack("{s:o, s:o}", "logs", arrs[0], "logEntries", arrs[1]);
}
