/* sbx-serve: E2B's API over sbx (sbx-serve(8)).
 *   sbx-serve [--listen ADDR:PORT] [--socket PATH] [--tls-cert FILE --tls-key FILE]
 *   sbx-serve key add --tenant TENANT | --operator
 *   sbx-serve key list [--json]
 *   sbx-serve key rm ID */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "jail.h"
#include "keys.h"
#include "serve.h"
#include "tls.h"
#include "util.h"

static const char usage[] = "usage: sbx-serve [--listen ADDR:PORT] [--socket PATH] [--tls-cert FILE --tls-key FILE]\n"
			    "       sbx-serve key add (--tenant TENANT | --operator)\n"
			    "       sbx-serve key list [--json]\n"
			    "       sbx-serve key rm ID\n";

static volatile int stop;
static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static int key_main(int argc, char **argv)
{
	struct sbx_state st;
	struct sbx_err err = { 0 };
	int json = 0, op = argc > 1 ? (!strcmp(argv[1], "add")    ? 1
				       : !strcmp(argv[1], "list") ? 2
				       : !strcmp(argv[1], "rm")   ? 3
								  : 0)
				    : 0;
	const char *tenant = NULL;
	int operator= 0;
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--operator"))
			operator= 1;
		else if (!strcmp(argv[i], "--tenant") && i + 1 < argc)
			tenant = argv[++i];
		else if (op == 3 && i == argc - 1 && argv[i][0] != '-')
			;
		else
			return sbx_cli_usage(usage, 0);
	}
	if (!op || (op == 1 && !!tenant == operator) || (op == 3 && (argc != 3 || argv[2][0] == '-')))
		return sbx_cli_usage(usage, 0);
	if (tenant && sbx_tenant_check(tenant, &err) < 0)
		return sbx_cli_fail("sbx-serve", err.code, json, "%s", err.msg);
	if (sbx_state_open(&st, &err) < 0)
		return sbx_cli_fail("sbx-serve", err.code, json, "%s", err.msg);
	if (op == 1) {
		char key[SERVE_KEY_LEN + 1], id[SERVE_KEY_ID_LEN + 1];
		if (serve_key_add(&st, tenant, key, id, &err) < 0)
			return sbx_cli_fail("sbx-serve", err.code, json, "%s", err.msg);
		printf("%s\n", key);
		fprintf(stderr, "sbx-serve: key %s for %s%s (shown this once)\n", id,
			tenant ? "tenant " : "the operator", tenant ? tenant : "");
		return fflush(stdout) == 0 ? 0 : SBX_EXIT_INTERNAL;
	}
	if (op == 3)
		return serve_key_rm(&st, argv[2], &err) < 0 ? sbx_cli_fail("sbx-serve", err.code, json, "%s", err.msg)
							    : 0;
	json_t *list;
	if (serve_key_list(&st, &list, &err) < 0)
		return sbx_cli_fail("sbx-serve", err.code, json, "%s", err.msg);
	size_t i;
	json_t *k;
	if (json) {
		json_dumpf(list, stdout, JSON_COMPACT);
		putchar('\n');
	} else {
		printf("ID\tTENANT\tCREATED\n");
		json_array_foreach (list, i, k) {
			const char *t = json_string_value(json_object_get(k, "tenant"));
			printf("%s\t%s\t%lld\n", json_string_value(json_object_get(k, "id")), t && *t ? t : "-",
			       (long long)json_integer_value(json_object_get(k, "created")));
		}
	}
	json_decref(list);
	return fflush(stdout) == 0 ? 0 : SBX_EXIT_INTERNAL;
}

/* The unix socket at path (a stale one replaced), for anyone to connect
 * to: who they are is read from the connection. */
static int listen_unix(const char *path, struct sbx_err *err)
{
	int fd = sbx_listen_unix(path, SOCK_STREAM, 0666, 512);
	return fd >= 0 ? fd : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot listen on %s", path);
}

/* The CLI socket: a SOCK_SEQPACKET one (a command and its fds are one
 * message), for anyone to connect to, as the other. */
