#include "err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

int sbx_err_set(struct sbx_err *err, int code, int errnum, const char *fmt, ...)
{
	if (!err)
		return -1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	va_end(ap);
	err->code = code;
	err->errnum = errnum;
	err->retry_after_ms = code == SBX_EXIT_TEMPFAIL ? 1000 : 0;
	err->kind[0] = err->quota[0] = 0;
	if (errnum) {
		size_t l = strlen(err->msg);
		snprintf(err->msg + l, sizeof err->msg - l, ": %s", strerror(errnum));
	}
	return -1;
}

int sbx_err_wrap(struct sbx_err *err, const char *fmt, ...)
{
	if (!err)
		return -1;
	char pre[256], old[sizeof err->msg];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof pre, fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof old);
	snprintf(err->msg, sizeof err->msg, "%s: %s", pre, old);
	return -1;
}

/* The length of the UTF-8 sequence at p (1-4), 0 when it is not one
 * (overlong, a surrogate, past U+10FFFF, or cut short); *cp its value. */
static size_t utf8_seq(const unsigned char *p, uint32_t *cp)
{
	size_t n = p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 && p[0] < 0xe0 ? 2 : 0;
	if (!n || p[0] > 0xf4)
		return 0;
	uint32_t v = p[0] & (0x7fu >> n);
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		v = v << 6 | (p[i] & 0x3fu);
	}
	if ((n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10ffff)) || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return n;
}

void sbx_text_clean(char *s)
{
	unsigned char *r = (unsigned char *)s, *w = r;
	while (*r) {
		uint32_t cp = 0;
		size_t n;
		if (*r < 0x20 || *r == 0x7f) {
			*w++ = ' ';
			r++;
		} else if (*r < 0x80) {
			*w++ = *r++;
		} else if (!(n = utf8_seq(r, &cp))) {
			*w++ = '?';
			r++;
		} else if (cp < 0xa0) { /* C1: CSI, OSC, ... as 8-bit codes */
			*w++ = ' ';
			r += n;
		} else {
			memmove(w, r, n);
			w += n;
			r += n;
		}
	}
	*w = 0;
}

const char *sbx_exit_name(int code)
{
	switch (code) {
	case SBX_EXIT_OK: return "ok";
	case SBX_EXIT_FALSE: return "false";
	case SBX_EXIT_USAGE: return "usage";
	case SBX_EXIT_INVALID: return "invalid";
	case SBX_EXIT_NOENT: return "not-found";
	case SBX_EXIT_CONFLICT: return "conflict";
	case SBX_EXIT_UNAVAIL: return "unavailable";
	case SBX_EXIT_TEMPFAIL: return "temporary";
	default: return "internal";
	}
}

void sbx_err_print(const char *prog, const struct sbx_err *err, int json)
{
	/* A message may quote a guest (its error, its console): never let it
	 * drive the operator's terminal. */
	char msg[sizeof err->msg];
	snprintf(msg, sizeof msg, "%s", err->msg);
	sbx_text_clean(msg);
	if (!json) {
		fprintf(stderr, "%s: error: %s\n", prog, msg);
		return;
	}
	json_t *o = json_pack("{s:i, s:s, s:i, s:s}", "schema", 1, "error", sbx_exit_name(err->code), "code", err->code,
			      "message", msg);
	if (o && err->session[0])
		json_object_set_new(o, "session", json_string(err->session));
	if (o && err->errnum)
		json_object_set_new(o, "errno", json_string(strerror(err->errnum)));
	if (o && err->retry_after_ms)
		json_object_set_new(o, "retry_after_ms", json_integer(err->retry_after_ms));
	/* "user" errors are the caller's to fix; "platform" errors are the host's. */
	if (o && err->kind[0])
		json_object_set_new(o, "kind", json_string(err->kind));
	else if (o)
		json_object_set_new(o, "kind",
				    json_string(err->code == SBX_EXIT_UNAVAIL || err->code == SBX_EXIT_INTERNAL ||
								err->code == SBX_EXIT_TEMPFAIL
							? "platform"
							: "user"));
	if (o && err->quota[0])
		json_object_set_new(o, "quota", json_string(err->quota));
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	fprintf(stderr, "%s\n", s ? s : "{\"error\":\"internal\",\"code\":70}");
	free(s);
	json_decref(o);
}

int sbx_err_tenant_quota(struct sbx_err *err, const char *tenant, const char *quota, unsigned long long used,
			 unsigned long long want, unsigned long long max, const char *unit, const char *holder,
			 const char *remedy)
{
	sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0,
		    "tenant quota reached (%s of this tenant, %s: %s hold %llu%s, this one needs %llu%s more, the "
		    "quota is %llu%s); %s",
		    quota, tenant, holder, used, unit, want, unit, max, unit, remedy);
	if (err) {
		snprintf(err->kind, sizeof err->kind, "tenant_quota");
		snprintf(err->quota, sizeof err->quota, "%s", quota);
		err->retry_after_ms = 5000;
	}
	return -1;
}
