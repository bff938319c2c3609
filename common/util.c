#include "util.h"
#include "err.h"

#include <jansson.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

uint64_t sbx_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t sbx_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void sbx_fmt_time(uint64_t ns, char *buf, size_t n)
{
	time_t t = (time_t)(ns / 1000000000u);
	struct tm tm;
	gmtime_r(&t, &tm);
	char base[24];
	strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, n, "%s.%03uZ", base, (unsigned)(ns / 1000000u % 1000u));
}

int sbx_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int sbx_open_regular_at(int dirfd, const char *name)
{
	/* O_NONBLOCK: a FIFO opens at once instead of waiting for a writer;
	 * cleared again for a file, where it means nothing anyway. */
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return -1;
	if (!S_ISREG(st.st_mode))
		return errno = EINVAL, -1;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
		return -1;
	return sbx_steal_fd(&fd);
}

char *sbx_read_small_at(int dirfd, const char *name, size_t max, size_t *len)
{
	_cleanup_close_ int fd = sbx_open_regular_at(dirfd, name);
	if (fd < 0)
		return NULL;
	struct stat st;
	if (fstat(fd, &st) < 0)
		return NULL;
	if ((size_t)st.st_size > max) {
		errno = EFBIG;
		return NULL;
	}
	char *buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return NULL;
	size_t got = 0;
	for (;;) {
		ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			free(buf);
			errno = e;
			return NULL;
		}
		if (r == 0 || (got += (size_t)r) == (size_t)st.st_size)
			break;
	}
	buf[got] = 0;
	if (len)
		*len = got;
	return buf;
}

void sbx_log_tail(int dirfd, const char *name, char *out, size_t n)
{
	out[0] = 0;
	_cleanup_close_ int fd = name ? openat(dirfd, name, O_RDONLY | O_CLOEXEC) : -1;
	sbx_log_tail_fd(fd, out, n);
}

void sbx_log_tail_fd(int fd, char *out, size_t n)
{
	out[0] = 0;
	if (fd < 0)
		return;
	char buf[400];
	struct stat sb;
	off_t end = fstat(fd, &sb) == 0 ? sb.st_size : 0;
	off_t start = end > (off_t)sizeof buf - 1 ? end - (off_t)sizeof buf + 1 : 0;
	ssize_t r = pread(fd, buf, sizeof buf - 1, start);
	if (r <= 0)
		return;
	buf[r] = 0;
	/* A cut at the start may split a UTF-8 sequence: that byte becomes '?'. */
	sbx_text_clean(buf);
	char *p = buf;
	while (*p == ' ')
		p++;
	snprintf(out, n, "%s", p);
}

void sbx_fputs_field(const char *s, FILE *f)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '\n': fputs("\\n", f); break;
		case '\t': fputs("\\t", f); break;
		case '\r': fputs("\\r", f); break;
		case '\\': fputs("\\\\", f); break;
		default:
			if (*p < 0x20 || *p == 0x7f)
				fprintf(f, "\\x%02x", *p);
			else
				putc(*p, f);
		}
	}
}

void sbx_json_str(json_t *o, const char *k, char *out, size_t n)
{
	const char *v = json_string_value(json_object_get(o, k));
	snprintf(out, n, "%s", v ? v : "");
}

uint64_t sbx_json_u64(json_t *o, const char *k)
{
	json_int_t v = json_integer_value(json_object_get(o, k));
	return v > 0 ? (uint64_t)v : 0;
}

int sbx_listen_unix(const char *path, int type, unsigned mode, int backlog)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct stat sb;
	if (strlen(path) >= sizeof a.sun_path) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(a.sun_path, path, strlen(path) + 1);
	if (lstat(path, &sb) == 0 && S_ISSOCK(sb.st_mode))
		unlink(path);
	int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || chmod(path, mode) < 0 ||
	    listen(fd, backlog) < 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

ssize_t sbx_recvmsg_fds(int sock, void *buf, size_t len, int *fds, int *nfds, int max)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	union {
		char buf[CMSG_SPACE(SBX_SEND_FDS_MAX * 2 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
	ssize_t n;
	*nfds = 0;
	while ((n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			int *p = (int *)CMSG_DATA(c);
			for (int i = 0; i < k; i++) {
				if (*nfds < max)
					fds[(*nfds)++] = p[i];
				else
					close(p[i]);
			}
		}
	if (n >= 0 && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
		return n;
	for (int i = 0; i < *nfds; i++)
		close(fds[i]);
	*nfds = 0;
	if (n >= 0)
		errno = EMSGSIZE;
	return -1;
}

ssize_t sbx_sendmsg_fds(int sock, const void *buf, size_t len, const int *fds, int nfds, int flags)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	union {
		char buf[CMSG_SPACE(SBX_SEND_FDS_MAX * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds < 0 || nfds > SBX_SEND_FDS_MAX) {
		errno = EINVAL;
		return -1;
	}
	if (nfds > 0) {
		size_t n = (size_t)nfds * sizeof(int);
		memset(&u, 0, sizeof u);
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE(n);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(n);
		memcpy(CMSG_DATA(cm), fds, n);
	}
	return sendmsg(sock, &mh, flags);
}
