/* The writer channel's decoder (wmsg.h): the one parser the proxy's root
 * process runs on its unprivileged halves' bytes, JSON aside. */
#include "wmsg.h"

#include <string.h>

const char *const wmsg_types[WMSG_TYPES] = { "net.connect", "net.close", "dns.query", "net.refused", "package.fetch" };

static uint64_t get_u64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

size_t wmsg_budget_encode(uint8_t out[17], uint64_t take, uint64_t give)
{
	out[0] = WMSG_BUDGET_OP;
	for (int i = 0; i < 8; i++) {
		out[1 + i] = (uint8_t)(take >> (8 * i));
		out[9 + i] = (uint8_t)(give >> (8 * i));
	}
	return 17;
}

int wmsg_decode(const uint8_t *buf, size_t n, unsigned allow, struct wmsg *m)
{
	memset(m, 0, sizeof *m);
	if (n > WMSG_MAX)
		return WMSG_TOO_LARGE;
	if (!n)
		return WMSG_MALFORMED;
	if (buf[0] == WMSG_BUDGET_OP) {
		if (n != 17)
			return WMSG_MALFORMED;
		if (!(allow & WMSG_ALLOW_BUDGET))
			return WMSG_NOT_ALLOWED;
		m->kind = WMSG_BUDGET;
		m->take = get_u64(buf + 1);
		m->give = get_u64(buf + 9);
		return 0;
	}
	const uint8_t *z = memchr(buf, 0, n);
	if (!z || z == buf)
		return WMSG_MALFORMED;
	size_t tl = (size_t)(z - buf);
	for (int t = 0; t < WMSG_TYPES; t++) {
		if (strlen(wmsg_types[t]) != tl || memcmp(buf, wmsg_types[t], tl))
			continue;
		if (!(allow & WMSG_BIT(t)))
			return WMSG_NOT_ALLOWED;
		/* An object, by its first byte: the writer parses the rest
		 * (and refuses what does not parse or is not an object). */
		if (tl + 1 >= n || z[1] != '{')
			return WMSG_MALFORMED;
		m->kind = WMSG_RECORD;
		m->type = (enum wmsg_type)t;
		m->json = (const char *)z + 1;
		m->json_len = n - tl - 1;
		return 0;
	}
	return WMSG_NOT_ALLOWED;
}
