/* A session's network namespace: see netns.h. */
#include "netns.h"
#include "session.h"
#include "state.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if_arp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <nftables/libnftables.h>

/* Input from the guest reaches only the proxy, the package cache and the
 * resolver; every other TCP connection is redirected to the proxy, which
 * learns where it was going from conntrack (SO_ORIGINAL_DST).  No ICMP,
 * no UDP but DNS, no IPv6, no forwarding.  An "accept" in the nat chain
 * only means "not redirected". */
static const char ruleset[] =
	"table inet sbx {\n"
	/* DNS over UDP bypasses conntrack: a stub resolver sends A and AAAA
	 * at once from one socket, and the second datagram of a new flow can
	 * lose the conntrack insertion race and be dropped (a 5 s stall). */
	"  chain raw_pre {\n"
	"    type filter hook prerouting priority raw; policy accept;\n"
	"    iifname \"" SBX_NET_TAP "\" ip daddr " SBX_NET_GW " udp dport 53 notrack\n"
	"  }\n"
	"  chain raw_out {\n"
	"    type filter hook output priority raw; policy accept;\n"
	"    oifname \"" SBX_NET_TAP "\" ip saddr " SBX_NET_GW " udp sport 53 notrack\n"
	"  }\n"
	"  chain pre {\n"
	"    type nat hook prerouting priority dstnat; policy accept;\n"
	"    iifname \"" SBX_NET_TAP "\" ip daddr " SBX_NET_GW " tcp dport { 53, 3141 } accept\n"
	"    iifname \"" SBX_NET_TAP "\" meta nfproto ipv4 meta l4proto tcp dnat ip to " SBX_NET_GW ":3128\n"
	"  }\n"
	"  chain input {\n"
	"    type filter hook input priority filter; policy drop;\n"
	"    iif \"lo\" accept\n"
	"    iifname \"" SBX_NET_TAP "\" ip daddr " SBX_NET_GW " tcp dport { 53, 3128, 3141 } accept\n"
	"    iifname \"" SBX_NET_TAP "\" ip daddr " SBX_NET_GW " udp dport 53 accept\n"
	"  }\n"
	"  chain forward {\n"
	"    type filter hook forward priority filter; policy drop;\n"
	"  }\n"
	"}\n";

void sbx_netns_close(struct sbx_netns *n)
{
	int *fds[] = { &n->netns_fd, &n->tap_fd, &n->tcp_fd, &n->dns_udp_fd, &n->dns_tcp_fd, &n->pkg_fd };
	for (size_t i = 0; i < SBX_ARRAY_LEN(fds); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
}

/* ---- in the child, inside the new namespace ---- */

static int fail(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t n, const char *fmt, ...)
{
	int e = errno;
	va_list ap;
	va_start(ap, fmt);
	int w = vsnprintf(why, n, fmt, ap);
	va_end(ap);
	if (e && w > 0 && (size_t)w < n)
		snprintf(why + w, n - (size_t)w, ": %s", strerror(e));
	return -1;
}

static int link_up(struct nl_sock *sk, const char *name, int *ifindex, char *why, size_t n)
{
	struct rtnl_link *l = NULL, *ch = rtnl_link_alloc();
	int rc = rtnl_link_get_kernel(sk, 0, name, &l);
	if (rc >= 0 && ch) {
		rtnl_link_set_flags(ch, IFF_UP);
		rc = rtnl_link_change(sk, l, ch, 0);
		if (ifindex)
			*ifindex = rtnl_link_get_ifindex(l);
	}
	if (l)
		rtnl_link_put(l);
	if (ch)
		rtnl_link_put(ch);
	if (rc < 0 || !ch) {
		errno = 0;
		return fail(why, n, "cannot bring %s up: %s", name, ch ? nl_geterror(rc) : "out of memory");
	}
	return 0;
}

static int add_addr(struct nl_sock *sk, int ifindex, char *why, size_t n)
{
	struct rtnl_addr *a = rtnl_addr_alloc();
	struct nl_addr *local = NULL;
	int rc = a ? nl_addr_parse(SBX_NET_GW, AF_INET, &local) : -NLE_NOMEM;
	if (rc >= 0) {
		rtnl_addr_set_ifindex(a, ifindex);
		rtnl_addr_set_local(a, local);
		rtnl_addr_set_prefixlen(a, SBX_NET_PREFIX);
		rc = rtnl_addr_add(sk, a, 0);
	}
	if (local)
		nl_addr_put(local);
	if (a)
		rtnl_addr_put(a);
	if (rc < 0) {
		errno = 0;
		return fail(why, n, "cannot give %s its address: %s", SBX_NET_TAP, nl_geterror(rc));
	}
	return 0;
}

static int make_tap(char *why, size_t n)
{
	int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return fail(why, n, "cannot open /dev/net/tun");
	struct ifreq ifr = { .ifr_flags = IFF_TAP | IFF_NO_PI };
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", SBX_NET_TAP);
	if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
		fail(why, n, "cannot create the TAP device %s", SBX_NET_TAP);
		close(fd);
		return -1;
	}
	static const unsigned char gw_mac[6] = SBX_NET_GW_MAC;
	ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
	memcpy(ifr.ifr_hwaddr.sa_data, gw_mac, sizeof gw_mac);
	if (ioctl(fd, SIOCSIFHWADDR, &ifr) < 0) {
		fail(why, n, "cannot set the MAC of %s", SBX_NET_TAP);
		close(fd);
		return -1;
	}
	return fd;
}

