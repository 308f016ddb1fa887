/* tests/support/temp_dir.h - a private directory under /tmp for a test
 * program's lock files, made before its cases and removed, with all it
 * holds, after them. */
#ifndef DLOCK_TEST_TEMP_DIR_H
#define DLOCK_TEST_TEMP_DIR_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Makes /tmp/dlock-test-TAG-XXXXXX into dir (size bytes); 0 or -1. */
static inline int temp_dir_make(char *dir, size_t size, const char *tag)
{
    if ((size_t)snprintf(dir, size, "/tmp/dlock-test-%s-XXXXXX", tag) >= size)
        return -1;
    return mkdtemp(dir) ? 0 : -1;
}

/* Removes dir and everything in it (symbolic links are removed, not
 * followed); 0 or -1. */
static inline int temp_dir_remove(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int rc = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
            continue;
        char path[1024];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
            rc |= temp_dir_remove(path);
        else if (unlink(path) != 0)
            rc = -1;
    }
    closedir(d);
    return rmdir(dir) == 0 ? rc : -1;
}

#endif
