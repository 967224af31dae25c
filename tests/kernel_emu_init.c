// SPDX-License-Identifier: GPL-2.0
/*
 * A tiny /init for tests/test_kernel_emulation.py: boots from an initramfs,
 * loads the two platform-emulation modules (parameters from /params, one line
 * per module), writes the knobs listed in /knobs ("PATH VALUE" per line),
 * idles in periods of 0.2, 1.2 and 4 ms (over the 4 ms ones, prints "SLEEPS
 * <count> <runtime_ns> <late_ns>": the runtime the sleeping task was charged
 * from just before each sleep to just after it, and how much longer than
 * asked the sleeps took), sleeps 70 times 4 ms more, printing its PELT
 * signals every tenth time after the first 30 ("PELT <util_avg>
 * <runnable_avg>" from /proc/self/sched: whether the woken task's wait for an
 * exit latency counts as runnable time), runs a 300 ms busy burst, prints
 * every file matching the globs in /dump as "FILE path: content" and powers
 * off. Built with gcc -static by the test. The burst prints how many loop
 * iterations it did ("BURST 1 N"); with /knobs2 (same format as /knobs), those
 * knobs are written after it and a second burst follows ("BURST 2 N"), the
 * emulated speed's counters printed right before and after it ("SPEED BEFORE|AFTER
 * <the debugfs file on one line>").
 *
 * With /trace (one tracefs event per line, e.g. "power/cpu_idle"), the events
 * are recorded from just before the knobs are written to just after the
 * workload, and the workload is metered: every /sys/class/hwmon energy
 * counter is read right before it and right after it, each set of reads
 * bracketed by trace_marker writes METER_START_0 / METER_START_1 (and
 * METER_END_0 / _1) so that the trace shows when they happened; the readings
 * are printed as
 * "METER START|END path value" and the trace text between TRACE_BEGIN and
 * TRACE_END.
 *
 * After the module loads the kernel's console is quieted (a message printed while the init
 * writes a line cuts that line in two); the kernel's log is printed at the end instead, each
 * line as "KMSG <line>", so the test still reads every kernel message, whole.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/klog.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void quiet_console(void)
{
	int fd = open("/proc/sys/kernel/printk", O_WRONLY);
	if (fd < 0 || write(fd, "1", 1) < 0)
		printf("QUIET_FAIL %m\n");
	if (fd >= 0) close(fd);
}

/* the kernel's whole log (klogctl(2) SYSLOG_ACTION_READ_ALL), one "KMSG " line per line */
static void print_kernel_log(void)
{
	static char log[1 << 20];
	int n = klogctl(3, log, sizeof log - 1);
	if (n < 0) { printf("KMSG_FAIL %m\n"); return; }
	log[n] = 0;
	for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n"))
		printf("KMSG %s\n", line);
}

static void load(const char *path, const char *params)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || syscall(SYS_finit_module, fd, params, 0))
		printf("LOAD_FAIL %s %m\n", path);
	else
		printf("LOADED %s %s\n", path, params);
	if (fd >= 0) close(fd);
}

#define TRACEFS "/sys/kernel/tracing"

static void write_file(const char *path, const char *value)
{
	int fd = open(path, O_WRONLY);
	if (fd < 0 || write(fd, value, strlen(value)) < 0)
		printf("WRITE_FAIL %s %m\n", path);
	if (fd >= 0) close(fd);
}

/* "PATH VALUE" lines of @list: write each knob and report the result */
static void write_knobs(const char *list)
{
	char line[512];
	FILE *k = fopen(list, "r");

	while (k && fgets(line, sizeof line, k)) {
		char *sp = strchr(line, ' ');
		if (!sp) continue;
		*sp = 0;
		line[strcspn(sp + 1, "\n") + (sp + 1 - line)] = 0;
		int fd = open(line, O_WRONLY);
		ssize_t n = fd >= 0 ? write(fd, sp + 1, strlen(sp + 1)) : -1;
		printf("KNOB %s %s: %s\n", line, sp + 1, n < 0 ? strerror(errno) : "ok");
		if (fd >= 0) close(fd);
	}
	if (k) fclose(k);
}

