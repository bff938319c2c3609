/* Small helpers every module uses: cleanup attributes (as crun and
 * bubblewrap do), time, and string bounds. */
#ifndef SBX_UTIL_H
#define SBX_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <dirent.h>

static inline void sbx_freep(void *p)
{
	free(*(void **)p);
}
static inline void sbx_closep(int *fd)
{
	if (*fd >= 0)
		close(*fd);
}
static inline void sbx_fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}
static inline void sbx_closedirp(DIR **d)
{
	if (*d)
		closedir(*d);
}
#define _cleanup_free_ __attribute__((cleanup(sbx_freep)))
#define _cleanup_close_ __attribute__((cleanup(sbx_closep)))
#define _cleanup_fclose_ __attribute__((cleanup(sbx_fclosep)))
#define _cleanup_closedir_ __attribute__((cleanup(sbx_closedirp)))

static inline void *sbx_steal_ptr(void *pp)
{
	void **p = pp, *v = *p;
	*p = NULL;
	return v;
}
#define steal_pointer(pp) sbx_steal_ptr(pp)
static inline int sbx_steal_fd(int *fd)
{
	int v = *fd;
	*fd = -1;
	return v;
}

#define SBX_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

uint64_t sbx_now_ns(void);  /* CLOCK_REALTIME */
uint64_t sbx_mono_ns(void); /* CLOCK_MONOTONIC */
/* RFC 3339 UTC with milliseconds, into buf[32]. */
void sbx_fmt_time(uint64_t ns, char *buf, size_t n);
/* Write all of buf, retrying on EINTR/short writes; -1 with errno. */
int sbx_write_all(int fd, const void *buf, size_t n);
/* One sendmsg of buf with nfds (at most SBX_SEND_FDS_MAX, 0 for none) fds
 * as SCM_RIGHTS; flags as sendmsg's.  Returns what sendmsg returns. */
#define SBX_SEND_FDS_MAX 8
ssize_t sbx_sendmsg_fds(int sock, const void *buf, size_t len, const int *fds, int nfds, int flags);
/* A listening unix socket of type (SOCK_STREAM, SOCK_SEQPACKET) at path,
 * chmod'ed to mode, backlog deep;
 * a stale socket there is replaced, anything else there fails (EADDRINUSE).
 * -1 with errno (ENAMETOOLONG: too long for an address). */
int sbx_listen_unix(const char *path, int type, unsigned mode, int backlog);
/* One recvmsg (EINTR retried, MSG_CMSG_CLOEXEC) into buf (at most len
 * bytes) and the SCM_RIGHTS fds it carried into fds (at most max, the rest
 * closed; *nfds says how many).  0: the other end is gone; -1: an error,
 * or a message or fds that did not fit (its fds closed, errno EMSGSIZE). */
ssize_t sbx_recvmsg_fds(int sock, void *buf, size_t len, int *fds, int *nfds, int max);
/* Open a regular file under dirfd for reading (O_NOFOLLOW), never
 * blocking on what is not one: a FIFO put in its place by whoever owns
 * the directory (execs/ is the monitor's unprivileged half's) would hang
 * open().  -1 with errno; EINVAL: not a regular file. */
int sbx_open_regular_at(int dirfd, const char *name);
/* Read a small file under dirfd into a NUL-terminated malloc'd buffer
 * (sbx_open_regular_at: EINVAL for what is not a regular file). */
char *sbx_read_small_at(int dirfd, const char *name, size_t max, size_t *len);
/* The last few hundred bytes of a log under dirfd (AT_FDCWD: a path) on
 * one line, for messages that say what happened; "" when unreadable. */
void sbx_log_tail(int dirfd, const char *name, char *out, size_t n);
/* The same from an open file (read with pread, the offset untouched). */
void sbx_log_tail_fd(int fd, char *out, size_t n);
/* s as one field of a tab-separated line: control bytes (tab and newline
 * included) and the backslash written as C escapes (\n, \t, \\, \x1b),
 * so a value cannot break a table's rows or columns, nor reach a terminal
 * as an escape sequence.  Printable bytes and UTF-8 pass through. */
void sbx_fputs_field(const char *s, FILE *f);

/* Record fields (jansson): a string copied into out ("" when absent or
 * not a string), a non-negative integer (0 when absent or negative). */
struct json_t;
void sbx_json_str(struct json_t *o, const char *k, char *out, size_t n);
uint64_t sbx_json_u64(struct json_t *o, const char *k);

#endif
