/* sbx-serve's own parsers of bytes that come from the network, from its
 * unprivileged front or from a guest: the back's request decoder (wire.c)
 * and Connect's framing, the Basic user and the end of a stream
 * (connect.c); the filesystem calls' arguments and paths, the guest's
 * records of its files and its watcher's records, each as the event
 * envelope the front makes of it (fsparse.c).  The first byte picks which. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>

#include "connect.h"
#include "query.h"
#include "files.h"
#include "logs.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	const char *p = (const char *)data + 1;
	size_t n = size - 1;
	switch (data[0] % 8) {
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
	case 4: { /* a guest's records, listed under a base or not */
		char real[256];
		struct sbx_err err = { 0 };
		json_t *a = serve_fs_parse(p, n, (data[0] & 0x80) ? "/home/user" : NULL, 1000, real, sizeof real, &err);
		if (a) {
			char *t = json_dumps(a, JSON_COMPACT);
			if (!t) /* every string the parser makes is JSON */
				abort();
			free(t);
		}
		json_decref(a);
		break;
	}
	case 5: { /* a client's path */
		char out[SERVE_FS_PATH_MAX];
		if (serve_fs_path(p, n, "/home/user", out, sizeof out) == 0 && out[0] != '/')
			abort();
		break;
	}
	case 6: { /* a call's args as the front sends them */
		json_t *j = json_loadb(p, n, 0, NULL);
		struct serve_fs_args *a = malloc(sizeof *a);
		struct sbx_err err = { 0 };
		if (a)
			serve_fs_args_decode(j, (data[0] & 0x80) ? "root" : "user", data[0] & 0x40, a, &err);
		free(a);
		json_decref(j);
		break;
	}
	case 7: { /* the list's filters: metadata, then state, split at the first NUL */
		static const char *const states[] = { "running", "paused", "running,paused", "x" };
		char *q = strndup(p, n);
		json_t *list = json_pack("[{s:s, s:{s:s}}, {s:s, s:{}}]", "state", "running", "metadata", "k", "v",
					 "state", "paused", "metadata");
		const char *why = NULL;
		json_t *out = q && list ? serve_list_filter(list, q, states[(data[0] >> 4) & 3], &why) : NULL;
		if (!out && q && list && !why)
			abort();
		json_decref(out);
		json_decref(list);
		free(q);
		break;
	}
	case 3:
		if ((data[0] & 0xc0) == 0xc0) { /* a host user's command and its signals (the CLI socket) */
			struct sbx_err err = { 0 };
			json_t *r = serve_cli_request(p, n, &err);
			if (r && !serve_cli_prog_ok(json_string_value(json_array_get(json_object_get(r, "argv"), 0))))
				abort();
			json_decref(r);
			serve_cli_signal(p, n);
			break;
		}
		if (data[0] & 0x80) { /* a guest watcher's output, as the back and front take it */
			size_t off = 0, used;
			json_t *ev;
			struct sbx_err err = { 0 };
			static char env[32768]; /* the front's block: every event must fit */
			while (serve_watch_record(p + off, n - off, &used, &ev, &err) == 1) {
				if (!used || used > n - off)
					abort();
				off += used;
				json_t *name = json_object_get(ev, "name");
				if (name && serve_cx_envelope(env, sizeof env, 0,
							      json_pack("{s:{s:O, s:O}}", "filesystem", "name", name,
									"type", json_object_get(ev, "type"))) < 0)
					abort();
				if (!name && !json_is_true(json_object_get(ev, "start")))
					abort();
				json_decref(ev);
			}
			break;
		}
		if (data[0] & 0x40) { /* a guest's console as logs */
			struct serve_logs_query q = { .from_ms = data[0] & 0x20 ? 1000 : 0,
						      .limit = data[0] & 0x10 ? 3 : 0,
						      .backward = data[0] & 0x08,
						      .v2 = data[0] & 0x04 };
			json_t *j = serve_logs(p, n, data[0] & 0x02, 1700000000000ull, &q);
			char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
			if (j && !t) /* every string made is JSON */
				abort();
			free(t);
			json_decref(j);
			break;
		}
		/* fall through */
	default: {
		/* Any output makes one envelope that reads back as JSON whose
		 * base64 decodes to those very bytes. */
		static char buf[65536];
		static unsigned char back[65536];
		size_t room = serve_cx_data_room(sizeof buf), take = n < room ? n : room;
		ssize_t k = serve_cx_data_event(buf, sizeof buf, "stdout", p, take);
		if (k < 0)
			abort();
		json_t *j = serve_cx_unwrap(buf, (size_t)k);
		const char *b64 = json_string_value(
			json_object_get(json_object_get(json_object_get(j, "event"), "data"), "stdout"));
		size_t bn = b64 ? strlen(b64) : 0;
		int dn = b64 ? EVP_DecodeBlock(back, (const unsigned char *)b64, (int)bn) : -1;
		/* EVP_DecodeBlock counts the padding's zero bytes too */
		size_t pad = bn >= 2 ? (size_t)(b64[bn - 1] == '=') + (b64[bn - 2] == '=') : 0;
		if (dn < 0 || (size_t)dn - pad != take || memcmp(back, p, take))
			abort();
		json_decref(j);
	}
	}
	return 0;
}
