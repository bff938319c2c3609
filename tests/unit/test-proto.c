/* Unit tests for the wire codec (TAP). */
#include <stdio.h>
#include <string.h>

#include "proto.h"
#include "err.h"

#include "tap.h"

/* Guest text shown to people: no control bytes, valid UTF-8. */
static void test_text_clean(void)
{
	char a[] =
		"ok\x1b]0;t\x07\x1b[2Jred\r\n\x7f\x9b\xc2\x9b\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xc0\xaf\xed\xa0\x80z";
	sbx_text_clean(a);
	ok(!strcmp(a, "ok ]0;t  [2Jred   ? \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80?????z"),
	   "sbx_text_clean: C0, DEL and C1 become spaces, UTF-8 kept, the rest '?'");
	char b[] = "\xe2\x82";
	sbx_text_clean(b);
	ok(!strcmp(b, "??"), "a sequence cut short is not UTF-8");
}

int main(void)
{
	test_text_clean();
	struct sbx_buf b = { 0 };
	char *argv[] = { "sh", "-c", "echo hi", NULL };
	char *env[] = { "A=1", "B=", NULL };
	struct sbx_exec_req r = { .argv = argv,
				  .argc = 3,
				  .env = env,
				  .envc = 2,
				  .cwd = "/tmp",
				  .timeout_ms = 1500,
				  .flags = SBX_EXEC_PTY,
				  .rows = 24,
				  .cols = 80,
				  .have_uid = 1,
				  .uid = 0,
				  .rlimits = { { 7, 1024, 1048576 }, { 4, 0, ~0ull } },
				  .nrlimits = 2 };
	ok(sbx_exec_req_encode(&b, 7, &r) == 0, "encode exec");
	struct sbx_frame f;
	ok(sbx_frame_hdr_get(b.data, &f, SBX_FRAME_MAX) == 0, "header parses");
	ok(f.type == SBX_F_EXEC && f.stream == 7 && f.len == b.len - SBX_FRAME_HDR, "header fields");
	struct sbx_exec_req d;
	const char *why = NULL;
	ok(sbx_exec_req_decode(b.data + SBX_FRAME_HDR, f.len, &d, &why) == 0, "decode exec");
	ok(d.argc == 3 && !strcmp(d.argv[2], "echo hi") && d.argv[3] == NULL, "argv round trip");
	ok(d.envc == 2 && !strcmp(d.env[1], "B="), "env round trip");
	ok(!strcmp(d.cwd, "/tmp") && d.timeout_ms == 1500 && d.flags == SBX_EXEC_PTY, "fields round trip");
	ok(d.rows == 24 && d.cols == 80 && d.have_uid && d.uid == 0 && !d.have_gid, "tty and uid");
	ok(d.nrlimits == 2 && d.rlimits[0].resource == 7 && d.rlimits[0].soft == 1024 && d.rlimits[0].hard == 1048576 &&
		   d.rlimits[1].resource == 4 && d.rlimits[1].hard == ~0ull,
	   "rlimits round trip (infinity too)");
	sbx_exec_req_free(&d);

	/* every truncation of a valid payload is rejected or decodes cleanly */
	int crashed = 0;
	for (uint32_t cut = 0; cut < f.len; cut++) {
		if (sbx_exec_req_decode(b.data + SBX_FRAME_HDR, cut, &d, &why) == 0)
			sbx_exec_req_free(&d);
	}
	ok(!crashed, "truncated payloads handled");

	uint8_t hdr[SBX_FRAME_HDR];
	sbx_frame_hdr_put(hdr, 99, 1, 0);
	ok(sbx_frame_hdr_get(hdr, &f, SBX_FRAME_MAX) < 0, "unknown type rejected");
	sbx_frame_hdr_put(hdr, SBX_F_PING, 1, SBX_FRAME_MAX + 1);
	ok(sbx_frame_hdr_get(hdr, &f, SBX_FRAME_MAX) < 0, "oversized length rejected");
	sbx_frame_hdr_put(hdr, SBX_F_PING, 1, 10);
	hdr[6] = 1;
	ok(sbx_frame_hdr_get(hdr, &f, SBX_FRAME_MAX) < 0, "reserved bits rejected");

	struct sbx_buf p = { 0 };
	sbx_tlv_str(&p, SBX_T_ARGV, "a");
	sbx_tlv_u32(&p, 999, 1);
	ok(sbx_exec_req_decode(p.data, p.len, &d, &why) < 0 && strstr(why, "unknown"), "unknown tag rejected");
	sbx_buf_reset(&p);
	sbx_tlv_put(&p, SBX_T_ARGV, "a\0b", 3);
	ok(sbx_exec_req_decode(p.data, p.len, &d, &why) < 0, "embedded NUL rejected");
	sbx_buf_reset(&p);
	sbx_tlv_str(&p, SBX_T_ENV, "NOEQUALS");
	sbx_tlv_str(&p, SBX_T_ARGV, "a");
	ok(sbx_exec_req_decode(p.data, p.len, &d, &why) < 0, "env without = rejected");
	sbx_buf_reset(&p);
	sbx_tlv_str(&p, SBX_T_CWD, "/x");
	ok(sbx_exec_req_decode(p.data, p.len, &d, &why) < 0 && strstr(why, "empty"), "empty argv rejected");
	sbx_buf_reset(&p);
	sbx_tlv_str(&p, SBX_T_ARGV, "a");
	sbx_tlv_str(&p, SBX_T_CWD, "relative");
	ok(sbx_exec_req_decode(p.data, p.len, &d, &why) < 0, "relative cwd rejected");
	sbx_buf_reset(&p);
	sbx_tlv_str(&p, SBX_T_ARGV, "a");
	sbx_tlv_put(&p, SBX_T_TIMEOUT_MS, "\1\2", 2);
	ok(sbx_exec_req_decode(p.data, p.len, &d, &why) < 0, "short integer rejected");
	sbx_buf_reset(&p);
	uint8_t huge[6] = { SBX_T_ARGV, 0, 0xff, 0xff, 0xff, 0x7f };
	ok(sbx_exec_req_decode(huge, sizeof huge, &d, &why) < 0, "length beyond payload rejected");
	for (unsigned i = 0; i < SBX_MAX_ARGS + 1; i++)
		sbx_tlv_str(&p, SBX_T_ARGV, "x");
	ok(sbx_exec_req_decode(p.data, p.len, &d, &why) < 0, "too many arguments rejected");
	static const struct {
		uint8_t v[20];
		uint32_t n;
		const char *why;
	} rl[] = {
		{ { 16 }, 20, "out of range" },                                    /* RLIMIT_NLIMITS and beyond */
		{ { 7, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1 }, 20, "out of range" }, /* soft 2 > hard 1 */
		{ { 7 }, 12, "wrong size" },
	};
	for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) {
		sbx_buf_reset(&p);
		sbx_tlv_str(&p, SBX_T_ARGV, "a");
		sbx_tlv_put(&p, SBX_T_RLIMIT, rl[i].v, rl[i].n);
		ok(sbx_exec_req_decode(p.data, p.len, &d, &why) < 0 && strstr(why, rl[i].why), rl[i].why);
	}
	sbx_buf_reset(&p);
	sbx_tlv_str(&p, SBX_T_ARGV, "a");
	sbx_tlv_put(&p, SBX_T_RLIMIT, (uint8_t[20]){ 7 }, 20);
	sbx_tlv_put(&p, SBX_T_RLIMIT, (uint8_t[20]){ 7 }, 20);
	ok(sbx_exec_req_decode(p.data, p.len, &d, &why) < 0 && strstr(why, "twice"), "an rlimit given twice rejected");

	struct sbx_exit_info e = { .status = 137,
				   .signo = 9,
				   .reason = SBX_R_TIMEOUT,
				   .wall_us = 123,
				   .mem_peak = 1ull << 40 },
			     e2;
	sbx_buf_reset(&b);
	sbx_exit_encode(&b, 3, &e);
	ok(sbx_exit_decode(b.data + SBX_FRAME_HDR, b.len - SBX_FRAME_HDR, &e2) == 0 && e2.status == 137 &&
		   e2.reason == SBX_R_TIMEOUT && e2.mem_peak == 1ull << 40 && e2.wall_us == 123,
	   "exit round trip");
	e.reason = 77;
	sbx_buf_reset(&b);
	sbx_exit_encode(&b, 3, &e);
	ok(sbx_exit_decode(b.data + SBX_FRAME_HDR, b.len - SBX_FRAME_HDR, &e2) < 0, "unknown reason rejected");
	e.reason = SBX_R_EXITED;
	e.status = 300;
	sbx_buf_reset(&b);
	sbx_exit_encode(&b, 3, &e);
	ok(sbx_exit_decode(b.data + SBX_FRAME_HDR, b.len - SBX_FRAME_HDR, &e2) < 0, "status > 255 rejected");
	e.status = 1;
	e.disk_full = SBX_DISK_FULL_SCRATCH | SBX_DISK_FULL_VOLUME;
	sbx_buf_reset(&b);
	sbx_exit_encode(&b, 3, &e);
	ok(sbx_exit_decode(b.data + SBX_FRAME_HDR, b.len - SBX_FRAME_HDR, &e2) == 0 && e2.disk_full == 3,
	   "disk_full round trip");
	e.disk_full = 4;
	sbx_buf_reset(&b);
	sbx_exit_encode(&b, 3, &e);
	ok(sbx_exit_decode(b.data + SBX_FRAME_HDR, b.len - SBX_FRAME_HDR, &e2) < 0,
	   "an unknown disk_full bit rejected");
	ok(!strcmp(sbx_reason_name(SBX_R_SESSION_LOST), "session-lost") && !strcmp(sbx_reason_name(99), "unknown"),
	   "reason names");

	/* sbx-port's request and listing (SBX_F_PORT) */
	struct sbx_port_req pr = { .op = SBX_PORT_OPEN, .port = 8080 }, pr2;
	snprintf(pr.addr, sizeof pr.addr, "127.0.0.1:0");
	sbx_buf_reset(&b);
	sbx_port_req_encode(&b, &pr);
	ok(sbx_frame_hdr_get(b.data, &f, SBX_FRAME_MAX) == 0 && f.type == SBX_F_PORT &&
		   sbx_port_req_decode(b.data + SBX_FRAME_HDR, f.len, &pr2, &why) == 0 && pr2.op == SBX_PORT_OPEN &&
		   pr2.port == 8080 && !strcmp(pr2.addr, "127.0.0.1:0"),
	   "port request round trip");
	struct {
		const uint8_t *p;
		size_t n;
		const char *what;
	} lies[] = {
		{ (const uint8_t *)"\x23\x00\x04\x00\x00\x00\x09\x00\x00\x00", 10, "an unknown op" },
		{ (const uint8_t *)"\x23\x00\x04\x00\x00\x00\x01\x00\x00\x00", 10, "OPEN without port and address" },
		{ (const uint8_t *)"\x23\x00\x04\x00\x00\x00\x02\x00\x00\x00", 10, "RM without port or address" },
		{ (const uint8_t *)"\x23\x00\x04\x00\x00\x00\x03\x00\x00\x00\x2c\x00\x04\x00\x00\x00\x00\x00\x00\x00",
		  20, "port 0" },
		{ (const uint8_t *)"\x23\x00\x04\x00\x00\x00\x03\x00\x00\x00\x2c\x00\x04\x00\x00\x00\x00\x00\x01\x00",
		  20, "port 65536" },
		{ (const uint8_t *)"\x23\x00\x04\x00\x00\x00\x03\x00\x00\x00\x23\x00\x04\x00\x00\x00\x03\x00\x00\x00",
		  20, "a repeated op" },
		{ (const uint8_t *)"\x23\x00\x04\x00\x00\x00\x02\x00\x00\x00\x2d\x00\x03\x00\x00\x00a\x00b", 19,
		  "an address with a NUL" },
		{ (const uint8_t *)"\x23\x00\x04\x00\x00\x00\x03\x00\x00\x00\x18\x00\x01\x00\x00\x00x", 17,
		  "an unknown tag" },
		{ (const uint8_t *)"\x23\x00\x04\x00\x00\x00\x03\x00\x00", 9, "a truncated TLV" },
		{ (const uint8_t *)"", 0, "no op" },
	};
	int refused = 0;
	for (size_t i = 0; i < sizeof lies / sizeof *lies; i++) {
		int no = sbx_port_req_decode(lies[i].p, lies[i].n, &pr2, &why) < 0;
		refused += no;
		if (!no)
			printf("#   accepted: %s\n", lies[i].what);
	}
	ok(refused == (int)(sizeof lies / sizeof *lies), "port requests that lie are refused");
	char longaddr[SBX_PORT_ADDR_MAX + 8];
	memset(longaddr, 'a', sizeof longaddr - 1);
	longaddr[sizeof longaddr - 1] = 0;
	sbx_buf_reset(&p);
	sbx_tlv_u32(&p, SBX_T_OP, SBX_PORT_RM);
	sbx_tlv_str(&p, SBX_T_ADDR, longaddr);
	ok(sbx_port_req_decode(p.data, p.len, &pr2, &why) < 0, "an address past SBX_PORT_ADDR_MAX is refused");

	struct sbx_port_entry pe[3] = { { .port = 80, .conns = 2, .accepted = 5, .refused = 1 }, { .port = 443 } },
			      got[2];
	snprintf(pe[0].addr, sizeof pe[0].addr, "127.0.0.1:1234");
	snprintf(pe[1].addr, sizeof pe[1].addr, "unix:/x.sock");
	uint32_t op;
	sbx_buf_reset(&p);
	sbx_tlv_u32(&p, SBX_T_OP, SBX_PORT_LIST);
	sbx_port_entry_put(&p, &pe[0]);
	sbx_tlv_str(&p, SBX_T_MSG, "connection refused");
	sbx_port_entry_put(&p, &pe[1]);
	ok(sbx_port_list_decode(p.data, p.len, &op, got, 2, &why) == 2 && op == SBX_PORT_LIST && got[0].port == 80 &&
		   got[0].accepted == 5 && got[0].refused == 1 && !strcmp(got[1].addr, "unix:/x.sock"),
	   "port listing round trip, a last error between entries");
	ok(sbx_port_list_decode(p.data, p.len, &op, got, 1, &why) < 0, "more entries than room are refused");
	sbx_buf_reset(&p);
	sbx_tlv_u32(&p, SBX_T_OP, SBX_PORT_LIST);
	sbx_tlv_u32(&p, SBX_T_CONNS, 3);
	ok(sbx_port_list_decode(p.data, p.len, &op, got, 2, &why) < 0, "a field before any entry's PORT is refused");
	sbx_frame_hdr_put(hdr, SBX_F_PORT_CLOSE, 7, 0);
	ok(sbx_frame_hdr_get(hdr, &f, SBX_FRAME_MAX) == 0, "PORT_* frame types are known");
	sbx_frame_hdr_put(hdr, SBX_F_TYPE_MAX + 1, 7, 0);
	ok(sbx_frame_hdr_get(hdr, &f, SBX_FRAME_MAX) < 0, "one past the last type is not");

	sbx_buf_free(&b);
	sbx_buf_free(&p);
	printf("1..%d\n", n);
	return failed != 0;
}
