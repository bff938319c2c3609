/* sbx-serve's own parsers of bytes that come from the network or from its
 * unprivileged front: the back's request decoder (wire.c) and Connect's
 * framing, the Basic user and the end of a stream (connect.c).  The first
 * byte picks which. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "connect.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	const char *p = (const char *)data + 1;
	size_t n = size - 1;
	switch (data[0] % 4) {
	case 0: {
		struct serve_req r;
		struct sbx_err err = { 0 };
		if (serve_req_decode(p, n, &r, &err) == 0)
			serve_req_free(&r);
		break;
	}
	case 1: {
		json_t *j = serve_cx_unwrap(p, n);
		char buf[4096];
		if (j)
			serve_cx_end(buf, sizeof buf, j);
		json_decref(j);
		break;
	}
	case 2: {
		char *s = strndup(p, n), user[64];
		if (s)
			serve_cx_user(s, user, sizeof user);
		free(s);
		break;
	}
	default: {
		char buf[65536];
		size_t room = serve_cx_data_room(n < sizeof buf ? n + 100 : sizeof buf);
		serve_cx_data_event(buf, sizeof buf, "stdout", p, n < room ? n : room);
	}
	}
	return 0;
}
