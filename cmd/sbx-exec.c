/* sbx-exec: run a command in a session; exit with the command's status. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "exec_client.h"
#include "execrec.h"
#include "vmctl.h"
#include "units.h"

static const char usage[] =
	"usage: sbx-exec [-dit] [-w DIR] [-e NAME[=VALUE]]... [-u USER] [--timeout DURATION] [--json]\n"
	"                [--resume | --no-resume] [--tenant TENANT] SESSION [--] COMMAND [ARG]...\n"
	"       sbx-exec --wait EXEC [--timeout DURATION] [--json] [--tenant TENANT] SESSION\n"
	"       sbx-exec --output EXEC [--tenant TENANT] SESSION\n"
	"       sbx-exec --attach EXEC [--since BYTES[,BYTES]] [--no-resume] [--tenant TENANT] SESSION\n";

static struct termios saved_tio;
static int tio_saved;

static void restore_tty(void)
{
	if (tio_saved)
		tcsetattr(0, TCSADRAIN, &saved_tio);
}

static int add_env(struct sbx_exec_req *r, const char *kv)
{
	char *s;
	if (strchr(kv, '=')) {
		s = strdup(kv);
	} else {
		const char *v = getenv(kv);
		if (!v)
			return 0; /* docker semantics: an unset NAME passes nothing */
		if (asprintf(&s, "%s=%s", kv, v) < 0)
			s = NULL;
	}
	char **nv = s ? realloc(r->env, (r->envc + 2) * sizeof *nv) : NULL;
	if (!nv) {
		free(s);
		return -1;
	}
	r->env = nv;
	nv[r->envc++] = s;
	nv[r->envc] = NULL;
	return 0;
}

/* Report an error of sbx-exec's own and give its exit status, the one
 * place that maps them: 2, 3 and 4 are ours before the command ran;
 * anything else is 125, so a command's own 70 or 75 cannot be mistaken
 * for ours. */
static int report(struct sbx_err *err, const char *session, int json)
{
	if (session)
		snprintf(err->session, sizeof err->session, "%s", session);
	sbx_err_print("sbx-exec", err, json);
	return err->code == SBX_EXIT_USAGE || err->code == SBX_EXIT_INVALID || err->code == SBX_EXIT_NOENT
		       ? err->code
		       : SBX_EXIT_EXEC_FAILED;
}

/* --since N (both streams) or OUT,ERR; -1 when bad. */
static int parse_since(const char *s, uint64_t *out, uint64_t *err)
{
	char *end;
	if (!isdigit((unsigned char)s[0]))
		return -1; /* no sign or space, which strtoull would take */
	errno = 0;
	unsigned long long a = strtoull(s, &end, 10), b = a;
	if (*end == ',') {
		if (!isdigit((unsigned char)end[1]))
			return -1;
		b = strtoull(end + 1, &end, 10);
	}
	if (errno || *end)
		return -1;
	*out = a;
	*err = b;
	return 0;
}

/* --attach: follow a detached exec to its end; a signal only detaches. */
/* A session suspended to disk (sbx-snapshot suspend) runs again before
 * anything is asked of it, or, with --no-resume, is 4.  0, or the exit
 * status, reported. */
static int suspend_hook(const char *session, const char *tenant, int no_resume, int json)
{
	struct sbx_state st;
	struct sbx_err err = { 0 };
	if (sbx_state_open(&st, &err) == 0 && sbx_state_scope(&st, tenant, &err) == 0 &&
	    sbx_session_wake(&st, session, no_resume, &err) == 0) {
		sbx_state_close(&st);
		return 0;
	}
	return report(&err, session, json);
}

static int attach(const char *session, const char *exec, const struct sbx_attach_opts *ao, const char *tenant)
{
	struct sbx_state st;
	struct sbx_err err = { 0 };
	int status, lost, rc;
	signal(SIGPIPE, SIG_IGN);
	if (sbx_state_open(&st, &err) < 0 || sbx_state_scope(&st, tenant, &err) < 0 ||
	    (rc = sbx_exec_attach(&st, session, exec, ao, &status, &lost, &err)) < 0)
		return report(&err, NULL, 0);
	if (rc > 0) {
		fprintf(stderr, "sbx-exec: detached from %s, which goes on running\n", exec);
		return SBX_EXIT_SIGNAL + rc;
	}
	if (lost)
		fprintf(stderr, "sbx-exec: error: session %s was lost while %s ran\n", session, exec);
	return status;
}

static int exit_status(const struct sbx_exit_info *e)
{
	switch (e->reason) {
	case SBX_R_TIMEOUT: return SBX_EXIT_EXEC_TIMEOUT;
	case SBX_R_SESSION_LOST: return SBX_EXIT_EXEC_FAILED;
	default: return (int)e->status;
	}
}

/* The exec's record as the monitor wrote it (it is on disk before the EXIT
 * reaches us); the bare exit report if it cannot be read. */
