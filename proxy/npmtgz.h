/* Whether npm would run an install script of a package (sbx-policy(5),
 * packages.npm_scripts): from the registry's metadata of one version, and
 * from the tarball itself, which is what npm runs from.  The two can
 * disagree: the registry stores the manifest a publisher sends beside the
 * tarball without comparing them, so a tarball may carry scripts its
 * metadata does not list.  Pure: bytes in, a verdict out (fuzzed:
 * tests/fuzz/fuzz-npmtgz.c). */
#ifndef SBX_NPMTGZ_H
#define SBX_NPMTGZ_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* Bounds of one tarball's inspection: past either, the answer is -1 (the
 * package is refused, not served unchecked). */
#define SBX_NPMTGZ_MAX_BYTES (1ull << 30) /* unpacked */
#define SBX_NPMTGZ_MAX_ENTRIES 200000
#define SBX_NPMTGZ_MANIFEST_MAX (1u << 20) /* package.json */

/* 1 when the version's metadata (one entry of a document's "versions")
 * declares an install script: hasInstallScript (npm's abbreviated
 * metadata), scripts.preinstall, install or postinstall, or gypfile; what
 * in why.  0 when it declares none. */
int sbx_npm_meta_scripts(const json_t *version, char *why, size_t n);

/* The same of a package tarball (gzip'd tar, read from fd's start): 1 when
 * its package.json (npm unpacks the tarball one directory level down, so
 * DIR/package.json) names one of those scripts, or when it has a
 * DIR/binding.gyp (npm then runs node-gyp rebuild); 0 when neither; -1
 * when it cannot tell (not a tarball npm could unpack, a package.json that
 * is not a regular file or not JSON, over the bounds above).  why says
 * which, for a message. */
int sbx_npm_tgz_scripts(int fd, char *why, size_t n);

#endif
