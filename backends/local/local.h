/*
 * backends/local/local.h - the built-in local backend, as the core sees it.
 * It is compiled into libdlock (the default needs no module), and like any
 * module it speaks to the core only through <dlock/provider.h>.
 */
#ifndef DLOCK_BACKEND_LOCAL_H
#define DLOCK_BACKEND_LOCAL_H

#include <dlock/provider.h>
#include <stddef.h>

extern const struct dlock_provider dlock__local_provider;

/* The file name of a lock name in the lock directory: bytes outside
 * [A-Za-z0-9_-] (and a leading '.') as %XX plus ".lock", or a readable start
 * plus a 128-bit hash and ".hlock" when that would exceed 200 bytes. out must
 * hold NAME_MAX + 1 bytes. Never contains '/', never starts with '.'. */
void dlock__local_file_name(const char *name, size_t len, char *out);

/* One page of the lock directory dir (open as dirfd): the names whose lock
 * file is locked or has waiters, in file name order (local_list.c). */
int dlock__local_list(int dirfd, const char *dir, struct dlock_provider_list *req);

#endif
