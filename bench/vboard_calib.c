/*
 * The guest side of bench/vboard_calibration.py (built static on the host, pushed to the board).
 *
 *   vboard_calib spin SECONDS
 *       a CPU-bound loop for SECONDS of wall time; prints "iterations N seconds S"
 *   vboard_calib pairs SETSPEED_FILE TOP_KHZ KHZ SECONDS COUNT
 *       COUNT times: SECONDS of the loop at TOP_KHZ, then SECONDS at KHZ (each written to
 *       SETSPEED_FILE, a userspace governor's scaling_setspeed, first); prints
 *       "pair <iterations/s at TOP_KHZ> <iterations/s at KHZ>" per pair: the two halves of a
 *       pair are a fraction of a second apart, so a host whose speed drifts affects both
 *   vboard_calib periodic PERIOD_US WORK_ITERATIONS COUNT
 *       wakes at absolute deadlines PERIOD_US apart (clock_nanosleep), does WORK_ITERATIONS
 *       of the same loop, COUNT times; prints its pid first ("pid N"), then one line
 *       "lateness_us L" per wake-up: how late it ran after its deadline
 *   vboard_calib util PERIOD_US WORK_ITERATIONS COUNT
 *       the same periodic task, reading its own se.avg.util_avg from /proc/self/task/TID/sched
 *       at each wake-up, before its work (the value the enqueue just updated: the signal's
 *       trough), while a second thread, on CPU 0, reads it 13/16 into each period, the task
 *       asleep (the value its dequeue left: the peak); prints "util TROUGH PEAK" per period.
 *       Their mean is the signal's mean over the period to about 1 % for a task busy an eighth
 *       of it (PELT's 32 ms half-life), at any OPP. The reads add no fork or exec, and the
 *       second one comes while CPU 3 idles: single-threaded TCG runs the vCPUs in turn, so
 *       work on CPU 0 while the task runs would stretch its busy time
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* A few integer operations per iteration that the compiler cannot drop. */
static void work(uint64_t iterations)
{
	uint64_t x = sink;

	for (uint64_t i = 0; i < iterations; i++)
		x = x * 6364136223846793005ull + 1442695040888963407ull;
	sink = x;
}

/* Iterations per second of the loop over @seconds of wall time. */
static double rate(double seconds)
{
	uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9), n = 0, t;

	do {
		work(4096);
		n += 4096;
		t = now_ns();
	} while (t < end);
	return n / ((t - start) / 1e9);
}

static int spin(double seconds)
{
	printf("iterations %.0f seconds %.6f\n", rate(seconds) * seconds, seconds);
	return 0;
}

static int set_khz(const char *path, const char *khz)
{
	FILE *f = fopen(path, "w");

	if (!f || fputs(khz, f) < 0 || fclose(f)) {
		perror(path);
		return -1;
	}
	return 0;
}

static int pairs(const char *path, const char *top, const char *khz, double seconds, int count)
{
	for (int i = 0; i < count; i++) {
		double a, b;

		if (set_khz(path, top))
			return 1;
		a = rate(seconds);
		if (set_khz(path, khz))
			return 1;
		b = rate(seconds);
		printf("pair %.0f %.0f\n", a, b);
	}
	return 0;
}

static int periodic(uint64_t period_us, uint64_t iterations, int count)
{
	struct timespec next;
	uint64_t deadline;

	printf("pid %d\n", getpid());
	fflush(stdout);
	deadline = now_ns() + period_us * 1000;
	for (int i = 0; i < count; i++) {
		next.tv_sec = deadline / 1000000000ull;
		next.tv_nsec = deadline % 1000000000ull;
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL))
			;
		printf("lateness_us %.1f\n", (now_ns() - deadline) / 1e3);
		work(iterations);
		deadline += period_us * 1000;
	}
	return 0;
}

/* se.avg.util_avg from a /proc/.../sched file; -1 if unreadable. */
static long read_util(const char *path)
{
	char line[256];
	long util = -1;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "se.avg.util_avg : %ld", &util) == 1)
			break;
	fclose(f);
	return util;
}

struct util_sampler {
	char path[64];		/* the periodic thread's sched file */
	uint64_t first, period_ns;
	int count;
	long *peaks;
};

static void *sample_peaks(void *arg)
{
	struct util_sampler *u = arg;
	cpu_set_t cpu0;
	struct timespec at;

	CPU_ZERO(&cpu0);
	CPU_SET(0, &cpu0);
	sched_setaffinity(0, sizeof(cpu0), &cpu0);
	for (int i = 0; i < u->count; i++) {
		uint64_t t = u->first + i * u->period_ns + u->period_ns * 13 / 16;

		at.tv_sec = t / 1000000000ull;
		at.tv_nsec = t % 1000000000ull;
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL))
			;
		u->peaks[i] = read_util(u->path);
	}
	return NULL;
}

static int util(uint64_t period_us, uint64_t iterations, int count)
{
	struct util_sampler u = { .period_ns = period_us * 1000, .count = count };
	long *troughs = calloc(count, sizeof(long));
	struct timespec next;
	pthread_t sampler;
	uint64_t deadline;

	if (count <= 0)
		return 2;
	u.peaks = calloc(count, sizeof(long));
	if (!troughs || !u.peaks)
		return 1;
	snprintf(u.path, sizeof(u.path), "/proc/self/task/%d/sched", gettid());
	deadline = u.first = now_ns() + u.period_ns;
	if (pthread_create(&sampler, NULL, sample_peaks, &u))
		return 1;
	for (int i = 0; i < count; i++) {
		next.tv_sec = deadline / 1000000000ull;
		next.tv_nsec = deadline % 1000000000ull;
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL))
			;
		troughs[i] = read_util(u.path);
		work(iterations);
		deadline += u.period_ns;
	}
	pthread_join(sampler, NULL);
	for (int i = 0; i < count; i++)
		printf("util %ld %ld\n", troughs[i], u.peaks[i]);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "spin"))
		return spin(atof(argv[2]));
	if (argc == 7 && !strcmp(argv[1], "pairs"))
		return pairs(argv[2], argv[3], argv[4], atof(argv[5]), atoi(argv[6]));
	if (argc == 5 && !strcmp(argv[1], "periodic"))
		return periodic(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10), atoi(argv[4]));
	if (argc == 5 && !strcmp(argv[1], "util"))
		return util(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10), atoi(argv[4]));
	fprintf(stderr, "usage: %s spin SECONDS | pairs SETSPEED_FILE TOP_KHZ KHZ SECONDS COUNT | "
		"periodic PERIOD_US WORK_ITERATIONS COUNT | util PERIOD_US WORK_ITERATIONS COUNT\n", argv[0]);
	return 2;
}
