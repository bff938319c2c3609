/* Package installs in the guest (sbx-policy(5), packages; pkgcache.h on the
 * host).  The host says where installs go on the kernel command line:
 *
 *   sbx.pkg=offline | sbx.pkg=http://10.0.2.2:3141   (the session's cache)
 *   sbx.pkgpolicy=NAME    the policy named in refusals
 *   sbx.pkgreg=P,N        how many pypi and npm registries it allows
 *   sbx.npmscripts=deny   npm runs no install scripts (ignore-scripts); the
 *                         cache refuses packages that have any, which is
 *                         the half the guest cannot undo
 *   sbx.apt=S/C+C[!],...  apt's sources: the cache's apt entries, in order
 *                         (suite, components, '!' for an archive the
 *                         policy named); sbx.apt=- : refused here
 *
 * At boot we write /etc/pip.conf and the global npmrc into the overlay
 * root, so every pip and npm, whoever runs it and with whatever
 * environment, looks there first.  A warm-pool member is told its
 * session's parameters again at its claim (IDENTITY's PKG, the same
 * words) and writes them the same way (sbx_guest_pkg_params).  What the policy forbids is answered
 * here, at once, by a tiny responder on 127.0.0.1:3141 running as nobody:
 * a refusal naming the policy and its key, instead of a connection error
 * after pip's retries.  A session without a network device could not get
 * further anyway; the responder only makes the refusal fast and clear. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "init.h"
#include "proto.h"

#define LOCAL "http://127.0.0.1:3141"
#define NOBODY 65534u

static int plain(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
		      strchr("._-", s[i])))
			return 0;
	return n > 0;
}

int sbx_guest_pkg_param(struct sbx_guest_cfg *cfg, const char *tok, size_t len)
{
	if (len > 8 && !strncmp(tok, "sbx.pkg=", 8)) {
		const char *v = tok + 8;
		size_t vl = len - 8;
		/* The host only ever sends these two. */
		if ((vl == 7 && !strncmp(v, "offline", 7)) || (vl == 20 && !strncmp(v, "http://10.0.2.2:3141", 20))) {
			memcpy(cfg->pkg, v, vl);
			cfg->pkg[vl] = 0;
		} else {
			sbx_guest_log("ignoring invalid sbx.pkg");
		}
		return 1;
	}
	if (len > 14 && !strncmp(tok, "sbx.pkgpolicy=", 14)) {
		if (len - 14 < sizeof(cfg->pkg_policy) && plain(tok + 14, len - 14)) {
			memcpy(cfg->pkg_policy, tok + 14, len - 14);
			cfg->pkg_policy[len - 14] = 0;
		} else {
			sbx_guest_log("ignoring invalid sbx.pkgpolicy");
		}
		return 1;
	}
	if (len > 8 && !strncmp(tok, "sbx.apt=", 8)) {
		const char *v = tok + 8;
		size_t vl = len - 8, i;
		/* "-", or entries of [a-z0-9.-] with '/', '+', '!' and ','. */
		for (i = 0; i < vl; i++)
			if (!((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= '0' && v[i] <= '9') || strchr(".-/+!,", v[i])))
				break;
		if (i == vl && vl < sizeof(cfg->apt)) {
			memcpy(cfg->apt, v, vl);
			cfg->apt[vl] = 0;
		} else {
			sbx_guest_log("ignoring invalid sbx.apt");
		}
		return 1;
	}
	if (len == 19 && !strncmp(tok, "sbx.npmscripts=deny", 19)) {
		cfg->npm_no_scripts = 1;
		return 1;
	}
	if (len > 11 && !strncmp(tok, "sbx.pkgreg=", 11)) {
		unsigned v[2] = { 0, 0 }, k = 0;
		size_t i = 11;
		for (; i < len && k < 2; i++) {
			if (tok[i] == ',' && k == 0)
				k++;
			else if (tok[i] >= '0' && tok[i] <= '9' && v[k] < 100)
				v[k] = v[k] * 10 + (unsigned)(tok[i] - '0');
			else
				break;
		}
		if (i == len && k == 1) {
			cfg->pkg_pypi = v[0];
			cfg->pkg_npm = v[1];
		} else {
			sbx_guest_log("ignoring invalid sbx.pkgreg");
		}
		return 1;
	}
	return 0;
}

