/* sbx-port: reach a TCP server in the guest from the host: bind a
 * loopback port (or a unix socket), hand it to the session's monitor,
 * print the address; --rm and --list manage the forwards. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "portfwd.h"

static const char usage[] =
	"usage: sbx-port [--json] [--tenant TENANT] [--listen ADDRESS:PORT | --unix PATH] SESSION GUESTPORT\n"
	"       sbx-port --rm [--json] [--tenant TENANT] SESSION GUESTPORT|ADDRESS\n"
	"       sbx-port --list [-q] [--json] [--no-headers] [--tenant TENANT] SESSION\n";

static json_t *entry_json(const char *session, const struct sbx_port_entry *e, const char *last_error)
{
	json_t *o = json_pack("{s:i, s:s, s:i, s:s, s:i, s:I, s:I}", "schema", 1, "session", session, "guest_port",
			      (int)e->port, "address", e->addr, "connections", (int)e->conns, "accepted",
			      (json_int_t)e->accepted, "refused", (json_int_t)e->refused);
	if (o && last_error && *last_error)
		json_object_set_new(o, "last_error", json_string(last_error));
	return o;
}

static const struct sbx_cli_col cols[] = {
	{ "guest_port", "GUEST_PORT", NULL }, { "address", "ADDRESS", NULL }, { "connections", "CONNECTIONS", NULL },
	{ "accepted", "ACCEPTED", NULL },     { "refused", "REFUSED", NULL },
};
static const struct sbx_cli_table forwards_table = { SBX_CLI_COLS(cols), .key = { "address", NULL, NULL } };

static int list(struct sbx_state *st, const char *session, int json, int quiet, int headers)
{
	struct sbx_port_entry e[SBX_PORTFWD_LIST_MAX];
	char errs[SBX_PORTFWD_LIST_MAX][160];
	size_t n;
	struct sbx_err err = { 0 };
	if (sbx_port_list(st, session, e, &n, errs, &err) < 0) {
		sbx_err_print("sbx-port", &err, json);
		return err.code;
	}
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, entry_json(session, &e[i], errs[i]));
	sbx_cli_print_table(&forwards_table, a, sbx_cli_mode_of(json, quiet), headers);
	json_decref(a);
	return 0;
}

int main(int argc, char **argv)
{
	int via_serve;
	if (sbx_cli_remote(argc, argv, &via_serve)) /* a user other than root: through sbx-serve */
		return via_serve;
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },       { "json", no_argument, NULL, 'j' },
		{ "list", no_argument, NULL, 'l' },       { "listen", required_argument, NULL, 'L' },
		{ "no-headers", no_argument, NULL, 'H' }, { "quiet", no_argument, NULL, 'q' },
		{ "rm", no_argument, NULL, 'r' },         { "tenant", required_argument, NULL, 'U' },
		{ "unix", required_argument, NULL, 'u' }, { NULL, 0, NULL, 0 },
	};
	int json = 0, quiet = 0, headers = 1, rm = 0, ls = 0, c;
	const char *listen = NULL, *unix_path = NULL, *tenant = NULL;
	while ((c = getopt_long(argc, argv, "hq", opts, NULL)) != -1) {
		switch (c) {
		case 'h': return sbx_cli_usage(usage, 1);
		case 'H': headers = 0; break;
		case 'j': json = 1; break;
		case 'l': ls = 1; break;
		case 'L': listen = optarg; break;
		case 'q': quiet = 1; break;
		case 'r': rm = 1; break;
		case 'U': tenant = optarg; break;
		case 'u': unix_path = optarg; break;
		default: return sbx_cli_usage(usage, 0);
		}
	}
	int nargs = argc - optind;
	if (rm + ls > 1 || (listen && unix_path) || ((rm || ls) && (listen || unix_path)) || nargs != (ls ? 1 : 2))
		return sbx_cli_usage(usage, 0);
	const char *session = argv[optind];
	struct sbx_state st;
	struct sbx_err err = { 0 };
	if (sbx_state_open(&st, &err) < 0 || sbx_state_scope(&st, tenant, &err) < 0) {
		sbx_err_print("sbx-port", &err, json);
		return err.code;
	}
	if (ls)
		return list(&st, session, json, quiet, headers);
	if (rm) {
		if (sbx_port_rm(&st, session, argv[optind + 1], &err) < 0) {
			sbx_err_print("sbx-port", &err, json);
			return err.code;
		}
		return 0;
	}
	unsigned port;
	if (sbx_cli_uint(argv[optind + 1], 1, 65535, &port) < 0)
		return sbx_cli_fail("sbx-port", SBX_EXIT_USAGE, json, "GUESTPORT '%s' is not a port (1-65535)",
				    argv[optind + 1]);
	struct sbx_port_entry e;
	if (sbx_port_open(&st, session, port, listen, unix_path, &e, &err) < 0) {
		sbx_err_print("sbx-port", &err, json);
		return err.code;
	}
	if (json) {
		json_t *o = entry_json(session, &e, NULL);
		json_dumpf(o, stdout, JSON_COMPACT);
		putchar('\n');
		json_decref(o);
	} else {
		puts(e.addr);
	}
	return 0;
}
