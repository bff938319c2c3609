/* sbx-oci: an OCI runtime (runc's command line) whose containers are sbx
 * sessions, for containerd, Podman and Slurm. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "oci.h"
#include "util.h"

#define PROG "sbx-oci"

static const char usage[] =
	"usage: sbx-oci [--root DIR] [--log FILE] [--log-format text|json] [--systemd-cgroup] [--rootless]\n"
	"               COMMAND [OPTION]... ID\n"
	"commands: create [-b BUNDLE] [--pid-file FILE] [--console-socket SOCKET] ID | start ID | state ID\n"
	"          kill [-a] ID [SIGNAL] | delete [-f] ID | features | --version\n"
	"          run [-b BUNDLE] [-d] [--pid-file FILE] [--console-socket SOCKET] ID\n"
	"          exec [-dt] [--pid-file FILE] [--console-socket SOCKET] (--process FILE ID | ID COMMAND [ARG]...)\n"
	"          ps --format json ID\n";

static const char *log_path;
static int log_json;

/* The one place errors are reported: stderr, and --log as runc writes it
 * (one JSON object a line with --log-format json), where conmon and the
 * shim look for why a command failed. */
static int fail(const struct sbx_err *err)
{
	sbx_err_print(PROG, err, 0);
	FILE *f = log_path ? fopen(log_path, "ae") : NULL;
	if (f) {
		/* The message may quote a bundle's bytes: none may forge a
		 * line or a field of the log. */
		char msg[sizeof err->msg];
		snprintf(msg, sizeof msg, "%s", err->msg);
		sbx_text_clean(msg);
		for (char *q = msg; *q; q++)
			if (*q == '"' && !log_json)
				*q = '\'';
		char t[32];
		sbx_fmt_time(sbx_now_ns(), t, sizeof t);
		if (log_json) {
			json_t *j = json_pack("{s:s, s:s, s:s}", "level", "error", "msg", msg, "time", t);
			json_dumpf(j, f, JSON_COMPACT);
			fputc('\n', f);
			json_decref(j);
		} else {
			fprintf(f, "time=\"%s\" level=error msg=\"%s\"\n", t, msg);
		}
		fclose(f);
	}
	return err->code ? err->code : SBX_EXIT_INTERNAL;
}

__attribute__((format(printf, 1, 2))) static int usage_fail(const char *fmt, ...)
{
	struct sbx_err err = { .code = SBX_EXIT_USAGE };
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err.msg, sizeof err.msg, fmt, ap);
	va_end(ap);
	return fail(&err);
}

/* Options that change nothing here, taken so the engines' usual command
 * lines work: runc's create/run flags about its own init process. */
enum { O_IGNORED = 0x100, O_PID_FILE, O_CONSOLE };

static int one_id(int argc, char **argv, const char *cmd)
{
	if (argc - optind != 1)
		return usage_fail("%s takes one container ID", cmd);
	return 0;
}

static int print_json(json_t *j)
{
	if (!j)
		return SBX_EXIT_INTERNAL;
	json_dumpf(j, stdout, JSON_INDENT(2));
	putchar('\n');
	json_decref(j);
	return fflush(stdout) == 0 ? 0 : SBX_EXIT_INTERNAL;
}

/* How the process we wait for ended, as runc's exit status. */
static int wait_status(pid_t pid)
{
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : SBX_EXIT_SIGNAL + WTERMSIG(st);
}

/* create and run: the container, then its holder (a child, so it stays a
 * descendant of the engine, which reaps it), whose pid is recorded. */
static int create(const char *root, int root_fd, int argc, char **argv, int run)
{
	static const struct option opts[] = {
		{ "bundle", required_argument, NULL, 'b' },
		{ "console-socket", required_argument, NULL, O_CONSOLE },
		{ "detach", no_argument, NULL, 'd' },
		{ "keep", no_argument, NULL, O_IGNORED },
		{ "no-new-keyring", no_argument, NULL, O_IGNORED },
		{ "no-pivot", no_argument, NULL, O_IGNORED },
		{ "pid-file", required_argument, NULL, O_PID_FILE },
		{ NULL, 0, NULL, 0 },
	};
	const char *bundle = NULL, *pid_file = NULL, *console = NULL;
	int detach = 0, c;
	while ((c = getopt_long_only(argc, argv, "+b:d", opts, NULL)) != -1) {
		switch (c) {
		case 'b': bundle = optarg; break;
		case 'd': detach = run; break;
		case O_CONSOLE: console = optarg; break;
		case O_IGNORED: break;
		case O_PID_FILE: pid_file = optarg; break;
		default: return usage_fail("%s: bad option", run ? "run" : "create");
		}
	}
	if (one_id(argc, argv, run ? "run" : "create"))
		return SBX_EXIT_USAGE;
	char cwd[SBX_OCI_PATH_MAX + 1];
	if (!bundle && !(bundle = getcwd(cwd, sizeof cwd)))
		return usage_fail("%s", "no --bundle and no current directory");
	struct sbx_oci_ctx x;
	struct sbx_err err = { 0 };
	if (sbx_oci_create(&x, root, root_fd, argv[optind], bundle, console, &err) < 0)
		return fail(&err);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		int rc = sbx_oci_hold(&x, &err);
		_exit(rc < 0 ? fail(&err), SBX_EXIT_EXEC_FAILED : rc);
	}
	if (pid < 0 || sbx_oci_created(&x, pid, pid_file, &err) < 0) {
		if (pid < 0)
			sbx_err_set(&err, SBX_EXIT_INTERNAL, errno, "cannot start the holder");
		else
			kill(pid, SIGKILL);
		sbx_oci_abort(&x);
		return fail(&err);
	}
	sbx_oci_ctx_free(&x);
	if (!run)
		return 0;
	if (sbx_oci_start(root_fd, argv[optind], &err) < 0)
		return fail(&err);
	if (detach)
		return 0;
	return wait_status(pid);
}

