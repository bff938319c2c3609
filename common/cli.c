#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "hostconf.h"
#include "util.h"

int sbx_cli_uint(const char *s, unsigned min, unsigned max, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max)
		return -1;
	*out = (unsigned)v;
	return 0;
}

int sbx_cli_fail(const char *prog, int code, int json, const char *fmt, ...)
{
	struct sbx_err e = { 0 };
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e.msg, sizeof e.msg, fmt, ap);
	va_end(ap);
	e.code = code;
	sbx_err_print(prog, &e, json);
	return code;
}

char **sbx_cli_ids(int argc, char **argv, size_t *n)
{
	size_t cap = argc > 0 ? (size_t)argc + 1 : 16;
	char **v = calloc(cap, sizeof *v);
	*n = 0;
	if (!v)
		return NULL;
	if (argc > 0) {
		for (int i = 0; i < argc; i++)
			v[(*n)++] = strdup(argv[i]);
		return v;
	}
	if (isatty(0))
		return v;
	char *line = NULL;
	size_t lcap = 0;
	ssize_t len;
	while ((len = getline(&line, &lcap, stdin)) >= 0) {
		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = 0;
		if (!len)
			continue;
		if (*n + 1 >= cap) {
			char **nv = realloc(v, 2 * cap * sizeof *v);
			if (!nv)
				break;
			v = nv;
			cap *= 2;
		}
		v[(*n)++] = strdup(line);
		v[*n] = NULL;
	}
	free(line);
	return v;
}

void sbx_cli_free_ids(char **ids)
{
	for (size_t i = 0; ids && ids[i]; i++)
		free(ids[i]);
	free(ids);
}

void sbx_cli_print_removed(json_t *removed)
{
	json_t *j = json_pack("{s:i, s:O}", "schema", 1, "removed", removed);
	json_dumpf(j, stdout, JSON_COMPACT);
	putchar('\n');
	json_decref(j);
}

int sbx_cli_usage(const char *usage, int ok)
{
	fputs(usage, ok ? stdout : stderr);
	return ok ? SBX_EXIT_OK : SBX_EXIT_USAGE;
}

const struct sbx_cli_verb *sbx_cli_verb_find(const char *prog, const struct sbx_cli_verb *verbs, size_t n,
					     const char *verb, int json)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(verbs[i].name, verb))
			return &verbs[i];
	char list[300] = "";
	for (size_t i = 0; i < n; i++)
		if (!i || verbs[i].op != verbs[i - 1].op)
			snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", verbs[i].name);
	sbx_cli_fail(prog, SBX_EXIT_USAGE, json, "unknown command '%.40s' (%s)", verb, list);
	return NULL;
}

int sbx_cli_verb_done(const char *prog, int rc, const struct sbx_err *err, int json)
{
	if (rc > 0)
		return rc;
	if (rc < 0) {
		sbx_err_print(prog, err, json);
		return err->code ? err->code : SBX_EXIT_INTERNAL;
	}
	return 0;
}

void sbx_cli_put_string(const struct sbx_cli_table *t, const char *s, FILE *f)
{
	/* sbx-audit(1) documents every control character but tab and
	 * newline as \xNN: a carriage return too. */
	for (const char *cr; t->flags & SBX_CLI_HEX_CR && (cr = strchr(s, '\r')); s = cr + 1) {
		char *seg = strndup(s, (size_t)(cr - s));
		sbx_fputs_field(seg ? seg : "", f);
		free(seg);
		fputs("\\x0d", f);
	}
	sbx_fputs_field(s, f);
}

void sbx_cli_put_value(const struct sbx_cli_table *t, json_t *v, FILE *f)
{
	if (json_is_integer(v))
		fprintf(f, "%lld", (long long)json_integer_value(v));
	else if (json_is_real(v))
		fprintf(f, "%.3f", json_real_value(v));
	else if (json_is_boolean(v))
		fputs(json_is_true(v) ? "yes" : "no", f);
	else if (json_is_string(v) && (*json_string_value(v) || !(t->flags & SBX_CLI_DASH_EMPTY)))
		sbx_cli_put_string(t, json_string_value(v), f);
	else
		putc('-', f);
}

