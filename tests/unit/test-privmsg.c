/* The monitor's request decoder (monitor/privmsg.c): what the privileged
 * half accepts from the unprivileged one, and what it refuses. */
#include <string.h>

#include "priv.h"
#include "proto.h"
#include "tap.h"

static uint8_t buf[PRIV_MSG_MAX + 1];

static size_t msg(struct sbx_buf *b, uint32_t op)
{
	uint8_t h[4] = { (uint8_t)op, (uint8_t)(op >> 8), (uint8_t)(op >> 16), (uint8_t)(op >> 24) };
	sbx_buf_reset(b);
	sbx_buf_put(b, h, 4);
	return b->len;
}

static int decode(const struct sbx_buf *b, struct priv_msg *m)
{
	memcpy(buf, b->data, b->len);
	return priv_decode(buf, b->len, sizeof buf, m);
}

int main(void)
{
	struct sbx_buf b = { 0 };
	struct priv_msg m;

	msg(&b, PRIV_AUDIT);
	sbx_tlv_str(&b, PT_TYPE, "exec.start");
	sbx_tlv_str(&b, PT_FIELDS, "{\"exec\":\"e1\"}");
	sbx_tlv_u64(&b, PT_FLAG, 1);
	ok(decode(&b, &m) == 0, "a request decodes");
	ok(m.op == PRIV_AUDIT && !strcmp(m.str[PT_TYPE], "exec.start") &&
		   !strcmp(m.str[PT_FIELDS], "{\"exec\":\"e1\"}"),
	   "its op and strings, each terminated");
	ok(priv_has(&m, PT_FLAG) && m.num[PT_FLAG] == 1 && !priv_has(&m, PT_STATE), "its number, and what it lacks");
	ok(m.nfds == 0 && m.fds[0] == -1, "no descriptors");

	msg(&b, PRIV_RECORD);
	sbx_tlv_str(&b, PT_STATE, "");
	sbx_tlv_str(&b, PT_KERNEL, "6.1");
	ok(decode(&b, &m) == 0 && !strcmp(m.str[PT_STATE], "") && !strcmp(m.str[PT_KERNEL], "6.1"),
	   "an empty string before another");

	msg(&b, PRIV_NET_ATTACH);
	ok(decode(&b, &m) == 0 && m.op == PRIV_NET_ATTACH && !m.have, "a claim's network: a request with no field");
	msg(&b, PRIV_REPLY);
	sbx_tlv_u64(&b, PT_CODE, 0);
	sbx_tlv_u64(&b, PT_NUM_A, 3);
	sbx_tlv_u64(&b, PT_PROXY_PID, 4242);
	sbx_tlv_u64(&b, PT_PROXY_START, 123456789);
	ok(decode(&b, &m) == 0 && m.num[PT_PROXY_PID] == 4242 && m.num[PT_PROXY_START] == 123456789 &&
		   m.num[PT_NUM_A] == 3,
	   "its answer: the proxy's pid and start time, how many fds are the proxy's");
	msg(&b, PRIV_REPLY);
	sbx_tlv_str(&b, PT_PROXY_PID, "4242");
	ok(decode(&b, &m) < 0, "the proxy's pid is a number, not a string");

	msg(&b, 0);
	ok(decode(&b, &m) < 0, "op 0 is refused");
	msg(&b, PRIV_OP_MAX + 1);
	ok(decode(&b, &m) < 0, "an unknown op is refused");
	ok(priv_decode(buf, 3, sizeof buf, &m) < 0, "a message shorter than its op is refused");

	msg(&b, PRIV_AUDIT);
	sbx_tlv_str(&b, PT_TYPE, "a");
	sbx_tlv_str(&b, PT_TYPE, "b");
	ok(decode(&b, &m) < 0, "a tag twice is refused");

	msg(&b, PRIV_AUDIT);
	sbx_tlv_str(&b, PT_MAX, "x");
	ok(decode(&b, &m) < 0, "an unknown tag is refused");

	msg(&b, PRIV_DESTROY);
	sbx_tlv_u32(&b, PT_FLAG, 1);
	ok(decode(&b, &m) < 0, "a number of 4 bytes is refused");

	msg(&b, PRIV_AUDIT);
	sbx_tlv_put(&b, PT_TYPE, "a\0b", 3);
	ok(decode(&b, &m) < 0, "a string with a NUL is refused");

	char big[80];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = 0;
	msg(&b, PRIV_AUDIT);
	sbx_tlv_str(&b, PT_TYPE, big);
	ok(decode(&b, &m) < 0, "a string longer than its tag allows is refused");

	msg(&b, PRIV_AUDIT);
	sbx_tlv_str(&b, PT_TYPE, "exec.end");
	b.len -= 2;
	ok(decode(&b, &m) < 0, "a truncated TLV is refused");

	msg(&b, PRIV_AUDIT);
	sbx_tlv_str(&b, PT_TYPE, "exec.end");
	memcpy(buf, b.data, b.len);
	ok(priv_decode(buf, b.len, b.len, &m) < 0, "a buffer with no room for the terminator is refused");

	sbx_buf_free(&b);
	return tap_done();
}
