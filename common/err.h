/* Errors: the library never prints or exits; it fills a struct sbx_err
 * and returns -1.  The code is the process exit status main() maps it to
 * (design.md, "Exit statuses"), so one code never has two meanings. */
#ifndef SBX_ERR_H
#define SBX_ERR_H

enum sbx_exit {
	SBX_EXIT_OK = 0,
	SBX_EXIT_FALSE = 1, /* a predicate is false / nothing matched */
	SBX_EXIT_USAGE = 2,
	SBX_EXIT_INVALID = 3,  /* invalid input or policy */
	SBX_EXIT_NOENT = 4,    /* no such session/exec/snapshot */
	SBX_EXIT_CONFLICT = 5, /* ID exists with another spec */
	SBX_EXIT_UNAVAIL = 69, /* KVM or VMM unavailable */
	SBX_EXIT_INTERNAL = 70,
	SBX_EXIT_TEMPFAIL = 75, /* capacity reached or lock busy */
	/* sbx-exec's, beside the command's own statuses it passes through */
	SBX_EXIT_EXEC_TIMEOUT = 124,
	SBX_EXIT_EXEC_FAILED = 125, /* sbx-exec itself, or the session lost */
	SBX_EXIT_SIGNAL = 128       /* + N: killed (--attach: detached) by signal N */
};

struct sbx_err {
	int code;   /* enum sbx_exit */
	int errnum; /* errno, 0 if none */
	char msg[512];
	char session[72]; /* the session it concerns, if any */
	unsigned retry_after_ms;
	/* With --json, "kind" is "user" or "platform" by the code; a refusal
	 * that is neither sets its own ("tenant_quota") and names the limit
	 * in quota.  Cleared by sbx_err_set. */
	char kind[16], quota[16];
};

/* Set err (if non-NULL) and return -1.  The message should read as
 * "cannot <do what>: <detail>"; errnum's strerror is appended. */
int sbx_err_set(struct sbx_err *err, int code, int errnum, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Prefix context onto an existing message ("starting VM: ..."). */
int sbx_err_wrap(struct sbx_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *sbx_exit_name(int code);
/* Make text from elsewhere (a guest's error message, a log's tail) safe to
 * show on a terminal, in place: C0 and C1 controls and DEL become spaces,
 * bytes that are not UTF-8 become '?'.  The result is valid UTF-8 (JSON
 * can carry it) and never longer. */
void sbx_text_clean(char *s);
/* Report err on stderr for program prog: text, or one JSON object. */
void sbx_err_print(const char *prog, const struct sbx_err *err, int json);

/* A tenant over one of its quotas (sbx.yaml(5) quotas:): 75 with kind
 * "tenant_quota" and quota, "HOLDER hold USED, this one needs WANT more,
 * the quota is MAX; REMEDY", retry after 5 s.  Returns -1. */
int sbx_err_tenant_quota(struct sbx_err *err, const char *tenant, const char *quota, unsigned long long used,
			 unsigned long long want, unsigned long long max, const char *unit, const char *holder,
			 const char *remedy);

#endif
