/* One rank writes an 8 MiB array of 4 KiB pages to a file twice through
 * MPI-IO, and says whether its pages became 2 MiB pages after the first
 * write (the shim collapses the memory of forwarded writes that hold two
 * whole 2 MiB pages or more, unless IOFWD_HUGEPAGES=0 or the program keeps
 * the range off huge pages) and whether the file holds the array.
 *
 *   huge_pages_app FILE WAIT_SECONDS allow|refuse
 *
 * The array is filled with huge pages refused (MADV_NOHUGEPAGE), so that it
 * starts on 4 KiB pages; `allow` then lifts that (MADV_HUGEPAGE, the only
 * way to), `refuse` keeps it. Prints "huge KB", the array's AnonHugePages
 * after the first write (waiting up to WAIT_SECONDS for all of it),
 * "khugepaged N", the pages the kernel's own thread collapsed meanwhile (if
 * not 0, the figure above cannot tell its work from the shim's),
 * "spare-huge-page yes|no", whether the kernel can make a 2 MiB page right
 * after (a collapse of the program's own fails with ENOMEM when memory is
 * too fragmented: then the array's pages rightly stay as they are), and
 * "file ok" or "file differs" after the second write and close. Prints
 * "skip: ..." and exits 0 where the kernel cannot collapse pages. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <mpi.h>

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../support/spare_huge_page.h"

#define HUGE_PAGE ((size_t)2 << 20)
#define LEN ((size_t)8 << 20)

/* AnonHugePages of the mappings that overlap [begin, begin + len), in kB. */
static long huge_kb(const char* begin, size_t len)
{
    FILE* f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    long total = 0;
    int inside = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo = 0, hi = 0;
        long kb = 0;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
            inside = lo < (uintptr_t)(begin + len) && hi > (uintptr_t)begin;
        else if (inside && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
            total += kb;
    }
    fclose(f);
    return total;
}

static long khugepaged_collapsed(void)
{
    FILE* f = fopen("/sys/kernel/mm/transparent_hugepage/khugepaged/pages_collapsed", "r");
    long n = -1;
    if (f) {
        if (fscanf(f, "%ld", &n) != 1)
            n = -1;
        fclose(f);
    }
    return n;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char** argv)
{
    MPI_Init(&argc, &argv);
    if (argc < 4)
        MPI_Abort(MPI_COMM_WORLD, 2);
    const double wait = atof(argv[2]);
    const int allow = strcmp(argv[3], "allow") == 0;
    /* 8 MiB on 2 MiB boundaries, with inaccessible pages on both sides so
     * that no other mapping merges with it. */
    const size_t total = LEN + 3 * HUGE_PAGE;
    char* map = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        MPI_Abort(MPI_COMM_WORLD, 3);
    char* buf = (char*)(((uintptr_t)map + 2 * HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (mprotect(buf, LEN, PROT_READ | PROT_WRITE) != 0)
        MPI_Abort(MPI_COMM_WORLD, 3);
    char thp[128] = "";
    FILE* t = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (t) {
        if (!fgets(thp, sizeof thp, t))
            thp[0] = 0;
        fclose(t);
    }
    if (!t || strstr(thp, "[never]") || madvise(buf, 0, 25 /* MADV_COLLAPSE, Linux 6.1 */) != 0) {
        printf("skip: this kernel has no transparent huge pages or cannot collapse them\n");
        MPI_Finalize();
        return 0;
    }
    madvise(buf, LEN, MADV_NOHUGEPAGE);
    for (size_t i = 0; i < LEN; ++i)
        buf[i] = (char)(i * 7 + i / 4099);
    if (huge_kb(buf, LEN) != 0)
        MPI_Abort(MPI_COMM_WORLD, 4);
    if (allow)
        madvise(buf, LEN, MADV_HUGEPAGE);
    const long by_khugepaged = khugepaged_collapsed();

    MPI_File fh;
    if (MPI_File_open(MPI_COMM_SELF, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL,
                      &fh) != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 5);
    if (MPI_File_write_at(fh, 0, buf, (int)LEN, MPI_BYTE, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 6);
    long kb = huge_kb(buf, LEN);
    for (const double until = now() + wait; kb != (long)(LEN >> 10) && now() < until;
         kb = huge_kb(buf, LEN))
        usleep(20000);
    printf("huge %ld\n", kb);
    printf("khugepaged %ld\n", khugepaged_collapsed() - by_khugepaged);
    printf("spare-huge-page %s\n", spare_huge_page() ? "yes" : "no");
    /* The bytes are the program's, whatever their pages. */
    if (MPI_File_write_at(fh, (MPI_Offset)LEN, buf, (int)LEN, MPI_BYTE, MPI_STATUS_IGNORE) !=
            MPI_SUCCESS ||
        MPI_File_close(&fh) != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 7);
    int ok = 0;
    const int fd = open(argv[1], O_RDONLY);
    char* back = malloc(2 * LEN);
    if (fd >= 0 && back && pread(fd, back, 2 * LEN, 0) == (ssize_t)(2 * LEN))
        ok = memcmp(back, buf, LEN) == 0 && memcmp(back + LEN, buf, LEN) == 0;
    printf("file %s\n", ok ? "ok" : "differs");
    free(back);
    if (fd >= 0)
        close(fd);
    munmap(map, total);
    MPI_Finalize();
    return 0;
}
