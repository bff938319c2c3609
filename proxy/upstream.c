/* The package cache towards the registries (pkgcache.h): at most
 * SBX_PKGCACHE_FETCHES_MAX fetches at once, each through libcurl with every
 * address checked against the deny list, every body byte reserved against
 * packages.max_download before it is taken. */
#include "pkgc.h"
#include "egress.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#define BUDGET_CHUNK (1u << 20) /* reserved at a time when upstream gives no length */
#define UP_CONNECT_TIMEOUT_S 15
#define UP_LOW_SPEED_S 60 /* upstream below 1 KiB/s this long: give up */

/* ---- the deny list ------------------------------------------------------ */

const char *sbx_pkgcache_addr_denied(const struct sockaddr *sa, socklen_t len)
{
	if ((sa->sa_family == AF_INET && len < (socklen_t)sizeof(struct sockaddr_in)) ||
	    (sa->sa_family == AF_INET6 && len < (socklen_t)sizeof(struct sockaddr_in6)))
		return "not an IP address";
	return sbx_egress_denied_here(sa); /* the proxy's own list */
}

/* ---- upstream slots ------------------------------------------------------ */

/* Upstream fetches in flight in this process (one proxy per session). */
static pthread_mutex_t up_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t up_cv;
static unsigned up_active;

void pc_slots_init(void)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&up_cv, &ca);
	pthread_condattr_destroy(&ca);
}

/* Wait for one of the SBX_PKGCACHE_FETCHES_MAX upstream slots, at most
 * IO_TIMEOUT_S.  0, or -1 when none came free.  A thread that waits is
 * named "pkgcache-wait" meanwhile (ps -L, /proc/PID/task/TID/comm). */
int pc_slot_take(struct conn *c)
{
	if (c->slot)
		return 0;
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += IO_TIMEOUT_S;
	pthread_mutex_lock(&up_mu);
	int rc = 0;
	char name[17] = "";
	if (up_active >= SBX_PKGCACHE_FETCHES_MAX && prctl(PR_GET_NAME, name) == 0)
		prctl(PR_SET_NAME, "pkgcache-wait");
	while (up_active >= SBX_PKGCACHE_FETCHES_MAX && rc == 0)
		rc = pthread_cond_timedwait(&up_cv, &up_mu, &dl);
	if (name[0])
		prctl(PR_SET_NAME, name);
	if (up_active < SBX_PKGCACHE_FETCHES_MAX) {
		up_active++;
		c->slot = 1;
	}
	pthread_mutex_unlock(&up_mu);
	return c->slot ? 0 : -1;
}

void pc_slot_give(struct conn *c)
{
	if (!c->slot)
		return;
	pthread_mutex_lock(&up_mu);
	up_active--;
	pthread_cond_signal(&up_cv);
	pthread_mutex_unlock(&up_mu);
	c->slot = 0;
}

/* ---- upstream ------------------------------------------------------------ */

/* Reserve what the body needs beyond what is reserved: at least what
 * arrived, a chunk ahead when it fits.  0, or -1 (f->broke set). */
static int reserve(struct fetch *f, uint64_t upto)
{
	if (!f->budget || upto <= f->reserved)
		return 0;
	uint64_t need = upto - f->reserved, ask = need < BUDGET_CHUNK ? BUDGET_CHUNK : need, used;
	if (ask > f->max - f->reserved)
		ask = f->max - f->reserved;
	int b = pc_budget_take(f->budget, ask, &used);
	if (b == 1 && ask > need)
		b = pc_budget_take(f->budget, ask = need, &used);
	if (b != 0) {
		f->broke = b < 0 ? -1 : 1;
		return -1;
	}
	f->reserved += ask;
	return 0;
}

