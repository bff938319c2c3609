#include "portfwd.h"
#include "hostpath.h"
#include "monclient.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define REPLY_TIMEOUT_S 30

/* 0-65535, digits only. */
static int parse_port(const char *s, unsigned *out)
{
	unsigned v = 0;
	if (!*s || strlen(s) > 5)
		return -1;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		v = v * 10 + (unsigned)(*p - '0');
	}
	if (v > 65535)
		return -1;
	*out = v;
	return 0;
}

/* "127.0.0.1:PORT", "[::1]:PORT", "localhost:PORT": loopback only, as a
 * numeric address (no name lookups beyond "localhost"). */
static int parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *sl, struct sbx_err *err)
{
	const char *colon = strrchr(s, ':');
	char host[64];
	unsigned port;
	memset(ss, 0, sizeof *ss);
	if (!colon || (size_t)(colon - s) >= sizeof host || parse_port(colon + 1, &port) < 0)
		return sbx_err_set(err, SBX_EXIT_USAGE, 0,
				   "--listen '%s': expected ADDRESS:PORT (127.0.0.1:8080, [::1]:0)", s);
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = 0;
	if (!strcmp(host, "localhost"))
		snprintf(host, sizeof host, "127.0.0.1");
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	size_t hl = strlen(host);
	if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
		if ((ntohl(s4->sin_addr.s_addr) >> 24) != 127)
			goto public;
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		*sl = sizeof *s4;
		return 0;
	}
	if (hl > 2 && host[0] == '[' && host[hl - 1] == ']') {
		host[hl - 1] = 0;
		if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) == 1) {
			if (!IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
				goto public;
			s6->sin6_family = AF_INET6;
			s6->sin6_port = htons((uint16_t)port);
			*sl = sizeof *s6;
			return 0;
		}
	}
	return sbx_err_set(err, SBX_EXIT_INVALID, 0, "--listen '%s': not a numeric loopback address", s);

      public:
	return sbx_err_set(err, SBX_EXIT_INVALID, 0,
			   "--listen '%s': only a loopback address (127.0.0.0/8, ::1) may be bound, never a public one",
			   s);
}

static int bind_tcp(const char *tenant, const char *spec, struct sbx_err *err)
{
	struct sockaddr_storage ss;
	socklen_t sl = 0;
	if (parse_listen(spec ? spec : "127.0.0.1:0", &ss, &sl, err) < 0)
		return -1;
	/* The well-known ports are the host's services' (review r3, N7). */
	unsigned port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
						      : ((struct sockaddr_in6 *)&ss)->sin6_port);
	if (tenant && *tenant && port && port < 1024)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "--listen '%s': ports below 1024 are the operator's, not a tenant's", spec);
	int one = 1, fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* a port in TIME_WAIT only */
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 128) < 0) {
		int e = errno;
		close(fd);
		return sbx_err_set(err,
				   e == EADDRINUSE ? SBX_EXIT_CONFLICT
				   : e == EACCES   ? SBX_EXIT_INVALID
						   : SBX_EXIT_INTERNAL,
				   e, "cannot listen on %s", spec ? spec : "127.0.0.1:0");
	}
	return fd;
}

/* --unix PATH, as any host path a caller names (hostpath.h): never under
 * sbx's state, and a tenant's beneath a host_paths.write root with no
 * symbolic link below it (review r3, N7).  hp holds its directory. */