/* The emulated speed's counters (lisa_emu_cpufreq's debugfs file) on one line */
static void speed(const char *when)
{
	char buf[2048];
	int fd = open("/sys/kernel/debug/lisa_emu_energy/speed", O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0) close(fd);
	buf[n > 0 ? n : 0] = 0;
	for (char *c = buf; *c; c++) if (*c == '\n') *c = ' ';
	printf("SPEED %s %s\n", when, buf);
}

/* The calling thread's runtime so far, from /proc/thread-self/schedstat; 0 if unreadable. */
static unsigned long long runtime_ns(void)
{
	char buf[128];
	int fd = open("/proc/thread-self/schedstat", O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0) close(fd);
	buf[n > 0 ? n : 0] = 0;
	return strtoull(buf, NULL, 10);
}

/* the calling task's util_avg and runnable_avg, from one read of /proc/self/sched (-1 if absent) */
static void pelt(long *util, long *runnable)
{
	char line[256];
	FILE *f = fopen("/proc/self/sched", "r");

	*util = *runnable = -1;
	while (f && fgets(line, sizeof line, f)) {
		char *colon = strchr(line, ':');

		if (!colon) continue;
		if (strncmp(line, "se.avg.util_avg ", 16) == 0)
			*util = strtol(colon + 1, NULL, 10);
		else if (strncmp(line, "se.avg.runnable_avg ", 20) == 0)
			*runnable = strtol(colon + 1, NULL, 10);
	}
	if (f) fclose(f);
}

static long long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* 300 ms of wall time in a CPU-bound loop; prints the iterations it did */
static void burst(int n)
{
	static volatile unsigned long sink;
	unsigned long iterations = 0, x = sink;
	long long end = now_ns() + 300000000LL;

	do {
		for (int i = 0; i < 1024; i++)
			x = x * 6364136223846793005UL + 1442695040888963407UL;
		iterations += 1024;
	} while (now_ns() < end);
	sink = x;
	printf("BURST %d %lu\n", n, iterations);
}

/*
 * Energy counters into @buf (printed later: no console output inside the
 * window), the reads bracketed by trace markers METER_<when>_0 and _1.
 */
static void read_meter(const char *when, char *buf, size_t size)
{
	glob_t g;
	char marker[64];
	size_t used = strlen(buf);
	if (glob("/sys/class/hwmon/hwmon*/energy*_input", 0, NULL, &g)) {
		snprintf(buf + used, size - used, "METER %s none\n", when);
		return;
	}
	snprintf(marker, sizeof marker, "METER_%s_0", when);
	write_file(TRACEFS "/trace_marker", marker);
	for (size_t i = 0; i < g.gl_pathc; i++) {
		char value[64];
		int fd = open(g.gl_pathv[i], O_RDONLY);
		ssize_t n = fd >= 0 ? read(fd, value, sizeof(value) - 1) : -1;
		if (fd >= 0) close(fd);
		value[n > 0 ? n : 0] = 0;
		value[strcspn(value, "\n")] = 0;
		used = strlen(buf);
		snprintf(buf + used, size - used, "METER %s %s %s\n", when, g.gl_pathv[i], value);
	}
	snprintf(marker, sizeof marker, "METER_%s_1", when);
	write_file(TRACEFS "/trace_marker", marker);
	globfree(&g);
}

static void cat(const char *path)
{
	char buf[65536];
	ssize_t n;
	int fd = open(path, O_RDONLY);
	while (fd >= 0 && (n = read(fd, buf, sizeof buf)) > 0)
		fwrite(buf, 1, n, stdout);
	if (fd >= 0) close(fd);
}

static void dump(const char *pattern)
{
	glob_t g;
	char buf[4096];
	int rc = glob(pattern, 0, NULL, &g);
	if (rc) { printf("NOMATCH %s rc=%d\n", pattern, rc); return; }
	for (size_t i = 0; i < g.gl_pathc; i++) {
		int fd = open(g.gl_pathv[i], O_RDONLY);
		ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
		if (fd >= 0) close(fd);
		if (n < 0) { printf("ERR %s: %m\n", g.gl_pathv[i]); continue; }
		buf[n] = 0;
		for (char *c = buf; *c; c++) if (*c == '\n') *c = ' ';
		printf("FILE %s: %s\n", g.gl_pathv[i], buf);
	}
	globfree(&g);
}