static size_t on_body(char *p, size_t sz, size_t nm, void *ud)
{
	struct fetch *f = ud;
	size_t n = sz * nm;
	if (!f->started) {
		/* The final response's length, when it gives one: reserved
		 * whole before its first byte is taken. */
		f->started = 1;
		curl_off_t cl = -1;
		char *eff = NULL;
		curl_easy_getinfo(f->h, CURLINFO_EFFECTIVE_URL, &eff);
		snprintf(f->effective, sizeof f->effective, "%s", eff ? eff : f->url);
		if (curl_easy_getinfo(f->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) == CURLE_OK && cl > 0) {
			if ((uint64_t)cl > f->max) {
				f->over = 1;
				return 0;
			}
			if (reserve(f, (uint64_t)cl) < 0)
				return 0;
		}
	}
	if (f->bytes + n > f->max) {
		f->over = 1;
		return 0;
	}
	if (reserve(f, f->bytes + n) < 0)
		return 0;
	f->bytes += n;
	if (f->links)
		return pc_index_feed(f, p, n) < 0 ? 0 : n;
	if (f->fd >= 0) {
		if (sbx_write_all(f->fd, p, n) < 0) {
			f->werr = errno;
			return 0;
		}
		SHA256Update(&f->s256, (const uint8_t *)p, n);
		SHA512Update(&f->s512, (const uint8_t *)p, n);
		SHA1Update(&f->s1, (const uint8_t *)p, n);
		return n;
	}
	pc_sb_add(&f->body, p, n);
	if (f->body.oom) {
		f->oom = 1;
		return 0;
	}
	return n;
}

/* Every connection libcurl opens, redirects included, is checked here
 * against the deny list, on the address it is about to connect to (no
 * DNS rebinding between a check and the connect). */
static curl_socket_t on_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct fetch *f = ud;
	const char *why =
		purpose != CURLSOCKTYPE_IPCXN ? "not a TCP connection" : sbx_pkgcache_addr_denied(&a->addr, a->addrlen);
	if (why) {
		char ip[INET6_ADDRSTRLEN] = "?";
		if (a->family == AF_INET)
			inet_ntop(AF_INET, &((struct sockaddr_in *)&a->addr)->sin_addr, ip, sizeof ip);
		else if (a->family == AF_INET6)
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&a->addr)->sin6_addr, ip, sizeof ip);
		snprintf(f->denied, sizeof f->denied, "%s (%s)", ip, why);
		return CURL_SOCKET_BAD;
	}
	return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

/* 0: a 2xx answer was read completely; -1: f->error says why. */
int pc_fetch(struct fetch *f)
{
	CURL *h = curl_easy_init();
	if (!h) {
		snprintf(f->error, sizeof f->error, "cannot start libcurl");
		return -1;
	}
	char cerr[CURL_ERROR_SIZE] = "";
	struct curl_slist *hdr = NULL;
	char accept[256];
	snprintf(accept, sizeof accept, "Accept: %s", f->accept ? f->accept : "*/*");
	hdr = curl_slist_append(hdr, accept);
	SHA256Init(&f->s256);
	SHA512Init(&f->s512);
	SHA1Init(&f->s1);
	curl_easy_setopt(h, CURLOPT_URL, f->url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
	curl_easy_setopt(h, CURLOPT_PROXY, ""); /* never a proxy from the environment */
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)UP_CONNECT_TIMEOUT_S);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)UP_LOW_SPEED_S);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "sbx-pkgcache/1");
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, on_socket);
	curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, f);
	curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)f->max);
	if (f->fd < 0)
		curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, ""); /* pages may come compressed; files as they are */
	f->h = h;
	CURLcode rc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &f->status);
	char *eff = NULL;
	curl_easy_getinfo(h, CURLINFO_EFFECTIVE_URL, &eff);
	snprintf(f->effective, sizeof f->effective, "%s", eff ? eff : f->url);
	curl_easy_cleanup(h);
	f->h = NULL;
	curl_slist_free_all(hdr);
	/* What arrived stays charged (the host fetched it, whatever it
	 * turns out to be); the rest of the reservation goes back. */
	if (f->budget && f->reserved > f->bytes) {
		uint64_t used;
		pc_budget_op(f->budget, 0, f->reserved - f->bytes, &used);
		f->reserved = f->bytes;
	}
	if (rc == CURLE_FILESIZE_EXCEEDED)
		f->over = 1;
	if (f->over) {
		snprintf(f->error, sizeof f->error, "larger than %llu bytes", (unsigned long long)f->max);
		return -1;
	}
	if (f->broke) {
		snprintf(f->error, sizeof f->error, "%s",
			 f->broke > 0 ? "packages.max_download spent" : "cannot account against packages.max_download");
		return -1;
	}
	if (f->oom) {
		snprintf(f->error, sizeof f->error, "out of memory");
		return -1;
	}
	if (f->denied[0]) {
		snprintf(f->error, sizeof f->error, "address %s is on the deny list", f->denied);
		return -1;
	}
	if (rc != CURLE_OK) {
		snprintf(f->error, sizeof f->error, "%s",
			 f->werr   ? strerror(f->werr)
			 : cerr[0] ? cerr
				   : curl_easy_strerror(rc));
		return -1;
	}
	if (f->status < 200 || f->status > 299) {
		snprintf(f->error, sizeof f->error, "upstream answered HTTP %ld", f->status);
		return -1;
	}
	return 0;
}