static int listen_cli(const char *path, struct sbx_err *err)
{
	int fd = sbx_listen_unix(path, SOCK_SEQPACKET, 0666, 128);
	return fd >= 0 ? fd : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot listen on %s", path);
}

static int listen_tcp(const char *spec, struct sbx_err *err)
{
	char host[64];
	snprintf(host, sizeof host, "%s", spec);
	char *colon = strrchr(host, ':');
	if (!colon)
		return sbx_err_set(err, SBX_EXIT_USAGE, 0, "--listen %s: expected ADDRESS:PORT", spec);
	*colon = 0;
	const char *h = host[0] == '[' ? host + 1 : host;
	if (host[0] == '[' && colon[-1] == ']')
		colon[-1] = 0;
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE },
			*ai;
	if (getaddrinfo(h, colon + 1, &hints, &ai) != 0)
		return sbx_err_set(err, SBX_EXIT_USAGE, 0, "--listen %s: expected a numeric ADDRESS:PORT", spec);
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	int rc = fd >= 0 && bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 512) == 0;
	freeaddrinfo(ai);
	if (!rc) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot listen on %s", spec);
	}
	return fd;
}

/* The front: forked as root, then alone with its listeners and its end of
 * ctl, an unprivileged uid in empty namespaces (jail.h). */
static pid_t front_start(struct serve_front_conf *fc, int back_end, struct sbx_err *err)
{
	int ppfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	if (ppfd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "pidfd_open");
	int san = sbx_jail_report_spare(); /* sanitized builds: the front's report file */
	pid_t pid = fork();
	if (pid != 0) {
		close(ppfd);
		if (san >= 0)
			close(san);
		return pid < 0 ? sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot start the front") : pid;
	}
	close(back_end);
	sbx_jail_report_use(san);
	struct sbx_err e = { 0 };
	if (sbx_jail_namespaces("sbx-serve", &e) < 0 || sbx_jail_self(SERVE_UID_BASE + (uid_t)getpid(), ppfd, &e) < 0 ||
	    serve_front_run(fc, &e) < 0) {
		fprintf(stderr, "sbx-serve: front: %s\n", e.msg);
		_exit(1);
	}
	_exit(0);
}

/* The TLS certificate and key, flags over sbx.yaml's serve.tls, read and
 * tried here as root: the front, once jailed, could not open them, and a
 * bad key is better said before anything listens. */
static int tls_setup(struct serve_tls *t, const struct sbx_hostconf_serve *sv, const char *cert, const char *key,
		     const char *tcp, struct sbx_err *err)
{
	if (!cert && sv->tls_cert[0]) {
		cert = sv->tls_cert;
		key = sv->tls_key;
	}
	if (!cert)
		return 0;
	if (!tcp)
		return sbx_err_set(err, SBX_EXIT_USAGE, 0,
				   "TLS is for the TCP listener, and there is none (--listen or serve.listen)");
	return serve_tls_load(t, cert, key, err) < 0 || serve_tls_check(t, err) < 0 ? -1 : 0;
}