int main(void)
{
	mount("proc", "/proc", "proc", 0, NULL);
	mount("sysfs", "/sys", "sysfs", 0, NULL);
	mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL);
	char p1[256] = "", p2[256] = "";
	FILE *f = fopen("/params", "r");
	if (f) { fgets(p1, sizeof p1, f); fgets(p2, sizeof p2, f); fclose(f); }
	p1[strcspn(p1, "\n")] = 0; p2[strcspn(p2, "\n")] = 0;
	load("/lisa_emu_cpuidle.ko", p1);
	load("/lisa_emu_cpufreq.ko", p2);
	quiet_console();
	char line[512], meter[8192] = "";
	FILE *tr = fopen("/trace", "r");
	int tracing = tr != NULL;
	if (tracing) {
		mount("tracefs", TRACEFS, "tracefs", 0, NULL);
		write_file(TRACEFS "/tracing_on", "0");
		write_file(TRACEFS "/buffer_size_kb", "8192");
		while (fgets(line, sizeof line, tr)) {
			char path[600];
			line[strcspn(line, "\n")] = 0;
			if (!*line) continue;
			snprintf(path, sizeof path, TRACEFS "/events/%s/enable", line);
			write_file(path, "1");
		}
		fclose(tr);
		write_file(TRACEFS "/trace", "");
		write_file(TRACEFS "/tracing_on", "1");
		/*
		 * Visit every CPU (wake it, sleep on it, leave it) so that each has
		 * cpu_idle events before the metered window: a CPU's state before
		 * its first event is otherwise unknown to the trace.
		 */
		cpu_set_t all, one;
		sched_getaffinity(0, sizeof all, &all);
		for (int c = 0; c < CPU_SETSIZE; c++) {
			if (!CPU_ISSET(c, &all)) continue;
			CPU_ZERO(&one);
			CPU_SET(c, &one);
			sched_setaffinity(0, sizeof one, &one);
			usleep(2000);
		}
		sched_setaffinity(0, sizeof all, &all);
	}
	write_knobs("/knobs");
	if (tracing) {
		read_meter("START", meter, sizeof meter);
	}
	/* idle periods of several lengths, then a busy burst */
	unsigned long long charged = 0;
	long long late = 0;
	int sleeps = 0;
	for (int i = 0; i < 300; i++) {
		if (i % 3 < 2) {
			usleep(i % 3 == 0 ? 200 : 1200);
			continue;
		}
		unsigned long long r0 = runtime_ns();
		long long t0 = now_ns();
		usleep(4000);
		late += now_ns() - t0 - 4000000LL;
		charged += runtime_ns() - r0;
		sleeps++;
	}
	printf("SLEEPS %d %llu %lld\n", sleeps, charged, late);
	/* 4 ms sleeps: after 120 ms (four PELT half-lives), the task's signals every 40 ms */
	for (int i = 0; i < 70; i++) {
		usleep(4000);
		if (i >= 30 && i % 10 == 9) {
			long util, runnable;

			pelt(&util, &runnable);
			printf("PELT %ld %ld\n", util, runnable);
		}
	}
	burst(1);
	if (access("/knobs2", R_OK) == 0) {
		write_knobs("/knobs2");
		speed("BEFORE");
		burst(2);
		speed("AFTER");
	}
	usleep(100000);
	if (tracing) {
		read_meter("END", meter, sizeof meter);
		write_file(TRACEFS "/tracing_on", "0");
		fputs(meter, stdout);
	}
	FILE *d = fopen("/dump", "r");
	while (d && fgets(line, sizeof line, d)) {
		line[strcspn(line, "\n")] = 0;
		if (*line) dump(line);
	}
	if (d) fclose(d);
	if (tracing) {
		printf("TRACE_BEGIN\n");
		fflush(stdout);
		cat(TRACEFS "/trace");
		printf("TRACE_END\n");
	}
	print_kernel_log();
	printf("DONE\n");
	fflush(stdout);
	sync();
	reboot(RB_POWER_OFF);
	return 0;
}
