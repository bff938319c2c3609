/* Unit tests for the wire codec (TAP). */
#include <stdio.h>
#include <string.h>

#include "proto.h"
#include "err.h"

#include "tap.h"

/* Guest text shown to people: no control bytes, valid UTF-8. */
static void test_text_clean(void)
{
	char a[] = "ok\x1b]0;t\x07\x1b[2Jred\r\n\x7f\x9b\xc2\x9b\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xc0\xaf\xed\xa0\x80z";
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
	struct sbx_exec_req r = { .argv = argv, .argc = 3, .env = env, .envc = 2, .cwd = "/tmp",
				  .timeout_ms = 1500, .flags = SBX_EXEC_PTY, .rows = 24, .cols = 80,
				  .have_uid = 1, .uid = 0 };
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

	struct sbx_exit_info e = { .status = 137, .signo = 9, .reason = SBX_R_TIMEOUT, .wall_us = 123,
				   .mem_peak = 1ull << 40 }, e2;
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
	ok(sbx_exit_decode(b.data + SBX_FRAME_HDR, b.len - SBX_FRAME_HDR, &e2) < 0, "an unknown disk_full bit rejected");
	ok(!strcmp(sbx_reason_name(SBX_R_SESSION_LOST), "session-lost") && !strcmp(sbx_reason_name(99), "unknown"),
	   "reason names");
	sbx_buf_free(&b);
	sbx_buf_free(&p);
	printf("1..%d\n", n);
	return failed != 0;
}
