/* sbx-serve: the E2B API over sbx (sbx-serve(8)).  Two halves: the back
 * (back.c, root) acts through libsbx; the front (front.c, an unprivileged
 * uid of its own in empty namespaces, under seccomp) parses HTTP and asks
 * the back for each action over wire.h's protocol. */
#ifndef SBX_SERVE_H
#define SBX_SERVE_H

#include <sys/types.h>

#include "err.h"
#include "hostconf.h"
#include "state.h"

/* The front's uid: beside the VMM's (0x5b000000 + pid), the proxy's
 * network half's (+ 2^22 + pid), the monitor's unprivileged half's (+ 2^23
 * + pid) and the package cache's (+ 3 * 2^22): + 2^24 + its pid. */
#define SERVE_UID_BASE (0x5b000000u + (1u << 24))

/* Who asks is not known, or may not (sysexits' EX_NOPERM): HTTP 401. */
#define SERVE_EXIT_NOPERM 77

/* The E2B envd version the front answers as: the SDK turns features on by
 * it (0.1.0: anything at all; 0.4.0: a user by name; 0.5.2: CloseStdin;
 * 0.5.7 would be octet-stream uploads, not served). */
#define SERVE_ENVD_VERSION "0.5.2"

struct serve_back {
	struct sbx_state st; /* the operator's; each call is scoped to its caller */
	struct sbx_hostconf hc;
	int keys_fd; /* LIB/serve/keys */
	int meta_fd; /* LIB/serve/sandboxes: what E2B keeps that sbx does not */
};

int serve_back_init(struct serve_back *b, struct sbx_err *err);
/* Serve the front's calls on ctl until it closes (0) or stop is set. */
int serve_back_run(struct serve_back *b, int ctl, pid_t front, volatile int *stop, struct sbx_err *err);

struct serve_front_conf {
	int unix_fd; /* listening; -1: none */
	int tcp_fd;  /* listening; -1: none */
	int cli_fd;  /* listening: host users' commands (front_cli.c); -1: none */
	int ctl;     /* to the back */
	unsigned body_max;
	unsigned rate; /* requests a second per caller */
	/* TLS on tcp_fd (tls.h): PEM strings, NULL for plain HTTP; the key
	 * is wiped once libmicrohttpd has taken it. */
	const char *tls_cert;
	char *tls_key;
};
/* Runs until the back goes away; never returns on success paths. */
int serve_front_run(const struct serve_front_conf *c, struct sbx_err *err);

#endif
