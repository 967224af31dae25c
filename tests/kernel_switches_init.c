// SPDX-License-Identifier: GPL-2.0
/*
 * A tiny /init for tests/test_kernel_switches.py: boots the kernel of the
 * ondemand-bursty and idle-gating studies from an initramfs, loads the two
 * platform-emulation modules (parameters from /params, one line per module),
 * prints the files named in /dump ("FILE path: content") and the two runtime
 * switches at their boot defaults, then runs two traced experiments and prints the trace ("T " + line) before powering off:
 *
 * ondemand: ondemand at a 10 ms sampling rate; a task named "bursty" pinned
 *   to CPU 1 runs 40 ms and sleeps 60 ms, 12 times, once with
 *   cpufreq_governor.copy_prev_load=N and once with Y.
 * gating: schedutil; a task named "latsens" pinned to CPU 2 runs 1 ms and
 *   sleeps 5 ms, 150 times, once with idle_gating.comm empty and once with
 *   "latsens"; then CPU 2 idles for 300 ms with the task gone.
 *
 * Phases are delimited by trace_marker lines "PHASE <name>" / "END <name>".
 * Built with gcc -static by the test.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TRACING "/sys/kernel/tracing"

/* From here on only the init writes to the console: a kernel message printed while the init
 * writes a line cuts that line in two (a CI run lost a "FILE" line so), and the module loads,
 * whose messages the tests read, are done. */
static void quiet_console(void)
{
	int fd = open("/proc/sys/kernel/printk", O_WRONLY);
	if (fd < 0 || write(fd, "1", 1) < 0)
		printf("QUIET_FAIL %m\n");
	if (fd >= 0) close(fd);
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

/* write value to every file matching pattern; report each write */
static void knob(const char *pattern, const char *value)
{
	glob_t g;
	if (glob(pattern, 0, NULL, &g)) { printf("NOMATCH %s\n", pattern); return; }
	for (size_t i = 0; i < g.gl_pathc; i++) {
		int fd = open(g.gl_pathv[i], O_WRONLY | O_TRUNC);
		ssize_t n = fd >= 0 ? write(fd, value, strlen(value)) : -1;
		printf("KNOB %s %s: %s\n", g.gl_pathv[i], value, n < 0 ? strerror(errno) : "ok");
		if (fd >= 0) close(fd);
	}
	globfree(&g);
}

static void dump(const char *pattern)
{
	glob_t g;
	char buf[4096];
	if (glob(pattern, 0, NULL, &g)) { printf("NOMATCH %s\n", pattern); return; }
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

static void marker(const char *what, const char *name)
{
	char line[128];
	snprintf(line, sizeof line, "%s %s\n", what, name);
	knob(TRACING "/trace_marker", line);
}

static long long now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* a child named comm, pinned to cpu: busy_us of spinning then sleep_us, cycles times */
static void periodic(const char *comm, int cpu, int busy_us, int sleep_us, int cycles)
{
	pid_t pid = fork();
	if (pid == 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		sched_setaffinity(0, sizeof set, &set);
		prctl(PR_SET_NAME, comm);
		usleep(sleep_us);
		for (int i = 0; i < cycles; i++) {
			long long end = now_ns() + busy_us * 1000LL;
			while (now_ns() < end)
				;
			usleep(sleep_us);
		}
		_exit(0);
	}
	waitpid(pid, NULL, 0);
}

int main(void)
{
	mount("proc", "/proc", "proc", 0, NULL);
	mount("sysfs", "/sys", "sysfs", 0, NULL);
	mount("tracefs", TRACING, "tracefs", 0, NULL);
	char p1[256] = "", p2[256] = "";
	FILE *f = fopen("/params", "r");
	if (f) { fgets(p1, sizeof p1, f); fgets(p2, sizeof p2, f); fclose(f); }
	p1[strcspn(p1, "\n")] = 0; p2[strcspn(p2, "\n")] = 0;
	load("/lisa_emu_cpuidle.ko", p1);
	load("/lisa_emu_cpufreq.ko", p2);
	quiet_console();
	/* the files the test asks for (whether the modules loaded, from sysfs) */
	char wanted[256];
	FILE *d = fopen("/dump", "r");
	while (d && fgets(wanted, sizeof wanted, d)) {
		wanted[strcspn(wanted, "\n")] = 0;
		if (*wanted) dump(wanted);
	}
	if (d) fclose(d);

	/* the switches as booted */
	dump("/sys/module/cpufreq_governor/parameters/copy_prev_load");
	dump("/sys/module/idle_gating/parameters/comm");
	knob("/sys/module/idle_gating/parameters/comm", "a,b,c,d,e");  /* five prefixes: too many */
	knob("/sys/module/idle_gating/parameters/comm", "a-name-longer-than-15");

	knob(TRACING "/buffer_size_kb", "4096");
	knob(TRACING "/events/power/cpu_frequency/filter", "cpu_id == 1");
	knob(TRACING "/events/power/cpu_idle/filter", "cpu_id == 2");
	knob(TRACING "/events/sched/sched_switch/filter",
	     "prev_comm == \"bursty\" || next_comm == \"bursty\" || "
	     "prev_comm == \"latsens\" || next_comm == \"latsens\" || "
	     /* CPU 1 leaving idle: ondemand's kworker often runs before the woken task */
	     "(prev_pid == 0 && CPU == 1)");
	knob(TRACING "/events/power/cpu_frequency/enable", "1");
	knob(TRACING "/events/power/cpu_idle/enable", "1");
	knob(TRACING "/events/sched/sched_switch/enable", "1");
	knob(TRACING "/tracing_on", "1");

	knob("/sys/devices/system/cpu/cpufreq/policy*/scaling_governor", "ondemand");
	knob("/sys/devices/system/cpu/cpufreq/policy*/ondemand/sampling_rate", "10000");
	dump("/sys/devices/system/cpu/cpufreq/policy0/ondemand/*");
	dump("/sys/devices/system/cpu/cpufreq/policy0/scaling_available_frequencies");
	usleep(300000);
	const char *copy[] = {"N", "Y"};
	for (int i = 0; i < 2; i++) {
		char name[64];
		snprintf(name, sizeof name, "ondemand-copy-%s", copy[i]);
		knob("/sys/module/cpufreq_governor/parameters/copy_prev_load", copy[i]);
		marker("PHASE", name);
		periodic("bursty", 1, 40000, 60000, 12);
		marker("END", name);
	}

	knob("/sys/devices/system/cpu/cpufreq/policy*/scaling_governor", "schedutil");
	const char *comm[] = {"", "latsens"};
	for (int i = 0; i < 2; i++) {
		char name[64];
		snprintf(name, sizeof name, "gating-%s", *comm[i] ? "on" : "off");
		knob("/sys/module/idle_gating/parameters/comm", *comm[i] ? comm[i] : "\n");
		dump("/sys/module/idle_gating/parameters/comm");
		marker("PHASE", name);
		periodic("latsens", 2, 1000, 5000, 150);
		marker("AFTER", name);
		usleep(300000);
		marker("END", name);
	}
	knob(TRACING "/tracing_on", "0");
	dump("/sys/devices/system/cpu/cpu2/cpuidle/state*/usage");

	FILE *t = fopen(TRACING "/trace", "r");
	char line[512];
	while (t && fgets(line, sizeof line, t))
		if (line[0] != '#')
			printf("T %s", line);
	if (t) fclose(t);
	printf("DONE\n");
	fflush(stdout);
	sync();
	reboot(RB_POWER_OFF);
	return 0;
}