/* network.rate: a token bucket each way on sbx0, in a table of its own
 * at the edges (before conntrack in, after everything out), so every
 * packet of the guest's counts, DNS and the package cache included.
 * Policing, not shaping: what passes the rate is dropped and TCP backs
 * off to it; QEMU's TAP netdev has no rate limit of its own, and a drop
 * here needs no qdisc the host may lack.  No burst: the kernel's bucket
 * holds a second's worth besides it, enough for TCP to reach the rate. */
static int rate_rules(char *out, size_t outn, uint64_t rate)
{
	unsigned long long r = (unsigned long long)rate;
	return snprintf(out, outn,
			"table inet sbx_rate {\n"
			"  chain in {\n"
			"    type filter hook prerouting priority -400; policy accept;\n"
			"    iifname \"" SBX_NET_TAP "\" limit rate over %llu bytes/second drop\n"
			"  }\n"
			"  chain out {\n"
			"    type filter hook postrouting priority 400; policy accept;\n"
			"    oifname \"" SBX_NET_TAP "\" limit rate over %llu bytes/second drop\n"
			"  }\n"
			"}\n",
			r, r);
}

static int load_ruleset(uint64_t rate, char *why, size_t n)
{
	char rl[600];
	if (rate && (size_t)rate_rules(rl, sizeof rl, rate) >= sizeof rl) {
		errno = 0;
		return fail(why, n, "the rate rules do not fit");
	}
	struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
	if (!nft) {
		errno = 0;
		return fail(why, n, "cannot start libnftables");
	}
	nft_ctx_buffer_output(nft);
	nft_ctx_buffer_error(nft);
	int rc = nft_run_cmd_from_buffer(nft, ruleset);
	if (!rc && rate)
		rc = nft_run_cmd_from_buffer(nft, rl);
	if (rc) {
		const char *e = nft_ctx_get_error_buffer(nft);
		errno = 0;
		fail(why, n,
		     "cannot load the session's nftables ruleset (does the host kernel have nf_tables "
		     "and nf_nat?): %.300s",
		     e ? e : "");
	}
	nft_ctx_free(nft);
	return rc ? -1 : 0;
}