static int bind_unix(const char *tenant, const char *path, struct sbx_hostpath *hp, char *abs, size_t cap,
		     struct sbx_err *err)
{
	if (sbx_hostpath_resolve(tenant, path, SBX_HOSTPATH_WRITE | SBX_HOSTPATH_MAY_BE_MISSING, "--unix", hp, err) < 0)
		return -1;
	if ((size_t)snprintf(abs, cap, "%s", hp->real) >= cap)
		return sbx_err_set(err, SBX_EXIT_INVALID, ENAMETOOLONG, "--unix %s: the path is too long", path);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(abs) >= sizeof a.sun_path || strlen(abs) + 6 > SBX_PORT_ADDR_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "--unix %s: the path is too long for a unix socket (%zu bytes at most)", path,
				   sizeof a.sun_path - 1);
	memcpy(a.sun_path, abs, strlen(abs) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "socket");
	/* bind never replaces what is there: an existing path is 5. */
	if (SBX_AS_CALLER(bind(fd, (struct sockaddr *)&a, sizeof a)) < 0) {
		int e = errno;
		close(fd);
		return sbx_err_set(err,
				   e == EADDRINUSE              ? SBX_EXIT_CONFLICT
				   : e == ENOENT || e == EACCES ? SBX_EXIT_INVALID
								: SBX_EXIT_INTERNAL,
				   e, "cannot create the unix socket %s", abs);
	}
	/* The bind went by the path, which the monitor checks the socket
	 * against (getsockname): a directory swapped for a link since the
	 * resolution would have put it elsewhere.  Then it is not where hp
	 * holds, and is refused (and left: its name is not ours to remove). */
	struct stat sb;
	if (fstatat(hp->dir_fd, hp->rel, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISSOCK(sb.st_mode)) {
		close(fd);
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "--unix %s: the path changed while the socket was made",
				   path);
	}
	if (listen(fd, 128) < 0) {
		int e = errno;
		close(fd);
		SBX_AS_CALLER(unlinkat(hp->dir_fd, hp->rel, 0));
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot listen on %s", abs);
	}
	return fd;
}

/* A PORT reply, as request() wants it. */
struct reply {
	const char *session;
	uint32_t *op;
	struct sbx_port_entry *out;
	size_t *n;
	char (*errors)[160];
};

static int reply_frame(void *ctx, struct sbx_mon *m, const struct sbx_frame *f, struct sbx_err *err)
{
	struct reply *x = ctx;
	if (f->type == SBX_F_ERROR)
		return sbx_mon_error(f, "the session refused", err);
	if (f->type != SBX_F_PORT)
		return 0; /* the monitor's HELLO */
	const char *why;
	struct sbx_port_entry tmp[SBX_PORTFWD_LIST_MAX];
	int k = sbx_port_list_decode(f->payload, f->len, x->op, x->out ? x->out : tmp, SBX_PORTFWD_LIST_MAX, &why);
	if (k < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "session %s: %s", x->session, why);
	if (x->n)
		*x->n = (size_t)k;
	if (x->errors) {
		/* MSG after an entry: its last connection error. */
		struct sbx_tlv_it it;
		uint16_t tag;
		const uint8_t *v;
		uint32_t vn;
		int idx = -1;
		for (int i = 0; i < k; i++)
			x->errors[i][0] = 0;
		sbx_tlv_init(&it, f->payload, f->len);
		while (sbx_tlv_next(&it, &tag, &v, &vn) == 1)
			if (tag == SBX_T_PORT)
				idx++;
			else if (tag == SBX_T_MSG && idx >= 0 && sbx_tlv_as_str(v, vn, x->errors[idx], 160) == 0)
				sbx_text_clean(x->errors[idx]);
	}
	return 1;
}

/* Send one PORT request (with fd as SCM_RIGHTS when >= 0) and wait for
 * the PORT reply; the monitor's HELLO is skipped. */
static int request(struct sbx_state *st, const char *session, const struct sbx_port_req *r, int fd, uint32_t *op,
		   struct sbx_port_entry *out, size_t *n, char (*errors)[160], struct sbx_err *err)
{
	_cleanup_mon_ struct sbx_mon m = { .fd = -1 };
	struct reply x = { session, op, out, n, errors };
	if (sbx_id_check(session, "session", err) < 0 || sbx_mon_open(st, session, &m, err) < 0)
		return -1;
	sbx_port_req_encode(&m.out, r);
	if (sbx_mon_send(&m, fd) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot send the request to session %s", session);
	if (sbx_mon_loop(&m, REPLY_TIMEOUT_S * 1000, reply_frame, NULL, &x, err) > 0)
		return 0;
	switch (m.fail) {
	case SBX_MON_GARBAGE: return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "malformed reply from session %s", session);
	case SBX_MON_LATE: return sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "session %s did not answer", session);
	case SBX_MON_LOST: return sbx_err_set(err, SBX_EXIT_NOENT, 0, "session %s ended", session);
	default: return -1;
	}
}