/* base + "/" + rest, with base's trailing slashes dropped. */
void pc_join_url(char *out, size_t n, const char *base, const char *rest)
{
	size_t bl = strlen(base);
	while (bl && base[bl - 1] == '/')
		bl--;
	snprintf(out, n, "%.*s/%s", (int)bl, base, rest);
}

/* href resolved against the page's URL; http(s) only. */
int pc_resolve_url(const char *base, const char *href, char *out, size_t n)
{
	CURLU *u = curl_url();
	char *s = NULL;
	int rc = -1;
	if (u && curl_url_set(u, CURLUPART_URL, base, 0) == CURLUE_OK &&
	    curl_url_set(u, CURLUPART_URL, href, 0) == CURLUE_OK &&
	    curl_url_set(u, CURLUPART_FRAGMENT, NULL, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_URL, &s, 0) == CURLUE_OK && strlen(s) < n &&
	    (!strncmp(s, "https://", 8) || !strncmp(s, "http://", 7))) {
		snprintf(out, n, "%s", s);
		rc = 0;
	}
	curl_free(s);
	curl_url_cleanup(u);
	return rc;
}

/* Before an index page or metadata document is fetched: a slot, and what
 * is left of the budget (*max: what the fetch may take).  0, or -1 with
 * the refusal already sent. */
int pc_upstream_begin(struct conn *c, struct outcome *o, const char *what, uint64_t *max)
{
	char msg[600];
	uint64_t used = 0;
	int b = pc_budget_take(c, 0, &used);
	if (b < 0)
		return pc_refuse(c, o, 500, "cannot account the download against packages.max_download", 0), -1;
	uint64_t left = pc_budget_left(c, used);
	if (!left) {
		snprintf(msg, sizeof msg, "packages.max_download of policy %s exceeded: nothing left of %llu for %s",
			 pc_policy_name(c), (unsigned long long)c->cfg->pkg->max_download, what);
		return pc_refuse(c, o, 403, msg, 0), -1;
	}
	if (pc_slot_take(c) < 0) {
		snprintf(msg, sizeof msg, "%u upstream fetches of this session are in flight; try again",
			 SBX_PKGCACHE_FETCHES_MAX);
		return pc_refuse(c, o, 503, msg, 0), -1;
	}
	*max = left < INDEX_MAX ? left : INDEX_MAX;
	return 0;
}

/* A fetch of an index page or metadata document failed on the budget:
 * refuse naming the key.  Else 1: not a budget failure. */
int pc_refuse_page_budget(struct conn *c, struct outcome *o, const struct fetch *f, const char *what)
{
	char msg[600];
	if (!(f->broke > 0 || (f->over && f->max < INDEX_MAX)))
		return 1;
	snprintf(msg, sizeof msg,
		 "packages.max_download of policy %s exceeded: %s does not fit in what is left of %llu",
		 pc_policy_name(c), what, (unsigned long long)c->cfg->pkg->max_download);
	return pc_refuse(c, o, 403, msg, 0), -1;
}