static int listener(int type, uint16_t port, char *why, size_t n)
{
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, SBX_NET_GW, &a.sin_addr);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || (type == SOCK_STREAM && listen(fd, 128) < 0)) {
		fail(why, n, "cannot listen on %s:%u in the session's namespace", SBX_NET_GW, port);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static void write_sysctl(const char *path, const char *v)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (write(fd, v, strlen(v)) < 0) {
			/* best effort: nftables drops IPv6 anyway */
		}
		close(fd);
	}
}

/* The namespace and its TAP, nothing else: sbx0 down, no address, no
 * rules, no listener (what a warm-pool member boots with). */
static int child_bare(int fds[6], char *why, size_t n)
{
	if (unshare(CLONE_NEWNET) < 0)
		return fail(why, n, "cannot create a network namespace");
	fds[0] = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (fds[0] < 0)
		return fail(why, n, "cannot open the network namespace");
	/* The guest gets IPv4 only: no IPv6 link-local chatter on sbx0. */
	write_sysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
	write_sysctl("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
	return (fds[1] = make_tap(why, n)) < 0 ? -1 : 0;
}

/* In a namespace holding sbx0 (ours, made by child_bare): its address,
 * the ruleset, the listeners. */
static int child_configure(int fds[6], uint64_t rate, char *why, size_t n)
{
	struct nl_sock *sk = nl_socket_alloc();
	if (!sk || nl_connect(sk, NETLINK_ROUTE) < 0) {
		if (sk)
			nl_socket_free(sk);
		errno = 0;
		return fail(why, n, "cannot open a netlink socket");
	}
	int ifindex = (int)if_nametoindex(SBX_NET_TAP);
	int rc = link_up(sk, "lo", NULL, why, n);
	if (rc == 0 && !ifindex) {
		errno = 0;
		rc = fail(why, n, "the namespace has no %s", SBX_NET_TAP);
	}
	if (rc == 0)
		rc = add_addr(sk, ifindex, why, n);
	if (rc == 0)
		rc = link_up(sk, SBX_NET_TAP, NULL, why, n);
	nl_socket_free(sk);
	if (rc < 0 || load_ruleset(rate, why, n) < 0)
		return -1;
	if ((fds[2] = listener(SOCK_STREAM, SBX_NET_PROXY_PORT, why, n)) < 0 ||
	    (fds[3] = listener(SOCK_DGRAM, SBX_NET_DNS_PORT, why, n)) < 0 ||
	    (fds[4] = listener(SOCK_STREAM, SBX_NET_DNS_PORT, why, n)) < 0 ||
	    (fds[5] = listener(SOCK_STREAM, SBX_NET_PKG_PORT, why, n)) < 0)
		return -1;
	return 0;
}

/* What a helper child makes: all of it, the bare namespace, or the rest
 * of a bare one it joins. */
enum { NS_FULL, NS_BARE, NS_COMPLETE };

static int child_setup(int mode, int join_fd, uint64_t rate, int fds[6], char *why, size_t n)
{
	if (mode == NS_COMPLETE) {
		if (setns(join_fd, CLONE_NEWNET) < 0)
			return fail(why, n, "cannot enter the session's network namespace");
		return child_configure(fds, rate, why, n);
	}
	if (child_bare(fds, why, n) < 0)
		return -1;
	return mode == NS_BARE ? 0 : child_configure(fds, rate, why, n);
}

/* The fds a mode hands back, in netns.h's order. */
static const unsigned mode_first[] = { 0, 0, 2 }, mode_count[] = { 6, 2, 4 };

static void child(int sock, int parent, int mode, int join_fd, uint64_t rate)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	int fds[6] = { -1, -1, -1, -1, -1, -1 };
	char why[512] = "";
	if (child_setup(mode, join_fd, rate, fds, why, sizeof why) < 0) {
		sbx_write_all(sock, why, strlen(why));
		_exit(1);
	}
	_exit(sbx_sendmsg_fds(sock, "k", 1, fds + mode_first[mode], (int)mode_count[mode], 0) == 1 ? 0 : 1);
}