int sbx_port_open(struct sbx_state *st, const char *session, unsigned guest_port, const char *spec,
		  const char *unix_path, struct sbx_port_entry *out, struct sbx_err *err)
{
	char abs[SBX_PORT_ADDR_MAX] = "";
	struct sbx_port_req r = { .op = SBX_PORT_OPEN, .port = guest_port };
	size_t n = 0;
	uint32_t op;
	if (sbx_id_check(session, "session", err) < 0)
		return -1;
	if (!guest_port || guest_port > 65535)
		return sbx_err_set(err, SBX_EXIT_USAGE, 0, "the guest port must be 1-65535");
	_cleanup_hostpath_ struct sbx_hostpath hp = { .dir_fd = -1 };
	const char *tenant = sbx_state_tenant(st);
	int fd = unix_path ? bind_unix(tenant, unix_path, &hp, abs, sizeof abs, err) : bind_tcp(tenant, spec, err);
	if (fd < 0)
		return -1;
	if (unix_path)
		snprintf(r.addr, sizeof r.addr, "unix:%s", abs);
	else
		snprintf(r.addr, sizeof r.addr, "%s", spec ? spec : "127.0.0.1:0");
	struct sbx_port_entry got[SBX_PORTFWD_LIST_MAX];
	int rc = request(st, session, &r, fd, &op, got, &n, NULL, err);
	close(fd); /* the monitor has its own copy now, or none */
	if (rc == 0 && (op != SBX_PORT_OPEN || n != 1))
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "session %s gave an unexpected reply", session);
	if (rc < 0) {
		if (unix_path)
			SBX_AS_CALLER(unlinkat(hp.dir_fd, hp.rel, 0)); /* ours, just made: nothing is left behind */
		return -1;
	}
	*out = got[0];
	return 0;
}

int sbx_port_rm(struct sbx_state *st, const char *session, const char *target, struct sbx_err *err)
{
	struct sbx_port_req r = { .op = SBX_PORT_RM };
	unsigned port;
	uint32_t op;
	if (parse_port(target, &port) == 0 && port) {
		r.port = port;
	} else if (!strncmp(target, "unix:", 5) || strchr(target, ':')) {
		if (strlen(target) >= sizeof r.addr)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "'%s' is too long for an address", target);
		snprintf(r.addr, sizeof r.addr, "%s", target);
	} else {
		char abs[SBX_PORT_ADDR_MAX - 5], cwd[4096];
		if (target[0] == '/')
			snprintf(abs, sizeof abs, "%s", target);
		else if (!getcwd(cwd, sizeof cwd) ||
			 (size_t)snprintf(abs, sizeof abs, "%s/%s", cwd, target) >= sizeof abs)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "'%s' is not a guest port or an address", target);
		snprintf(r.addr, sizeof r.addr, "unix:%s", abs);
	}
	return request(st, session, &r, -1, &op, NULL, NULL, NULL, err);
}

int sbx_port_list(struct sbx_state *st, const char *session, struct sbx_port_entry *out, size_t *n, char (*errors)[160],
		  struct sbx_err *err)
{
	struct sbx_port_req r = { .op = SBX_PORT_LIST };
	uint32_t op;
	*n = 0;
	return request(st, session, &r, -1, &op, out, n, errors, err);
}

json_t *sbx_port_recorded(struct sbx_state *st, const char *session)
{
	json_t *out = json_array(), *a = NULL, *e;
	size_t i;
	if (sbx_id_check(session, "session", NULL) < 0)
		return out;
	int dfd = openat(st->sessions_fd, session, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	char *txt = dfd >= 0 ? sbx_read_small_at(dfd, "ports.json", 64 << 10, NULL) : NULL;
	if (dfd >= 0)
		close(dfd);
	a = txt ? json_loads(txt, JSON_REJECT_DUPLICATES, NULL) : NULL;
	free(txt);
	json_array_foreach (a, i, e) {
		json_t *p = json_object_get(e, "guest_port"), *ad = json_object_get(e, "address"),
		       *u = json_object_get(e, "uid");
		if (i >= SBX_PORTFWD_LIST_MAX || !json_is_integer(p) || !json_is_string(ad) || !json_is_integer(u))
			break;
		json_array_append_new(out, json_pack("{s:O, s:O, s:O}", "guest_port", p, "address", ad, "uid", u));
	}
	json_decref(a);
	return out;
}
