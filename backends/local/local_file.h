/* backends/local/local_file.h - the layout of a lock file, which the lock
 * operations (local.c) and the listing (local_list.c) both read. */
#ifndef DLOCK_BACKEND_LOCAL_FILE_H
#define DLOCK_BACKEND_LOCAL_FILE_H

#include <stdint.h>
#include <sys/types.h>

#define HEADER_MAGIC "DLOCKv1\n"
#define HEADER_SIZE 128
#define OWNER_MAX 96

struct lock_file_header {
    char magic[8];
    uint64_t fence;
    int64_t holder_pid;       /* 0 when free */
    char owner[OWNER_MAX];
    uint32_t waiting;         /* waiters watching the file (atomic, no lock) */
    uint32_t permits;         /* a semaphore's number of permits; 0 for a lock */
};

/* Byte ranges: an exclusive hold write-locks bytes 0 to EXCLUSIVE_LEN - 1,
 * which covers HOLD_BYTE and every permit; a shared hold read-locks
 * HOLD_BYTE; a semaphore's permit i is a write lock on SLOT_BASE + i; an
 * exclusive request that finds the lock busy write-locks TURNSTILE_BYTE
 * while it waits (past every permit and outside the exclusive range, so it
 * can while another exclusive hold is on), and a shared request must
 * read-lock it for a moment before it may hold, so readers that come after
 * a waiting writer wait behind it, also when the hold before the writer is
 * downgraded or released. Locks may lie past the end of a file. */
#define HOLD_BYTE 128
#define SLOT_BASE 256
#define TURNSTILE_BYTE ((off_t)1 << 40)
#define EXCLUSIVE_LEN TURNSTILE_BYTE

_Static_assert(sizeof(struct lock_file_header) == HEADER_SIZE, "the header is HEADER_SIZE bytes on disk");
_Static_assert(SLOT_BASE + (off_t)UINT32_MAX < TURNSTILE_BYTE, "every permit lies inside the exclusive range");

/* A name whose file name is the hashed long form (".hlock") cannot be read
 * back from the file name, so its bytes follow the header, to the end of
 * the file, for the listing. */
#define NAME_OFFSET HEADER_SIZE

#endif