static int run_helper(int mode, int join_fd, uint64_t rate, struct sbx_netns *n, struct sbx_err *err)
{
	*n = (struct sbx_netns){ -1, -1, -1, -1, -1, -1 };
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make a socket pair");
	int parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		close(sp[0]);
		close(sp[1]);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot fork");
	}
	if (pid == 0) {
		close(sp[0]);
		child(sp[1], parent, mode, join_fd, rate);
	}
	close(sp[1]);
	char msg[512];
	struct iovec iov = { .iov_base = msg, .iov_len = sizeof msg - 1 };
	union {
		char buf[CMSG_SPACE(6 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
	ssize_t r;
	while ((r = recvmsg(sp[0], &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	close(sp[0]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	size_t len = mode_count[mode] * sizeof(int);
	struct cmsghdr *cm = r > 0 ? CMSG_FIRSTHDR(&m) : NULL;
	if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS && cm->cmsg_len == CMSG_LEN(len)) {
		int fds[6] = { -1, -1, -1, -1, -1, -1 };
		memcpy(fds + mode_first[mode], CMSG_DATA(cm), len);
		*n = (struct sbx_netns){ fds[0], fds[1], fds[2], fds[3], fds[4], fds[5] };
		if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			sbx_netns_close(n);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the network set-up helper failed");
		}
		return 0;
	}
	msg[r > 0 ? r : 0] = 0;
	return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "cannot give the session a network: %s",
			   msg[0] ? msg : "the set-up helper died");
}

int sbx_netns_create(struct sbx_netns *n, uint64_t rate, struct sbx_err *err)
{
	return run_helper(NS_FULL, -1, rate, n, err);
}

int sbx_netns_create_bare(struct sbx_netns *n, struct sbx_err *err)
{
	return run_helper(NS_BARE, -1, 0, n, err);
}

int sbx_netns_complete(int netns_fd, uint64_t rate, struct sbx_netns *n, struct sbx_err *err)
{
	return run_helper(NS_COMPLETE, netns_fd, rate, n, err);
}

/* The proxy's word on its readiness pipe: 'R' once it runs (its
 * configuration accepted, both halves set up, its listeners served), or
 * 'E' CODE ' ' MESSAGE when it cannot start.  EOF before either: it died
 * without a word (its status then says how). */
static int proxy_wait_ready(int fd, pid_t p, int pidfd, struct sbx_err *err)
{
	char buf[600];
	size_t n = 0;
	uint64_t deadline = sbx_mono_ns() + SBX_PROXY_START_TIMEOUT_S * 1000000000ull;
	for (;;) {
		uint64_t now = sbx_mono_ns();
		if (now >= deadline)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the session's proxy did not start within %d s",
					   SBX_PROXY_START_TIMEOUT_S);
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		int r = poll(&pf, 1, (int)((deadline - now) / 1000000u) + 1);
		if (r < 0 && errno != EINTR)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot wait for the session's proxy");
		if (r <= 0)
			continue;
		ssize_t k = read(fd, buf + n, sizeof buf - 1 - n);
		if (k < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (k > 0 && (n += (size_t)k) < sizeof buf - 1 && buf[0] == 'E')
			continue; /* the message, to its end */
		if (n && buf[0] == 'R')
			return 0;
		break;
	}
	buf[n] = 0;
	if (n > 1 && buf[0] == 'E') {
		char *end;
		long code = strtol(buf + 1, &end, 10);
		end[strcspn(end, "\n")] = 0; /* the first message: a second half may say why too */
		sbx_text_clean(end);         /* the proxy's bytes, on their way to a terminal */
		if (*end == ' ' && code > 0 && code < 256)
			return sbx_err_set(err, (int)code, 0, "the session's proxy did not start: %s", end + 1);
	}
	int st = 0; /* how it ended: its pipe closes as it exits */
	struct pollfd pf = { .fd = pidfd, .events = POLLIN };
	if (pidfd >= 0)
		poll(&pf, 1, 1000);
	if (waitpid(p, &st, WNOHANG) != p)
		st = 0;
	else if (WIFSIGNALED(st))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
				   "the session's proxy was killed by signal %d as it started", WTERMSIG(st));
	else if (WEXITSTATUS(st) == 126)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot start the session's proxy");
	else if (WEXITSTATUS(st) == 127)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "cannot execute the session's proxy");
	return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the session's proxy ended as it started");
}

int sbx_netns_spawn_proxy(const char *id, const struct sbx_netns *n, int log_fd, int *pid, int *pidfd, uint64_t *start,
			  int *busy_fd, struct sbx_err *err)
{
	/* Beside the running monitor (libexec/sbx), else where the commands
	 * look for helpers. */
	char path[PATH_MAX] = "";
	ssize_t r = readlink("/proc/self/exe", path, sizeof path - 16);
	char *slash = r > 0 ? (path[r] = 0, strrchr(path, '/')) : NULL;
	if (slash)
		strcpy(slash + 1, "sbx-proxy");
	if ((!slash || access(path, X_OK) < 0) &&
	    (sbx_libexec_path("sbx-proxy", path, sizeof path) < 0 || access(path, X_OK) < 0))
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, errno, "cannot find sbx-proxy (looked at %s)", path);
	int busy[2], ready[2];
	if (pipe2(busy, O_CLOEXEC | O_NONBLOCK) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make the proxy's pipe");
	if (pipe2(ready, O_CLOEXEC) < 0) {
		close(busy[0]);
		close(busy[1]);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make the proxy's pipe");
	}
	int parent = getpid();
	pid_t p = fork();
	if (p < 0) {
		close(busy[0]);
		close(busy[1]);
		close(ready[0]);
		close(ready[1]);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot fork the proxy");
	}
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		/* Exactly these cross the exec, at fixed numbers (3..8). */
		int from[6] = { n->tcp_fd, n->dns_udp_fd, n->dns_tcp_fd, n->pkg_fd, busy[1], ready[1] }, hi[6];
		for (int i = 0; i < 6; i++)
			if ((hi[i] = fcntl(from[i], F_DUPFD_CLOEXEC, 64)) < 0)
				_exit(126);
		int devnull = open("/dev/null", O_RDONLY);
		if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0)
			_exit(126);
		for (int i = 0; i < 6; i++)
			if (dup2(hi[i], 3 + i) < 0)
				_exit(126);
		close_range(9, ~0u, 0);
		execl(path, "sbx-proxy", "--id", id, "--tcp-fd", "3", "--dns-udp-fd", "4", "--dns-tcp-fd", "5",
		      "--pkg-fd", "6", "--busy-fd", "7", "--ready-fd", "8", (char *)NULL);
		dprintf(2, "cannot execute %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	close(busy[1]);
	close(ready[1]);
	*pid = p;
	*pidfd = (int)syscall(SYS_pidfd_open, p, 0);
	*start = sbx_proc_start_time(p);
	/* Not ready, not started: a session whose proxy refused its
	 * configuration must not be reported ready with no way out. */
	int rc = proxy_wait_ready(ready[0], p, *pidfd, err);
	close(ready[0]);
	if (rc < 0) {
		close(busy[0]);
		sbx_netns_stop_proxy(pid, pidfd);
		return -1;
	}
	*busy_fd = busy[0];
	return 0;
}

void sbx_netns_stop_proxy(int *pid, int *pidfd)
{
	if (*pid <= 0)
		return;
	if (*pidfd >= 0) {
		syscall(SYS_pidfd_send_signal, *pidfd, SIGTERM, NULL, 0);
		struct pollfd pf = { .fd = *pidfd, .events = POLLIN };
		if (poll(&pf, 1, 1000) == 0)
			syscall(SYS_pidfd_send_signal, *pidfd, SIGKILL, NULL, 0);
	} else {
		kill(*pid, SIGKILL);
	}
	while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
		;
	if (*pidfd >= 0)
		close(*pidfd);
	*pid = 0;
	*pidfd = -1;
}