static int serve_main(const char *listen_at, const char *sock_path, const char *cert, const char *key)
{
	struct sbx_err err = { 0 };
	static struct serve_back b;
	__attribute__((cleanup(serve_tls_wipe))) struct serve_tls tls = { 0 };
	if (geteuid() != 0)
		return sbx_cli_fail("sbx-serve", SBX_EXIT_USAGE, 0,
				    "the service runs as root (its front drops to a uid of its own)");
	if (serve_back_init(&b, &err) < 0)
		return sbx_cli_fail("sbx-serve", err.code, 0, "%s", err.msg);
	const char *tcp = listen_at ? listen_at : b.hc.serve.listen[0] ? b.hc.serve.listen : NULL;
	if (tls_setup(&tls, &b.hc.serve, cert, key, tcp, &err) < 0)
		return sbx_cli_fail("sbx-serve", err.code, 0, "%s", err.msg);
	/* Beside RUN, not in it: RUN is root's alone (0700), and anyone may
	 * reach the socket (who they are is read from the connection). */
	char def[700], dir[690];
	snprintf(dir, sizeof dir, "%s-serve", b.st.run);
	snprintf(def, sizeof def, "%s/serve.sock", dir);
	if (!sock_path && !b.hc.serve.socket[0] && ((mkdir(dir, 0755) < 0 && errno != EEXIST) || chmod(dir, 0755) < 0))
		return sbx_cli_fail("sbx-serve", SBX_EXIT_INTERNAL, 0, "cannot make %s: %s", dir, strerror(errno));
	const char *path = sock_path ? sock_path : b.hc.serve.socket[0] ? b.hc.serve.socket : def;
	/* Host users' commands (sbx-serve(8), USERS): cli.sock beside it. */
	char cli[800];
	const char *slash = strrchr(path, '/');
	snprintf(cli, sizeof cli, "%.*scli.sock", slash ? (int)(slash - path + 1) : 0, path);
	struct serve_front_conf fc = { .unix_fd = -1,
				       .tcp_fd = -1,
				       .cli_fd = -1,
				       .body_max = 1u << 20,
				       .rate = b.hc.serve.rate ? b.hc.serve.rate : SBX_SERVE_RATE_DEFAULT,
				       .tls_cert = tls.cert,
				       .tls_key = tls.key };
	int sv[2];
	if ((fc.unix_fd = listen_unix(path, &err)) < 0 || (fc.cli_fd = listen_cli(cli, &err)) < 0 ||
	    (tcp && (fc.tcp_fd = listen_tcp(tcp, &err)) < 0) ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return sbx_cli_fail("sbx-serve", err.code ? err.code : SBX_EXIT_INTERNAL, 0, "%s",
				    err.msg[0] ? err.msg : strerror(errno));
	fc.ctl = sv[1];
	struct sigaction sa = { .sa_handler = on_term };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	int tls_on = tls.key != NULL;
	pid_t front = front_start(&fc, sv[0], &err);
	serve_tls_wipe(&tls); /* the front has its copy; the back needs none */
	if (front < 0)
		return sbx_cli_fail("sbx-serve", err.code, 0, "%s", err.msg);
	close(sv[1]);
	close(fc.unix_fd);
	close(fc.cli_fd);
	if (fc.tcp_fd >= 0)
		close(fc.tcp_fd);
	fprintf(stderr, "sbx-serve: serving on %s (users' commands on %s)%s%s%s\n", path, cli, tcp ? " and " : "",
		tcp ? tcp : "", tls_on ? " (TLS)" : "");
	int rc = serve_back_run(&b, sv[0], front, &stop, &err);
	kill(front, SIGKILL);
	waitpid(front, NULL, 0);
	unlink(path);
	unlink(cli);
	if (rc < 0)
		return sbx_cli_fail("sbx-serve", err.code, 0, "%s", err.msg);
	/* The front never leaves on its own: it failed (and said why). */
	if (!stop)
		return sbx_cli_fail("sbx-serve", SBX_EXIT_INTERNAL, 0, "the front (the HTTP server) ended");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "key"))
		return key_main(argc - 1, argv + 1);
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },   { "socket", required_argument, NULL, 's' },
		{ "tls-cert", required_argument, NULL, 'c' }, { "tls-key", required_argument, NULL, 'k' },
		{ "help", no_argument, NULL, 'h' },           { NULL, 0, NULL, 0 }
	};
	const char *listen_at = NULL, *sock = NULL, *cert = NULL, *key = NULL;
	for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
		switch (c) {
		case 'l': listen_at = optarg; break;
		case 's': sock = optarg; break;
		case 'c': cert = optarg; break;
		case 'k': key = optarg; break;
		case 'h': return sbx_cli_usage(usage, 1);
		default: return sbx_cli_usage(usage, 0);
		}
	}
	if (optind != argc || !cert != !key) /* a certificate without its key, or a key alone */
		return sbx_cli_usage(usage, 0);
	return serve_main(listen_at, sock, cert, key);
}