void sbx_cli_table_header(const struct sbx_cli_table *t, enum sbx_cli_mode m, int headers)
{
	if (m != SBX_CLI_TEXT || !headers || !t->ncols || !t->cols[0].head)
		return;
	for (size_t i = 0; i < t->ncols; i++)
		printf("%s%s", i ? "\t" : "", t->cols[i].head);
	putchar('\n');
}

static void put_col(const struct sbx_cli_table *t, const struct sbx_cli_col *c, json_t *row)
{
	if (c->show)
		c->show(t, row, stdout);
	else
		sbx_cli_put_value(t, json_object_get(row, c->key), stdout);
}

void sbx_cli_table_row(const struct sbx_cli_table *t, json_t *row, enum sbx_cli_mode m)
{
	switch (m) {
	case SBX_CLI_JSON: return;
	case SBX_CLI_JSONL: json_dumpf(row, stdout, JSON_COMPACT); break;
	case SBX_CLI_QUIET: put_col(t, &t->key, row); break;
	case SBX_CLI_TEXT:
		for (size_t i = 0; i < t->ncols; i++) {
			if (i)
				putchar('\t');
			put_col(t, &t->cols[i], row);
		}
		break;
	}
	putchar('\n');
}

void sbx_cli_print_table(const struct sbx_cli_table *t, json_t *rows, enum sbx_cli_mode m, int headers)
{
	if (m == SBX_CLI_JSON) {
		json_dumpf(rows, stdout, JSON_INDENT(2));
		putchar('\n');
		return;
	}
	sbx_cli_table_header(t, m, headers);
	size_t k;
	json_t *row;
	json_array_foreach (rows, k, row)
		sbx_cli_table_row(t, row, m);
}

/* NAME is the reference -t takes (OWNER/NAME for a tenant's): the
 * template's NAME@VERSION up to its last '@'. */
static void show_ref_name(const struct sbx_cli_table *t, json_t *row, FILE *f)
{
	const char *ref = json_string_value(json_object_get(row, "template"));
	const char *at = ref ? strrchr(ref, '@') : NULL;
	if (at)
		fprintf(f, "%.*s", (int)(at - ref), ref);
	else
		sbx_cli_put_value(t, json_object_get(row, "name"), f);
}

static const struct sbx_cli_col template_cols[] = {
	{ "name", "NAME", show_ref_name }, { "version", "VERSION", NULL },   { "owner", "OWNER", NULL },
	{ "created", "CREATED", NULL },    { "snapshot", "SNAPSHOT", NULL }, { "in_use", "IN_USE", NULL },
	{ "kernel", "KERNEL", NULL },
};
const struct sbx_cli_table sbx_cli_template_table = {
	SBX_CLI_COLS(template_cols),
	.key = { "template", NULL, NULL },
	.flags = SBX_CLI_DASH_EMPTY,
};

/* ---- a user's command, through sbx-serve (cli.h) ---------------------- */

static int sig_pipe[2] = { -1, -1 };

static void on_signal(int s)
{
	int e = errno;
	unsigned char b = (unsigned char)s;
	if (write(sig_pipe[1], &b, 1) < 0) {
		/* full: the command hears about it late, or not */
	}
	errno = e;
}

static void cli_socket_path(char *out, size_t n)
{
	const char *e = getenv("SBX_SERVE_CLI"), *root = getenv("SBX_ROOT");
	if (e && *e) {
		snprintf(out, n, "%s", e);
		return;
	}
	static struct sbx_hostconf hc;
	struct sbx_err ignored = { 0 };
	if (sbx_hostconf_load(&hc, &ignored) == 0 && hc.serve.socket[0]) {
		const char *slash = strrchr(hc.serve.socket, '/');
		snprintf(out, n, "%.*scli.sock", slash ? (int)(slash - hc.serve.socket + 1) : 0, hc.serve.socket);
		return;
	}
	snprintf(out, n, "%s/run/sbx-serve/cli.sock", root && root[0] == '/' ? root : "");
}

