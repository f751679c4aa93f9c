/* io.h is usable from C: this file is compiled as C and calls every function
 * that needs no daemon. Exits non-zero on any unexpected answer. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "io.h"

int main(void)
{
    char buf[64];
    int failures = 0;
    if (io_write(1) != ENOTCONN) { puts("io_write before io_init: expected ENOTCONN"); ++failures; }
    if (io_finalize() != ENOTCONN) { puts("io_finalize before io_init: expected ENOTCONN"); ++failures; }
    if (io_init(buf, 0, 0, 1, NULL, 1) != EINVAL) { puts("io_init len 0: expected EINVAL"); ++failures; }
    if (strlen(io_last_error()) == 0) { puts("io_last_error empty after a failure"); ++failures; }
    if (strcmp(io_provider_name(), "none") != 0) { puts("provider before init should be none"); ++failures; }
    if (strcmp(io_strerror(0), "success") != 0) { puts("io_strerror(0)"); ++failures; }
    uint64_t v = 0;
    if (io_next_version(&v) != ENOTCONN) { puts("io_next_version before init"); ++failures; }
    double start = 0, durable = 0;
    if (io_flush_span(1, &start, &durable) != ENOTCONN) { puts("io_flush_span before init"); ++failures; }
    printf("%s\n", failures ? "FAILED" : "c api ok");
    return failures;
}
