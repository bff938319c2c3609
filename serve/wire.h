/* Between sbx-serve's two halves.  The front (unprivileged: it parses
 * HTTP) sends the back (root: it acts) one request per call, as a JSON
 * object on a SOCK_SEQPACKET socket of its own, whose other end travels
 * with the request over the control socket; the back answers there (and,
 * for an exec, passes the output pipes and sends how it ended).
 *
 * The back trusts nothing the front says about who asks: a TCP request
 * carries the API key it came with, which the back checks; a unix socket
 * request carries the client's connection itself, whose peer credentials
 * the back reads. */
#ifndef SBX_SERVE_WIRE_H
#define SBX_SERVE_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "err.h"

#define SERVE_MSG_MAX (256u << 10)
#define SERVE_ARGV_MAX 256
#define SERVE_ENV_MAX 128
#define SERVE_META_MAX 64
#define SERVE_STR_MAX 4096

enum serve_op {
	SERVE_OP_CREATE = 1,
	SERVE_OP_GET,
	SERVE_OP_LIST,
	SERVE_OP_KILL,
	SERVE_OP_EXEC,
	SERVE_OP_SIGNAL,
	SERVE_OP_TEMPLATES,
	SERVE_OP_WHOAMI,
	SERVE_OP_CONNECT,
	SERVE_OP_PS,
	SERVE_OP_ATTACH,
	SERVE_OP_PAUSE,
	SERVE_OP_RESUME,
	SERVE_OP_TIMEOUT,
	SERVE_OP_REFRESH,
	SERVE_OP_METRICS,
	SERVE_OP_FORK,
	SERVE_OP_FS,          /* envd's filesystem calls (files.h) */
	SERVE_OP_DOWNLOAD,    /* /files GET */
	SERVE_OP_UPLOAD,      /* /files POST, one file */
	SERVE_OP_CLI,         /* a command a host user ran (cli.c): argv, env, and its stdio and cwd as fds */
	SERVE_OP_LOGS,        /* the sandbox's console, as an fd (logs.h) */
	SERVE_OP_SNAPSHOT,    /* save a sandbox as a snapshot (template: its name, or "") */
	SERVE_OP_SNAPSHOTS,   /* the caller's snapshots (id: of that sandbox only, or ""; template: that name only) */
	SERVE_OP_SNAPSHOT_RM, /* remove one (template: its ID) */
	SERVE_OP_WATCH,       /* WatchDir, CreateWatcher: a directory's events (files.h) */
};

/* A request as the back decodes it: every string checked for length and
 * NULs, every list bounded. */
struct serve_req {
	enum serve_op op;
	char key[64];       /* the API key presented ("" over the unix socket) */
	char token[64];     /* the sandbox's access token (X-Access-Token), for envd calls */
	char id[64];        /* a sandbox (session) ID */
	char tmpl[130];     /* create: the template */
	unsigned timeout_s; /* create: seconds to live; 0: the default */
	int internet;       /* create: allow_internet_access, 0 or 1; -1: not asked */
	int auto_pause;     /* create: autoPause, the sandbox is suspended at its timeout */
	json_t *metadata;   /* create: string to string (owned) */
	char **env;         /* create, exec: NAME=VALUE, NULL-terminated (owned) */
	size_t nenv;
	char **argv; /* exec (owned) */
	size_t argc;
	char cwd[SERVE_STR_MAX];
	char user[64];
	int stdin_open;           /* exec: the client will send input */
	unsigned exec_timeout_ms; /* exec: its deadline (Connect-Timeout-Ms); 0: the policy's default */
	char exec_id[16];         /* signal, attach: sbx's exec ID (eN: E2B's pid N) */
	int signo;
	unsigned count;              /* fork: how many copies */
	unsigned pty_rows, pty_cols; /* exec: a terminal of this size (both, or neither) */
	json_t *args;                /* fs, download, upload, watch: their own fields, decoded by files.h (owned) */
};

/* 0, or -1 with err (3) naming what is wrong. */
int serve_req_decode(const char *buf, size_t n, struct serve_req *r, struct sbx_err *err);
void serve_req_free(struct serve_req *r);
const char *serve_op_name(enum serve_op op);

/* The commands a host user may run through the CLI socket (sbx-serve(8)). */
int serve_cli_prog_ok(const char *prog);
/* Is the variable named by name's first len bytes one of the terminal's,
 * the only ones a host user's command keeps of the user's environment? */
int serve_cli_env_ok(const char *name, size_t len);

/* The CLI socket (sbx-serve(8), USERS), as the front reads it: a user's
 * command comes as one message, {"argv": [PROGRAM, ARG...], "env": {NAME:
 * VALUE}} (at most SERVE_CLI_MSG_MAX bytes, with its stdin, stdout,
 * stderr and working directory as fds); the request for the back, or
 * NULL with err (3).  Only the terminal's variables are kept of env. */
#define SERVE_CLI_MSG_MAX (128u << 10)
json_t *serve_cli_request(const char *buf, size_t n, struct sbx_err *err);
/* A later message, {"signal": N}: N when it is one a user may send its
 * command (INT, TERM, HUP, QUIT, WINCH), else 0. */
int serve_cli_signal(const char *buf, size_t n);

/* One message with up to 8 fds (SCM_RIGHTS). */
int serve_send(int sock, const void *buf, size_t n, const int *fds, unsigned nfds);
/* One message (at most cap bytes, NUL-terminated: cap - 1 of data) and
 * the fds it carried (the rest closed); -1 on error, 0 at the end. */
ssize_t serve_recv(int sock, char *buf, size_t cap, int *fds, unsigned *nfds, unsigned max_fds);

#endif