/* The command as the service reads it (wire.h): argv with the program's
 * own name first, and the terminal's variables. */
static char *cli_message(int argc, char **argv)
{
	const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	json_t *a = json_array(), *env = json_object();
	json_array_append_new(a, json_string(prog));
	for (int i = 1; i < argc; i++)
		json_array_append_new(a, json_string(argv[i]));
	static const char *const keep[] = { "TERM", "COLUMNS", "LINES", "NO_COLOR", "SBX_NO_PROGRESS" };
	for (size_t i = 0; i < SBX_ARRAY_LEN(keep); i++)
		if (getenv(keep[i]))
			json_object_set_new(env, keep[i], json_string(getenv(keep[i])));
	json_t *m = json_pack("{s:o, s:o}", "argv", a, "env", env);
	char *t = m ? json_dumps(m, JSON_COMPACT) : NULL;
	json_decref(m);
	return t;
}

int sbx_cli_remote(int argc, char **argv, int *status)
{
	if (geteuid() == 0)
		return 0;
	int json = 0;
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		json |= !strcmp(argv[i], "--json");
	const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	char path[700];
	cli_socket_path(path, sizeof path);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (strlen(path) >= sizeof a.sun_path || fd < 0)
		return *status = sbx_cli_fail(prog, SBX_EXIT_INTERNAL, json, "cannot reach sbx-serve at %s", path), 1;
	memcpy(a.sun_path, path, strlen(path) + 1);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		int e = errno;
		close(fd);
		*status = sbx_cli_fail(prog, SBX_EXIT_UNAVAIL, json,
				       "run by uid %u, sbx's commands go through sbx-serve, which is not reachable at "
				       "%s: %s",
				       (unsigned)getuid(), path, strerror(e));
		return 1;
	}
	/* stdin, stdout, stderr (/dev/null for a closed one) and the directory. */
	int io[4];
	for (int i = 0; i < 3; i++)
		io[i] = fcntl(i, F_GETFD) >= 0 ? i : open("/dev/null", i ? O_WRONLY : O_RDONLY);
	io[3] = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	char *msg = cli_message(argc, argv);
	if (io[3] < 0 || !msg || sbx_sendmsg_fds(fd, msg, strlen(msg), io, 4, MSG_NOSIGNAL) != (ssize_t)strlen(msg)) {
		*status = sbx_cli_fail(prog, SBX_EXIT_INTERNAL, json, "cannot send the command to sbx-serve: %s",
				       strerror(errno));
		free(msg);
		return 1;
	}
	free(msg);
	/* Signals for the command: passed on, not acted on here. */
	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
		static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH };
		struct sigaction sa = { .sa_handler = on_signal, .sa_flags = SA_RESTART };
		for (size_t i = 0; i < SBX_ARRAY_LEN(sigs); i++)
			sigaction(sigs[i], &sa, NULL);
	}
	signal(SIGPIPE, SIG_IGN);
	*status = SBX_EXIT_INTERNAL;
	for (;;) {
		struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = sig_pipe[0], .events = POLLIN } };
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents) {
			unsigned char b[16];
			ssize_t n = read(sig_pipe[0], b, sizeof b);
			for (ssize_t i = 0; i < n; i++) {
				char s[32];
				int l = snprintf(s, sizeof s, "{\"signal\":%u}", b[i]);
				send(fd, s, (size_t)l, MSG_NOSIGNAL);
			}
		}
		if (!p[0].revents)
			continue;
		char buf[4096];
		ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
		if (n <= 0) {
			sbx_cli_fail(prog, SBX_EXIT_INTERNAL, json, "sbx-serve went away before the command ended");
			break;
		}
		json_t *j = json_loadb(buf, (size_t)n, 0, NULL), *ex = json_object_get(j, "exit");
		if (json_is_integer(ex)) {
			*status = (int)json_integer_value(ex);
			const char *e = json_string_value(json_object_get(j, "error"));
			if (e)
				sbx_cli_fail(prog, *status, json, "%s", e);
		}
		json_decref(j);
		break;
	}
	close(fd);
	return 1;
}