static void print_json(struct sbx_state *st, const char *session, const struct sbx_exec_result *r)
{
	json_t *rec = NULL;
	if (sbx_exec_wait(st, session, r->exec_id, 2000, &rec, NULL) == 0 && rec) {
		json_object_set_new(rec, "status", json_integer(exit_status(&r->exit)));
		json_dumpf(rec, stdout, JSON_COMPACT);
		putchar('\n');
		json_decref(rec);
		return;
	}
	json_t *o = json_pack("{s:i, s:s, s:s, s:i, s:s, s:i, s:f, s:f, s:f, s:{s:I, s:b}}", "schema", 1, "exec",
			      r->exec_id, "session", session, "status", exit_status(&r->exit), "reason",
			      sbx_reason_name(r->exit.reason), "signal", (int)r->exit.signo, "wall_s",
			      (double)r->exit.wall_us / 1e6, "cpu_user_s", (double)r->exit.cpu_user_us / 1e6,
			      "cpu_sys_s", (double)r->exit.cpu_sys_us / 1e6, "memory_peak", "bytes",
			      (json_int_t)r->exit.mem_peak, "guest_reported", 1);
	json_dumpf(o, stdout, JSON_COMPACT);
	putchar('\n');
	json_decref(o);
}

/* --wait and --output: about an exec that ran (or runs) detached. */
static int wait_or_output(const char *session, const char *wait_exec, const char *output_exec, unsigned timeout_ms,
			  int json, const char *tenant)
{
	struct sbx_state st;
	struct sbx_err err = { 0 };
	json_t *r = NULL;
	if (sbx_state_open(&st, &err) < 0 || sbx_state_scope(&st, tenant, &err) < 0)
		goto fail;
	if (output_exec) {
		if (sbx_exec_output(&st, session, output_exec, 1, 2, &err) < 0)
			goto fail;
		return 0;
	}
	if (sbx_exec_wait(&st, session, wait_exec, timeout_ms, &r, &err) < 0)
		goto fail;
	if (json) {
		json_dumpf(r, stdout, JSON_COMPACT);
		putchar('\n');
	}
	int status = sbx_exec_result_status(r);
	json_decref(r);
	return status;
fail:
	return report(&err, NULL, json);
}