/* exec: the process runs in a child, the pid the engine waits for (conmon
 * passes --detach and reaps it as a subreaper). */
static int exec_cmd(int root_fd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "console-socket", required_argument, NULL, O_CONSOLE },
		{ "detach", no_argument, NULL, 'd' },
		{ "pid-file", required_argument, NULL, O_PID_FILE },
		{ "process", required_argument, NULL, 'p' },
		{ "tty", no_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	const char *pid_file = NULL, *process = NULL, *console = NULL;
	int detach = 0, tty = 0, c;
	while ((c = getopt_long_only(argc, argv, "+dp:t", opts, NULL)) != -1) {
		switch (c) {
		case 'd': detach = 1; break;
		case 'p': process = optarg; break;
		case 't': tty = 1; break;
		case O_CONSOLE: console = optarg; break;
		case O_PID_FILE: pid_file = optarg; break;
		default: return usage_fail("exec: bad option");
		}
	}
	if (optind >= argc)
		return usage_fail("exec takes a container ID");
	struct sbx_oci_exec e;
	struct sbx_err err = { 0 };
	const char *id = argv[optind++];
	if (sbx_oci_exec_prepare(root_fd, id, process, argv + optind, argc - optind, tty, console, &e, &err) < 0) {
		sbx_oci_exec_free(&e);
		return fail(&err);
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		int rc = sbx_oci_exec_run(&e, &err);
		_exit(rc < 0 ? fail(&err), SBX_EXIT_EXEC_FAILED : rc);
	}
	sbx_oci_exec_free(&e);
	if (pid < 0) {
		sbx_err_set(&err, SBX_EXIT_INTERNAL, errno, "cannot exec in container %s", id);
		return fail(&err);
	}
	if (pid_file && sbx_oci_write_pid_file(pid_file, pid, &err) < 0) {
		kill(pid, SIGKILL);
		return fail(&err);
	}
	if (detach)
		return 0;
	return wait_status(pid);
}

/* ps: the container's host processes, which are its holder alone (the
 * guest's processes are not the host's; sbx-ps --execs shows those). */
static int ps_cmd(int root_fd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "format", required_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	while ((c = getopt_long_only(argc, argv, "+f:", opts, NULL)) != -1) {
		if (c != 'f' || strcmp(optarg, "json"))
			return usage_fail("ps: only --format json is supported");
	}
	if (one_id(argc, argv, "ps"))
		return SBX_EXIT_USAGE;
	struct sbx_oci o;
	struct sbx_err err = { 0 };
	if (sbx_oci_load(root_fd, argv[optind], &o, &err) < 0)
		return fail(&err);
	int alive;
	sbx_oci_status(&o, &alive);
	json_t *a = json_array();
	if (alive)
		json_array_append_new(a, json_integer(o.pid));
	sbx_oci_free(&o);
	json_dumpf(a, stdout, JSON_COMPACT);
	putchar('\n');
	json_decref(a);
	return fflush(stdout) == 0 ? 0 : SBX_EXIT_INTERNAL;
}

static int parse_signal(const char *s)
{
	if (!strncasecmp(s, "SIG", 3))
		s += 3;
	char *end;
	long n = strtol(s, &end, 10);
	if (*s && !*end)
		return n > 0 && n < NSIG ? (int)n : -1;
	for (int i = 1; i < NSIG; i++) {
		const char *name = sigabbrev_np(i);
		if (name && !strcasecmp(name, s))
			return i;
	}
	return -1;
}

