/* One grammar for sizes and durations, everywhere a user writes one:
 * policies, sbx.yaml, and the commands' options (sbx-exec --timeout,
 * sbx-gc --grace, ...).  Decimal digits only: no sign, no "0x", no "1_000"
 * and no leading zero (which YAML 1.1 reads as octal). */
#ifndef SBX_UNITS_H
#define SBX_UNITS_H

#include <stddef.h>
#include <stdint.h>

#define KIB 1024ull
#define MIB (KIB * 1024)
#define GIB (MIB * 1024)
#define TIB (GIB * 1024)
#define SEC 1000ull
#define MINUTE (60 * SEC)
#define HOUR (60 * MINUTE)
#define DAY (24 * HOUR)

/* Leading decimal digits of *sp, advancing it past them.  -1 with errno
 * EINVAL (none, or a leading zero) or ERANGE. */
int sbx_parse_digits(const char **sp, uint64_t *out);
/* The whole string as a decimal number. */
int sbx_parse_uint(const char *s, uint64_t *out);
/* The same, at most max (-1 with errno ERANGE past it). */
int sbx_parse_uint_max(const char *s, uint64_t max, uint64_t *out);
/* "512M", "2GiB", "1048576": binary multiples only (K = 1024).  -1 with
 * errno EINVAL (syntax) or ERANGE (overflow). */
int sbx_parse_size(const char *s, uint64_t *out);
/* "500ms", "90s", "5m", "1h", "2d"; a bare number is seconds.  Whole
 * numbers only: "1500ms", not "1.5s". */
int sbx_parse_duration_ms(const char *s, uint64_t *out);
/* "1", "0.05", "2.5": thousandths, so no float reaches the cgroup code. */
int sbx_parse_milli(const char *s, uint64_t *out);
/* v in the largest binary unit that divides it ("512M", "3"). */
void sbx_fmt_size(char *b, size_t n, uint64_t v);
/* ms as a user would write it, in the largest unit that divides it
 * ("1h", "90s", "1500ms"), which sbx_parse_duration_ms reads back. */
void sbx_fmt_duration(char *b, size_t n, uint64_t ms);

#endif
