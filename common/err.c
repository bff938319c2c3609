#include "err.h"

#include <errno.h>
#include <stdarg.h>
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
	if (!json) {
		fprintf(stderr, "%s: error: %s\n", prog, err->msg);
		return;
	}
	json_t *o = json_pack("{s:i, s:s, s:i, s:s}", "schema", 1, "error",
			      sbx_exit_name(err->code), "code", err->code, "message", err->msg);
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
