# sbx: plain GNU Makefile, pkg-config for every dependency.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR = $(PREFIX)/bin
LIBEXECDIR = $(PREFIX)/libexec/sbx
MANDIR = $(PREFIX)/share/man
# Where bash-completion looks for a command's completion on first use.
BASHCOMPDIR ?= $(or $(shell pkg-config --variable=completionsdir bash-completion 2>/dev/null),/usr/share/bash-completion/completions)
B ?= build
SYSTEMDDIR ?= /etc/systemd/system

CC ?= cc
PKGS = jansson libarchive libbsd-overlay libcurl libmd libnftables libnl-route-3.0 libseccomp libxml-2.0 libzstd yaml-0.1
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS := $(shell pkg-config --libs $(PKGS))
WARN = -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 \
       -Wno-unused-parameter -Wno-format-truncation -Werror=implicit-function-declaration -Werror=format-security \
       -Werror=shadow -Werror=strict-prototypes -Werror=missing-prototypes
OPT ?= -O2 -g
SAN ?=
# -MMD -MP: each object and program also depends on exactly the headers it
# includes (build/**/*.d, read below).
CFLAGS_ALL = -std=gnu11 $(OPT) $(SAN) $(WARN) -MMD -MP -D_GNU_SOURCE -Icommon $(PKG_CFLAGS) $(CFLAGS)
# --as-needed: each program records only the libraries it calls (sbx-exec
# does not load libnftables or libxml2 at every start).
LDFLAGS_ALL = $(SAN) -Wl,--as-needed $(LDFLAGS)
# The commands start afresh at every call from a script (sbx-exec above
# all), so the small libraries no shared one of theirs needs again are
# linked in from their archives: the dynamic loader then maps and relocates
# libc (and libarchive's set, for the commands that use it) alone, which
# is 0.1-0.15 ms of each start here.  A library whose archive is not
# installed stays shared.  Not the daemons: they start once a session, and
# libnftables brings libjansson.so.
CMD_STATIC_LIBS = jansson bsd md yaml seccomp
CMD_STATIC := $(foreach l,$(CMD_STATIC_LIBS),$(if $(filter /%,$(shell $(CC) -print-file-name=lib$(l).a)),-l:lib$(l).a))

