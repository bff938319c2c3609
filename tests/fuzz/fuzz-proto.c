/* libFuzzer target: everything the monitor parses from a guest or a
 * client (frame headers, EXEC requests, EXIT reports, SECRETS, TLV strings,
 * sbx-port's requests and listings). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0;
	while (size - off >= SBX_FRAME_HDR) {
		struct sbx_frame f;
		if (sbx_frame_hdr_get(data + off, &f, SBX_FRAME_MAX) < 0)
			break;
		off += SBX_FRAME_HDR;
		size_t n = f.len < size - off ? f.len : size - off;
		const uint8_t *p = data + off;
		struct sbx_exec_req r;
		const char *why;
		if (sbx_exec_req_decode(p, n, &r, &why) == 0) {
			struct sbx_buf b = { 0 };
			sbx_exec_req_encode(&b, 1, &r);
			sbx_buf_free(&b);
			sbx_exec_req_free(&r);
		}
		struct sbx_exit_info e;
		sbx_exit_decode(p, n, &e);
		struct sbx_secret_ref sec[SBX_SECRETS_MAX];
		int ns = sbx_secrets_decode(p, n, sec, &why);
		for (int i = 0; i < ns; i++)
			if (sec[i].len && (sec[i].value < p || sec[i].value + sec[i].len > p + n))
				abort(); /* a value must lie inside the payload */
		struct sbx_port_req pr;
		if (sbx_port_req_decode(p, n, &pr, &why) == 0 &&
		    (!pr.op || pr.op > SBX_PORT_OP_MAX || pr.port > 65535 ||
		     memchr(pr.addr, 0, sizeof pr.addr) == NULL))
			abort(); /* a decoded request holds only what was checked */
		struct sbx_port_entry pe[4];
		uint32_t op;
		int np = sbx_port_list_decode(p, n, &op, pe, 4, &why);
		if (np > 4)
			abort();
		struct sbx_tlv_it it;
		uint16_t tag;
		const uint8_t *v;
		uint32_t vn;
		char s[64];
		uint64_t u;
		sbx_tlv_init(&it, p, n);
		while (sbx_tlv_next(&it, &tag, &v, &vn) == 1) {
			sbx_tlv_as_str(v, vn, s, sizeof s);
			sbx_tlv_as_u64(v, vn, &u);
		}
		off += n;
	}
	return 0;
}
