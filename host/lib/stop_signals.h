/*
 * stop_signals.h - the stop signals of the host programs: SIGINT and SIGTERM handed to the
 * program's own handler (which sets its stop flag), SIGPIPE ignored so that a write to a closed
 * socket or pipe fails with EPIPE instead of ending the process.
 *
 * Owns nothing; changes the process's signal dispositions. Call it once, from the main thread,
 * before any other thread starts.
 */
#ifndef EM_STOP_SIGNALS_H
#define EM_STOP_SIGNALS_H

/* Installs on_stop (not NULL; async-signal-safe: it only sets a flag) for SIGINT and SIGTERM,
 * without SA_RESTART, so that a blocking call returns EINTR and the program sees its flag; sets
 * SIGPIPE to be ignored. */
void em_stop_signals_catch(void (*on_stop)(int));

#endif
