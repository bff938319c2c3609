/* libFuzzer target: the proxy's writer channel (proxy/wmsg.c), which its
 * root-only writer decodes from whatever the unprivileged halves send,
 * and the JSON parse it then makes of a record's fields. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wmsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned allow[] = { WMSG_ALLOW_NET, WMSG_ALLOW_PKG };
	for (size_t i = 0; i < 2; i++) {
		struct wmsg m;
		int rc = wmsg_decode(data, size, allow[i], &m);
		if (rc > 0 || rc < WMSG_TOO_LARGE)
			abort();
		if (rc < 0)
			continue;
		if (m.kind == WMSG_RECORD) {
			if (!(allow[i] & WMSG_BIT(m.type)) || m.json < (const char *)data ||
			    m.json + m.json_len != (const char *)data + size)
				abort(); /* a type the channel may not send, or fields past the message */
			json_t *f = json_loadb(m.json, m.json_len, JSON_REJECT_DUPLICATES, NULL);
			json_decref(f);
		} else if (m.kind != WMSG_BUDGET || !(allow[i] & WMSG_ALLOW_BUDGET) || size != 17) {
			abort();
		}
	}
	return 0;
}