int main(int argc, char **argv)
{
	int via_serve;
	if (sbx_cli_remote(argc, argv, &via_serve)) /* a user other than root: through sbx-serve */
		return via_serve;
	static const struct option opts[] = {
		{ "attach", required_argument, NULL, 'A' },
		{ "detach", no_argument, NULL, 'd' },
		{ "env", required_argument, NULL, 'e' },
		{ "help", no_argument, NULL, 'h' },
		{ "interactive", no_argument, NULL, 'i' },
		{ "json", no_argument, NULL, 'j' },
		{ "no-resume", no_argument, NULL, 'N' },
		{ "output", required_argument, NULL, 'O' },
		{ "resume", no_argument, NULL, 'R' },
		{ "since", required_argument, NULL, 'S' },
		{ "tenant", required_argument, NULL, 'U' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "tty", no_argument, NULL, 't' },
		{ "user", required_argument, NULL, 'u' },
		{ "wait", required_argument, NULL, 'W' },
		{ "workdir", required_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 },
	};
	struct sbx_exec_opts o = { .in_fd = -1, .out_fd = 1, .err_fd = 2, .tty_fd = -1, .forward_signals = 1 };
	int json = 0, interactive = 0, tty = 0, resume = 0, no_resume = 0, c;
	const char *wait_exec = NULL, *output_exec = NULL, *attach_exec = NULL, *since = NULL, *tenant = NULL;
	struct sbx_attach_opts ao = { .out_fd = 1, .err_fd = 2, .detach_signals = 1 };
	uint64_t ms;
	while ((c = getopt_long(argc, argv, "+de:hijtu:w:", opts, NULL)) != -1) {
		switch (c) {
		case 'A': attach_exec = optarg; break;
		case 'd': o.detach = 1; break;
		case 'e':
			if (add_env(&o.req, optarg) < 0)
				return SBX_EXIT_EXEC_FAILED;
			break;
		case 'h': return sbx_cli_usage(usage, 1);
		case 'i': interactive = 1; break;
		case 'j': json = 1; break;
		case 'T':
			if (sbx_parse_duration_ms(optarg, &ms) < 0 || ms > UINT32_MAX)
				return sbx_cli_fail("sbx-exec", SBX_EXIT_USAGE, json, "bad --timeout '%s'", optarg);
			o.req.timeout_ms = (uint32_t)ms;
			break;
		case 't': tty = 1; break;
		case 'u':
			o.req.have_uid = o.req.have_gid = 1;
			if (!strcmp(optarg, "root"))
				o.req.uid = o.req.gid = 0;
			else if (!strcmp(optarg, "user"))
				o.req.uid = o.req.gid = 1000;
			else if (sbx_cli_uint(optarg, 0, 65534, &o.req.uid) == 0)
				o.req.gid = o.req.uid;
			else
				return sbx_cli_fail("sbx-exec", SBX_EXIT_USAGE, json,
						    "--user takes root, user or a numeric uid, not '%s'", optarg);
			break;
		case 'w': o.req.cwd = strdup(optarg); break;
		case 'W': wait_exec = optarg; break;
		case 'O': output_exec = optarg; break;
		case 'N': no_resume = 1; break;
		case 'R': resume = 1; break;
		case 'S':
			if (parse_since(optarg, &ao.since_out, &ao.since_err) < 0)
				return sbx_cli_fail("sbx-exec", SBX_EXIT_USAGE, json,
						    "--since takes BYTES or STDOUT_BYTES,STDERR_BYTES, not '%s'",
						    optarg);
			since = optarg;
			break;
		case 'U': tenant = optarg; break;
		default: return sbx_cli_usage(usage, 0);
		}
	}
	if (resume && no_resume)
		return sbx_cli_fail("sbx-exec", SBX_EXIT_USAGE, json, "--resume and --no-resume contradict each other");
	if (attach_exec) {
		if (argc - optind != 1 || wait_exec || output_exec || o.detach || json)
			return sbx_cli_usage(usage, 0);
		int w = suspend_hook(argv[optind], tenant, no_resume, json); /* a suspended session runs first */
		return w ? w : attach(argv[optind], attach_exec, &ao, tenant);
	}
	if (since)
		return sbx_cli_fail("sbx-exec", SBX_EXIT_USAGE, json, "--since goes with --attach");
	if (wait_exec || output_exec) {
		if (argc - optind != 1 || (wait_exec && output_exec))
			return sbx_cli_usage(usage, 0);
		return wait_or_output(argv[optind], wait_exec, output_exec, o.req.timeout_ms, json, tenant);
	}
	if (argc - optind < 2)
		return sbx_cli_usage(usage, 0);
	const char *session = argv[optind++];
	if (!strcmp(argv[optind], "--"))
		optind++;
	if (optind >= argc)
		return sbx_cli_usage(usage, 0);
	if (o.req.cwd && o.req.cwd[0] != '/')
		return sbx_cli_fail("sbx-exec", SBX_EXIT_USAGE, json, "-w takes an absolute path in the guest");
	o.req.argv = argv + optind;
	o.req.argc = (size_t)(argc - optind);
	if (interactive && !o.detach)
		o.in_fd = 0;
	if (tty) {
		o.req.flags |= SBX_EXEC_PTY;
		if (isatty(0)) {
			o.tty_fd = 0;
			struct winsize ws;
			if (ioctl(0, TIOCGWINSZ, &ws) == 0) {
				o.req.rows = ws.ws_row;
				o.req.cols = ws.ws_col;
			}
		}
		if (interactive && isatty(0) && tcgetattr(0, &saved_tio) == 0) {
			/* Raw mode: ^C, ^Z and friends are bytes for the guest's
			 * terminal, which turns them into signals there. */
			struct termios raw = saved_tio;
			cfmakeraw(&raw);
			tio_saved = 1;
			atexit(restore_tty);
			tcsetattr(0, TCSADRAIN, &raw);
		}
	}
	if (json) {
		/* Output is kept in the session; stdout carries only the result. */
		o.out_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
		o.err_fd = o.out_fd;
	}
	signal(SIGPIPE, SIG_IGN);

	struct sbx_state st;
	struct sbx_err err = { 0 };
	struct sbx_exec_result r;
	/* --resume: a paused session (sbx-snapshot pause) runs again first. */
	int rc = sbx_state_open(&st, &err) < 0 || sbx_state_scope(&st, tenant, &err) < 0 ? -1 : 0;
	if (rc == 0 && resume)
		rc = sbx_session_vmctl(&st, session, NULL, SBX_VMCTL_RESUME, NULL, NULL, 0, &err);
	if (rc == 0 && no_resume) /* a suspended session is 4, not woken (else the exec wakes it) */
		rc = sbx_session_wake(&st, session, 1, &err);
	if (rc == 0)
		rc = sbx_exec_run(&st, session, &o, &r, &err);
	restore_tty();
	tio_saved = 0;
	char **env = o.req.env;
	for (size_t i = 0; i < o.req.envc; i++)
		free(env[i]);
	free(env);
	free(o.req.cwd);
	if (rc < 0)
		return report(&err, session, json);
	if (o.detach) {
		if (json)
			printf("{\"schema\":1,\"exec\":\"%s\",\"session\":\"%s\"}\n", r.exec_id, session);
		else
			printf("%s\n", r.exec_id);
		return 0;
	}
	if (json)
		print_json(&st, session, &r);
	else if (r.exit.reason == SBX_R_SESSION_LOST)
		fprintf(stderr, "sbx-exec: error: session %s was lost while the command ran\n", session);
	return exit_status(&r.exit);
}
