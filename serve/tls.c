/* sbx-serve's TLS material (tls.h). */
#include "tls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <microhttpd.h>

#include "util.h"

#define CERT_MAX (256u << 10) /* a chain of a few certificates is some KiB */
#define KEY_MAX (64u << 10)

/* path's bytes, NUL-terminated, into *out; a key must be root's alone.
 * The mode is read from the open file, so it is the file read. */
static int read_pem(const char *what, const char *path, int is_key, char **out, size_t *len, struct sbx_err *err)
{
	_cleanup_close_ int fd = sbx_open_regular_at(AT_FDCWD, path);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		int e = errno;
		if (e == ELOOP)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "TLS %s %s is a symbolic link", what, path);
		if (e == EINVAL)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "TLS %s %s is not a regular file", what, path);
		return sbx_err_set(err, SBX_EXIT_INVALID, e, "cannot open the TLS %s %s", what, path);
	}
	if (is_key && (st.st_uid != 0 || (st.st_mode & 077)))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "TLS key %s is owned by uid %u with mode %04o: it must be root's and readable by "
				   "no one else (chown root; chmod 600)",
				   path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
	if (st.st_size <= 0 || (size_t)st.st_size > (is_key ? KEY_MAX : CERT_MAX))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "TLS %s %s is %s (%lld bytes; at most %u)", what, path,
				   st.st_size <= 0 ? "empty" : "too large", (long long)st.st_size,
				   is_key ? KEY_MAX : CERT_MAX);
	size_t n = (size_t)st.st_size, got = 0;
	char *buf = malloc(n + 1);
	if (!buf)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the TLS %s %s", what, path);
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	buf[got] = 0;
	/* libmicrohttpd takes the PEM as a string: a NUL in it would cut it */
	const char *why = got < n ? "was cut short as it was read" : memchr(buf, 0, got) ? "is not PEM" : NULL;
	if (why) {
		explicit_bzero(buf, n + 1);
		free(buf);
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "TLS %s %s %s", what, path, why);
	}
	*out = buf;
	*len = got;
	return 0;
}

int serve_tls_load(struct serve_tls *t, const char *cert_path, const char *key_path, struct sbx_err *err)
{
	memset(t, 0, sizeof *t);
	if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0,
				   "this libmicrohttpd was built without TLS: serve.tls cannot be served");
	if (read_pem("certificate", cert_path, 0, &t->cert, &t->cert_n, err) < 0 ||
	    read_pem("key", key_path, 1, &t->key, &t->key_n, err) < 0) {
		serve_tls_wipe(t);
		return -1;
	}
	return 0;
}

/* libmicrohttpd's first message (why the start failed; what follows says
 * what failed with it) into cls, a char[LOG_MAX], on one line. */
#define LOG_MAX 256
__attribute__((format(printf, 2, 0))) static void start_log(void *cls, const char *fmt, va_list ap)
{
	char *msg = cls;
	if (msg[0])
		return;
	vsnprintf(msg, LOG_MAX, fmt, ap);
	msg[strcspn(msg, "\n")] = 0;
}

static enum MHD_Result no_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
				  const char *version, const char *upload, size_t *upload_n, void **ctx)
{
	(void)cls, (void)c, (void)url, (void)method, (void)version, (void)upload, (void)upload_n, (void)ctx;
	return MHD_NO;
}

int serve_tls_check(const struct serve_tls *t, struct sbx_err *err)
{
	char msg[LOG_MAX] = "";
	/* the logger first, or MHD says so with its own */
	struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_NO_LISTEN_SOCKET | MHD_USE_TLS | MHD_USE_ERROR_LOG, 0, NULL,
						NULL, no_request, NULL, MHD_OPTION_EXTERNAL_LOGGER, start_log, msg,
						MHD_OPTION_HTTPS_MEM_CERT, t->cert, MHD_OPTION_HTTPS_MEM_KEY, t->key,
						MHD_OPTION_HTTPS_PRIORITIES, SERVE_TLS_PRIORITIES, MHD_OPTION_END);
	if (!d)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "the TLS certificate and key are not usable: %s",
				   msg[0] ? msg : "libmicrohttpd refused them");
	MHD_stop_daemon(d);
	return 0;
}

void serve_tls_wipe(struct serve_tls *t)
{
	if (t->key)
		explicit_bzero(t->key, t->key_n);
	free(t->key);
	free(t->cert);
	memset(t, 0, sizeof *t);
}
