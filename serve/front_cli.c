/* The CLI socket (sbx-serve(8), USERS): a host user's sbx-exec, sbx-cp...
 * run by a user other than root connects here (cli.c) and sends its
 * command with its stdin, stdout, stderr and working directory.  The
 * front reads that (it is the user's bytes: the unprivileged half parses
 * them, wire.c), hands the back a checked request with the user's
 * connection (whose peer credentials say who it is) and the four fds, and
 * then relays: the user's signals one way, how the command ended the
 * other.  A thread per connection, like the HTTP side. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "front.h"
#include "serve.h"
#include "util.h"
#include "wire.h"

#define CLI_CONNS_MAX 256
#define CLI_FIRST_MS 10000 /* for the command to arrive */

static int cli_ctl = -1;
static unsigned cli_live;

/* How it ended, for the user's side: {"exit": N[, "error": TEXT]}. */
static void tell(int fd, int code, const char *msg)
{
	json_t *j = json_pack("{s:i}", "exit", code);
	if (j && msg)
		json_object_set_new(j, "error", json_string(msg));
	char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
	if (t)
		serve_send(fd, t, strlen(t), NULL, 0);
	free(t);
	json_decref(j);
}

/* The back's answers until the last one: {"ok": true, "exit": N} once the
 * command ended, or {"ok": false, "code": N, "message": TEXT}. */
static void relay(int fd, int sv)
{
	for (;;) {
		struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = sv, .events = POLLIN } };
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		char buf[4096];
		int fds[4];
		unsigned nfds = 0;
		if (p[1].revents) {
			ssize_t n = serve_recv(sv, buf, sizeof buf, fds, &nfds, 0);
			json_t *j = n > 0 ? json_loadb(buf, (size_t)n, 0, NULL) : NULL;
			if (!j) {
				tell(fd, SBX_EXIT_INTERNAL, "the service ended the command's call");
				return;
			}
			json_t *ex = json_object_get(j, "exit");
			if (json_is_true(json_object_get(j, "ok")) && json_is_integer(ex))
				tell(fd, (int)json_integer_value(ex), NULL);
			else
				tell(fd,
				     json_is_integer(json_object_get(j, "code"))
					     ? (int)json_integer_value(json_object_get(j, "code"))
					     : SBX_EXIT_INTERNAL,
				     json_string_value(json_object_get(j, "message")));
			json_decref(j);
			return;
		}
		if (p[0].revents) {
			ssize_t n = serve_recv(fd, buf, sizeof buf, fds, &nfds, 4);
			for (unsigned i = 0; i < nfds; i++)
				close(fds[i]);
			if (n <= 0) /* the user's side is gone: the back hangs the command up */
				return;
			int s = serve_cli_signal(buf, (size_t)n);
			char fwd[32];
			if (s &&
			    serve_send(sv, fwd, (size_t)snprintf(fwd, sizeof fwd, "{\"signal\":%d}", s), NULL, 0) < 0)
				return;
		}
	}
}

static void *cli_conn(void *arg)
{
	int fd = (int)(intptr_t)arg, io[4], nio = 0, sv[2] = { -1, -1 };
	unsigned nfds = 0;
	char *buf = malloc(SERVE_CLI_MSG_MAX + 1), *t = NULL;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct sbx_err err = { 0 };
	json_t *req = NULL;
	if (!buf || poll(&p, 1, CLI_FIRST_MS) != 1)
		goto out;
	ssize_t n = serve_recv(fd, buf, SERVE_CLI_MSG_MAX + 1, io, &nfds, 4);
	nio = (int)nfds;
	if (n <= 0)
		goto out;
	if (nfds != 4) {
		tell(fd, SBX_EXIT_INVALID, "a command comes with 4 fds: stdin, stdout, stderr, its directory");
		goto out;
	}
	if (!(req = serve_cli_request(buf, (size_t)n, &err))) {
		tell(fd, err.code ? err.code : SBX_EXIT_INVALID, err.msg);
		goto out;
	}
	t = json_dumps(req, JSON_COMPACT);
	if (!t || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		tell(fd, SBX_EXIT_INTERNAL, "out of resources");
		goto out;
	}
	int pass[6] = { sv[1], fd, io[0], io[1], io[2], io[3] };
	if (serve_send(cli_ctl, t, strlen(t), pass, 6) < 0) {
		tell(fd, SBX_EXIT_INTERNAL, "the service's back is gone");
		goto out;
	}
	close(sv[1]);
	sv[1] = -1;
	for (int i = 0; i < nio; i++)
		close(io[i]);
	nio = 0;
	relay(fd, sv[0]);
out:
	for (int i = 0; i < nio; i++)
		close(io[i]);
	if (sv[0] >= 0)
		close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	json_decref(req);
	free(t);
	free(buf);
	close(fd);
	__atomic_sub_fetch(&cli_live, 1, __ATOMIC_RELAXED);
	return NULL;
}

static void *cli_accept(void *arg)
{
	int lfd = (int)(intptr_t)arg;
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
				usleep(100000);
				continue;
			}
			return NULL;
		}
		if (__atomic_add_fetch(&cli_live, 1, __ATOMIC_RELAXED) > CLI_CONNS_MAX) {
			tell(fd, SBX_EXIT_TEMPFAIL, "too many commands at once; try again");
			close(fd);
			__atomic_sub_fetch(&cli_live, 1, __ATOMIC_RELAXED);
			continue;
		}
		pthread_t th;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&at, 256 << 10);
		if (pthread_create(&th, &at, cli_conn, (void *)(intptr_t)fd) != 0) {
			close(fd);
			__atomic_sub_fetch(&cli_live, 1, __ATOMIC_RELAXED);
		}
		pthread_attr_destroy(&at);
	}
}

int serve_front_cli_start(int listen_fd, int ctl)
{
	cli_ctl = ctl;
	pthread_t th;
	return pthread_create(&th, NULL, cli_accept, (void *)(intptr_t)listen_fd) == 0 ? 0 : -1;
}