static int verb(int root_fd, const char *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "all", no_argument, NULL, 'a' },
		{ "force", no_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	int all = 0, force = 0, c;
	while ((c = getopt_long_only(argc, argv, "+af", opts, NULL)) != -1) {
		switch (c) {
		case 'a': all = 1; break;
		case 'f': force = 1; break;
		default: return usage_fail("%s: bad option", cmd);
		}
	}
	(void)all; /* one process per container: --all is that one */
	struct sbx_err err = { 0 };
	int rc;
	if (!strcmp(cmd, "kill")) {
		if (argc - optind < 1 || argc - optind > 2)
			return usage_fail("%s takes ID [SIGNAL]", cmd);
		int sig = argc - optind == 2 ? parse_signal(argv[optind + 1]) : SIGTERM;
		if (sig < 0)
			return usage_fail("unknown signal '%s'", argv[optind + 1]);
		rc = sbx_oci_kill(root_fd, argv[optind], sig, &err);
	} else if (one_id(argc, argv, cmd)) {
		return SBX_EXIT_USAGE;
	} else if (!strcmp(cmd, "start")) {
		rc = sbx_oci_start(root_fd, argv[optind], &err);
	} else if (!strcmp(cmd, "delete")) {
		rc = sbx_oci_delete(root_fd, argv[optind], force, &err);
	} else {
		struct sbx_oci o;
		if ((rc = sbx_oci_load(root_fd, argv[optind], &o, &err)) == 0) {
			rc = print_json(sbx_oci_state_json(&o));
			sbx_oci_free(&o);
			return rc;
		}
	}
	return rc < 0 ? fail(&err) : 0;
}

static int features(void)
{
	return print_json(json_pack("{s:s, s:s, s:[], s:[], s:{s:b}, s:{s:s}}", "ociVersionMin", "1.0.0",
				    "ociVersionMax", SBX_OCI_VERSION, "hooks", "mountOptions", "linux", "enabled", 0,
				    "annotations", "org.sbx.runtime", "microvm"));
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "debug", no_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ "log", required_argument, NULL, 'l' },
		{ "log-format", required_argument, NULL, 'F' },
		{ "root", required_argument, NULL, 'r' },
		{ "rootless", optional_argument, NULL, 'R' },
		{ "systemd-cgroup", no_argument, NULL, 'S' },
		{ "version", no_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 },
	};
	/* Beside sbx's own state when SBX_ROOT moves it: an engine does not
	 * always pass --root on (Podman's cleanup process drops
	 * --runtime-flag), but the environment reaches every call. */
	char defroot[SBX_OCI_PATH_MAX + 1];
	const char *sbx_root = getenv("SBX_ROOT");
	snprintf(defroot, sizeof defroot, "%s/run/sbx-oci", sbx_root && sbx_root[0] == '/' ? sbx_root : "");
	const char *root = defroot;
	int c;
	while ((c = getopt_long_only(argc, argv, "+hv", opts, NULL)) != -1) {
		switch (c) {
		case 'D':
		case 'R':
		case 'S': break;
		case 'F':
			if (strcmp(optarg, "json") && strcmp(optarg, "text"))
				return usage_fail("--log-format %s: text or json", optarg);
			log_json = !strcmp(optarg, "json");
			break;
		case 'h': fputs(usage, stdout); return 0;
		case 'l': log_path = optarg; break;
		case 'r': root = optarg; break;
		case 'v': printf("sbx-oci version 0.1\nspec: %s\n", SBX_OCI_VERSION); return 0;
		default: fputs(usage, stderr); return usage_fail("%s", "unknown global option (see usage)");
		}
	}
	if (optind >= argc)
		return usage_fail("%s", "no command (see sbx-oci --help)");
	const char *cmd = argv[optind];
	argc -= optind;
	argv += optind;
	optind = 1;
	if (!strcmp(cmd, "features"))
		return features();
	if (strcmp(cmd, "create") && strcmp(cmd, "run") && strcmp(cmd, "start") && strcmp(cmd, "state") &&
	    strcmp(cmd, "kill") && strcmp(cmd, "delete") && strcmp(cmd, "exec") && strcmp(cmd, "ps"))
		return usage_fail("%s: not supported by this version of sbx-oci", cmd);
	struct sbx_err err = { 0 };
	_cleanup_close_ int root_fd = sbx_oci_root_open(root, &err);
	if (root_fd < 0)
		return fail(&err);
	if (!strcmp(cmd, "exec"))
		return exec_cmd(root_fd, argc, argv);
	if (!strcmp(cmd, "ps"))
		return ps_cmd(root_fd, argc, argv);
	if (!strcmp(cmd, "create") || !strcmp(cmd, "run"))
		return create(root, root_fd, argc, argv, !strcmp(cmd, "run"));
	return verb(root_fd, cmd, argc, argv);
}
