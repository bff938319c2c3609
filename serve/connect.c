/* Connect RPC's framing (connect.h). */
#include "connect.h"

#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENVELOPE_MAX (1u << 20)

json_t *serve_cx_unwrap(const char *body, size_t n)
{
	if (!body || n < 5 || body[0] != 0)
		return NULL;
	const unsigned char *p = (const unsigned char *)body;
	uint32_t len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
	if (len > ENVELOPE_MAX || len != n - 5)
		return NULL;
	json_t *j = json_loadb(body + 5, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(j)) {
		json_decref(j);
		return NULL;
	}
	return j;
}

ssize_t serve_cx_envelope(char *buf, size_t max, unsigned flags, json_t *j)
{
	if (!j)
		return -1;
	size_t need = json_dumpb(j, NULL, 0, JSON_COMPACT);
	if (!need || need + 5 > max) {
		json_decref(j);
		return -1;
	}
	json_dumpb(j, buf + 5, need, JSON_COMPACT);
	json_decref(j);
	buf[0] = (char)flags;
	buf[1] = (char)(need >> 24);
	buf[2] = (char)(need >> 16);
	buf[3] = (char)(need >> 8);
	buf[4] = (char)need;
	return (ssize_t)(need + 5);
}

ssize_t serve_cx_start_event(char *buf, size_t max, unsigned pid)
{
	return serve_cx_envelope(buf, max, 0, json_pack("{s:{s:{s:i}}}", "event", "start", "pid", (int)pid));
}

ssize_t serve_cx_keepalive(char *buf, size_t max)
{
	return serve_cx_envelope(buf, max, 0, json_pack("{s:{s:{}}}", "event", "keepalive"));
}

size_t serve_cx_data_room(size_t max)
{
	/* {"event":{"data":{"stdout":"..."}}} is 36 bytes around the text */
	return max > 5 + 64 + 4 ? (max - 5 - 64) / 4 * 3 : 0;
}

/* Written here rather than by jansson: base64 needs no escaping, and
 * json_pack and json_dumpb copied, UTF-8-checked and escape-scanned every
 * byte of it again, which was two thirds of the front's CPU (1.25 s of
 * 1.9 s per 64 MiB) while a command streamed. */
ssize_t serve_cx_data_event(char *buf, size_t max, const char *which, const char *raw, size_t n)
{
	static const char head[] = "{\"event\":{\"data\":{\"", mid[] = "\":\"", tail[] = "\"}}}";
	size_t wn = strlen(which);
	if (!wn || strspn(which, "abcdefghijklmnopqrstuvwxyz") != wn || n > INT32_MAX)
		return -1;
	size_t b64 = 4 * ((n + 2) / 3);
	size_t need = sizeof head - 1 + wn + sizeof mid - 1 + b64 + sizeof tail - 1;
	if (need > ENVELOPE_MAX || 5 + need + 1 > max) /* EVP_EncodeBlock adds a NUL */
		return -1;
	char *p = buf + 5;
	memcpy(p, head, sizeof head - 1);
	p += sizeof head - 1;
	memcpy(p, which, wn);
	p += wn;
	memcpy(p, mid, sizeof mid - 1);
	p += sizeof mid - 1;
	p += EVP_EncodeBlock((unsigned char *)p, (const unsigned char *)raw, (int)n);
	memcpy(p, tail, sizeof tail - 1);
	buf[0] = 0;
	buf[1] = (char)(need >> 24);
	buf[2] = (char)(need >> 16);
	buf[3] = (char)(need >> 8);
	buf[4] = (char)need;
	return (ssize_t)(need + 5);
}

ssize_t serve_cx_end_error(char *buf, size_t max, const char *code, const char *msg)
{
	return serve_cx_envelope(buf, max, 2, json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg));
}

ssize_t serve_cx_end(char *buf, size_t max, json_t *ans)
{
	if (!json_is_true(json_object_get(ans, "ok"))) {
		const char *m = json_string_value(json_object_get(ans, "message"));
		return serve_cx_end_error(buf, max, "unavailable", m ? m : "the command's end was not reported");
	}
	int status = (int)json_integer_value(json_object_get(ans, "status"));
	int sig = (int)json_integer_value(json_object_get(ans, "signal"));
	char text[48];
	if (sig)
		snprintf(text, sizeof text, "signal: %d", sig);
	else
		snprintf(text, sizeof text, "exit status %d", status);
	ssize_t a = serve_cx_envelope(buf, max, 0,
				      json_pack("{s:{s:{s:i, s:b, s:s}}}", "event", "end", "exitCode",
						sig ? -1 : status, "exited", !sig, "status", text));
	if (a < 0)
		return -1;
	ssize_t b = serve_cx_envelope(buf + a, max - (size_t)a, 2, json_object());
	return b < 0 ? -1 : a + b;
}

int serve_cx_user(const char *authorization, char *user, size_t n)
{
	if (!authorization || strncmp(authorization, "Basic ", 6))
		return 0;
	const char *b = authorization + 6;
	size_t bl = strlen(b);
	if (!bl || bl % 4 || bl > 256)
		return 0;
	unsigned char dec[256];
	int dl = EVP_DecodeBlock(dec, (const unsigned char *)b, (int)bl);
	if (dl < 0)
		return 0;
	while (dl > 0 && b[bl - 1] == '=' && dec[dl - 1] == 0) { /* the padding's zero bytes */
		dl--;
		bl--;
	}
	size_t ul = 0;
	while (ul < (size_t)dl && dec[ul] != ':')
		ul++;
	if (!ul || ul >= n || ul == (size_t)dl)
		return 0;
	for (size_t i = 0; i < ul; i++)
		if (!((dec[i] >= 'a' && dec[i] <= 'z') || (dec[i] >= 'A' && dec[i] <= 'Z') ||
		      (dec[i] >= '0' && dec[i] <= '9') || dec[i] == '_' || dec[i] == '-' || dec[i] == '.'))
			return 0;
	memcpy(user, dec, ul);
	user[ul] = 0;
	return 1;
}
