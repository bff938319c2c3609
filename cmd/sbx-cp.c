/* sbx-cp: copy files and directories into and out of a session. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "audit.h"
#include "session.h"
#include "vmctl.h"
#include "transfer.h"

static const char usage[] = "usage: sbx-cp [--json] [--no-resume] [--tenant TENANT] SRC... SESSION:DEST\n"
			    "       sbx-cp [--json] [--no-resume] [--tenant TENANT] - SESSION:DEST\n"
			    "       sbx-cp [--json] [--no-resume] [--tenant TENANT] SESSION:SRC DEST|-\n";

/* "SESSION:/path": a valid session ID, a colon, an absolute path.  Anything
 * else is a host path ("./a:/b" names a host file). */
static char *remote(const char *arg, char *session, size_t n)
{
	const char *colon = strchr(arg, ':');
	if (!colon || colon == arg || colon[1] != '/' || (size_t)(colon - arg) >= n)
		return NULL;
	snprintf(session, n, "%.*s", (int)(colon - arg), arg);
	if (sbx_id_check(session, "session", NULL) < 0)
		return NULL;
	return (char *)colon + 1;
}

static void show_guest_msg(const char *msg)
{
	if (!msg)
		return;
	for (const char *s = msg; *s;) {
		size_t l = strcspn(s, "\n");
		fprintf(stderr, "sbx-cp: guest: %.*s\n", (int)l, s);
		s += l + (s[l] == '\n');
	}
}

int main(int argc, char **argv)
{
	int via_serve;
	if (sbx_cli_remote(argc, argv, &via_serve)) /* a user other than root: through sbx-serve */
		return via_serve;
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ "no-resume", no_argument, NULL, 'N' },
		{ "tenant", required_argument, NULL, 'U' },
		{ NULL, 0, NULL, 0 },
	};
	const char *tenant = NULL;
	int json = 0, no_resume = 0, c;
	while ((c = getopt_long(argc, argv, "+hj", opts, NULL)) != -1) {
		switch (c) {
		case 'h': return sbx_cli_usage(usage, 1);
		case 'j': json = 1; break;
		case 'N': no_resume = 1; break;
		case 'U': tenant = optarg; break;
		default: return sbx_cli_usage(usage, 0);
		}
	}
	int n = argc - optind;
	char **ops = argv + optind, session[SBX_ID_MAX + 2];
	if (n < 2)
		return sbx_cli_usage(usage, 0);
	char *guest_msg = NULL;
	struct sbx_cp_opts o = { .from_fd = -1, .to_fd = 1, .guest_msg = &guest_msg };
	int upload = (o.guest_path = remote(ops[n - 1], session, sizeof session)) != NULL;
	if (!upload && (n != 2 || !(o.guest_path = remote(ops[0], session, sizeof session))))
		return sbx_cli_fail("sbx-cp", SBX_EXIT_USAGE, json,
				    "name exactly one side as SESSION:/absolute/path (the last operand to upload, the "
				    "first of two to download)");
	o.session = session;
	char tmp[SBX_ID_MAX + 2];
	for (int i = 0; i < n - 1; i++)
		if (upload && remote(ops[i], tmp, sizeof tmp))
			return sbx_cli_fail("sbx-cp", SBX_EXIT_USAGE, json, "cannot copy between sessions (%s)",
					    ops[i]);
	if (upload && !strcmp(ops[0], "-")) {
		if (n != 2)
			return sbx_cli_fail("sbx-cp", SBX_EXIT_USAGE, json, "'-' is the only source when it is used");
		o.from_fd = 0;
	} else if (upload) {
		o.srcs = (const char *const *)ops;
		o.nsrcs = (unsigned)(n - 1);
	} else if (strcmp(ops[1], "-")) {
		o.host_dest = ops[1];
	}
	/* The guest may stop reading our stream; a write error says so. */
	signal(SIGPIPE, SIG_IGN);

	struct sbx_state st;
	struct sbx_err err = { 0 };
	json_t *result = NULL;
	int rc = sbx_state_open(&st, &err);
	if (rc == 0)
		rc = sbx_state_scope(&st, tenant, &err);
	/* The scope is also whose host paths these are: confined to what
	 * sbx.yaml grants that tenant. */
	o.tenant = st.tenant[0] ? st.tenant : NULL;
	if (rc == 0 && no_resume) /* a suspended session is 4, not woken */
		rc = sbx_session_wake(&st, o.session, 1, &err);
	if (rc == 0)
		rc = upload ? sbx_cp_upload(&st, &o, &result, &err) : sbx_cp_download(&st, &o, &result, &err);
	if (rc == 0) {
		struct sbx_session s;
		if (sbx_record_load(&st, o.session, &s, NULL) == 0 && s.tenant[0])
			json_object_set_new(result, "tenant", json_string(s.tenant));
		sbx_audit_append(&st, upload ? "files.upload" : "files.download", result, NULL);
		json_object_del(result, "tenant");
	}
	show_guest_msg(guest_msg);
	free(guest_msg);
	if (rc < 0) {
		sbx_err_print("sbx-cp", &err, json);
		return err.code ? err.code : SBX_EXIT_INTERNAL;
	}
	/* With "-" stdout is the tar: the result goes nowhere else. */
	if (json && o.host_dest == NULL && !upload)
		json_dumpf(result, stderr, JSON_COMPACT), fputc('\n', stderr);
	else if (json)
		json_dumpf(result, stdout, JSON_COMPACT), putchar('\n');
	json_decref(result);
	return 0;
}
