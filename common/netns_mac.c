/* The guest's MAC (netns.h).  Apart from netns.c: sbx-create makes one
 * for every session with a NIC, and must not link netlink and nftables
 * for it (netns.o brings libnl-3, libnl-route-3 and libnftables, eight
 * more shared objects loaded at each start). */
#include "netns.h"
#include "util.h"

#include <string.h>
#include <sys/random.h>
#include <unistd.h>

void sbx_netns_mac_new(char out[18])
{
	uint8_t m[6];
	if (getrandom(m, sizeof m, 0) != (ssize_t)sizeof m) {
		uint64_t t = sbx_mono_ns() ^ ((uint64_t)getpid() << 32);
		memcpy(m, &t, sizeof m);
	}
	m[0] = (uint8_t)((m[0] & 0xfe) | 0x02); /* unicast, locally administered */
	snprintf(out, 18, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
}