LIB_SRC = $(wildcard common/*.c)
LIB_OBJ = $(LIB_SRC:common/%.c=$(B)/obj/%.o)
# The daemons are programs of their own (monitor/, proxy/): their objects
# link only into their binary, and nothing in common/ includes their headers.
MON_SRC = $(filter-out monitor/main.c,$(wildcard monitor/*.c))
MON_OBJ = $(MON_SRC:monitor/%.c=$(B)/obj/monitor/%.o)
PROXY_SRC = $(filter-out proxy/main.c,$(wildcard proxy/*.c))
PROXY_OBJ = $(PROXY_SRC:proxy/%.c=$(B)/obj/proxy/%.o)
# sbx-serve (serve/): a command, but a daemon's layout; libmicrohttpd and
# OpenSSL's libcrypto are its own.
SERVE_SRC = $(filter-out serve/main.c,$(wildcard serve/*.c))
SERVE_OBJ = $(SERVE_SRC:serve/%.c=$(B)/obj/serve/%.o)
SERVE_CFLAGS := $(shell pkg-config --cflags libmicrohttpd libcrypto)
SERVE_LIBS := $(shell pkg-config --libs libmicrohttpd libcrypto)
CMDS = sbx-create sbx-exec sbx-ps sbx-kill sbx-gc sbx-cp sbx-audit sbx-snapshot sbx-template sbx-port sbx-oci
# guest-init and sbx-mkcpio beside the helper: its kernel step makes a
# template's initramfs from them.
LIBEXEC = sbx-monitor sbx-proxy sbx-template-helper guest-init sbx-mkcpio
BINS = $(CMDS:%=$(B)/bin/%) $(B)/bin/sbx-serve $(LIBEXEC:%=$(B)/libexec/sbx/%)
UNIT_SRC = $(wildcard tests/unit/*.c)
UNITS = $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
MANS = $(wildcard man/*.[1-8])

all: $(BINS) $(B)/guest-init $(B)/tools/sbx-mkcpio $(B)/tools/sbx-bench-floor $(B)/tools/sbx-audit-append \
	$(B)/tools/sbx-npm-inspect $(UNITS)

$(B)/obj/%.o: common/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(B)/obj/monitor/%.o: monitor/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -Imonitor -c $< -o $@

$(B)/obj/proxy/%.o: proxy/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -Iproxy -c $< -o $@

$(B)/obj/serve/%.o: serve/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(SERVE_CFLAGS) -Iserve -c $< -o $@

$(B)/libsbx.a: $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

$(B)/bin/%: cmd/%.c $(B)/libsbx.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $< $(B)/libsbx.a $(LDFLAGS_ALL) $(CMD_STATIC) $(PKG_LIBS) -o $@

$(B)/libexec/sbx/sbx-monitor: monitor/main.c $(MON_OBJ) $(B)/libsbx.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -Imonitor $< $(MON_OBJ) $(B)/libsbx.a $(LDFLAGS_ALL) $(PKG_LIBS) -o $@

$(B)/bin/sbx-serve: serve/main.c $(SERVE_OBJ) $(B)/libsbx.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(SERVE_CFLAGS) -Iserve $< $(SERVE_OBJ) $(B)/libsbx.a $(LDFLAGS_ALL) $(PKG_LIBS) $(SERVE_LIBS) -o $@

$(B)/libexec/sbx/sbx-proxy: proxy/main.c $(PROXY_OBJ) $(B)/libsbx.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -Iproxy $< $(PROXY_OBJ) $(B)/libsbx.a $(LDFLAGS_ALL) $(PKG_LIBS) -o $@

# The build steps that are other programs' work (tmplbuild.h): lib-image.sh
# and the steps, one script.
$(B)/libexec/sbx/sbx-template-helper: scripts/lib-image.sh scripts/template-helper.sh
	@mkdir -p $(@D)
	{ echo '#!/bin/bash'; cat $^; } >$@.tmp && chmod 0755 $@.tmp && mv $@.tmp $@

$(B)/libexec/sbx/guest-init: $(B)/guest-init
	@mkdir -p $(@D)
	cp $< $@.tmp && mv $@.tmp $@

$(B)/libexec/sbx/sbx-mkcpio: $(B)/tools/sbx-mkcpio
	@mkdir -p $(@D)
	cp $< $@.tmp && mv $@.tmp $@

$(B)/tests/%: tests/unit/%.c $(B)/libsbx.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $< $(B)/libsbx.a $(LDFLAGS_ALL) $(PKG_LIBS) -o $@

# The monitor's request decoder is tested where it lives.
$(B)/tests/test-privmsg: tests/unit/test-privmsg.c $(B)/obj/monitor/privmsg.o $(B)/libsbx.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -Imonitor $< $(B)/obj/monitor/privmsg.o $(B)/libsbx.a $(LDFLAGS_ALL) $(PKG_LIBS) -o $@

# The proxy's parsers (the package cache's, egress.c's, the request head both
# read) are tested where they live.
$(B)/tests/test-pkgcache $(B)/tests/test-egress $(B)/tests/test-http $(B)/tests/test-npmtgz: $(B)/tests/test-%: tests/unit/test-%.c $(PROXY_OBJ) $(B)/libsbx.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -Iproxy $< $(PROXY_OBJ) $(B)/libsbx.a $(LDFLAGS_ALL) $(PKG_LIBS) -o $@

# The apt route's metadata parsers are pure: their test links them alone.
$(B)/tests/test-aptidx: tests/unit/test-aptidx.c $(B)/obj/proxy/aptidx.o $(B)/libsbx.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -Iproxy $< $(B)/obj/proxy/aptidx.o $(B)/libsbx.a $(LDFLAGS_ALL) $(PKG_LIBS) -o $@

# guest-init is PID 1 in the guest: static, no sanitizers, libc only; of
# the library it shares the wire codec and sbx-port's windows.
$(B)/guest-init: $(wildcard guest-init/*.c guest-init/*.h) common/proto.c common/proto.h common/portwin.c \
		common/portwin.h
	@mkdir -p $(@D)
	$(CC) -std=gnu11 -Os -static $(WARN) -D_GNU_SOURCE -Icommon \
		$(filter %.c,$^) -o $@

$(B)/tools/sbx-mkcpio: tools/sbx-mkcpio.c
	@mkdir -p $(@D)
	$(CC) -std=gnu11 $(OPT) $(SAN) $(WARN) -D_GNU_SOURCE $(CFLAGS) $< $(LDFLAGS_ALL) \
		$$(pkg-config --cflags --libs libarchive) -o $@

# The package cache's tarball check alone, for make bench.
$(B)/tools/sbx-npm-inspect: tools/sbx-npm-inspect.c $(B)/obj/proxy/npmtgz.o $(B)/libsbx.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -Iproxy $< $(B)/obj/proxy/npmtgz.o $(B)/libsbx.a $(LDFLAGS_ALL) $(PKG_LIBS) -o $@

$(B)/tools/sbx-bench-floor: tools/sbx-bench-floor.c $(B)/libsbx.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $< $(B)/libsbx.a $(LDFLAGS_ALL) $(PKG_LIBS) -o $@

# Appends events for tests (t0500); not installed.
$(B)/tools/sbx-audit-append: tools/sbx-audit-append.c $(B)/libsbx.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $< $(B)/libsbx.a $(LDFLAGS_ALL) $(PKG_LIBS) -o $@

# The default and python templates (templates/*.yaml), built by
# sbx-template into $(B)/templates, in a state root of their own (locks,
# audit log) so the machine's /var/lib/sbx is not touched.  python needs
# root (debootstrap, apt in a chroot) and the Debian archive the first
# time; both are seconds once the .debs and the bootstrap are cached
# under SBX_CACHE.  The root goes afterwards with the host cgroups the
# build's VM made for it (scripts/lib-root.sh).
TEMPLATE_BUILD = r=$$(mktemp -d /tmp/sbx-tpl.XXXXXX) && mkdir -p $(B)/templates && \
	SBX_ROOT=$$r SBX_TEMPLATES=$(abspath $(B))/templates $(B)/bin/sbx-template build
TEMPLATE_DONE = rc=$$?; SBX_ROOT=$$r bash -c '. scripts/lib-root.sh; root_cgroups_remove'; rm -rf "$$r"; exit $$rc
image: $(BINS)
	$(TEMPLATE_BUILD) default -f templates/default.yaml; $(TEMPLATE_DONE)

python-image: $(BINS)
	$(TEMPLATE_BUILD) python -f templates/python.yaml; $(TEMPLATE_DONE)

# Everything with QEMU, then the VM tests with Cloud Hypervisor (each a
# skip with the reason where it cannot run).
check: all image python-image
	SBX_BUILD=$(abspath $(B)) scripts/check.sh -v --timer

# Sanitizer reports go to files (the monitor's stderr is /dev/null), and any
# report fails the run.  A jailed process (the monitor's unprivileged half,
# the proxy) opens its file before its root is gone (jail.c), so an empty
# file is no report.  The sanitized build is of the host programs alone:
# the guest (guest-init, the kernel) is never sanitized, so the pass boots
# $(B)'s templates (built first where there are none), and runs the QEMU
# backend's pass (Cloud Hypervisor's is its API tests, already run, and
# skips).  The pip- and npm-heavy guest tests are not repeated (their host
# side, the package cache, is under the sanitizers in its unit and fuzz
# tests, and t1450 runs the apt route with real apt under them; t1451 is
# the same route against Debian's archive), nor is CPython's test suite
# in a guest (t1710: minutes of guest time over host code every other
# test covers).  ASAN_EXCLUDE= runs them
# too.
SAN_LOG = $(abspath build-asan)/san
ASAN_EXCLUDE = t0900-python.t t1400-packages.t t1410-pkgcache-bounds.t t1420-npm.t \
	t1431-npm-project.t t1440-npm-scripts.t t1451-apt-debian.t t1710-conformance.t \
	t1720-python-dev.t
asan:
	ls -d $(B)/templates/default@* $(B)/templates/python@* >/dev/null 2>&1 || \
		$(MAKE) image python-image
	rm -rf $(SAN_LOG) && mkdir -p $(SAN_LOG)
	$(MAKE) B=build-asan OPT="-O1 -g -fno-omit-frame-pointer" \
		SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined" all
	ASAN_OPTIONS=log_path=$(SAN_LOG)/asan:detect_leaks=1 \
	UBSAN_OPTIONS=log_path=$(SAN_LOG)/ubsan:print_stacktrace=1 \
	SBX_CHECK_EXCLUDE="$(ASAN_EXCLUDE)" SBX_CHECK_BACKENDS=qemu \
	SBX_BUILD=$(abspath build-asan) SBX_TEMPLATES=$(abspath $(B))/templates \
		scripts/check.sh -v --timer; rc=$$?; \
	if find $(SAN_LOG) -type f -size +0c | grep -q .; then \
		find $(SAN_LOG) -type f -size +0c -exec cat {} +; echo "asan: sanitizer reports above"; exit 1; fi; \
	echo "asan: no sanitizer reports"; exit $$rc

fuzz:
	scripts/fuzz.sh

bench: all image
	SBX_BUILD=$(abspath $(B)) scripts/bench.sh

lint-man:
	mandoc -Tlint -Wwarning $(MANS)

install: $(BINS)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBEXECDIR) $(DESTDIR)$(MANDIR)/man1 \
		$(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man7 $(DESTDIR)$(MANDIR)/man8
	install -m 0755 $(CMDS:%=$(B)/bin/%) $(B)/bin/sbx-serve $(DESTDIR)$(BINDIR)
	install -m 0755 $(LIBEXEC:%=$(B)/libexec/sbx/%) $(DESTDIR)$(LIBEXECDIR)
	for m in $(MANS); do s=$${m##*.}; install -m 0644 $$m $(DESTDIR)$(MANDIR)/man$$s; done
	install -d $(DESTDIR)$(BASHCOMPDIR)
	install -m 0644 completions/sbx.bash $(DESTDIR)$(BASHCOMPDIR)/sbx
	for c in $(sort $(CMDS) sbx-snapshot); do ln -sf sbx $(DESTDIR)$(BASHCOMPDIR)/$$c; done
	install -d $(DESTDIR)$(SYSTEMDDIR)
	sed 's|/usr/local/bin|$(BINDIR)|' systemd/sbx-serve.service >$(DESTDIR)$(SYSTEMDDIR)/sbx-serve.service

clean:
	rm -rf $(B) build-asan build-fuzz

# The C unit tests alone: no root, no images, no VM (each assertion a TAP
# line).
check-unit: $(UNITS)
	SBX_BUILD=$(abspath $(B)) prove -v tests/t0001-unit.t

-include $(wildcard $(B)/obj/*.d $(B)/obj/monitor/*.d $(B)/obj/proxy/*.d $(B)/obj/serve/*.d $(B)/bin/*.d $(B)/libexec/sbx/*.d $(B)/tests/*.d $(B)/tools/*.d)

.PHONY: all image python-image check check-unit asan fuzz bench install clean lint-man
.DELETE_ON_ERROR:
