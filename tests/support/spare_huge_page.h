/* Whether the kernel can make a 2 MiB page right now: a fresh, touched,
 * aligned 2 MiB of the calling process collapsed (MADV_COLLAPSE, Linux 6.1).
 * On memory that is fragmented (a test suite writes gigabytes through the
 * page cache) it may have none to give (ENOMEM); then a buffer's pages
 * rightly stay small, and a test of iofwd's collapse cannot tell. Shared by
 * the C++ integration tests and the shim's C test program. */
#ifndef IOFWD_TESTS_SPARE_HUGE_PAGE_H
#define IOFWD_TESTS_SPARE_HUGE_PAGE_H

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

static inline int spare_huge_page(void)
{
    const size_t huge = (size_t)2 << 20;
    char* map = (char*)mmap(NULL, 2 * huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0);
    if (map == MAP_FAILED)
        return 0;
    char* at = (char*)(((uintptr_t)map + huge - 1) & ~(uintptr_t)(huge - 1));
    memset(at, 1, huge);
    const int made = madvise(at, huge, 25 /* MADV_COLLAPSE */) == 0 || errno != ENOMEM;
    munmap(map, 2 * huge);
    return made;
}

#endif
