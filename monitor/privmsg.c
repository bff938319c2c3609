/* sbx-monitor: the request channel's decoder (priv.h).  Pure, so it is
 * fuzzed alone (tests/fuzz/fuzz-priv.c): the parent runs it on whatever a
 * compromised child sends. */
#include "priv.h"
#include "proto.h"

#include <string.h>

/* The longest string each tag may carry (0: a number). */
static const uint32_t str_max[PT_MAX] = {
	[PT_TYPE] = 64,           [PT_FIELDS] = PRIV_MSG_MAX, [PT_STATE] = 16, [PT_REASON] = 256, [PT_KERNEL] = 128,
	[PT_TEXT] = PRIV_MSG_MAX, [PT_TEXT2] = PRIV_MSG_MAX,  [PT_PATH] = 400, [PT_ID] = 64,      [PT_MSG] = 1024,
	[PT_WHAT] = 64,
};

int priv_has(const struct priv_msg *m, int tag)
{
	return tag > 0 && tag < PT_MAX && (m->have & (1u << tag));
}

int priv_decode(uint8_t *buf, size_t n, size_t size, struct priv_msg *m)
{
	memset(m, 0, sizeof *m);
	for (int i = 0; i < PRIV_FDS_MAX; i++)
		m->fds[i] = -1;
	if (n < 4 || n >= size || n > PRIV_MSG_MAX)
		return -1;
	m->op = (uint32_t)buf[0] | (uint32_t)buf[1] << 8 | (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 24;
	if (!((m->op >= PRIV_READY && m->op <= PRIV_OP_MAX) || m->op == PRIV_REPLY || m->op == PRIV_PROGRESS))
		return -1;
	struct {
		uint8_t *p;
		uint32_t n;
	} s[PT_MAX] = { { 0 } };
	struct sbx_tlv_it it;
	uint16_t tag;
	const uint8_t *v;
	uint32_t len;
	int r;
	sbx_tlv_init(&it, buf + 4, n - 4);
	while ((r = sbx_tlv_next(&it, &tag, &v, &len)) == 1) {
		if (tag == 0 || tag >= PT_MAX || (m->have & (1u << tag)))
			return -1;
		m->have |= 1u << tag;
		if (!str_max[tag]) {
			if (sbx_tlv_as_u64(v, len, &m->num[tag]) < 0)
				return -1;
			continue;
		}
		if (len > str_max[tag] || memchr(v, 0, len))
			return -1;
		s[tag].p = (uint8_t *)v;
		s[tag].n = len;
	}
	if (r < 0)
		return -1;
	/* Every TLV is parsed: a string's terminator may now overwrite the
	 * first byte of the header behind it (or buf[n], which the caller
	 * keeps free). */
	for (int t = 1; t < PT_MAX; t++)
		if (s[t].p) {
			s[t].p[s[t].n] = 0;
			m->str[t] = (const char *)s[t].p;
		}
	return 0;
}