int sbx_guest_pkg_params(struct sbx_guest_cfg *cfg, const char *s)
{
	while (*s) {
		size_t len = strcspn(s, " ");
		if (len && !sbx_guest_pkg_param(cfg, s, len))
			return -1;
		s += len;
		s += strspn(s, " ");
	}
	return 0;
}

/* Replace path with text (root's, 0644), creating the file. */
static void put_file(const char *path, const char *text)
{
	char tmp[128];
	snprintf(tmp, sizeof(tmp), "%s.sbx-new", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	size_t n = strlen(text);
	if (fd < 0 || write(fd, text, n) != (ssize_t)n || fchmod(fd, 0644) < 0 || close(fd) < 0 ||
	    rename(tmp, path) < 0) {
		sbx_guest_log("cannot write %s: %s", path, strerror(errno));
		if (fd >= 0)
			unlink(tmp);
	}
}

/* What the responder says for a registry type it must refuse. */
static void refusal(const struct sbx_guest_cfg *cfg, const char *type, char *out, size_t n)
{
	const char *pol = cfg->pkg_policy[0] ? cfg->pkg_policy : "defaults";
	if (!strcmp(cfg->pkg, "offline"))
		snprintf(out, n, "package installs are refused: packages.mode: offline in policy %s", pol);
	else
		snprintf(out, n, "package installs are refused: policy %s has no %s registry in packages.registries",
			 pol, type);
}

/* The responder's reports to PID 1 (sbx_guest_pkg_report_fd): one line
 * per refusal, "TYPE METHOD TARGET", printable ASCII, at most
 * SBX_PKG_REQUEST_MAX bytes after the type; the agent hands each to the
 * host (SBX_F_PKG_REFUSED), which records it as guest-reported.  Written
 * without blocking: a full pipe drops the report, never the answer. */
#define REPORT_FD 4
static void report(const char *type, const char *req, const char *path, size_t pl)
{
	char line[SBX_PKG_REQUEST_MAX + 16];
	size_t ml = strcspn(req, " ");
	if (ml > 7)
		ml = 7;
	if (pl > SBX_PKG_REQUEST_MAX - 8)
		pl = SBX_PKG_REQUEST_MAX - 8;
	int n = snprintf(line, sizeof(line), "%s %.*s %.*s\n", type, (int)ml, req, (int)pl, path);
	for (int i = 0; i < n - 1; i++)
		if ((unsigned char)line[i] < 0x20 || (unsigned char)line[i] >= 0x7f)
			line[i] = '?';
	if (n > 0)
		(void)!write(REPORT_FD, line, (size_t)n);
}

/* One request, one refusal.  pip shows an index page's HTTP error only in
 * its debug log ("from versions: none" is all a user sees); what it does
 * print is the Content-Type of a page that is not an index.  So pip's
 * index requests get a 200 whose Content-Type carries the refusal; every
 * other client an honest 403 whose reason phrase (curl, wget, pip's
 * downloads) or, on npm's routes, JSON "error" carries it. */
static void answer(const struct sbx_guest_cfg *cfg, int fd)
{
	char req[4096], msg[256], out[1024];
	size_t n = 0;
	struct timeval tv = { .tv_sec = 5 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	while (n < sizeof(req) - 1) {
		ssize_t r = read(fd, req + n, sizeof(req) - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
		req[n] = 0;
		if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
			break;
	}
	req[n] = 0;
	const char *path = strchr(req, ' ');
	path = path ? path + 1 : "";
	int npm = !strncmp(path, "/npm/", 5);
	refusal(cfg, npm ? "npm" : !strncmp(path, "/apt/", 5) ? "apt" : "pypi", msg, sizeof(msg));
	const char *ua = strcasestr(req, "\nUser-Agent:");
	int pip = 0;
	if (ua) {
		ua += 12;
		while (*ua == ' ' || *ua == '\t')
			ua++;
		pip = !strncmp(ua, "pip/", 4);
	}
	const char *eol = strpbrk(path, " \r\n");
	size_t pl = eol ? (size_t)(eol - path) : strlen(path);
	report(npm ? "npm" : !strncmp(path, "/apt/", 5) ? "apt" : "pypi", req, path, pl);
	int index = !npm && memmem(path, pl, "/simple/", 8);
	char body[400];
	int bl;
	int w;
	if (pip && index) {
		bl = snprintf(body, sizeof(body), "sbx: %s\n", msg);
		w = snprintf(out, sizeof(out),
			     "HTTP/1.1 200 Refused\r\nContent-Type: text/plain; sbx-refused=\"%s\"\r\n"
			     "Content-Length: %d\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n%s",
			     msg, bl, body);
	} else {
		bl = npm ? snprintf(body, sizeof(body), "{\"error\":\"%s\"}", msg)
			 : snprintf(body, sizeof(body), "sbx: %s\n", msg);
		/* npm prints "403 REASON - GET URL - ERROR": its reason phrase
		 * is the standard one, so the refusal is said once. */
		w = snprintf(out, sizeof(out),
			     "HTTP/1.1 403 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
			     "Cache-Control: no-store\r\nConnection: close\r\n\r\n%s",
			     npm ? "Forbidden" : msg, npm ? "application/json" : "text/plain", bl, body);
	}
	if (w > 0 && (size_t)w < sizeof(out))
		(void)!send(fd, out, (size_t)w, MSG_NOSIGNAL);
	shutdown(fd, SHUT_WR);
}

/* The responder's socket, made once and kept by PID 1: a claim that
 * brings another policy replaces the responder, and connections made
 * meanwhile wait in its backlog for the new one. */
static int responder_fd = -1;
static pid_t responder_pid;

static int report_w = -1;
int sbx_guest_pkg_report_fd = -1;

static int responder_listen(void)
{
	int p[2];
	if (sbx_guest_pkg_report_fd < 0 && pipe2(p, O_CLOEXEC) == 0) {
		fcntl(p[0], F_SETFL, O_NONBLOCK);
		fcntl(p[1], F_SETFL, O_NONBLOCK);
		sbx_guest_pkg_report_fd = p[0];
		report_w = p[1];
	}
	if (responder_fd >= 0)
		return 0;
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(3141),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 64) < 0) {
		sbx_guest_log("package responder: cannot listen on 127.0.0.1:3141: %s", strerror(errno));
		if (s >= 0)
			close(s);
		return -1;
	}
	responder_fd = s;
	return 0;
}

static void __attribute__((noreturn)) responder(const struct sbx_guest_cfg *cfg)
{
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_IGN);
	prctl(PR_SET_NAME, "sbx-pkg-refuse");
	/* Forked from the agent at a claim: none of its descriptors but the
	 * listener and the report pipe's write end. */
	int s = dup2(responder_fd, 3);
	if (report_w < 0 || dup2(report_w, REPORT_FD) < 0)
		close(REPORT_FD);
	for (int fd = REPORT_FD + 1; fd < 1024; fd++)
		close(fd);
	if (s < 0)
		_exit(1);
	/* Nothing left to do as root: it answers strangers. */
	if (setgroups(0, NULL) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 || setresuid(NOBODY, NOBODY, NOBODY) < 0) {
		sbx_guest_log("package responder: cannot drop privileges: %s", strerror(errno));
		_exit(1);
	}
	for (;;) {
		int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		answer(cfg, c);
		close(c);
	}
}

