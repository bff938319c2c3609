/* The guest's one NIC (sbx.net=1; the host's side is common/netns.h):
 * eth0 10.0.2.15/24, default route and resolver 10.0.2.2.  Everything
 * beyond the gateway is the host's proxy, which decides what is reached;
 * nothing here is a security boundary. */
#include "init.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NET_IF "eth0"
#define NET_ADDR "10.0.2.15"
#define NET_MASK "255.255.255.0"
#define NET_GW "10.0.2.2"
#define WAIT_NIC_MS 3000

static void set_in(struct sockaddr *sa, const char *a)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)sa;
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	inet_pton(AF_INET, a, &sin->sin_addr);
}

/* The device appears when virtio_net probes, which load_modules started. */
static int wait_nic(void)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };
	for (int waited = 0; waited < WAIT_NIC_MS; waited += 10) {
		if (access("/sys/class/net/" NET_IF, F_OK) == 0)
			return 0;
		nanosleep(&ts, NULL);
	}
	return -1;
}

int sbx_guest_net_up(void)
{
	struct ifreq ifr;
	struct rtentry rt;
	int s, rc = -1;

	if (wait_nic() < 0) {
		sbx_guest_log("sbx.net: no " NET_IF);
		return -1;
	}
	s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0) {
		sbx_guest_log("sbx.net: socket: %s", strerror(errno));
		return -1;
	}
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, NET_IF);
	set_in(&ifr.ifr_addr, NET_ADDR);
	if (ioctl(s, SIOCSIFADDR, &ifr) < 0)
		goto out;
	set_in(&ifr.ifr_netmask, NET_MASK);
	if (ioctl(s, SIOCSIFNETMASK, &ifr) < 0)
		goto out;
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		goto out;
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		goto out;
	memset(&rt, 0, sizeof(rt));
	set_in(&rt.rt_dst, "0.0.0.0");
	set_in(&rt.rt_genmask, "0.0.0.0");
	set_in(&rt.rt_gateway, NET_GW);
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	rt.rt_dev = (char *)NET_IF;
	if (ioctl(s, SIOCADDRT, &rt) < 0 && errno != EEXIST)
		goto out;
	rc = 0;
out:
	if (rc < 0)
		sbx_guest_log("sbx.net: configuring " NET_IF ": %s", strerror(errno));
	close(s);
	/* In the session's overlay: a template's own file (or a symlink to
	 * one) is replaced, not followed. */
	mkdir("/etc", 0755);
	unlink("/etc/resolv.conf");
	int fd = open("/etc/resolv.conf", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	static const char conf[] = "nameserver " NET_GW "\n";
	if (fd < 0 || write(fd, conf, sizeof(conf) - 1) != (ssize_t)(sizeof(conf) - 1)) {
		sbx_guest_log("sbx.net: /etc/resolv.conf: %s", strerror(errno));
		rc = -1;
	}
	if (fd >= 0)
		close(fd);
	return rc;
}