/* The template's own apt sources, moved aside while sbx's stand in
 * (sources.list and sources.list.d's lists), so that a warm-pool member
 * that refused apt at boot gives them back at a claim whose policy
 * leaves apt alone. */
#define APT_KEPT "/etc/apt/sbx-template"

static int is_source(const char *n)
{
	size_t l = strlen(n);
	return (l > 5 && !strcmp(n + l - 5, ".list")) || (l > 8 && !strcmp(n + l - 8, ".sources"));
}

/* Move every source of from (a sources.list.d) into to, by name. */
static void apt_sources_move(const char *from, const char *to)
{
	DIR *d = opendir(from);
	int t = open(to, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (is_source(e->d_name) && (t < 0 || renameat(dirfd(d), e->d_name, t, e->d_name) < 0))
			unlinkat(dirfd(d), e->d_name, 0); /* never left to compete with ours */
	if (d)
		closedir(d);
	if (t >= 0)
		close(t);
}

/* Before sbx's sources are written: the template's moved aside, once
 * (a later claim finds them kept already); whatever else is in
 * sources.list.d goes. */
static void apt_sources_keep(void)
{
	if (mkdir(APT_KEPT, 0755) == 0 && mkdir(APT_KEPT "/sources.list.d", 0755) == 0)
		rename("/etc/apt/sources.list", APT_KEPT "/sources.list");
	apt_sources_move("/etc/apt/sources.list.d", APT_KEPT "/sources.list.d");
}

/* A policy that leaves apt alone: the template's sources as they were. */
static void apt_sources_restore(void)
{
	struct stat st;
	if (stat(APT_KEPT "/sources.list.d", &st) < 0)
		return;
	unlink("/etc/apt/apt.conf.d/90sbx");
	if (rename(APT_KEPT "/sources.list", "/etc/apt/sources.list") < 0)
		unlink("/etc/apt/sources.list"); /* the template had none */
	mkdir("/etc/apt/sources.list.d", 0755);
	apt_sources_move(APT_KEPT "/sources.list.d", "/etc/apt/sources.list.d");
	rmdir(APT_KEPT "/sources.list.d");
	rmdir(APT_KEPT);
}

/* apt: the cache's archives (sbx.apt=SUITE/COMP+COMP[!],...), or, with
 * sbx.apt=-, the responder's refusal; 1 when the responder must answer
 * apt.  Without the word, the template's own sources (given back if an
 * earlier policy replaced them).  A template without apt is left alone. */
static int apt_sources(const struct sbx_guest_cfg *cfg, const char *pol)
{
	struct stat st;
	if (stat("/etc/apt", &st) < 0)
		return 0;
	if (!cfg->apt[0]) {
		apt_sources_restore(); /* nothing when sbx never replaced them */
		return 0;
	}
	char text[4096], v[sizeof(cfg->apt)];
	int local = !strcmp(cfg->apt, "-") || !strcmp(cfg->pkg, "offline");
	size_t w = (size_t)snprintf(text, sizeof(text),
				    "# Written by sbx: apt follows policy %s (sbx-policy(5), packages).\n", pol);
	if (local) {
		/* Any suite: the responder refuses every path alike. */
		w += (size_t)snprintf(text + w, sizeof(text) - w, "deb [trusted=yes] %s/apt/refused sbx main\n", LOCAL);
	} else {
		snprintf(v, sizeof(v), "%s", cfg->apt);
		unsigned i = 0;
		for (char *save = NULL, *e = strtok_r(v, ",", &save); e && w < sizeof(text);
		     e = strtok_r(NULL, ",", &save), i++) {
			size_t el = strlen(e);
			int named = el && e[el - 1] == '!';
			if (named)
				e[--el] = 0;
			char *comps = strchr(e, '/');
			if (!comps || comps == e || !comps[1])
				continue;
			*comps++ = 0;
			for (char *c = comps; *c; c++)
				if (*c == '+')
					*c = ' ';
			/* An archive a policy named is checked by the cache
			 * with its keys, which the guest does not hold. */
			w += (size_t)snprintf(text + w, sizeof(text) - w, "deb %s%s/apt/%u %s %s\n",
					      named ? "[trusted=yes] " : "", cfg->pkg, i, e, comps);
		}
	}
	if (w >= sizeof(text))
		return 0;
	apt_sources_keep();
	put_file("/etc/apt/sources.list", text);
	/* Translations are indexes too: each costs the download budget and
	 * the guest's time, for descriptions no install needs. */
	mkdir("/etc/apt/apt.conf.d", 0755);
	put_file("/etc/apt/apt.conf.d/90sbx", "// Written by sbx (sbx-policy(5), packages).\n"
					      "Acquire::Languages \"none\";\nAcquire::Retries \"0\";\n");
	return local;
}

void sbx_guest_packages(const struct sbx_guest_cfg *cfg)
{
	if (!cfg->pkg[0])
		return; /* an older host: leave pip and npm as the template has them */
	int offline = !strcmp(cfg->pkg, "offline");
	const char *pol = cfg->pkg_policy[0] ? cfg->pkg_policy : "defaults";
	char text[2048];
	size_t w = 0;
	unsigned np = offline ? 0 : cfg->pkg_pypi, nn = offline ? 0 : cfg->pkg_npm;

	/* pip: the cache's indexes in policy order, or the responder. */
	w += (size_t)snprintf(text + w, sizeof(text) - w,
			      "# Written by sbx: pip follows policy %s (sbx-policy(5), packages).\n"
			      "[global]\nindex-url = %s/pypi/0/simple\n",
			      pol, np ? cfg->pkg : LOCAL);
	for (unsigned i = 1; i < np && i < 16 && w < sizeof(text); i++)
		w += (size_t)snprintf(text + w, sizeof(text) - w, "%s %s/pypi/%u/simple\n",
				      i == 1 ? "extra-index-url =" : "   ", cfg->pkg, i);
	if (w < sizeof(text))
		snprintf(text + w, sizeof(text) - w, "trusted-host = %s\ndisable-pip-version-check = true\n",
			 np ? "10.0.2.2" : "127.0.0.1");
	put_file("/etc/pip.conf", text);

	/* npm: one default registry; npm's audit and update checks would ask
	 * for endpoints no cache serves.  With packages.npm_scripts: deny,
	 * ignore-scripts too: a user can set it back (it is their npm), but
	 * the cache serves no package that has an install script, so what it
	 * would run then is only what came some other way. */
	snprintf(text, sizeof(text),
		 "# Written by sbx: npm follows policy %s (sbx-policy(5), packages).\n"
		 "registry=%s/npm/0/\naudit=false\nfund=false\nupdate-notifier=false\n%s",
		 pol, nn ? cfg->pkg : LOCAL, cfg->npm_no_scripts ? "ignore-scripts=true\n" : "");
	put_file("/etc/npmrc", text);
	/* npm installed under /usr by its own installer reads PREFIX/etc/npmrc. */
	struct stat st;
	if (stat("/usr/lib/node_modules/npm", &st) == 0) {
		mkdir("/usr/etc", 0755);
		put_file("/usr/etc/npmrc", text);
	}

	int apt_local = apt_sources(cfg, pol);

	/* Again at a claim: the old responder's policy is not this one's
	 * (PID 1 reaps it). */
	if (responder_pid > 0)
		kill(responder_pid, SIGKILL);
	responder_pid = 0;
	if ((np && nn && !apt_local) || responder_listen() < 0)
		return; /* nothing to refuse locally */
	pid_t pid = fork();
	if (pid < 0)
		sbx_guest_log("package responder: fork: %s", strerror(errno));
	else if (pid == 0)
		responder(cfg);
	else
		responder_pid = pid;
}
